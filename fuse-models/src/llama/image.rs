//! GGUF images of Llama-family models (random ones for timing and tests, the tests' own): a config's metadata
//! under its architecture's prefix (`general.architecture` = `llama` or `qwen2`), a placeholder vocabulary
//! (`t0`, `t1`, ..) and the given tensors, each at a 32-byte aligned offset.

use crate::ggml_type::GgmlType;
use crate::gguf::image::Image;
use crate::llama::{Architecture, Config};
use fuse::DType;

/// A tensor of an image: its name, ggml dimensions (fastest first), ggml type id and bytes.
pub(crate) type TestTensor = (String, Vec<u64>, u32, Vec<u8>);

/// ggml's type id of a fuse block type (`None` for other dtypes): the one `GgmlType::from_id` maps to it.
pub(crate) fn ggml_id(dtype: DType) -> Option<u32> {
    (0..=30).find(|&id| GgmlType::from_id(id).block_dtype() == Some(dtype))
}

/// The image of a model of `c`'s shape whose matrices are random blocks of the type `type_of` gives each
/// part (`attn_q`, `attn_k`, `attn_v`, `attn_output`, `ffn_gate`, `ffn_up`, `ffn_down`, `token_embd`), its
/// norms f32 near 1 and (Qwen2) its q/k/v biases f32 near 0; seeded. `Err` names a part whose type is not a
/// block type or whose rows do not hold whole blocks.
pub(crate) fn random_image(c: &Config, type_of: &dyn Fn(&str) -> DType, seed: u64) -> Result<Vec<u8>, String> {
    let mut tensors: Vec<TestTensor> = Vec::new();
    let mut seed = seed;
    let mut matrix = |name: String, part: &str, rows: usize, cols: usize| -> Result<(), String> {
        let dtype = type_of(part);
        let (Some(id), Some(block)) = (ggml_id(dtype), dtype.block()) else {
            return Err(format!("{part}: {dtype} is not a block type"));
        };
        if cols % block.elements != 0 {
            return Err(format!(
                "{part}: rows of {cols} values do not hold whole {dtype} blocks of {}",
                block.elements
            ));
        }
        seed += 1;
        let bytes = fuse::ir::quant::random_blocks(dtype, rows * cols / block.elements, seed);
        tensors.push((name, vec![cols as u64, rows as u64], id, bytes));
        Ok(())
    };
    let kv = c.kv_heads * c.head_dim;
    for l in 0..c.layers {
        for (part, rows, cols) in [
            ("attn_q", c.heads * c.head_dim, c.hidden),
            ("attn_k", kv, c.hidden),
            ("attn_v", kv, c.hidden),
            ("attn_output", c.hidden, c.heads * c.head_dim),
            ("ffn_gate", c.intermediate, c.hidden),
            ("ffn_up", c.intermediate, c.hidden),
            ("ffn_down", c.hidden, c.intermediate),
        ] {
            matrix(format!("blk.{l}.{part}.weight"), part, rows, cols)?;
        }
    }
    matrix("token_embd.weight".into(), "token_embd", c.vocab, c.hidden)?;
    let f32s = |n: usize, f: &dyn Fn(usize) -> f32| (0..n).flat_map(|i| f(i).to_le_bytes()).collect::<Vec<u8>>();
    for l in 0..c.layers {
        for part in ["attn_norm", "ffn_norm"] {
            let norm = f32s(c.hidden, &|i| 0.9 + 0.001 * (i + l) as f32);
            tensors.push((format!("blk.{l}.{part}.weight"), vec![c.hidden as u64], 0, norm));
        }
        if c.architecture == Architecture::Qwen2 {
            for (part, n) in [("attn_q", c.heads * c.head_dim), ("attn_k", kv), ("attn_v", kv)] {
                let bias = f32s(n, &|i| 0.01 * ((i * 7 + l) % 11) as f32 - 0.05);
                tensors.push((format!("blk.{l}.{part}.bias"), vec![n as u64], 0, bias));
            }
        }
    }
    tensors.push((
        "output_norm.weight".into(),
        vec![c.hidden as u64],
        0,
        f32s(c.hidden, &|i| 0.9 + 0.001 * (i + 7) as f32),
    ));
    Ok(llama_image(c, &tensors))
}

/// The image of a model of `c`'s sizes holding `tensors`.
pub(crate) fn llama_image(c: &Config, tensors: &[TestTensor]) -> Vec<u8> {
    let u32_kv = |v: usize| (v as u32).to_le_bytes().to_vec();
    let mut tokens = 8u32.to_le_bytes().to_vec();
    tokens.extend((c.vocab as u64).to_le_bytes());
    for i in 0..c.vocab {
        let t = format!("t{i}");
        tokens.extend((t.len() as u64).to_le_bytes());
        tokens.extend(t.as_bytes());
    }
    let arch = c.architecture.name();
    let key = |k: &str| format!("{arch}.{k}");
    let mut name = (arch.len() as u64).to_le_bytes().to_vec();
    name.extend(arch.as_bytes());
    let kvs: Vec<(String, u32, Vec<u8>)> = vec![
        ("general.architecture".into(), 8, name),
        (key("embedding_length"), 4, u32_kv(c.hidden)),
        (key("feed_forward_length"), 4, u32_kv(c.intermediate)),
        (key("block_count"), 4, u32_kv(c.layers)),
        (key("attention.head_count"), 4, u32_kv(c.heads)),
        (key("attention.head_count_kv"), 4, u32_kv(c.kv_heads)),
        (key("context_length"), 4, u32_kv(c.context)),
        (key("rope.freq_base"), 6, (c.rope_theta as f32).to_le_bytes().to_vec()),
        (key("attention.layer_norm_rms_epsilon"), 6, c.eps.to_le_bytes().to_vec()),
        ("tokenizer.ggml.tokens".into(), 9, tokens),
    ];
    let mut image = Image::header(3, tensors.len() as u64, kvs.len() as u64);
    for (key, ty, value) in &kvs {
        image.kv(key, *ty, value);
    }
    let mut offset = 0u64;
    for (name, dims, ty, data) in tensors {
        image.tensor(name, dims, *ty, offset);
        offset += (data.len() as u64).div_ceil(32) * 32;
    }
    image.pad_to(32);
    for (_, _, _, data) in tensors {
        image.raw(data).pad_to(32);
    }
    image.finish()
}
