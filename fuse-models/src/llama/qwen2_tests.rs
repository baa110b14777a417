//! The `qwen2` architecture (a q/k/v bias, rows not permuted, often a tied embedding) and untied LM heads, on
//! small random GGUF images: the loaded model's logits against the plain f64 forward of `reference.rs`, the
//! weights as stored against the f32 load, a Qwen2.5-0.5B-shaped decode step (on the CPU and a GPU), and the
//! bias add fused into the q/k/v GEMM.

use crate::gguf::GgufFile;
use crate::llama::image::{llama_image, TestTensor};
use crate::llama::reference::{reference_logits, Variant};
use crate::llama::stored_tests::{stored_agrees_with_f32, TWO_TERM_BOUND};
use crate::llama::{Architecture, AttentionBlock, Config, Llama};
use fuse::ir::{GroupKind, NodeId, Op, SplitMix64};
use fuse::prelude::*;

/// How the image's matrices are stored (vectors are f32).
#[derive(Clone, Copy, Debug)]
enum Store {
    F32,
    Q8_0,
    Q4_0,
    /// q, k and the rest Q8_0, v Q4_0 (v a GEMM apart, as in Q4_K_M files).
    MixedV,
}

/// 3 query heads of 10 over 1 key/value head, hidden 30, intermediate 46, vocabulary 37: every size odd but
/// the head's (rotary halves).
fn odd_config(architecture: Architecture) -> Config {
    Config {
        architecture,
        hidden: 30,
        intermediate: 46,
        layers: 2,
        heads: 3,
        kv_heads: 1,
        head_dim: 10,
        vocab: 37,
        context: 32,
        rope_theta: 10000.0,
        eps: 1e-6,
    }
}

