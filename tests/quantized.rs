//! Block-quantized weights (GGUF's Q4_0 .. Q6_K) as operands: made from bytes as a file stores them, read
//! in place, dequantized by `to_dtype`, multiplied as a matmul's right operand (eager and inside `#[fuse]`,
//! the prologue and epilogue fusing as they do for float weights), looked up by `embedding`; everything else
//! an error that says what reads blocks. Every product is checked against the reference interpreter on the
//! dequantized values (gguf-py's, by `fuse_ir::quant`'s own test), at odd shapes.

use fuse::ir::quant::{dequantize_to_vec, random_blocks};
use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};
use std::sync::Arc;

/// A product with block-quantized weights against the reference on the dequantized values. The CPU's default
/// keeps the activations in f32 (within 2e-5); with `FUSE_CPU_QUANT=q8` it rounds each activation row to 8
/// bits first, as llama.cpp does: 3.6-3.9e-3 relative L2 over ten blocks a row, up to 1.7e-2 for a single block
/// of 32 (no averaging, sums of random signs that nearly cancel). The bound admits both; a wrong scale or nibble
/// order gives errors of order 1, and `fuse-runtime/src/cpu/quant/tests.rs` holds each strategy to its own.
fn assert_quantized_close(what: &str, got: &Tensor, want: &Tensor) {
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let err = fuse::rel_l2_error(&g, &w);
    assert!(err < 5e-2, "{what}: relative L2 error {err:.3e} against the reference");
}

/// A random `[rows, cols]` tensor of `dtype` (cols a multiple of its block) and its values.
fn weights(dtype: DType, rows: usize, cols: usize, seed: u64) -> (Tensor, Vec<f32>) {
    let blocks = rows * cols / dtype.block().unwrap().elements;
    let bytes = random_blocks(dtype, blocks, seed);
    let values = dequantize_to_vec(dtype, &bytes).unwrap();
    (Tensor::from_blocks(dtype, &[rows, cols], bytes, &Device::Cpu).unwrap(), values)
}

#[fuse]
fn projection(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    x.matmul(&w.t()?)
}

/// rms_norm into the GEMM's left operand, silu of the product, a residual: the group fuses as for floats.
#[fuse]
fn normed_projection(x: &Tensor, norm: &Tensor, w: &Tensor, residual: &Tensor) -> Result<Tensor> {
    let h = rms_norm(x, norm, 1e-5)?;
    Ok((silu(&h.matmul(&w.t()?)?)? + residual)?)
}

#[test]
fn every_block_type_is_a_matmuls_right_operand_eager_and_fused() {
    let dev = Device::Cpu;
    let mut r = TestRng::new(5);
    for (t, dtype) in DType::QUANTIZED.into_iter().enumerate() {
        let per = dtype.block().unwrap().elements;
        for (m, n, blocks) in [(1, 7, 1), (3, 65, 3), (17, 1, 2)] {
            let k = blocks * per;
            let (w, values) = weights(dtype, n, k, 100 + t as u64);
            let x = random(&mut r, &[m, k], DType::F32, -1.0, 1.0, &dev);
            let args = [fuse::arg(&x), fuse::arg(&w)];
            let want = fuse::reference(projection_fused(), &args).unwrap();
            let what = format!("{dtype} [{m}, {k}] x [{n}, {k}]^T");
            assert_quantized_close(&format!("#[fuse] {what}"), &projection(&x, &w).unwrap(), &want[0]);
            assert_quantized_close(&format!("eager {what}"), &x.matmul(&w.t().unwrap()).unwrap(), &want[0]);
            // The reference read the blocks' values: the same product of the dequantized matrix.
            let dense = Tensor::from_vec(values.clone(), &[n, k], &dev).unwrap();
            assert_close(&format!("dense {what}"), &projection(&x, &dense).unwrap(), &want[0], DType::F32, &dev);
        }
    }
}

