//! The reference interpreter against hand-computed values: every op, broadcasting, batched matmul,
//! transposes, the composites, errors, and the lazy-transpose path against the plain one.

use fuse_ir::graph::InputKind;
use fuse_ir::infer::InferError;
use fuse_ir::interp::{eval, eval_all, Array};
use fuse_ir::{BinaryOp, DType, Graph, NodeId, ReduceOp, UnaryOp};
use std::f64::consts::{FRAC_1_SQRT_2, LN_2, SQRT_2};

fn arr(shape: &[usize], data: &[f64]) -> Array {
    Array::new(shape.to_vec(), data.to_vec())
}

/// Same shape, and every value within `tol` relative error (absolute near zero).
fn assert_close(got: &Array, want: &Array, tol: f64) {
    assert_eq!(got.shape, want.shape, "shape");
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        let err = (g - w).abs() / w.abs().max(1.0);
        assert!(err <= tol, "element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}");
    }
}

/// A graph of one op over the given tensor arguments.
fn single(build: impl FnOnce(&mut Graph, &[NodeId]) -> NodeId, args: usize) -> Graph {
    let mut g = Graph::new("single");
    let inputs: Vec<NodeId> = (0..args).map(|k| g.input(&format!("a{k}"), InputKind::Tensor)).collect();
    let out = build(&mut g, &inputs);
    g.outputs = vec![out];
    g
}

fn eval_one(g: &Graph, inputs: &[Array]) -> Array {
    let mut outs = eval(g, inputs).expect("evaluates");
    assert_eq!(outs.len(), 1);
    outs.remove(0)
}

#[test]
fn unary_ops_match_hand_values() {
    let xs = arr(&[3], &[-1.5, 0.25, 2.0]);
    let positive = arr(&[3], &[0.5, 1.25, 4.0]);
    #[rustfmt::skip]
    let cases: [(UnaryOp, &Array, [f64; 3]); 16] = [
        (UnaryOp::Neg, &xs, [1.5, -0.25, -2.0]),
        (UnaryOp::Exp, &xs, [0.22313016014842982, 1.2840254166877414, 7.38905609893065]),
        (UnaryOp::Tanh, &xs, [-0.9051482536448664, 0.24491866240370913, 0.9640275800758169]),
        (UnaryOp::Sigmoid, &xs, [0.18242552380635635, 0.5621765008857981, 0.8807970779778823]),
        (UnaryOp::Silu, &xs, [-0.2736382857095345, 0.14054412522144952, 1.7615941559557646]),
        (UnaryOp::Gelu, &xs, [-0.10021080190328713, 0.14967658142073093, 1.9544997361036416]),
        (UnaryOp::GeluTanh, &xs, [-0.10042842301976707, 0.149675350701685, 1.954597694087775]),
        (UnaryOp::Relu, &xs, [0.0, 0.25, 2.0]),
        (UnaryOp::Abs, &xs, [1.5, 0.25, 2.0]),
        (UnaryOp::Square, &xs, [2.25, 0.0625, 4.0]),
        (UnaryOp::Recip, &xs, [-0.6666666666666666, 4.0, 0.5]),
        (UnaryOp::Sin, &xs, [-0.9974949866040544, 0.24740395925452294, 0.9092974268256817]),
        (UnaryOp::Cos, &xs, [0.0707372016677029, 0.9689124217106447, -0.4161468365471424]),
        (UnaryOp::Log, &positive, [-LN_2, 0.22314355131420976, 1.3862943611198906]),
        (UnaryOp::Sqrt, &positive, [FRAC_1_SQRT_2, 1.118033988749895, 2.0]),
        (UnaryOp::Rsqrt, &positive, [SQRT_2, 0.8944271909999159, 0.5]),
    ];
    for (op, input, want) in cases {
        let g = single(|g, a| g.unary(op, a[0], op.name()), 1);
        let got = eval_one(&g, std::slice::from_ref(input));
        assert_close(&got, &arr(&[3], &want), 1e-12);
    }
}

