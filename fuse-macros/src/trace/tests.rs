//! Tracer tests on source text: the graph a body gives, and the error each mistake gives.

use crate::diag::Diagnostics;
use crate::signature::check_signature;
use crate::trace::trace_fn;
use fuse_ir::{BinaryOp, Graph, InputKind, Op, ReduceOp, UnaryOp};

fn trace(src: &str) -> Result<Graph, Vec<String>> {
    let func: syn::ItemFn = syn::parse_str(src).unwrap_or_else(|e| panic!("test source does not parse: {e}"));
    let mut diag = Diagnostics::new();
    let spec = check_signature(&func.sig, &mut diag);
    let traced = trace_fn(&spec, &func.sig.ident.to_string(), &func.block, &mut diag, &[], &[]);
    if diag.has_errors() {
        Err(diag.messages())
    } else {
        traced.graph.verify().unwrap();
        let fields = traced.graph.inputs.iter().filter(|i| matches!(i.kind, InputKind::Field | InputKind::ScalarField));
        assert_eq!(traced.fields.len(), fields.count());
        Ok(traced.graph)
    }
}

pub(super) fn graph(src: &str) -> Graph {
    trace(src).unwrap_or_else(|errors| panic!("unexpected errors: {errors:#?}"))
}

pub(super) fn errors(src: &str) -> Vec<String> {
    match trace(src) {
        Ok(g) => panic!("expected errors, got the graph\n{}", g.to_text()),
        Err(errors) => errors,
    }
}

fn ops(g: &Graph) -> Vec<Op> {
    g.nodes.iter().map(|n| n.op).collect()
}

#[test]
fn mlp_graph_text() {
    let g = graph(
        "pub fn mlp(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
            let h = silu(x.matmul(w_gate)) * x.matmul(w_up);
            Ok(h.matmul(w_down))
        }",
    );
    let want = r#"fn mlp(x: tensor, w_gate: tensor, w_up: tensor, w_down: tensor)
%0 = input 0 ; "x"
%1 = input 1 ; "w_gate"
%2 = input 2 ; "w_up"
%3 = input 3 ; "w_down"
%4 = matmul %0 %1 ; "x.matmul(w_gate)"
%5 = silu %4 ; "silu(x.matmul(w_gate))"
%6 = matmul %0 %2 ; "x.matmul(w_up)"
%7 = mul %5 %6 ; "silu(x.matmul(w_gate)) * x.matmul(w_up)"
%8 = matmul %7 %3 ; "h.matmul(w_down)"
return %8
"#;
    assert_eq!(g.to_text(), want);
}

#[test]
fn method_fields_are_inputs_after_parameters_in_first_use_order() {
    let g = graph(
        "fn forward(&self, x: &Tensor, scale: f32) -> Result<Tensor> {
            let h = rms_norm(x, &self.norm, self.eps);
            let g = h.matmul(&self.mlp.gate.t());
            Ok(x + g.matmul(&self.mlp.gate.t()) * scale + self.norm)
        }",
    );
    let inputs: Vec<(&str, InputKind)> = g.inputs.iter().map(|i| (i.name.as_str(), i.kind)).collect();
    assert_eq!(
        inputs,
        [
            ("x", InputKind::Tensor),
            ("scale", InputKind::Scalar),
            ("self.norm", InputKind::Field),
            ("self.eps", InputKind::Field),
            ("self.mlp.gate", InputKind::Field),
        ]
    );
    // `self.mlp.gate.t()` is traced once (hash-consed) although written twice.
    assert_eq!(ops(&g).iter().filter(|op| **op == Op::Transpose).count(), 1);
}

#[test]
fn scalars_literals_and_negation() {
    let g = graph("fn f(x: &Tensor, eps: f64, n: usize) -> Result<Tensor> { Ok(-x * eps + -1.5 - 2 / n) }");
    let text = g.to_text();
    assert!(text.starts_with("fn f(x: tensor, eps: scalar, n: scalar)\n"), "{text}");
    assert!(text.contains("= neg %0 ; \"-x\""), "{text}");
    assert!(text.contains("= const -1.5\n"), "{text}");
    assert!(text.contains("= const 2.0\n"), "{text}");
    assert!(text.contains("= div %"), "{text}");
}