#[test]
fn prologues_and_epilogues_fuse_around_a_quantized_gemm() {
    let dev = Device::Cpu;
    let mut r = TestRng::new(9);
    for dtype in [DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q4_1] {
        let (m, n, k) = (4, 33, 512);
        let (w, _) = weights(dtype, n, k, 3);
        let x = random(&mut r, &[m, k], DType::F32, -1.0, 1.0, &dev);
        let norm = random(&mut r, &[k], DType::F32, 0.5, 1.5, &dev);
        let residual = random(&mut r, &[m, n], DType::F32, -1.0, 1.0, &dev);
        let args = [fuse::arg(&x), fuse::arg(&norm), fuse::arg(&w), fuse::arg(&residual)];
        let want = fuse::reference(normed_projection_fused(), &args).unwrap();
        let got = normed_projection(&x, &norm, &w, &residual).unwrap();
        assert_quantized_close(&format!("rms_norm + {dtype} GEMM + silu + residual"), &got, &want[0]);
        let plan = normed_projection_fused().explain(&args).unwrap();
        assert!(plan.contains(dtype.name()), "explain says which format the GEMM reads:\n{plan}");
    }
}

#[test]
fn to_dtype_dequantizes_as_ggml_does() {
    for dtype in DType::QUANTIZED {
        let (w, values) = weights(dtype, 3, 2 * dtype.block().unwrap().elements, 11);
        assert_eq!((w.dtype(), w.shape()), (dtype, &[3, values.len() / 3][..]), "shown as the file has it");
        assert_eq!(w.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(), values, "{dtype} -> f32");
        let bf16: Vec<half::bf16> = w.to_dtype(DType::BF16).unwrap().to_vec().unwrap();
        assert!(bf16.iter().zip(&values).all(|(b, &v)| *b == half::bf16::from_f32(v)), "{dtype} -> bf16");
        // A transposed view reads the same values, moved.
        let t = w.t().unwrap().to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        let cols = values.len() / 3;
        assert_eq!(t[cols.min(5) * 3 + 1], values[cols + cols.min(5)], "{dtype}: the transposed view");
    }
}

#[test]
fn a_quantized_embedding_table_gives_its_rows_dequantized() {
    let dtype = DType::Q6_K;
    let (table, values) = weights(dtype, 9, 256, 4);
    let ids = Tensor::from_vec(vec![8u32, 0, 3, 3], &[4], &Device::Cpu).unwrap();
    let rows = embedding(&ids, &table).unwrap();
    assert_eq!((rows.dtype(), rows.shape()), (DType::F32, &[4, 256][..]));
    let got = rows.to_vec::<f32>().unwrap();
    for (i, id) in [8, 0, 3, 3].into_iter().enumerate() {
        assert_eq!(got[i * 256..][..256], values[id * 256..][..256], "row {i} is the table's row {id}");
    }
}

#[test]
fn bytes_shared_with_their_owner_are_read_in_place() {
    let dtype = DType::Q4_0;
    let header = 7; // the tensor's bytes lie inside a larger buffer, as a file's do
    let bytes = random_blocks(dtype, 4, 1);
    let mut file = vec![0xAB; header];
    file.extend_from_slice(&bytes);
    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(file);
    let w = Tensor::from_shared_blocks(dtype, &[2, 64], owner.clone(), header..header + 72, &Device::Cpu).unwrap();
    assert!(w.reads_blocks_in_place(), "no copy was made");
    assert_eq!(w.to_vec::<f32>().unwrap(), dequantize_to_vec(dtype, &bytes).unwrap());
    assert_eq!(Arc::strong_count(&owner), 2, "the tensor keeps its owner alive");
    let owned = Tensor::from_blocks(dtype, &[2, 64], bytes, &Device::Cpu).unwrap();
    assert!(!owned.reads_blocks_in_place());
}

