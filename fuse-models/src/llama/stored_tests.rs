//! Weights as stored against the same file dequantized to f32 at load, for every block type fuse reads and for
//! a Q4_K_M-like mix (q/k in Q4_K, v and down in Q6_K), on small random GGUF images whose rows hold whole K
//! blocks: the logits of a prompt and a few greedy steps agree to f32 rounding.

use crate::gguf::GgufFile;
use crate::llama::image::random_image;
use crate::llama::{generate, Config, Llama, Sampling};
use fuse::prelude::*;

fn config() -> Config {
    Config {
        architecture: crate::llama::Architecture::Llama,
        hidden: 256,
        intermediate: 512,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        vocab: 64,
        context: 64,
        rope_theta: 10000.0,
        eps: 1e-5,
    }
}

/// A GGUF image of `config()` with each matrix in `type_of(part)` (random blocks), f32 norms.
fn image(seed: u64, type_of: impl Fn(&str) -> DType) -> Vec<u8> {
    random_image(&config(), &type_of, seed).expect("whole blocks")
}

/// How far a stored model's logits may be from the dequantized model's (relative L2) where its matrices are
/// block-quantized: the CPU's products take the activations as two 8-bit terms (every type on AVX-512 VNNI
/// below 32 rows, the K types everywhere; ~1e-5 a product, 1e-4 .. 2e-4 on these random models' logits);
/// one 8-bit term (~4e-3 a product) or a lost second term would be ~1e-2.
pub(super) const TWO_TERM_BOUND: f64 = 1e-3;

/// The stored model's logits and greedy tokens against the dequantized one's: within [`TWO_TERM_BOUND`] where
/// a matrix is block-quantized, f32 rounding (1e-5) otherwise.
pub(super) fn stored_agrees_with_f32(what: &str, file: &GgufFile) {
    let quantized = file.tensors().iter().any(|t| t.ggml_type.block_dtype().is_some());
    let bound = if quantized { TWO_TERM_BOUND } else { 1e-5 };
    let stored = Llama::load_stored(file, &Device::Cpu).expect("loads as stored");
    let dense = Llama::load(file, &Device::Cpu, DType::F32).expect("loads in f32");
    let prompt = [3, 17, 42, 5, 9];
    let a = generate(&stored, &prompt, 4, Sampling::Greedy, u32::MAX, |_| Ok(())).unwrap();
    let b = generate(&dense, &prompt, 4, Sampling::Greedy, u32::MAX, |_| Ok(())).unwrap();
    let err = fuse::rel_l2_error(&a.first_logits, &b.first_logits);
    assert!(err < bound, "{what}: logits as stored are {err:.2e} from the dequantized model's (bound {bound:e})");
    assert!(a.first_logits.iter().any(|&v| v != 0.0) && a.first_logits.iter().all(|v| v.is_finite()), "{what}");
    assert_eq!(a.ids, b.ids, "{what}: greedy tokens");
}

#[test]
fn every_block_type_as_stored_gives_the_dequantized_models_logits() {
    for dtype in DType::QUANTIZED {
        let file = GgufFile::from_bytes(image(dtype as u64, |_| dtype), format!("{dtype}.gguf")).unwrap();
        let stored = Llama::load_stored(&file, &Device::Cpu).unwrap();
        let (in_place, held) = stored.weight_bytes();
        assert!(in_place > 2 * held, "{dtype}: most of the weights read in place ({in_place} / {held})");
        stored_agrees_with_f32(dtype.name(), &file);
    }
}

#[test]
fn a_q4_k_m_like_mix_loads_as_stored() {
    let mix = |part: &str| match part {
        "attn_v" | "ffn_down" | "token_embd" => DType::Q6_K,
        _ => DType::Q4_K,
    };
    let file = GgufFile::from_bytes(image(99, mix), "q4_k_m.gguf").unwrap();
    let stored = Llama::load_stored(&file, &Device::Cpu).unwrap();
    assert_eq!(stored.layers[0].1.down.dtype(), DType::Q6_K);
    assert_eq!(stored.layers[0].1.gate.dtype(), DType::Q4_K);
    assert_eq!(stored.embedding.dtype(), DType::Q6_K);
    // v apart from the q|k stack, both as stored: nothing but the norms held (no dequantized stack).
    assert_eq!(stored.layers[0].0.wqkv.dtype(), DType::Q4_K);
    assert_eq!(stored.layers[0].0.wqkv.shape(), &[256 + 128, 256]);
    let split = stored.split_v[0].as_ref().expect("v apart");
    assert_eq!((split.wv.dtype(), split.wv.shape()), (DType::Q6_K, &[128, 256][..]));
    // Resident: the file's bytes (the q|k stack the one copy, in place of the file's q and k), not an f32 stack.
    let (in_place, held) = stored.weight_bytes();
    let image_bytes = image(99, mix).len() as u64;
    assert!(
        in_place + held < image_bytes + image_bytes / 20,
        "{in_place} + {held} bytes for a {image_bytes}-byte file"
    );
    stored_agrees_with_f32("Q4_K_M-like", &file);
}
