//! The one-launch decode step (fuse_models::llama::OneLaunchDecoder) on the real model against transformers'
//! greedy tokens (tests/data/smollm2_reference.json): the prompt prefilled by the bf16 decoder, every later
//! token from one launch of the kernel. Needs the model file and an sm_90 GPU; skipped visibly without them.

mod common;

use fuse::prelude::*;
use fuse_models::llama::{Llama, OneLaunchDecoder};
use std::io::Write as _;

/// transformers' top-2 margin (f32 logits) below which a path with bf16 caches and f16 activations may pick
/// the other token.
const NEAR_TIE: f64 = 1.0;

/// The tokens agree with transformers' until a step where its own top-2 margin is under NEAR_TIE (after which
/// the sequences are no longer comparable): a difference at a confident step fails.
#[test]
fn greedy_tokens_part_from_transformers_only_at_a_near_tie() {
    let Some(file) = common::model() else { return };
    let Some(dev) = fuse::testing::gpu_or_skip() else { return };
    if let Device::Cuda(gpu) = &dev {
        if !gpu.arch().starts_with("sm_90") {
            let _ = writeln!(
                std::io::stderr(),
                "skipped: the one-launch decode step needs sm_90, this GPU is {}",
                gpu.arch()
            );
            return;
        }
    }
    let reference = common::reference();
    let llama = Llama::load(file, &dev, DType::BF16).expect("the model loads in bf16");
    let mut decoder = OneLaunchDecoder::new(file, &dev).expect("the decode step's weights load");
    greedy_tokens_of(&llama, &mut decoder, &reference);
}

fn greedy_tokens_of(llama: &Llama, decoder: &mut OneLaunchDecoder, reference: &serde_json::Value) {
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let name = prompt["name"].as_str().unwrap_or("?");
        let ids = common::ids(&prompt["prompt_ids"]);
        let want = common::ids(&prompt["greedy_ids"]);
        let margins: Vec<f64> =
            prompt["greedy_top2_margins"].as_array().unwrap().iter().map(|m| m.as_f64().unwrap()).collect();
        let mut cache = llama.new_cache(256).unwrap();
        let got = decoder.generate(llama, &mut cache, &ids, want.len(), 2).expect("generates");
        let agree = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        eprintln!("`{name}`: the first {agree} of {} greedy tokens are transformers'", want.len());
        if agree < got.len().min(want.len()) {
            let margin = margins[agree];
            assert!(
                margin < NEAR_TIE,
                "`{name}`: token {agree} is {} where transformers picks {} by a margin of {margin:.2}",
                got[agree],
                want[agree]
            );
        } else {
            assert_eq!(got.len(), want.len(), "`{name}`: as many tokens (eos at the same step)");
        }
        assert_eq!(
            cache.len(),
            ids.len() + got.len() - 1,
            "`{name}`: the cache holds the prompt and every token fed back"
        );
    }
}
