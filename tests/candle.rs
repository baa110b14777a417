//! `#[fuse]` functions on candle tensors (feature `candle`): parameters, fields and results that are
//! `candle_core::Tensor`s, checked against the same computation in plain candle on random inputs of odd
//! shapes; the conversions both ways, their copies, and the errors across the boundary.

use fuse::candle_core::{self as candle, DType, Device, IndexOp, Module, Tensor};
use fuse::fuse;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn random(rng: &mut SmallRng, shape: &[usize], lo: f32, hi: f32) -> Tensor {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(lo..hi)).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

/// Relative L2 error of `got` against `want`, both read as f32.
fn rel_err(got: &Tensor, want: &Tensor) -> f32 {
    assert_eq!(got.dims(), want.dims(), "shapes");
    let g: Vec<f32> = got.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let w: Vec<f32> = want.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let num: f32 = g.iter().zip(&w).map(|(a, b)| (a - b) * (a - b)).sum::<f32>().sqrt();
    let den: f32 = w.iter().map(|b| b * b).sum::<f32>().sqrt();
    num / den.max(f32::MIN_POSITIVE)
}

fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: f32) {
    let e = rel_err(got, want);
    assert!(e <= tol, "{what}: relative error {e:e} over {tol:e}");
}

#[fuse]
fn mlp(x: &Tensor, gate: &Tensor, up: &Tensor, down: &Tensor) -> candle::Result<Tensor> {
    Ok((silu(x.matmul(&gate.t())) * x.matmul(&up.t())).matmul(&down.t()))
}

/// The same in plain candle ops.
fn mlp_candle(x: &Tensor, gate: &Tensor, up: &Tensor, down: &Tensor) -> Tensor {
    let g = x.broadcast_matmul(&gate.t().unwrap()).unwrap().silu().unwrap();
    let u = x.broadcast_matmul(&up.t().unwrap()).unwrap();
    (g * u).unwrap().broadcast_matmul(&down.t().unwrap()).unwrap()
}

fn rms_norm_candle(x: &Tensor, w: &Tensor, eps: f64) -> Tensor {
    let ms = x.sqr().unwrap().mean_keepdim(candle::D::Minus1).unwrap();
    let r = (ms + eps).unwrap().sqrt().unwrap().recip().unwrap();
    x.broadcast_mul(&r).unwrap().broadcast_mul(w).unwrap()
}

/// A candle model's block whose forward is fused: its weights stay candle tensors.
struct FfnBlock {
    norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
    eps: f32,
}

impl FfnBlock {
    #[fuse]
    fn forward(&self, x: &Tensor) -> candle::Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        Ok(x + (silu(h.matmul(&self.gate.t())) * h.matmul(&self.up.t())).matmul(&self.down.t()))
    }
}

impl Module for FfnBlock {
    fn forward(&self, x: &Tensor) -> candle::Result<Tensor> {
        FfnBlock::forward(self, x)
    }
}

#[test]
fn a_fused_mlp_on_candle_tensors_matches_plain_candle() {
    let mut rng = SmallRng::seed_from_u64(7);
    for (rows, hidden, inter) in [(1, 33, 47), (3, 64, 96), (17, 40, 130)] {
        let x = random(&mut rng, &[rows, hidden], -1.0, 1.0);
        let gate = random(&mut rng, &[inter, hidden], -0.3, 0.3);
        let up = random(&mut rng, &[inter, hidden], -0.3, 0.3);
        let down = random(&mut rng, &[hidden, inter], -0.3, 0.3);
        let got = mlp(&x, &gate, &up, &down).unwrap();
        assert_eq!(got.device().location(), candle::DeviceLocation::Cpu);
        assert_eq!(got.dtype(), DType::F32);
        assert_close(&format!("mlp {rows}x{hidden}x{inter}"), &got, &mlp_candle(&x, &gate, &up, &down), 1e-5);
    }
}

