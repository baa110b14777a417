//! Launch plans: signatures compare layouts, not values (any machine); replayed calls give the reference's
//! results when inputs, scalar arguments and the order of the weights in memory change between calls (GPU:
//! skipped visibly without one, a failure under `FUSE_TEST_GPU=1`).

use super::*;
use crate::{reference, rel_l2_error, Arg, Device, FusedFn, Fusion};
use fuse_ir::graph::InputKind as ArgKind;
use fuse_ir::{BinaryOp, Graph, UnaryOp};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Calls that took a launch plan (tests check that repeated calls do).
pub(super) static REPLAYS: AtomicUsize = AtomicUsize::new(0);

fn cpu_tensor(values: Vec<f32>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(values, shape, &Device::Cpu).expect("a CPU tensor")
}

#[test]
fn signatures_compare_layouts_not_values() {
    let a = cpu_tensor(vec![1.0; 6], &[2, 3]);
    let b = cpu_tensor(vec![2.0; 6], &[2, 3]);
    let args = [Arg::Tensor(&a), Arg::Scalar(0.5)];
    let sig = signature(&args);
    assert!(sig[0].matches(&Arg::Tensor(&b)));
    assert!(sig[1].matches(&Arg::Scalar(7.0)));
    assert!(!sig[0].matches(&Arg::Tensor(&a.t().expect("a view"))), "a transposed view has other strides");
    assert!(!sig[0].matches(&Arg::Tensor(&cpu_tensor(vec![1.0; 8], &[2, 4]))));
    assert!(!sig[0].matches(&Arg::Scalar(1.0)));
    assert!(!sig[1].matches(&Arg::Tensor(&a.to_dtype(DType::BF16).expect("bf16"))));
}

#[test]
fn dual_gemm_pairing_says_why_two_calls() {
    use crate::cuda::gemm::cublas::{plan_gemm, Matrix};
    let mat = |rows, cols, row_stride, col_stride| Matrix {
        address: 0x1000,
        batch: 1,
        rows,
        cols,
        batch_stride: 0,
        row_stride,
        col_stride,
    };
    let call = |a: Matrix, b: Matrix| plan_gemm(&a, &b).unwrap().call(DType::BF16).unwrap().unwrap();
    let (x, w) = (mat(3, 17, 17, 1), mat(17, 5, 1, 17));
    let c = call(x, w);
    let pair = |batching, other: &GemmCall, same_left, escape, weights| {
        dual_gemm_pairing_with(batching, &c, other, same_left, escape, weights)
            .map(|(swapped, p)| (swapped, p.weight_batch_stride()))
    };
    assert_eq!(pair(true, &c, true, false, [0x1000, 0x1000 + 170]), Ok((false, 85)));
    assert_eq!(pair(true, &c, true, false, [0x1000 + 170, 0x1000]), Ok((true, 85)));
    assert_eq!(pair(false, &c, true, false, [0x1000, 0x1000 + 170]), Err("FUSE_DUAL_GEMM=split"));
    assert_eq!(pair(true, &c, true, true, [0x1000, 0x1000 + 170]), Err("a product is an output of the function"));
    assert_eq!(pair(true, &c, false, false, [0x1000, 0x1000 + 170]), Err("the products have different left operands"));
    assert_eq!(pair(true, &c, true, false, [0x1000, 0x1000]), Err("the same weight twice"));
    assert_eq!(
        pair(true, &c, true, false, [0x1000, 0x1001]),
        Err("the weights are not a whole number of elements apart")
    );
    let other = call(x, mat(17, 5, 5, 1));
    assert_eq!(
        pair(true, &other, true, false, [0x1000, 0x2000]),
        Err("the two calls differ (shapes, strides or batching)")
    );
}

fn random(rng: &mut SmallRng, shape: &[usize], dtype: DType, dev: &Device) -> Tensor {
    let data: Vec<f32> = (0..shape.iter().product()).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    cpu_tensor(data, shape).to_dtype(dtype).and_then(|t| t.to_device(dev)).expect("a random tensor on the GPU")
}

