//! A forward step with its inputs on the device, and the decode step captured as a CUDA graph.
//!
//! Everything that changes from one step to the next (token ids, positions, how far the cache is filled)
//! is in [`StepInputs`], tensors on the model's device written before each step; the step reads them there.
//! So a decode step is the same GPU work every time, and [`Decoder`] records it once (`fuse::CudaGraph`)
//! and replays it: one launch per token instead of a few hundred host calls.

use super::sample::Pick;
use super::{KvCache, Llama, Sampling};
use crate::{Error, Result};
use fuse::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;

/// How a decoder records its step: `CudaGraph::capture` or one of its one-launch forms.
type Capture<'m> = fn(&Device, Box<dyn FnMut() -> fuse::Result<()> + 'm>) -> fuse::Result<CudaGraph<'m>>;

/// The inputs of a step of `batch` sequences with `len` new positions each, on the model's device.
#[derive(Clone)]
pub struct StepInputs {
    /// Token ids, u32 [batch, len].
    ids: Tensor,
    /// The new positions of each sequence, u32 [batch, len] (each sequence at its own): a view of `at` where
    /// `len` is 1.
    positions: Tensor,
    /// `at`, then `lens`, u32 [2, batch]: one write a step from the host, one gather and one copy on the device.
    state: Tensor,
    /// Each sequence's first new position, u32 [batch]: where the step writes into its rows of the cache (a
    /// view of `state`).
    at: Tensor,
    /// Positions each sequence attends over once the step is written, u32 [batch] (a view of `state`).
    lens: Tensor,
    batch: usize,
    len: usize,
}

impl StepInputs {
    pub fn new(batch: usize, len: usize, device: &Device) -> Result<StepInputs> {
        let zeros = |shape: &[usize]| Tensor::zeros(shape, DType::U32, device);
        let state = zeros(&[2, batch])?;
        let (at, lens) = (state.narrow(0, 0, 1)?.reshape(&[batch])?, state.narrow(0, 1, 1)?.reshape(&[batch])?);
        let positions = if len == 1 { at.reshape(&[batch, 1])? } else { zeros(&[batch, len])? };
        Ok(StepInputs { ids: zeros(&[batch, len])?, positions, state, at, lens, batch, len })
    }

    /// Writes the step's inputs: `ids` (batch-major, `batch * len` of them) at positions `pos ..` in every
    /// sequence.
    pub fn set(&self, ids: &[u32], pos: usize) -> Result<()> {
        self.set_each(ids, &vec![pos; self.batch])
    }

    /// Writes the step's inputs: `ids` (batch-major, `batch * len` of them), sequence `i`'s at positions
    /// `starts[i] ..`.
    pub fn set_each(&self, ids: &[u32], starts: &[usize]) -> Result<()> {
        if ids.len() != self.batch * self.len {
            return Err(Error::BadShape {
                what: format!("{} token ids for a step of {} x {}", ids.len(), self.batch, self.len),
            });
        }
        self.ids.copy_from_host(ids)?;
        self.set_positions_each(starts)
    }

    /// Writes the positions only, `pos ..` in every sequence (the ids are already there: a greedy decoder's
    /// step wrote them).
    pub fn set_positions(&self, pos: usize) -> Result<()> {
        self.set_positions_each(&vec![pos; self.batch])
    }

    /// Writes the positions only, sequence `i`'s from `starts[i]`.
    pub fn set_positions_each(&self, starts: &[usize]) -> Result<()> {
        if starts.len() != self.batch {
            return Err(Error::BadShape {
                what: format!("{} positions for a step of {} sequences", starts.len(), self.batch),
            });
        }
        let position =
            |p: usize| u32::try_from(p).map_err(|_| Error::BadShape { what: format!("position {p} past u32") });
        if self.len > 1 {
            let mut positions = Vec::with_capacity(self.batch * self.len);
            for &start in starts {
                for p in start..start + self.len {
                    positions.push(position(p)?);
                }
            }
            self.positions.copy_from_host(&positions)?;
        }
        // `at` then `lens` (and, for one new position, `positions`, a view of `at`).
        let at = starts.iter().map(|&p| position(p));
        let lens = starts.iter().map(|&p| position(p + self.len));
        let state: Vec<u32> = at.chain(lens).collect::<Result<_>>()?;
        self.state.copy_from_host(&state)?;
        Ok(())
    }
}