#[test]
fn binary_ops_match_hand_values() {
    let a = arr(&[3], &[-1.5, 0.25, 2.0]);
    let b = arr(&[3], &[0.5, -2.0, 3.0]);
    #[rustfmt::skip]
    let cases: [(BinaryOp, [f64; 3]); 6] = [
        (BinaryOp::Add, [-1.0, -1.75, 5.0]),
        (BinaryOp::Sub, [-2.0, 2.25, -1.0]),
        (BinaryOp::Mul, [-0.75, -0.5, 6.0]),
        (BinaryOp::Div, [-3.0, -0.125, 0.6666666666666666]),
        (BinaryOp::Maximum, [0.5, 0.25, 3.0]),
        (BinaryOp::Minimum, [-1.5, -2.0, 2.0]),
    ];
    for (op, want) in cases {
        let g = single(|g, x| g.binary(op, x[0], x[1], op.name()), 2);
        assert_close(&eval_one(&g, &[a.clone(), b.clone()]), &arr(&[3], &want), 1e-12);
    }
    // Comparisons: 1 or 0, with equal pairs among them.
    let (p, q) = (arr(&[4], &[1.0, 2.0, 3.0, -0.5]), arr(&[4], &[1.0, 0.0, 3.5, -0.5]));
    #[rustfmt::skip]
    let comparisons: [(BinaryOp, [f64; 4]); 6] = [
        (BinaryOp::Ge, [1.0, 1.0, 0.0, 1.0]),
        (BinaryOp::Gt, [0.0, 1.0, 0.0, 0.0]),
        (BinaryOp::Le, [1.0, 0.0, 1.0, 1.0]),
        (BinaryOp::Lt, [0.0, 0.0, 1.0, 0.0]),
        (BinaryOp::Eq, [1.0, 0.0, 0.0, 1.0]),
        (BinaryOp::Ne, [0.0, 1.0, 1.0, 0.0]),
    ];
    for (op, want) in comparisons {
        let g = single(|g, x| g.binary(op, x[0], x[1], op.name()), 2);
        assert_close(&eval_one(&g, &[p.clone(), q.clone()]), &arr(&[4], &want), 0.0);
    }
    let g = single(|g, x| g.binary(BinaryOp::Pow, x[0], x[1], "powf"), 2);
    let base = arr(&[3], &[0.5, 1.25, 4.0]);
    assert_close(&eval_one(&g, &[base, b]), &arr(&[3], &[FRAC_1_SQRT_2, 0.64, 64.0]), 1e-12);
}

#[test]
fn binary_ops_broadcast_like_numpy() {
    let g = single(|g, x| g.binary(BinaryOp::Add, x[0], x[1], "x + bias"), 2);
    let got = eval_one(&g, &[arr(&[2, 3], &[1., 2., 3., 4., 5., 6.]), arr(&[3], &[10., 20., 30.])]);
    assert_close(&got, &arr(&[2, 3], &[11., 22., 33., 14., 25., 36.]), 0.0);

    let g = single(|g, x| g.binary(BinaryOp::Mul, x[0], x[1], "col * row"), 2);
    let got = eval_one(&g, &[arr(&[2, 1], &[2., 3.]), arr(&[1, 3], &[1., 10., 100.])]);
    assert_close(&got, &arr(&[2, 3], &[2., 20., 200., 3., 30., 300.]), 0.0);

    let g = single(|g, x| g.binary(BinaryOp::Sub, x[0], x[1], "a - b"), 2);
    let got = eval_one(&g, &[arr(&[2, 1, 3], &[1., 2., 3., 4., 5., 6.]), arr(&[2, 1], &[10., 20.])]);
    let want = [-9., -8., -7., -19., -18., -17., -6., -5., -4., -16., -15., -14.];
    assert_close(&got, &arr(&[2, 2, 3], &want), 0.0);
}

#[test]
fn scalars_and_literals_broadcast() {
    let mut g = Graph::new("scaled");
    let x = g.input("x", InputKind::Tensor);
    let s = g.input("s", InputKind::Scalar);
    let two = g.constant(2.0);
    let sq = g.binary(BinaryOp::Pow, x, two, "x.powf(2.0)");
    let out = g.binary(BinaryOp::Div, sq, s, "/ s");
    let cast = g.cast(out, DType::BF16, "to_dtype(bf16)");
    g.outputs = vec![cast];
    let got = eval_one(&g, &[arr(&[1, 3], &[-1.5, 0.25, 3.0]), Array::scalar(0.5)]);
    assert_close(&got, &arr(&[1, 3], &[4.5, 0.125, 18.0]), 1e-15);
}

#[test]
fn reductions_keep_the_last_axis() {
    let x = arr(&[2, 3], &[1., -2., 4., 0.5, 3., -1.]);
    let cases = [
        (ReduceOp::Sum, [3.0, 2.5]),
        (ReduceOp::Mean, [1.0, 0.8333333333333334]),
        (ReduceOp::Max, [4.0, 3.0]),
        (ReduceOp::Min, [-2.0, -1.0]),
    ];
    for (op, want) in cases {
        let g = single(|g, a| g.reduce(op, a[0], op.name()), 1);
        assert_close(&eval_one(&g, std::slice::from_ref(&x)), &arr(&[2, 1], &want), 1e-15);
        let three_d = Array::new(vec![2, 1, 3], x.data.clone());
        assert_close(&eval_one(&g, &[three_d]), &arr(&[2, 1, 1], &want), 1e-15);
    }
}