#[test]
fn bad_bytes_and_ops_that_compute_on_blocks_are_errors_that_say_so() {
    let dev = Device::Cpu;
    let err = |r: Result<Tensor>| r.map(|_| ()).unwrap_err().to_string();
    let e = err(Tensor::from_blocks(DType::Q4_K, &[2, 128], vec![0; 144], &dev));
    assert!(e.contains("whole blocks of 256 values"), "{e}");
    let e = err(Tensor::from_blocks(DType::Q8_0, &[2, 32], vec![0; 67], &dev));
    assert!(e.contains("67 bytes") && e.contains("takes 68"), "{e}");
    let e = err(Tensor::from_blocks(DType::BF16, &[2], vec![0; 4], &dev));
    assert!(e.contains("bf16 is not a block-quantized type"), "{e}");
    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(vec![0u8; 10]);
    let e = err(Tensor::from_shared_blocks(DType::Q8_0, &[1, 32], owner, 0..34, &dev));
    assert!(e.contains("of an owner holding 10"), "{e}");

    let (w, _) = weights(DType::Q4_K, 2, 256, 2);
    let e = err(&w + &w);
    assert!(e.contains("does not take Q4_K blocks") && e.contains("matmul"), "{e}");
    let x = Tensor::from_vec(vec![1.0f32; 512], &[2, 256], &dev).unwrap();
    let e = err(w.matmul(&x.t().unwrap()));
    assert!(e.contains("matmul does not take Q4_K blocks"), "the left operand: {e}");
    let e = err(x.to_dtype(DType::Q4_0));
    assert!(e.contains("fuse does not quantize"), "{e}");
    let e = err(w.t().unwrap().to_device(&dev).and_then(|t| t.contiguous()));
    assert!(e.contains("Q4_K"), "a copy of blocks in another order: {e}");
}

/// rms_norm into both GEMMs of a gate/up pair (one DualGemm group), silu(gate) * up after them.
#[fuse]
fn gated(x: &Tensor, norm: &Tensor, wg: &Tensor, wu: &Tensor) -> Result<Tensor> {
    let h = rms_norm(x, norm, 1e-5)?;
    Ok((silu(&h.matmul(&wg.t()?)?)? * h.matmul(&wu.t()?)?)?)
}

/// Every way the GPU runs a GEMM of quantized weights, as the names `fuse::tune::with_gemm_choice` takes:
/// each config of the quantized skinny template (blocks decoded as they stream), the mma template's config
/// that holds two products (blocks decoded into its tiles; every config in
/// `on_a_gpu_the_tensor_core_template_reads_every_block_type`) and cuBLAS on a dequantized copy.
fn gpu_paths() -> Vec<String> {
    let skinny = fuse::ir::codegen::QUANT_SKINNY_CONFIGS.iter().map(|c| format!("qskinny:{}", c.name));
    skinny.chain(["mma:m64n64".to_string(), "cublas".to_string()]).collect()
}

/// The tolerance `path` is held to for activations of `dtype`: the mma template multiplies f32 activations
/// and the decoded weights as bf16 on the tensor cores (its header says why), so bf16's there.
fn tolerance_dtype(path: &str, dtype: DType) -> DType {
    if path.starts_with("mma:") && dtype == DType::F32 {
        DType::BF16
    } else {
        dtype
    }
}

