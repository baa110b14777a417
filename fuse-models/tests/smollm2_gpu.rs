//! The decoder on the GPU (CUDA device 0; skipped visibly without one) against the same transformers
//! reference as `smollm2_generate.rs`: in f32 the first-step logits (every 48th, relative L2 <= 1e-3) and
//! every greedy token; in bf16 the looser check there (logits within 5e-2, the first greedy token).

mod common;

use common::rel_l2;
use fuse::prelude::*;
use fuse_models::llama::{generate, Llama, Sampling};

/// The reference's strided first-step logits and ours at the same stride.
fn strided_logits(reference: &serde_json::Value, prompt: &serde_json::Value, logits: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let stride = reference["logits"]["stride"].as_u64().unwrap_or(48) as usize;
    let want = prompt["first_step_logits"]["strided"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    (logits.iter().step_by(stride).map(|&v| v as f64).collect(), want)
}

#[test]
fn logits_and_greedy_tokens_match_transformers_on_the_gpu_in_f32() {
    let Some(dev) = fuse::testing::gpu_or_skip() else { return };
    let Some(file) = common::model() else { return };
    let reference = common::reference();
    let model = Llama::load(file, &dev, DType::F32).expect("the model loads on the GPU");
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let name = prompt["name"].as_str().unwrap_or("?");
        let ids = common::ids(&prompt["prompt_ids"]);
        let want_ids = common::ids(&prompt["greedy_ids"]);
        let got = generate(&model, &ids, want_ids.len(), Sampling::Greedy, 2, |_| Ok(())).expect("generates on the GPU");
        let (ours, want) = strided_logits(&reference, prompt, &got.first_logits);
        let err = rel_l2(&ours, &want);
        eprintln!("`{name}` on the GPU: first-step logits relative L2 {err:.2e}");
        assert!(err <= 1e-3, "`{name}` on the GPU: first-step logits relative L2 {err:.2e} > 1e-3");
        assert_eq!(got.ids, want_ids, "`{name}` on the GPU: greedy tokens");
    }
}

#[test]
fn bf16_logits_stay_close_to_the_f32_reference_on_the_gpu() {
    let Some(dev) = fuse::testing::gpu_or_skip() else { return };
    let Some(file) = common::model() else { return };
    let reference = common::reference();
    let model = Llama::load(file, &dev, DType::BF16).expect("the model loads on the GPU in bf16");
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let name = prompt["name"].as_str().unwrap_or("?");
        let ids = common::ids(&prompt["prompt_ids"]);
        let got = generate(&model, &ids, 1, Sampling::Greedy, 2, |_| Ok(())).expect("generates on the GPU");
        let (ours, want) = strided_logits(&reference, prompt, &got.first_logits);
        let err = rel_l2(&ours, &want);
        eprintln!("`{name}` in bf16 on the GPU: first-step logits relative L2 {err:.2e}");
        assert!(err <= 5e-2, "`{name}` in bf16 on the GPU: first-step logits relative L2 {err:.2e} > 5e-2");
        assert_eq!(got.ids[0], common::ids(&prompt["greedy_ids"])[0], "`{name}` in bf16 on the GPU: the first greedy token");
    }
}
