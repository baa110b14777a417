//! Graphs that several fuse-ir test files build (compiled for tests only): the planner's tests
//! (`tests/planner.rs`, which includes this file by path) count their groups, the code generator's
//! (`src/codegen/tests.rs`) check their kernels. Written against the public API (`fuse_ir::...`; inside the
//! crate, `fuse_ir` names itself).

use fuse_ir::{BinaryOp, DType, Graph, InputKind, NodeId, UnaryOp};

/// `(silu(x @ wg) * (x @ wu)) @ wd`, weights `[out, in]` (transposed in the graph) or `[in, out]`. Returns
/// the graph and the gate product, the up product, h and the output.
pub fn llama_mlp(transposed_weights: bool) -> (Graph, [NodeId; 4]) {
    let mut g = Graph::new("mlp");
    let x = g.input("x", InputKind::Tensor);
    let mut weights = Vec::new();
    for name in ["w_gate", "w_up", "w_down"] {
        let w = g.input(name, InputKind::Tensor);
        weights.push(if transposed_weights { g.transpose(w, &format!("{name}.t()")) } else { w });
    }
    let gate = g.matmul(x, weights[0], "x.matmul(w_gate)");
    let act = g.unary(UnaryOp::Silu, gate, "silu(x.matmul(w_gate))");
    let up = g.matmul(x, weights[1], "x.matmul(w_up)");
    let h = g.binary(BinaryOp::Mul, act, up, "silu(..) * x.matmul(w_up)");
    let out = g.matmul(h, weights[2], "h.matmul(w_down)");
    g.outputs = vec![out];
    (g, [gate, up, h, out])
}

/// `softmax(q @ k^T * scale) @ v`.
pub fn attention() -> Graph {
    let mut g = Graph::new("attention");
    let [q, k, v] = ["q", "k", "v"].map(|n| g.input(n, InputKind::Tensor));
    let scale = g.input("scale", InputKind::Scalar);
    let kt = g.transpose(k, "k.t()");
    let scores = g.matmul(q, kt, "q.matmul(k.t())");
    let scores = g.binary(BinaryOp::Mul, scores, scale, "* scale");
    let p = g.softmax(scores, "softmax(..)");
    g.outputs = vec![g.matmul(p, v, "p.matmul(v)")];
    g
}

/// Ten pointwise ops with a broadcast bias, a scalar argument and literals. Returns the graph and its
/// three inputs (x, bias, s).
pub fn chain10() -> (Graph, [NodeId; 3]) {
    let mut g = Graph::new("chain");
    let x = g.input("x", InputKind::Tensor);
    let bias = g.input("bias", InputKind::Tensor);
    let s = g.input("s", InputKind::Scalar);
    let (half, three) = (g.constant(0.5), g.constant(3.0));
    let mut v = g.binary(BinaryOp::Add, x, bias, "x + bias");
    v = g.binary(BinaryOp::Mul, v, s, "* s");
    v = g.unary(UnaryOp::GeluTanh, v, "gelu_tanh");
    v = g.binary(BinaryOp::Sub, v, half, "- 0.5");
    v = g.unary(UnaryOp::Abs, v, "abs");
    v = g.binary(BinaryOp::Add, v, three, "+ 3.0");
    v = g.unary(UnaryOp::Log, v, "log");
    v = g.binary(BinaryOp::Maximum, v, bias, "maximum(v, bias)");
    v = g.binary(BinaryOp::Pow, v, s, "powf(s)");
    v = g.cast(v, DType::BF16, "to_dtype(bf16)");
    g.outputs = vec![v];
    (g, [x, bias, s])
}