/// An id past the vocabulary is an error here, on the host, before any step reads it.
pub(crate) fn check_ids(ids: &[u32], vocab: usize) -> Result<()> {
    match ids.iter().find(|&&id| id as usize >= vocab) {
        Some(&bad) => Err(Error::UnknownTokenId { id: bad, vocab_size: vocab }),
        None => Ok(()),
    }
}

impl Llama {
    /// Runs `ids` (the next positions of one sequence) through the model, appending to `cache`; returns the
    /// logits of the last position (f32, `vocab` of them).
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        self.forward_with(ids, cache, Fusion::On)
    }

    /// [`Llama::forward`] with the blocks' fusion chosen (`Fusion::Off`: one op at a time, the baseline).
    pub fn forward_with(&self, ids: &[u32], cache: &mut KvCache, fusion: Fusion) -> Result<Vec<f32>> {
        let c = &self.config;
        let s = ids.len();
        if s == 0 {
            return Err(Error::BadShape { what: "a step needs at least one token".into() });
        }
        cache.reserve(s)?;
        check_ids(ids, c.vocab)?;
        let inputs = StepInputs::new(1, s, &self.device)?;
        inputs.set(ids, cache.len())?;
        let logits = self.step(&inputs, cache, fusion)?;
        cache.advance(s);
        Ok(logits.to_vec::<f32>()?)
    }

    /// Runs `ids` (the next positions of sequence `seq` of `cache`'s batch) through the model, appending to
    /// that sequence alone, at its own length; returns the logits of the last position (f32, `vocab`). How the
    /// prompts of a batch, of different lengths, fill one cache before a [`Decoder`] steps them together, each
    /// at its own position:
    ///
    /// ```
    /// # use fuse_models::llama::{Config, Llama};
    /// # use fuse::prelude::*;
    /// let mut config = Config::smollm2_135m();
    /// (config.hidden, config.intermediate, config.layers, config.vocab) = (128, 256, 2, 512);
    /// (config.heads, config.kv_heads, config.head_dim) = (4, 2, 32);
    /// let model = Llama::random(&config, &Device::Cpu, DType::F32, 1)?;
    /// let mut cache = model.new_batch_cache(2, 16)?;
    /// model.forward_sequence(0, &[1, 2, 3], &mut cache)?;
    /// model.forward_sequence(1, &[4], &mut cache)?;
    /// assert_eq!(cache.lens(), [3, 1]);
    /// let mut decoder = model.decoder(&cache, Fusion::On)?;
    /// let logits = decoder.step(&[5, 6], &mut cache)?; // sequence 0 at position 3, sequence 1 at 1
    /// assert_eq!((logits.len(), cache.lens()), (2 * 512, &[4, 2][..]));
    /// # Ok::<(), fuse_models::Error>(())
    /// ```
    pub fn forward_sequence(&self, seq: usize, ids: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        let mut one = cache.sequence(seq)?;
        let logits = self.forward(ids, &mut one)?;
        cache.advance_sequence(seq, ids.len());
        Ok(logits)
    }

    /// One step over the tensors of `cache`: the new keys and values are written into it at `inputs`'
    /// positions (the caller keeps its length), and the logits of each sequence's last position are
    /// returned, [batch, 1, vocab], on the model's device. No host round trip: capturable.
    pub fn step(&self, inputs: &StepInputs, cache: &KvCache, fusion: Fusion) -> Result<Tensor> {
        let c = &self.config;
        let (b, s) = (inputs.batch, inputs.len);
        if cache.batch() != b {
            return Err(Error::BadShape { what: format!("a step of {b} sequences on a cache of {}", cache.batch()) });
        }
        let (cos, sin) = (embedding(&inputs.positions, &self.cos)?, embedding(&inputs.positions, &self.sin)?);
        // A table of quantized blocks gives f32 rows: the activations' dtype from here on.
        let mut x = embedding(&inputs.ids, &self.embedding)?;
        if x.dtype() != self.dtype {
            x = x.to_dtype(self.dtype)?;
        }
        for (i, ((attention, ffn), bias)) in self.layers.iter().zip(&self.biases).enumerate() {
            let (k_cache, v_cache) = cache.layer(i);
            let (at, lens) = (&inputs.at, &inputs.lens);
            let (heads, hqk) = (c.heads + 2 * c.kv_heads, c.heads + c.kv_heads);
            let split = self.split_v.get(i).and_then(Option::as_ref);
            // A shard's attention output is its own heads' columns (`width`); its blocks sum their last product.
            let (parallel, width) = (self.tensor_parallel.is_some(), c.heads * c.head_dim);
            let y = match (bias, split, parallel) {
                (_, Some(v), false) => attention.forward_split_with(
                    &x, &v.wv, &v.bqk, &v.bv, &cos, &sin, k_cache, v_cache, at, lens, b, s, c.heads, c.kv_heads, hqk,
                    c.head_dim, c.hidden, fusion,
                )?,
                (_, Some(v), true) => attention.forward_split_parallel_with(
                    &x, &v.wv, &v.bqk, &v.bv, &cos, &sin, k_cache, v_cache, at, lens, b, s, c.heads, c.kv_heads, hqk,
                    c.head_dim, width, fusion,
                )?,
                (None, None, false) => attention.forward_with(
                    &x, &cos, &sin, k_cache, v_cache, at, lens, b, s, c.heads, c.kv_heads, heads, hqk, c.head_dim,
                    c.hidden, fusion,
                )?,
                (None, None, true) => attention.forward_parallel_with(
                    &x, &cos, &sin, k_cache, v_cache, at, lens, b, s, c.heads, c.kv_heads, heads, hqk, c.head_dim,
                    width, fusion,
                )?,
                (Some(bqkv), None, false) => attention.forward_biased_with(
                    &x, bqkv, &cos, &sin, k_cache, v_cache, at, lens, b, s, c.heads, c.kv_heads, heads, hqk,
                    c.head_dim, c.hidden, fusion,
                )?,
                (Some(bqkv), None, true) => attention.forward_biased_parallel_with(
                    &x, bqkv, &cos, &sin, k_cache, v_cache, at, lens, b, s, c.heads, c.kv_heads, heads, hqk,
                    c.head_dim, width, fusion,
                )?,
            };
            x = match self.tensor_parallel {
                Some(_) => ffn.forward_parallel_with(&y, fusion)?,
                None => ffn.forward_with(&y, fusion)?,
            };
        }
        let last = x.narrow(1, s - 1, 1)?;
        Ok(rms_norm(&last, &self.output_norm, c.eps)?.matmul(&self.head().t()?)?)
    }

    /// A decode step (one new token per sequence) over `cache`, recorded as a CUDA graph on a GPU (on the
    /// CPU, or with `FUSE_GRAPHS=off`, [`Decoder::step`] runs it call by call). Run one step of this shape
    /// first (`step` or `forward`): kernels compile and GEMM paths are tuned on first use, which a capture
    /// cannot do.
    pub fn decoder<'m>(&'m self, cache: &KvCache, fusion: Fusion) -> Result<Decoder<'m>> {
        self.decoder_with(cache, fusion, false)
    }

    /// [`Llama::decoder`] whose recorded step also picks each sequence's most likely token and writes it as
    /// the next step's input, so that steps follow one another on the device ([`Decoder::advance`]): greedy
    /// decoding with no host round trip per token (how the peers' CUDA-graph loops decode).
    pub fn greedy_decoder<'m>(&'m self, cache: &KvCache, fusion: Fusion) -> Result<Decoder<'m>> {
        self.decoder_with(cache, fusion, true)
    }

    /// [`Llama::greedy_decoder`] that draws each sequence's next token as `sampling` says (top-p at a
    /// temperature, seeded; a temperature of 0 is greedy) on the device (`sample.rs`): seeded sampling with no
    /// host round trip per token. The same seed gives the same tokens; an out-of-range temperature or top-p is
    /// an error ([`Sampling::check`]).
    pub fn sampling_decoder<'m>(&'m self, cache: &KvCache, fusion: Fusion, sampling: Sampling) -> Result<Decoder<'m>> {
        let pick = Pick::new(sampling, cache.batch(), cache.capacity(), &self.device)?;
        self.record(cache, fusion, Some(pick), CudaGraph::capture)
    }

    /// [`Llama::sampling_decoder`] whose step runs as one persistent kernel ([`Llama::one_launch_decoder`]).
    pub fn one_launch_sampling_decoder<'m>(
        &'m self,
        cache: &KvCache,
        fusion: Fusion,
        sampling: Sampling,
    ) -> Result<Decoder<'m>> {
        let pick = Pick::new(sampling, cache.batch(), cache.capacity(), &self.device)?;
        self.record(cache, fusion, Some(pick), CudaGraph::capture_one_launch)
    }

    /// [`Llama::decoder`] (or, `greedy`, [`Llama::greedy_decoder`]) whose step runs as one persistent
    /// kernel generated from the step's own kernels (`fuse::CudaGraph::capture_one_launch`): the same
    /// logits, bit for bit; [`Decoder::one_launch_report`] says what became tasks and what stayed a launch.
    pub fn one_launch_decoder<'m>(&'m self, cache: &KvCache, fusion: Fusion, greedy: bool) -> Result<Decoder<'m>> {
        self.record(cache, fusion, greedy.then_some(Pick::Greedy), CudaGraph::capture_one_launch)
    }

    /// [`Llama::one_launch_decoder`]'s step kept as the CUDA graph of its recorded kernels
    /// (`fuse::CudaGraph::capture_one_launch_as_graph`): what the one-launch step computes, bit for bit, so
    /// its oracle, and its baseline in benchmarks.
    pub fn one_launch_graph_decoder<'m>(
        &'m self,
        cache: &KvCache,
        fusion: Fusion,
        greedy: bool,
    ) -> Result<Decoder<'m>> {
        self.record(cache, fusion, greedy.then_some(Pick::Greedy), CudaGraph::capture_one_launch_as_graph)
    }

    fn decoder_with<'m>(&'m self, cache: &KvCache, fusion: Fusion, greedy: bool) -> Result<Decoder<'m>> {
        self.record(cache, fusion, greedy.then_some(Pick::Greedy), CudaGraph::capture)
    }

    /// Records the decode step over `cache`; with `pick`, the step also picks each sequence's next token,
    /// writes it as the next step's input and advances its own positions.
    fn record<'m>(
        &'m self,
        cache: &KvCache,
        fusion: Fusion,
        pick: Option<Pick>,
        capture: Capture<'m>,
    ) -> Result<Decoder<'m>> {
        let advances = pick.is_some();
        let inputs = StepInputs::new(cache.batch(), 1, &self.device)?;
        let logits: Rc<RefCell<Option<Tensor>>> = Rc::new(RefCell::new(None));
        let (step_inputs, out, layers) = (inputs.clone(), logits.clone(), cache.clone_handles());
        // A step that picks advances its own positions by gathering from each position's successor (entry p
        // holds p + 1, up to the cache's capacity), on the device.
        let pick = match pick {
            Some(pick) => {
                let successors: Vec<u32> =
                    (1..=cache.capacity() as u64 + 1).map(|p| p.min(u32::MAX as u64) as u32).collect();
                Some((pick, Tensor::from_vec(successors, &[cache.capacity() + 1], &self.device)?))
            }
            None => None,
        };
        let graph = capture(
            &self.device,
            Box::new(move || -> fuse::Result<()> {
                let logits = self.step(&step_inputs, &layers, fusion).map_err(|e| match e {
                    Error::Fuse(e) => e,
                    other => fuse::Error::Capture { what: other.to_string() },
                })?;
                if let Some((pick, successors)) = &pick {
                    let b = step_inputs.batch;
                    let next = pick.next(&logits, &step_inputs.at)?;
                    step_inputs.ids.slice_set(&next, 0, 0)?;
                    // The next step's position and key count of each sequence, one on, written here (the
                    // positions are a view of them): steps that pick follow one another with no host write
                    // between them (Decoder::advance).
                    let next = successors.gather(&step_inputs.state.reshape(&[2 * b])?, 0)?;
                    step_inputs.state.slice_set(&next.reshape(&[2, b])?, 0, 0)?;
                }
                *out.borrow_mut() = Some(logits);
                Ok(())
            }),
        )?;
        let (cache_id, vocab) = (cache.id(), self.config.vocab);
        let decoder = Decoder { graph, inputs, logits, cache_id, vocab, advances, device_lens: None };
        if let (true, Some(names)) = (fuse::debug_level() >= 1, decoder.graph.kernel_names()?) {
            let layers = self.layers.len().max(1);
            eprintln!(
                "fuse: the recorded decode step launches {} kernels, {:.1} a layer over {layers} layers:",
                names.len(),
                names.len() as f64 / layers as f64
            );
            let mut counted: Vec<(usize, &String)> = Vec::new();
            for name in &names {
                match counted.iter_mut().find(|(_, n)| *n == name) {
                    Some((count, _)) => *count += 1,
                    None => counted.push((1, name)),
                }
            }
            counted.iter().for_each(|(count, name)| eprintln!("fuse:   {count:4} x {name}"));
        }
        Ok(decoder)
    }
}

