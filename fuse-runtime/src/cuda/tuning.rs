//! How a Gemm/DualGemm group runs on the GPU, chosen per shape bucket:
//!
//! - `cublas`: cuBLAS for the matmuls (a DualGemm's two as one batched call where the two weights lie a
//!   whole number of elements apart), then the epilogue kernel; `cublas:split`: a DualGemm's two as two
//!   calls (at some shapes cuBLAS picks a slower kernel for the batched call);
//! - `cublaslt:<i>`: the same through cuBLASLt with algorithm `i` of its heuristic's list;
//! - `skinny:<config>`: the skinny template, matmuls and epilogue in one kernel (`cuda/skinny.rs`).
//!
//! The choice comes from, in order: a path forced on this thread (`fuse::tune::with_gemm_choice`), the
//! results table (`fuse::tune`), timing the candidates now (`FUSE_AUTOTUNE=fast|full`), or a fixed rule
//! (`off`: the skinny template for a DualGemm of up to 8 rows or a Gemm of up to 4, else cuBLAS). Timing runs the group's
//! matmul part as it will run, after a warm-up, between CUDA events, with the L2 cache flushed before each
//! repetition, and keeps the fastest repetition (the stream is shared, so another thread's work can only
//! add time). A candidate that fails to compile or launch, or whose results differ from cuBLAS's by more
//! than rounding (`agreement`), is skipped and cannot be chosen. The group then runs once more, for
//! real, on the winner.

use super::super::cache::CacheKey;
use super::super::skinny::{skinny_gemm, SkinnyConfig, SkinnyGemm, CONFIGS};
use super::*;
use crate::tune::{self, AutotuneMode, TuneKey};
use std::collections::BTreeMap;
use cudarc::driver::sys::CUfunction_attribute;
use std::sync::{Mutex, OnceLock};

/// One way to run a Gemm/DualGemm group.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum GemmPath {
    /// cuBLAS; a DualGemm's two products as one batched call where the weights allow it.
    Cublas,
    /// cuBLAS, a DualGemm's products as two calls.
    CublasSplit,
    Lt(usize),
    Skinny(&'static SkinnyConfig),
}

impl GemmPath {
    pub(super) fn name(&self) -> String {
        match self {
            GemmPath::Cublas => "cublas".into(),
            GemmPath::CublasSplit => "cublas:split".into(),
            GemmPath::Lt(i) => format!("cublaslt:{i}"),
            GemmPath::Skinny(c) => format!("skinny:{}", c.name),
        }
    }

    fn parse(text: &str) -> Option<GemmPath> {
        match text.split_once(':') {
            None if text == "cublas" => Some(GemmPath::Cublas),
            Some(("cublas", "split")) => Some(GemmPath::CublasSplit),
            Some(("cublaslt", i)) => i.parse().ok().map(GemmPath::Lt),
            Some(("skinny", c)) => SkinnyConfig::by_name(c).map(GemmPath::Skinny),
            _ => None,
        }
    }
}

/// Rows up to which the fixed rule (`FUSE_AUTOTUNE=off`, no result) gives a DualGemm, then a Gemm, the
/// skinny template (measured on an H200: it beats cuBLAS there, see the template's header).
const SKINNY_RULE_MAX_ROWS: (usize, usize) = (8, 4);
/// Rows past which even the full mode does not time the skinny template (measured 3-10x slower than cuBLAS
/// from 128 rows on an H200; timing it at thousands of rows only makes start-up slow).
const FULL_SKINNY_MAX_ROWS: usize = 128;
/// Elements of each result compared with cuBLAS's while tuning: the first and the last this many (a
/// wrong tile anywhere in between would be missed, but indexing errors show at both ends; the full copy
/// of a [4096, 14336] product would cost more than the timing).
const CHECKED_ELEMENTS: usize = 1 << 20;
/// cuBLASLt algorithms the fast mode tries (full: all the heuristic returns).
const FAST_LT_ALGOS: usize = 4;
/// Bytes written to flush the L2 cache (60 MB on an H200) before each timed repetition.
const FLUSH_BYTES: usize = 256 << 20;

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
            let nvrtc = super::super::nvrtc::nvrtc_version().map_or("none".into(), |(a, b)| format!("{a}.{b}"));
            format!("{name}|{}|driver {driver}|nvrtc {nvrtc}|fuse {}", device.arch(), env!("CARGO_PKG_VERSION"))
        })
        .clone()
}

