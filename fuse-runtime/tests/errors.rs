//! Mistakes are `Err`s whose messages name the function, the op, the user's source and the shapes.

mod common;

use common::*;
use fuse_ir::{BinaryOp, DType, Graph, InputKind};
use fuse_runtime::*;

fn mlp() -> FusedFn {
    let mut g = Graph::new("mlp");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w_gate", InputKind::Tensor);
    let eps = g.input("eps", InputKind::Scalar);
    let mm = g.matmul(x, w, "x.matmul(w_gate)");
    let out = g.binary(BinaryOp::Add, mm, eps, "h + eps");
    g.outputs = vec![out];
    FusedFn::from_graph(g)
}

fn message<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.expect_err("an error").to_string()
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "`{msg}` does not mention `{p}`");
    }
}

#[test]
fn matmul_inner_dimension_mismatch() {
    let mut r = rng(30);
    let x = tensor(&mut r, &[16, 40], DType::F32);
    let w = tensor(&mut r, &[39, 8], DType::F32);
    let msg = message(mlp().call(&[arg(&x), arg(&w), arg(&1e-5f32)]));
    assert_mentions(&msg, &["in `mlp`", "matmul", "`x.matmul(w_gate)`", "[16, 40]", "[39, 8]"]);
    let msg = message(x.matmul(&w));
    assert_mentions(&msg, &["in `eager`", "matmul", "[16, 40]", "[39, 8]"]);
}

#[test]
fn operands_that_do_not_broadcast() {
    let mut r = rng(31);
    let a = tensor(&mut r, &[3, 17], DType::F32);
    let b = tensor(&mut r, &[5], DType::F32);
    let msg = message(&a + &b);
    assert_mentions(&msg, &["in `eager`", "add", "[3, 17]", "[5]", "do not broadcast"]);
    assert_mentions(&message(maximum(&a, &b)), &["maximum", "[3, 17]", "[5]"]);
}

#[test]
fn mixed_dtypes() {
    let mut r = rng(32);
    let a = tensor(&mut r, &[3, 17], DType::F32);
    let b = tensor(&mut r, &[3, 17], DType::BF16);
    assert_mentions(&message(&a * &b), &["in `eager`", "mul", "f32", "bf16", "to_dtype"]);
    let w = tensor(&mut r, &[17, 4], DType::F16);
    let msg = message(mlp().call(&[arg(&a), arg(&w), arg(&1.0f64)]));
    assert_mentions(&msg, &["in `mlp`", "matmul", "`x.matmul(w_gate)`", "f32", "f16"]);
}

#[test]
fn wrong_argument_kinds_and_count() {
    let mut r = rng(33);
    let x = tensor(&mut r, &[3, 17], DType::F32);
    let w = tensor(&mut r, &[17, 4], DType::F32);
    let f = mlp();
    let msg = message(f.call(&[arg(&1.0f32), arg(&w), arg(&1.0f32)]));
    assert_mentions(&msg, &["in `mlp`", "parameter `x`", "expects a tensor", "got a scalar"]);
    let msg = message(f.call(&[arg(&x), arg(&w), arg(&w)]));
    assert_mentions(&msg, &["in `mlp`", "parameter `eps`", "expects a scalar", "got a tensor"]);
    let msg = message(f.call(&[arg(&x), arg(&w)]));
    assert_mentions(&msg, &["in `mlp`", "expected 3 arguments, got 2"]);
    assert!(f.call(&[arg(&x), arg(&w), arg(&2i64)]).is_ok());
    let outs = f.call(&[arg(&x), arg(&w), arg(&2usize)]).unwrap();
    assert_mentions(&message(<(Tensor, Tensor)>::from_outputs(outs)), &["returns 1", "expects 2"]);
}

#[test]
fn reducing_another_axis_is_unsupported() {
    let mut r = rng(34);
    let x = tensor(&mut r, &[3, 17], DType::F32);
    let msg = message(x.sum(0));
    assert_mentions(&msg, &["in `eager`", "sum", "last axis", "axis 0", "[3, 17]"]);
    assert!(x.mean(1).is_ok());
    assert!(matches!(x.max(-2), Err(Error::Unsupported { .. })));
}

#[test]
fn construction_errors() {
    let msg = message(Tensor::from_vec(vec![1.0f32; 5], &[2, 3], &Device::Cpu));
    assert_mentions(&msg, &["from_vec", "5 values", "[2, 3]", "6 elements"]);
    let v = Tensor::from_vec(vec![1.0f32; 3], &[3], &Device::Cpu).unwrap();
    assert_mentions(&message(v.t()), &["t", "two axes", "[3]"]);
    assert_mentions(&message(Device::cuda(1 << 20)), &["cuda", "unavailable"]);
}

#[test]
fn a_corrupt_graph_is_an_internal_error() {
    static BROKEN: FusedFn = FusedFn::new("broken", "fn broken(x: tensor)\n%0 = frobnicate\nreturn %0\n");
    assert!(matches!(BROKEN.graph(), Err(Error::Internal { .. })));
    let x = Tensor::from_vec(vec![1.0f32], &[1], &Device::Cpu).unwrap();
    assert_mentions(&message(BROKEN.call(&[arg(&x)])), &["in `broken`", "internal error"]);
    static GOOD: FusedFn =
        FusedFn::new("good", "fn good(x: tensor)\n%0 = input 0 ; \"x\"\n%1 = exp %0 ; \"exp(x)\"\nreturn %1\n");
    let y = GOOD.call(&[arg(&x)]).unwrap().remove(0);
    assert!((y.to_vec::<f32>().unwrap()[0] - std::f32::consts::E).abs() < 1e-6);
}
