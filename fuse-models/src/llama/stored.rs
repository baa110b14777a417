//! The model with its weights as the file stores them: block-quantized matrices stay blocks, read in place from
//! the memory-mapped file, so the resident weights are the file's own bytes.

use super::load::{
    layer_blocks, lm_head, qkv_parts, rotary_tables, stacked_qkv_bias, stacked_qkv_values, upload, Config, Llama,
    SplitV,
};
use crate::gguf::GgufFile;
use crate::rotary::unpermute_rotary_rows;
use crate::{Error, Result};
use fuse::prelude::*;

impl Llama {
    /// Loads the model with its weights as stored: every block-quantized matrix (Q4_0 .. Q6_K) a tensor of that
    /// dtype over the mapped file's bytes (no copy on the CPU; uploaded once to a GPU), norms, activations, the
    /// rotary tables and the key/value cache in f32. The stacked q/k/v projection is the one copy made (its
    /// rows are the file's three matrices one after the other, q and k in Hugging Face's half-split order),
    /// its bias (Qwen2) stacked the same way; `output.weight` as stored is the LM head where present. Where
    /// v is of another block type than q and k (llama.cpp's Q4_K_M gives some layers' v Q6_K), q|k are one
    /// stack and v a matrix apart (two GEMMs, `AttentionBlock::forward_split`); where q and k differ, the
    /// stack is dequantized to the activations' dtype instead (said on stderr).
    pub fn load_stored(file: &GgufFile, device: &Device) -> Result<Llama> {
        Llama::load_stored_as(file, device, DType::F32)
    }

    /// [`Llama::load_stored`] with the activations (and norms, rotary tables, cache) in `dtype` (f32, f16 or
    /// bf16): bf16 halves what the cache and the activations move, at bf16's accuracy.
    pub fn load_stored_as(file: &GgufFile, device: &Device, dtype: DType) -> Result<Llama> {
        if !dtype.is_float() {
            return Err(Error::BadShape { what: format!("activations in {dtype}: f32, f16 or bf16") });
        }
        let config = Config::from_gguf(file)?;
        let c = &config;
        // As stored, but float tensors (F32, F16, BF16 norms) in the activations' dtype.
        let tensor = |name: &str| -> Result<Tensor> {
            let t = file.tensor(name, device)?;
            Ok(if t.dtype().is_quantized() { t } else { t.to_dtype(dtype)? })
        };
        let (mut layers, mut biases) = (Vec::with_capacity(c.layers), Vec::with_capacity(c.layers));
        let (mut dequantized, mut split_v, mut split) = (Vec::new(), Vec::with_capacity(c.layers), Vec::new());
        let parts = qkv_parts(c);
        for i in 0..c.layers {
            // One stack of blocks for q, k and v; else q|k stacked and v apart (llama.cpp's Q4_K_M gives some
            // layers' v more bits); else (q and k of two types) one stack dequantized.
            let (wqkv, wv) = match stacked_blocks(file, i, &parts, device)? {
                Some(blocks) => (blocks, None),
                None => match stacked_blocks(file, i, &parts[..2], device)? {
                    Some(qk) => (qk, Some(tensor(&format!("blk.{i}.attn_v.weight"))?)),
                    None => {
                        dequantized.push(i);
                        let (data, shape) = stacked_qkv_values(file, c, i)?;
                        (upload(data, &shape, device, dtype)?, None)
                    }
                },
            };
            let qk_rows = wqkv.shape()[0];
            let rows = qk_rows + wv.as_ref().map_or(0, |v| v.shape()[0]);
            let bias = stacked_qkv_bias(file, c, i, rows)?;
            match wv {
                None => {
                    biases.push(bias.map(|b| upload(b, &[rows], device, dtype)).transpose()?);
                    split_v.push(None);
                }
                Some(wv) => {
                    split.push(i);
                    let bias = bias.unwrap_or_else(|| vec![0.0; rows]);
                    let bqk = upload(bias[..qk_rows].to_vec(), &[qk_rows], device, dtype)?;
                    let bv = upload(bias[qk_rows..].to_vec(), &[rows - qk_rows], device, dtype)?;
                    biases.push(None);
                    split_v.push(Some(SplitV { wv, bqk, bv }));
                }
            }
            layers.push(layer_blocks(c, i, wqkv, &tensor)?);
        }
        if fuse::debug_level() >= 1 && !split.is_empty() {
            eprintln!("fuse-models: layers {split:?}: v is of another block type than q and k, so it is a GEMM apart");
        }
        if !dequantized.is_empty() {
            eprintln!(
                "fuse-models: layers {dequantized:?}: q, k and v are of different block types, so their stacked \
                 projection is held in {dtype}"
            );
        }
        let (cos, sin) = rotary_tables(c, device, dtype)?;
        let embedding = tensor("token_embd.weight")?;
        let output = lm_head(file, &tensor)?;
        let output_norm = tensor("output_norm.weight")?;
        let device = device.clone();
        Ok(Llama {
            config,
            embedding,
            output,
            layers,
            biases,
            split_v,
            output_norm,
            cos,
            sin,
            device,
            dtype,
            tensor_parallel: None,
        })
    }
}

