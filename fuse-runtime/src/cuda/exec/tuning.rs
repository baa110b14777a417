//! Which path (`gemm_path.rs`) a Gemm/DualGemm group takes, chosen per shape bucket. The choice comes
//! from, in order: a path forced on this thread (`fuse::tune::with_gemm_choice`), the results table
//! (`fuse::tune`), timing the candidates now (`FUSE_AUTOTUNE=fast|full`), or a fixed rule (`off`: the
//! skinny template for a DualGemm of up to 8 rows or a Gemm of up to 4, the quantized skinny template for
//! quantized weights up to 16 rows and, while a graph is captured, the mma template past them with 16-bit
//! activations, else cuBLAS). The wgmma template is a candidate on sm_90 GPUs only (its configs for many rows
//! in the full mode only: see `WGMMA_CONFIGS`).
//!
//! Timing (`tune_timing.rs`) runs the group's matmul part as it will run, after a warm-up, between CUDA
//! events, with the L2 cache flushed before each repetition, and keeps the fastest repetition (the stream is
//! shared, so another thread's work can only add time). A candidate that fails to compile or launch, or whose
//! results differ from cuBLAS's by more than rounding (`agreement`), is skipped and cannot be chosen. The
//! group then runs once more, for real, on the winner.

use super::gemm_path::GemmPath;
use super::kernels::PreparedKernel;
use super::Executor;
use crate::call::Value;
use crate::cuda::compile::cache::CacheKey;
use crate::cuda::device::CudaDevice;
use crate::cuda::driver::lock;
use crate::cuda::gemm::cublas::{plan_gemm, GemmCall};
use crate::cuda::gemm::lt::lt_matmul;
use crate::cuda::gemm::skinny::CONFIGS;
use crate::cuda::gemm::wgmma::{self, CONFIGS as WGMMA_CONFIGS};
use crate::tune::{self, AutotuneMode, TuneKey};
use crate::{Error, Result};
use fuse_ir::codegen::{MmaConfig, QuantSkinnyConfig, MMA_CONFIGS, QUANT_SKINNY_CONFIGS as QUANT_CONFIGS};
use fuse_ir::view::dense_strides;
use fuse_ir::{DType, GroupKind};
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// Rows up to which the fixed rule (`FUSE_AUTOTUNE=off`, no result) gives a DualGemm, then a Gemm, the
/// skinny template (measured on an H200: it beats cuBLAS there, see the template's header).
const SKINNY_RULE_MAX_ROWS: (usize, usize) = (8, 4);
/// The fixed rule's quantized configs at one row, in order, where the operands allow them (8B MLP at M = 1,
/// f32 activations, 2026-12-05, BENCHMARKS.md: on an H100, x32r2s3 62.0 / 85.5 / 89.5 us on Q4_K / Q6_K / Q8_0
/// against x16r1's 67.8 / 95.3 / 101.8 in the same command; on an H200 in an earlier command, x16r1 61.0 / 89.8
/// against the f32 body's r1c8 84.6 / 87.0 on Q4_K / Q6_K. x32r2s3 has not been timed on an H200).
const QUANT_RULE_ONE_ROW: [&str; 2] = ["x32r2s3", "x16r1"];
/// The fixed rule's mma configs for quantized weights past the quantized skinny configs' rows while a graph is
/// captured (cuBLAS's dequantized copy cannot be replayed; elsewhere cuBLAS, 3.5x faster than the template
/// at 512 rows of bf16 activations on an H100), in order (m128n128 holds one product's accumulators only; a
/// DualGemm takes m128n64).
const QUANT_MMA_RULE: [&str; 3] = ["m128n128", "m128n64", "m64n64"];
/// Rows past which even the full mode does not time the skinny template (measured 3-10x slower than cuBLAS
/// from 128 rows on an H200; timing it at thousands of rows only makes start-up slow).
const FULL_SKINNY_MAX_ROWS: usize = 128;
/// cuBLASLt algorithms the fast mode tries (full: all the heuristic returns).
const FAST_LT_ALGOS: usize = 4;
/// Rows from which the fast mode times the mma.sync template (its tiles are 64 or 128 rows).
const MMA_FAST_MIN_ROWS: usize = 64;
/// Microseconds a candidate is charged for each kernel or library call it queues past the first: the timing
/// runs a group alone, where a template kernel cannot copy its weights while the kernel before it runs and a
/// library path's separate prologue and epilogue kernels are not yet boundaries of a graph step (in a CUDA
/// graph with programmatic dependent launch a kernel boundary with the least work costs about 2 us on an
/// H200: the decoder's output projection alone, BENCHMARKS.md). Decides between paths within a few
/// microseconds of each other (batch 16's decode step took 948 or 1,072 us as the choice fell), nothing else.
const EXTRA_LAUNCH_US: f64 = 1.0;

