//! The model's sizes and weights, from a GGUF file, on a device in a dtype.

use super::block::{AttentionBlock, FfnBlock};
use super::cache::KvCache;
use crate::gguf::GgufFile;
use crate::rotary::unpermute_rotary_rows;
use crate::{Error, Result};
use fuse::prelude::*;

/// The Llama-family decoders read from GGUF, by the file's `general.architecture` (also the prefix of their
/// metadata keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// `llama` (Llama 2 and 3, SmolLM2): llama.cpp's converter permutes the rows of `attn_q` and `attn_k` for
    /// its rotary embedding over adjacent pairs, so the loader puts them back in half-split order.
    Llama,
    /// `qwen2` (Qwen2, Qwen2.5): a bias on the q, k and v projections; llama.cpp rotates it in half-split order
    /// (its NEOX rope), so the converter leaves the rows as Hugging Face has them.
    Qwen2,
}

impl Architecture {
    /// The file's `general.architecture`; another than `llama` or `qwen2` is an error naming it.
    pub fn of(file: &GgufFile) -> Result<Architecture> {
        match file.str("general.architecture")? {
            "llama" => Ok(Architecture::Llama),
            "qwen2" => Ok(Architecture::Qwen2),
            other => Err(Error::UnsupportedArchitecture { path: file.path().into(), architecture: other.into() }),
        }
    }

    /// The name in `general.architecture`, and the prefix of the architecture's metadata keys.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
        }
    }

    /// Whether the file's `attn_q` / `attn_k` rows (and biases) are in llama.cpp's adjacent-pair order.
    pub fn permutes_rotary_rows(self) -> bool {
        self == Architecture::Llama
    }
}

/// The sizes of a Llama-family model, from the `<architecture>.*` metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub architecture: Architecture,
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub context: usize,
    pub rope_theta: f64,
    pub eps: f32,
}

impl Config {
    /// SmolLM2-135M's sizes (what its GGUF file says), for a model with random weights of that shape.
    pub fn smollm2_135m() -> Config {
        Config {
            architecture: Architecture::Llama,
            hidden: 576,
            intermediate: 1536,
            layers: 30,
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
            vocab: 49152,
            context: 8192,
            rope_theta: 100000.0,
            eps: 1e-5,
        }
    }

    /// Qwen2.5-0.5B's sizes (as its GGUF files say; its embedding is tied), for random weights of that shape.
    pub fn qwen2_5_0_5b() -> Config {
        Config {
            architecture: Architecture::Qwen2,
            hidden: 896,
            intermediate: 4864,
            layers: 24,
            heads: 14,
            kv_heads: 2,
            head_dim: 64,
            vocab: 151936,
            context: 32768,
            rope_theta: 1000000.0,
            eps: 1e-6,
        }
    }

    pub fn from_gguf(file: &GgufFile) -> Result<Config> {
        let architecture = Architecture::of(file)?;
        let key = |k: &str| format!("{}.{k}", architecture.name());
        let u = |k: &str| file.u32(&key(k)).map(|v| v as usize);
        let (hidden, heads) = (u("embedding_length")?, u("attention.head_count")?);
        if heads == 0 || hidden % heads != 0 || (hidden / heads) % 2 != 0 {
            return Err(Error::BadShape {
                what: format!("hidden size {hidden} does not split into {heads} heads of an even size"),
            });
        }
        let kv_heads = u("attention.head_count_kv")?;
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(Error::BadShape {
                what: format!("{heads} query heads do not share {kv_heads} key/value heads evenly"),
            });
        }
        let config = Config {
            architecture,
            hidden,
            intermediate: u("feed_forward_length")?,
            layers: u("block_count")?,
            heads,
            kv_heads,
            head_dim: hidden / heads,
            vocab: file.strings("tokenizer.ggml.tokens")?.len(),
            context: u("context_length")?,
            rope_theta: file.f32(&key("rope.freq_base"))? as f64,
            eps: file.f32(&key("attention.layer_norm_rms_epsilon"))?,
        };
        config.check(file, &key)?;
        Ok(config)
    }

    /// What the file's numbers must be for the model to be the one it describes: positive sizes, a positive
    /// finite epsilon and rope base, and exactly `block_count` layers of tensors (`blk.0.` to `blk.{n-1}.`).
    fn check(&self, file: &GgufFile, key: &dyn Fn(&str) -> String) -> Result<()> {
        let bad = |k: &str, what: String| {
            Err(Error::BadShape { what: format!("{}: `{}` {what}", file.path().display(), key(k)) })
        };
        for (k, v) in
            [("feed_forward_length", self.intermediate), ("block_count", self.layers), ("context_length", self.context)]
        {
            if v == 0 {
                return bad(k, "is 0".into());
            }
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return bad("attention.layer_norm_rms_epsilon", format!("is {} (a positive number)", self.eps));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad("rope.freq_base", format!("is {} (a positive number)", self.rope_theta));
        }
        if self.vocab == 0 {
            return Err(Error::BadShape { what: format!("{}: the tokenizer has no tokens", file.path().display()) });
        }
        // The layers the tensors have: one past the highest `blk.N.` index.
        let tensor_layers = file
            .tensors()
            .iter()
            .filter_map(|t| t.name.strip_prefix("blk.")?.split('.').next()?.parse::<usize>().ok())
            .max()
            .map_or(0, |n| n + 1);
        if tensor_layers != self.layers {
            return bad(
                "block_count",
                format!("is {}, but the file has tensors of {tensor_layers} layers", self.layers),
            );
        }
        Ok(())
    }
}

