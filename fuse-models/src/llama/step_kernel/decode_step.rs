//! The one-launch decode step on a GPU, as a user's custom kernel (`fuse::custom_kernel`): a Llama decoder's
//! whole step at batch 1 (embedding, every layer, LM head, argmax) as one launch of thread-block clusters.
//! The weights are packed by [`DecodeStepWeights`]; the caller owns the key/value caches (bf16 tensors
//! `[1, kv_heads, capacity, 64]`, one pair a layer). This uploads the weights once, compiles the kernel for
//! the layout (sm_90a), checks that its clusters are resident together, and queues a launch a token on the
//! device's stream. The token each step picks stays on the GPU (the next step reads it), so steps queue back
//! to back; [`DecodeStep::token`] reads the last one. [`DecodeStep::queue_run`] queues steps whose positions
//! the kernel reads and advances itself, logging their tokens on the device ([`DecodeStep::run_tokens`]):
//! generation without the host between tokens.

use super::args::{argument_words, StepArg};
use super::layout::{StepLayout, STEP_HEAD_DIM, STEP_SHARES};
use super::weights::DecodeStepWeights;
use crate::{Error, Result};
use fuse::custom_kernel::{CustomKernel, DeviceBuffer};
use fuse::{DType, Device, Tensor};

const OP: &str = "decode_step";
/// Tokens the device's log holds (a run of steps is at most this long).
pub const DECODE_STEP_LOG: usize = 4096;

/// The kernel, its weights on the GPU and the step's small buffers.
pub struct DecodeStep {
    kernel: CustomKernel,
    layout: StepLayout,
    shares: DeviceBuffer<u8>,
    head_q: DeviceBuffer<u8>,
    head_d: DeviceBuffer<u16>,
    out_norm: DeviceBuffer<f32>,
    rope: DeviceBuffer<f32>,
    /// The residual stream between clusters: tag << 32 | f32 bits, `hidden` words.
    words: DeviceBuffer<u64>,
    /// The packed argmax (step << 48 | ordered logit << 16 | token).
    best: DeviceBuffer<u64>,
    logits: DeviceBuffer<f32>,
    k_layers: DeviceBuffer<u64>,
    v_layers: DeviceBuffer<u64>,
    /// [position, steps, blocks done] for runs (`queue_run`), and the tokens they pick.
    control: DeviceBuffer<u64>,
    log: DeviceBuffer<u32>,
    /// The caches the pointer tables point into (kept alive with them), and their capacity.
    caches: Vec<(Tensor, Tensor)>,
    capacity: usize,
    /// Steps queued so far: the residual words' tags and (its low 16 bits) the argmax's step number.
    steps: u64,
}

fn unsupported(reason: String) -> Error {
    Error::Fuse(fuse::Error::Unsupported { function: "DecodeStep::new".into(), op: OP, reason })
}

fn bad(what: String) -> Error {
    Error::BadShape { what: format!("{OP}: {what}") }
}

impl DecodeStep {
    /// Uploads `weights` to `device` (a GPU of compute capability 9.0) and compiles the kernel for their layout.
    pub fn new(device: &Device, weights: &DecodeStepWeights) -> Result<DecodeStep> {
        let Device::Cuda(gpu) = device else {
            return Err(unsupported(format!(
                "the one-launch decode step runs on a GPU (compute capability 9.0), not on {device}"
            )));
        };
        if !gpu.arch().starts_with("sm_90") {
            return Err(unsupported(format!(
                "it needs thread-block clusters of 16 and st.async (sm_90), this GPU is {}",
                gpu.arch()
            )));
        }
        let (w, layout) = (weights, weights.layout);
        let s = layout.shape;
        let expect = |what: &str, got: usize, want: usize| {
            if got == want {
                Ok(())
            } else {
                Err(bad(format!("{what}: {got} values, the layout needs {want}")))
            }
        };
        expect("shares", w.shares.len(), s.layers * STEP_SHARES * layout.share.bytes)?;
        expect("head_q", w.head_q.len(), s.vocab * s.hidden)?;
        expect("head_d", w.head_d.len(), s.vocab * s.hidden / 32)?;
        expect("out_norm", w.out_norm.len(), s.hidden)?;
        expect("rope", w.rope.len(), s.max_positions * STEP_HEAD_DIM)?;
        let kernel = CustomKernel::new(device, &layout.kernel_source(), layout.launch_dims())?;
        // The clusters wait on each other (a layer's cluster polls the words the layer before wrote), so all of
        // them must be resident at once: an error, not a hang, on a GPU that cannot hold them.
        kernel.require_co_resident()?;
        let zeros = |n: usize| DeviceBuffer::<u64>::zeros(gpu, n);
        Ok(DecodeStep {
            layout,
            shares: DeviceBuffer::upload(gpu, &w.shares)?,
            head_q: DeviceBuffer::upload(gpu, &w.head_q)?,
            head_d: DeviceBuffer::upload(gpu, &w.head_d)?,
            out_norm: DeviceBuffer::upload(gpu, &w.out_norm)?,
            rope: DeviceBuffer::upload(gpu, &w.rope)?,
            words: zeros(s.hidden)?,
            best: zeros(1)?,
            logits: DeviceBuffer::zeros(gpu, s.vocab)?,
            k_layers: zeros(s.layers)?,
            v_layers: zeros(s.layers)?,
            control: zeros(3)?,
            log: DeviceBuffer::zeros(gpu, DECODE_STEP_LOG)?,
            kernel,
            caches: Vec::new(),
            capacity: 0,
            steps: 0,
        })
    }

