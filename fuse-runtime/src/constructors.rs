//! Tensors made from nothing, with candle's names and argument order: `zeros`, `ones`, `full`, `arange`,
//! `arange_step`, and random tensors `rand` (uniform) and `randn` (normal), with candle's signatures (new values
//! each call), and `rand_seeded` / `randn_seeded`, which draw on the CPU from a seed the caller gives, so that a
//! model's initial weights are the same on every device and every run.

use crate::{DType, Device, Error, Result, Tensor};
use fuse_ir::SplitMix64;
use half::{bf16, f16};

impl Tensor {
    /// A tensor of `shape` filled with `value`, in `dtype` (rounded to it), on `device`.
    pub fn full(value: f32, shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        let n = numel(shape, "full")?;
        if dtype == DType::U32 {
            // Ids: a whole number in range, made directly (floats do not convert to ids).
            if !(value >= 0.0 && value.fract() == 0.0 && value <= u32::MAX as f32) {
                return Err(Error::InvalidArgument { op: "full", reason: format!("{value} is not a u32 id") });
            }
            return Tensor::from_vec(filled(value as u32, n, "full")?, shape, device);
        }
        // F16 and BF16 are made in their own width (not through an f32 buffer twice their size).
        match dtype {
            DType::F16 => Tensor::from_vec(filled(f16::from_f32(value), n, "full")?, shape, device),
            DType::BF16 => Tensor::from_vec(filled(bf16::from_f32(value), n, "full")?, shape, device),
            _ => Tensor::from_vec(filled(value, n, "full")?, shape, &Device::Cpu)?.to_dtype(dtype)?.to_device(device),
        }
    }

    /// `Tensor::zeros(&[2, 3], DType::F32, &dev)`.
    pub fn zeros(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::full(0.0, shape, dtype, device)
    }

    /// `Tensor::ones(&[2, 3], DType::BF16, &dev)`.
    pub fn ones(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::full(1.0, shape, dtype, device)
    }

    /// `start, start + 1, ..` below `end`, as f32 of shape `[n]`.
    pub fn arange(start: f32, end: f32, device: &Device) -> Result<Tensor> {
        Tensor::arange_step(start, end, 1.0, device)
    }

    /// `start, start + step, ..` strictly before `end` (above it for a negative step), as f32 of shape `[n]`.
    pub fn arange_step(start: f32, end: f32, step: f32, device: &Device) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            let reason = format!("({start}, {end}, {step}): the step must be finite and non-zero, the ends finite");
            return Err(Error::InvalidArgument { op: "arange_step", reason });
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        let mut data = filled(0.0f32, n, "arange_step")?;
        data.iter_mut().enumerate().for_each(|(i, x)| *x = start + step * i as f32);
        Tensor::from_vec(data, &[n], device)
    }

    /// Uniform in `[lo, up)`, f32 of `shape` (candle's `rand`): other values at every call. For the same values
    /// every time, [`Tensor::rand_seeded`].
    pub fn rand(lo: f32, up: f32, shape: &[usize], device: &Device) -> Result<Tensor> {
        Tensor::rand_seeded(lo, up, shape, fresh_seed(), device)
    }

    /// Normal with `mean` and `std`, f32 of `shape` (candle's `randn`): other values at every call. For the same
    /// values every time, [`Tensor::randn_seeded`].
    pub fn randn(mean: f32, std: f32, shape: &[usize], device: &Device) -> Result<Tensor> {
        Tensor::randn_seeded(mean, std, shape, fresh_seed(), device)
    }

    /// Uniform in `[lo, up)`, f32 of `shape`, from `seed`: the same seed gives the same tensor everywhere.
    pub fn rand_seeded(lo: f32, up: f32, shape: &[usize], seed: u64, device: &Device) -> Result<Tensor> {
        if !(lo < up) || !lo.is_finite() || !up.is_finite() {
            return Err(Error::InvalidArgument {
                op: "rand",
                reason: format!("({lo}, {up}, ..): needs finite bounds with lo < up"),
            });
        }
        let mut rng = SplitMix64::new(seed);
        Tensor::random_with(shape, device, || lo + (up - lo) * rng.unit())
    }

    /// Normal with `mean` and `std`, f32 of `shape`, from `seed`: the same seed gives the same tensor everywhere.
    pub fn randn_seeded(mean: f32, std: f32, shape: &[usize], seed: u64, device: &Device) -> Result<Tensor> {
        if !(std >= 0.0) || !mean.is_finite() || !std.is_finite() {
            return Err(Error::InvalidArgument {
                op: "randn",
                reason: format!("({mean}, {std}, ..): needs a finite mean and std >= 0"),
            });
        }
        let mut rng = SplitMix64::new(seed);
        Tensor::random_with(shape, device, || mean + std * rng.normal())
    }

    fn random_with(shape: &[usize], device: &Device, mut draw: impl FnMut() -> f32) -> Result<Tensor> {
        let n = numel(shape, "rand")?;
        let mut data = filled(0.0f32, n, "rand")?;
        data.iter_mut().for_each(|x| *x = draw());
        Tensor::from_vec(data, shape, device)
    }
}

/// A seed no other call of this process got: the clock's nanoseconds and a count, mixed.
fn fresh_seed() -> u64 {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let count = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    SplitMix64::new(nanos ^ count.rotate_left(32)).next_u64()
}

/// `n` copies of `value`, or [`Error::OutOfMemory`] (not an abort) where the host has no memory for them.
fn filled<T: Clone>(value: T, n: usize, op: &'static str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        op,
        bytes: n as u128 * std::mem::size_of::<T>() as u128,
        device: "the host".to_string(),
    })?;
    v.resize(n, value);
    Ok(v)
}

fn numel(shape: &[usize], op: &'static str) -> Result<usize> {
    crate::tensor::checked_numel(shape).ok_or_else(|| Error::InvalidArgument {
        op,
        reason: format!("shape {shape:?} has more elements than memory can hold"),
    })
}