/// `f` on the GPU with `path` forced, its first output.
fn on_path(path: &str, f: impl FnOnce() -> Result<Tensor>) -> Tensor {
    fuse::tune::with_gemm_choice(path, f).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn on_a_gpu_every_block_type_multiplies_as_stored_on_every_path() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    let mut r = TestRng::new(31);
    for (t, dtype) in DType::QUANTIZED.into_iter().enumerate() {
        let per = dtype.block().unwrap().elements;
        // Rows 1, 3, 17 and 4095; inner sizes of 1 to 3 blocks (not a multiple of 256 for the 32-value types);
        // activations in each float dtype.
        // Rows 2 and 4 for the 8-bit body's configs of 2 and 4 rows, at K a multiple of 64 (which it needs).
        for (m, n, blocks, x_dtype) in [
            (1, 7, 1, DType::BF16),
            (3, 65, 3, DType::F32),
            (17, 33, 2, DType::BF16),
            (4095, 9, 1, DType::F16),
            (1, 130, 4, DType::F32),
            (2, 67, 6, DType::F32),
            (4, 19, 2, DType::BF16),
            // Enough rows that the streaming body's warps take several sets each (its grid is one wave), rows of
            // 2304 values: its steps of 32 pieces end inside a row.
            (1, 4099, 2304 / per, DType::F32),
        ] {
            let k = blocks * per;
            let (w, _) = weights(dtype, n, k, 200 + t as u64);
            let x = random(&mut r, &[m, k], x_dtype, -1.0, 1.0, &Device::Cpu);
            let want = fuse::reference(projection_fused(), &[fuse::arg(&x), fuse::arg(&w)]).unwrap();
            let (x, w) = (x.to_device(&gpu).unwrap(), w.to_device(&gpu).unwrap());
            for path in gpu_paths() {
                let what = format!("{path}: {x_dtype} [{m}, {k}] x {dtype} [{n}, {k}]^T");
                // The 8-bit body reads pieces of 64 values, the mma template stretches of 256: forced where K is
                // not a multiple, an error that says so.
                let piece = if path.starts_with("qskinny:x") {
                    64
                } else if path.starts_with("mma:") {
                    256
                } else {
                    1
                };
                if k % piece != 0 {
                    let e = fuse::tune::with_gemm_choice(&path, || projection(&x, &w)).unwrap_err().to_string();
                    assert!(e.contains("multiple"), "{what}: {e}");
                    continue;
                }
                let got = on_path(&path, || projection(&x, &w));
                fuse::testing::assert_close(&what, &got, &want[0], tolerance_dtype(&path, x_dtype), &gpu);
            }
            // Tuned (or the fixed rule): whichever it picks gives the same.
            fuse::testing::assert_close(
                &format!("{dtype} tuned"),
                &projection(&x, &w).unwrap(),
                &want[0],
                x_dtype,
                &gpu,
            );
        }
    }
}

#[test]
fn on_a_gpu_the_prologue_and_the_dual_epilogue_fuse_around_quantized_gemms() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    let mut r = TestRng::new(32);
    let shapes: [(usize, usize, &[usize]); 2] = [(72, 768, &[1, 3, 8]), (2999, 1024, &[1])];
    for (wg_type, wu_type) in [(DType::Q4_K, DType::Q4_K), (DType::Q6_K, DType::Q6_K), (DType::Q4_1, DType::Q4_1)] {
        for (n, k, m) in shapes.iter().flat_map(|&(n, k, ms)| ms.iter().map(move |&m| (n, k, m))) {
            let x = random(&mut r, &[m, k], DType::BF16, -1.0, 1.0, &Device::Cpu);
            let norm = random(&mut r, &[k], DType::BF16, 0.5, 1.5, &Device::Cpu);
            let (wg, _) = weights(wg_type, n, k, 7);
            let (wu, _) = weights(wu_type, n, k, 8);
            let residual = random(&mut r, &[m, n], DType::BF16, -1.0, 1.0, &Device::Cpu);
            let cpu = [fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&wu)];
            let want = fuse::reference(gated_fused(), &cpu).unwrap();
            let single = [fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&residual)];
            let want_single = fuse::reference(normed_projection_fused(), &single).unwrap();
            let g = |t: &Tensor| t.to_device(&gpu).unwrap();
            let (x, norm, wg, wu, residual) = (g(&x), g(&norm), g(&wg), g(&wu), g(&residual));
            for path in gpu_paths() {
                let what = format!("{path}: m={m} rms_norm + {wg_type}/{wu_type}");
                let got = on_path(&path, || gated(&x, &norm, &wg, &wu));
                fuse::testing::assert_close(&format!("{what} dual + silu * up"), &got, &want[0], DType::BF16, &gpu);
                let got = on_path(&path, || normed_projection(&x, &norm, &wg, &residual));
                fuse::testing::assert_close(
                    &format!("{what} + silu + residual"),
                    &got,
                    &want_single[0],
                    DType::BF16,
                    &gpu,
                );
            }
        }
    }
}