/// An image of `c`'s sizes: uniform random matrices in [-0.08, 0.08] stored as `store`, norms near 1, q/k/v
/// biases in [-0.5, 0.5] where `bias` (each part different, so a mis-stacked bias shows), `output.weight`
/// unless `tied`.
fn image(c: &Config, seed: u64, store: Store, bias: bool, tied: bool) -> GgufFile {
    let rng = std::cell::RefCell::new(SplitMix64::new(seed));
    let uniform = |a: f32| ((rng.borrow_mut().next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a;
    let mut tensors: Vec<TestTensor> = Vec::new();
    let vector = |name: String, len: usize, base: f32, a: f32, tensors: &mut Vec<TestTensor>| {
        let data = (0..len).flat_map(|_| (base + uniform(a)).to_le_bytes()).collect();
        tensors.push((name, vec![len as u64], 0, data));
    };
    let matrix = |name: String, rows: usize, cols: usize, tensors: &mut Vec<TestTensor>| {
        let values: Vec<f32> = (0..rows * cols).map(|_| uniform(0.08)).collect();
        let (ty, data) = match store {
            Store::F32 => (0, values.iter().flat_map(|v| v.to_le_bytes()).collect()),
            Store::MixedV if name.contains("attn_v") => (2, quantize(&values, true)),
            Store::Q8_0 | Store::MixedV => (8, quantize(&values, false)),
            Store::Q4_0 => (2, quantize(&values, true)),
        };
        tensors.push((name, vec![cols as u64, rows as u64], ty, data));
    };
    let (q, kv) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
    matrix("token_embd.weight".into(), c.vocab, c.hidden, &mut tensors);
    for l in 0..c.layers {
        let name = |part: &str| format!("blk.{l}.{part}");
        vector(name("attn_norm.weight"), c.hidden, 1.0, 0.1, &mut tensors);
        for (part, rows) in [("attn_q", q), ("attn_k", kv), ("attn_v", kv)] {
            matrix(name(&format!("{part}.weight")), rows, c.hidden, &mut tensors);
            if bias {
                vector(name(&format!("{part}.bias")), rows, 0.0, 0.5, &mut tensors);
            }
        }
        matrix(name("attn_output.weight"), c.hidden, q, &mut tensors);
        vector(name("ffn_norm.weight"), c.hidden, 1.0, 0.1, &mut tensors);
        matrix(name("ffn_gate.weight"), c.intermediate, c.hidden, &mut tensors);
        matrix(name("ffn_up.weight"), c.intermediate, c.hidden, &mut tensors);
        matrix(name("ffn_down.weight"), c.hidden, c.intermediate, &mut tensors);
    }
    vector("output_norm.weight".into(), c.hidden, 1.0, 0.1, &mut tensors);
    if !tied {
        matrix("output.weight".into(), c.vocab, c.hidden, &mut tensors);
    }
    GgufFile::from_bytes(llama_image(c, &tensors), format!("{}-{store:?}.gguf", c.architecture.name())).unwrap()
}

/// `values` in Q8_0 blocks (f16 d, 32 i8) or Q4_0 blocks (f16 d, 16 bytes: element j's nibble low, j + 16's
/// high, value (q - 8) d), rounded to the nearest step.
fn quantize(values: &[f32], q4: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for block in values.chunks_exact(32) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = half::f16::from_f32(amax / if q4 { 7.0 } else { 127.0 });
        out.extend(d.to_bits().to_le_bytes());
        let q = |v: f32| if d.to_f32() == 0.0 { 0.0 } else { (v / d.to_f32()).round() };
        if q4 {
            let nibble = |v: f32| (q(v) + 8.0).clamp(0.0, 15.0) as u8;
            out.extend((0..16).map(|j| nibble(block[j]) | nibble(block[j + 16]) << 4));
        } else {
            out.extend(block.iter().map(|&v| q(v).clamp(-127.0, 127.0) as i8 as u8));
        }
    }
    out
}

/// The model's logits for `prompt` (prefill) and then for each of `next` (one decode step each, the later ones
/// replaying the recorded step as `generate` does), with the reference's logits at the same positions.
fn logits_and_reference(model: &Llama, file: &GgufFile, prompt: &[u32], next: &[u32]) -> Vec<(Vec<f32>, Vec<f32>)> {
    let all: Vec<u32> = prompt.iter().chain(next).copied().collect();
    let want = reference_logits(file, &all, Variant::of(&model.config));
    let mut cache = model.new_cache(all.len()).unwrap();
    let mut got = vec![model.forward(prompt, &mut cache).unwrap()];
    let mut decoder = None;
    for &id in next {
        got.push(match decoder.as_mut() {
            None => {
                let logits = model.forward(&[id], &mut cache).unwrap();
                decoder = Some(model.decoder(&cache, Fusion::On).unwrap());
                logits
            }
            Some(decoder) => decoder.step(&[id], &mut cache).unwrap(),
        });
    }
    got.into_iter().zip(want.into_iter().skip(prompt.len() - 1)).collect()
}

fn worst_error(pairs: &[(Vec<f32>, Vec<f32>)]) -> f64 {
    pairs.iter().map(|(got, want)| fuse::rel_l2_error(got, want)).fold(0.0, f64::max)
}

const PROMPT: [u32; 5] = [3, 17, 29, 5, 11];
const NEXT: [u32; 3] = [7, 36, 0];

#[test]
fn qwen2_in_f32_gives_the_reference_logits_with_the_bias_tied_or_not() {
    for tied in [true, false] {
        let c = odd_config(Architecture::Qwen2);
        let file = image(&c, 1, Store::F32, true, tied);
        let model = Llama::load(&file, &Device::Cpu, DType::F32).unwrap();
        assert_eq!(model.output.is_none(), tied);
        assert!(model.biases.iter().all(|b| b.as_ref().map(|b| b.shape().to_vec()) == Some(vec![50])));
        let pairs = logits_and_reference(&model, &file, &PROMPT, &NEXT);
        let err = worst_error(&pairs);
        eprintln!("qwen2 f32 (tied {tied}) against the f64 reference: {err:.2e}");
        assert!(err < 1e-5, "qwen2 (tied: {tied}): logits {err:.2e} from the reference");
        // The reference tells a missing bias and the other rotary convention apart from the model.
        let all: Vec<u32> = PROMPT.iter().chain(&NEXT).copied().collect();
        let last = &pairs.last().unwrap().0;
        for (what, variant) in [
            ("no bias", Variant { bias: false, ..Variant::of(&c) }),
            ("adjacent pairs (rows as if permuted)", Variant { adjacent_pairs: true, ..Variant::of(&c) }),
        ] {
            let other = reference_logits(&file, &all, variant);
            let apart = fuse::rel_l2_error(last, other.last().unwrap());
            eprintln!("qwen2 f32 (tied {tied}) against the reference with {what}: {apart:.2e}");
            assert!(apart > 1e-2, "{what}: the reference is only {apart:.2e} from the model's");
        }
    }
}

#[test]
fn llama_with_a_bias_and_an_untied_head_gives_the_reference_logits() {
    // llama.cpp reads optional q/k/v biases for `llama` too; its rows (and so its biases) are permuted.
    let c = odd_config(Architecture::Llama);
    for (bias, tied) in [(false, true), (true, false)] {
        let file = image(&c, 2, Store::F32, bias, tied);
        let model = Llama::load(&file, &Device::Cpu, DType::F32).unwrap();
        assert_eq!((model.biases[0].is_some(), model.output.is_none()), (bias, tied));
        let err = worst_error(&logits_and_reference(&model, &file, &PROMPT, &NEXT));
        eprintln!("llama f32 (bias {bias}, tied {tied}) against the f64 reference: {err:.2e}");
        assert!(err < 1e-5, "llama (bias: {bias}, tied: {tied}): logits {err:.2e} from the reference");
    }
}

#[test]
fn qwen2_as_stored_gives_the_f32_models_logits() {
    let c = Config { hidden: 96, intermediate: 160, head_dim: 32, vocab: 64, ..odd_config(Architecture::Qwen2) };
    for (store, tied) in [(Store::Q8_0, true), (Store::Q4_0, false), (Store::MixedV, true)] {
        let file = image(&c, 3, store, true, tied);
        let stored = Llama::load_stored(&file, &Device::Cpu).unwrap();
        let (a, _) = &stored.layers[1];
        let bias = match &stored.split_v[1] {
            Some(split) => {
                assert_eq!((a.wqkv.dtype(), split.wv.dtype()), (DType::Q8_0, DType::Q4_0));
                Some(split.bqk.dtype())
            }
            None => stored.biases[1].as_ref().map(|b| b.dtype()),
        };
        assert!(matches!(store, Store::MixedV) == stored.split_v[1].is_some(), "{store:?}: v apart");
        assert!(a.wqkv.dtype().is_quantized() && bias == Some(DType::F32));
        assert_eq!(stored.output.as_ref().map(|o| o.dtype().is_quantized()), (!tied).then_some(true));
        stored_agrees_with_f32(&format!("qwen2 {store:?}"), &file);
        let err = worst_error(&logits_and_reference(&stored, &file, &PROMPT, &NEXT));
        eprintln!("qwen2 {store:?} as stored against the f64 reference: {err:.2e}");
        assert!(err < TWO_TERM_BOUND, "qwen2 {store:?} as stored: {err:.2e} from the reference");
    }
}

#[test]
fn a_qwen2_5_0_5b_shaped_decode_step_as_stored_matches_f32_and_the_reference() {
    let c = Config { layers: 2, vocab: 1000, context: 16, ..Config::qwen2_5_0_5b() };
    let file = image(&c, 4, Store::Q8_0, true, true);
    let stored = Llama::load_stored(&file, &Device::Cpu).unwrap();
    let dense = Llama::load(&file, &Device::Cpu, DType::F32).unwrap();
    let (prompt, next) = ([1, 500, 999], [42]);
    let stored_pairs = logits_and_reference(&stored, &file, &prompt, &next);
    let dense_pairs = logits_and_reference(&dense, &file, &prompt, &next);
    let (stored_step, dense_step, want) = (&stored_pairs[1].0, &dense_pairs[1].0, &dense_pairs[1].1);
    let errs = [
        fuse::rel_l2_error(stored_step, dense_step),
        fuse::rel_l2_error(dense_step, want),
        fuse::rel_l2_error(stored_step, want),
    ];
    eprintln!(
        "qwen2.5-0.5b-shaped decode step: stored/f32 {:.2e}, f32/reference {:.2e}, stored/reference {:.2e}",
        errs[0], errs[1], errs[2]
    );
    assert!(errs[0] < TWO_TERM_BOUND && errs[1] < 1e-5 && errs[2] < TWO_TERM_BOUND, "{errs:?}");
    assert!(worst_error(&stored_pairs) < TWO_TERM_BOUND && worst_error(&dense_pairs) < 1e-5);
}

#[test]
fn the_bias_is_added_in_the_qkv_gemms_epilogue() {
    let plain = AttentionBlock::forward_fused();
    let biased = AttentionBlock::forward_biased_fused();
    let (plain_plan, plan) = (plain.plan(Fusion::On).unwrap(), biased.plan(Fusion::On).unwrap());
    assert_eq!(plan.groups.len(), plain_plan.groups.len(), "the bias costs no group of its own");
    let g = biased.graph().unwrap();
    let k = g.inputs.iter().position(|i| i.name == "bqkv").expect("bqkv is an input") as u32;
    let input = (0..g.nodes.len() as u32).map(NodeId).find(|&n| g.op(n) == Op::Input(k)).unwrap();
    let readers: Vec<_> = plan.groups.iter().filter(|group| group.inputs.contains(&input)).collect();
    assert_eq!(readers.len(), 1, "one group reads the bias");
    assert_eq!(readers[0].kind, GroupKind::Gemm, "the group that reads the bias is the q/k/v GEMM");
    assert_eq!(readers[0].matmuls.len(), 1);
}

#[test]
fn another_architecture_is_an_error_naming_it() {
    let mut bytes = llama_image(&odd_config(Architecture::Qwen2), &[]);
    // general.architecture is the first value: "qwen2" -> "gemma".
    let at = bytes.windows(5).position(|w| w == b"qwen2").unwrap();
    bytes[at..at + 5].copy_from_slice(b"gemma");
    let file = GgufFile::from_bytes(bytes, "gemma.gguf").unwrap();
    let err = Llama::load(&file, &Device::Cpu, DType::F32).err().expect("gemma is refused").to_string();
    assert!(err.contains("architecture `gemma`") && err.contains("qwen2"), "{err}");
    assert!(Llama::load_stored(&file, &Device::Cpu).is_err());
}

#[test]
fn the_plan_that_runs_a_stored_qwen2_layer_adds_the_bias_in_the_gemm() {
    let c = Config { hidden: 96, intermediate: 160, head_dim: 32, vocab: 64, ..odd_config(Architecture::Qwen2) };
    let model = Llama::load_stored(&image(&c, 3, Store::Q8_0, true, true), &Device::Cpu).unwrap();
    let cache = model.new_cache(8).unwrap();
    let (k, v) = cache.layer(0);
    let cpu = &Device::Cpu;
    let (x, cs) =
        (Tensor::zeros(&[1, 1, 96], DType::F32, cpu).unwrap(), Tensor::zeros(&[1, 16], DType::F32, cpu).unwrap());
    let (at, lens) = (Tensor::zeros(&[1], DType::U32, cpu).unwrap(), Tensor::from_vec(vec![1u32], &[1], cpu).unwrap());
    let a = &model.layers[0].0;
    let bqkv = model.biases[0].as_ref().unwrap();
    let biased = a.forward_biased_explain(&x, bqkv, &cs, &cs, k, v, &at, &lens, 1, 1, 3, 1, 5, 4, 32, 96).unwrap();
    let plain = a.forward_explain(&x, &cs, &cs, k, v, &at, &lens, 1, 1, 3, 1, 5, 4, 32, 96).unwrap();
    let first = biased.lines().next().unwrap();
    assert!(first.starts_with("k0 gemm") && first.contains("+ bqkv") && first.contains("as Q8_0 blocks"), "{biased}");
    let passes =
        |e: &str| e.lines().find(|l| l.starts_with("total:")).map(|l| l.split(" passes").next().unwrap().to_string());
    assert_eq!(passes(&biased), passes(&plain), "{biased}\n{plain}");
}

#[test]
fn on_a_gpu_a_qwen2_5_0_5b_shaped_model_as_stored_gives_the_reference_logits() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    let c = Config { layers: 2, vocab: 1000, context: 16, ..Config::qwen2_5_0_5b() };
    let (prompt, next) = ([1, 500, 999], [42, 7, 123]);
    // q|k and the rest Q8_0 with v apart in Q4_0 (as Q4_K_M files give v another type), the head tied.
    for (seed, store) in [(5, Store::Q8_0), (6, Store::MixedV)] {
        let file = image(&c, seed, store, true, true);
        let stored = Llama::load_stored(&file, &gpu).unwrap();
        assert!(stored.layers[1].0.wqkv.dtype().is_quantized());
        assert_eq!(stored.split_v[1].is_some(), matches!(store, Store::MixedV));
        // The prefill, the first decode step, then replays of the recorded step (a CUDA graph).
        let pairs = logits_and_reference(&stored, &file, &prompt, &next);
        let err = worst_error(&pairs);
        eprintln!("qwen2.5-0.5b-shaped {store:?} as stored on the GPU against the f64 reference: {err:.2e}");
        assert!(err < 1e-3, "qwen2 {store:?} as stored on the GPU: {err:.2e} from the reference");
    }
}