#[test]
fn a_fused_method_with_candle_fields_is_a_candle_module() {
    let mut rng = SmallRng::seed_from_u64(8);
    let (hidden, inter) = (24, 56);
    let blk = FfnBlock {
        norm: random(&mut rng, &[hidden], 0.5, 1.5),
        gate: random(&mut rng, &[inter, hidden], -0.3, 0.3),
        up: random(&mut rng, &[inter, hidden], -0.3, 0.3),
        down: random(&mut rng, &[hidden, inter], -0.3, 0.3),
        eps: 1e-5,
    };
    for shape in [&[1, hidden][..], &[2, 5, hidden]] {
        let x = random(&mut rng, shape, -1.0, 1.0);
        let got = x.apply(&blk).unwrap();
        let h = rms_norm_candle(&x, &blk.norm, 1e-5);
        let want = (&x + mlp_candle(&h, &blk.gate, &blk.up, &blk.down)).unwrap();
        assert_close(&format!("block {shape:?}"), &got, &want, 1e-5);
    }
}

#[fuse]
fn scaled(x: &Tensor, s: f32) -> candle::Result<Tensor> {
    Ok(x * s + 1.0)
}

#[test]
fn half_precision_candle_tensors_keep_their_dtype() {
    let mut rng = SmallRng::seed_from_u64(9);
    let x32 = random(&mut rng, &[3, 17], -2.0, 2.0);
    let want = ((&x32 * 0.5).unwrap() + 1.0).unwrap();
    for (dtype, tol) in [(DType::F16, 2e-3), (DType::BF16, 1e-2)] {
        let got = scaled(&x32.to_dtype(dtype).unwrap(), 0.5).unwrap();
        assert_eq!(got.dtype(), dtype);
        assert_close(&format!("{dtype:?}"), &got, &want, tol);
    }
}

#[fuse]
fn lookup(ids: &Tensor, table: &Tensor) -> candle::Result<Tensor> {
    Ok(embedding(ids, table))
}

#[test]
fn u32_token_ids_pick_rows() {
    let mut rng = SmallRng::seed_from_u64(10);
    let table = random(&mut rng, &[11, 7], -1.0, 1.0);
    let ids = Tensor::new(&[3u32, 0, 10, 3], &Device::Cpu).unwrap();
    let got = lookup(&ids, &table).unwrap();
    assert_close("embedding", &got, &table.index_select(&ids, 0).unwrap(), 0.0);
}

#[fuse]
fn add(a: &Tensor, b: &Tensor) -> candle::Result<Tensor> {
    Ok(a + b)
}

#[test]
fn strided_candle_views_are_read_with_their_layout() {
    let mut rng = SmallRng::seed_from_u64(11);
    let m = random(&mut rng, &[5, 9], -1.0, 1.0);
    let t = m.t().unwrap(); // [9, 5], not contiguous
    let n = random(&mut rng, &[9, 5], -1.0, 1.0);
    assert!(!t.is_contiguous());
    assert_close("transposed", &add(&t, &n).unwrap(), &(&t + &n).unwrap(), 0.0);
    let cols = m.narrow(1, 2, 4).unwrap(); // [5, 4] from column 2, an offset and a row stride of 9
    let o = random(&mut rng, &[5, 4], -1.0, 1.0);
    assert_close("narrowed", &add(&cols, &o).unwrap(), &(&cols + &o).unwrap(), 0.0);
    let row = m.i(3).unwrap(); // [9] at offset 27
    let b = random(&mut rng, &[4, 9], -1.0, 1.0);
    assert_close("broadcast row at an offset", &add(&b, &row).unwrap(), &b.broadcast_add(&row).unwrap(), 0.0);
    // The same tensor twice: candle's read lock taken twice on one thread, as candle's own `x + x` does.
    assert_close("same tensor twice", &add(&m, &m).unwrap(), &(&m + &m).unwrap(), 0.0);
}

#[fuse]
fn pass_through(x: &Tensor, y: &Tensor) -> candle::Result<(Tensor, Tensor)> {
    Ok((x.reshape(&[6, 2]), y * 2.0))
}

#[test]
fn an_output_that_views_an_input_is_a_tensor_of_its_own() {
    let mut rng = SmallRng::seed_from_u64(12);
    let x = random(&mut rng, &[3, 4], -1.0, 1.0);
    let y = random(&mut rng, &[2], -1.0, 1.0);
    let before: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
    let (r, d) = pass_through(&x, &y).unwrap();
    assert_close("reshaped", &r, &x.reshape((6, 2)).unwrap(), 0.0);
    assert_close("doubled", &d, &(&y * 2.0).unwrap(), 0.0);
    // Writing into the input afterwards does not reach the output: it was copied, not aliased.
    x.slice_set(&Tensor::zeros((1, 4), DType::F32, &Device::Cpu).unwrap(), 0, 0).unwrap();
    assert_eq!(x.i(0).unwrap().to_vec1::<f32>().unwrap(), vec![0.0; 4]);
    assert_eq!(r.flatten_all().unwrap().to_vec1::<f32>().unwrap(), before);
}