/// The streaming configs alone (what scripts/gpu/gpu-sanitize.sh runs under each compute-sanitizer tool with
/// `SANITIZE_BIN=test-quantized SANITIZE_FILTER=streaming`): every block type with enough rows that warps take
/// several sets and rows of two steps (the ring wraps), and the dual GEMM with its rms_norm prologue at 1 and 3
/// rows of X.
#[test]
fn on_a_gpu_the_streaming_configs_read_every_block_type() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    let mut r = TestRng::new(34);
    let streaming: Vec<String> = fuse::ir::codegen::QUANT_SKINNY_CONFIGS
        .iter()
        .filter(|c| c.stages > 0)
        .map(|c| format!("qskinny:{}", c.name))
        .collect();
    assert!(!streaming.is_empty(), "a streaming config");
    let (n, k) = (4099, 2304);
    for (t, dtype) in DType::QUANTIZED.into_iter().enumerate() {
        let (w, _) = weights(dtype, n, k, 300 + t as u64);
        let x = random(&mut r, &[1, k], DType::F32, -1.0, 1.0, &Device::Cpu);
        let want = fuse::reference(projection_fused(), &[fuse::arg(&x), fuse::arg(&w)]).unwrap();
        let (x, w) = (x.to_device(&gpu).unwrap(), w.to_device(&gpu).unwrap());
        for path in &streaming {
            let got = on_path(path, || projection(&x, &w));
            fuse::testing::assert_close(&format!("{path}: {dtype} [{n}, {k}]"), &got, &want[0], DType::F32, &gpu);
        }
    }
    let (n, k) = (2999, 1024);
    for m in [1, 3] {
        let x = random(&mut r, &[m, k], DType::BF16, -1.0, 1.0, &Device::Cpu);
        let norm = random(&mut r, &[k], DType::BF16, 0.5, 1.5, &Device::Cpu);
        let (wg, _) = weights(DType::Q4_K, n, k, 9);
        let (wu, _) = weights(DType::Q4_K, n, k, 10);
        let want = fuse::reference(gated_fused(), &[fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&wu)]);
        let g = |t: &Tensor| t.to_device(&gpu).unwrap();
        let (x, norm, wg, wu) = (g(&x), g(&norm), g(&wg), g(&wu));
        for path in &streaming {
            let got = on_path(path, || gated(&x, &norm, &wg, &wu));
            let what = format!("{path}: m={m} rms_norm + Q4_K dual + silu * up");
            fuse::testing::assert_close(&what, &got, &want.as_ref().unwrap()[0], DType::BF16, &gpu);
        }
    }
}

#[test]
fn on_a_gpu_a_gate_and_up_of_two_block_types_take_cublas() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    let mut r = TestRng::new(33);
    let (m, n, k) = (2, 40, 512);
    let x = random(&mut r, &[m, k], DType::BF16, -1.0, 1.0, &Device::Cpu);
    let norm = random(&mut r, &[k], DType::BF16, 0.5, 1.5, &Device::Cpu);
    let (wg, _) = weights(DType::Q4_K, n, k, 9);
    let (wu, _) = weights(DType::Q6_K, n, k, 10);
    let want =
        fuse::reference(gated_fused(), &[fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&wu)]).unwrap();
    let g = |t: &Tensor| t.to_device(&gpu).unwrap();
    let (x, norm, wg, wu) = (g(&x), g(&norm), g(&wg), g(&wu));
    let e = fuse::tune::with_gemm_choice("qskinny:r2c8", || gated(&x, &norm, &wg, &wu)).unwrap_err().to_string();
    assert!(e.contains("two block types"), "{e}");
    fuse::testing::assert_close(
        "mixed types, tuned",
        &gated(&x, &norm, &wg, &wu).unwrap(),
        &want[0],
        DType::BF16,
        &gpu,
    );
}

