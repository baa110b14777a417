//! Fused functions: the planner's plan, the unfused plan and hand-written plans (every group kind, with
//! prologues, epilogues, reductions, views and broadcasting) all against the f64 reference.

mod common;

use common::*;
use fuse_ir::{BinaryOp, DType, Graph, GroupKind, InputKind, ReduceOp, UnaryOp};
use fuse_runtime::{arg, FusedFn, Fusion, Tensor};
use GroupKind::*;

/// `silu(x.matmul(wg)) * x.matmul(wu)` then `.matmul(wd)`, weights in [out, in] layout read via `.t()`.
fn mlp_graph() -> (Graph, Vec<fuse_ir::NodeId>) {
    let mut g = Graph::new("mlp");
    let x = g.input("x", InputKind::Tensor);
    let wg = g.input("w_gate", InputKind::Tensor);
    let wu = g.input("w_up", InputKind::Tensor);
    let wd = g.input("w_down", InputKind::Tensor);
    let wgt = g.transpose(wg, "w_gate.t()");
    let wut = g.transpose(wu, "w_up.t()");
    let wdt = g.transpose(wd, "w_down.t()");
    let gate = g.matmul(x, wgt, "x.matmul(w_gate.t())");
    let up = g.matmul(x, wut, "x.matmul(w_up.t())");
    let act = g.unary(UnaryOp::Silu, gate, "silu(..)");
    let h = g.binary(BinaryOp::Mul, act, up, "silu(..) * ..");
    let down = g.matmul(h, wdt, "h.matmul(w_down.t())");
    g.outputs = vec![down];
    (g, vec![gate, up, act, h, down])
}

#[test]
fn mlp_as_dual_gemm_then_gemm() {
    let (g, n) = mlp_graph();
    let hand = plan(&g, &[(DualGemm, vec![n[0], n[1], n[2], n[3]], vec![]), (Gemm, vec![n[4]], vec![])]);
    let mut r = rng(10);
    for dtype in DType::ALL {
        for m in [1, 3, 17, 127] {
            let (d, f) = (33, 65);
            let args = [
                In::T(tensor(&mut r, &[m, d], dtype)),
                In::T(tensor(&mut r, &[f, d], dtype)),
                In::T(tensor(&mut r, &[f, d], dtype)),
                In::T(tensor(&mut r, &[d, f], dtype)),
            ];
            let out = check(&g, &args, std::slice::from_ref(&hand));
            assert_eq!(out[0].shape(), &[m, d]);
            assert_eq!(out[0].dtype(), dtype);
        }
    }
}

/// A Llama block: rms_norm as a row reduction whose scale is applied in the next GEMM's prologue, a dual
/// GEMM with the silu-mul epilogue, and the down projection with the residual add in its epilogue.
#[test]
fn block_with_prologue_and_residual_epilogue() {
    let mut g = Graph::new("block");
    let x = g.input("x", InputKind::Tensor);
    let norm = g.input("self.norm", InputKind::Field);
    let wg = g.input("self.gate", InputKind::Field);
    let wu = g.input("self.up", InputKind::Field);
    let wd = g.input("self.down", InputKind::Field);
    let eps = g.input("self.eps", InputKind::Field);
    let h = g.rms_norm(x, norm, eps, "rms_norm(x, &self.norm, self.eps)");
    let ids: Vec<_> = g.ids().collect();
    let (sq, ms, var, rs, xn) = (ids[6], ids[7], ids[8], ids[9], ids[10]);
    let wgt = g.transpose(wg, "self.gate.t()");
    let wut = g.transpose(wu, "self.up.t()");
    let wdt = g.transpose(wd, "self.down.t()");
    let gate = g.matmul(h, wgt, "h.matmul(&self.gate.t())");
    let up = g.matmul(h, wut, "h.matmul(&self.up.t())");
    let act = g.unary(UnaryOp::Silu, gate, "silu");
    let prod = g.binary(BinaryOp::Mul, act, up, "mul");
    let down = g.matmul(prod, wdt, "matmul down");
    let out = g.binary(BinaryOp::Add, x, down, "x + ..");
    g.outputs = vec![out];
    let hand = plan(
        &g,
        &[
            (RowReduce, vec![sq, ms, var, rs], vec![]),
            (DualGemm, vec![xn, h, gate, up, act, prod], vec![xn, h]),
            (Gemm, vec![down, out], vec![]),
        ],
    );
    let mut r = rng(11);
    for dtype in DType::ALL {
        for (batch, m) in [(1, 1), (1, 17), (3, 5)] {
            let (d, f) = (33, 65);
            let shape: Vec<usize> = if batch == 1 { vec![m, d] } else { vec![batch, m, d] };
            let args = [
                In::T(tensor(&mut r, &shape, dtype)),
                In::T(tensor(&mut r, &[d], dtype)),
                In::T(tensor(&mut r, &[f, d], dtype)),
                In::T(tensor(&mut r, &[f, d], dtype)),
                In::T(tensor(&mut r, &[d, f], dtype)),
                In::S(1e-5),
            ];
            let out = check(&g, &args, std::slice::from_ref(&hand));
            assert_eq!(out[0].shape(), shape.as_slice());
        }
    }
}

