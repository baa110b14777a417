//! The GEMM paths, each forced in turn (the skinny, wgmma and mma templates in every config, and the library
//! paths): against the reference at odd shapes (rows 1, 3, 17, 100, 300; output columns and inner sizes
//! that are no multiple of any tile), against cuBLAS at the Llama MLP's sizes at every M of BENCHMARKS.md, with
//! an epilogue that reads another input; and the autotuner's choice being recorded. The wgmma template
//! runs on sm_90 GPUs only: elsewhere its paths are skipped, visibly.

use crate::fused_fns::{
    computed_weight_projection_fused, ffn_block_fused, llama_mlp_fused, overwrite_rows_fused, projection_fused,
    scaled_projection_fused,
};
use crate::{assert_close, gpu, random, rng, tolerance};
use fuse::ir::codegen::{MMA_CONFIGS, SKINNY_CONFIGS, WGMMA_CONFIGS};
use fuse::prelude::*;

const ODD_ROWS: [usize; 4] = [1, 3, 17, 100];

/// The template configs that hold two products (a DualGemm's), as path names.
fn template_paths(dual: bool) -> Vec<String> {
    let skinny = SKINNY_CONFIGS.iter().map(|c| format!("skinny:{}", c.name));
    let wgmma = WGMMA_CONFIGS.iter().filter(|c| c.supports(dual)).map(|c| format!("wgmma:{}", c.name));
    skinny
        .chain(wgmma)
        .chain(MMA_CONFIGS.iter().filter(|c| c.supports(dual)).map(|c| format!("mma:{}", c.name)))
        .collect()
}

/// Every GEMM path the tuner may choose for the Llama MLP: the library ones (paired and split cuBLAS,
/// cuBLASLt's first algorithm) and each template config that holds its dual product.
fn every_path() -> Vec<String> {
    let library = ["cublas", "cublas:split", "cublaslt:0"].map(String::from);
    library.into_iter().chain(template_paths(true)).collect()
}

/// Whether this GPU runs `path` (the wgmma template: sm_90 only); says so when it does not.
fn runs_here(path: &str, f: &FusedFn, args: &[fuse::Arg<'_>]) -> bool {
    match fuse::tune::with_gemm_choice(path, || f.call_with(args, Fusion::On)) {
        Err(e) if path.starts_with("wgmma:") && e.to_string().contains("sm_90 GPUs only") => {
            eprintln!("gpu::skinny: SKIPPED {path} (this GPU is not sm_90): {e}");
            false
        }
        _ => true,
    }
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
                for path in every_path().into_iter().filter(|p| runs_here(p, llama_mlp_fused(), &args)) {
                    let got = forced(&path, llama_mlp_fused(), &args);
                    assert_close(&format!("llama_mlp {path} h={h} i={i} m={rows}"), &got[0], &want[0], dtype);
                }
            }
        }
    }
}

#[test]
fn the_skinny_prologue_and_epilogue_read_other_inputs() {
    // ffn_block: rms_norm is the dual GEMM's prologue (the skinny template runs it as it loads x: 100 rows
    // make several row blocks of every config), the down projection's epilogue adds the residual x.
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(82);
    let (h, i) = (136, 1000);
    for rows in [1, 3, 17, 64, 100] {
        let x = random(&mut r, &[rows, h], DType::BF16, -1.0, 1.0, &dev);
        let norm = random(&mut r, &[h], DType::BF16, 0.5, 1.5, &dev);
        let wg = random(&mut r, &[i, h], DType::BF16, -0.2, 0.2, &dev);
        let wu = random(&mut r, &[i, h], DType::BF16, -0.2, 0.2, &dev);
        let wd = random(&mut r, &[h, i], DType::BF16, -0.2, 0.2, &dev);
        let args =
            [fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd), fuse::arg(&1e-5f32)];
        let want = fuse::reference(ffn_block_fused(), &args).expect("reference");
        for path in template_paths(true).into_iter().filter(|p| runs_here(p, ffn_block_fused(), &args)) {
            let got = forced(&path, ffn_block_fused(), &args);
            assert_close(&format!("ffn_block {path} m={rows}"), &got[0], &want[0], DType::BF16);
        }
    }
}

/// Runs ffn_block on `path` at 3 rows when the parent test asks (`FUSE_PROLOGUE_CHILD`); nothing otherwise.
#[test]
fn prologue_child() {
    let Ok(path) = std::env::var("FUSE_PROLOGUE_CHILD") else { return };
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(86);
    let (rows, h, i) = (3, 64, 96);
    let x = random(&mut r, &[rows, h], DType::BF16, -1.0, 1.0, &dev);
    let norm = random(&mut r, &[h], DType::BF16, 0.5, 1.5, &dev);
    let [wg, wu] = [0; 2].map(|_| random(&mut r, &[i, h], DType::BF16, -0.2, 0.2, &dev));
    let wd = random(&mut r, &[h, i], DType::BF16, -0.2, 0.2, &dev);
    let args = [fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd), fuse::arg(&1e-5f32)];
    forced(&path, ffn_block_fused(), &args);
}

