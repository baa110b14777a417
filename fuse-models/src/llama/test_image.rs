//! GGUF images of small Llama-family models for tests: a config's metadata under its architecture's prefix
//! (`general.architecture` = `llama` or `qwen2`), a placeholder vocabulary (`t0`, `t1`, ..) and the given
//! tensors, each at a 32-byte aligned offset.

use crate::gguf::tests::Image;
use crate::llama::Config;

/// A tensor of a test image: its name, ggml dimensions (fastest first), ggml type id and bytes.
pub(crate) type TestTensor = (String, Vec<u64>, u32, Vec<u8>);

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