/// A buffer per GPU that timing overwrites to evict the operands from L2.
fn flush_l2(device: &CudaDevice) -> Result<()> {
    static BUFFERS: OnceLock<Mutex<BTreeMap<usize, CudaStorage>>> = OnceLock::new();
    let mut buffers = lock(BUFFERS.get_or_init(|| Mutex::new(BTreeMap::new())));
    let buffer = match buffers.entry(device.ordinal()) {
        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::btree_map::Entry::Vacant(e) => e.insert(CudaStorage::alloc(device, DType::F32, FLUSH_BYTES / 4)?),
    };
    // SAFETY: the address and length are this live allocation's; queued on the stream everything uses.
    unsafe { cudarc::driver::result::memset_d8_async(buffer.base_address(), 0x5A, FLUSH_BYTES, device.stream().cu_stream()) }
        .map_err(|e| driver_error("memset", e))
}

/// How far (relative L2) a candidate's results may be from cuBLAS's: both round the same products to the
/// output dtype, summed in other orders.
fn agreement(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 2e-2,
        DType::F16 => 5e-3,
        DType::F32 => 1e-3,
    }
}

/// The fastest of a candidate's runs: other threads may queue work on the same stream between its events,
/// which only ever adds time, so the minimum is the least disturbed figure.
fn fastest(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::INFINITY, f64::min)
}

