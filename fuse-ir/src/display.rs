//! `Display` for the graph and the plan, so that `println!("{graph}")` shows the text form (the same as
//! `Graph::to_text`) and `println!("{plan}")` one line per group, not node ids in `Debug` form.

use crate::graph::Graph;
use crate::plan::Plan;
use std::fmt;

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

impl fmt::Display for Plan {
    /// `k0 dualgemm: computes %4 %5 %6 %7 (matmuls %4 %6); reads %0 %1 %2; writes %7`, one line per group.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids = |v: &[crate::graph::NodeId]| v.iter().map(|n| format!("%{}", n.0)).collect::<Vec<_>>().join(" ");
        for (i, grp) in self.groups.iter().enumerate() {
            write!(f, "k{i} {}: computes {}", grp.kind.name(), ids(&grp.nodes))?;
            if !grp.matmuls.is_empty() {
                write!(f, " (matmuls {})", ids(&grp.matmuls))?;
            }
            if !grp.prologue.is_empty() {
                write!(f, " (prologue {})", ids(&grp.prologue))?;
            }
            writeln!(f, "; reads {}; writes {}", ids(&grp.inputs), ids(&grp.outputs))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Graph, Plan};

    #[test]
    fn graph_and_plan_print_readably() {
        let text =
            "fn f(x: tensor, w: tensor)\n%0 = input 0\n%1 = input 1\n%2 = matmul %0 %1\n%3 = silu %2\nreturn %3\n";
        let g = Graph::parse(text).unwrap();
        assert_eq!(g.to_string(), g.to_text());
        assert_eq!(Plan::fused(&g).to_string(), "k0 gemm: computes %2 %3 (matmuls %2); reads %0 %1; writes %3\n");
    }

    #[test]
    fn the_description_speaks_of_the_backend_that_runs_it() {
        use crate::plan::{describe_for, Backend};
        let text = "fn f(x: tensor)\n%0 = input 0\n%1 = exp %0\n%2 = sum %1\nreturn %2\n";
        let g = Graph::parse(text).unwrap();
        let shapes = [vec![3, 5], vec![3, 5], vec![3, 1]];
        let dtypes = [None, None, None];
        let gpu = describe_for(&g, &Plan::fused(&g), Some((&shapes, &dtypes)), Backend::Gpu);
        let cpu = describe_for(&g, &Plan::fused(&g), Some((&shapes, &dtypes)), Backend::Cpu);
        assert!(
            gpu.contains("on chip, saving 120 bytes")
                && gpu.contains("total: 1 kernels for f (2 unfused, 1 launches saved)"),
            "{gpu}"
        );
        assert!(
            cpu.contains("in registers and cache, saving 120 bytes")
                && cpu.contains("total: 1 passes for f (2 unfused, 1 passes over memory saved)"),
            "{cpu}"
        );
        assert!(!cpu.contains("kernel") && !cpu.contains("launch") && !cpu.contains("chip"), "{cpu}");
    }
}