const A: [f64; 6] = [1., 2., 3., 4., 5., 6.];
const A2: [f64; 6] = [0.5, -1., 2., 3., 0., -2.];
const B: [f64; 6] = [7., 8., 9., 10., 11., 12.];
const B2: [f64; 6] = [1., 0., 0., 1., 1., 1.];

#[test]
fn matmul_2d_and_batched() {
    let g = single(|g, x| g.matmul(x[0], x[1], "a.matmul(b)"), 2);
    let got = eval_one(&g, &[arr(&[2, 3], &A), arr(&[3, 2], &B)]);
    assert_close(&got, &arr(&[2, 2], &[58., 64., 139., 154.]), 0.0);

    let batch = [A, A2].concat();
    let got = eval_one(&g, &[arr(&[2, 2, 3], &batch), arr(&[3, 2], &B)]);
    assert_close(&got, &arr(&[2, 2, 2], &[58., 64., 139., 154., 16.5, 18., -1., 0.]), 0.0);

    let got = eval_one(&g, &[arr(&[2, 2, 3], &batch), arr(&[2, 3, 2], &[B, B2].concat())]);
    assert_close(&got, &arr(&[2, 2, 2], &[58., 64., 139., 154., 2.5, 1., 1., -2.]), 0.0);
}

#[test]
fn matmul_by_a_transposed_weight() {
    let g = single(
        |g, x| {
            let wt = g.transpose(x[1], "w.t()");
            g.matmul(x[0], wt, "x.matmul(w.t())")
        },
        2,
    );
    let w = arr(&[2, 3], &[7., 9., 11., 8., 10., 12.]);
    let inputs = [arr(&[2, 3], &A), w];
    let want = arr(&[2, 2], &[58., 64., 139., 154.]);
    assert_close(&eval_one(&g, &inputs), &want, 0.0);
    // eval_all materialises the view; eval reads the weight in place: both give the same product.
    let all = eval_all(&g, &inputs).expect("evaluates");
    assert_close(&all[2], &arr(&[3, 2], &[7., 8., 9., 10., 11., 12.]), 0.0);
    assert_close(&all[3], &want, 0.0);
}

#[test]
fn transpose_swaps_the_last_two_axes() {
    let g = single(|g, x| g.transpose(x[0], "x.t()"), 1);
    assert_close(&eval_one(&g, &[arr(&[2, 3], &A)]), &arr(&[3, 2], &[1., 4., 2., 5., 3., 6.]), 0.0);
    let x = arr(&[2, 2, 3], &[A, A2].concat());
    let want = [1., 4., 2., 5., 3., 6., 0.5, 3., -1., 0., 2., -2.];
    assert_close(&eval_one(&g, &[x]), &arr(&[2, 3, 2], &want), 0.0);
}

#[test]
fn softmax_rows_are_distributions() {
    let g = single(|g, x| g.softmax(x[0], "softmax(x)"), 1);
    let got = eval_one(&g, &[arr(&[2, 3], &[1., 2., 3., -0.5, 0.5, 0.0])]);
    #[rustfmt::skip]
    let want = [0.09003057317038046, 0.24472847105479764, 0.6652409557748218,
                0.1863237232258476, 0.506480391055654, 0.3071958857184984];
    assert_close(&got, &arr(&[2, 3], &want), 1e-14);
    for row in got.data.chunks(3) {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-14);
    }
}

#[test]
fn rms_norm_matches_its_formula() {
    let mut g = Graph::new("norm");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let eps = g.input("eps", InputKind::Scalar);
    g.outputs = vec![g.rms_norm(x, w, eps, "rms_norm(x, w, eps)")];
    let (rows, cols) = (3, 17);
    let xs: Vec<f64> = (0..rows * cols).map(|i| ((i * 7 % 11) as f64 - 5.0) * 0.3 + 0.1).collect();
    let ws: Vec<f64> = (0..cols).map(|i| 0.5 + i as f64 * 0.05).collect();
    let eps_value = 1e-5;
    let got = eval_one(&g, &[arr(&[rows, cols], &xs), arr(&[cols], &ws), Array::scalar(eps_value)]);
    let mut want = Vec::new();
    for row in xs.chunks(cols) {
        let mean_square = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
        let scale = 1.0 / (mean_square + eps_value).sqrt();
        want.extend(row.iter().zip(&ws).map(|(v, w)| v * scale * w));
    }
    assert_close(&got, &arr(&[rows, cols], &want), 1e-13);
}

#[test]
fn errors_name_the_failing_node() {
    let g = single(|g, x| g.matmul(x[0], x[1], "x.matmul(w)"), 2);
    let err = eval(&g, &[arr(&[2, 3], &A), arr(&[2, 3], &B)]).unwrap_err();
    assert_eq!(err.node, NodeId(2));
    assert_eq!(err.error, InferError::MatMul { lhs: vec![2, 3], rhs: vec![2, 3] });
    let err = eval(&g, &[arr(&[2, 3], &A)]).unwrap_err();
    assert_eq!(err.error, InferError::MissingInput { index: 1 });
}