impl Executor<'_> {
    /// The group's path for this call (see the module doc), with `path_note` saying why for FUSE_DEBUG>=3.
    pub(super) fn choose_path(&mut self, index: usize, specs: &[PreparedKernel]) -> Result<GemmPath> {
        if self.library_only {
            return Ok(GemmPath::Cublas);
        }
        let skinny = self.skinny_operands(index, specs);
        if let Some(forced) = tune::forced_choice() {
            let path = GemmPath::parse(&forced)
                .ok_or_else(|| Error::unsupported(self.function, "matmul", format!("no GEMM path is named {forced:?}")))?;
            if let (GemmPath::Skinny(_), Err(why)) = (&path, &skinny) {
                return Err(Error::unsupported(self.function, "matmul", format!("{forced} cannot run group {index}: {why}")));
            }
            self.note(format!("path {} (forced)", path.name()));
            return Ok(path);
        }
        let (rows, key) = self.tune_key(index, specs)?;
        let known = lock(tune::table()).lookup(&key).and_then(GemmPath::parse);
        if let Some(path) = known.filter(|p| !matches!(p, GemmPath::Skinny(_)) || skinny.is_ok()) {
            self.note(format!("path {} (from the tune results, rows bucket {})", path.name(), key.bucket));
            return Ok(path);
        }
        let mode = tune::mode();
        if mode == AutotuneMode::Off {
            let dual = self.plan.groups[index].matmuls.len() == 2;
            let limit = if dual { SKINNY_RULE_MAX_ROWS.0 } else { SKINNY_RULE_MAX_ROWS.1 };
            let config = CONFIGS.iter().find(|c| c.fast_rows.0 <= rows && rows <= c.fast_rows.1);
            let rule = match config {
                Some(c) if skinny.is_ok() && rows <= limit => GemmPath::Skinny(c),
                _ => GemmPath::Cublas,
            };
            self.note(format!("path {} (FUSE_AUTOTUNE=off: fixed rule)", rule.name()));
            return Ok(rule);
        }
        let candidates = self.candidates(index, rows, mode, skinny.is_ok())?;
        let timed = self.measure(index, specs, &candidates, &key, mode)?;
        let best = timed
            .iter()
            .filter_map(|(p, t)| t.map(|t| (p, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(p, t)| (p.clone(), t));
        let Some((path, micros)) = best else {
            self.note("path cublas (every candidate failed to run)".into());
            return Ok(GemmPath::Cublas);
        };
        lock(tune::table()).record(key, &path.name(), micros);
        let list: Vec<String> = timed
            .iter()
            .map(|(p, t)| match t {
                Some(t) => format!("{} {t:.1} us", p.name()),
                None => format!("{} failed", p.name()),
            })
            .collect();
        self.note(format!("path {} (tuned: {})", path.name(), list.join(", ")));
        Ok(path)
    }

    fn note(&mut self, note: String) {
        if crate::fused::env::debug_level() >= 3 {
            eprintln!("fuse: {}: {note}", self.function);
        }
        self.path_note = Some(note);
    }

    /// The matmul part of the group (after its prologue) on `path`.
    pub(super) fn run_gemm(&mut self, index: usize, specs: &[PreparedKernel], path: &GemmPath) -> Result<()> {
        self.path = path.clone();
        if let GemmPath::Skinny(config) = path {
            let spec = specs.iter().find(|k| k.spec.role == Role::Skinny).ok_or_else(|| self.internal("no skinny kernel"))?;
            return self.run_skinny(index, spec, config);
        }
        if *path != GemmPath::Cublas || !self.run_dual_pair(index)? {
            for &mm in &self.plan.groups[index].matmuls {
                self.run_matmul(mm)?;
            }
        }
        for spec in specs.iter().filter(|k| k.spec.role == Role::Epilogue) {
            self.run_kernel(spec)?;
        }
        Ok(())
    }

    /// The group's operands as the skinny template reads them, or why it cannot.
    fn skinny_operands(&self, index: usize, specs: &[PreparedKernel]) -> std::result::Result<SkinnyGemm, String> {
        if !specs.iter().any(|k| k.spec.role == Role::Skinny) {
            return Err("the group has no skinny kernel (its epilogue does not fit one)".into());
        }
        let group = &self.plan.groups[index];
        let left = self.graph.node(group.matmuls[0]).args[0];
        let tensor = |id: NodeId| match self.resolve(id) {
            Ok(Value::Tensor(t)) => Ok(t),
            _ => Err("a matmul operand is not a tensor".to_string()),
        };
        let a = tensor(left)?;
        let dtype = self.dtype(group.matmuls[0]);
        let mut weights = Vec::new();
        for &mm in &group.matmuls {
            let node = self.graph.node(mm);
            if node.args[0] != left {
                return Err("the matmuls have different left operands".into());
            }
            let w = tensor(node.args[1])?;
            if w.dtype() != dtype || self.dtype(mm) != dtype {
                return Err("mixed dtypes".into());
            }
            weights.push(self.matrix(&w).map_err(|e| e.to_string())?);
        }
        if a.dtype() != dtype {
            return Err("mixed dtypes".into());
        }
        skinny_gemm(dtype, &self.matrix(&a).map_err(|e| e.to_string())?, &weights).map_err(str::to_string)
    }

    /// Everything worth timing for this group: cuBLAS, the skinny configs (the fast mode: those meant for
    /// this many rows), and the cuBLASLt algorithms.
    fn candidates(&self, index: usize, rows: usize, mode: AutotuneMode, skinny: bool) -> Result<Vec<GemmPath>> {
        let mut out = vec![GemmPath::Cublas];
        if self.plan.groups[index].matmuls.len() == 2 {
            out.push(GemmPath::CublasSplit);
        }
        if skinny {
            let fits = |c: &&SkinnyConfig| match mode {
                AutotuneMode::Full => rows <= FULL_SKINNY_MAX_ROWS,
                _ => (c.fast_rows.0..=c.fast_rows.1).contains(&rows),
            };
            out.extend(CONFIGS.iter().filter(fits).map(GemmPath::Skinny));
        }
        let mm = self.plan.groups[index].matmuls[0];
        let args = &self.graph.node(mm).args;
        if let (Value::Tensor(a), Value::Tensor(b)) = (self.resolve(args[0])?, self.resolve(args[1])?) {
            let call = plan_gemm(&self.matrix(&a)?, &self.matrix(&b)?).ok().and_then(|p| p.call(a.dtype()).ok().flatten());
            if let Some(call) = call {
                if let Ok(form) = lt_matmul(self.device, &call) {
                    let n = if mode == AutotuneMode::Full { form.algorithms() } else { form.algorithms().min(FAST_LT_ALGOS) };
                    out.extend((0..n).map(GemmPath::Lt));
                }
            }
        }
        Ok(out)
    }

    /// Times each candidate (the fastest of several runs after a warm-up), with a progress bar on a terminal.
    fn measure(
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
                        let tolerance = agreement(self.dtype(self.plan.groups[index].matmuls[0]));
                        for (got, want) in results.iter().zip(want) {
                            let error = crate::rel_l2_error(got, want);
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
                if crate::fused::env::debug_level() >= 3 {
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

    /// A DualGemm's two products as one batched cuBLAS call into one buffer, when `dual_gemm_pairing`
    /// allows (the same test a launch plan makes again on each replay). `false`: the caller makes two calls.
    fn run_dual_pair(&mut self, index: usize) -> Result<bool> {
        let group = &self.plan.groups[index];
        let [mm0, mm1] = group.matmuls[..] else { return Ok(false) };
        let (n0, n1) = (self.graph.node(mm0), self.graph.node(mm1));
        let tensor = |v: Value| match v {
            Value::Tensor(t) => Some(t),
            Value::Scalar(_) => None,
        };
        let (Some(a), Some(w0), Some(w1)) =
            (tensor(self.resolve(n0.args[0])?), tensor(self.resolve(n0.args[1])?), tensor(self.resolve(n1.args[1])?))
        else {
            return Ok(false);
        };
        let dtype = self.dtype(mm0);
        if [a.dtype(), w0.dtype(), w1.dtype(), self.dtype(mm1)].iter().any(|&d| d != dtype) {
            return Ok(false);
        }
        let (ma, m0, m1) = (self.matrix(&a)?, self.matrix(&w0)?, self.matrix(&w1)?);
        if ma.cols == 0 {
            return Ok(false);
        }
        let call = |w| plan_gemm(&ma, w).ok().and_then(|p| p.call(dtype).ok().flatten());
        let (Some(c0), Some(c1)) = (call(&m0), call(&m1)) else { return Ok(false) };
        let escapes = self.graph.outputs.contains(&mm0) || self.graph.outputs.contains(&mm1);
        let same_left = n0.args[0] == n1.args[0];
        let Ok((swapped, pair)) = dual_gemm_pairing(&c0, &c1, same_left, escapes, [m0.address, m1.address]) else {
            return Ok(false);
        };
        let stride = c0.paired_product_stride();
        let buffer = CudaStorage::alloc(self.device, dtype, 2 * stride)?;
        let base = buffer.base_address();
        let low = if swapped { m1.address } else { m0.address };
        launch_gemm(self.device, &pair, low, ma.address, base)?;
        // Batch 0 is the weight lower in memory: its product comes first in the buffer.
        let first = Tensor::from_cuda(buffer, self.shape(mm0).to_vec());
        let second = first.at_offset(stride, self.shape(mm1).to_vec());
        let (t0, t1) = if swapped { (second, first) } else { (first, second) };
        let recorded = [(mm0, &c0), (mm1, &c1)];
        if let Some(recording) = &mut self.recording {
            for (mm, c) in recorded {
                let node = self.graph.node(mm);
                let (first, second) = (base_of(self.graph, node.args[1]).index(), base_of(self.graph, node.args[0]).index());
                recording.computed.push((mm.index(), dtype, self.inferred.shapes[mm.index()].clone()));
                recording.steps.push(Step::Gemm { call: *c, lt: None, first, second, product: mm.index(), group: index, dual: true });
            }
        }
        if self.describe {
            for (mm, c) in recorded {
                let args = &self.graph.node(mm).args;
                self.gemms.push(DescribedGemm {
                    call: Ok(*c),
                    weight: operand_name(self.graph, args[1]),
                    left: operand_name(self.graph, args[0]),
                    weight_address: if mm == mm0 { m0.address } else { m1.address },
                    left_node: base_of(self.graph, args[0]),
                    escapes,
                });
            }
        }
        self.values[mm0.index()] = Some(Value::Tensor(t0));
        self.values[mm1.index()] = Some(Value::Tensor(t1));
        Ok(true)
    }

    /// The results-table key of this group at this call's shape, and its rows (left operand, batches folded).
    fn tune_key(&self, index: usize, specs: &[PreparedKernel]) -> Result<(usize, TuneKey)> {
        let group = &self.plan.groups[index];
        let mm = group.matmuls[0];
        let shape = self.shape(mm);
        let (n, rows) = match shape.split_last() {
            Some((&n, rest)) => (n, rest.iter().product::<usize>()),
            None => (0, 0),
        };
        let k = self.shape(self.graph.node(mm).args[0]).last().copied().unwrap_or(0);
        // What the group computes and how its operands are laid out (strides decide which paths apply).
        let mut parts: Vec<String> = specs.iter().map(|s| s.spec.source.clone()).collect();
        for &m in &group.matmuls {
            for &operand in &self.graph.node(m).args {
                if let Value::Tensor(t) = self.resolve(operand)? {
                    parts.push(format!("{:?}{:?}{}", t.shape().len(), t.strides(), t.dtype()));
                }
            }
        }
        let bytes: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        let hash = CacheKey::of(&bytes).0 as u64;
        let group_name = format!("{}#{index}:{}:n{n}:k{k}:{hash:016x}", self.function, self.dtype(mm));
        let key = TuneKey { env: environment(self.device), group: group_name, bucket: tune::bucket(rows) };
        Ok((rows, key))
    }

    /// The skinny kernel: the matmuls and the epilogue in one launch, its `FuseArgs` over the product with
    /// the last axis kept apart (so a row is a product row), then `FuseGemmArgs`.
    fn run_skinny(&mut self, index: usize, kernel: &PreparedKernel, config: &SkinnyConfig) -> Result<()> {
        let spec = &kernel.spec;
        let group = &self.plan.groups[index];
        let gemm = self
            .skinny_operands(index, std::slice::from_ref(kernel))
            .map_err(|why| Error::unsupported(self.function, "matmul", format!("the skinny template: {why}")))?;
        let dtype = self.dtype(group.matmuls[0]);
        let product_shape = self.shape(group.matmuls[0]).to_vec();
        let dense = crate::tensor::contiguous_strides(&product_shape);
        let mut values = Vec::with_capacity(spec.inputs.len());
        let (mut kinds, mut in_operands) = (Vec::new(), Vec::new());
        for &id in &spec.inputs {
            if group.matmuls.contains(&id) {
                // The accumulators stand in for the product: no memory behind this slot.
                kinds.push(InputKind::Tensor(dtype));
                in_operands.push(Operand::Tensor { address: 0, shape: product_shape.clone(), strides: dense.clone() });
                values.push(Value::Scalar(0.0));
                continue;
            }
            let value = self.resolve(id)?;
            match &value {
                Value::Tensor(t) => {
                    kinds.push(InputKind::Tensor(t.dtype()));
                    in_operands.push(self.tensor_operand(t)?);
                }
                Value::Scalar(v) => {
                    kinds.push(InputKind::Scalar);
                    in_operands.push(Operand::Scalar(*v));
                }
            }
            values.push(value);
        }
        let outputs = spec.outputs.iter().map(|&id| self.allocate(id)).collect::<Result<Vec<_>>>()?;
        let out_operands = outputs.iter().map(|t| self.tensor_operand(t)).collect::<Result<Vec<_>>>()?;
        let mut domain = product_shape.clone();
        for &id in spec.inputs.iter().chain(&spec.nodes).chain(&spec.outputs) {
            domain = broadcast(&domain, self.shape(id)).unwrap_or_default();
        }
        if domain != product_shape {
            return Err(Error::unsupported(
                self.function,
                "matmul",
                format!("the skinny template: the epilogue's domain {domain:?} is not the product's {product_shape:?}"),
            ));
        }
        let launch = plan_launch(codegen::KernelKind::RowReduce, &domain, &in_operands, &out_operands)
            .map_err(|reason| Error::unsupported(self.function, "kernel", format!("{}: {reason}", spec.name)))?;
        let out_dtypes: Vec<DType> = outputs.iter().map(Tensor::dtype).collect();
        let mut defines = codegen::defines(spec, &kinds, &out_dtypes);
        defines.extend(config.defines(dtype));
        let grid = config.grid(gemm.m, gemm.n).ok_or_else(|| self.internal("the skinny grid is too large"))?;
        let function = modules::kernel(self.device, self.function, &spec.name, &spec.source, kernel.source_hash, &defines)?;
        // The template's ring lives in dynamic shared memory, past the default 48 KB for most configs.
        let shared_bytes = config.shared_bytes(group.matmuls.len() == 2);
        let shared = i32::try_from(shared_bytes).map_err(|_| self.internal("skinny shared memory size"))?;
        function
            .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
            .map_err(|e| driver_error(&format!("{}: allow {shared_bytes} bytes of shared memory", spec.name), e))?;
        let mut words = launch.pack();
        let gemm_at = words.len();
        words.extend(gemm.words());
        let shared_bytes = shared as u32;
        launch_kernel(self.device, &spec.name, &function, grid, shared_bytes, &mut words)?;
        if self.recording.is_some() {
            let mut patches = self.patches(spec, &values);
            let left = self.graph.node(group.matmuls[0]).args[0];
            patches.push(Patch { word: gemm_at, node: base_of(self.graph, left).index() });
            for (j, &mm) in group.matmuls.iter().enumerate() {
                patches.push(Patch { word: gemm_at + 1 + j, node: base_of(self.graph, self.graph.node(mm).args[1]).index() });
            }
            if let Some(recording) = &mut self.recording {
                recording.steps.push(Step::Kernel { name: spec.name.clone(), function, grid, shared_bytes, words, patches });
            }
        }
        for (&id, t) in spec.outputs.iter().zip(outputs) {
            self.values[id.index()] = Some(Value::Tensor(t));
        }
        if self.describe {
            let form = format!("m={} n={} k={} lda={} ldw={:?}", gemm.m, gemm.n, gemm.k, gemm.lda, &gemm.ldw[..group.matmuls.len()]);
            let note = self.path_note.take().map_or(String::new(), |n| format!("{n}; "));
            self.path_note = Some(format!("{note}skinny template {} ({form}), grid {grid}", config.name));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_names_round_trip() {
        let mut paths = vec![GemmPath::Cublas, GemmPath::CublasSplit, GemmPath::Lt(3)];
        paths.extend(CONFIGS.iter().map(GemmPath::Skinny));
        for p in paths {
            assert_eq!(GemmPath::parse(&p.name()), Some(p));
        }
        for bad in ["", "cublaslt", "cublaslt:x", "cublas:joined", "skinny:nope", "magic"] {
            assert_eq!(GemmPath::parse(bad), None, "{bad}");
        }
        assert_eq!(fastest(&[3.0, 1.0, 2.0]), 1.0);
    }
}
