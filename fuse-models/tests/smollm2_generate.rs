//! The decoder against transformers' LlamaForCausalLM on the same file (tests/data/smollm2_reference.json,
//! f32 on the CPU): the first-step logits of each reference prompt (its top 64 and every 48th, relative L2)
//! and its 32 greedy tokens, on the CPU in f32.

mod common;

use fuse::prelude::*;
use fuse_models::llama::{generate, Llama, Sampling};

/// Relative L2 of `got` against `want`.
fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    let diff: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    (diff / norm.max(1e-30)).sqrt()
}

#[test]
fn logits_and_greedy_tokens_match_transformers_in_f32() {
    let Some(file) = common::model() else { return };
    let reference = common::reference();
    let model = Llama::load(file, &Device::Cpu, DType::F32).expect("the model loads");
    let eos = 2;
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let name = prompt["name"].as_str().unwrap_or("?");
        let ids = common::ids(&prompt["prompt_ids"]);
        let want_ids = common::ids(&prompt["greedy_ids"]);
        let got = generate(&model, &ids, want_ids.len(), Sampling::Greedy, eos, |_| Ok(())).expect("generates");
        let logits = &prompt["first_step_logits"];
        let stride = reference["logits"]["stride"].as_u64().unwrap_or(48) as usize;
        let want: Vec<f64> = logits["strided"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let ours: Vec<f64> = got.first_logits.iter().step_by(stride).map(|&v| v as f64).collect();
        let err = rel_l2(&ours, &want);
        eprintln!("`{name}`: first-step logits (every {stride}th) relative L2 {err:.2e}");
        assert!(err <= 1e-3, "`{name}`: first-step logits (every {stride}th) relative L2 {err:.2e} > 1e-3");
        let top: Vec<(usize, f64)> = logits["top"].as_array().unwrap().iter().map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_f64().unwrap())).collect();
        let (top_ours, top_want): (Vec<f64>, Vec<f64>) = top.iter().map(|&(id, v)| (got.first_logits[id] as f64, v)).unzip();
        let err = rel_l2(&top_ours, &top_want);
        eprintln!("`{name}`: the 64 largest logits, relative L2 {err:.2e}; {} greedy tokens", want_ids.len());
        assert!(err <= 1e-3, "`{name}`: the 64 largest logits, relative L2 {err:.2e} > 1e-3");
        assert_eq!(got.ids, want_ids, "`{name}`: greedy tokens");
    }
}
