//! The decoder split across the ranks of a tensor-parallel group (`fuse::parallel`, Megatron-style): each
//! rank holds its share of the heads (the q, k and v rows of its query heads and their key/value groups, the
//! output projection's matching columns) and of the FFN's hidden layer (gate and up rows, down columns); the
//! embedding, the norms, the LM head and the rotary tables are every rank's. The blocks' last products are
//! summed over the ranks (`forward_parallel`), so every rank ends each layer with the whole residual stream
//! and computes the same logits as the whole model, up to the order of the sums.

use super::{AttentionBlock, FfnBlock, Llama, TensorParallel};
use crate::{Error, Result};
use fuse::parallel::Rank;
use fuse::prelude::*;

impl Llama {
    /// This model's shard for `rank` (call it inside `fuse::parallel::Group::run`, once a rank), on the rank's
    /// device: its [`Config`](super::Config) has `heads`, `kv_heads` and `intermediate` divided by the
    /// group's size (its caches hold its key/value heads), `hidden` whole. An error where those do not divide,
    /// and for what is not sharded yet: q/k/v biases (Qwen2), a v projection apart from q and k, and q/k/v
    /// weights of quantized blocks (a model loaded with `load_stored`; `Llama::load` dequantizes).
    pub fn shard(&self, rank: &Rank) -> Result<Llama> {
        let (c, world, index) = (&self.config, rank.world(), rank.index());
        let unsupported = |what: String| Err(Error::InvalidArgument { what: format!("tensor parallelism: {what}") });
        if self.tensor_parallel.is_some() {
            return unsupported("the model is a shard already".into());
        }
        for (what, n) in [("query heads", c.heads), ("key/value heads", c.kv_heads), ("FFN columns", c.intermediate)] {
            if n % world != 0 {
                return unsupported(format!("{n} {what} do not divide into {world} ranks"));
            }
        }
        if self.biases.iter().any(Option::is_some) || self.split_v.iter().any(Option::is_some) {
            return unsupported("q/k/v biases (Qwen2) and a v projection apart are not sharded yet".into());
        }
        let device = rank.device();
        let on = |t: &Tensor| -> Result<Tensor> { Ok(t.to_device(device)?) };
        let (d, hq, hkv) = (c.head_dim, c.heads / world, c.kv_heads / world);
        let mut layers = Vec::with_capacity(self.layers.len());
        for (a, f) in &self.layers {
            if a.wqkv.dtype().block().is_some() {
                return unsupported(format!("q/k/v weights of {} blocks are not sharded yet", a.wqkv.dtype()));
            }
            // The stacked q|k|v rows: this rank's query heads, then its key and value heads.
            let rows = |start: usize, heads: usize| a.wqkv.narrow(0, start * d, heads * d);
            let (q, k) = (rows(index * hq, hq)?, rows(c.heads + index * hkv, hkv)?);
            let v = rows(c.heads + c.kv_heads + index * hkv, hkv)?;
            let attention = AttentionBlock {
                norm: on(&a.norm)?,
                wqkv: on(&cat(&[&q, &k, &v], 0)?)?,
                wo: on(&rank.row_parallel(&a.wo)?)?,
                eps: a.eps,
                scale: a.scale,
            };
            let ffn = FfnBlock {
                norm: on(&f.norm)?,
                gate: on(&rank.column_parallel(&f.gate)?)?,
                up: on(&rank.column_parallel(&f.up)?)?,
                down: on(&rank.row_parallel(&f.down)?)?,
                eps: f.eps,
            };
            layers.push((attention, ffn));
        }
        let mut config = c.clone();
        (config.heads, config.kv_heads, config.intermediate) = (hq, hkv, c.intermediate / world);
        Ok(Llama {
            config,
            embedding: on(&self.embedding)?,
            output: self.output.as_ref().map(on).transpose()?,
            layers,
            biases: vec![None; self.layers.len()],
            split_v: Vec::new(),
            output_norm: on(&self.output_norm)?,
            cos: on(&self.cos)?,
            sin: on(&self.sin)?,
            device: device.clone(),
            dtype: self.dtype,
            tensor_parallel: Some(TensorParallel { index, world }),
        })
    }

    /// Which rank of a tensor-parallel group this model is a shard for ([`Llama::shard`]), if any.
    pub fn tensor_parallel(&self) -> Option<TensorParallel> {
        self.tensor_parallel
    }
}
