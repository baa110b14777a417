//! Timing a group's candidate paths for the tuner (`tuning.rs`, `task_tuning.rs`): each run as it will run,
//! after a warm-up whose results must agree with the first candidate's (cuBLAS, or the template a recording
//! would take), then the fastest of several repetitions between CUDA events with the L2 cache flushed before
//! each.

use super::gemm_path::GemmPath;
use super::kernels::PreparedKernel;
use super::Executor;
use crate::call::Value;
use crate::cuda::device::CudaDevice;
use crate::cuda::driver::{driver_error, lock};
use crate::cuda::gemm::cublas::GemmCall;
use crate::cuda::storage::CudaStorage;
use crate::tune::{AutotuneMode, TuneKey};
use crate::Result;
use fuse_ir::codegen::MmaConfig;
use fuse_ir::DType;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// Elements of each result compared with cuBLAS's while tuning: the first and the last this many (a
/// wrong tile anywhere in between would be missed, but indexing errors show at both ends; the full copy
/// of a [4096, 14336] product would cost more than the timing).
const CHECKED_ELEMENTS: usize = 1 << 20;

/// Bytes written to flush the L2 cache (60 MB on an H200) before each timed repetition.
const FLUSH_BYTES: usize = 256 << 20;

/// A buffer per GPU that timing overwrites to evict the operands from L2.
fn flush_l2(device: &CudaDevice) -> Result<()> {
    static BUFFERS: OnceLock<Mutex<BTreeMap<usize, CudaStorage>>> = OnceLock::new();
    let mut buffers = lock(BUFFERS.get_or_init(|| Mutex::new(BTreeMap::new())));
    let buffer = match buffers.entry(device.ordinal()) {
        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::btree_map::Entry::Vacant(e) => {
            e.insert(CudaStorage::alloc(device, DType::F32, FLUSH_BYTES / 4)?)
        }
    };
    // SAFETY: the address and length are this live allocation's; queued on the stream everything uses.
    unsafe {
        cudarc::driver::result::memset_d8_async(buffer.base_address(), 0x5A, FLUSH_BYTES, device.stream().cu_stream())
    }
    .map_err(|e| driver_error("memset", e))
}

/// How far (relative L2) a candidate's results may be from cuBLAS's: both round the same products to the
/// output dtype, summed in other orders.
fn agreement(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 2e-2,
        DType::F16 => 5e-3,
        DType::F32 => 1e-3,
        // No matmul takes ids (inference refuses them), nor writes blocks; ids would have to agree exactly.
        DType::U32 => 0.0,
        _ => 0.0,
    }
}

/// The dtype whose precision `path`'s products have for activations of `dtype`, whose agreement it is held
/// to: the mma template multiplies f32 activations and quantized weights as bf16; cuBLAS as TF32 where `tf32`
/// (10 bits of mantissa, as f16).
fn operand_dtype(path: &GemmPath, dtype: DType, tf32: bool) -> DType {
    match path {
        GemmPath::Mma(_) => MmaConfig::operand_dtype(dtype),
        GemmPath::Cublas | GemmPath::CublasSplit | GemmPath::Lt(_) if tf32 => DType::F16,
        _ => dtype,
    }
}

/// The fastest of a candidate's runs: other threads may queue work on the same stream between its events,
/// which only ever adds time, so the minimum is the least disturbed figure.
fn fastest(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::INFINITY, f64::min)
}

/// The largest |got - want| over `want`'s root mean square (0 for an empty or all-zero `want`).
fn largest_difference(got: &[f32], want: &[f32]) -> f64 {
    let rms = (want.iter().map(|&w| (w as f64).powi(2)).sum::<f64>() / want.len().max(1) as f64).sqrt();
    let most = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w as f64).abs()).fold(0.0, f64::max);
    if rms > 0.0 {
        most / rms
    } else {
        0.0
    }
}

