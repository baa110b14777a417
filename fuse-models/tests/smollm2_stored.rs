//! The decoder on the file's weights as stored (its Q4_1 layers and Q8_0 tied embedding read in place, the CPU
//! multiplying by the blocks) against transformers' LlamaForCausalLM on the same file
//! (tests/data/smollm2_reference.json): first-step logits within 1e-2 relative L2, greedy tokens the
//! reference's until the first step whose own top-2 margin is under 0.5; the resident weights are the file's.

mod common;

use common::rel_l2;
use fuse::prelude::*;
use fuse_models::llama::{generate, Llama, Sampling};

/// transformers' top-2 margin below which 8-bit activation rows may pick the other token.
const NEAR_TIE: f64 = 0.5;

#[test]
fn weights_as_stored_match_transformers_on_the_cpu() {
    matches_transformers(&Device::Cpu, DType::F32, 1e-2);
}

/// On a GPU the blocks are uploaded as stored: the quantized skinny template reads them for decode, cuBLAS a
/// dequantized copy for the prompt. Activations in f32 (the default), and in bf16 within bf16's bound (that of
/// the bf16 model's test, smollm2_generate.rs).
#[test]
fn weights_as_stored_match_transformers_on_a_gpu() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    matches_transformers(&gpu, DType::F32, 1e-2);
    matches_transformers(&gpu, DType::BF16, 5e-2);
}

fn matches_transformers(device: &Device, dtype: DType, bound: f64) {
    let Some(file) = common::model() else { return };
    let reference = common::reference();
    let model = Llama::load_stored_as(file, device, dtype).expect("the model loads as stored");
    let stride = reference["logits"]["stride"].as_u64().unwrap_or(48) as usize;
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let name = prompt["name"].as_str().unwrap_or("?");
        let ids = common::ids(&prompt["prompt_ids"]);
        let want_ids = common::ids(&prompt["greedy_ids"]);
        let got = generate(&model, &ids, want_ids.len(), Sampling::Greedy, 2, |_| Ok(())).expect("generates");
        let ours: Vec<f64> = got.first_logits.iter().step_by(stride).map(|&v| v as f64).collect();
        let want: Vec<f64> =
            prompt["first_step_logits"]["strided"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let err = rel_l2(&ours, &want);
        let margins: Vec<f64> =
            prompt["greedy_top2_margins"].as_array().unwrap().iter().map(|m| m.as_f64().unwrap()).collect();
        let agree = got.ids.iter().zip(&want_ids).take_while(|(a, b)| a == b).count();
        eprintln!(
            "`{name}` as stored on {device}, activations in {dtype}: first-step logits relative L2 {err:.2e}; the first {agree} of {} greedy tokens are transformers'",
            want_ids.len()
        );
        assert!(err <= bound, "`{name}` ({dtype}): first-step logits relative L2 {err:.2e} > {bound:.0e}");
        if agree < want_ids.len() {
            assert!(
                margins[agree] < NEAR_TIE,
                "`{name}`: token {agree} is {} where transformers picks {} by a margin of {:.2}",
                got.ids[agree],
                want_ids[agree],
                margins[agree]
            );
        }
    }
}

#[test]
fn the_resident_weights_are_the_files_blocks() {
    let Some(file) = common::model() else { return };
    let model = Llama::load_stored(file, &Device::Cpu).expect("the model loads as stored");
    let (in_place, held) = model.weight_bytes();
    let file_bytes: u64 = file.tensors().iter().map(|t| t.ggml_type.bytes_for(t.n_elements).unwrap()).sum();
    eprintln!(
        "weights: {in_place} bytes read in place from the file, {held} held by fuse; the file's tensors {file_bytes}"
    );
    // Everything but the stacked q/k/v (copied once to put q and k in half-split order) and the small f32
    // norms stays in the file's pages.
    assert!(in_place + held <= file_bytes + file_bytes / 20, "at most the file's tensor bytes + 5%");
    assert!(in_place as f64 > 0.7 * file_bytes as f64, "most weights are read in place");
    if let Some(gpu) = fuse::testing::gpu_or_skip() {
        // On a GPU every matrix is uploaded as stored: the file's bytes once more at most (+5%).
        let model = Llama::load_stored(file, &gpu).expect("the model loads as stored on the GPU");
        let (in_place, held) = model.weight_bytes();
        eprintln!("weights on the GPU: {held} bytes");
        assert_eq!(in_place, 0, "nothing is read in place from a file on a GPU");
        assert!(held <= file_bytes + file_bytes / 20, "at most the file's tensor bytes + 5% on the GPU");
    }
}