/// A product that is also returned, a softmax in the epilogue (reductions over the product's rows), and a
/// bias broadcast onto it; large enough to run in several parallel row blocks.
#[test]
fn gemm_epilogue_with_reduction_and_returned_product() {
    let mut g = Graph::new("logits");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let b = g.input("bias", InputKind::Tensor);
    let scale = g.input("scale", InputKind::Scalar);
    let xs = g.binary(BinaryOp::Mul, x, scale, "x * scale");
    let mm = g.matmul(xs, w, "xs.matmul(w)");
    let biased = g.binary(BinaryOp::Add, mm, b, "+ bias");
    let sm = g.softmax(biased, "softmax");
    g.outputs = vec![sm, mm];
    let mut epilogue: Vec<_> = g.ids().filter(|&i| i.0 > mm.0).collect();
    epilogue.push(mm);
    epilogue.push(xs);
    let hand = plan(&g, &[(Gemm, epilogue, vec![xs])]);
    let mut r = rng(12);
    for dtype in DType::ALL {
        for m in [3, 300] {
            let args = [
                In::T(tensor(&mut r, &[m, 17], dtype)),
                In::T(tensor(&mut r, &[17, 127], dtype)),
                In::T(tensor(&mut r, &[127], dtype)),
                In::S(0.5),
            ];
            check(&g, &args, std::slice::from_ref(&hand));
        }
    }
}

