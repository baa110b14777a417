//! The model's sizes and weights, from a GGUF file, on a device in a dtype.

use super::block::{AttentionBlock, FfnBlock};
use super::cache::KvCache;
use crate::gguf::GgufFile;
use crate::rotary::unpermute_rotary_rows;
use crate::{Error, Result};
use fuse::prelude::*;

/// The sizes of a Llama-family model, from `llama.*` metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
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
    pub fn from_gguf(file: &GgufFile) -> Result<Config> {
        let u = |k: &str| file.u32(&format!("llama.{k}")).map(|v| v as usize);
        let (hidden, heads) = (u("embedding_length")?, u("attention.head_count")?);
        if heads == 0 || hidden % heads != 0 || (hidden / heads) % 2 != 0 {
            return Err(Error::BadShape { what: format!("hidden size {hidden} does not split into {heads} heads of an even size") });
        }
        let kv_heads = u("attention.head_count_kv")?;
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(Error::BadShape { what: format!("{heads} query heads do not share {kv_heads} key/value heads evenly") });
        }
        Ok(Config {
            hidden,
            intermediate: u("feed_forward_length")?,
            layers: u("block_count")?,
            heads,
            kv_heads,
            head_dim: hidden / heads,
            vocab: file.strings("tokenizer.ggml.tokens")?.len(),
            context: u("context_length")?,
            rope_theta: file.f32("llama.rope.freq_base")? as f64,
            eps: file.f32("llama.attention.layer_norm_rms_epsilon")?,
        })
    }
}

/// The weights of every layer, the tied embedding and the rotary tables, on one device.
pub struct Llama {
    pub config: Config,
    embedding: Tensor,
    layers: Vec<(AttentionBlock, FfnBlock)>,
    output_norm: Tensor,
    /// cos and sin of position p times each rotary frequency, [context, head_dim / 2], in the model's dtype.
    cos: Tensor,
    sin: Tensor,
    device: Device,
    dtype: DType,
}

impl Llama {
    /// Loads every tensor once: dequantised to f32 on the host, then converted to `dtype` on `device`. The
    /// query and key projections are put back in Hugging Face's half-split row order.
    pub fn load(file: &GgufFile, device: &Device, dtype: DType) -> Result<Llama> {
        let config = Config::from_gguf(file)?;
        let c = &config;
        let tensor = |name: &str| -> Result<Tensor> {
            let shape = file.tensor_info(name)?.shape();
            let data = file.tensor_f32(name)?;
            Ok(upload(data, &shape, device, dtype)?)
        };
        let rotary = |name: &str, heads: usize| -> Result<Tensor> {
            let shape = file.tensor_info(name)?.shape();
            let data = unpermute_rotary_rows(&file.tensor_f32(name)?, shape[0], shape[1], heads)?;
            Ok(upload(data, &shape, device, dtype)?)
        };
        let mut layers = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            let name = |part: &str| format!("blk.{i}.{part}.weight");
            let attention = AttentionBlock {
                norm: tensor(&name("attn_norm"))?,
                wq: rotary(&name("attn_q"), c.heads)?,
                wk: rotary(&name("attn_k"), c.kv_heads)?,
                wv: tensor(&name("attn_v"))?,
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
            layers.push((attention, ffn));
        }
        let (cos, sin) = rotary_tables(c, device, dtype)?;
        Ok(Llama {
            embedding: tensor("token_embd.weight")?,
            output_norm: tensor("output_norm.weight")?,
            layers,
            cos,
            sin,
            device: device.clone(),
            dtype,
            config,
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// An empty cache for a batch of one holding `capacity` positions (at most the model's context).
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache> {
        let c = &self.config;
        if capacity > c.context {
            return Err(Error::CacheFull { capacity: c.context, used: 0, asked: capacity });
        }
        Ok(KvCache::new(c.layers, 1, c.kv_heads, c.head_dim, capacity, self.dtype, &self.device)?)
    }

    /// Runs `ids` (the next positions of one sequence) through the model, appending to `cache`; returns the
    /// logits of the last position (f32, `vocab` of them).
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        self.forward_with(ids, cache, Fusion::On)
    }

    /// [`Llama::forward`] with the blocks' fusion chosen (`Fusion::Off`: one op at a time, the baseline).
    pub fn forward_with(&self, ids: &[u32], cache: &mut KvCache, fusion: Fusion) -> Result<Vec<f32>> {
        let c = &self.config;
        let s = ids.len();
        cache.reserve(s)?;
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= c.vocab) {
            return Err(Error::UnknownTokenId { id: bad, vocab_size: c.vocab });
        }
        let ids = Tensor::from_vec(ids.to_vec(), &[1, s], &self.device)?;
        let pos = cache.len();
        let (cos, sin) = (self.cos.narrow(0, pos, s)?, self.sin.narrow(0, pos, s)?);
        let mut x = embedding(&ids, &self.embedding)?;
        for (i, (attention, ffn)) in self.layers.iter().enumerate() {
            let (k_cache, v_cache) = cache.layer(i);
            let (b, len) = (1, pos + s);
            let y = attention.forward_with(&x, &cos, &sin, k_cache, v_cache, pos, len, b, s, c.heads, c.kv_heads, c.head_dim, c.hidden, fusion)?;
            x = ffn.forward_with(&y, fusion)?;
        }
        cache.advance(s);
        let last = x.narrow(1, s - 1, 1)?;
        let logits = rms_norm(&last, &self.output_norm, c.eps)?.matmul(&self.embedding.t()?)?;
        Ok(logits.to_vec::<f32>()?)
    }
}

fn upload(data: Vec<f32>, shape: &[usize], device: &Device, dtype: DType) -> fuse::Result<Tensor> {
    Tensor::from_vec(data, shape, &Device::Cpu)?.to_dtype(dtype)?.to_device(device)
}

/// cos and sin of `p * theta^(-2i/d)` for every position p < context and i < d/2, in f32 as Hugging Face's
/// Llama computes them (inverse frequencies, products and cosines all in f32), then stored in the model's
/// dtype (as transformers casts them to the activations' dtype), so that the logits agree.
fn rotary_tables(c: &Config, device: &Device, dtype: DType) -> fuse::Result<(Tensor, Tensor)> {
    let half = c.head_dim / 2;
    let theta = c.rope_theta as f32;
    let inv: Vec<f32> = (0..half).map(|i| 1.0 / theta.powf((2 * i) as f32 / c.head_dim as f32)).collect();
    let angles = (0..c.context).flat_map(|p| inv.iter().map(move |f| p as f32 * f));
    let (cos, sin): (Vec<f32>, Vec<f32>) = angles.map(|a| (a.cos(), a.sin())).unzip();
    Ok((upload(cos, &[c.context, half], device, dtype)?, upload(sin, &[c.context, half], device, dtype)?))
}