#[test]
fn a_tuple_let_binds_each_name() {
    // The values are traced before any name is bound: `b` is the old `a`, not `x.exp()`.
    let g = graph("fn f(x: &Tensor, a: &Tensor) -> Result<Tensor> { let (a, b) = (x.exp(), a); Ok(a - b) }");
    let text = g.to_text();
    assert!(text.contains("= exp %0") && text.contains("= sub %2 %1"), "{text}");
}

#[test]
fn let_shadowing_and_block_scopes() {
    let g = graph(
        "fn f(x: &Tensor) -> Result<Tensor> {
            let h = x.exp();
            let h = h + 1.0;
            let y = {
                let h = h * 2.0;
                h.sqrt()
            };
            Ok(y - h)
        }",
    );
    let text = g.to_text();
    assert!(text.contains("%6 = sqrt %5 ; \"h.sqrt()\""), "{text}");
    assert!(text.contains("%7 = sub %6 %3 ; \"y - h\""), "{text}");
}

#[test]
fn tails_with_and_without_ok_and_final_return() {
    let forms = [
        "fn f(x: &Tensor) -> Result<Tensor> { let y = x.exp(); y }",
        "fn f(x: &Tensor) -> Result<Tensor> { let y = x.exp(); Ok(y) }",
        "fn f(x: &Tensor) -> Result<Tensor> { let y = x.exp(); return Ok(y); }",
        "fn f(x: &Tensor) -> fuse::Result<Tensor, MyError> { let y = exp(&x)?; Ok((y)) }",
    ];
    let texts: Vec<String> = forms.iter().map(|src| graph(src).to_text()).collect();
    for t in &texts[1..] {
        assert_eq!(t.lines().filter(|l| l.contains("exp")).count(), 1, "{t}");
        assert!(t.ends_with("return %1\n"), "{t}");
    }
}

#[test]
fn tuple_result() {
    let g = graph(
        "fn f(q: &Tensor, k: &Tensor) -> Result<(Tensor, Tensor, fuse::Tensor)> {
            let s = softmax(q.matmul(&k.t()));
            Ok((s, s.max(-1), q.to_dtype(DType::BF16)))
        }",
    );
    assert_eq!(g.outputs.len(), 3);
    assert_eq!(g.op(g.outputs[1]), Op::Reduce(ReduceOp::Max));
    assert_eq!(g.op(g.outputs[2]), Op::Cast(fuse_ir::DType::BF16));
    let g = graph("fn f(a: &Tensor) -> Result<(Tensor, Tensor)> { (a.exp(), a.log()) }");
    assert_eq!(g.outputs.len(), 2);
}

#[test]
fn every_op_once() {
    let g = graph(
        "fn every(x: &Tensor, w: &Tensor, s: f32) -> Result<Tensor> {
            let a = exp(x) + log(x) + sqrt(x) + rsqrt(x) + tanh(x) + sigmoid(x) + silu(x);
            let b = fuse::gelu(x) + gelu_tanh(x) + relu(x) + abs(x) + square(x) + recip(x) + sin(x) + x.cos();
            let c = x.exp() - x.log() - x.sqrt() - x.rsqrt() - x.tanh() - x.sigmoid() - x.silu() - x.gelu();
            let d = x.gelu_tanh() * x.relu() * x.abs() * x.square() * x.recip() / -x;
            let e = maximum(a, b) + minimum(c, d) + a.maximum(d) + b.minimum(c) + x.powf(s) + x.powf(3);
            let e = e + a.ge(b) + a.gt(b) + a.le(b) + a.lt(b) + a.eq(b) + a.ne(b);
            let e = a.ge(b).where_cond(e, f32::NEG_INFINITY) * std::f64::consts::PI + e.trunc();
            let f = e.sum(-1) + e.mean(-1) + e.max(-1) + e.min(-1) + softmax(e) + rms_norm(e, w, 1e-5);
            let g = f.matmul(&w.t()).to_dtype(DType::F32);
            Ok(g)
        }",
    );
    let ops = ops(&g);
    for u in UnaryOp::ALL {
        assert!(ops.contains(&Op::Unary(u)), "{} missing", u.name());
    }
    for b in BinaryOp::ALL {
        assert!(ops.contains(&Op::Binary(b)), "{} missing", b.name());
    }
    for r in ReduceOp::ALL {
        assert!(ops.contains(&Op::Reduce(r)), "{} missing", r.name());
    }
    assert!(ops.contains(&Op::Const(f64::NEG_INFINITY)), "f32::NEG_INFINITY is a literal");
    assert!(ops.contains(&Op::Const(std::f64::consts::PI)), "std::f64::consts::PI is a literal");
    for op in [Op::MatMul, Op::Transpose, Op::Cast(fuse_ir::DType::F32), Op::Where] {
        assert!(ops.contains(&op), "{op:?} missing");
    }
}