/// A file whose numbers contradict each other or its tensors is refused, naming the key: an epsilon of -1, a rope
/// base of 0, a block count of 0 (or 3) beside 2 layers of tensors all loaded before and ran a wrong model.
#[test]
fn a_config_its_numbers_or_tensors_contradict_is_an_error() {
    let c = odd_config(Architecture::Llama);
    let norm = |l: usize| (format!("blk.{l}.attn_norm.weight"), vec![4u64], 0u32, vec![0u8; 16]);
    let tensors = [norm(0), norm(1)];
    let config_of = |m: &Config| Config::from_gguf(&GgufFile::from_bytes(llama_image(m, &tensors), "m.gguf").unwrap());
    assert_eq!(config_of(&c).expect("a consistent file").layers, 2);
    for (metadata, says) in [
        (Config { eps: -1.0, ..c.clone() }, "`llama.attention.layer_norm_rms_epsilon` is -1"),
        (Config { eps: f32::NAN, ..c.clone() }, "`llama.attention.layer_norm_rms_epsilon` is NaN"),
        (Config { rope_theta: 0.0, ..c.clone() }, "`llama.rope.freq_base` is 0"),
        (Config { layers: 0, ..c.clone() }, "`llama.block_count` is 0"),
        (Config { layers: 3, ..c.clone() }, "`llama.block_count` is 3, but the file has tensors of 2 layers"),
        (Config { context: 0, ..c.clone() }, "`llama.context_length` is 0"),
    ] {
        let err = config_of(&metadata).expect_err(says).to_string();
        assert!(err.contains(says) && err.starts_with("m.gguf: "), "{err}");
    }
}
