//! View and layout ops in the IR: the reference interpreter against hand-computed values, shape errors
//! quoting the op, the text form, batched matmul, and the planner (views add no group; `cat` and
//! `contiguous` are a group each that nothing joins).

use fuse_ir::graph::InputKind;
use fuse_ir::interp::{eval, Array};
use fuse_ir::plan::is_free;
use fuse_ir::view::{reshape_strides, Axes, ViewOp};
use fuse_ir::{BinaryOp, Graph, GroupKind, NodeId, Op, Plan, UnaryOp};

/// 0, 1, 2, .. in `shape`.
fn iota(shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    Array::new(shape.to_vec(), (0..n).map(|i| i as f64).collect())
}

fn one_output(g: &mut Graph, out: NodeId) -> Graph {
    g.outputs = vec![out];
    g.verify().expect("verifies");
    let back = Graph::parse(&g.to_text()).expect("the text form parses");
    assert_eq!(back.to_text(), g.to_text(), "the text form round-trips");
    g.clone()
}

fn run(g: &Graph, inputs: &[Array]) -> Array {
    eval(g, inputs).expect("evaluates").remove(0)
}

#[test]
fn transpose_permute_and_narrow_pick_the_right_elements() {
    let mut g = Graph::new("f");
    let x = g.input("x", InputKind::Tensor);
    let t = g.view(ViewOp::Transpose { a: 0, b: -1 }, &[x], "x.transpose(0, -1)");
    let g = one_output(&mut g, t);
    assert_eq!(run(&g, &[iota(&[2, 1, 3])]), Array::new(vec![3, 1, 2], vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]));

    let mut g = Graph::new("f");
    let x = g.input("x", InputKind::Tensor);
    let p = g.view(ViewOp::Permute(Axes::new(&[1, 2, 0]).unwrap()), &[x], "x.permute(&[1, 2, 0])");
    let g = one_output(&mut g, p);
    let got = run(&g, &[iota(&[2, 2, 3])]);
    assert_eq!(got.shape, vec![2, 3, 2]);
    assert_eq!(got.data[..6], [0.0, 6.0, 1.0, 7.0, 2.0, 8.0]);

    let mut g = Graph::new("f");
    let x = g.input("x", InputKind::Tensor);
    let start = g.input("start", InputKind::Scalar);
    let len = g.constant(2.0);
    let n = g.view(ViewOp::Narrow { axis: 1 }, &[x, start, len], "x.narrow(1, start, 2)");
    let g = one_output(&mut g, n);
    let got = run(&g, &[iota(&[2, 5]), Array::scalar(3.0)]);
    assert_eq!(got, Array::new(vec![2, 2], vec![3.0, 4.0, 8.0, 9.0]));
    let e = eval(&g, &[iota(&[2, 5]), Array::scalar(4.0)]).unwrap_err();
    assert!(e.error.to_string().contains("start 4 + length 2 is past the end of axis 1 (size 5)"), "{}", e.error);
}

#[test]
fn reshape_reads_sizes_from_literals_parameters_and_dims() {
    let mut g = Graph::new("f");
    let x = g.input("x", InputKind::Tensor);
    let heads = g.input("heads", InputKind::Scalar);
    let rows = g.view(ViewOp::Dim { axis: 0 }, &[x], "x.dim(0)");
    let minus_one = g.constant(-1.0);
    let r = g.view(ViewOp::Reshape { rank: 3 }, &[x, rows, heads, minus_one], "x.reshape(&[x.dim(0), heads, -1])");
    let g = one_output(&mut g, r);
    let got = run(&g, &[iota(&[3, 12]), Array::scalar(4.0)]);
    assert_eq!(got.shape, vec![3, 4, 3]);
    assert_eq!(got.data, iota(&[36]).data);
    let e = eval(&g, &[iota(&[3, 12]), Array::scalar(5.0)]).unwrap_err();
    assert!(e.error.to_string().contains("no size for -1"), "{}", e.error);
    let e = eval(&g, &[iota(&[3, 12]), Array::scalar(1.5)]).unwrap_err();
    assert!(e.error.to_string().contains("non-negative integer"), "{}", e.error);
}

#[test]
fn cat_and_contiguous_copy() {
    let mut g = Graph::new("f");
    let a = g.input("a", InputKind::Tensor);
    let b = g.input("b", InputKind::Tensor);
    let c = g.view(ViewOp::Cat { axis: -1, parts: 2 }, &[a, b], "cat(&[&a, &b], -1)");
    let d = g.view(ViewOp::Contiguous, &[c], "c.contiguous()");
    let g = one_output(&mut g, d);
    let got = run(&g, &[iota(&[2, 1]), iota(&[2, 3])]);
    assert_eq!(got, Array::new(vec![2, 4], vec![0.0, 0.0, 1.0, 2.0, 1.0, 3.0, 4.0, 5.0]));
    let e = eval(&g, &[iota(&[2, 1]), iota(&[3, 3])]).unwrap_err();
    assert!(e.error.to_string().contains("differ on another axis"), "{}", e.error);
}

