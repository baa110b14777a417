//! The kernels against fuse_ir's reference decoder (products in f64), each SIMD path against the scalar one of
//! its strategy, determinism across thread counts, and the errors for bad input.

use super::*;
use fuse_ir::quant::{dequantize_to_vec, random_blocks};

/// Seeded values in [-1, 1).
fn random_x(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = fuse_ir::SplitMix64::new(seed);
    (0..len).map(|_| 2.0 * rng.unit() - 1.0).collect()
}

fn weights(dtype: DType, n: usize, k: usize, seed: u64) -> Vec<u8> {
    random_blocks(dtype, n * k / dtype.block().unwrap().elements, seed)
}

/// x (m x k) times the rows of `wf` (n x k), in f64; and the sums of the terms' magnitudes.
fn reference(x: &[f32], m: usize, k: usize, wf: &[f32], n: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut out, mut abs) = (vec![0.0; m * n], vec![0.0; m * n]);
    for i in 0..m {
        for j in 0..n {
            let t = (0..k).map(|kk| x[i * k + kk] as f64 * wf[j * k + kk] as f64);
            out[i * n + j] = t.clone().sum();
            abs[i * n + j] = t.map(f64::abs).sum();
        }
    }
    (out, abs)
}

/// The L2 error relative to the L2 norm of the terms' magnitudes: f32 summation's error is proportional to it
/// (a bare relative error is not: one output of a few terms can cancel to nearly nothing).
fn rel_terms(got: &[f32], (want, abs): &(Vec<f64>, Vec<f64>)) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    (num / abs.iter().map(|a| a * a).sum::<f64>().max(1e-300)).sqrt()
}

fn rel_l2(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den.max(1e-300)).sqrt()
}

fn run(dtype: DType, x: &[f32], m: usize, k: usize, w: &[u8], n: usize, s: Strategy, isa: Isa) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * n];
    matmul_quantized_with(dtype, x, m, k, w, n, &mut out, s, isa).unwrap();
    out
}

const MS: [usize; 3] = [1, 3, 17];
const NS: [usize; 3] = [1, 7, 65];
const BLOCKS: [usize; 3] = [1, 3, 10];

fn isas() -> Vec<Isa> {
    let (on, off): (Vec<Isa>, Vec<Isa>) = Isa::ALL.into_iter().partition(|i| i.available());
    if !off.is_empty() {
        eprintln!("instruction sets not on this CPU, skipped: {off:?}");
    }
    on
}

#[test]
fn f32_strategy_matches_reference() {
    for isa in isas() {
        let mut worst = 0.0f64;
        for dtype in DType::QUANTIZED {
            let e = dtype.block().unwrap().elements;
            for (si, &blocks) in BLOCKS.iter().enumerate() {
                let k = blocks * e;
                for &n in &NS {
                    let w = weights(dtype, n, k, 7 + si as u64 + n as u64);
                    let wf = dequantize_to_vec(dtype, &w).unwrap();
                    for &m in &MS {
                        let x = random_x(m * k, (m * 31 + n) as u64);
                        let want = reference(&x, m, k, &wf, n);
                        let got = run(dtype, &x, m, k, &w, n, Strategy::F32, isa);
                        let err = rel_terms(&got, &want);
                        assert!(err < 1e-5, "{isa:?} {} m {m} n {n} k {k}: relative error {err:e}", dtype.name());
                        worst = worst.max(err);
                    }
                }
            }
        }
        eprintln!("f32 strategy, {isa:?}: worst relative L2 error {worst:.2e}");
    }
}

/// The two-term 8-bit activations: within 1e-4 of the reference (relative to the products' terms) for every
/// type and shape, where one 8-bit term is ~4e-3 off (so a lost second term fails).
#[test]
fn q8_residual_strategy_is_nearly_exact() {
    for isa in isas() {
        let mut worst = 0.0f64;
        for dtype in DType::QUANTIZED {
            let e = dtype.block().unwrap().elements;
            for (si, &blocks) in BLOCKS.iter().enumerate() {
                let k = blocks * e;
                for &n in &NS {
                    let w = weights(dtype, n, k, 40 + si as u64 + n as u64);
                    let wf = dequantize_to_vec(dtype, &w).unwrap();
                    for &m in &MS {
                        let x = random_x(m * k, (m * 13 + n + 1) as u64);
                        let want = reference(&x, m, k, &wf, n);
                        let err = rel_terms(&run(dtype, &x, m, k, &w, n, Strategy::Q8Residual, isa), &want);
                        assert!(err < 1e-4, "{isa:?} {} m {m} n {n} k {k}: relative error {err:e}", dtype.name());
                        worst = worst.max(err);
                    }
                }
            }
        }
        eprintln!("two-term 8-bit strategy, {isa:?}: worst relative error {worst:.2e}");
    }
}

