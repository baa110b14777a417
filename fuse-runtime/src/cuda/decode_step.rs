//! The one-launch decode step (`fuse_ir::codegen::decode_step_source`, docs/persistent-step.md) on a GPU: a
//! Llama decoder's whole step at batch 1 (embedding, every layer, LM head, argmax) as one launch of
//! thread-block clusters. The caller packs the weights (`fuse_models::llama::DecodeStepWeights`) and owns the
//! key/value caches (bf16 tensors `[1, kv_heads, capacity, 64]`, one pair a layer); this uploads the weights
//! once, compiles the kernel for the model's shapes (sm_90a: clusters of 16, bulk copies, `st.async`), and
//! queues a launch a token on the device's stream. The token each step picks stays on the GPU (the next step
//! reads it), so steps queue back to back; [`DecodeStep::token`] reads the last one. [`DecodeStep::queue_run`]
//! queues steps whose positions the kernel reads and advances itself, logging their tokens on the device
//! ([`DecodeStep::run_tokens`]): generation without the host between tokens.

use super::device::CudaDevice;
use super::driver::driver_error;
use super::exec::kernels::fingerprint;
use super::exec::launch::{checked_address, launch_kernel, max_active_clusters, KernelDims};
use crate::{DType, Device, Error, Result, Tensor};
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr};
use fuse_ir::codegen::{
    decode_step_source, DECODE_STEP_CLUSTER, DECODE_STEP_CLUSTERS, DECODE_STEP_ENTRY, DECODE_STEP_THREADS,
};

const OP: &str = "decode_step";
/// Tokens the device's log holds (a run of steps is at most this long).
pub const DECODE_STEP_LOG: usize = 4096;

/// The packed weights and the shapes they were packed for (`fuse_models::llama::DecodeStepWeights`).
pub struct DecodeStepWeightsRef<'a> {
    /// The kernel's `-DFUSE_STEP_*` defines for the model's shapes.
    pub defines: &'a [String],
    /// Dynamic shared memory a block needs for those shapes.
    pub shared_bytes: usize,
    pub layers: usize,
    pub kv_heads: usize,
    pub hidden: usize,
    pub vocab: usize,
    /// Positions the kernel holds at most (its rope table's and scores' length).
    pub max_positions: usize,
    pub shares: &'a [u8],
    pub head_q: &'a [u8],
    pub head_d: &'a [u16],
    pub out_norm: &'a [f32],
    pub rope: &'a [f32],
}

/// The kernel, its weights on the GPU and the step's small buffers.
pub struct DecodeStep {
    device: CudaDevice,
    function: CudaFunction,
    shared_bytes: u32,
    layers: usize,
    kv_heads: usize,
    vocab: usize,
    max_positions: usize,
    shares: CudaSlice<u8>,
    head_q: CudaSlice<u8>,
    head_d: CudaSlice<u16>,
    out_norm: CudaSlice<f32>,
    rope: CudaSlice<f32>,
    /// The residual stream between clusters: tag << 32 | f32 bits, `hidden` words.
    words: CudaSlice<u64>,
    /// The packed argmax (step << 48 | ordered logit << 16 | token).
    best: CudaSlice<u64>,
    logits: CudaSlice<f32>,
    k_layers: CudaSlice<u64>,
    v_layers: CudaSlice<u64>,
    /// [position, steps, blocks done] for runs (`queue_run`), and the tokens they pick.
    control: CudaSlice<u64>,
    log: CudaSlice<u32>,
    /// The caches the pointer tables point into (kept alive with them), and their capacity.
    caches: Vec<(Tensor, Tensor)>,
    capacity: usize,
    /// Steps queued so far: the residual words' tags and (its low 16 bits) the argmax's step number.
    steps: u64,
}

fn upload<T: cudarc::driver::DeviceRepr>(device: &CudaDevice, what: &str, data: &[T]) -> Result<CudaSlice<T>> {
    device.stream().clone_htod(data).map_err(|e| driver_error(&format!("{OP}: upload {what}"), e))
}