#[test]
fn the_skinny_template_runs_rms_norm_itself() {
    // FUSE_DEBUG=3 names each group's path: on the skinny path the dual GEMM normalises x as it loads it
    // (no prologue kernel, the normalised rows never written); on cuBLAS the prologue kernel writes them.
    let Some((_dev, _gpu)) = gpu() else { return };
    let run = |path: &str| {
        let exe = std::env::current_exe().expect("the test binary");
        let out = std::process::Command::new(exe)
            .args(["--exact", "skinny::prologue_child", "--nocapture", "--test-threads=1"])
            .env("FUSE_DEBUG", "3")
            .env("FUSE_PROLOGUE_CHILD", path)
            .output()
            .expect("runs the child");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{path}: {stderr}");
        stderr
    };
    let skinny = run("skinny:r8c16");
    assert!(skinny.contains("k0 dualgemm: matmul path: path skinny:r8c16 (forced); skinny (running the prologue as it loads the left operand)"), "{skinny}");
    let library = run("cublas");
    assert!(library.contains("k0 dualgemm: matmul path:") && !library.contains("running the prologue"), "{library}");
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
        for path in template_paths(true).into_iter().filter(|p| runs_here(p, llama_mlp_fused(), &args)) {
            let got = forced(&path, llama_mlp_fused(), &args);
            // Both round to bf16 twice (h, then y); they differ by rounding, well inside the reference's tolerance.
            assert_close(&format!("llama_mlp {path} vs cublas m={rows}"), &got[0], &want[0], DType::BF16);
        }
    }
    assert!(tolerance(DType::BF16, &dev) < 0.05);
}

#[test]
fn every_wgmma_config_runs_a_single_product_with_prologue_and_epilogue() {
    // scaled_projection: relu(x * row_scale) is a prologue kernel, tanh the template's epilogue; one
    // product, so the configs too large for two (wgmma BM 256, mma 128 x 128) run too. 300 rows: several
    // blocks of 256. The mma.sync template's configs run here as well.
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(85);
    for (k, n) in [(136, 1000), (264, 4104)] {
        for rows in [1, 3, 17, 100, 300] {
            let x = random(&mut r, &[rows, k], DType::BF16, -1.0, 1.0, &dev);
            let scale = random(&mut r, &[rows, 1], DType::BF16, 0.5, 1.5, &dev);
            let w = random(&mut r, &[n, k], DType::BF16, -0.2, 0.2, &dev);
            let args = [fuse::arg(&x), fuse::arg(&scale), fuse::arg(&w)];
            let want = fuse::reference(scaled_projection_fused(), &args).expect("reference");
            let paths = WGMMA_CONFIGS.iter().map(|c| format!("wgmma:{}", c.name));
            for path in paths.chain(MMA_CONFIGS.iter().map(|c| format!("mma:{}", c.name))) {
                if !runs_here(&path, scaled_projection_fused(), &args) {
                    continue;
                }
                let got = forced(&path, scaled_projection_fused(), &args);
                assert_close(&format!("scaled_projection {path} k={k} n={n} m={rows}"), &got[0], &want[0], DType::BF16);
            }
        }
    }
    // Two products do not fit wgmma's BM 256 or mma's 128 x 128: forcing them on the MLP's dual GEMM is an
    // error that says so.
    let x = random(&mut r, &[5, 64], DType::BF16, -1.0, 1.0, &dev);
    let w = random(&mut r, &[96, 64], DType::BF16, -0.2, 0.2, &dev);
    let wd = random(&mut r, &[64, 96], DType::BF16, -0.2, 0.2, &dev);
    let args = [fuse::arg(&x), fuse::arg(&w), fuse::arg(&w), fuse::arg(&wd)];
    for path in ["wgmma:n256", "mma:m128n128"] {
        match fuse::tune::with_gemm_choice(path, || llama_mlp_fused().call_with(&args, Fusion::On)) {
            Err(e) => {
                assert!(e.to_string().contains("two products") || e.to_string().contains("sm_90 GPUs only"), "{e}")
            }
            Ok(_) => panic!("{path} ran a dual GEMM"),
        }
    }
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
    let err =
        fuse::tune::with_gemm_choice("warp-drive", || llama_mlp_fused().call_with(&args, Fusion::On)).unwrap_err();
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
        let ours: Vec<_> =
            results.iter().filter(|e| e.group.starts_with("llama_mlp#") && e.group.contains(":n96:k64:")).collect();
        assert!(
            ours.iter().any(|e| e.rows_bucket == 8 && e.micros > 0.0),
            "no result for the dual GEMM at 5 rows: {results:?}"
        );
    }
}

