//! The GEMM paths, each forced in turn (the skinny template in every config, and the library paths):
//! against the reference at odd shapes (rows 1, 3, 17, 100; output columns and inner sizes that are no
//! multiple of any tile), against cuBLAS at the Llama MLP's sizes at every M of BENCH.md, with an epilogue
//! that reads another input; and the autotuner's choice being recorded.

use crate::fused_fns::{ffn_block_fused, llama_mlp_fused};
use crate::{assert_close, gpu, random, rng, tolerance};
use fuse::ir::codegen::SKINNY_CONFIGS;
use fuse::prelude::*;

const ODD_ROWS: [usize; 4] = [1, 3, 17, 100];

/// Every GEMM path the tuner may choose: the library ones (paired and split cuBLAS, cuBLASLt's first
/// algorithm) and each skinny config.
fn every_path() -> Vec<String> {
    let library = ["cublas", "cublas:split", "cublaslt:0"].map(String::from);
    library.into_iter().chain(SKINNY_CONFIGS.iter().map(|c| format!("skinny:{}", c.name))).collect()
}

fn forced(path: &str, f: &FusedFn, args: &[fuse::Arg<'_>]) -> Vec<Tensor> {
    fuse::tune::with_gemm_choice(path, || f.call_with(args, Fusion::On)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_skinny_config_matches_the_reference_at_odd_shapes() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(81);
    // (hidden, intermediate): the dual GEMM is [m, h] x [i, h]^T, the down projection [m, i] x [h, i]^T.
    for (h, i) in [(264, 1000), (136, 4104)] {
        for dtype in [DType::BF16, DType::F16] {
            for rows in ODD_ROWS {
                let x = random(&mut r, &[rows, h], dtype, -1.0, 1.0, &dev);
                let wg = random(&mut r, &[i, h], dtype, -0.2, 0.2, &dev);
                let wu = random(&mut r, &[i, h], dtype, -0.2, 0.2, &dev);
                let wd = random(&mut r, &[h, i], dtype, -0.2, 0.2, &dev);
                let args = [fuse::arg(&x), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd)];
                let want = fuse::reference(llama_mlp_fused(), &args).expect("reference");
                for path in every_path() {
                    let got = forced(&path, llama_mlp_fused(), &args);
                    assert_close(&format!("llama_mlp {path} h={h} i={i} m={rows}"), &got[0], &want[0], dtype);
                }
            }
        }
    }
}

#[test]
fn the_skinny_epilogue_reads_other_inputs() {
    // ffn_block: rms_norm is its own group; the down projection's epilogue adds the residual x.
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(82);
    let (h, i) = (136, 1000);
    for rows in [1, 17] {
        let x = random(&mut r, &[rows, h], DType::BF16, -1.0, 1.0, &dev);
        let norm = random(&mut r, &[h], DType::BF16, 0.5, 1.5, &dev);
        let wg = random(&mut r, &[i, h], DType::BF16, -0.2, 0.2, &dev);
        let wu = random(&mut r, &[i, h], DType::BF16, -0.2, 0.2, &dev);
        let wd = random(&mut r, &[h, i], DType::BF16, -0.2, 0.2, &dev);
        let args = [fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd), fuse::arg(&1e-5f32)];
        let want = fuse::reference(ffn_block_fused(), &args).expect("reference");
        for config in SKINNY_CONFIGS {
            let path = format!("skinny:{}", config.name);
            let got = forced(&path, ffn_block_fused(), &args);
            assert_close(&format!("ffn_block {path} m={rows}"), &got[0], &want[0], DType::BF16);
        }
    }
}

#[test]
fn every_skinny_config_matches_cublas_at_the_llama_sizes() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(83);
    let (h, i) = (4096, 14336);
    let wg = random(&mut r, &[i, h], DType::BF16, -0.02, 0.02, &dev);
    let wu = random(&mut r, &[i, h], DType::BF16, -0.02, 0.02, &dev);
    let wd = random(&mut r, &[h, i], DType::BF16, -0.02, 0.02, &dev);
    for rows in [1, 4, 16, 64, 256, 1024, 4096] {
        let x = random(&mut r, &[rows, h], DType::BF16, -1.0, 1.0, &dev);
        let args = [fuse::arg(&x), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd)];
        let want = forced("cublas", llama_mlp_fused(), &args);
        for config in SKINNY_CONFIGS {
            let path = format!("skinny:{}", config.name);
            let got = forced(&path, llama_mlp_fused(), &args);
            // Both round to bf16 twice (h, then y); they differ by rounding, well inside the reference's tolerance.
            assert_close(&format!("llama_mlp {path} vs cublas m={rows}"), &got[0], &want[0], DType::BF16);
        }
    }
    assert!(tolerance(DType::BF16) < 0.05);
}

#[test]
fn a_forced_path_that_cannot_run_is_an_error_and_tuning_records_its_choice() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(84);
    // f32 operands: the template takes bf16 and f16 only.
    let (h, i) = (64, 96);
    let x = random(&mut r, &[3, h], DType::F32, -1.0, 1.0, &dev);
    let wg = random(&mut r, &[i, h], DType::F32, -0.2, 0.2, &dev);
    let wu = random(&mut r, &[i, h], DType::F32, -0.2, 0.2, &dev);
    let wd = random(&mut r, &[h, i], DType::F32, -0.2, 0.2, &dev);
    let args = [fuse::arg(&x), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd)];
    let path = format!("skinny:{}", SKINNY_CONFIGS[0].name);
    let err = fuse::tune::with_gemm_choice(&path, || llama_mlp_fused().call_with(&args, Fusion::On)).unwrap_err();
    assert!(err.to_string().contains("bf16 and f16"), "{err}");
    let err = fuse::tune::with_gemm_choice("warp-drive", || llama_mlp_fused().call_with(&args, Fusion::On)).unwrap_err();
    assert!(err.to_string().contains("warp-drive"), "{err}");

    // Tuning (FUSE_AUTOTUNE defaults to fast) keeps a result per group and rows bucket.
    let xb = random(&mut r, &[5, h], DType::BF16, -1.0, 1.0, &dev);
    let wb = |r: &mut _, s: &[usize]| random(r, s, DType::BF16, -0.2, 0.2, &dev);
    let (wg, wu, wd) = (wb(&mut r, &[i, h]), wb(&mut r, &[i, h]), wb(&mut r, &[h, i]));
    let args = [fuse::arg(&xb), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd)];
    let want = fuse::reference(llama_mlp_fused(), &args).expect("reference");
    let got = llama_mlp_fused().call_with(&args, Fusion::On).expect("tuned call");
    assert_close("llama_mlp tuned m=5", &got[0], &want[0], DType::BF16);
    if fuse::tune::mode() != fuse::tune::AutotuneMode::Off {
        let results = fuse::tune::results();
        let ours: Vec<_> = results.iter().filter(|e| e.group.starts_with("llama_mlp#") && e.group.contains(":n96:k64:")).collect();
        assert!(ours.iter().any(|e| e.rows_bucket == 8 && e.micros > 0.0), "no result for the dual GEMM at 5 rows: {results:?}");
    }
}