#[test]
fn composites_expand_with_the_callers_label() {
    let g = graph("fn f(x: &Tensor, w: &Tensor) -> Result<Tensor> { Ok(softmax(rms_norm(x, w, 1e-6))) }");
    let labels: Vec<&str> = g.ids().filter(|&id| !g.op(id).is_leaf()).map(|id| g.label_of(id)).collect();
    assert_eq!(labels[..6], ["rms_norm(x, w, 1e-6)"; 6]);
    assert_eq!(labels[6..], ["softmax(rms_norm(x, w, 1e-6))"; 5]);
}

#[test]
fn unused_lets_are_dropped_but_every_parameter_stays_an_input() {
    let g = graph("fn f(x: &Tensor, unused: &Tensor) -> Result<Tensor> { let dead = x.matmul(unused); Ok(x.exp()) }");
    assert_eq!(ops(&g), [Op::Input(0), Op::Input(1), Op::Unary(UnaryOp::Exp)]);
    assert_eq!(g.inputs.len(), 2);
}

#[test]
fn tracing_is_deterministic() {
    let src = "fn f(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let h = silu(x.matmul(&self.a)) * x.matmul(&self.b) + self.c;
        Ok((softmax(h), h.mean(-1)))
    }";
    let first = graph(src).to_text();
    for _ in 0..5 {
        assert_eq!(graph(src).to_text(), first);
    }
}

