//! The types a call of a plan passes between the dispatcher (`exec.rs`), the two backends and the
//! `FusedFn` reports, owned by neither backend: the values of a call, the shapes and dtypes inferred for
//! them, and how each group ran.

use crate::{Arg, Error, Result, Tensor};
use fuse_ir::infer::{infer_dtypes, infer_shapes_with, NodeError};
use fuse_ir::{DType, Graph, GroupKind, NodeId, Op};
use std::sync::{Arc, Mutex};
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

/// The shapes and dtypes one function's calls inferred, by their arguments' shapes, dtypes and scalars: the
/// last [`MEMO_ENTRIES`] kept. A decode step calls each block with the same shapes again and again, and
/// inference allocates a shape for every node (a tenth of a SmolLM2 step's 23,000 allocations on the CPU).
pub(crate) struct InferMemo(Mutex<Vec<(Vec<u64>, Arc<Inferred>)>>);

const MEMO_ENTRIES: usize = 8;

impl InferMemo {
    pub(crate) const fn new() -> InferMemo {
        InferMemo(Mutex::new(Vec::new()))
    }
}

/// What inference reads of the arguments, as one key: each tensor's rank, extents and dtype, each scalar's bits.
fn memo_key(args: &[Value]) -> Vec<u64> {
    let mut key = Vec::with_capacity(args.len() * 6);
    for a in args {
        match a {
            Value::Tensor(t) => {
                key.push(t.rank() as u64);
                key.extend(t.shape().iter().map(|&d| d as u64));
                key.push(t.dtype() as u64);
            }
            Value::Scalar(v) => key.extend([u64::MAX, v.to_bits()]),
        }
    }
    key
}

/// [`infer`], through `memo` where one is given (graph `g` must be the memo's function's). The write-alias
/// check runs every call: it reads the tensors' memory, not their shapes.
pub(crate) fn infer_memo(function: &str, g: &Graph, args: &[Value], memo: Option<&InferMemo>) -> Result<Arc<Inferred>> {
    let Some(memo) = memo else { return infer(function, g, args).map(Arc::new) };
    let key = memo_key(args);
    let lock = || memo.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let hit = lock().iter().find(|(k, _)| *k == key).map(|(_, inferred)| Arc::clone(inferred));
    if let Some(inferred) = hit {
        check_write_aliases(function, g, args)?;
        return Ok(inferred);
    }
    let inferred = Arc::new(infer(function, g, args)?);
    let mut kept = lock();
    if kept.len() >= MEMO_ENTRIES {
        kept.remove(0);
    }
    kept.push((key, Arc::clone(&inferred)));
    Ok(inferred)
}

/// A `slice_set` destination that shares memory with another tensor argument: that argument's readers would
/// see old or new rows depending on the order the groups run in, so the call is refused.
fn check_write_aliases(function: &str, g: &Graph, args: &[Value]) -> Result<()> {
    for id in g.ids().filter(|&id| g.op(id).writes_in_place()) {
        let Some((argument, _)) = g.written_argument(g.node(id).args[0]) else { continue };
        let fuse_ir::Op::Input(k) = g.op(argument) else { continue };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;
    use fuse_ir::{BinaryOp, InputKind};

    /// `x + y` with a scalar `s` beside it (a scalar argument is part of the key).
    fn add_graph() -> Graph {
        let mut g = Graph::new("add");
        let (x, y) = (g.input("x", InputKind::Tensor), g.input("y", InputKind::Tensor));
        let _s = g.input("s", InputKind::Scalar);
        let out = g.binary(BinaryOp::Add, x, y, "x + y");
        g.outputs = vec![out];
        g
    }

    fn args(x: &[usize], y: &[usize], dtype: DType, s: f64) -> Vec<Value> {
        let t = |shape: &[usize]| {
            let n = shape.iter().product();
            Value::Tensor(Tensor::from_vec(vec![1.0f32; n], shape, &Device::Cpu).unwrap().to_dtype(dtype).unwrap())
        };
        vec![t(x), t(y), Value::Scalar(s)]
    }

    /// The memo answers what inference answers for every shape, dtype and scalar seen, old ones too, and a
    /// broadcast error stays an error.
    #[test]
    fn remembered_shapes_are_the_inferred_ones() {
        let g = add_graph();
        let memo = InferMemo::new();
        let calls = [
            args(&[2, 3], &[3], DType::F32, 1.0),
            args(&[4, 5], &[1, 5], DType::F32, 1.0),
            args(&[2, 3], &[3], DType::BF16, 1.0),
            args(&[2, 3], &[3], DType::F32, 2.0),
            args(&[2, 3], &[3], DType::F32, 1.0),
            args(&[7, 1, 3], &[2, 3], DType::F32, 1.0),
        ];
        for round in 0..2 {
            for a in &calls {
                let want = infer("add", &g, a).unwrap();
                let got = infer_memo("add", &g, a, Some(&memo)).unwrap();
                assert_eq!((&got.shapes, &got.dtypes), (&want.shapes, &want.dtypes), "round {round}");
            }
        }
        assert!(infer_memo("add", &g, &args(&[2, 3], &[4], DType::F32, 1.0), Some(&memo)).is_err());
        assert!(memo.0.lock().unwrap().len() <= MEMO_ENTRIES);
    }
}