#[test]
fn a_weight_computed_by_the_kernel_before_is_read_after_it_is_written() {
    // The skinny kernels copy their first weight chunks before waiting for the kernel before them only where
    // the weights are arguments of the function: here the weight is the output of that kernel (poisoned with
    // NaN while it is being computed, fresh on every call), so an early copy would read it unwritten.
    let plan = computed_weight_projection_fused().plan(Fusion::On).expect("plan");
    let kinds: Vec<_> = plan.groups.iter().map(|g| g.kind).collect();
    assert_eq!(
        kinds,
        [fuse::ir::GroupKind::Pointwise, fuse::ir::GroupKind::Gemm],
        "the weight's kernel runs just before the GEMM's"
    );
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(89);
    for (rows, n, k) in [(1, 100, 264), (3, 1000, 136), (17, 40, 1000)] {
        let x = random(&mut r, &[rows, k], DType::BF16, -1.0, 1.0, &dev);
        let w = random(&mut r, &[n, k], DType::BF16, -0.2, 0.2, &dev);
        let w_scale = random(&mut r, &[1, k], DType::BF16, 0.5, 1.5, &dev);
        let args = [fuse::arg(&x), fuse::arg(&w), fuse::arg(&w_scale)];
        let want = fuse::reference(computed_weight_projection_fused(), &args).expect("reference");
        for config in SKINNY_CONFIGS {
            let path = format!("skinny:{}", config.name);
            for _ in 0..3 {
                let got = forced(&path, computed_weight_projection_fused(), &args);
                assert_close(&format!("computed weight {path} m={rows} n={n} k={k}"), &got[0], &want[0], DType::BF16);
            }
        }
    }
}

#[test]
fn a_weight_written_in_place_is_read_after_the_write() {
    // A weight only the host wrote may be read before the grid wait whatever kernel runs before; a call that
    // writes it in place (slice_set) ends that before it launches anything, so the projection queued right
    // after the write (no wait between the calls) reads the new rows.
    overwrite_rows_fused().plan(Fusion::On).expect("a slice_set into an argument plans");
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(91);
    for (rows, n, k) in [(1, 100, 264), (3, 40, 1000)] {
        let x = random(&mut r, &[rows, k], DType::BF16, -1.0, 1.0, &dev);
        for config in SKINNY_CONFIGS {
            let path = format!("skinny:{}", config.name);
            let w = random(&mut r, &[n, k], DType::BF16, -0.2, 0.2, &dev);
            forced(&path, projection_fused(), &[fuse::arg(&x), fuse::arg(&w)]);
            let new_rows = random(&mut r, &[n / 2, k], DType::BF16, -0.2, 0.2, &dev);
            let at = Tensor::from_vec(vec![(n / 4) as u32], &[1], &dev).expect("at");
            overwrite_rows_fused().call(&[fuse::arg(&w), fuse::arg(&new_rows), fuse::arg(&at)]).expect("overwrite");
            let got = forced(&path, projection_fused(), &[fuse::arg(&x), fuse::arg(&w)]);
            let want = fuse::reference(projection_fused(), &[fuse::arg(&x), fuse::arg(&w)]).expect("reference");
            assert_close(
                &format!("projection after an in-place write {path} m={rows} n={n} k={k}"),
                &got[0],
                &want[0],
                DType::BF16,
            );
        }
    }
}