#[test]
fn on_a_gpu_blocks_are_stored_dequantized_and_looked_up() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    for dtype in DType::QUANTIZED {
        let (w, values) = weights(dtype, 5, 2 * dtype.block().unwrap().elements, 12);
        let on_gpu = w.to_device(&gpu).unwrap();
        assert_eq!((on_gpu.dtype(), on_gpu.shape()), (dtype, w.shape()));
        assert_eq!(on_gpu.to_device(&Device::Cpu).unwrap().to_vec::<f32>().unwrap(), values, "uploaded as stored");
        // Decoded by the GPU's kernels (a multiply-add may round once where the CPU rounds twice).
        let f32s = Tensor::from_vec(values.clone(), w.shape(), &gpu).unwrap();
        let what = format!("{dtype} to_dtype(f32) on the GPU");
        fuse::testing::assert_close(&what, &on_gpu.to_dtype(DType::F32).unwrap(), &f32s, DType::F32, &gpu);
        let t = on_gpu.t().unwrap().to_dtype(DType::F32).unwrap();
        fuse::testing::assert_close(
            &format!("{what}, transposed"),
            &t,
            &f32s.t().unwrap().contiguous().unwrap(),
            DType::F32,
            &gpu,
        );
        let ids = Tensor::from_vec(vec![4u32, 0, 2, 2], &[4], &gpu).unwrap();
        let rows = embedding(&ids, &on_gpu).unwrap();
        let want = embedding(&ids.to_device(&Device::Cpu).unwrap(), &w).unwrap();
        assert_eq!(rows.dtype(), DType::F32);
        fuse::testing::assert_close(
            &format!("{dtype} embedding on the GPU"),
            &rows,
            &want.to_device(&gpu).unwrap(),
            DType::F32,
            &gpu,
        );
    }
}

/// The tensor-core template with weights of quantized blocks decoded into its tiles (what
/// scripts/gpu/gpu-sanitize.sh runs under each compute-sanitizer tool with `SANITIZE_BIN=test-quantized
/// SANITIZE_FILTER=tensor_core`): every config and block type at 130 x 200 (a partial tile of each) with K
/// of 3 K blocks, f32 activations rounded to bf16 (and bf16 ones on one type), and cuBLAS there on TF32; the
/// gate/up pair as one dual GEMM with its rms_norm prologue before it, on the configs that hold two products.
#[test]
fn on_a_gpu_the_tensor_core_template_reads_every_block_type() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    let mut r = TestRng::new(35);
    let configs: Vec<&fuse::ir::codegen::MmaConfig> = fuse::ir::codegen::MMA_CONFIGS.iter().collect();
    let (m, n, k) = (130, 200, 768);
    for (t, dtype) in DType::QUANTIZED.into_iter().enumerate() {
        let (w, _) = weights(dtype, n, k, 400 + t as u64);
        let x_dtypes: &[DType] = if dtype == DType::Q4_K { &[DType::F32, DType::BF16] } else { &[DType::F32] };
        for &x_dtype in x_dtypes {
            let x = random(&mut r, &[m, k], x_dtype, -1.0, 1.0, &Device::Cpu);
            let want = fuse::reference(projection_fused(), &[fuse::arg(&x), fuse::arg(&w)]).unwrap();
            let (x, w) = (x.to_device(&gpu).unwrap(), w.to_device(&gpu).unwrap());
            for c in &configs {
                let path = format!("mma:{}", c.name);
                let got = on_path(&path, || projection(&x, &w));
                let what = format!("{path}: {x_dtype} [{m}, {k}] x {dtype} [{n}, {k}]^T");
                fuse::testing::assert_close(&what, &got, &want[0], DType::BF16, &gpu);
            }
            // cuBLAS on the dequantized copy: at 130 rows of f32 activations on TF32 tensor cores (f16's 10
            // bits of mantissa), so f16's tolerance there.
            let got = on_path("cublas", || projection(&x, &w));
            let tolerance = if x_dtype == DType::F32 { DType::F16 } else { x_dtype };
            let what = format!("cublas: {x_dtype} [{m}, {k}] x {dtype} [{n}, {k}]^T");
            fuse::testing::assert_close(&what, &got, &want[0], tolerance, &gpu);
        }
    }
    for dtype in [DType::Q4_K, DType::Q6_K, DType::Q8_0] {
        let x = random(&mut r, &[m, k], DType::F32, -1.0, 1.0, &Device::Cpu);
        let norm = random(&mut r, &[k], DType::F32, 0.5, 1.5, &Device::Cpu);
        let (wg, _) = weights(dtype, n, k, 11);
        let (wu, _) = weights(dtype, n, k, 12);
        let want = fuse::reference(gated_fused(), &[fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&wu)]);
        let g = |t: &Tensor| t.to_device(&gpu).unwrap();
        let (x, norm, wg, wu) = (g(&x), g(&norm), g(&wg), g(&wu));
        for c in configs.iter().filter(|c| c.supports(true)) {
            let path = format!("mma:{}", c.name);
            let got = on_path(&path, || gated(&x, &norm, &wg, &wu));
            let what = format!("{path}: m={m} rms_norm + {dtype} dual + silu * up");
            fuse::testing::assert_close(&what, &got, &want.as_ref().unwrap()[0], DType::BF16, &gpu);
        }
    }
}