#[test]
fn conversions_copy_only_where_they_must() {
    let values: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
    // fuse -> candle: a fuse tensor that is the only handle to its vector moves into candle as it is.
    let f = fuse::Tensor::from_vec(values.clone(), &[3, 4], &fuse::Device::Cpu).unwrap();
    let c = f.into_candle().unwrap();
    assert_eq!(c.dims(), &[3, 4]);
    assert_eq!(c.flatten_all().unwrap().to_vec1::<f32>().unwrap(), values);
    // A tensor with other handles (or a view) is copied: both stay usable.
    let f = fuse::Tensor::from_vec(values.clone(), &[3, 4], &fuse::Device::Cpu).unwrap();
    let c2 = f.t().unwrap().to_candle().unwrap();
    assert_eq!(c2.dims(), &[4, 3]);
    assert_eq!(c2.to_vec2::<f32>().unwrap(), c.t().unwrap().to_vec2::<f32>().unwrap());
    assert_eq!(f.to_vec::<f32>().unwrap(), values);
    // candle -> fuse: a dense copy in the view's order, for any layout.
    let back = fuse::Tensor::from_candle(&c.t().unwrap()).unwrap();
    assert_eq!(back.shape(), &[4, 3]);
    assert_eq!(back.to_vec::<f32>().unwrap(), c.t().unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap());
    let ids = Tensor::new(&[5u32, 1, 4], &Device::Cpu).unwrap();
    assert_eq!(fuse::Tensor::from_candle(&ids).unwrap().to_vec::<u32>().unwrap(), vec![5, 1, 4]);
}

#[test]
fn unsupported_candle_tensors_are_errors_that_say_why() {
    let x = Tensor::new(&[1.0f64, 2.0], &Device::Cpu).unwrap();
    let err = fuse::Tensor::from_candle(&x).unwrap_err().to_string();
    assert!(err.contains("dtype f64") && err.contains("f32, f16, bf16 and u32"), "{err}");
    let err = scaled(&x, 2.0).unwrap_err().to_string();
    assert!(err.contains("dtype f64"), "{err}");
    let ids = Tensor::new(&[1i64, 2], &Device::Cpu).unwrap();
    let err = fuse::Tensor::from_candle(&ids).unwrap_err().to_string();
    assert!(err.contains("dtype i64"), "{err}");
}

#[test]
fn fuse_errors_come_back_as_candle_errors_naming_the_function() {
    let mut rng = SmallRng::seed_from_u64(13);
    let a = random(&mut rng, &[3, 4], -1.0, 1.0);
    let b = random(&mut rng, &[5], -1.0, 1.0);
    let err: candle::Error = add(&a, &b).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("add") && text.contains("[3, 4]") && text.contains("[5]"), "{text}");
}

#[test]
fn a_gpu_fuse_tensor_is_not_silently_moved_into_candle() {
    let Some(dev) = fuse::testing::gpu_or_skip() else { return };
    let f = fuse::Tensor::from_vec(vec![1.0f32, 2.0], &[2], &dev).unwrap();
    // On a thread that passed no candle CUDA tensor to a #[fuse] call (so no candle device to return to).
    let err = std::thread::spawn(move || f.into_candle()).join().unwrap().unwrap_err().to_string();
    #[cfg(not(feature = "candle-cuda"))]
    assert!(err.contains("to_device"), "{err}");
    #[cfg(feature = "candle-cuda")]
    assert!(err.contains("into_candle_on"), "{err}");
}

/// candle's CUDA tensors (feature `candle-cuda`, built by scripts/build-candle-cuda.sh and run on the GPU
/// machine): read in place by fuse's kernels and returned on the same candle device, checked against
/// candle's own CUDA ops.
#[cfg(feature = "candle-cuda")]
mod on_candle_cuda {
    use super::*;

    /// candle's CUDA device 0, or `None` after saying so (a failure with `FUSE_TEST_GPU=1`).
    fn candle_gpu() -> Option<Device> {
        fuse::testing::gpu_or_skip()?;
        Some(Device::new_cuda(0).expect("candle's CUDA device 0 where fuse has one"))
    }

