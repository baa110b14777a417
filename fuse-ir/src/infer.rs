//! Shapes and dtypes of every node, from the shapes and dtypes of the arguments (known only at run time).

// The error type lives in `error.rs` (views and model ops return it too); users find it here.
pub use crate::error::InferError;
use crate::graph::{Graph, NodeId};
use crate::op::{Op, ReduceOp};
use crate::view::ViewOp;
use crate::DType;

/// A node whose shape or dtype cannot be computed, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeError {
    pub node: NodeId,
    pub error: InferError,
}

/// numpy broadcasting of two shapes.
pub fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() { 1 } else { a[i - (rank - a.len())] };
        let db = if i < rank - b.len() { 1 } else { b[i - (rank - b.len())] };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Shape of `a.matmul(b)`: [.., m, k] x [.., k, n] -> [.., m, n] with the leading (batch) axes broadcast
/// (numpy's rule; a 2-D operand is shared by every batch), or `None` if the shapes do not fit.
pub fn matmul_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let (ra, rb) = (a.len(), b.len());
    if ra < 2 || rb < 2 || a[ra - 1] != b[rb - 2] {
        return None;
    }
    let mut s = broadcast(&a[..ra - 2], &b[..rb - 2])?;
    s.extend([a[ra - 2], b[rb - 1]]);
    Some(s)
}

/// Shapes of all nodes, given the arguments' shapes (a scalar argument has shape `[]`). A graph whose view
/// sizes read scalar arguments needs their values: see [`infer_shapes_with`].
pub fn infer_shapes(g: &Graph, inputs: &[Vec<usize>]) -> Result<Vec<Vec<usize>>, NodeError> {
    infer_shapes_with(g, inputs, &[])
}

/// [`infer_shapes`] given also the value of each scalar argument (`None` for tensors), which the sizes of
/// `reshape` and `narrow` may read.
pub fn infer_shapes_with(
    g: &Graph,
    inputs: &[Vec<usize>],
    scalars: &[Option<f64>],
) -> Result<Vec<Vec<usize>>, NodeError> {
    let mut shapes: Vec<Vec<usize>> = Vec::with_capacity(g.nodes.len());
    for id in g.ids() {
        let n = g.node(id);
        let arg = |i: usize| &shapes[n.args[i].index()];
        let err = |error| NodeError { node: id, error };
        let s = match n.op {
            Op::Input(k) => {
                inputs.get(k as usize).cloned().ok_or(err(InferError::MissingInput { index: k as usize }))?
            }
            Op::Const(_) => vec![],
            Op::Unary(_) | Op::Cast(_) => arg(0).clone(),
            Op::Binary(_) => broadcast(arg(0), arg(1))
                .ok_or_else(|| err(InferError::Broadcast { lhs: arg(0).clone(), rhs: arg(1).clone() }))?,
            Op::Where => {
                let values = broadcast(arg(1), arg(2))
                    .ok_or_else(|| err(InferError::Broadcast { lhs: arg(1).clone(), rhs: arg(2).clone() }))?;
                broadcast(arg(0), &values)
                    .ok_or_else(|| err(InferError::Broadcast { lhs: arg(0).clone(), rhs: values.clone() }))?
            }
            Op::Reduce(r) => {
                let mut s = arg(0).clone();
                if matches!(r, ReduceOp::Max | ReduceOp::Min) && s.last() == Some(&0) {
                    return Err(err(InferError::EmptyReduce { op: r.name(), shape: s }));
                }
                match s.last_mut() {
                    Some(last) => *last = 1,
                    None => return Err(err(InferError::Rank { needs: "at least one axis to reduce", shape: s })),
                }
                s
            }
            Op::MatMul => matmul_shape(arg(0), arg(1))
                .ok_or_else(|| err(InferError::MatMul { lhs: arg(0).clone(), rhs: arg(1).clone() }))?,
            Op::Transpose => {
                let mut s = arg(0).clone();
                let r = s.len();
                if r < 2 {
                    return Err(err(InferError::Rank { needs: "at least two axes to transpose", shape: s }));
                }
                s.swap(r - 2, r - 1);
                s
            }
            Op::Model(m) => {
                let args: Vec<&[usize]> = n.args.iter().map(|a| shapes[a.index()].as_slice()).collect();
                let sizes: Vec<Option<f64>> = n.args.iter().map(|&a| size_of(g, a, &shapes, scalars)).collect();
                m.infer_shape(&args, &sizes).map_err(err)?
            }
            Op::View(v) => {
                let arg_shapes: Vec<&[usize]> = n.args.iter().map(|a| shapes[a.index()].as_slice()).collect();
                let sizes: Vec<Option<f64>> = n.args.iter().map(|&a| size_of(g, a, &shapes, scalars)).collect();
                v.infer_shape(&arg_shapes, &sizes).map_err(err)?
            }
        };
        shapes.push(s);
    }
    Ok(shapes)
}