#[test]
fn matmul_broadcasts_leading_axes_on_both_sides() {
    let mut g = Graph::new("f");
    let a = g.input("a", InputKind::Tensor);
    let b = g.input("b", InputKind::Tensor);
    let m = g.matmul(a, b, "a.matmul(b)");
    let g = one_output(&mut g, m);
    // [2, 1, 1, 2] x [3, 2, 1]: batch [2, 3]; b's batch k holds [[k, ..]], a's batch i holds [[2i, 2i+1]].
    let got = run(&g, &[iota(&[2, 1, 1, 2]), iota(&[3, 2, 1])]);
    assert_eq!(got.shape, vec![2, 3, 1, 1]);
    let want: Vec<f64> = (0..2)
        .flat_map(|i| (0..3).map(move |k| (2 * i) as f64 * (2 * k) as f64 + (2 * i + 1) as f64 * (2 * k + 1) as f64))
        .collect();
    assert_eq!(got.data, want);
}

#[test]
fn every_view_op_prints_and_parses() {
    let text = "fn f(x: tensor, n: scalar)\n%0 = input 0 ; \"x\"\n%1 = input 1 ; \"n\"\n%2 = dim -1 %0\n\
        %3 = reshape %0 %1 %2\n%4 = transpose 0 -1 %3\n%5 = permute 1 0 %4\n%6 = const 1.0\n%7 = narrow 0 %5 %6 %6\n\
        %8 = cat 1 %5 %7 %5\n%9 = contiguous %8\nreturn %9\n";
    let g = Graph::parse(text).expect("parses");
    assert_eq!(g.to_text(), text);
    assert_eq!(g.op(NodeId(8)), Op::View(ViewOp::Cat { axis: 1, parts: 3 }));
    for bad in ["%3 = reshape 2 %0 %1", "%3 = transpose 0 %0", "%3 = narrow 0 %0 %1", "%3 = permute 0 9 %0"] {
        let text =
            format!("fn f(x: tensor, n: scalar)\n%0 = input 0\n%1 = input 1\n%2 = const 1.0\n{bad}\nreturn %3\n");
        assert!(Graph::parse(&text).is_err(), "accepted {bad}");
    }
}

/// `q [b, s, h*d] -> [b, h, s, d]`, `k` likewise, then `q.matmul(k^T)` scaled and softmaxed: the views
/// add no group.
#[test]
fn views_feeding_matmuls_add_no_group() {
    let mut g = Graph::new("heads");
    let q = g.input("q", InputKind::Tensor);
    let k = g.input("k", InputKind::Tensor);
    let heads = g.input("heads", InputKind::Scalar);
    let per = g.input("d", InputKind::Scalar);
    let split = |g: &mut Graph, x: NodeId, name: &str| {
        let (b, s) = (g.view(ViewOp::Dim { axis: 0 }, &[x], "dim"), g.view(ViewOp::Dim { axis: 1 }, &[x], "dim"));
        let r = g.view(ViewOp::Reshape { rank: 4 }, &[x, b, s, heads, per], &format!("{name}.reshape(..)"));
        g.view(ViewOp::Transpose { a: 1, b: 2 }, &[r], &format!("{name}.transpose(1, 2)"))
    };
    let (qh, kh) = (split(&mut g, q, "q"), split(&mut g, k, "k"));
    let kt = g.view(ViewOp::Transpose { a: -2, b: -1 }, &[kh], "k.transpose(-2, -1)");
    let scores = g.matmul(qh, kt, "q.matmul(kt)");
    let s = g.softmax(scores, "softmax(scores)");
    g.outputs = vec![s];
    let plan = Plan::fused(&g);
    plan.verify(&g).expect("verifies");
    assert_eq!(
        plan.groups.iter().map(|grp| grp.kind).collect::<Vec<_>>(),
        [GroupKind::Gemm, GroupKind::RowReduce],
        "{plan}"
    );
    assert_eq!(Plan::unfused(&g).groups.len(), 1 + 5, "{}", Plan::unfused(&g));
    assert!(g.ids().filter(|&id| matches!(g.op(id), Op::View(_))).all(|id| is_free(g.op(id))));
    // The reference runs it: [1, 3, 4] -> 2 heads of 2.
    let out = run(&g, &[iota(&[1, 3, 4]), iota(&[1, 3, 4]), Array::scalar(2.0), Array::scalar(2.0)]);
    assert_eq!(out.shape, vec![1, 2, 3, 3]);
}