/// The environment a result belongs to: GPU, arch, driver, NVRTC and fuse versions.
fn environment(device: &CudaDevice) -> String {
    static ENVS: OnceLock<Mutex<BTreeMap<usize, String>>> = OnceLock::new();
    let mut envs = lock(ENVS.get_or_init(|| Mutex::new(BTreeMap::new())));
    envs.entry(device.ordinal())
        .or_insert_with(|| {
            let name = device.context().name().unwrap_or_else(|_| "unknown GPU".into());
            let mut driver = 0i32;
            // SAFETY: writes one int.
            let _ = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver) };
            let nvrtc = crate::cuda::compile::nvrtc::nvrtc_version().map_or("none".into(), |(a, b)| format!("{a}.{b}"));
            format!("{name}|{}|driver {driver}|nvrtc {nvrtc}|fuse {}", device.arch(), env!("CARGO_PKG_VERSION"))
        })
        .clone()
}

/// The index of the candidate with the least time plus [`EXTRA_LAUNCH_US`] for each launch past its first
/// (the first of equals; `None` when none ran).
fn charged(timed: &[(GemmPath, Option<f64>)], launches: &[usize]) -> Option<usize> {
    let cost = |i: usize| timed[i].1.map(|t| t + EXTRA_LAUNCH_US * launches[i].saturating_sub(1) as f64);
    (0..timed.len()).filter_map(|i| cost(i).map(|c| (i, c))).min_by(|a, b| a.1.total_cmp(&b.1)).map(|(i, _)| i)
}