    pub fn layout(&self) -> &StepLayout {
        &self.layout
    }

    /// The key/value caches the steps read and append to: a pair of bf16 tensors `[1, kv_heads, capacity,
    /// 64]` a layer, contiguous, on this GPU (a `KvCache`'s layers).
    pub fn set_caches(&mut self, layers: &[(Tensor, Tensor)]) -> Result<()> {
        let s = self.layout.shape;
        if layers.len() != s.layers {
            return Err(bad(format!("{} cache layers for a model of {}", layers.len(), s.layers)));
        }
        let capacity = layers[0].0.shape().get(2).copied().unwrap_or(0);
        let (mut ks, mut vs) = (Vec::new(), Vec::new());
        for (i, (k, v)) in layers.iter().enumerate() {
            for (t, what) in [(k, "keys"), (v, "values")] {
                let want = [1, s.kv_heads, capacity, STEP_HEAD_DIM];
                if t.dtype() != DType::BF16 || t.shape() != want || !t.is_contiguous() {
                    return Err(bad(format!(
                        "layer {i}'s {what}: {} {:?}{}, expected contiguous bf16 {want:?}",
                        t.dtype(),
                        t.shape(),
                        if t.is_contiguous() { "" } else { " (strided)" }
                    )));
                }
            }
            ks.push(self.kernel.tensor_address(k)?);
            vs.push(self.kernel.tensor_address(v)?);
        }
        self.k_layers.write(&ks)?;
        self.v_layers.write(&vs)?;
        self.caches = layers.to_vec();
        self.capacity = capacity;
        Ok(())
    }

    /// The token the next step embeds (after a prompt: its last token; later steps take the one the step
    /// before picked).
    pub fn set_token(&mut self, token: u32) -> Result<()> {
        let vocab = self.layout.shape.vocab;
        if token as usize >= vocab {
            return Err(Error::UnknownTokenId { id: token, vocab_size: vocab });
        }
        Ok(self.best.write(&[((self.steps & 0xFFFF) << 48) | token as u64])?)
    }

    /// Queues one step at position `pos` (the caches hold positions 0..pos): it appends the position's keys
    /// and values and picks the next token greedily (and writes the logits when `with_logits`).
    pub fn queue(&mut self, pos: usize, with_logits: bool) -> Result<()> {
        self.check_positions(pos, 1)?;
        Ok(self.queue_unchecked(pos, with_logits)?)
    }

    /// Queues `steps` steps from position `pos` (the caches hold positions 0..pos) that read their position
    /// from the device and advance it, each logging the token it picks: the tokens come back with
    /// [`DecodeStep::run_tokens`]. The launches are the same each time (a CUDA graph can hold them).
    pub fn queue_run(&mut self, pos: usize, steps: usize) -> Result<()> {
        self.check_positions(pos, steps)?;
        if steps > DECODE_STEP_LOG {
            return Err(bad(format!("a run of {steps} steps; the device's log holds {DECODE_STEP_LOG} tokens")));
        }
        self.restart_step_numbers()?;
        self.control.write(&[pos as u64, self.steps + 1, 0])?;
        for _ in 0..steps {
            self.launch(0, false, true)?;
        }
        // The kernel restarted the argmax's 16-bit step number where it wrapped; the host's count goes on.
        self.steps += steps as u64;
        Ok(())
    }