/// Each mistake gives exactly one error, which says what to write instead.
#[test]
fn each_mistake_gives_one_error() {
    let cases: &[(&str, &str)] = &[
        ("fn f(x: &Tensor) -> Result<Tensor> { for i in 0..3 {} Ok(x.exp()) }", "`for` loops cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { while true {} Ok(x.exp()) }", "`while` loops"),
        ("fn f(x: &Tensor) -> Result<Tensor> { loop {} }", "`loop` cannot be traced"),
        (
            "fn f(x: &Tensor) -> Result<Tensor> { let y = if a { x } else { x }; Ok(y) }",
            "`if` is traced only on a `bool` parameter",
        ),
        ("fn f(x: &Tensor) -> Result<Tensor> { let y = match x { _ => x }; Ok(y) }", "`match` cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let g = |t| t; Ok(x.exp()) }", "closures cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(frobnicate(x)) }", "unknown function `frobnicate`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.frobnicate()) }", "unknown method `frobnicate`"),
        (
            "fn f(x: &Tensor) -> Result<Tensor> { Ok(x.transpose()) }",
            "takes 2 arguments, found 0: write `x.transpose(1, 2)`",
        ),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(exp(x, x)) }", "`exp` takes 1 argument, found 2"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.matmul()) }", "`matmul` takes 1 argument, found 0"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.sum(0)) }", "write `x.sum(-1)`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.mean(1)) }", "write `x.mean(-1)`"),
        ("fn f(x: &Tensor) -> Tensor { x.exp() }", "returns `Result<Tensor>`"),
        ("fn f(x: &Tensor) -> Result<f32> { Ok(x) }", "not `Result<f32>`"),
        ("fn f(x: &Tensor) -> Result<(Tensor,)> { Ok(x) }", "tuple of 2 to 8 tensors"),
        ("fn f(x: &Tensor) { let y = x.exp(); }", "add `-> Result<Tensor>`"),
        ("fn f(x: &mut Tensor) -> Result<Tensor> { Ok(x.exp()) }", "write `x: &Tensor`"),
        ("fn f(x: Tensor) -> Result<Tensor> { Ok(x.exp()) }", "take tensors by reference"),
        ("fn f(x: &Tensor, n: u8) -> Result<Tensor> { Ok(x.exp()) }", "unsupported parameter type `u8`"),
        ("fn f((a, b): (&Tensor, &Tensor)) -> Result<Tensor> { Ok(a + b) }", "patterns are not supported"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let (a, b) = x.exp(); Ok(a) }", "patterns are not supported"),
        ("fn f(self, x: &Tensor) -> Result<Tensor> { Ok(x.exp()) }", "takes `&self`"),
        ("fn f(&mut self, x: &Tensor) -> Result<Tensor> { Ok(x.exp()) }", "takes `&self`"),
        ("async fn f(x: &Tensor) -> Result<Tensor> { Ok(x.exp()) }", "cannot be `async`"),
        ("unsafe fn f(x: &Tensor) -> Result<Tensor> { Ok(x.exp()) }", "cannot be `unsafe`"),
        ("const fn f(x: &Tensor) -> Result<Tensor> { Ok(x.exp()) }", "cannot be `const fn`"),
        ("fn f<T>(x: &Tensor) -> Result<Tensor> { Ok(x.exp()) }", "cannot be generic"),
        ("fn f<T: Into<f32>>(x: &Tensor, s: T) -> Result<Tensor> { Ok(x * s) }", "cannot be generic"),
        ("fn f(x: &Tensor) -> Result<Tensor> where Tensor: Clone { Ok(x.exp()) }", "`where` clause"),
        (
            "fn f(x: &Tensor) -> Result<Tensor> { println!(\"hi\"); Ok(x.exp()) }",
            "macros cannot be traced (`println!`)",
        ),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.exp() + vec![1.0]) }", "macros cannot be traced (`vec!`)"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(y.exp()) }", "cannot find `y`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x[0]) }", "indexing cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let h = x.exp(); h = h + 1.0; Ok(h) }", "assignment cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let h = x.exp(); h += 1.0; Ok(h) }", "`+=` cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x * \"two\") }", "strings cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x * true) }", "booleans cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x * 'c') }", "characters cannot be traced"),
        (
            "fn f(x: &Tensor, n: usize) -> Result<Tensor> { Ok(x as f32 * n) }",
            "`x` is a tensor: to change a tensor's dtype",
        ),
        ("fn f(x: &Tensor, n: usize) -> Result<Tensor> { Ok(x * (n as u8)) }", "`as u8` cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x % 2.0) }", "`%` cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x < 2.0) }", "comparisons give booleans"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x == x) }", "`==` cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x && x) }", "`&&` cannot be traced"),
        ("fn f(&self, x: &Tensor) -> Result<Tensor> { Ok(self.project(x)) }", "methods of `self` cannot be traced"),
        (
            "fn f(x: &Tensor) -> Result<Tensor> { let h = x.exp(); Ok(h.weight) }",
            "reads a field of `h`, which is not `self`",
        ),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(self.w) }", "`self` exists only in methods"),
        (
            "fn f(x: &Tensor) -> Result<Tensor> { return Ok(x.exp()); Ok(x) }",
            "`return` is only allowed as the last statement",
        ),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x * Scale { v: 2.0 }) }", "struct literals cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x * [1.0, 2.0]) }", "array literals cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.await) }", "`.await` cannot be traced"),
        (
            "fn f(x: &Tensor) -> Result<Tensor> { let p = (x, x); Ok(x) }",
            "a tuple is only allowed as the function's result",
        ),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.to_dtype(DType::F64)) }", "`to_dtype` takes `DType::F32`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.to_dtype(d)) }", "`to_dtype` takes `DType::F32`"),
        ("fn f(x: &Tensor) -> Result<(Tensor, Tensor)> { Ok((x, x, x)) }", "returns 2 tensors but this tuple has 3"),
        ("fn f(x: &Tensor) -> Result<(Tensor, Tensor)> { Ok(x) }", "return them as a tuple"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok((x, x)) }", "returns one tensor but this is a tuple of 2"),
        ("fn f(x: &Tensor, s: f32) -> Result<Tensor> { Ok(s * 2.0) }", "`s * 2.0` is a scalar"),
        (
            "fn f(x: &Tensor, s: f32) -> Result<Tensor> { Ok(x.matmul(s)) }",
            "`matmul` needs a tensor, but `s` is a scalar",
        ),
        ("fn f(x: &Tensor, y: &Tensor) -> Result<Tensor> { Ok(x.powf(y)) }", "for a tensor exponent write"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let y = x.exp(); }", "must end with its result"),
        ("fn f(x: &Tensor) -> Result<Tensor> { x.exp(); Ok(x.log()) }", "computed and then dropped"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let mut h = x.exp(); Ok(h) }", "`let mut` is not needed"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let h: f32 = x.exp(); Ok(h) }", "`h` is a tensor here"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let h: String = x.exp(); Ok(h) }", "unsupported type `String`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(Tensor::zeros(x)) }", "unknown function `Tensor::zeros`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x * std::f32::consts::GOLDEN) }", "write a constant as a literal"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let y = Ok(x); y }", "`Ok(..)` wraps the function's result"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let (a, ref b) = (x, x); Ok(a) }", "bind each value to a plain name"),
        (
            "fn f(x: &Tensor) -> Result<Tensor> { let (a, b) = x.chunk(3, -1); Ok(a) }",
            "bind `x.chunk(2, axis)` to 2 names",
        ),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.chunk(2, -1)) }", "`let (a, b) = x.chunk(2, axis);`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.topk(3)) }", "`let (values, indices) = x.topk(k);`"),
        (
            "fn f(x: &Tensor) -> Result<Tensor> { let (a, b, c) = x.sort_last_dim(true); Ok(a) }",
            "bind `x.sort_last_dim(ascending)` to two names",
        ),
        (
            "fn f(x: &Tensor, up: f32) -> Result<Tensor> { Ok(x.arg_sort_last_dim(up)) }",
            "`arg_sort_last_dim`'s direction is `true` (ascending), `false` or a `bool` parameter here, not `up`",
        ),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.argsort(-1)) }", "write `x.arg_sort_last_dim(ascending)`"),
        ("fn f(x: &Tensor, i: &Tensor) -> Result<Tensor> { Ok(x.gather(i, k)) }", "the axis of `gather` must be"),
        ("fn f(x: &Tensor) -> Result<Tensor> { fn g() {} Ok(x.exp()) }", "items (fn, struct, use, ...)"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(!x) }", "`!` cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.matmul(x).softmax()) }", "write `softmax(x)`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(matmul(x, x)) }", "write `a.matmul(b)`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let g = |t| t; Ok(g(x)) }", "closures cannot be traced"),
        ("fn f(x: &Tensor) -> Result<Tensor> { let g = x.exp(); Ok(g(x)) }", "`g` is a value, not a function"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x + EPS) }", "or take it as a scalar parameter (`eps: f64`)"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.sum(-1) / x.shape()[1]) }", "take the size as a `usize` parameter"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x / x.dims()) }", "take it as a `usize` parameter"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.view(&[6, 4])) }", "unknown method `view`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(view(x, [6, 4])) }", "unknown function `view`"),
        ("fn f(x: &Tensor) -> Result<Tensor> { Ok(helper(x)) }", "inline what `helper` computes here"),
    ];
    for (src, want) in cases {
        let errors = errors(src);
        assert_eq!(errors.len(), 1, "{src}\n{errors:#?}");
        assert!(errors[0].contains(want), "{src}\nwant: {want}\ngot: {}", errors[0]);
        assert_eq!(errors[0].chars().next().map(|c| c.is_uppercase()), Some(false), "{}", errors[0]);
    }
}