/// The value of a size argument known before anything runs: a literal, a scalar argument's value,
/// `x.dim(i)` (from the shapes inferred so far), or pointwise arithmetic of those (`x.dim(0) * x.dim(1)`).
pub fn size_of(g: &Graph, id: NodeId, shapes: &[Vec<usize>], scalars: &[Option<f64>]) -> Option<f64> {
    match g.op(id) {
        Op::Const(c) => Some(c),
        Op::Input(k) => scalars.get(k as usize).copied().flatten(),
        Op::View(ViewOp::Dim { axis }) => ViewOp::dim_value(axis, shapes.get(g.node(id).args[0].index())?),
        op @ (Op::Unary(_) | Op::Binary(_) | Op::Where) => {
            let args = g.node(id).args.iter().map(|&a| size_of(g, a, shapes, scalars)).collect::<Option<Vec<f64>>>()?;
            op.eval_number(&args)
        }
        _ => None,
    }
}

/// Dtypes of all nodes, given the arguments' dtypes (`None` for scalars, which take the dtype they meet).
/// A node of scalars only stays `None`; it is stored as f32 if it is ever stored.
pub fn infer_dtypes(g: &Graph, inputs: &[Option<DType>]) -> Result<Vec<Option<DType>>, NodeError> {
    let mut dtypes: Vec<Option<DType>> = Vec::with_capacity(g.nodes.len());
    for id in g.ids() {
        let n = g.node(id);
        let arg = |i: usize| dtypes[n.args[i].index()];
        let err = |error| NodeError { node: id, error };
        // Token ids take no arithmetic: every op that computes on its operands' values refuses them.
        let computes =
            (n.op.is_pointwise() && !matches!(n.op, Op::Cast(_))) || matches!(n.op, Op::Reduce(_) | Op::MatMul);
        // Blocks are read by a matmul as its right operand, by the views that leave elements where they are
        // and by a cast (which dequantizes); model ops check their own operands.
        let reads_blocks = |i: usize| match n.op {
            Op::MatMul => i == 1,
            Op::Cast(_) | Op::Transpose | Op::Model(_) => true,
            Op::View(v) => !v.is_copy(),
            _ => false,
        };
        for (i, a) in n.args.iter().enumerate() {
            match dtypes[a.index()] {
                Some(dtype) if dtype.is_quantized() && !reads_blocks(i) => {
                    return Err(err(InferError::Blocks { dtype, op: n.op.name() }))
                }
                Some(dtype) if computes && dtype == DType::U32 => return Err(err(InferError::Integer { dtype })),
                _ => {}
            }
        }
        let d = match n.op {
            Op::Input(k) => *inputs.get(k as usize).ok_or(err(InferError::MissingInput { index: k as usize }))?,
            Op::Const(_) => None,
            Op::Cast(DType::U32) => match arg(0) {
                Some(from) if from.is_float() => return Err(err(InferError::ToInteger { from })),
                _ => Some(DType::U32),
            },
            Op::Cast(to) if to.is_quantized() => return Err(err(InferError::ToBlocks { to })),
            Op::Cast(d) => Some(d),
            Op::Unary(_) | Op::Reduce(_) | Op::Transpose => arg(0),
            Op::View(ViewOp::Dim { .. }) => None,
            Op::View(ViewOp::Cat { .. }) => {
                let mut d = None;
                for &a in &n.args {
                    match (d, dtypes[a.index()]) {
                        (Some(x), Some(y)) if x != y => {
                            return Err(NodeError { node: id, error: InferError::DType { lhs: x, rhs: y } })
                        }
                        (x, y) => d = x.or(y),
                    }
                }
                d
            }
            Op::View(ViewOp::SliceSet { at_tensor: true, .. }) if arg(2).is_some_and(|d| d != DType::U32) => {
                return Err(err(InferError::View(format!(
                    "slice_set: a tensor offset holds u32 positions, not {}",
                    arg(2).unwrap_or(DType::U32)
                ))))
            }
            Op::View(ViewOp::SliceSet { .. }) => match (arg(0), arg(1)) {
                (Some(a), Some(b)) if a != b => return Err(err(InferError::DType { lhs: a, rhs: b })),
                (a, b) => a.or(b),
            },
            Op::View(_) => arg(0),
            // The right operand in blocks: the product is in the left operand's dtype.
            Op::MatMul if arg(1).is_some_and(DType::is_quantized) => arg(0),
            Op::Binary(_) | Op::MatMul => match (arg(0), arg(1)) {
                (Some(a), Some(b)) if a != b => return Err(err(InferError::DType { lhs: a, rhs: b })),
                (a, b) => a.or(b),
            },
            // The condition is read as a number of any dtype; the values must agree.
            Op::Where => match (arg(1), arg(2)) {
                (Some(a), Some(b)) if a != b => return Err(err(InferError::DType { lhs: a, rhs: b })),
                (a, b) => a.or(b),
            },
            Op::Model(m) => {
                let args: Vec<Option<DType>> = n.args.iter().map(|a| dtypes[a.index()]).collect();
                m.infer_dtype(&args).map_err(err)?
            }
        };
        dtypes.push(d);
    }
    Ok(dtypes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::InputKind;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast(&[3, 1], &[4]), Some(vec![3, 4]));
        assert_eq!(broadcast(&[], &[2, 5]), Some(vec![2, 5]));
        assert_eq!(broadcast(&[2, 1, 7], &[5, 1]), Some(vec![2, 5, 7]));
        assert_eq!(broadcast(&[3], &[4]), None);
    }

    #[test]
    fn matmul_shapes() {
        assert_eq!(matmul_shape(&[3, 5], &[5, 7]), Some(vec![3, 7]));
        assert_eq!(matmul_shape(&[2, 3, 5], &[5, 7]), Some(vec![2, 3, 7]));
        assert_eq!(matmul_shape(&[2, 3, 5], &[2, 5, 7]), Some(vec![2, 3, 7]));
        assert_eq!(matmul_shape(&[3, 5], &[4, 7]), None);
        assert_eq!(matmul_shape(&[5], &[5, 7]), None);
        // Leading axes broadcast, on both sides.
        assert_eq!(matmul_shape(&[2, 9, 3, 5], &[2, 9, 5, 7]), Some(vec![2, 9, 3, 7]));
        assert_eq!(matmul_shape(&[2, 1, 3, 5], &[4, 5, 7]), Some(vec![2, 4, 3, 7]));
        assert_eq!(matmul_shape(&[3, 5], &[4, 5, 7]), Some(vec![4, 3, 7]));
        assert_eq!(matmul_shape(&[2, 3, 5], &[4, 5, 7]), None);
    }

    #[test]
    fn infer_reports_the_failing_node() {
        let mut g = Graph::new("f");
        let x = g.input("x", InputKind::Tensor);
        let w = g.input("w", InputKind::Tensor);
        let wt = g.transpose(w, "w.t()");
        let m = g.matmul(x, wt, "x.matmul(w.t())");
        let s = g.reduce(crate::ReduceOp::Sum, m, "m.sum(-1)");
        g.outputs = vec![s];
        let shapes = infer_shapes(&g, &[vec![3, 5], vec![7, 5]]).unwrap();
        assert_eq!(shapes[s.index()], vec![3, 1]);
        let e = infer_shapes(&g, &[vec![3, 5], vec![7, 4]]).unwrap_err();
        assert_eq!(e.node, m);
        let e = infer_dtypes(&g, &[Some(DType::BF16), Some(DType::F32)]).unwrap_err();
        assert_eq!(e.node, m);
        assert_eq!(infer_dtypes(&g, &[Some(DType::F16), Some(DType::F16)]).unwrap()[s.index()], Some(DType::F16));
    }
}
