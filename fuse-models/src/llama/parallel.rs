//! The decoder split across the ranks of a tensor-parallel group (`fuse::parallel`, Megatron-style): each
//! rank holds its share of the heads (the q, k and v rows of its query heads and their key/value groups, the
//! output projection's matching columns) and of the FFN's hidden layer (gate and up rows, down columns); the
//! embedding, the norms, the LM head and the rotary tables are every rank's. The blocks' last products are
//! summed over the ranks (`forward_parallel`), so every rank ends each layer with the whole residual stream
//! and computes the same logits as the whole model, up to the order of the sums.

use super::load::SplitV;
use super::{AttentionBlock, FfnBlock, Llama, TensorParallel};
use crate::{Error, Result};
use fuse::parallel::Rank;
use fuse::prelude::*;

impl Llama {
    /// This model's shard for `rank` (call it inside `fuse::parallel::Group::run`, once a rank), on the rank's
    /// device: its [`Config`](super::Config) has `heads`, `kv_heads` and `intermediate` divided by the
    /// group's size (its caches hold its key/value heads), `hidden` whole; q/k/v biases (Qwen2) and a v
    /// projection apart from q and k are cut with their heads. Block-quantized weights (`load_stored`) shard
    /// as stored (a model on the CPU moves only each rank's part to its device). An
    /// error where the heads or the FFN's columns do not divide, or a part would cut a block.
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
        let device = rank.device();
        let on = |t: &Tensor| -> Result<Tensor> { Ok(t.to_device(device)?) };
        let (d, hq, hkv) = (c.head_dim, c.heads / world, c.kv_heads / world);
        // The stacked q|k|v rows (and biases): this rank's query heads, then its key and value heads.
        let (q_rows, kv_rows) = (c.heads * d, c.kv_heads * d);
        let stacked = |t: &Tensor, parts: &[usize]| -> Result<Tensor> { on(&rank.shard_stacked(t, 0, parts)?) };
        let mut layers = Vec::with_capacity(self.layers.len());
        let (mut biases, mut split_v) = (Vec::with_capacity(self.layers.len()), Vec::with_capacity(self.split_v.len()));
        for (i, (a, f)) in self.layers.iter().enumerate() {
            let split = self.split_v.get(i).and_then(Option::as_ref);
            // With v apart, `wqkv` stacks q and k only.
            let qkv_parts: &[usize] = match split {
                Some(_) => &[q_rows, kv_rows],
                None => &[q_rows, kv_rows, kv_rows],
            };
            let attention = AttentionBlock {
                norm: on(&a.norm)?,
                wqkv: stacked(&a.wqkv, qkv_parts)?,
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
            biases.push(self.biases.get(i).and_then(Option::as_ref).map(|b| stacked(b, qkv_parts)).transpose()?);
            if !self.split_v.is_empty() {
                split_v.push(
                    split
                        .map(|v| -> Result<SplitV> {
                            Ok(SplitV {
                                wv: on(&rank.column_parallel(&v.wv)?)?,
                                bqk: stacked(&v.bqk, &[q_rows, kv_rows])?,
                                bv: on(&rank.column_parallel(&v.bv)?)?,
                            })
                        })
                        .transpose()?,
                );
            }
        }
        let mut config = c.clone();
        (config.heads, config.kv_heads, config.intermediate) = (hq, hkv, c.intermediate / world);
        Ok(Llama {
            config,
            embedding: on(&self.embedding)?,
            output: self.output.as_ref().map(on).transpose()?,
            layers,
            biases,
            split_v,
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