impl Executor<'_> {
    /// The group's path for this call (see the module doc), with `path_note` saying why for FUSE_DEBUG>=3.
    pub(super) fn choose_path(&mut self, index: usize, specs: &[PreparedKernel]) -> Result<GemmPath> {
        if let Some(path) = self.decided_path(index, specs)? {
            return Ok(path);
        }
        let (rows, key) = self.tune_key(index, specs)?;
        let skinny = self.template_operands(index, specs, &self.skinny_probe(index));
        let candidates = self.candidates(index, specs, rows, tune::mode(), skinny.is_ok())?;
        // Other threads queueing on the same stream meanwhile may have slowed any candidate's runs.
        let shared = self.device.queueing_threads() > 1;
        let timed = self.measure(index, specs, &candidates, &key, tune::mode())?;
        let shared = shared || self.device.queueing_threads() > 1;
        let launches: Vec<usize> = timed.iter().map(|(path, _)| self.gemm_launches(index, specs, path)).collect();
        let path = self.tuned_path(key.clone(), timed, &launches, shared);
        self.tune_tasks_where_due(index, specs, rows, &key)?;
        Ok(path)
    }

    /// The group's path when nothing has to be timed (a forced path, the results table, or the fixed rule
    /// when tuning is off or a graph is being captured), else `None`. Needs no value of the left operand
    /// when the skinny kernel can run the group's prologue itself: a deferred prologue kernel then runs only
    /// when the path does not stream it (`run_gemm`) or when the candidates are timed.
    pub(super) fn decided_path(&mut self, index: usize, specs: &[PreparedKernel]) -> Result<Option<GemmPath>> {
        // Recorded for one launch (eager matmuls too: a decoder's LM head), unless a path is forced.
        if self.device.recorder().is_on() && tune::forced_choice().is_none() {
            if let Some(path) = self.task_path(index, specs) {
                self.note(format!("path {} (recorded for one launch: a template, not a library call)", path.name()));
                return Ok(Some(path));
            }
        }
        if self.library_only {
            // Eager ops and the unfused baseline take the library, but weights of quantized blocks few rows
            // read as stored: cuBLAS would first write the whole weight dequantized, every call. Those are
            // also timed as tasks (an eager LM head may be a recorded step's task).
            let quant = self.quantized_rule(index, specs).map(GemmPath::QuantSkinny);
            if quant.is_some() && crate::env::tune_tasks() {
                let (rows, key) = self.tune_key(index, specs)?;
                self.tune_tasks_where_due(index, specs, rows, &key)?;
            }
            return Ok(Some(quant.unwrap_or(GemmPath::Cublas)));
        }
        let skinny = self.template_operands(index, specs, &self.skinny_probe(index));
        if let Some(forced) = tune::forced_choice() {
            let path = GemmPath::parse(&forced).ok_or_else(|| {
                Error::unsupported(self.function, "matmul", format!("no GEMM path is named {forced:?}"))
            })?;
            if let Err(why) = self.path_runs(index, specs, &path) {
                // A path that reads the left operand in memory cannot be checked before a deferred prologue
                // has written it: run the prologue, then decide again.
                if self.prologue_deferred && self.values[self.left_operand(index).index()].is_none() {
                    return Ok(None);
                }
                return Err(Error::unsupported(
                    self.function,
                    "matmul",
                    format!("{forced} cannot run group {index}: {why}"),
                ));
            }
            self.note(format!("path {} (forced)", path.name()));
            return Ok(Some(path));
        }
        let (rows, key) = self.tune_key(index, specs)?;
        let known = lock(tune::table()).lookup(&key).and_then(GemmPath::parse);
        if let Some(path) = known.filter(|p| self.path_runs(index, specs, p).is_ok()) {
            // Timing runs the group: a deferred prologue runs first (then `choose_path` comes back here).
            if !self.tune_tasks_where_due(index, specs, rows, &key)? && self.prologue_deferred {
                return Ok(None);
            }
            self.note(format!("path {} (from the tune results, rows bucket {})", path.name(), key.bucket));
            return Ok(Some(path));
        }
        // Timing waits for the GPU, which a graph capture cannot: the fixed rule then (tune before capturing).
        let mode = if self.device.is_capturing() { AutotuneMode::Off } else { tune::mode() };
        if mode == AutotuneMode::Off {
            let dual = self.plan.groups[index].kind == GroupKind::DualGemm;
            let limit = if dual { SKINNY_RULE_MAX_ROWS.0 } else { SKINNY_RULE_MAX_ROWS.1 };
            let config = CONFIGS.iter().find(|c| c.fast_rows.0 <= rows && rows <= c.fast_rows.1);
            let rule = match (self.quantized_weights(index), config) {
                // Quantized weights: the template that reads them as stored for every row count it is
                // meant for (quantized_rule checks that each config can read them), past those rows the mma
                // template while a graph is captured (QUANT_MMA_RULE), else cuBLAS on a dequantized copy.
                (true, _) => self
                    .quantized_rule(index, specs)
                    .map(GemmPath::QuantSkinny)
                    .or_else(|| self.device.is_capturing().then(|| self.quantized_mma_rule(index, specs)).flatten())
                    .unwrap_or(GemmPath::Cublas),
                (false, Some(c)) if skinny.is_ok() && rows <= limit => GemmPath::Skinny(c),
                _ => GemmPath::Cublas,
            };
            self.note(format!("path {} (FUSE_AUTOTUNE=off: fixed rule)", rule.name()));
            return Ok(Some(rule));
        }
        Ok(None)
    }

    /// The fastest of the `timed` candidates counting [`EXTRA_LAUNCH_US`] for each of its `launches` past
    /// the first (`charged`), kept in the results table under `key` with its measured time: in its file too,
    /// unless the GPU was `shared` with other threads' work while they were timed (then for this process only).
    fn tuned_path(
        &mut self,
        key: TuneKey,
        timed: Vec<(GemmPath, Option<f64>)>,
        launches: &[usize],
        shared: bool,
    ) -> GemmPath {
        let best = charged(&timed, launches).map(|i| (timed[i].0.clone(), timed[i].1.unwrap_or(f64::NAN)));
        let Some((path, micros)) = best else {
            self.note("path cublas (every candidate failed to run)".into());
            return GemmPath::Cublas;
        };
        if shared {
            lock(tune::table()).record_unsaved(key, &path.name(), micros);
        } else {
            lock(tune::table()).record(key, &path.name(), micros);
        }
        let list: Vec<String> = timed
            .iter()
            .map(|(p, t)| match t {
                Some(t) => format!("{} {t:.1} us", p.name()),
                None => format!("{} failed", p.name()),
            })
            .collect();
        let kept = if shared { "; not written to the results file: other threads used the GPU meanwhile" } else { "" };
        self.note(format!("path {} (tuned: {}{kept})", path.name(), list.join(", ")));
        path
    }

    fn note(&mut self, note: String) {
        if crate::env::debug_level() >= 3 {
            eprintln!("fuse: {}: {note}", self.function);
        }
        self.path_note = Some(note);
    }

    /// The skinny config that tells whether the skinny template can take this group's operands: the first
    /// of the quantized template's where the weights are quantized blocks, else the dense template's.
    pub(super) fn skinny_probe(&self, index: usize) -> GemmPath {
        match self.quantized_weights(index) {
            true => GemmPath::QuantSkinny(&QUANT_CONFIGS[0]),
            false => GemmPath::Skinny(&CONFIGS[0]),
        }
    }

    /// Whether the group's (first) weight is of quantized blocks.
    pub(super) fn quantized_weights(&self, index: usize) -> bool {
        self.weight_dtype(index).is_some_and(DType::is_quantized)
    }

    /// The quantized skinny config the fixed rule gives this group, where its weights are quantized blocks and
    /// the config can read them (`None` otherwise, and past the configs' rows): at one row the 8-bit bodies
    /// measured fastest where they can read the operands (QUANT_RULE_ONE_ROW), else the first config meant
    /// for its rows.
    pub(super) fn quantized_rule(&self, index: usize, specs: &[PreparedKernel]) -> Option<&'static QuantSkinnyConfig> {
        if !self.quantized_weights(index) {
            return None;
        }
        let rows = self.rows(index);
        let preferred = QUANT_RULE_ONE_ROW.iter().filter(|_| rows == 1).filter_map(|n| QuantSkinnyConfig::by_name(n));
        let meant = QUANT_CONFIGS.iter().filter(|c| c.fast_rows.0 <= rows && rows <= c.fast_rows.1);
        preferred.chain(meant).find(|c| self.path_runs(index, specs, &GemmPath::QuantSkinny(c)).is_ok())
    }

    /// The mma config the fixed rule gives quantized weights past the skinny configs' rows, where one can
    /// read them: the first of QUANT_MMA_RULE that runs for the group (`None`: cuBLAS on a dequantized copy).
    pub(super) fn quantized_mma_rule(&self, index: usize, specs: &[PreparedKernel]) -> Option<GemmPath> {
        if !self.mma_keeps_precision(index) {
            return None;
        }
        let configs = QUANT_MMA_RULE.iter().filter_map(|n| MmaConfig::by_name(n)).map(GemmPath::Mma);
        configs.into_iter().find(|p| self.path_runs(index, specs, p).is_ok())
    }

    /// Whether the mma template multiplies this group's operands in the activations' own precision: not f32
    /// activations by quantized weights, which it rounds to bf16 (`mma_quant.cuh`). Those take it only when
    /// forced (`fuse::tune::with_gemm_choice`): a user who keeps f32 activations gets f32 products unasked
    /// (the SmolLM2 test holds f32 runs to 1e-2 of transformers' logits; bf16 GEMM operands over 30 layers were
    /// not measured against it).
    pub(super) fn mma_keeps_precision(&self, index: usize) -> bool {
        let dtype = self.dtype(self.plan.groups[index].matmuls[0]);
        MmaConfig::operand_dtype(dtype) == dtype || !self.quantized_weights(index)
    }

    /// The rows of the group's product (its left operand's, batches folded).
    pub(super) fn rows(&self, index: usize) -> usize {
        let shape = self.shape(self.plan.groups[index].matmuls[0]);
        shape.split_last().map_or(0, |(_, rest)| rest.iter().product())
    }

    /// Whether `path` can run this group (a template needs its kernel and operands it can read; the wgmma
    /// template an sm_90 GPU; the wgmma and mma templates room for the group's accumulators), or why not.
    pub(super) fn path_runs(
        &self,
        index: usize,
        specs: &[PreparedKernel],
        path: &GemmPath,
    ) -> std::result::Result<(), String> {
        if path.template_role().is_none() {
            return Ok(());
        }
        self.template_operands(index, specs, path)?;
        path.lacks_room(self.plan.groups[index].kind == GroupKind::DualGemm).map_or(Ok(()), Err)
    }

    /// Everything worth timing for this group: cuBLAS, the skinny and wgmma configs (the fast mode: those
    /// meant for this many rows), and the cuBLASLt algorithms.
    fn candidates(
        &self,
        index: usize,
        specs: &[PreparedKernel],
        rows: usize,
        mode: AutotuneMode,
        skinny: bool,
    ) -> Result<Vec<GemmPath>> {
        let mut out = vec![GemmPath::Cublas];
        let kind = self.plan.groups[index].kind;
        if kind == GroupKind::DualGemm {
            out.push(GemmPath::CublasSplit);
        }
        let fits = |fast_rows: (usize, usize)| match mode {
            AutotuneMode::Full => rows <= FULL_SKINNY_MAX_ROWS,
            _ => (fast_rows.0..=fast_rows.1).contains(&rows),
        };
        if skinny && self.quantized_weights(index) {
            out.extend(QUANT_CONFIGS.iter().filter(|c| fits(c.fast_rows)).map(GemmPath::QuantSkinny));
        } else if skinny {
            out.extend(CONFIGS.iter().filter(|c| fits(c.fast_rows)).map(GemmPath::Skinny));
        }
        let wgmma = WGMMA_CONFIGS
            .iter()
            .filter(|c| mode == AutotuneMode::Full || (c.fast_rows.0..=c.fast_rows.1).contains(&rows))
            .map(GemmPath::Wgmma)
            .filter(|p| self.path_runs(index, specs, p).is_ok());
        out.extend(wgmma);
        // The mma.sync template for many rows: in the fast mode on GPUs without the wgmma template (on an
        // H200 it is the slower of fuse's two, BENCHMARKS.md) and for quantized weights (which only it reads
        // as stored at many rows), in the full mode everywhere.
        let no_wgmma = wgmma::compile_arch(self.device.arch()).is_none() || self.quantized_weights(index);
        let fast_mma = no_wgmma && rows >= MMA_FAST_MIN_ROWS;
        if mode == AutotuneMode::Full || fast_mma {
            let mma = MMA_CONFIGS.iter().map(GemmPath::Mma).filter(|p| self.path_runs(index, specs, p).is_ok());
            out.extend(mma.filter(|_| self.mma_keeps_precision(index)));
        }
        let mm = self.plan.groups[index].matmuls[0];
        let args = &self.graph.node(mm).args;
        // cuBLASLt's algorithms are found for the first product's shape: not for a MultiGemm group's others.
        let (a, b) = (self.resolve(args[0])?, self.resolve(args[1])?);
        if let (Value::Tensor(a), Value::Tensor(b), false) = (a, b, kind == GroupKind::MultiGemm) {
            let call =
                plan_gemm(&self.matrix(&a)?, &self.matrix(&b)?).ok().and_then(|p| p.call(a.dtype()).ok().flatten());
            if let Some(mut call) = call {
                // The form run_matmul will ask cuBLASLt for (TF32 for dequantized weights at many rows).
                call.tf32 = GemmCall::tf32_for(a.dtype(), b.dtype().is_quantized(), rows);
                if let Ok(form) = lt_matmul(self.device, &call) {
                    let n = if mode == AutotuneMode::Full {
                        form.algorithms()
                    } else {
                        form.algorithms().min(FAST_LT_ALGOS)
                    };
                    out.extend((0..n).map(GemmPath::Lt));
                }
            }
        }
        Ok(out)
    }

    /// The results-table key of this group at this call's shape, and its rows (left operand, batches folded).
    pub(super) fn tune_key(&self, index: usize, specs: &[PreparedKernel]) -> Result<(usize, TuneKey)> {
        let group = &self.plan.groups[index];
        let mm = group.matmuls[0];
        let (n, rows) = (self.shape(mm).last().copied().unwrap_or(0), self.rows(index));
        let k = self.shape(self.graph.node(mm).args[0]).last().copied().unwrap_or(0);
        // What the group computes and how its operands are laid out (strides decide which paths apply).
        let mut parts: Vec<String> = specs.iter().map(|s| format!("{:032x}", s.source_key())).collect();
        for &m in &group.matmuls {
            for &operand in &self.graph.node(m).args {
                match self.resolve(operand) {
                    Ok(Value::Tensor(t)) => parts.push(format!("{:?}{:?}{}", t.shape().len(), t.strides(), t.dtype())),
                    Ok(Value::Scalar(_)) => {}
                    // A deferred prologue's output, not computed (yet): it will be a fresh dense tensor.
                    Err(_) if self.prologue_deferred && group.prologue.contains(&operand) => {
                        let shape = self.shape(operand);
                        parts.push(format!("{:?}{:?}{}", shape.len(), dense_strides(shape), self.dtype(operand)));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let bytes: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        let hash = CacheKey::of(&bytes).0 as u64;
        let group_name = format!("{}#{index}:{}:n{n}:k{k}:{hash:016x}", self.function, self.dtype(mm));
        let key = TuneKey { env: environment(self.device), group: group_name, bucket: tune::bucket(rows) };
        Ok((rows, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_launches_are_charged_a_microsecond_each() {
        use crate::cuda::gemm::skinny::CONFIGS;
        let timed = |cublas: f64, skinny: f64| {
            vec![(GemmPath::Cublas, Some(cublas)), (GemmPath::Skinny(&CONFIGS[0]), Some(skinny))]
        };
        // cuBLAS with a prologue and an epilogue kernel (3 launches) against the skinny kernel running both.
        let launches = [3, 1];
        assert_eq!(charged(&timed(10.0, 11.5), &launches), Some(1), "within 2 us: the single kernel");
        assert_eq!(charged(&timed(10.0, 12.5), &launches), Some(0), "2.5 us faster: the library");
        assert_eq!(charged(&timed(1000.0, 1010.0), &launches), Some(0), "large products: time decides");
        let failed = vec![(GemmPath::Cublas, Some(5.0)), (GemmPath::Skinny(&CONFIGS[0]), None)];
        assert_eq!(charged(&failed, &launches), Some(0), "a candidate that failed is never chosen");
        assert_eq!(charged(&[(GemmPath::Cublas, None)], &[1]), None);
    }
}