#[test]
fn outputs_come_back_in_order_even_when_repeated() {
    let mut g = Graph::new("tuple");
    let x = g.input("x", InputKind::Tensor);
    let y = g.unary(UnaryOp::Neg, x, "-x");
    let xt = g.transpose(x, "x.t()");
    g.outputs = vec![y, x, y, xt];
    let input = arr(&[1, 3], &[1.5, -2.0, 0.25]);
    let outs = eval(&g, std::slice::from_ref(&input)).expect("evaluates");
    let neg = arr(&[1, 3], &[-1.5, 2.0, -0.25]);
    assert_eq!(outs, vec![neg.clone(), input, neg, arr(&[3, 1], &[1.5, -2.0, 0.25])]);
}

#[test]
fn empty_tensors_evaluate_to_empty_or_identity_values() {
    let g = single(|g, x| g.transpose(x[0], "x.t()"), 1);
    assert_eq!(eval_one(&g, &[arr(&[0, 3], &[])]), arr(&[3, 0], &[]));
    let g = single(|g, x| g.reduce(ReduceOp::Sum, x[0], "x.sum(-1)"), 1);
    assert_eq!(eval_one(&g, &[arr(&[2, 0], &[])]), arr(&[2, 1], &[0.0, 0.0]));
    let g = single(|g, x| g.matmul(x[0], x[1], "a.matmul(b)"), 2);
    assert_eq!(eval_one(&g, &[arr(&[2, 0], &[]), arr(&[0, 3], &[])]), arr(&[2, 3], &[0.0; 6]));
}

/// `(silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()`.
fn mlp_graph() -> Graph {
    let mut g = Graph::new("mlp");
    let x = g.input("x", InputKind::Tensor);
    let [wg, wu, wd] = ["wg", "wu", "wd"].map(|n| g.input(n, InputKind::Tensor));
    let [wgt, wut, wdt] = [wg, wu, wd].map(|w| g.transpose(w, "w.t()"));
    let gate = g.matmul(x, wgt, "x @ wg.t()");
    let act = g.unary(UnaryOp::Silu, gate, "silu");
    let up = g.matmul(x, wut, "x @ wu.t()");
    let h = g.binary(BinaryOp::Mul, act, up, "h");
    g.outputs = vec![g.matmul(h, wdt, "h @ wd.t()")];
    g
}

fn pseudo_random(n: usize, seed: u64) -> Vec<f64> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect()
}

fn check_mlp(rows: usize, hidden: usize, inter: usize) {
    let g = mlp_graph();
    let x = pseudo_random(rows * hidden, 1);
    let (wg, wu, wd) =
        (pseudo_random(inter * hidden, 2), pseudo_random(inter * hidden, 3), pseudo_random(hidden * inter, 4));
    let inputs = [
        Array::new(vec![rows, hidden], x),
        Array::new(vec![inter, hidden], wg),
        Array::new(vec![inter, hidden], wu),
        Array::new(vec![hidden, inter], wd),
    ];
    let [x, wg, wu, wd] = [0, 1, 2, 3].map(|i| &inputs[i].data);
    let got = eval_one(&g, &inputs);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    let silu = |v: f64| v / (1.0 + (-v).exp());
    // Check a few rows' first outputs directly (the full product would be as slow as the interpreter).
    for r in [0, rows - 1] {
        let xr = &x[r * hidden..][..hidden];
        let h: Vec<f64> = (0..inter)
            .map(|j| silu(dot(xr, &wg[j * hidden..][..hidden])) * dot(xr, &wu[j * hidden..][..hidden]))
            .collect();
        for c in [0, hidden / 2, hidden - 1] {
            let want = dot(&h, &wd[c * inter..][..inter]);
            let err = (got.data[r * hidden + c] - want).abs() / want.abs().max(1e-3);
            assert!(err < 1e-10, "row {r} col {c}: {} vs {want}", got.data[r * hidden + c]);
        }
    }
    if rows * hidden < 1000 {
        let all = eval_all(&g, &inputs).expect("evaluates");
        assert_close(&all[g.outputs[0].index()], &got, 1e-15);
    }
}

#[test]
fn mlp_with_odd_shapes_matches_direct_computation() {
    for (rows, hidden, inter) in [(1, 1, 1), (3, 17, 33), (17, 5, 3)] {
        check_mlp(rows, hidden, inter);
    }
}

/// Llama-3-8B MLP sizes; run with `cargo test --release -p fuse-ir --test interp -- --ignored`.
#[test]
#[ignore = "allocates 1.4 GB of f64 weights; a few seconds in release"]
fn llama_mlp_row_in_release() {
    check_mlp(3, 4096, 14336);
}
