//! The reference interpreter: the unfused graph evaluated in f64. It is the definition of every op that
//! the fused kernels (CPU and CUDA) are compared against, so it favours being obviously right over speed.

// The interpreter's values live in `array.rs` (views and model ops compute on them too); users find them here.
pub use crate::array::Array;
use crate::graph::{Graph, NodeId};
use crate::infer::{infer_shapes_with, NodeError};
use crate::op::Op;
use std::borrow::Cow;

/// Evaluates the graph's outputs, in order. Inputs: one Array per graph argument (scalars as shape []).
/// Shape errors are the `NodeError` the runtime reports; an `Array` whose data does not fit its shape is
/// a bug in the caller and panics, as in `Array::new`.
pub fn eval(g: &Graph, inputs: &[Array]) -> Result<Vec<Array>, NodeError> {
    let mut values = run(g, inputs, false)?;
    let mut outs = Vec::with_capacity(g.outputs.len());
    for &o in &g.outputs {
        // Every output is kept until the end; `take` the last use of a value returned twice, clone the rest.
        let later_use = g.outputs.iter().skip(outs.len() + 1).any(|&p| p == o);
        let value = if later_use { values[o.index()].clone() } else { values[o.index()].take() };
        outs.push(value.expect("returned values are never dropped nor left as views").into_owned());
    }
    Ok(outs)
}

/// Every node's value (index = node id).
pub fn eval_all(g: &Graph, inputs: &[Array]) -> Result<Vec<Array>, NodeError> {
    let values = run(g, inputs, true)?;
    Ok(values.into_iter().map(|v| v.expect("keep_all stores every value").into_owned()).collect())
}

/// Computes the nodes in order. With `keep_all` false, a value is dropped after its last use and a
/// transpose read only as a matmul's right operand is never copied (the matmul reads its source).
fn run<'a>(g: &Graph, inputs: &'a [Array], keep_all: bool) -> Result<Vec<Option<Cow<'a, Array>>>, NodeError> {
    for (k, a) in inputs.iter().enumerate() {
        assert_eq!(a.data.len(), a.numel(), "argument {k}: {} values for shape {:?}", a.data.len(), a.shape);
    }
    let input_shapes: Vec<Vec<usize>> = inputs.iter().map(|a| a.shape.clone()).collect();
    // A 0-d argument's value may be a size (`x.reshape(&[n, ..])` with `n: usize`).
    let scalars: Vec<Option<f64>> = inputs.iter().map(|a| a.shape.is_empty().then(|| a.data[0])).collect();
    let shapes = infer_shapes_with(g, &input_shapes, &scalars)?;
    let lazy = lazy_transposes(g, keep_all);
    let last_use = last_uses(g, &lazy, keep_all);

    let mut values: Vec<Option<Cow<'a, Array>>> = Vec::with_capacity(g.nodes.len());
    for id in g.ids() {
        let node = g.node(id);
        let arg = |i: usize| -> &Array { value_of(&values, node.args[i]) };
        let shape = shapes[id.index()].clone();
        let value: Option<Cow<'a, Array>> = match node.op {
            // infer_shapes has checked that every argument read exists.
            Op::Input(k) => Some(Cow::Borrowed(&inputs[k as usize])),
            Op::Const(c) => Some(Cow::Owned(Array::scalar(c))),
            Op::Cast(_) => Some(Cow::Owned(arg(0).clone())),
            Op::Unary(u) => {
                let a = arg(0);
                Some(Cow::Owned(Array { shape, data: a.data.iter().map(|&x| u.eval(x)).collect() }))
            }
            Op::Binary(b) => Some(Cow::Owned(broadcast_map(arg(0), arg(1), shape, |x, y| b.eval(x, y)))),
            Op::Where => {
                // Each operand spread to the result's shape, then chosen element by element.
                let spread = |a: &Array| broadcast_map(a, a, shape.clone(), |x, _| x).data;
                let (c, t, f) = (spread(arg(0)), spread(arg(1)), spread(arg(2)));
                let data = c.iter().zip(t.iter().zip(&f)).map(|(&c, (&t, &f))| Op::select(c, t, f)).collect();
                Some(Cow::Owned(Array { shape, data }))
            }
            Op::Reduce(r) => {
                let a = arg(0);
                let row = a.shape.last().copied().unwrap_or(1);
                let data = if row == 0 {
                    vec![r.eval(&[]); shape.iter().product()]
                } else {
                    a.data.chunks(row).map(|chunk| r.eval(chunk)).collect()
                };
                Some(Cow::Owned(Array { shape, data }))
            }
            Op::Model(m) => {
                let args: Vec<&Array> = (0..node.args.len()).map(arg).collect();
                let value = crate::model_op::eval(m, &args, shape).map_err(|error| NodeError { node: id, error })?;
                Some(Cow::Owned(value))
            }
            Op::View(v) => {
                let args: Vec<&Array> = node.args.iter().map(|&a| value_of(&values, a)).collect();
                Some(Cow::Owned(v.eval(&args, shape).map_err(|error| NodeError { node: id, error })?))
            }
            Op::Transpose if lazy[id.index()] => None,
            Op::Transpose => Some(Cow::Owned(transpose(arg(0)))),
            Op::MatMul => {
                let b = node.args[1];
                let product = if lazy[b.index()] {
                    // `a.matmul(w.t())`: w is already the transposed right operand the loop wants.
                    let source = value_of(&values, g.node(b).args[0]);
                    matmul_transposed(arg(0), source, shape)
                } else {
                    matmul_transposed(arg(0), &transpose(arg(1)), shape)
                };
                Some(Cow::Owned(product))
            }
        };
        values.push(value);
        if !keep_all {
            for &a in node.args.iter().chain(lazy_source(g, &lazy, id).iter()) {
                if last_use[a.index()] == Some(id) {
                    values[a.index()] = None;
                }
            }
        }
    }
    Ok(values)
}

