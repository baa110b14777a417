//! Tracer tests for the view and layout calls: the graph each gives, and the error each misuse gives.

use super::tests::{errors, graph};
use fuse_ir::view::{Axes, ViewOp};
use fuse_ir::Op;

#[test]
fn view_calls_trace_to_view_nodes_with_sizes_as_arguments() {
    let g = graph(
        "fn heads(x: &Tensor, y: &Tensor, h: usize, d: usize) -> Result<Tensor> {
            let b = x.dim(0);
            let q = x.reshape(&[b, x.dim(1), h, d]).transpose(1, 2);
            let k = y.narrow(-1, 0, h).permute(&[1, 0]).contiguous();
            Ok(cat(&[&q, &q], -1).reshape(&[b, -1]) + k.reshape(&[1, -1]))
        }",
    );
    let text = g.to_text();
    for want in [
        "= dim 0 %0",
        "= dim 1 %0",
        "= reshape %0 %4 %5 %2 %3",
        "= transpose 1 2",
        "= narrow -1 %1",
        "= permute 1 0",
        "= contiguous",
        "= cat -1 %7 %7",
        "= const -1.0",
    ] {
        assert!(text.contains(want), "missing `{want}` in\n{text}");
    }
    assert!(g.nodes.iter().any(|n| n.op == Op::View(ViewOp::Permute(Axes::new(&[1, 0]).unwrap()))));
}

/// Each misuse gives exactly one error, at the offending argument, saying what to write.
#[test]
fn each_view_misuse_gives_one_error() {
    let cases: &[(&str, &str)] = &[
        ("fn f(x: &Tensor, s: &Tensor) -> Result<Tensor> { Ok(x.reshape(s)) }", "written out as an array, `x.reshape(&[d0, d1, ..])`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.reshape(&[x, 2])) }", "a size in `reshape` is an integer literal (or `-1` for the rest), a `usize` parameter, `x.dim(i)` or arithmetic of those (`n * 2`, `x.dim(0) * x.dim(1)`), not `x`"),
        ("fn f(x: &Tensor, n: usize) -> Result<Tensor> { Ok(x.reshape(&[x.sum(-1) * n, 3])) }", "not `x.sum(-1) * n`"),
        ("fn f(x: &Tensor, a: usize) -> Result<Tensor> { Ok(x.transpose(a, 1)) }", "the axis of `transpose` must be an integer literal"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.transpose(0)) }", "`transpose` takes 2 arguments, found 1"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.permute(&[0, 0, 1])) }", "is not a permutation"),
        ("fn f(x: &Tensor, p: usize) -> Result<Tensor> { Ok(x.permute(&[p, 0])) }", "`permute` takes non-negative integer literals"),
        ("fn f(x: &Tensor, p: &Tensor) -> Result<Tensor> { Ok(x.permute(p)) }", "`permute` takes an array written out"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.narrow(0, -2, 1)) }", "a size in `narrow` is an integer literal, a `usize` parameter"),
        ("fn f(x: &Tensor, n: usize) -> Result<Tensor> { Ok(x.narrow(n, 0, 1)) }", "the axis of `narrow` must be an integer literal"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.narrow(0, 1)) }", "`narrow` takes 3 arguments, found 2"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.contiguous(0)) }", "`contiguous` takes 0 arguments, found 1"),
        ("fn f(x: &Tensor, y: &Tensor) -> Result<Tensor> { Ok(cat(x, 0)) }", "`cat` takes the tensors written out as an array"),
        ("fn f(x: &Tensor, e: f32) -> Result<Tensor> { Ok(cat(&[x, e], 0)) }", "`cat` needs a tensor, but `e` is a scalar"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(cat(&[x, x], 1.5)) }", "the axis of `cat` must be an integer literal"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(cat(&[x, x])) }", "`cat` takes 2 arguments, found 1"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.dim(0).reshape(&[1])) }", "`reshape` needs a tensor, but `x.dim(0)` is a scalar"),
    ];
    for (src, want) in cases {
        let errors = errors(src);
        assert_eq!(errors.len(), 1, "{src}\n{errors:#?}");
        assert!(errors[0].contains(want), "{src}\nwant: {want}\ngot: {}", errors[0]);
    }
}