impl DecodeStep {
    /// Uploads `weights` to `device` (a GPU of compute capability 9.0) and compiles the kernel for them.
    pub fn new(device: &Device, weights: DecodeStepWeightsRef<'_>) -> Result<DecodeStep> {
        let Device::Cuda(gpu) = device else {
            return Err(Error::unsupported(
                OP,
                "new",
                "the one-launch decode step runs on a GPU (compute capability 9.0)",
            ));
        };
        if !gpu.arch().starts_with("sm_90") {
            return Err(Error::unsupported(
                OP,
                "new",
                format!("it needs thread-block clusters of 16 and st.async (sm_90), this GPU is {}", gpu.arch()),
            ));
        }
        let w = &weights;
        let expect = |what: &'static str, got: usize, want: usize| {
            if got == want {
                Ok(())
            } else {
                Err(Error::InvalidArgument { op: OP, reason: format!("{what}: {got} values, the shapes need {want}") })
            }
        };
        expect("head_q", w.head_q.len(), w.vocab * w.hidden)?;
        expect("head_d", w.head_d.len(), w.vocab * w.hidden / 32)?;
        expect("out_norm", w.out_norm.len(), w.hidden)?;
        expect("rope", w.rope.len(), w.max_positions * 64)?;
        if w.layers == 0 || w.shares.len() % (w.layers * DECODE_STEP_CLUSTER as usize) != 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!(
                    "{} bytes of shares do not split over {} layers of {} blocks",
                    w.shares.len(),
                    w.layers,
                    DECODE_STEP_CLUSTER
                ),
            });
        }
        let function = gpu.kernel(
            OP,
            DECODE_STEP_ENTRY,
            decode_step_source(),
            fingerprint(decode_step_source()),
            w.defines,
            "sm_90a",
        )?;
        let shared_bytes = u32::try_from(w.shared_bytes).map_err(|_| Error::internal(OP, "shared memory past u32"))?;
        function
            .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes as i32)
            .map_err(|e| driver_error(&format!("{OP}: allow {shared_bytes} bytes of shared memory"), e))?;
        function
            .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
            .map_err(|e| driver_error(&format!("{OP}: allow clusters of {DECODE_STEP_CLUSTER}"), e))?;
        check_residency(gpu, &function, shared_bytes)?;
        let stream = gpu.stream();
        let zeros = |n: usize| stream.alloc_zeros::<u64>(n).map_err(|e| driver_error(&format!("{OP}: alloc"), e));
        Ok(DecodeStep {
            device: gpu.clone(),
            function,
            shared_bytes,
            layers: w.layers,
            kv_heads: w.kv_heads,
            vocab: w.vocab,
            max_positions: w.max_positions,
            shares: upload(gpu, "the layers' shares", w.shares)?,
            head_q: upload(gpu, "the token matrix", w.head_q)?,
            head_d: upload(gpu, "the token matrix's scales", w.head_d)?,
            out_norm: upload(gpu, "the final norm", w.out_norm)?,
            rope: upload(gpu, "the rope table", w.rope)?,
            words: zeros(w.hidden)?,
            best: zeros(1)?,
            logits: stream.alloc_zeros::<f32>(w.vocab).map_err(|e| driver_error(&format!("{OP}: alloc"), e))?,
            k_layers: zeros(w.layers)?,
            v_layers: zeros(w.layers)?,
            control: zeros(3)?,
            log: stream.alloc_zeros::<u32>(DECODE_STEP_LOG).map_err(|e| driver_error(&format!("{OP}: alloc"), e))?,
            caches: Vec::new(),
            capacity: 0,
            steps: 0,
        })
    }

    /// The key/value caches the steps read and append to: a pair of bf16 tensors `[1, kv_heads, capacity,
    /// 64]` a layer, contiguous, on this GPU (a `fuse_models` KvCache's layers).
    pub fn set_caches(&mut self, layers: &[(Tensor, Tensor)]) -> Result<()> {
        if layers.len() != self.layers {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!("{} cache layers for a model of {}", layers.len(), self.layers),
            });
        }
        let capacity = layers[0].0.shape().get(2).copied().unwrap_or(0);
        let (mut ks, mut vs) = (Vec::new(), Vec::new());
        for (i, (k, v)) in layers.iter().enumerate() {
            for (t, what) in [(k, "keys"), (v, "values")] {
                let want = [1, self.kv_heads, capacity, 64];
                if t.dtype() != DType::BF16 || t.shape() != want || !t.is_contiguous() {
                    return Err(Error::InvalidArgument {
                        op: OP,
                        reason: format!(
                            "layer {i}'s {what}: {} {:?}{}, expected contiguous bf16 {want:?}",
                            t.dtype(),
                            t.shape(),
                            if t.is_contiguous() { "" } else { " (strided)" }
                        ),
                    });
                }
            }
            ks.push(checked_address(OP, &self.device, k)?);
            vs.push(checked_address(OP, &self.device, v)?);
        }
        let stream = self.device.stream();
        stream.memcpy_htod(&ks, &mut self.k_layers).map_err(|e| driver_error(&format!("{OP}: cache table"), e))?;
        stream.memcpy_htod(&vs, &mut self.v_layers).map_err(|e| driver_error(&format!("{OP}: cache table"), e))?;
        self.caches = layers.to_vec();
        self.capacity = capacity;
        Ok(())
    }

    /// The token the next step embeds (after a prompt: its last token; later steps take the one the step
    /// before picked).
    pub fn set_token(&mut self, token: u32) -> Result<()> {
        if token as usize >= self.vocab {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!("token {token} is outside the vocabulary ({})", self.vocab),
            });
        }
        let packed = [((self.steps & 0xFFFF) << 48) | token as u64];
        self.device
            .stream()
            .memcpy_htod(&packed, &mut self.best)
            .map_err(|e| driver_error(&format!("{OP}: set the token"), e))
    }

    /// Queues one step at position `pos` (the caches hold positions 0..pos): it appends the position's keys
    /// and values and picks the next token greedily (and writes the logits when `with_logits`).
    pub fn queue(&mut self, pos: usize, with_logits: bool) -> Result<()> {
        self.check_positions(pos, 1)?;
        self.restart_step_numbers()?;
        self.steps += 1;
        self.launch(pos, with_logits, false)
    }

    /// Queues `steps` steps from position `pos` (the caches hold positions 0..pos) that read their position
    /// from the device and advance it, each logging the token it picks: the tokens come back with
    /// [`DecodeStep::run_tokens`]. The launches are the same each time (a CUDA graph can hold them).
    pub fn queue_run(&mut self, pos: usize, steps: usize) -> Result<()> {
        self.check_positions(pos, steps)?;
        if steps > DECODE_STEP_LOG {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!("a run of {steps} steps; the device's log holds {DECODE_STEP_LOG} tokens"),
            });
        }
        self.restart_step_numbers()?;
        let control = [pos as u64, self.steps + 1, 0];
        self.device
            .stream()
            .memcpy_htod(&control, &mut self.control)
            .map_err(|e| driver_error(&format!("{OP}: control words"), e))?;
        for _ in 0..steps {
            self.launch(0, false, true)?;
        }
        // The kernel restarted the argmax's 16-bit step number where it wrapped; the host's count goes on.
        self.steps += steps as u64;
        Ok(())
    }

    /// The tokens the last `steps` steps of runs picked, in order (waits for them).
    pub fn run_tokens(&self, steps: usize) -> Result<Vec<u32>> {
        let log =
            self.device.stream().clone_dtoh(&self.log).map_err(|e| driver_error(&format!("{OP}: read the log"), e))?;
        let first = self.steps + 1 - steps as u64;
        Ok((0..steps as u64).map(|i| log[((first + i) % DECODE_STEP_LOG as u64) as usize]).collect())
    }

    /// The argmax keeps a step number in 16 bits: before the next step's wraps, restart it with the current
    /// token (set below any logit).
    fn restart_step_numbers(&mut self) -> Result<()> {
        if (self.steps + 1) & 0xFFFF == 0 {
            let token = self.token()?;
            self.steps += 1;
            self.set_token(token)?;
        }
        Ok(())
    }

    fn check_positions(&self, pos: usize, steps: usize) -> Result<()> {
        if self.caches.is_empty() {
            return Err(Error::InvalidArgument { op: OP, reason: "no caches set (set_caches)".into() });
        }
        if pos + steps > self.capacity.min(self.max_positions) {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!(
                    "positions {pos}..{} are past the caches' {} positions (the kernel holds {})",
                    pos + steps,
                    self.capacity,
                    self.max_positions
                ),
            });
        }
        Ok(())
    }

    /// One launch: at `pos` with the host's step count, or (`run`) at the device's control words.
    fn launch(&mut self, pos: usize, with_logits: bool, run: bool) -> Result<()> {
        let stream = self.device.stream();
        let address = |s: &CudaSlice<u8>| s.device_ptr(stream).0;
        let mut words = [
            address(&self.shares),
            address(&self.head_q),
            self.head_d.device_ptr(stream).0,
            self.out_norm.device_ptr(stream).0,
            self.best.device_ptr(stream).0,
            if with_logits { self.logits.device_ptr(stream).0 } else { 0 },
            self.words.device_ptr(stream).0,
            self.k_layers.device_ptr(stream).0,
            self.v_layers.device_ptr(stream).0,
            self.rope.device_ptr(stream).0,
            0, // trace
            pos as u64,
            self.capacity as u64,
            self.steps & 0xFFFF,
            (self.steps * 32 + 1) & 0xFFFF_FFFF, // the residual words' tags: above the last step's
            if run { self.control.device_ptr(stream).0 } else { 0 },
            if run { self.log.device_ptr(stream).0 } else { 0 },
            DECODE_STEP_LOG as u64,
        ];
        launch_kernel(&self.device, DECODE_STEP_ENTRY, &self.function, step_dims(self.shared_bytes), &mut words)
    }

    /// Microseconds a step, `steps` steps queued back to back at position `pos` (each writes the same cache
    /// row, at or past the caller's length: scratch until a real step writes it), by CUDA events.
    pub fn time_steps(&mut self, pos: usize, steps: usize) -> Result<f64> {
        let device = self.device.clone();
        let ms = device.time_ms(|| (0..steps).try_for_each(|_| self.queue(pos, false)))?;
        Ok(ms * 1e3 / steps.max(1) as f64)
    }

    /// The token the last step picked (waits for it).
    pub fn token(&self) -> Result<u32> {
        let best = self
            .device
            .stream()
            .clone_dtoh(&self.best)
            .map_err(|e| driver_error(&format!("{OP}: read the token"), e))?;
        Ok((best[0] & 0xFFFF) as u32)
    }

    /// The last step's logits, when it was queued with them (waits for it).
    pub fn logits(&self) -> Result<Vec<f32>> {
        self.device.stream().clone_dtoh(&self.logits).map_err(|e| driver_error(&format!("{OP}: read the logits"), e))
    }
}

/// The step's clusters wait on each other (a layer's cluster polls the words the layer before wrote), so all
/// of them must be resident at once: an error, not a hang, on a GPU that cannot hold them.
fn check_residency(gpu: &CudaDevice, function: &CudaFunction, shared_bytes: u32) -> Result<()> {
    let clusters = max_active_clusters(gpu, OP, function, step_dims(shared_bytes))?;
    if clusters < DECODE_STEP_CLUSTERS {
        return Err(Error::unsupported(
            OP,
            "new",
            format!(
                "this GPU holds {clusters} clusters of {DECODE_STEP_CLUSTER} blocks with {shared_bytes} bytes of shared memory each at once; the step needs {DECODE_STEP_CLUSTERS} resident together"
            ),
        ));
    }
    Ok(())
}

/// A step's launch: its clusters, not overlapping the kernel before (it does not wait for it in the kernel).
fn step_dims(shared_bytes: u32) -> KernelDims {
    KernelDims {
        grid: DECODE_STEP_CLUSTER * DECODE_STEP_CLUSTERS,
        block: DECODE_STEP_THREADS,
        cluster: DECODE_STEP_CLUSTER,
        shared_bytes,
        overlap: false,
    }
}
