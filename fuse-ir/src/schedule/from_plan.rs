//! A step's stages from a function's plan: a stage a group that computes, its outputs one value, the
//! function's tensor arguments the values given to the step. A group reads a value through the views over
//! it (a view is read in place, never a stage); it reads the tile of the same index only where it is
//! pointwise work on the value itself, of the value's shape, else all of it. Not yet modelled: a
//! `slice_set`'s write into an argument (its group is taken to write a value of its own).

use super::build::{Reads, Stage, Step};
use crate::graph::Graph;
use crate::plan::{is_free, GroupKind, Plan};
use crate::{DType, NodeId, Op};

/// The stages of `plan` over `g`, with the `shapes` and `dtypes` inferred for a call; `tiles(group,
/// bytes)` says how many tiles group `group`'s output of `bytes` is cut into.
pub fn step_from_plan(
    g: &Graph,
    plan: &Plan,
    shapes: &[Vec<usize>],
    dtypes: &[Option<DType>],
    tiles: impl Fn(usize, usize) -> usize,
) -> Step {
    let bytes = |id: NodeId| -> usize {
        let elements: usize = shapes[id.index()].iter().product();
        let dtype = dtypes[id.index()].unwrap_or(DType::F32);
        dtype.storage_bytes(elements).unwrap_or(elements * dtype.size_bytes())
    };
    // The node a group's input is read from: through views to an argument or a group's output.
    let base = |mut id: NodeId| {
        while is_free(g.op(id)) && !g.op(id).is_leaf() {
            id = g.node(id).args[0];
        }
        id
    };
    let mut step = Step::default();
    let mut value_of: Vec<Option<usize>> = vec![None; g.nodes.len()];
    for (k, group) in plan.groups.iter().enumerate() {
        let value = step.values.len();
        step.values.push((format!("group {k} ({})", group.kind.name()), group.outputs.iter().map(|&o| bytes(o)).sum()));
        for &o in &group.outputs {
            value_of[o.index()] = Some(value);
        }
    }
    for (k, group) in plan.groups.iter().enumerate() {
        let Some(output) = group.outputs.first().and_then(|o| value_of[o.index()]) else { continue };
        let mut inputs: Vec<(usize, Reads)> = Vec::new();
        for &input in &group.inputs {
            let from = base(input);
            let value = match (g.op(from), value_of[from.index()]) {
                (_, Some(v)) => v,
                // A tensor argument: given to the step, a value the first time it is read.
                (Op::Input(_), None) if dtypes[from.index()].is_some() => {
                    step.values.push((g.label_of(from).to_string(), bytes(from)));
                    step.given.push(step.values.len() - 1);
                    value_of[from.index()] = Some(step.values.len() - 1);
                    step.values.len() - 1
                }
                _ => continue, // a literal or a scalar argument
            };
            let same_tile = group.kind == GroupKind::Pointwise
                && from == input
                && group.outputs.len() == 1
                && shapes[input.index()] == shapes[group.outputs[0].index()];
            let reads = if same_tile { Reads::SameTile } else { Reads::Whole };
            if !inputs.contains(&(value, reads)) {
                inputs.push((value, reads));
            }
        }
        // The weights: what its matmuls read as their right operand from the arguments (through views).
        let weight_bytes = group
            .matmuls
            .iter()
            .map(|&m| base(g.node(m).args[1]))
            .filter(|&w| matches!(g.op(w), Op::Input(_)))
            .map(bytes)
            .sum();
        let out_bytes = step.values[output].1;
        let tiles = tiles(k, out_bytes).max(1);
        step.stages.push(Stage { name: format!("group{k}"), output, inputs, tiles, weight_bytes });
    }
    step
}