/// Strategy 2's error is x's rounding to 8 bits: `out - ref = sum_kk e[kk] W[j][kk]` with |e| <= d / 2 of its block,
/// so each output is within `sum_kk |W[j][kk]| d / 2` of the reference (asserted for every output), and with e
/// uniform the expected square error is `sum_kk W[j][kk]^2 d^2 / 12` (the total over all shapes of a type is
/// asserted within 1.5 x that prediction). The integer arithmetic is checked tightly against the f64 product with
/// the quantized x.
#[test]
fn q8_strategy_matches_reference() {
    for isa in isas() {
        let (mut worst_ratio, mut worst_exact) = (0.0f64, 0.0f64);
        for dtype in DType::QUANTIZED {
            let e = dtype.block().unwrap().elements;
            let (mut sq_err, mut sq_predicted, mut headline) = (0.0, 0.0, 0.0);
            for (si, &blocks) in BLOCKS.iter().enumerate() {
                let k = blocks * e;
                for &n in &NS {
                    let w = weights(dtype, n, k, 100 + si as u64 + n as u64);
                    let wf = dequantize_to_vec(dtype, &w).unwrap();
                    for &m in &MS {
                        let x = random_x(m * k, (m * 17 + n + 5) as u64);
                        let got = run(dtype, &x, m, k, &w, n, Strategy::Q8, isa);
                        let want = reference(&x, m, k, &wf, n);
                        let acts = quantize_activations(dtype, &x, m, k);
                        let xq: Vec<f32> = (0..m * k).map(|i| acts.d[i / acts.block] * acts.qs[i] as f32).collect();
                        let exact = rel_terms(&got, &reference(&xq, m, k, &wf, n));
                        assert!(
                            exact < 1e-5,
                            "{isa:?} {} m {m} n {n} k {k}: {exact:e} from the quantized x",
                            dtype.name()
                        );
                        worst_exact = worst_exact.max(exact);
                        for i in 0..m {
                            for j in 0..n {
                                let d = |kk: usize| acts.d[(i * k + kk) / acts.block] as f64;
                                let wv = |kk: usize| wf[j * k + kk] as f64;
                                let bound: f64 = (0..k).map(|kk| wv(kk).abs() * d(kk) / 2.0).sum();
                                let got_err = (got[i * n + j] as f64 - want.0[i * n + j]).abs();
                                assert!(
                                    got_err <= bound * 1.001 + 1e-5 * want.1[i * n + j],
                                    "{isa:?} {} m {m} n {n} k {k} ({i}, {j}): error {got_err:e}, bound {bound:e}",
                                    dtype.name()
                                );
                                sq_err += got_err * got_err;
                                sq_predicted += (0..k).map(|kk| (wv(kk) * d(kk)).powi(2)).sum::<f64>() / 12.0;
                            }
                        }
                        if (m, n, blocks) == (17, 65, 10) {
                            headline = rel_l2(&got, &want.0);
                        }
                    }
                }
            }
            let ratio = (sq_err / sq_predicted).sqrt();
            assert!(ratio < 1.5, "{isa:?} {}: error {ratio} x the predicted rounding error", dtype.name());
            worst_ratio = worst_ratio.max(ratio);
            eprintln!(
                "q8 strategy, {isa:?} {}: relative L2 error {headline:.2e} (m 17, n 65, k {})",
                dtype.name(),
                10 * e
            );
        }
        eprintln!(
            "q8 strategy, {isa:?}: error at most {worst_ratio:.2} x the predicted rounding error, {worst_exact:.2e} \
             against the product with the quantized x"
        );
    }
}

#[test]
fn simd_equals_scalar() {
    for isa in isas().into_iter().filter(|&i| i != Isa::Scalar) {
        for strategy in [Strategy::F32, Strategy::Q8, Strategy::Q8Residual] {
            for dtype in DType::QUANTIZED {
                let k = 10 * dtype.block().unwrap().elements;
                let n = 65;
                let w = weights(dtype, n, k, 3);
                // Every count of rows a kernel call takes (up to 8 on AVX-512: 17 is 8 + 8 + 1).
                for m in [5, 6, 7, 17] {
                    let x = random_x(m * k, 4);
                    let want: Vec<f64> =
                        run(dtype, &x, m, k, &w, n, strategy, Isa::Scalar).iter().map(|&v| v as f64).collect();
                    let err = rel_l2(&run(dtype, &x, m, k, &w, n, strategy, isa), &want);
                    assert!(err < 1e-6, "{isa:?} {strategy:?} {} m {m}: {err:e} from scalar", dtype.name());
                }
            }
        }
        eprintln!("{isa:?} equals scalar for both strategies and every type");
    }
}

