//! The plan's text form: what `#[fuse]` embeds in the user's binary beside the graph text, so that the
//! planner runs at build time and the runtime only reads its decision back. One line per group:
//!
//! ```text
//! dualgemm nodes %4 %5 %6 %7 %8 matmuls %4 %6 prologue inputs %0 %1 %2 outputs %8
//! ```

use super::{Group, GroupKind, Plan};
use crate::graph::{Graph, NodeId};
use std::fmt::Write;

const FIELDS: [&str; 5] = ["nodes", "matmuls", "prologue", "inputs", "outputs"];

impl Plan {
    /// Prints the plan; [`Plan::parse`] reads it back to an equal plan.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for grp in &self.groups {
            s.push_str(grp.kind.name());
            for (field, ids) in FIELDS.iter().zip([&grp.nodes, &grp.matmuls, &grp.prologue, &grp.inputs, &grp.outputs])
            {
                let _ = write!(s, " {field}");
                for id in ids {
                    let _ = write!(s, " %{}", id.0);
                }
            }
            s.push('\n');
        }
        s
    }

    /// Reads the text form back and verifies it against `g` (the graph it was planned from). Errors name
    /// the line.
    pub fn parse(text: &str, g: &Graph) -> Result<Plan, String> {
        let mut groups = Vec::new();
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let at = |e: String| format!("plan line {}: {e}", n + 1);
            let mut words = line.split_whitespace();
            let kind = words.next().unwrap_or_default();
            let kind = GroupKind::ALL
                .into_iter()
                .find(|k| k.name() == kind)
                .ok_or_else(|| at(format!("unknown group kind `{kind}`")))?;
            let mut lists: [Vec<NodeId>; 5] = Default::default();
            let mut field: Option<usize> = None;
            for word in words {
                if let Some(i) = FIELDS.iter().position(|f| *f == word) {
                    if field.is_some_and(|f| f >= i) {
                        return Err(at(format!("`{word}` out of order")));
                    }
                    field = Some(i);
                    continue;
                }
                let list = field.ok_or_else(|| at(format!("`{word}` before any field name")))?;
                let id = word
                    .strip_prefix('%')
                    .and_then(|d| d.parse::<u32>().ok())
                    .filter(|&i| (i as usize) < g.nodes.len())
                    .ok_or_else(|| at(format!("`{word}` is not a node of `{}`", g.name)))?;
                lists[list].push(NodeId(id));
            }
            if field != Some(FIELDS.len() - 1) {
                return Err(at(format!("a group line names the fields {}", FIELDS.join(", "))));
            }
            let [nodes, matmuls, prologue, inputs, outputs] = lists;
            groups.push(Group { kind, nodes, matmuls, prologue, inputs, outputs });
        }
        let plan = Plan { groups };
        plan.verify(g)?;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Graph;
    use crate::plan::Plan;

    const MLP: &str = "fn mlp(x: tensor, w1: tensor, w2: tensor, w3: tensor)\n%0 = input 0\n%1 = input 1\n%2 = input 2\n%3 = input 3\n\
        %4 = matmul %0 %1\n%5 = silu %4\n%6 = matmul %0 %2\n%7 = mul %5 %6\n%8 = matmul %7 %3\n%9 = rsqrt %8\nreturn %9\n";

    #[test]
    fn fused_and_unfused_plans_round_trip() {
        let g = Graph::parse(MLP).unwrap();
        for plan in [Plan::fused(&g), Plan::unfused(&g)] {
            let text = plan.to_text();
            assert_eq!(Plan::parse(&text, &g).unwrap(), plan, "{text}");
        }
        assert!(Plan::fused(&g).to_text().starts_with("dualgemm nodes %4 %5 %6 %7 matmuls %4 %6 prologue inputs"));
    }

    #[test]
    fn bad_text_is_an_error_naming_the_line() {
        let g = Graph::parse(MLP).unwrap();
        let good = Plan::fused(&g).to_text();
        for (bad, says) in [
            ("fancy nodes %4 matmuls prologue inputs outputs %4".to_string(), "line 1: unknown group kind `fancy`"),
            (good.replace("%7", "%70"), "`%70` is not a node"),
            (good.replace(" outputs", ""), "names the fields"),
            (good.replace("matmuls", "inputs"), "out of order"),
            ("gemm %4".to_string(), "before any field name"),
            // Parses, but does not verify: a group computing an argument.
            (good.replacen("nodes %4", "nodes %0 %4", 1), "free node %0"),
        ] {
            let err = Plan::parse(&bad, &g).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }
}