fn value_of<'v, 'a>(values: &'v [Option<Cow<'a, Array>>], id: NodeId) -> &'v Array {
    values[id.index()].as_deref().expect("reference interpreter: a value was dropped before its last use")
}

/// For a matmul whose right operand is a lazy transpose, the transpose's source (which the matmul reads).
fn lazy_source(g: &Graph, lazy: &[bool], id: NodeId) -> Option<NodeId> {
    let node = g.node(id);
    (node.op == Op::MatMul && lazy[node.args[1].index()]).then(|| g.node(node.args[1]).args[0])
}

/// Transposes that are only ever a matmul's right operand and not returned: they need no copy.
fn lazy_transposes(g: &Graph, keep_all: bool) -> Vec<bool> {
    let mut lazy: Vec<bool> = g.nodes.iter().map(|n| !keep_all && n.op == Op::Transpose).collect();
    for id in g.ids() {
        let node = g.node(id);
        for (i, &a) in node.args.iter().enumerate() {
            if !(node.op == Op::MatMul && i == 1) {
                lazy[a.index()] = false;
            }
        }
    }
    for &o in &g.outputs {
        lazy[o.index()] = false;
    }
    lazy
}

/// The last node reading each value (`None`: never dropped, because it is returned or `keep_all`).
fn last_uses(g: &Graph, lazy: &[bool], keep_all: bool) -> Vec<Option<NodeId>> {
    let mut last = vec![None; g.nodes.len()];
    if keep_all {
        return last;
    }
    for id in g.ids() {
        for &a in g.node(id).args.iter().chain(lazy_source(g, lazy, id).iter()) {
            last[a.index()] = Some(id);
        }
    }
    for &o in &g.outputs {
        last[o.index()] = None;
    }
    last
}

/// Row-major strides of `shape` read as `out` by numpy broadcasting (0 along broadcast axes).
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; out.len()];
    let mut stride = 1;
    for (i, &dim) in shape.iter().enumerate().rev() {
        let axis = out.len() - shape.len() + i;
        strides[axis] = if dim == 1 { 0 } else { stride };
        stride *= dim;
    }
    strides
}

fn broadcast_map(a: &Array, b: &Array, out_shape: Vec<usize>, f: impl Fn(f64, f64) -> f64) -> Array {
    let (sa, sb) = (broadcast_strides(&a.shape, &out_shape), broadcast_strides(&b.shape, &out_shape));
    let total: usize = out_shape.iter().product();
    let mut data = Vec::with_capacity(total);
    let mut index = vec![0; out_shape.len()];
    let (mut ia, mut ib) = (0, 0);
    for _ in 0..total {
        data.push(f(a.data[ia], b.data[ib]));
        // Advance the multi-index like an odometer, moving both read positions along.
        for axis in (0..out_shape.len()).rev() {
            index[axis] += 1;
            ia += sa[axis];
            ib += sb[axis];
            if index[axis] < out_shape[axis] {
                break;
            }
            index[axis] = 0;
            ia -= sa[axis] * out_shape[axis];
            ib -= sb[axis] * out_shape[axis];
        }
    }
    Array { shape: out_shape, data }
}

/// Swaps the last two axes (rank >= 2, checked by shape inference), copying.
fn transpose(a: &Array) -> Array {
    let r = a.shape.len();
    let (rows, cols) = (a.shape[r - 2], a.shape[r - 1]);
    let mut shape = a.shape.clone();
    shape.swap(r - 2, r - 1);
    let mut data = Vec::with_capacity(a.data.len());
    if data.capacity() == 0 {
        return Array { shape, data };
    }
    for matrix in a.data.chunks(rows * cols) {
        for c in 0..cols {
            data.extend((0..rows).map(|row| matrix[row * cols + c]));
        }
    }
    Array { shape, data }
}

/// `a.matmul(b)` given `bt`, the right operand with its last two axes swapped ([.., n, k]), so the inner
/// loop runs over contiguous k. Shapes were checked by `matmul_shape`: leading axes broadcast.
fn matmul_transposed(a: &Array, bt: &Array, out_shape: Vec<usize>) -> Array {
    let (ra, rb) = (a.shape.len(), bt.shape.len());
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], bt.shape[rb - 2]);
    let batch = &out_shape[..out_shape.len() - 2];
    // Which matrix of each operand a batch reads: broadcast strides in matrices.
    let batch_a = broadcast_strides(&a.shape[..ra - 2], batch);
    let batch_b = broadcast_strides(&bt.shape[..rb - 2], batch);
    let batches: usize = batch.iter().product();
    let mut data = Vec::with_capacity(batches * m * n);
    for index in 0..batches {
        let (mut ia, mut ib, mut rest) = (0, 0, index);
        for axis in (0..batch.len()).rev() {
            let i = rest % batch[axis];
            rest /= batch[axis];
            ia += i * batch_a[axis];
            ib += i * batch_b[axis];
        }
        let (matrix_a, matrix_b) = (&a.data[ia * m * k..][..m * k], &bt.data[ib * n * k..][..n * k]);
        for row in 0..m {
            let a_row = &matrix_a[row * k..(row + 1) * k];
            for col in 0..n {
                let b_col = &matrix_b[col * k..(col + 1) * k];
                data.push(a_row.iter().zip(b_col).map(|(x, y)| x * y).sum());
            }
        }
    }
    Array { shape: out_shape, data }
}