/// The K types' 8-bit kernels with every count of rows a call (1-4, and 1-8 for the AVX-512 ones under
/// `Strategy::Q8`: m up to 9 splits into 8 + 1), through both 8-bit strategies, odd n and one or several blocks,
/// against the scalar kernel.
#[test]
fn k_kernels_equal_scalar_for_every_row_count() {
    for isa in isas().into_iter().filter(|&i| i != Isa::Scalar) {
        for strategy in [Strategy::Q8, Strategy::Q8Residual] {
            for dtype in [DType::Q4_K, DType::Q5_K, DType::Q6_K] {
                for (blocks, n) in [(1, 5), (3, 19), (2, 33)] {
                    let k = 256 * blocks;
                    let w = weights(dtype, n, k, 11 + n as u64);
                    for m in 1..=9 {
                        let x = random_x(m * k, 12 + m as u64);
                        let want: Vec<f64> =
                            run(dtype, &x, m, k, &w, n, strategy, Isa::Scalar).iter().map(|&v| v as f64).collect();
                        let err = rel_l2(&run(dtype, &x, m, k, &w, n, strategy, isa), &want);
                        assert!(err < 1e-6, "{isa:?} {strategy:?} {} m {m} n {n} k {k}: {err:e}", dtype.name());
                    }
                }
            }
        }
    }
}

#[test]
fn deterministic_across_threads_and_row_groups() {
    let pool = |t| rayon::ThreadPoolBuilder::new().num_threads(t).build().unwrap();
    for isa in isas() {
        for strategy in [Strategy::F32, Strategy::Q8, Strategy::Q8Residual] {
            for dtype in DType::QUANTIZED {
                let k = 3 * dtype.block().unwrap().elements;
                let (m, n) = (130, 37);
                let w = weights(dtype, n, k, 9);
                let x = random_x(m * k, 10);
                let one = pool(1).install(|| run(dtype, &x, m, k, &w, n, strategy, isa));
                let two = pool(2).install(|| run(dtype, &x, m, k, &w, n, strategy, isa));
                let three = pool(3).install(|| run(dtype, &x, m, k, &w, n, strategy, isa));
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&one), bits(&two), "{isa:?} {strategy:?} {}", dtype.name());
                assert_eq!(bits(&one), bits(&three), "{isa:?} {strategy:?} {}", dtype.name());
                // A row's result does not depend on the rows computed with it: among a decode step's few rows
                // (alone or with 16 others) and among a prefill's (from Q8_MIN_ROWS rows, where AMX takes the
                // two-term products of the 32-value types), wherever the row sits.
                let few = run(dtype, &x[..17 * k], 17, k, &w, n, strategy, isa);
                for i in [0, 5, 16] {
                    let alone = run(dtype, &x[i * k..][..k], 1, k, &w, n, strategy, isa);
                    assert_eq!(bits(&alone), bits(&few[i * n..][..n]), "{isa:?} {strategy:?} {} row {i}", dtype.name());
                }
                let rows = Q8_MIN_ROWS + 3;
                let window = run(dtype, &x[90 * k..][..rows * k], rows, k, &w, n, strategy, isa);
                for i in [90, 100, 90 + rows - 1] {
                    let (a, b) = (&window[(i - 90) * n..][..n], &one[i * n..][..n]);
                    assert_eq!(bits(a), bits(b), "{isa:?} {strategy:?} {} row {i} of {rows}", dtype.name());
                }
            }
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let (k, n, m) = (64, 3, 2);
    let w = weights(DType::Q4_0, n, k, 1);
    let x = random_x(m * k, 2);
    let mut out = vec![0.0; m * n];
    let err =
        |dtype, x: &[f32], m, k, w: &[u8], n, out: &mut [f32]| matmul_quantized(dtype, x, m, k, w, n, out).unwrap_err();
    assert!(err(DType::F32, &x, m, k, &w, n, &mut out).contains("not a block-quantized type"));
    assert!(err(DType::Q4_0, &x[..m * 48], m, 48, &w, n, &mut out).contains("not a multiple"));
    assert!(err(DType::Q4_0, &x[1..], m, k, &w, n, &mut out).contains("x has"));
    assert!(err(DType::Q4_0, &x, m, k, &w[1..], n, &mut out).contains("w has"));
    assert!(err(DType::Q4_0, &x, m, k, &w, n, &mut out[1..]).contains("out has"));
    assert!(err(DType::Q4_K, &x, m, k, &w, n, &mut out).contains("not a multiple"));
    assert!(err(DType::Q4_0, &x, usize::MAX, k, &w, n, &mut out).contains("overflows"));
    for isa in Isa::ALL.into_iter().filter(|i| !i.available()) {
        let e = matmul_quantized_with(DType::Q4_0, &x, m, k, &w, n, &mut out, Strategy::F32, isa).unwrap_err();
        assert!(e.contains("not available"));
    }
    // Empty shapes are fine.
    matmul_quantized(DType::Q4_0, &[], 0, k, &w, n, &mut []).unwrap();
    let mut zero = vec![1.0; m * n];
    matmul_quantized(DType::Q4_0, &[], m, 0, &[], n, &mut zero).unwrap();
    assert!(zero.iter().all(|&v| v == 0.0));
    // dot_row agrees with the f32 product.
    matmul_quantized_with(DType::Q4_0, &x, m, k, &w, n, &mut out, Strategy::F32, Isa::detect()).unwrap();
    assert_eq!(dot_row(DType::Q4_0, &w[..36], &x[..k]), out[0]);
}