    fn upload(rng: &mut SmallRng, shape: &[usize], scale: f32, dev: &Device) -> Tensor {
        random(rng, shape, -scale, scale).to_device(dev).unwrap()
    }

    #[test]
    fn a_fused_mlp_on_candle_cuda_tensors_matches_candles_own() {
        let Some(dev) = candle_gpu() else { return };
        let mut rng = SmallRng::seed_from_u64(21);
        for (rows, hidden, inter) in [(1, 64, 96), (3, 576, 1536), (17, 40, 130)] {
            let x = upload(&mut rng, &[rows, hidden], 1.0, &dev);
            let gate = upload(&mut rng, &[inter, hidden], 0.3, &dev);
            let up = upload(&mut rng, &[inter, hidden], 0.3, &dev);
            let down = upload(&mut rng, &[hidden, inter], 0.3, &dev);
            for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
                let c = |t: &Tensor| t.to_dtype(dtype).unwrap();
                let got = mlp(&c(&x), &c(&gate), &c(&up), &c(&down)).unwrap();
                assert!(got.device().same_device(&dev), "the result is on another candle device");
                assert_eq!(got.dtype(), dtype);
                let want = mlp_candle(&x, &gate, &up, &down);
                // candle ops mix the result with candle's own tensors: same device, ordered streams.
                assert_close(&format!("{dtype:?} mlp {rows}x{hidden}x{inter}"), &(&got + 0.0).unwrap(), &want, tol);
            }
        }
    }

    #[test]
    fn strided_candle_cuda_views_and_conversions() {
        let Some(dev) = candle_gpu() else { return };
        let mut rng = SmallRng::seed_from_u64(22);
        let m = upload(&mut rng, &[5, 9], 1.0, &dev);
        let n = upload(&mut rng, &[9, 5], 1.0, &dev);
        let t = m.t().unwrap();
        assert_close("transposed", &add(&t, &n).unwrap(), &(&t + &n).unwrap(), 0.0);
        let cols = m.narrow(1, 2, 4).unwrap();
        let o = upload(&mut rng, &[5, 4], 1.0, &dev);
        assert_close("narrowed", &add(&cols, &o).unwrap(), &(&cols + &o).unwrap(), 0.0);
        // A fuse copy of a candle GPU tensor, and back onto the same candle device.
        let f = fuse::Tensor::from_candle(&t).unwrap();
        assert!(f.device().is_cuda());
        assert_eq!(f.to_vec::<f32>().unwrap(), t.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        let back = (f.clone() * 2.0f32).unwrap().into_candle_on(&dev).unwrap();
        assert_close("into_candle_on", &back, &(&t * 2.0).unwrap(), 0.0);
        let err = f.into_candle_on(&Device::Cpu).unwrap_err().to_string();
        assert!(err.contains("to_device"), "{err}");
    }

    #[test]
    fn a_candle_cuda_block_runs_in_a_loop_without_host_waits_going_wrong() {
        // Many calls back to back on candle's stream and fuse's: each reads what the last wrote.
        let Some(dev) = candle_gpu() else { return };
        let mut rng = SmallRng::seed_from_u64(23);
        let (hidden, inter) = (576, 1536);
        let blk = FfnBlock {
            norm: upload(&mut rng, &[hidden], 1.0, &dev).affine(0.25, 1.0).unwrap(),
            gate: upload(&mut rng, &[inter, hidden], 0.04, &dev),
            up: upload(&mut rng, &[inter, hidden], 0.04, &dev),
            down: upload(&mut rng, &[hidden, inter], 0.025, &dev),
            eps: 1e-5,
        };
        let x0 = upload(&mut rng, &[4, hidden], 1.0, &dev);
        let (mut fused, mut plain) = (x0.clone(), x0);
        for _ in 0..20 {
            fused = (fused.apply(&blk).unwrap() * 0.5).unwrap();
            let h = rms_norm_candle(&plain, &blk.norm, 1e-5);
            plain = (((&plain + mlp_candle(&h, &blk.gate, &blk.up, &blk.down)).unwrap()) * 0.5).unwrap();
        }
        assert_close("20 chained blocks", &fused, &plain, 1e-4);
    }
}