impl Llama {
    /// A model of `config`'s shape whose matrices are random blocks of the type `type_of` gives each part
    /// (`attn_q`, `attn_k`, `attn_v`, `attn_output`, `ffn_gate`, `ffn_up`, `ffn_down`, `token_embd`: a
    /// Q4_K_M file, say, is mostly Q4_K with `attn_v`, `ffn_down` and `token_embd` in Q6_K), loaded as stored
    /// ([`Llama::load_stored_as`], activations in `dtype`) from a GGUF image made in memory; seeded. For
    /// timing and testing quantized models of real shapes without their files. `Err` names a part whose type
    /// is not a block type or whose rows do not hold whole blocks.
    ///
    /// ```
    /// use fuse::prelude::*;
    /// use fuse_models::llama::{Config, Llama};
    /// let mut config = Config::smollm2_135m();
    /// (config.layers, config.vocab) = (1, 256);
    /// let model = Llama::random_stored(&config, &|_| DType::Q8_0, &Device::Cpu, DType::F32, 7)?;
    /// // Read in place as stored: all but the q|k|v stack (the one copy) and the norms.
    /// let (in_place, held) = model.weight_bytes();
    /// assert!(in_place > held && held > 0);
    /// // SmolLM2's 576 values a row do not hold whole 256-value K blocks:
    /// assert!(Llama::random_stored(&config, &|_| DType::Q4_K, &Device::Cpu, DType::F32, 7).is_err());
    /// # Ok::<(), fuse_models::Error>(())
    /// ```
    pub fn random_stored(
        config: &Config,
        type_of: &dyn Fn(&str) -> DType,
        device: &Device,
        dtype: DType,
        seed: u64,
    ) -> Result<Llama> {
        let image = super::image::random_image(config, type_of, seed).map_err(|what| Error::BadShape { what })?;
        let file = GgufFile::from_bytes(image, "random.gguf")?;
        Llama::load_stored_as(&file, device, dtype)
    }

    /// The weights' bytes: (read in place from the file, held in memory of fuse's own), a tied embedding
    /// once. Dequantized weights count at their dtype's size.
    pub fn weight_bytes(&self) -> (u64, u64) {
        let (mut in_place, mut held) = (0u64, 0u64);
        for w in self.weights() {
            let bytes = w.dtype().storage_bytes(w.numel()).unwrap_or(0) as u64;
            if w.reads_blocks_in_place() {
                in_place += bytes;
            } else {
                held += bytes;
            }
        }
        (in_place, held)
    }
}

/// Layer `i`'s projections `parts` (of q, k and v) as one matrix of blocks (their rows one after the other, q
/// and k in half-split order), or `None` where they are not all of one block type.
fn stacked_blocks(
    file: &GgufFile,
    i: usize,
    parts: &[(&str, Option<usize>)],
    device: &Device,
) -> Result<Option<Tensor>> {
    let infos: Vec<_> =
        parts.iter().map(|(p, _)| file.tensor_info(&format!("blk.{i}.{p}.weight"))).collect::<Result<_>>()?;
    let dtype = infos[0].ggml_type.block_dtype();
    let (Some(dtype), true) = (dtype, infos.iter().all(|t| t.ggml_type.block_dtype() == dtype)) else {
        return Ok(None);
    };
    let columns = infos[0].shape()[1];
    let row_bytes = dtype.storage_bytes(columns).ok_or_else(|| Error::BadShape {
        what: format!("blk.{i}.attn_q: rows of {columns} values are not whole {dtype} blocks"),
    })?;
    let (mut bytes, mut rows) = (Vec::new(), 0);
    for ((part, heads), info) in parts.iter().zip(&infos) {
        let shape = info.shape();
        if shape[1] != columns {
            return Err(Error::BadShape { what: format!("blk.{i}.{part} has {} columns, attn_q {columns}", shape[1]) });
        }
        let stored = file.tensor_bytes(&info.name)?;
        match heads {
            Some(heads) => bytes.extend(unpermute_rotary_rows(stored, shape[0], row_bytes, *heads)?),
            None => bytes.extend_from_slice(stored),
        }
        rows += shape[0];
    }
    Ok(Some(Tensor::from_blocks(dtype, &[rows, columns], bytes, device)?))
}