/// A layer's v projection held apart from its q|k stack (`AttentionBlock::forward_split`), with the biases of
/// both (zeros where the file has none).
pub(super) struct SplitV {
    pub wv: Tensor,
    pub bqk: Tensor,
    pub bv: Tensor,
}

/// Which rank of how many a sharded model is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorParallel {
    pub index: usize,
    pub world: usize,
}

/// The weights of every layer, the embedding, the LM head and the rotary tables, on one device.
pub struct Llama {
    pub config: Config,
    pub(super) embedding: Tensor,
    /// The LM head (`output.weight`), where the file has one; else the embedding is tied and serves as the head.
    pub(super) output: Option<Tensor>,
    pub(super) layers: Vec<(AttentionBlock, FfnBlock)>,
    /// Each layer's q, k and v biases stacked as its `wqkv`'s rows, where the model has them (Qwen2).
    pub(super) biases: Vec<Option<Tensor>>,
    /// Per layer, where its v projection is of another block type than q and k: v apart (and `wqkv` the q|k
    /// stack). Empty, or one entry a layer.
    pub(super) split_v: Vec<Option<SplitV>>,
    pub(super) output_norm: Tensor,
    /// cos and sin of position p times each rotary frequency, [context, head_dim / 2], in the model's dtype.
    pub(super) cos: Tensor,
    pub(super) sin: Tensor,
    pub(super) device: Device,
    pub(super) dtype: DType,
    /// The rank this model is a shard for (`Llama::shard`): its blocks sum their last products over the group.
    pub(super) tensor_parallel: Option<TensorParallel>,
}

impl Llama {
    /// Loads every tensor once: dequantised to f32 on the host, then converted to `dtype` on `device`. The
    /// query and key projections are put back in Hugging Face's half-split row order where the architecture's
    /// converter permuted them (`llama`; not `qwen2`). The q/k/v biases (Qwen2) are stacked like their rows;
    /// `output.weight`, where present, is the LM head, else the embedding is (tied).
    pub fn load(file: &GgufFile, device: &Device, dtype: DType) -> Result<Llama> {
        let config = Config::from_gguf(file)?;
        let c = &config;
        let tensor = |name: &str| -> Result<Tensor> {
            let shape = file.tensor_info(name)?.shape();
            let data = file.tensor_f32(name)?;
            Ok(upload(data, &shape, device, dtype)?)
        };
        let (mut layers, mut biases) = (Vec::with_capacity(c.layers), Vec::with_capacity(c.layers));
        for i in 0..c.layers {
            let (data, shape) = stacked_qkv_values(file, c, i)?;
            layers.push(layer_blocks(c, i, upload(data, &shape, device, dtype)?, &tensor)?);
            let bias = stacked_qkv_bias(file, c, i, shape[0])?;
            biases.push(bias.map(|b| upload(b, &[shape[0]], device, dtype)).transpose()?);
        }
        let (cos, sin) = rotary_tables(c, device, dtype)?;
        Ok(Llama {
            embedding: tensor("token_embd.weight")?,
            output: lm_head(file, &tensor)?,
            output_norm: tensor("output_norm.weight")?,
            layers,
            biases,
            split_v: Vec::new(),
            cos,
            sin,
            device: device.clone(),
            dtype,
            config,
            tensor_parallel: None,
        })
    }

