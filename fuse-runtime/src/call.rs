//! The types a call of a plan passes between the dispatcher (`exec.rs`), the two backends and the
//! `FusedFn` reports, owned by neither backend: the values of a call, the shapes and dtypes inferred for
//! them, and how each group ran.

use crate::{Arg, Error, Result, Tensor};
use fuse_ir::infer::{infer_dtypes, infer_shapes_with, NodeError};
use fuse_ir::{DType, Graph, GroupKind, NodeId, Op};
use std::time::Duration;

/// A value in the executor: a tensor, or a scalar argument or literal (0-d, no dtype of its own).
#[derive(Clone, Debug)]
pub(crate) enum Value {
    Tensor(Tensor),
    Scalar(f64),
}

impl Value {
    /// The tensor, if this is one.
    pub(crate) fn tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            Value::Scalar(_) => None,
        }
    }
}

/// The arguments as owned values (a clone of each tensor), for the paths that keep them in a value table:
/// a replayed call needs none.
pub(crate) fn values(args: &[Arg<'_>]) -> Vec<Value> {
    args.iter()
        .map(|a| match *a {
            Arg::Tensor(t) => Value::Tensor(t.clone()),
            Arg::Scalar(v) => Value::Scalar(v),
        })
        .collect()
}

/// How one group ran, for FUSE_DEBUG.
pub(crate) struct GroupRun {
    pub index: usize,
    pub kind: GroupKind,
    pub time: Duration,
    /// Why the group ran one op at a time, if it did.
    pub unfused_because: Option<String>,
    /// For a timed call, which way a group with more than one ran: a Gemm/DualGemm group's matmuls (the CPU
    /// GEMM call, or the cuBLAS call form; FUSE_DEBUG>=3 prints it), a rope_append_attention group's launch
    /// or members (FUSE_DEBUG>=2). Only made when `timed`: the fast paths format nothing.
    pub path: Option<String>,
}

/// A matmul operand as the user wrote it, for FUSE_DEBUG: `w_gate`, `self.up.t()`, or `%7` for a value
/// computed in the function.
pub(crate) fn operand_name(g: &Graph, id: NodeId) -> String {
    match g.op(id) {
        Op::Transpose => format!("{}.t()", operand_name(g, g.node(id).args[0])),
        Op::View(v) if fuse_ir::plan::view_source(g, id).is_some() => {
            format!("{}.{}(..)", operand_name(g, g.node(id).args[0]), v.name())
        }
        Op::Input(k) => g.inputs.get(k as usize).map_or_else(|| format!("%{}", id.0), |i| i.name.clone()),
        _ => format!("%{}", id.0),
    }
}

/// The shapes and dtypes of every node for a call's arguments.
pub(crate) struct Inferred {
    pub shapes: Vec<Vec<usize>>,
    pub dtypes: Vec<Option<DType>>,
}

/// Maps an inference failure to the user-facing error naming the function, op and source.
pub(crate) fn node_error(function: &str, g: &Graph, e: NodeError) -> Error {
    Error::Shape {
        function: function.to_string(),
        op: g.op(e.node).name(),
        label: g.label_of(e.node).to_string(),
        error: e.error,
    }
}

pub(crate) fn infer(function: &str, g: &Graph, args: &[Value]) -> Result<Inferred> {
    let shapes: Vec<Vec<usize>> = args
        .iter()
        .map(|a| match a {
            Value::Tensor(t) => t.shape().to_vec(),
            Value::Scalar(_) => Vec::new(),
        })
        .collect();
    let dtypes: Vec<Option<DType>> = args
        .iter()
        .map(|a| match a {
            Value::Tensor(t) => Some(t.dtype()),
            Value::Scalar(_) => None,
        })
        .collect();
    // Scalar arguments may be sizes of views (`x.reshape(&[n, ..])` with `n: usize`).
    let scalars: Vec<Option<f64>> = args
        .iter()
        .map(|a| match a {
            Value::Tensor(_) => None,
            Value::Scalar(v) => Some(*v),
        })
        .collect();
    let shapes = infer_shapes_with(g, &shapes, &scalars).map_err(|e| node_error(function, g, e))?;
    let dtypes = infer_dtypes(g, &dtypes).map_err(|e| node_error(function, g, e))?;
    check_write_aliases(function, g, args)?;
    Ok(Inferred { shapes, dtypes })
}

/// A `slice_set` destination that shares memory with another tensor argument: that argument's readers would
/// see old or new rows depending on the order the groups run in, so the call is refused.
fn check_write_aliases(function: &str, g: &Graph, args: &[Value]) -> Result<()> {
    for id in g.ids().filter(|&id| g.op(id).writes_in_place()) {
        let dest = g.node(id).args[0];
        let fuse_ir::Op::Input(k) = g.op(dest) else { continue };
        let Some(Value::Tensor(written)) = args.get(k as usize) else { continue };
        for (i, arg) in args.iter().enumerate() {
            if let Value::Tensor(other) = arg {
                if i != k as usize && other.shares_memory_with(written) {
                    let (dest, other) = (&g.inputs[k as usize].name, &g.inputs[i].name);
                    return Err(Error::unsupported(
                        function,
                        "slice_set",
                        format!("`{dest}` is written in place and shares its memory with the argument `{other}`, which the call also reads"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The value table of a call before any group runs: each graph input's node holds its argument.
pub(crate) fn input_values(g: &Graph, args: Vec<Value>) -> Vec<Option<Value>> {
    let mut values: Vec<Option<Value>> = vec![None; g.nodes.len()];
    let mut args = args.into_iter().map(Some).collect::<Vec<_>>();
    for id in g.ids() {
        if let Op::Input(k) = g.op(id) {
            values[id.index()] = args.get_mut(k as usize).and_then(Option::take);
        }
    }
    values
}