/// `x + (silu(h wg^T) * (h wu^T)) wd^T` with `h = rms_norm(x, nw, eps)` (weights in [out, in] layout), or
/// without the norm and the residual: the Llama MLP.
fn mlp(with_norm_and_residual: bool) -> Graph {
    let mut g = Graph::new(if with_norm_and_residual { "block" } else { "mlp" });
    let x = g.input("x", ArgKind::Tensor);
    let w: Vec<_> = ["w_gate", "w_up", "w_down"]
        .iter()
        .map(|n| {
            let w = g.input(n, ArgKind::Tensor);
            g.transpose(w, "w.t()")
        })
        .collect();
    let h = if with_norm_and_residual {
        let nw = g.input("nw", ArgKind::Tensor);
        let eps = g.input("eps", ArgKind::Scalar);
        g.rms_norm(x, nw, eps, "rms_norm(x, nw, eps)")
    } else {
        x
    };
    let gate = g.matmul(h, w[0], "h.matmul(w_gate.t())");
    let act = g.unary(UnaryOp::Silu, gate, "silu(..)");
    let up = g.matmul(h, w[1], "h.matmul(w_up.t())");
    let prod = g.binary(BinaryOp::Mul, act, up, "silu(..) * ..");
    let down = g.matmul(prod, w[2], "..matmul(w_down.t())");
    g.outputs = vec![if with_norm_and_residual { g.binary(BinaryOp::Add, x, down, "x + ..") } else { down }];
    g
}

fn assert_matches_reference(what: &str, f: &FusedFn, args: &[Arg<'_>], fusion: Fusion, dtype: DType) {
    let want = reference(f, args).unwrap_or_else(|e| panic!("{what}: reference failed: {e}"));
    let got = f.call_with(args, fusion).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.shape(), w.shape(), "{what}: shape");
        let g: Vec<f32> = g.to_vec().expect("to_vec");
        let w: Vec<f32> = w.to_vec().expect("to_vec");
        assert!(g.iter().all(|v| v.is_finite()), "{what}: unwritten (NaN) elements");
        let err = rel_l2_error(&g, &w);
        let tol = if dtype == DType::F32 { 1e-4 } else { 2.5e-2 };
        assert!(err <= tol, "{what}: relative error {err:.3e} > {tol:.1e}");
    }
}

#[test]
fn replayed_calls_match_the_reference_as_inputs_scalars_and_weight_order_change() {
    let Some(dev) = crate::testing::gpu_or_skip() else { return };
    let (hidden, inter) = (48, 80);
    let mut rng = SmallRng::seed_from_u64(7);
    for with_norm in [false, true] {
        let f = FusedFn::from_graph(mlp(with_norm));
        for dtype in [DType::F32, DType::BF16] {
            let gate = random(&mut rng, &[inter, hidden], dtype, &dev);
            let up = random(&mut rng, &[inter, hidden], dtype, &dev);
            let down = random(&mut rng, &[hidden, inter], dtype, &dev);
            let nw = random(&mut rng, &[hidden], dtype, &dev);
            for rows in [3, 17] {
                for fusion in [Fusion::On, Fusion::Off] {
                    let before = REPLAYS.load(Ordering::Relaxed);
                    for call in 0..4 {
                        let x = random(&mut rng, &[rows, hidden], dtype, &dev);
                        // Call 2 swaps the two weights (the same signature, the other order in memory).
                        let (wg, wu) = if call == 2 { (&up, &gate) } else { (&gate, &up) };
                        let mut args = vec![Arg::Tensor(&x), Arg::Tensor(wg), Arg::Tensor(wu), Arg::Tensor(&down)];
                        if with_norm {
                            args.extend([Arg::Tensor(&nw), Arg::Scalar(1e-5 + call as f64)]);
                        }
                        let what = format!("{} {dtype} rows {rows} {fusion:?} call {call}", f.name());
                        assert_matches_reference(&what, &f, &args, fusion, dtype);
                    }
                    let replays = REPLAYS.load(Ordering::Relaxed) - before;
                    assert!(replays >= 3, "{} {dtype} rows {rows}: {replays} of 3 repeated calls replayed", f.name());
                }
            }
        }
    }
}