#[fuse]
fn plain_projection(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    x.matmul(w)
}

/// The shapes of `x.matmul(&w)` with `w` a `[k, n]` matrix whose rows are blocks along n (the product's columns):
/// (m, k, blocks of n); odd k, 1 to 11 blocks.
const COLUMN_BLOCK_SHAPES: [(usize, usize, usize); 4] = [(1, 7, 1), (3, 65, 3), (17, 1, 2), (2, 300, 11)];

/// Such a product against the reference, eager and fused, on `dev`, within `dtype`'s tolerance of f32
/// activations (exact on the CPU up to summation order: it decodes column panels of the blocks as it
/// multiplies).
fn check_column_blocks(dev: &Device, tolerance: impl Fn(DType) -> DType) {
    let mut r = TestRng::new(21);
    for (t, dtype) in DType::QUANTIZED.into_iter().enumerate() {
        let per = dtype.block().unwrap().elements;
        for (m, k, blocks) in COLUMN_BLOCK_SHAPES {
            let n = blocks * per;
            let (w, _) = weights(dtype, k, n, 200 + t as u64);
            let x = random(&mut r, &[m, k], DType::F32, -1.0, 1.0, &Device::Cpu);
            let want = fuse::reference(plain_projection_fused(), &[fuse::arg(&x), fuse::arg(&w)]).unwrap();
            let (x, w) = (x.to_device(dev).unwrap(), w.to_device(dev).unwrap());
            let what = format!("{dtype} [{m}, {k}] x [{k}, {n}] on {dev}");
            let fused = plain_projection(&x, &w).unwrap_or_else(|e| panic!("#[fuse] {what}: {e}"));
            assert_close(&format!("#[fuse] {what}"), &fused, &want[0], tolerance(dtype), dev);
            let eager = x.matmul(&w).unwrap_or_else(|e| panic!("eager {what}: {e}"));
            assert_close(&format!("eager {what}"), &eager, &want[0], tolerance(dtype), dev);
        }
    }
}

#[test]
fn a_matrix_of_blocks_along_its_columns_is_a_right_operand_too() {
    check_column_blocks(&Device::Cpu, |_| DType::F32);
}

#[test]
fn on_a_gpu_a_matrix_of_blocks_along_its_columns_is_a_right_operand_too() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    // Whichever path the GPU takes (cuBLAS on a dequantized copy where the streaming kernels need rows of blocks).
    check_column_blocks(&gpu, |_| DType::F32);
}