/// The decode step of one cache, recorded (see [`Llama::decoder`]).
pub struct Decoder<'m> {
    graph: CudaGraph<'m>,
    inputs: StepInputs,
    logits: Rc<RefCell<Option<Tensor>>>,
    cache_id: u64,
    vocab: usize,
    /// Whether the step picks the next tokens and advances its own positions.
    advances: bool,
    /// The cache lengths the step's positions on the device stand at (a step that picks advanced them), where
    /// known: `advance` writes none while they match.
    device_lens: Option<Vec<usize>>,
}

impl Decoder<'_> {
    /// Decodes one token per sequence (`ids`, one each) at the cache's length, which grows by one; returns
    /// the logits, f32, `vocab` per sequence.
    pub fn step(&mut self, ids: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        check_ids(ids, self.vocab)?;
        self.replay_at(cache, |inputs, starts| inputs.set_each(ids, starts))?;
        self.logits()
    }

    /// One step of a decoder that picks its tokens ([`Llama::greedy_decoder`], [`Llama::sampling_decoder`]): the
    /// tokens the last step picked, each sequence at its length in the cache, which grows by one. Queued, not
    /// waited for: read [`Decoder::tokens`] to see them.
    /// The step advances its own positions on the device, so that after the first, steps follow one another
    /// with no host write (the positions are written again only where the cache's lengths moved otherwise).
    pub fn advance(&mut self, cache: &mut KvCache) -> Result<()> {
        let current = self.device_lens.as_deref() == Some(cache.lens());
        self.replay_at(cache, |inputs, starts| if current { Ok(()) } else { inputs.set_positions_each(starts) })
    }

    /// Writes the step's inputs with `write` (given each sequence's length in the cache: where its new
    /// position goes), replays the step and counts its position in `cache`, which must be the one the step was
    /// recorded over.
    fn replay_at(
        &mut self,
        cache: &mut KvCache,
        write: impl FnOnce(&StepInputs, &[usize]) -> Result<()>,
    ) -> Result<()> {
        if cache.id() != self.cache_id {
            return Err(Error::BadShape { what: "a decoder steps the cache it was made for, not another".into() });
        }
        cache.reserve(1)?;
        self.device_lens = None;
        write(&self.inputs, cache.lens())?;
        self.graph.replay()?;
        cache.advance(1);
        if self.advances {
            self.device_lens = Some(cache.lens().to_vec());
        }
        Ok(())
    }

    /// The last step's logits, f32, `vocab` per sequence (after [`Decoder::advance`]: what its tokens were
    /// picked from).
    pub fn logits(&self) -> Result<Vec<f32>> {
        let logits = self.logits.borrow();
        let logits =
            logits.as_ref().ok_or_else(|| Error::BadShape { what: "the recorded step made no logits".into() })?;
        Ok(logits.to_vec::<f32>()?)
    }

    /// The tokens the next step reads (after a greedy step: the ones it picked), one per sequence.
    pub fn tokens(&self) -> Result<Vec<u32>> {
        Ok(self.inputs.ids.to_vec::<u32>()?)
    }

    /// Writes the tokens the next step reads (to start a greedy run).
    pub fn set_tokens(&self, ids: &[u32]) -> Result<()> {
        check_ids(ids, self.vocab)?;
        Ok(self.inputs.ids.copy_from_host(ids)?)
    }

    /// Kernels one replay launches (`None` when the step is not recorded): FUSE_DEBUG=1 prints it, and how
    /// many of each kernel, when the decoder is made.
    pub fn kernel_count(&self) -> Result<Option<usize>> {
        Ok(self.graph.kernel_count()?)
    }

    /// The kernels one replay launches, by name, in order (`None` when the step is not recorded).
    pub fn kernel_names(&self) -> Result<Option<Vec<String>>> {
        Ok(self.graph.kernel_names()?)
    }

    /// Whether the step is a recorded CUDA graph (false on the CPU and with `FUSE_GRAPHS=off`).
    pub fn is_recorded(&self) -> bool {
        self.graph.is_recorded()
    }

    /// How a [`Llama::one_launch_decoder`]'s step runs on the GPU (`None` for other decoders, and off the GPU).
    pub fn one_launch_report(&self) -> Option<&fuse::OneLaunchReport> {
        self.graph.one_launch_report()
    }
}