#[test]
fn several_mistakes_give_several_errors_in_source_order() {
    let errors = errors(
        "fn f(x: Tensor, n: u8) -> Result<Tensor> {
            let a = x.frob();
            let b = a.exp() * undefined;
            for i in 0..n {}
            Ok(b.sum(0))
        }",
    );
    let want = [
        "take tensors by reference",
        "unsupported parameter type",
        "unknown method `frob`",
        "cannot find `undefined`",
        "`for` loops",
        "write `x.sum(-1)`",
    ];
    assert_eq!(errors.len(), want.len(), "{errors:#?}");
    for (e, w) in errors.iter().zip(want) {
        assert!(e.contains(w), "want {w}, got {e}");
    }
}

#[test]
fn a_needless_let_mut_is_reported_after_the_loop_that_needs_it() {
    let errors =
        errors("fn f(x: &Tensor) -> Result<Tensor> { let mut h = x.exp(); for _ in 0..3 { h = h.exp(); } Ok(h) }");
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].contains("`for` loops cannot be traced"), "{errors:#?}");
    assert!(errors[1].contains("`let mut` is not needed"), "{errors:#?}");
}

#[test]
fn a_failed_binding_does_not_cascade() {
    // `h` failed to trace: its uses report nothing more, and neither does the bad parameter `x`.
    let errors = errors("fn f(x: Vec<f32>) -> Result<Tensor> { let h = x.frob(); let g = h.exp() + x; Ok(g * h) }");
    assert_eq!(errors.len(), 2, "{errors:#?}");
}

