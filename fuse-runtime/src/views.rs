//! How both executors resolve a view node (`reshape`, `transpose`, `permute`, `narrow`, `x.dim(i)`) into a
//! strided `Tensor` over its source's storage, with no copy; or, for a `reshape` the strides cannot express,
//! over a dense copy that the executor makes. The eager view ops that build such nodes are in `eager_views.rs`.

use crate::call::Value;
use crate::{Error, Result, Tensor};
use fuse_ir::view::ViewOp;
use fuse_ir::{Graph, NodeId, Op};

/// The value of view node `id` (not `cat`/`contiguous`, which groups compute): a strided view of its
/// source, or a size for `x.dim(i)`. `shapes` are the call's inferred shapes; `resolve` gives the other
/// nodes' values; `dense_copy` makes a dense copy for a reshape that strides cannot express.
pub(crate) fn resolve_view(
    function: &str,
    g: &Graph,
    id: NodeId,
    shapes: &[Vec<usize>],
    resolve: &dyn Fn(NodeId) -> Result<Value>,
    dense_copy: &dyn Fn(&Tensor) -> Result<Tensor>,
) -> Result<Value> {
    let node = g.node(id);
    let Op::View(op) = node.op else { return Err(Error::internal(function, format!("%{} is not a view", id.0))) };
    if let ViewOp::Dim { axis } = op {
        let size = ViewOp::dim_value(axis, &shapes[node.args[0].index()]);
        return size
            .map(Value::Scalar)
            .ok_or_else(|| Error::internal(function, format!("%{}: axis {axis} unchecked", id.0)));
    }
    let source = match resolve(node.args[0])? {
        Value::Tensor(t) => t,
        Value::Scalar(_) => return Err(Error::internal(function, format!("%{} ({}) of a scalar", id.0, op.name()))),
    };
    let mut sizes = vec![None];
    for &a in &node.args[1..] {
        sizes.push(match resolve(a)? {
            Value::Scalar(v) => Some(v),
            Value::Tensor(_) => None,
        });
    }
    let out_shape = &shapes[id.index()];
    if let Some(layout) = op.layout(&source.layout(), out_shape, &sizes) {
        return Ok(Value::Tensor(source.with_layout(layout)));
    }
    if crate::env::debug_level() >= 2 {
        let (shape, strides) = (source.shape(), source.strides());
        eprintln!(
            "fuse: `{function}`: %{} ({}) copies its source ({shape:?}, strides {strides:?}) to reach {out_shape:?}",
            id.0,
            op.name()
        );
    }
    let dense = dense_copy(&source)?;
    op.layout(&dense.layout(), out_shape, &sizes)
        .map(|layout| Value::Tensor(dense.with_layout(layout)))
        .ok_or_else(|| Error::internal(function, format!("%{} ({}) has no layout over a dense copy", id.0, op.name())))
}

/// The value of host scalar `id` (`fuse_ir::plan::host_scalars`): literals, scalar arguments and sizes come
/// from `resolve`, their arithmetic is computed here (in f64, as the reference computes it).
pub(crate) fn host_scalar(
    function: &str,
    g: &Graph,
    id: NodeId,
    resolve: &dyn Fn(NodeId) -> Result<Value>,
) -> Result<f64> {
    match g.op(id) {
        op @ (Op::Unary(_) | Op::Binary(_) | Op::Where) => {
            let args =
                g.node(id).args.iter().map(|&a| host_scalar(function, g, a, resolve)).collect::<Result<Vec<_>>>()?;
            op.eval_number(&args).ok_or_else(|| Error::internal(function, format!("%{} has no value", id.0)))
        }
        _ => match resolve(id)? {
            Value::Scalar(v) => Ok(v),
            Value::Tensor(_) => Err(Error::internal(function, format!("%{} is read as a scalar", id.0))),
        },
    }
}
