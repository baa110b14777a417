//! The decode step run as one persistent kernel generated from its own kernels (issue 33,
//! `Llama::one_launch_decoder`, `fuse::CudaGraph::capture_one_launch`) against the same step as a CUDA graph
//! of those kernels (the graph path, itself checked against calls and transformers elsewhere): the same
//! logits bit for bit, step after step, and the same greedy tokens over 64 steps, for SmolLM2's shape in bf16
//! and a Qwen2.5-0.5B-shaped model (biases on q, k, v; 4 of its layers) in bf16; in f32 (cuBLAS's matmuls,
//! which cannot be tasks) the step stays the recorded graph and says why. On the CPU both
//! decoders call the step and agree trivially; the GPU case also checks what became tasks.

use fuse::prelude::*;
use fuse_models::llama::{Config, Llama};

fn same_logits_and_tokens(dev: &Device, config: &Config, dtype: DType) {
    let model = Llama::random(config, dev, dtype, 23).expect("the model builds");
    let prompt = [1u32, 9690, 28, 253, 17];
    let (mut graphed, mut stepped) = (model.new_cache(160).unwrap(), model.new_cache(160).unwrap());
    for cache in [&mut graphed, &mut stepped] {
        model.forward(&prompt, cache).unwrap();
        model.forward(&[30], cache).unwrap(); // the warm one-token step: kernels compile, paths are tuned
    }
    let mut graph = model.decoder(&graphed, Fusion::On).expect("the graph records");
    let mut one = model.one_launch_decoder(&stepped, Fusion::On, false).expect("the one-launch step builds");
    if let Some(report) = one.one_launch_report() {
        eprintln!("{dev} {dtype:?} {} layers: {report:?}", config.layers);
        if dtype == DType::F32 {
            // No template multiplies f32 by f32: cuBLAS's calls cannot be tasks, and the step says so.
            assert_eq!(report.as_tasks, 0, "{report:?}");
            assert!(report.kept.iter().any(|k| k.contains("library calls")), "{report:?}");
        } else {
            assert!(report.as_tasks * 10 >= report.launches * 9, "most launches become tasks: {report:?}");
            assert!(report.launches_per_step() < report.launches, "{report:?}");
        }
    } else {
        assert!(!dev.is_cuda() || std::env::var("FUSE_GRAPHS").is_ok(), "a GPU capture reports");
    }
    for (i, token) in [411u32, 5, 9999, 7, 7, 300, 12, 9000].into_iter().enumerate() {
        let want = graph.step(&[token], &mut graphed).unwrap();
        let got = one.step(&[token], &mut stepped).unwrap();
        let differ = want.iter().zip(&got).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "step {i} on {dev}: {differ} of {} logits differ from the graph path's", want.len());
    }
    // Greedy on the device, 64 steps each from the same token.
    let mut graph = model.greedy_decoder(&graphed, Fusion::On).unwrap();
    let mut one = model.one_launch_decoder(&stepped, Fusion::On, true).unwrap();
    graph.set_tokens(&[253]).unwrap();
    one.set_tokens(&[253]).unwrap();
    let (mut want, mut got) = (Vec::new(), Vec::new());
    for _ in 0..64 {
        graph.advance(&mut graphed).unwrap();
        one.advance(&mut stepped).unwrap();
        want.push(graph.tokens().unwrap()[0]);
        got.push(one.tokens().unwrap()[0]);
    }
    assert_eq!(got, want, "greedy tokens on {dev}");
}

fn smollm2_bf16(dev: &Device) {
    same_logits_and_tokens(dev, &Config::smollm2_135m(), DType::BF16);
}

fn smollm2_f32(dev: &Device) {
    let mut config = Config::smollm2_135m();
    config.layers = 6;
    same_logits_and_tokens(dev, &config, DType::F32);
}

/// Two layers and a short vocabulary: small enough for compute-sanitizer (scripts/gpu runs it under all four).
fn small_smollm2_bf16(dev: &Device) {
    let mut config = Config::smollm2_135m();
    (config.layers, config.vocab) = (2, 10_000);
    same_logits_and_tokens(dev, &config, DType::BF16);
}

fn qwen2_bf16(dev: &Device) {
    let mut config = Config::qwen2_5_0_5b();
    config.layers = 4;
    same_logits_and_tokens(dev, &config, DType::BF16);
}

fuse::device_tests!(small_smollm2_bf16, smollm2_bf16, smollm2_f32, qwen2_bf16);