/// 3-D activations by a 2-D weight, and 3-D by 3-D (per-batch weights), with a transposed 3-D operand.
#[test]
fn batched_matmuls() {
    let mut g = Graph::new("batched");
    let a = g.input("a", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let bt = g.input("b", InputKind::Tensor);
    let mm = g.matmul(a, w, "a.matmul(w)");
    let gl = g.unary(UnaryOp::Gelu, mm, "gelu");
    let btt = g.transpose(bt, "b.t()");
    let mm2 = g.matmul(gl, btt, "gelu(..).matmul(b.t())");
    g.outputs = vec![mm2];
    let hand = plan(&g, &[(Gemm, vec![mm, gl], vec![]), (Gemm, vec![mm2], vec![])]);
    let mut r = rng(13);
    for dtype in DType::ALL {
        for (batch, m) in [(1, 1), (3, 17), (2, 127)] {
            let args = [
                In::T(tensor(&mut r, &[batch, m, 33], dtype)),
                In::T(tensor(&mut r, &[33, 17], dtype)),
                In::T(tensor(&mut r, &[batch, 5, 17], dtype)),
            ];
            let out = check(&g, &args, std::slice::from_ref(&hand));
            assert_eq!(out[0].shape(), &[batch, m, 5]);
        }
    }
}

/// A left operand that is a strided view, in f32 (read in place) and bf16 (converted per block).
#[test]
fn transposed_left_operand() {
    let mut g = Graph::new("tleft");
    let a = g.input("a", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let at = g.transpose(a, "a.t()");
    let mm = g.matmul(at, w, "a.t().matmul(w)");
    let e = g.unary(UnaryOp::Tanh, mm, "tanh");
    g.outputs = vec![e];
    let hand = plan(&g, &[(Gemm, vec![mm, e], vec![])]);
    let mut r = rng(14);
    for dtype in DType::ALL {
        // 2-D, and 3-D whose transposed batches are not evenly strided rows (one GEMM per batch).
        for a_shape in [vec![33, 17], vec![3, 33, 17]] {
            let args = [In::T(tensor(&mut r, &a_shape, dtype)), In::T(tensor(&mut r, &[33, 3], dtype))];
            check(&g, &args, std::slice::from_ref(&hand));
        }
    }
}

/// A chain of pointwise ops over broadcast operands of three ranks, including a transposed view and a
/// scalar parameter, as one group.
#[test]
fn pointwise_chain_with_broadcasting() {
    let mut g = Graph::new("chain");
    let x = g.input("x", InputKind::Tensor);
    let y = g.input("y", InputKind::Tensor);
    let z = g.input("z", InputKind::Tensor);
    let s = g.input("s", InputKind::Scalar);
    let zt = g.transpose(z, "z.t()");
    let a = g.binary(BinaryOp::Mul, x, y, "x * y");
    let b = g.binary(BinaryOp::Add, a, zt, "+ z.t()");
    let two = g.constant(2.0);
    let c = g.binary(BinaryOp::Sub, two, b, "2.0 - ..");
    let d = g.unary(UnaryOp::Tanh, c, "tanh");
    let e = g.binary(BinaryOp::Maximum, d, s, "maximum(.., s)");
    let f = g.binary(BinaryOp::Div, e, y, "/ y");
    let h = g.cast(f, DType::F32, "to_dtype(f32)");
    g.outputs = vec![f, h];
    let nodes: Vec<_> = [a, b, c, d, e, f, h].to_vec();
    let hand = plan(&g, &[(Pointwise, nodes, vec![])]);
    let mut r = rng(15);
    for dtype in DType::ALL {
        for (sx, sy, sz) in [
            (vec![3, 1, 17], vec![5, 1], vec![17, 5]),
            (vec![1], vec![127], vec![127, 1]),
            (vec![2, 3, 17], vec![17], vec![17, 3]),
            (vec![129, 4100], vec![4100], vec![4100, 129]),
            (vec![2, 50000], vec![1], vec![50000, 2]),
        ] {
            let args = [
                In::T(tensor(&mut r, &sx, dtype)),
                In::T(tensor(&mut r, &sy, dtype)),
                In::T(tensor(&mut r, &sz, dtype)),
                In::S(-0.25),
            ];
            let out = check(&g, &args, std::slice::from_ref(&hand));
            assert_eq!(out[1].dtype(), DType::F32);
        }
    }
}

/// Row reductions with pointwise work before and after, over rows long and short, and a mean of a column
/// (a reduction over an axis of length 1).
#[test]
fn row_reductions_fused() {
    let mut g = Graph::new("stats");
    let x = g.input("x", InputKind::Tensor);
    let c = g.input("c", InputKind::Tensor);
    let sq = g.unary(UnaryOp::Square, x, "square");
    let ms = g.reduce(ReduceOp::Mean, sq, "mean");
    let mx = g.reduce(ReduceOp::Max, x, "max");
    let centred = g.binary(BinaryOp::Sub, x, mx, "x - max");
    let cm = g.reduce(ReduceOp::Sum, c, "c.sum(-1)");
    let scaled = g.binary(BinaryOp::Mul, centred, cm, "* c.sum");
    let rs = g.unary(UnaryOp::Rsqrt, ms, "rsqrt");
    let out = g.binary(BinaryOp::Mul, scaled, rs, "* rsqrt");
    g.outputs = vec![out, ms];
    let nodes: Vec<_> = g.ids().filter(|&i| i.0 >= sq.0).collect();
    let hand = plan(&g, &[(RowReduce, nodes, vec![])]);
    let mut r = rng(16);
    for dtype in DType::ALL {
        for (sx, sc) in [
            (vec![3, 17], vec![3, 1]),
            (vec![1, 127], vec![1, 1]),
            (vec![2, 3, 17], vec![3, 1]),
            (vec![300, 5000], vec![300, 1]),
        ] {
            let args = [In::T(tensor(&mut r, &sx, dtype)), In::T(tensor(&mut r, &sc, dtype))];
            check(&g, &args, std::slice::from_ref(&hand));
        }
    }
}

/// A group whose shapes do not make one row domain (an output smaller than the domain) runs one op at a
/// time, and still computes the right values.
#[test]
fn groups_that_do_not_fit_fall_back() {
    let mut g = Graph::new("misfit");
    let x = g.input("x", InputKind::Tensor);
    let y = g.input("y", InputKind::Tensor);
    let a = g.unary(UnaryOp::Exp, x, "exp(x)");
    let b = g.binary(BinaryOp::Mul, a, y, "a * y");
    let s = g.reduce(ReduceOp::Sum, b, "sum");
    let t = g.binary(BinaryOp::Add, s, a, "s + a");
    g.outputs = vec![a, t];
    let hand = plan(&g, &[(RowReduce, vec![a, b, s, t], vec![])]);
    // Gemm group whose epilogue broadcasts the product to a bigger shape.
    let mut g2 = Graph::new("misfit_gemm");
    let p = g2.input("p", InputKind::Tensor);
    let w = g2.input("w", InputKind::Tensor);
    let big = g2.input("big", InputKind::Tensor);
    let mm = g2.matmul(p, w, "p.matmul(w)");
    let sum = g2.binary(BinaryOp::Add, mm, big, "+ big");
    g2.outputs = vec![sum];
    let hand2 = plan(&g2, &[(Gemm, vec![mm, sum], vec![])]);
    let mut r = rng(17);
    for dtype in DType::ALL {
        let args = [In::T(tensor(&mut r, &[1, 17], dtype)), In::T(tensor(&mut r, &[5, 17], dtype))];
        check(&g, &args, std::slice::from_ref(&hand));
        let args2 = [
            In::T(tensor(&mut r, &[3, 17], dtype)),
            In::T(tensor(&mut r, &[17, 5], dtype)),
            In::T(tensor(&mut r, &[2, 3, 5], dtype)),
        ];
        check(&g2, &args2, std::slice::from_ref(&hand2));
    }
}

/// Tuple outputs, an output that is an argument, the same value returned twice, fields given tensors
/// or scalars, and a scalar-only result.
#[test]
fn outputs_and_fields() {
    let mut g = Graph::new("multi");
    let a = g.input("a", InputKind::Tensor);
    let f = g.input("self.f", InputKind::Field);
    let s = g.input("s", InputKind::Scalar);
    let sum = g.binary(BinaryOp::Add, a, f, "a + self.f");
    let e = g.unary(UnaryOp::Exp, sum, "exp");
    let two = g.constant(2.0);
    let ss = g.binary(BinaryOp::Mul, s, two, "s * 2.0");
    g.outputs = vec![e, a, sum, e, ss];
    let mut r = rng(18);
    for dtype in DType::ALL {
        let ta = tensor(&mut r, &[3, 17], dtype);
        for field in [In::T(tensor(&mut r, &[17], dtype)), In::S(0.75)] {
            let args = [In::T(ta.clone()), field, In::S(1.5)];
            let out = check(&g, &args, &[]);
            assert_eq!(out[1].to_vec::<f32>().unwrap(), ta.to_vec::<f32>().unwrap());
            assert_eq!(out[4].shape(), &[] as &[usize]);
            assert_eq!(out[4].to_vec::<f32>().unwrap(), vec![3.0]);
        }
    }
    let f = FusedFn::from_graph(g);
    let ta = tensor(&mut r, &[3, 17], DType::F32);
    let outs = f.call(&[arg(&ta), arg(&2.0f64), arg(&1usize)]).unwrap();
    let (e1, a1, _s, e2, _ss): (Tensor, Tensor, Tensor, Tensor, Tensor) =
        fuse_runtime::FromOutputs::from_outputs(outs).unwrap();
    assert_eq!(e1.to_vec::<f32>().unwrap(), e2.to_vec::<f32>().unwrap());
    assert_eq!(a1.shape(), &[3, 17]);
}

/// Casts inside a group: bf16 in, f32 arithmetic, bf16 out, through a matmul.
#[test]
fn casts_between_dtypes() {
    let mut g = Graph::new("casts");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let xf = g.cast(x, DType::F32, "x.to_dtype(f32)");
    let wf = g.cast(w, DType::F32, "w.to_dtype(f32)");
    let mm = g.matmul(xf, wf, "matmul");
    let back = g.cast(mm, DType::BF16, "to_dtype(bf16)");
    let sm = g.softmax(back, "softmax");
    g.outputs = vec![sm];
    let mut r = rng(19);
    let args = [In::T(tensor(&mut r, &[17, 33], DType::BF16)), In::T(tensor(&mut r, &[33, 5], DType::BF16))];
    let out = check(&g, &args, &[]);
    assert_eq!(out[0].dtype(), DType::BF16);
}

#[test]
fn fusion_switch_and_explain() {
    let (g, _) = mlp_graph();
    let f = FusedFn::from_graph(g);
    assert_eq!(f.name(), "mlp");
    let mut r = rng(20);
    let x = tensor(&mut r, &[3, 33], DType::F32);
    let (wg, wu, wd) = (
        tensor(&mut r, &[65, 33], DType::F32),
        tensor(&mut r, &[65, 33], DType::F32),
        tensor(&mut r, &[33, 65], DType::F32),
    );
    let args = [arg(&x), arg(&wg), arg(&wu), arg(&wd)];
    let on = f.call_with(&args, Fusion::On).unwrap().remove(0);
    let off = f.call_with(&args, Fusion::Off).unwrap().remove(0);
    let e = rel_l2(&on, &array(&off));
    assert!(e < 1e-5, "fused and unfused differ by {e}");
    assert!(f.plan(Fusion::Off).unwrap().groups.len() >= f.plan(Fusion::On).unwrap().groups.len());
    let report = f.explain(&args).unwrap();
    assert!(report.contains("mlp"), "{report}");
}
