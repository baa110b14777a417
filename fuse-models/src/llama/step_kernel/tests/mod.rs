//! The one-launch decode step's tests without a GPU: the layout's regions and limits (`layout.rs`), the
//! generated header and source (`source.rs`), the packer against the loader (`packing.rs`). The kernel's
//! NVRTC and ptxas build is `fuse-models/tests/step_kernel_compiles.rs`.

mod layout;
mod packing;
mod source;

use crate::llama::Config;

/// A small Llama in a GGUF image: Q4_1 layer matrices (the value projections in Q8_0 when `v_in_q8_0`), Q8_0
/// token matrix, F32 norms, random bytes.
fn small_model(seed: u64, v_in_q8_0: bool) -> (Vec<u8>, Config) {
    small_model_of(small_config(), seed, v_in_q8_0)
}

/// The small model's sizes: 2 layers of hidden 128, 2 query heads over 1 kv head, a vocabulary of 48.
fn small_config() -> Config {
    Config {
        architecture: crate::llama::Architecture::Llama,
        hidden: 128,
        intermediate: 512,
        layers: 2,
        heads: 2,
        kv_heads: 1,
        head_dim: 64,
        vocab: 48,
        context: 256,
        rope_theta: 10000.0,
        eps: 1e-5,
    }
}

/// [`small_model`] of `config`'s sizes and eps.
fn small_model_of(config: Config, seed: u64, v_in_q8_0: bool) -> (Vec<u8>, Config) {
    let c = &config;
    let mut state = seed;
    let mut byte = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as u8
    };
    let f16_bits = |x: f32| half::f16::from_f32(x).to_bits().to_le_bytes();
    let mut tensors: Vec<crate::llama::image::TestTensor> = Vec::new();
    let mut matrix =
        |name: String, rows: usize, cols: usize, q8_0: bool, tensors: &mut Vec<crate::llama::image::TestTensor>| {
            let mut data = Vec::new();
            for _ in 0..rows * cols / 32 {
                let d = 0.001 + byte() as f32 * 1e-4;
                data.extend(f16_bits(d));
                if !q8_0 {
                    data.extend(f16_bits(-8.0 * d + byte() as f32 * 1e-5));
                }
                data.extend((0..if q8_0 { 32 } else { 16 }).map(|_| byte()));
            }
            tensors.push((name, vec![cols as u64, rows as u64], if q8_0 { 8 } else { 3 }, data));
        };
    let kv = c.kv_heads * c.head_dim;
    for l in 0..c.layers {
        for (part, rows, cols) in [
            ("attn_q", c.hidden, c.hidden),
            ("attn_k", kv, c.hidden),
            ("attn_v", kv, c.hidden),
            ("attn_output", c.hidden, c.hidden),
            ("ffn_gate", c.intermediate, c.hidden),
            ("ffn_up", c.intermediate, c.hidden),
            ("ffn_down", c.hidden, c.intermediate),
        ] {
            matrix(format!("blk.{l}.{part}.weight"), rows, cols, v_in_q8_0 && part == "attn_v", &mut tensors);
        }
        for part in ["attn_norm", "ffn_norm"] {
            let data = (0..c.hidden).flat_map(|i| (0.9 + 0.001 * (i + l) as f32).to_le_bytes()).collect();
            tensors.push((format!("blk.{l}.{part}.weight"), vec![c.hidden as u64], 0, data));
        }
    }
    let mut embd = Vec::new();
    for b in 0..c.vocab * c.hidden / 32 {
        embd.extend(f16_bits(0.01 + b as f32 * 1e-5));
        embd.extend((0..32).map(|_| byte()));
    }
    tensors.push(("token_embd.weight".into(), vec![c.hidden as u64, c.vocab as u64], 8, embd));
    tensors.push((
        "output_norm.weight".into(),
        vec![c.hidden as u64],
        0,
        (0..c.hidden).flat_map(|i| (1.0 + 0.01 * i as f32).to_le_bytes()).collect(),
    ));

    (crate::llama::image::llama_image(c, &tensors), config)
}

/// A share's row dequantised: d * q + m for its kbs blocks, as ggml (and fuse-models' loader) computes it.
fn share_row(share: &[u8], q_at: usize, dm_at: usize, row: usize, kbs: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for kb in 0..kbs {
        let dm = &share[dm_at + (row * kbs + kb) * 4..][..4];
        let (d, m) =
            (half::f16::from_le_bytes([dm[0], dm[1]]).to_f32(), half::f16::from_le_bytes([dm[2], dm[3]]).to_f32());
        let qs = &share[q_at + (row * kbs + kb) * 16..][..16];
        out.extend((0..32).map(|j| d * (if j < 16 { qs[j] & 15 } else { qs[j - 16] >> 4 }) as f32 + m));
    }
    out
}