    /// The tokens the last `steps` steps of runs picked, in order (waits for them).
    pub fn run_tokens(&self, steps: usize) -> Result<Vec<u32>> {
        let log = self.log.read()?;
        let first = self.steps + 1 - steps as u64;
        Ok((0..steps as u64).map(|i| log[((first + i) % DECODE_STEP_LOG as u64) as usize]).collect())
    }

    /// Microseconds a step, `steps` steps queued back to back at position `pos` (each writes the same cache
    /// row, at or past the caller's length: scratch until a real step writes it), by CUDA events.
    pub fn time_steps(&mut self, pos: usize, steps: usize) -> Result<f64> {
        self.check_positions(pos, 1)?;
        let device = self.kernel.device().clone();
        let ms = device.time_ms(|| (0..steps).try_for_each(|_| self.queue_unchecked(pos, false)))?;
        Ok(ms * 1e3 / steps.max(1) as f64)
    }

    /// The token the last step picked (waits for it).
    pub fn token(&self) -> Result<u32> {
        Ok((self.best.read()?[0] & 0xFFFF) as u32)
    }

    /// The last step's logits, when it was queued with them (waits for it).
    pub fn logits(&self) -> Result<Vec<f32>> {
        Ok(self.logits.read()?)
    }

    fn queue_unchecked(&mut self, pos: usize, with_logits: bool) -> fuse::Result<()> {
        self.restart_step_numbers()?;
        self.steps += 1;
        self.launch(pos, with_logits, false)
    }

    /// The argmax keeps a step number in 16 bits: before the next step's wraps, restart it with the current
    /// token (set below any logit).
    fn restart_step_numbers(&mut self) -> fuse::Result<()> {
        if (self.steps + 1) & 0xFFFF == 0 {
            let token = self.best.read()?[0] & 0xFFFF;
            self.steps += 1;
            self.best.write(&[((self.steps & 0xFFFF) << 48) | token])?;
        }
        Ok(())
    }

    fn check_positions(&self, pos: usize, steps: usize) -> Result<()> {
        if self.caches.is_empty() {
            return Err(bad("no caches set (set_caches)".into()));
        }
        let max = self.layout.shape.max_positions;
        if pos + steps > self.capacity.min(max) {
            return Err(bad(format!(
                "positions {pos}..{} are past the caches' {} positions (the kernel holds {max})",
                pos + steps,
                self.capacity
            )));
        }
        Ok(())
    }

    /// One launch: at `pos` with the host's step count, or (`run`) at the device's control words.
    fn launch(&self, pos: usize, with_logits: bool, run: bool) -> fuse::Result<()> {
        let steps = self.steps;
        // The buffers a launch may leave out are null then.
        let logits = if with_logits { self.logits.address() } else { 0 };
        let (control, log) = if run { (self.control.address(), self.log.address()) } else { (0, 0) };
        let mut words = argument_words(|arg| match arg {
            StepArg::Shares => self.shares.address(),
            StepArg::HeadValues => self.head_q.address(),
            StepArg::HeadScales => self.head_d.address(),
            StepArg::OutNorm => self.out_norm.address(),
            StepArg::Best => self.best.address(),
            StepArg::Logits => logits,
            StepArg::Words => self.words.address(),
            StepArg::KeyLayers => self.k_layers.address(),
            StepArg::ValueLayers => self.v_layers.address(),
            StepArg::Rope => self.rope.address(),
            StepArg::Trace => 0,
            StepArg::Pos => pos as u64,
            StepArg::Capacity => self.capacity as u64,
            StepArg::Step => steps & 0xFFFF,
            // The residual words' tags: above the last step's.
            StepArg::Tag0 => (steps * 32 + 1) & 0xFFFF_FFFF,
            StepArg::Control => control,
            StepArg::Log => log,
            StepArg::LogLen => DECODE_STEP_LOG as u64,
        });
        // SAFETY: the words are FuseDecodeStepArgs's members in order (the header's struct is written from the
        // same list); every address is a buffer of this step or a cache checked by `set_caches`, all kept alive
        // by `self` (and freed in stream order), with the sizes the layout gives; the caller checked that the
        // position is below the caches' capacity and the kernel's positions.
        unsafe { self.kernel.launch(&mut words) }
    }
}

// Here rather than in weights.rs, so that the packer does not import the kernel that reads its output.
impl DecodeStepWeights {
    /// The kernel on `device` (an sm_90 GPU) with these weights uploaded.
    pub fn kernel(&self, device: &Device) -> Result<DecodeStep> {
        DecodeStep::new(device, self)
    }
}