#[test]
fn queued_calls_whose_kernels_overlap_each_read_finished_inputs() {
    // On sm_90 and later fuse launches each kernel to overlap the one before it (programmatic dependent
    // launch); each kernel waits for that one before it touches memory. Calls queued with no
    // synchronisation between them, each a chain of dependent kernels (the rms_norm prologue, the dual GEMM,
    // the down projection adding the residual), must each match the reference: a kernel reading before its
    // wait would see the previous call's values or unwritten (NaN-poisoned) memory.
    let Some((dev, _gpu)) = gpu() else { return };
    let Device::Cuda(cuda) = &dev else { panic!("gpu() gave {dev}") };
    let major: u32 = cuda.arch().trim_start_matches("sm_").trim_end_matches('a').parse::<u32>().expect("sm_NN") / 10;
    let pdl_off = std::env::var("FUSE_PDL").is_ok_and(|v| matches!(v.trim(), "off" | "0" | "false"));
    assert_eq!(cuda.overlaps_launches(), major >= 9 && !pdl_off, "{} with FUSE_PDL off: {pdl_off}", cuda.arch());
    let mut r = rng(87);
    let (h, i) = (136, 1000);
    let norm = random(&mut r, &[h], DType::BF16, 0.5, 1.5, &dev);
    let [wg, wu] = [0; 2].map(|_| random(&mut r, &[i, h], DType::BF16, -0.2, 0.2, &dev));
    let wd = random(&mut r, &[h, i], DType::BF16, -0.2, 0.2, &dev);
    for rows in [1, 3, 17] {
        let xs: Vec<Tensor> = (0..8).map(|_| random(&mut r, &[rows, h], DType::BF16, -1.0, 1.0, &dev)).collect();
        for path in ["tuned", "skinny:r8c16", "wgmma:n16", "cublas"] {
            let call = |x: &Tensor| {
                let args = [
                    fuse::arg(x),
                    fuse::arg(&norm),
                    fuse::arg(&wg),
                    fuse::arg(&wu),
                    fuse::arg(&wd),
                    fuse::arg(&1e-5f32),
                ];
                if path == "tuned" {
                    return ffn_block_fused().call_with(&args, Fusion::On).expect("tuned call");
                }
                forced(path, ffn_block_fused(), &args)
            };
            if path.starts_with("wgmma:") && major != 9 {
                eprintln!("gpu::skinny: SKIPPED {path} (this GPU is not sm_90)");
                continue;
            }
            let got: Vec<Vec<Tensor>> = xs.iter().map(call).collect();
            for (x, got) in xs.iter().zip(&got) {
                let args = [
                    fuse::arg(x),
                    fuse::arg(&norm),
                    fuse::arg(&wg),
                    fuse::arg(&wu),
                    fuse::arg(&wd),
                    fuse::arg(&1e-5f32),
                ];
                let want = fuse::reference(ffn_block_fused(), &args).expect("reference");
                assert_close(&format!("ffn_block {path} queued m={rows}"), &got[0], &want[0], DType::BF16);
            }
        }
    }
}

#[test]
fn repeated_calls_of_every_template_config_are_bit_identical() {
    // A race on a shared-memory buffer (the skinny template's staged-X ring shared by 2, 4 or 8 warps, the
    // cross-warp K reduction that reuses the weight ring, wgmma's and mma's rings) shows as a result that
    // changes from one run to the next: the templates sum in a fixed order, so every repeat must equal the
    // first bit for bit. Shapes put several warps on each buffer: 17 and 64 rows (several row tiles of the
    // 8- and 16-row configs, full tiles of the 64-row ones), K = 1288 for the down projection (each warp's
    // ring wraps around), 1288 columns (no multiple of any block's).
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(88);
    let (h, i) = (136, 1288);
    let norm = random(&mut r, &[h], DType::BF16, 0.5, 1.5, &dev);
    let [wg, wu] = [0; 2].map(|_| random(&mut r, &[i, h], DType::BF16, -0.2, 0.2, &dev));
    let wd = random(&mut r, &[h, i], DType::BF16, -0.2, 0.2, &dev);
    const REPEATS: usize = 60;
    for rows in [17, 64] {
        let x = random(&mut r, &[rows, h], DType::BF16, -1.0, 1.0, &dev);
        let args =
            [fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd), fuse::arg(&1e-5f32)];
        let want = fuse::reference(ffn_block_fused(), &args).expect("reference");
        for path in template_paths(true).into_iter().filter(|p| runs_here(p, ffn_block_fused(), &args)) {
            let first = forced(&path, ffn_block_fused(), &args);
            assert_close(&format!("ffn_block {path} m={rows}"), &first[0], &want[0], DType::BF16);
            let bits =
                |t: &Tensor| -> Vec<u32> { t.to_vec::<f32>().expect("to_vec").iter().map(|v| v.to_bits()).collect() };
            let first = bits(&first[0]);
            // Queued back to back (no host round trip between them), then read back one by one.
            let runs: Vec<Tensor> = (0..REPEATS).map(|_| forced(&path, ffn_block_fused(), &args).remove(0)).collect();
            for (n, run) in runs.iter().enumerate() {
                let got = bits(run);
                if let Some(e) = got.iter().zip(&first).position(|(a, b)| a != b) {
                    panic!(
                        "ffn_block {path} m={rows}: repeat {n} differs from the first run at element {e} ({} vs {})",
                        f32::from_bits(got[e]),
                        f32::from_bits(first[e])
                    );
                }
            }
        }
    }
}
