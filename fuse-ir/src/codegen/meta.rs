//! A kernel's description without its source, as text: what `#[fuse]` emits beside each kernel's source so
//! that the runtime launches the macro's kernels without running the code generator. One line:
//!
//! ```text
//! mlp_k0_dualgemm_silu_mul_skinny pointwise group 0 skinny inputs %0 %1 %2 prologue - outputs %7 nodes %5 %7
//! ```
//! (`prologue F P`: the in-kernel prologue's first slot and primary slot; `-` when there is none.)

use super::{KernelKind, KernelSpec, PrologueSlots, Role};
use crate::graph::NodeId;
use std::borrow::Cow;
use std::fmt::Write;

const ROLES: [Role; 6] = [Role::Whole, Role::Prologue, Role::Epilogue, Role::Skinny, Role::Wgmma, Role::Mma];

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Whole => "whole",
            Role::Prologue => "prologue",
            Role::Epilogue => "epilogue",
            Role::Skinny => "skinny",
            Role::Wgmma => "wgmma",
            Role::Mma => "mma",
        }
    }
}

impl KernelKind {
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Pointwise => "pointwise",
            KernelKind::RowReduce => "rowreduce",
        }
    }
}

fn ids(s: &mut String, field: &str, ids: &[NodeId]) {
    let _ = write!(s, " {field}");
    for id in ids {
        let _ = write!(s, " %{}", id.0);
    }
}

impl KernelSpec {
    /// Everything but the source, on one line; [`KernelSpec::from_meta`] reads it back.
    pub fn meta(&self) -> String {
        let mut s = format!("{} {} group {} {}", self.name, self.kind.name(), self.group, self.role.name());
        ids(&mut s, "inputs", &self.inputs);
        match self.prologue {
            Some(p) => {
                let _ = write!(s, " prologue {} {}", p.first, p.primary);
            }
            None => s.push_str(" prologue -"),
        }
        ids(&mut s, "outputs", &self.outputs);
        ids(&mut s, "nodes", &self.nodes);
        s
    }

    /// The kernel that `meta` describes, with its `source` (a `&'static str` stays borrowed).
    pub fn from_meta(meta: &str, source: Cow<'static, str>) -> Result<KernelSpec, String> {
        let bad = |what: &str| format!("kernel description `{meta}`: {what}");
        let w: Vec<&str> = meta.split_whitespace().collect();
        let [name, kind, "group", group, role, "inputs", rest @ ..] = w.as_slice() else {
            return Err(bad("expected `NAME KIND group N ROLE inputs ...`"));
        };
        let kind = [KernelKind::Pointwise, KernelKind::RowReduce]
            .into_iter()
            .find(|k| k.name() == *kind)
            .ok_or_else(|| bad("unknown kind"))?;
        let role = ROLES.into_iter().find(|r| r.name() == *role).ok_or_else(|| bad("unknown role"))?;
        let group = group.parse().map_err(|_| bad("the group is not a number"))?;
        let node = |s: &&str| s.strip_prefix('%').and_then(|d| d.parse().ok()).map(NodeId);
        let list = |words: &[&str]| {
            words
                .iter()
                .map(|w| node(w).ok_or_else(|| bad(&format!("`{w}` is not a node"))))
                .collect::<Result<Vec<_>, _>>()
        };
        let at = |field: &str, from: usize| {
            rest[from..].iter().position(|w| *w == field).map(|p| p + from).ok_or_else(|| bad(&format!("no `{field}`")))
        };
        let (pro, out) = (at("prologue", 0)?, at("outputs", 0)?);
        let nodes_at = at("nodes", out)?;
        let prologue = match &rest[pro + 1..out] {
            ["-"] => None,
            [first, primary] => Some(PrologueSlots {
                first: first.parse().map_err(|_| bad("prologue slots"))?,
                primary: primary.parse().map_err(|_| bad("prologue slots"))?,
            }),
            _ => return Err(bad("`prologue` takes two slots or `-`")),
        };
        Ok(KernelSpec {
            name: name.to_string(),
            source,
            kind,
            group,
            role,
            inputs: list(&rest[..pro])?,
            prologue,
            outputs: list(&rest[out + 1..nodes_at])?,
            nodes: list(&rest[nodes_at + 1..])?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::plan_kernels;
    use crate::{Graph, Plan};

    #[test]
    fn every_kernel_of_a_plan_round_trips_and_keeps_a_static_source() {
        let text = "fn ffn(x: tensor, n: tensor, wg: tensor, wu: tensor, wd: tensor, eps: scalar)\n%0 = input 0\n%1 = input 1\n\
            %2 = input 2\n%3 = input 3\n%4 = input 4\n%5 = input 5\n%6 = square %0\n%7 = mean %6\n%8 = add %7 %5\n%9 = rsqrt %8\n\
            %10 = mul %0 %9\n%11 = mul %10 %1\n%12 = t %2\n%13 = matmul %11 %12\n%14 = silu %13\n%15 = t %3\n\
            %16 = matmul %11 %15\n%17 = mul %14 %16\n%18 = t %4\n%19 = matmul %17 %18\n%20 = add %0 %19\nreturn %20\n";
        let g = Graph::parse(text).unwrap();
        let specs = plan_kernels(&g, &Plan::fused(&g));
        assert!(specs.iter().any(|s| s.prologue.is_some()), "the skinny kernel runs rms_norm itself");
        static SOURCE: &str = "extern \"C\" __global__ void k() {}";
        for spec in &specs {
            let back = KernelSpec::from_meta(&spec.meta(), Cow::Borrowed(SOURCE)).unwrap();
            assert_eq!(KernelSpec { source: spec.source.clone(), ..back.clone() }, *spec, "{}", spec.meta());
            assert!(matches!(back.source, Cow::Borrowed(s) if std::ptr::eq(s, SOURCE)));
        }
        for bad in [
            "k pointwise group 0 whole",
            "k warp group 0 whole inputs prologue - outputs nodes",
            "k pointwise group 0 whole inputs %x prologue - outputs nodes",
        ] {
            assert!(KernelSpec::from_meta(bad, Cow::Borrowed("")).is_err(), "{bad}");
        }
    }
}