    /// A model of `config`'s shape with random weights (normal, std 0.02; norms near 1), seeded: for timing
    /// without a model file (the time of a step does not depend on the weights' values).
    pub fn random(config: &Config, device: &Device, dtype: DType, seed: u64) -> Result<Llama> {
        let c = config.clone();
        let mut seed = seed;
        let mut weight = |shape: &[usize], mean: f32, std: f32| -> Result<Tensor> {
            seed = seed.wrapping_add(1);
            Ok(Tensor::randn_seeded(mean, std, shape, seed, &Device::Cpu)?.to_dtype(dtype)?.to_device(device)?)
        };
        let (h, kv) = (c.hidden, c.kv_heads * c.head_dim);
        let (mut layers, mut biases) = (Vec::with_capacity(c.layers), Vec::with_capacity(c.layers));
        for _ in 0..c.layers {
            biases.push(match c.architecture {
                Architecture::Qwen2 => Some(weight(&[h + 2 * kv], 0.0, 0.02)?),
                Architecture::Llama => None,
            });
            let attention = AttentionBlock {
                norm: weight(&[h], 1.0, 0.02)?,
                wqkv: weight(&[h + 2 * kv, h], 0.0, 0.02)?,
                wo: weight(&[h, h], 0.0, 0.02)?,
                eps: c.eps,
                scale: 1.0 / (c.head_dim as f32).sqrt(),
            };
            let ffn = FfnBlock {
                norm: weight(&[h], 1.0, 0.02)?,
                gate: weight(&[c.intermediate, h], 0.0, 0.02)?,
                up: weight(&[c.intermediate, h], 0.0, 0.02)?,
                down: weight(&[h, c.intermediate], 0.0, 0.02)?,
                eps: c.eps,
            };
            layers.push((attention, ffn));
        }
        let (cos, sin) = rotary_tables(&c, device, dtype)?;
        Ok(Llama {
            embedding: weight(&[c.vocab, h], 0.0, 0.02)?,
            output: None,
            output_norm: weight(&[h], 1.0, 0.02)?,
            layers,
            biases,
            split_v: Vec::new(),
            cos,
            sin,
            device: device.clone(),
            dtype,
            config: c,
            tensor_parallel: None,
        })
    }

    /// Weights held (a tied embedding once).
    pub fn parameters(&self) -> usize {
        self.weights().iter().map(|t| t.numel()).sum()
    }

    /// Every weight tensor, a tied embedding once.
    pub(super) fn weights(&self) -> Vec<&Tensor> {
        let mut weights = vec![&self.embedding, &self.output_norm];
        weights.extend(&self.output);
        for (a, f) in &self.layers {
            weights.extend([&a.norm, &a.wqkv, &a.wo, &f.norm, &f.gate, &f.up, &f.down]);
        }
        weights.extend(self.biases.iter().flatten());
        weights.extend(self.split_v.iter().flatten().flat_map(|s| [&s.wv, &s.bqk, &s.bv]));
        weights
    }

