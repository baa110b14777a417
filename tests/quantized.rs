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

#[test]
fn on_a_gpu_blocks_are_stored_and_refused_by_kernels_for_now() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    let (w, values) = weights(DType::Q4_1, 4, 64, 6);
    let on_gpu = w.to_device(&gpu).unwrap();
    assert_eq!(on_gpu.dtype(), DType::Q4_1);
    assert_eq!(on_gpu.to_device(&Device::Cpu).unwrap().to_vec::<f32>().unwrap(), values, "uploaded as stored");
    let x = Tensor::from_vec(vec![0.5f32; 64], &[1, 64], &gpu).unwrap();
    let e = projection(&x, &on_gpu).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("not yet read by GPU kernels"), "{e}");
}