impl Executor<'_> {
    /// Times each candidate (the fastest of several runs after a warm-up), with a progress bar on a terminal.
    pub(super) fn measure(
        &mut self,
        index: usize,
        specs: &[PreparedKernel],
        candidates: &[GemmPath],
        key: &TuneKey,
        mode: AutotuneMode,
    ) -> Result<Vec<(GemmPath, Option<f64>)>> {
        let reps = if mode == AutotuneMode::Full { 15 } else { 5 };
        let bar = indicatif::ProgressBar::new(candidates.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("fuse: tuning {msg} [{bar:30}] {pos}/{len}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(format!("{} (rows bucket {})", key.group, key.bucket));
        // Nothing the timing runs queue may be recorded: the winner runs again afterwards.
        let (recording, describe) = (self.recording.take(), std::mem::replace(&mut self.describe, false));
        let device = self.device;
        let mut timed = Vec::with_capacity(candidates.len());
        // The first candidate's results (cuBLAS) are what the others must reproduce before they may win.
        let mut baseline: Option<Vec<Vec<f32>>> = None;
        for path in candidates {
            let mut run = || -> Result<f64> {
                self.run_gemm(index, specs, path)?;
                let results = self.group_results(index)?;
                match &baseline {
                    None => baseline = Some(results),
                    Some(want) => {
                        // Held to the coarser rounding of the two paths (TF32 or bf16 operands where they
                        // round them).
                        let dtype = self.dtype(self.plan.groups[index].matmuls[0]);
                        let tf32 = GemmCall::tf32_for(dtype, self.quantized_weights(index), self.rows(index));
                        let tolerance = agreement(operand_dtype(path, dtype, tf32)).max(agreement(operand_dtype(
                            &candidates[0],
                            dtype,
                            tf32,
                        )));
                        for (got, want) in results.iter().zip(want) {
                            let error = crate::rel_l2_error(got, want);
                            if crate::env::debug_level() >= 3 {
                                // A few wrong outputs pass the L2 check: the largest difference shows them.
                                eprintln!(
                                    "fuse: {}: candidate {} against {}: relative L2 {error:.2e}, largest difference \
                                     {:.2e} of the rms",
                                    self.function,
                                    path.name(),
                                    candidates[0].name(),
                                    largest_difference(got, want)
                                );
                            }
                            if !(error <= tolerance) {
                                return Err(self.internal(format!(
                                    "{} disagrees with {}: relative error {error:.2e} > {tolerance:.0e}",
                                    path.name(),
                                    candidates[0].name()
                                )));
                            }
                        }
                    }
                }
                let mut samples = Vec::with_capacity(reps);
                for _ in 0..reps {
                    flush_l2(device)?;
                    samples.push(device.time_ms(|| self.run_gemm(index, specs, path))? * 1e3);
                }
                Ok(fastest(&samples))
            };
            let result = run();
            if let Err(e) = &result {
                if crate::env::debug_level() >= 3 {
                    eprintln!("fuse: {}: candidate {} skipped: {e}", self.function, path.name());
                }
                // A failed launch may leave work queued; let it drain before the next candidate.
                let _ = device.synchronize();
            }
            timed.push((path.clone(), result.ok()));
            bar.inc(1);
        }
        bar.finish_and_clear();
        self.recording = recording;
        self.describe = describe;
        Ok(timed)
    }

    /// The values the group's matmul part wrote (each a fresh dense allocation), as f32 on the host: the
    /// first and last `CHECKED_ELEMENTS` of each, to compare candidates.
    fn group_results(&self, index: usize) -> Result<Vec<Vec<f32>>> {
        let group = &self.plan.groups[index];
        let mut out = Vec::with_capacity(group.outputs.len());
        for &o in &group.outputs {
            let Some(Value::Tensor(t)) = &self.values[o.index()] else { continue };
            let Some(storage) = t.cuda_storage() else { continue };
            let n = t.numel();
            let mut values = Vec::with_capacity(n.min(2 * CHECKED_ELEMENTS));
            let ranges = if n <= 2 * CHECKED_ELEMENTS {
                vec![(0, n)]
            } else {
                vec![(0, CHECKED_ELEMENTS), (n - CHECKED_ELEMENTS, CHECKED_ELEMENTS)]
            };
            for (start, len) in ranges {
                let data = storage.download_range(t.offset() + start, len)?;
                let mut part = vec![0.0f32; len];
                data.as_slice().read_f32(0, 1, &mut part);
                values.extend(part);
            }
            out.push(values);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_difference_is_over_the_rms() {
        assert_eq!(largest_difference(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]), 0.0);
        // rms of [3, 4] is sqrt(12.5); one output off by 1.
        let d = largest_difference(&[3.0, 5.0], &[3.0, 4.0]);
        assert!((d - 1.0 / 12.5f64.sqrt()).abs() < 1e-12, "{d}");
        assert_eq!(largest_difference(&[1.0], &[0.0]), 0.0);
    }

    #[test]
    fn the_fastest_run_counts() {
        assert_eq!(fastest(&[3.0, 1.0, 2.0]), 1.0);
        assert!(agreement(DType::BF16) > agreement(DType::F16) && agreement(DType::F16) > agreement(DType::F32));
    }
}
