//! How the device benchmarks time a call (included by path): back to back, CUDA events around `calls`
//! calls in a row divided by `calls`, the median of `rounds` rounds, after three warm-up calls; and the copy
//! bandwidth their floors divide by.

use fuse::prelude::*;

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Microseconds a call, back to back.
pub fn time(gpu: &fuse::CudaDevice, rounds: usize, calls: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let ms = gpu.time_ms(|| {
            for _ in 0..calls {
                f()?;
            }
            Ok(())
        })?;
        times.push(ms * 1e3 / calls as f64);
    }
    Ok(median(times))
}

/// Bytes a second of a 1 GiB device-to-device copy (read and written), the median of 5.
pub fn copy_bandwidth(dev: &Device, gpu: &fuse::CudaDevice) -> Result<f64> {
    let elements = (1usize << 30) / 4;
    let big = Tensor::from_vec(vec![1.0f32; elements], &[elements], dev)?;
    let copy = (0..5).map(|_| gpu.time_ms(|| big.to_cuda_slice().map(drop))).collect::<Result<Vec<f64>>>()?;
    Ok(2.0 * (elements * 4) as f64 / (median(copy) * 1e-3))
}