    /// The LM head: `output.weight` where the file has one, else the (tied) embedding.
    pub(super) fn head(&self) -> &Tensor {
        self.output.as_ref().unwrap_or(&self.embedding)
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// An empty cache for a batch of one holding `capacity` positions (at most the model's context).
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache> {
        self.new_batch_cache(1, capacity)
    }

    /// An empty cache for `batch` sequences of up to `capacity` positions each (at most the context).
    pub fn new_batch_cache(&self, batch: usize, capacity: usize) -> Result<KvCache> {
        let c = &self.config;
        if capacity > c.context {
            return Err(Error::CacheFull { capacity: c.context, used: 0, asked: capacity });
        }
        Ok(KvCache::new(c.layers, batch, c.kv_heads, c.head_dim, capacity, self.dtype, &self.device)?)
    }
}

/// Layer `i`'s two blocks: `wqkv` the stacked q/k/v projection, every other matrix and norm from `tensor`.
pub(super) fn layer_blocks(
    c: &Config,
    i: usize,
    wqkv: Tensor,
    tensor: &dyn Fn(&str) -> Result<Tensor>,
) -> Result<(AttentionBlock, FfnBlock)> {
    let name = |part: &str| format!("blk.{i}.{part}.weight");
    let attention = AttentionBlock {
        norm: tensor(&name("attn_norm"))?,
        wqkv,
        wo: tensor(&name("attn_output"))?,
        eps: c.eps,
        scale: 1.0 / (c.head_dim as f32).sqrt(),
    };
    let ffn = FfnBlock {
        norm: tensor(&name("ffn_norm"))?,
        gate: tensor(&name("ffn_gate"))?,
        up: tensor(&name("ffn_up"))?,
        down: tensor(&name("ffn_down"))?,
        eps: c.eps,
    };
    Ok((attention, ffn))
}

/// The stacked q, k and v parts, each with the heads whose rows the converter permuted (`None`: not permuted,
/// as v always and q and k in a `qwen2` file).
pub(super) fn qkv_parts(c: &Config) -> [(&'static str, Option<usize>); 3] {
    let rotary = |heads: usize| c.architecture.permutes_rotary_rows().then_some(heads);
    [("attn_q", rotary(c.heads)), ("attn_k", rotary(c.kv_heads)), ("attn_v", None)]
}

/// Layer `i`'s q, k and v projections as one matrix of f32 values (their rows one after the other: one GEMM
/// reads the normalised input once for all three), q and k in Hugging Face's half-split row order; with
/// its shape.
pub(super) fn stacked_qkv_values(file: &GgufFile, c: &Config, i: usize) -> Result<(Vec<f32>, [usize; 2])> {
    let (mut data, mut rows, mut columns) = (Vec::new(), 0, None);
    for (part, heads) in qkv_parts(c) {
        let name = format!("blk.{i}.{part}.weight");
        let shape = file.tensor_info(&name)?.shape();
        let values = file.tensor_f32(&name)?;
        match columns {
            Some(columns) if shape[1] != columns => {
                return Err(Error::BadShape {
                    what: format!("blk.{i}.{part} has {} columns, attn_q {columns}", shape[1]),
                })
            }
            _ => columns = Some(shape[1]),
        }
        data.extend(match heads {
            Some(heads) => unpermute_rotary_rows(&values, shape[0], shape[1], heads)?,
            None => values,
        });
        rows += shape[0];
    }
    Ok((data, [rows, columns.unwrap_or(0)]))
}

/// Layer `i`'s q, k and v biases stacked as the rows of its stacked projection (`rows` of them, q and k
/// reordered as their rows are), in f32; `None` where the file has none of the three (Llama). A part the file
/// lacks while having another is zero.
pub(super) fn stacked_qkv_bias(file: &GgufFile, c: &Config, i: usize, rows: usize) -> Result<Option<Vec<f32>>> {
    let name = |part: &str| format!("blk.{i}.{part}.bias");
    if qkv_parts(c).iter().all(|(part, _)| file.tensor_info(&name(part)).is_err()) {
        return Ok(None);
    }
    let mut data = Vec::with_capacity(rows);
    for (part, heads) in qkv_parts(c) {
        let len = file.tensor_info(&format!("blk.{i}.{part}.weight"))?.shape()[0];
        let values = match file.tensor_info(&name(part)) {
            Err(_) => vec![0.0; len],
            Ok(info) if info.n_elements != len as u64 => {
                return Err(Error::BadShape {
                    what: format!("blk.{i}.{part}.bias has {} values for {len} rows", info.n_elements),
                })
            }
            Ok(_) => file.tensor_f32(&name(part))?,
        };
        data.extend(match heads {
            Some(heads) => unpermute_rotary_rows(&values, len, 1, heads)?,
            None => values,
        });
    }
    if data.len() != rows {
        return Err(Error::BadShape { what: format!("blk.{i}: {} biases for {rows} q/k/v rows", data.len()) });
    }
    Ok(Some(data))
}

/// `output.weight` through `tensor` where the file has it (an untied LM head), else `None` (tied).
pub(super) fn lm_head(file: &GgufFile, tensor: &dyn Fn(&str) -> Result<Tensor>) -> Result<Option<Tensor>> {
    file.tensor_info("output.weight").ok().map(|_| tensor("output.weight")).transpose()
}

/// f32 values made `dtype` on the host, then moved to `device` (one copy of the narrow values there).
pub(super) fn upload(data: Vec<f32>, shape: &[usize], device: &Device, dtype: DType) -> fuse::Result<Tensor> {
    Tensor::from_vec(data, shape, &Device::Cpu)?.to_dtype(dtype)?.to_device(device)
}

/// cos and sin of `p * theta^(-2i/d)` for every position p < context and i < d/2, in f32 as Hugging Face's
/// Llama computes them (inverse frequencies, products and cosines all in f32), then stored in the model's
/// dtype (as transformers casts them to the activations' dtype), so that the logits agree.
pub(super) fn rotary_tables(c: &Config, device: &Device, dtype: DType) -> fuse::Result<(Tensor, Tensor)> {
    let half = c.head_dim / 2;
    let (cos, sin) = rotary_cos_sin(c.rope_theta, c.head_dim, c.context);
    Ok((upload(cos, &[c.context, half], device, dtype)?, upload(sin, &[c.context, half], device, dtype)?))
}

/// cos and sin of `p * theta^(-2i/head_dim)` for p < `positions` and i < head_dim / 2 ([positions][head_dim / 2]
/// each), in f32 as Hugging Face's Llama computes them.
pub(super) fn rotary_cos_sin(theta: f64, head_dim: usize, positions: usize) -> (Vec<f32>, Vec<f32>) {
    let theta = theta as f32;
    let inv: Vec<f32> = (0..head_dim / 2).map(|i| 1.0 / theta.powf((2 * i) as f32 / head_dim as f32)).collect();
    let angles = (0..positions).flat_map(|p| inv.iter().map(move |f| p as f32 * f));
    angles.map(|a| (a.cos(), a.sin())).unzip()
}