/// The AMX tiles' products (2 x 2 tiles of 16 weight rows and 16 activation rows, rows past n or m padded)
/// against the AVX-512 and AVX2 kernels on the same 8-bit activations, at shapes that leave partial tiles
/// of both and span several tasks: equal up to f32 summation order.
#[test]
fn amx_tiles_match_the_vnni_kernels() {
    if !Isa::Amx.available() {
        eprintln!("AMX not on this CPU (or not granted): skipped");
        return;
    }
    // The K types under one 8-bit term, the 32-value types under two (their strategies on AMX).
    for (dtype, strategy) in [
        (DType::Q4_K, Strategy::Q8),
        (DType::Q5_K, Strategy::Q8),
        (DType::Q6_K, Strategy::Q8),
        (DType::Q4_0, Strategy::Q8Residual),
        (DType::Q4_1, Strategy::Q8Residual),
        (DType::Q8_0, Strategy::Q8Residual),
    ] {
        for (m, n, blocks) in [(16, 16, 1), (40, 33, 9), (130, 100, 2), (5, 250, 8), (33, 47, 3)] {
            let k = dtype.block().unwrap().elements * blocks;
            let w = weights(dtype, n, k, 70 + m as u64);
            let x = random_x(m * k, 71 + n as u64);
            let want: Vec<f64> =
                run(dtype, &x, m, k, &w, n, strategy, Isa::Avx512Vnni).iter().map(|&v| v as f64).collect();
            let got = run(dtype, &x, m, k, &w, n, strategy, Isa::Amx);
            let err = rel_l2(&got, &want);
            assert!(err < 1e-6, "AMX {} m {m} n {n} k {k}: {err:e} from the VNNI kernels", dtype.name());
        }
    }
}

/// The activations' 8-bit rows with AVX-512 equal the portable code's value for value (a zero block, values
/// that scale to halves of a step, both block sizes), and so do the two-term rows built from them.
#[test]
fn activation_rows_quantize_alike_with_and_without_simd() {
    use super::q8::{quantize_residual_row_with, quantize_row_with, simd};
    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for block in [32, 256] {
        for seed in 0..4u64 {
            let k = block * 5;
            let mut x = random_x(k, 90 + seed);
            x[block..2 * block].fill(0.0);
            // A block whose largest value is 127: its others are exact halves (0.5, 1.5, ..) after scaling.
            for (j, v) in x[2 * block..3 * block].iter_mut().enumerate() {
                *v = if j == 0 { 127.0 } else { (j % 40) as f32 - 19.5 };
            }
            // Both terms: the row, then its residual at 1/256 of the first scale (some residuals at exact halves).
            let terms = |simd: bool| {
                let zeros = || (vec![0i8; k], vec![0f32; k / block], vec![0i16; k / 16], vec![0f32; k / 32]);
                let (mut q, mut d, mut b, mut g) = zeros();
                quantize_row_with(simd, &x, block, &mut q, &mut d, &mut b, &mut g);
                let mut r: Vec<f32> = x.iter().enumerate().map(|(j, &v)| v - d[j / block] * q[j] as f32).collect();
                r[3 * block..3 * block + 40]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(j, v)| *v = (j as f32 - 20.5) * d[3] / 256.0);
                let (mut q2, mut d2, mut b2, mut g2) = zeros();
                quantize_residual_row_with(simd, &r, block, &d, &mut q2, &mut d2, &mut b2, &mut g2);
                (q, bits(&d), b, bits(&g), q2, bits(&d2), b2, bits(&g2))
            };
            assert_eq!(terms(simd()), terms(false), "block {block}, seed {seed}");
        }
    }
}