/// A pointwise group reads a narrowed and permuted view through strides, with no copy in between; `cat`
/// and `contiguous` are groups of their own that pointwise work neither joins nor absorbs.
#[test]
fn copies_are_groups_of_their_own() {
    let mut g = Graph::new("f");
    let x = g.input("x", InputKind::Tensor);
    let y = g.input("y", InputKind::Tensor);
    let e = g.unary(UnaryOp::Exp, x, "exp(x)");
    let c = g.view(ViewOp::Contiguous, &[e], "e.contiguous()");
    let t = g.unary(UnaryOp::Tanh, c, "tanh(c)");
    let one = g.constant(1.0);
    let n = g.view(ViewOp::Narrow { axis: 0 }, &[y, one, one], "y.narrow(0, 1, 1)");
    let p = g.view(ViewOp::Permute(Axes::new(&[1, 0]).unwrap()), &[n], "n.permute(&[1, 0])");
    let s = g.binary(BinaryOp::Add, t, p, "t + p");
    let cat = g.view(ViewOp::Cat { axis: 0, parts: 2 }, &[s, s], "cat(&[&s, &s], 0)");
    let out = g.unary(UnaryOp::Neg, cat, "-cat");
    g.outputs = vec![out];
    let plan = Plan::fused(&g);
    plan.verify(&g).expect("verifies");
    // exp | contiguous | tanh + add (reading the view) | cat | neg
    let groups: Vec<usize> = plan.groups.iter().map(|grp| grp.nodes.len()).collect();
    assert_eq!(groups, [1, 1, 2, 1, 1], "{plan}");
    assert!(plan.groups[2].inputs.contains(&p), "the add reads the view itself: {plan}");
    let got = run(&g, &[Array::new(vec![2, 1], vec![0.0, 1.0]), iota(&[3, 2])]);
    assert_eq!(got.shape, vec![4, 1]);
}

#[test]
fn reshape_strides_split_and_merge_when_the_memory_allows() {
    // Dense: any reshape is a view.
    assert_eq!(reshape_strides(&[6, 4], &[4, 1], &[2, 3, 4]), Some(vec![12, 4, 1]));
    // A transposed matrix can split its axes but not merge them.
    assert_eq!(reshape_strides(&[4, 6], &[1, 4], &[2, 2, 6]), Some(vec![2, 1, 4]));
    assert_eq!(reshape_strides(&[4, 6], &[1, 4], &[24]), None);
    // Narrowed rows: the row axis may split, the row and column axes may not merge.
    assert_eq!(reshape_strides(&[4, 3], &[8, 1], &[2, 2, 3]), Some(vec![16, 8, 1]));
    assert_eq!(reshape_strides(&[4, 3], &[8, 1], &[12]), None);
    // Axes of size 1 come and go freely.
    assert_eq!(reshape_strides(&[3, 1, 5], &[5, 99, 1], &[1, 15, 1]), Some(vec![15, 1, 1]));
    assert_eq!(reshape_strides(&[0, 3], &[3, 1], &[3, 0]), Some(vec![0, 1]));
}

#[test]
fn shapes_and_errors() {
    let s = |op: ViewOp, shapes: &[&[usize]], sizes: &[Option<f64>]| op.infer_shape(shapes, sizes);
    assert_eq!(s(ViewOp::Reshape { rank: 2 }, &[&[2, 3, 4], &[], &[]], &[None, Some(-1.0), Some(4.0)]), Ok(vec![6, 4]));
    assert!(s(ViewOp::Reshape { rank: 1 }, &[&[2, 3], &[]], &[None, Some(5.0)])
        .unwrap_err()
        .to_string()
        .contains("6 elements"));
    assert_eq!(s(ViewOp::Transpose { a: 0, b: -1 }, &[&[2, 3, 4]], &[]), Ok(vec![4, 3, 2]));
    assert!(s(ViewOp::Transpose { a: 0, b: 3 }, &[&[2, 3, 4]], &[]).is_err());
    let p = ViewOp::Permute(Axes::new(&[2, 0, 1]).unwrap());
    assert_eq!(s(p, &[&[2, 3, 4]], &[]), Ok(vec![4, 2, 3]));
    assert!(s(ViewOp::Permute(Axes::new(&[0, 0, 1]).unwrap()), &[&[2, 3, 4]], &[]).is_err());
    let n = ViewOp::Narrow { axis: -1 };
    assert_eq!(s(n, &[&[2, 7], &[], &[]], &[None, Some(2.0), Some(5.0)]), Ok(vec![2, 5]));
    assert!(s(n, &[&[2, 7], &[], &[]], &[None, Some(3.0), Some(5.0)])
        .unwrap_err()
        .to_string()
        .contains("past the end"));
    let c = ViewOp::Cat { axis: 1, parts: 2 };
    assert_eq!(s(c, &[&[2, 3], &[2, 5]], &[]), Ok(vec![2, 8]));
    assert!(s(c, &[&[2, 3], &[3, 5]], &[]).is_err());
}

#[test]
fn text_parameters_round_trip() {
    let ops = [
        ViewOp::Reshape { rank: 3 },
        ViewOp::Transpose { a: 1, b: -2 },
        ViewOp::Permute(Axes::new(&[3, 1, 0, 2]).unwrap()),
        ViewOp::Narrow { axis: -1 },
        ViewOp::Cat { axis: 0, parts: 3 },
        ViewOp::Contiguous,
        ViewOp::Dim { axis: 2 },
    ];
    for op in ops {
        let params = op.params();
        let words: Vec<&str> = params.iter().map(String::as_str).collect();
        assert_eq!(ViewOp::parse(op.name(), &words, op.arity()), Some(op));
    }
    assert_eq!(ViewOp::parse("narrow", &["0"], 2), None);
    assert_eq!(ViewOp::parse("transpose", &["0"], 1), None);
}