#[test]
fn model_ops_trace_to_model_nodes() {
    let g = graph(
        "fn layer(ids: &Tensor, table: &Tensor, cos: &Tensor, sin: &Tensor, k: &Tensor, v: &Tensor, scale: f32) -> Result<Tensor> {
            let x = embedding(&ids, table);
            let q = rope(&x, cos, sin);
            let a = attention(&q, k, v, scale, true);
            let b = attention(&q, k, v, 0.125, false);
            Ok((a + b).argmax(-1))
        }",
    );
    let model: Vec<fuse_ir::ModelOp> =
        ops(&g).into_iter().filter_map(|op| if let Op::Model(m) = op { Some(m) } else { None }).collect();
    use fuse_ir::ModelOp::*;
    assert_eq!(
        model,
        [
            Embedding,
            Rope,
            Attention { causal: true, with_lens: false },
            Attention { causal: false, with_lens: false },
            Argmax
        ]
    );
    assert!(
        g.to_text().contains("attention causal=true %8 %4 %5 %6 ; \"attention(&q, k, v, scale, true)\""),
        "{}",
        g.to_text()
    );
}

#[test]
fn attention_len_takes_lens_after_the_scale() {
    let g = graph(
        "fn step(q: &Tensor, k: &Tensor, v: &Tensor, lens: &Tensor, scale: f32) -> Result<Tensor> {
            Ok(attention_len(q, k, v, lens, scale, true))
        }",
    );
    // Node operands: q, k, v, scale, lens (inputs %0 .. %4 in parameter order).
    let text = g.to_text();
    assert!(
        text.contains("attention causal=true lens %0 %1 %2 %4 %3 ; \"attention_len(q, k, v, lens, scale, true)\""),
        "{text}"
    );
}

#[test]
fn model_op_mistakes_say_what_to_write() {
    let cases = [
        ("attention(q, k, v, 0.5)", "`attention` takes 5 arguments, found 4"),
        ("attention(q, k, v, 0.5, c)", "`causal` is `true`, `false` or a `bool` parameter here, not `c`"),
        (
            "attention(q, k, v, k, true)",
            "the scale of `attention` is a literal, a scalar parameter or a field of `self`, but `k` is a tensor",
        ),
        ("attention(q, k, c, 0.5, true)", "`attention` needs a tensor, but `c` is a scalar"),
        (
            "attention_len(q, k, v, 0.5, true)",
            "`attention_len` takes 6 arguments, found 5: write `attention_len(q, k, v, lens, scale, causal)`",
        ),
        ("attention_len(q, k, v, c, 0.5, true)", "`attention_len` needs a tensor, but `c` is a scalar"),
        (
            "attention_len(q, k, v, k, v, true)",
            "the scale of `attention_len` is a literal, a scalar parameter or a field of `self`, but `v` is a tensor",
        ),
        ("attention_len(q, k, v, k, 0.5, c)", "`causal` is `true`, `false` or a `bool` parameter here, not `c`"),
        ("rope(q, k)", "`rope` takes 3 arguments, found 2: write `rope(x, cos, sin)`"),
        ("embedding(c, k)", "`embedding` needs a tensor, but `c` is a scalar"),
        ("q.argmax(0)", "`argmax` runs along the last axis only"),
        ("q.argmax_keepdim(-1)", "write `x.argmax(-1)` (it keeps the axis)"),
        ("k.embedding(q)", "`embedding` is a function here: write `embedding(ids, table)`"),
    ];
    for (body, says) in cases {
        let src = format!("fn f(q: &Tensor, k: &Tensor, v: &Tensor, c: f32) -> Result<Tensor> {{ Ok({body}) }}");
        let errors = errors(&src);
        assert!(errors.iter().any(|e| e.contains(says)), "{body}: {errors:#?}");
    }
}
