//! The decode step run as one persistent kernel generated from its own kernels (issue 33,
//! `Llama::one_launch_decoder`, `fuse::CudaGraph::capture_one_launch`) against the same kernels as a CUDA graph
//! (`Llama::one_launch_graph_decoder`: the same logits bit for bit, step after step, and the same greedy
//! tokens over 64 steps) and against the graph path (itself checked against calls and transformers
//! elsewhere: logits within the dtype's relative L2, the same greedy tokens), for SmolLM2's shape in bf16
//! (batch 1; 2 layers at batch 16) and a Qwen2.5-0.5B-shaped model (biases on q, k, v; 4 of its layers, batch 4)
//! in bf16; in f32 (cuBLAS's matmuls,
//! which cannot be tasks) the step stays the recorded graph and says why. On the CPU both
//! decoders call the step and agree trivially; the GPU case also checks what became tasks.

use fuse::prelude::*;
use fuse_models::llama::{Config, Llama, StepInputs};

fn same_logits_and_tokens(dev: &Device, config: &Config, dtype: DType, batch: usize) {
    let model = Llama::random(config, dev, dtype, 23).expect("the model builds");
    let prompt: Vec<u32> = (0..batch as u32 * 5).map(|i| (i * 7919 + 1) % config.vocab as u32).collect();
    let mut caches: Vec<_> = (0..3).map(|_| model.new_batch_cache(batch, 160).unwrap()).collect();
    for cache in &mut caches {
        // The prompt, then a warm one-token step: kernels compile, paths are tuned.
        for (ids, len) in [(&prompt[..], 5), (&vec![30; batch][..], 1)] {
            let inputs = StepInputs::new(batch, len, dev).unwrap();
            inputs.set(ids, cache.len()).unwrap();
            model.step(&inputs, cache, Fusion::On).unwrap();
            cache.advance_by(len).unwrap();
        }
    }
    let [graphed, kernels, stepped] = &mut caches[..] else { unreachable!() };
    // The graph path (clustered attention, tuned GEMM paths), the one-launch step's own kernels as a graph,
    // and the one-launch step.
    let mut graph = model.decoder(graphed, Fusion::On).expect("the graph records");
    let mut same = model.one_launch_graph_decoder(kernels, Fusion::On, false).expect("the kernels record");
    let mut one = model.one_launch_decoder(stepped, Fusion::On, false).expect("the one-launch step builds");
    check_report(dev, config, dtype, batch, &one);
    // bf16 logits of 30 layers: the kernels' forms sum in other orders than the graph path's.
    let tolerance = if dtype == DType::F32 { 1e-4 } else { 3e-2 };
    for (i, token) in [411u32, 5, 9999, 7, 7, 300, 12, 9000].into_iter().enumerate() {
        let tokens: Vec<u32> = (0..batch as u32).map(|b| (token + 31 * b) % config.vocab as u32).collect();
        let want = graph.step(&tokens, graphed).unwrap();
        let exact = same.step(&tokens, kernels).unwrap();
        let got = one.step(&tokens, stepped).unwrap();
        let differ = exact.iter().zip(&got).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "step {i} on {dev}: {differ} of {} logits differ from its kernels' graph's", got.len());
        let error = fuse::rel_l2_error(&got, &want);
        assert!(error < tolerance, "step {i} on {dev}: relative L2 {error:.2e} from the graph path's logits");
    }
    // Greedy on the device, 64 steps each from the same tokens.
    let mut graph = model.greedy_decoder(graphed, Fusion::On).unwrap();
    let mut same = model.one_launch_graph_decoder(kernels, Fusion::On, true).unwrap();
    let mut one = model.one_launch_decoder(stepped, Fusion::On, true).unwrap();
    let start: Vec<u32> = (0..batch as u32).map(|b| 253 + b).collect();
    let (mut want, mut exact, mut got) = (Vec::new(), Vec::new(), Vec::new());
    for decoder in [&mut graph, &mut same, &mut one] {
        decoder.set_tokens(&start).unwrap();
    }
    for _ in 0..64 {
        graph.advance(graphed).unwrap();
        same.advance(kernels).unwrap();
        one.advance(stepped).unwrap();
        want.extend(graph.tokens().unwrap());
        exact.extend(same.tokens().unwrap());
        got.extend(one.tokens().unwrap());
    }
    assert_eq!(got, exact, "greedy tokens on {dev} against the step's kernels as a graph");
    assert_eq!(got, want, "greedy tokens on {dev} against the graph path");
}

/// What became tasks: in f32 nothing (cuBLAS's matmuls), in bf16 most launches.
fn check_report(dev: &Device, config: &Config, dtype: DType, batch: usize, one: &fuse_models::llama::Decoder) {
    let Some(report) = one.one_launch_report() else {
        assert!(!dev.is_cuda() || std::env::var("FUSE_GRAPHS").is_ok(), "a GPU capture reports");
        return;
    };
    eprintln!("{dev} {dtype:?} {} layers, batch {batch}: {report:?}", config.layers);
    if dtype == DType::F32 {
        // No template multiplies f32 by f32: cuBLAS's calls cannot be tasks, and the step says so.
        assert_eq!(report.as_tasks, 0, "{report:?}");
        assert!(report.kept.iter().any(|k| k.contains("library calls")), "{report:?}");
    } else {
        // Every launch is a task or kept with its reason (the LM head's many waves, the argmax's 1,024
        // threads, a launch left alone between them).
        assert_eq!(report.as_tasks + report.kept.len(), report.launches, "{report:?}");
        assert!(report.as_tasks * 4 >= report.launches * 3, "most launches become tasks: {report:?}");
        assert!(report.launches_per_step() < report.launches, "{report:?}");
    }
}

fn smollm2_bf16(dev: &Device) {
    same_logits_and_tokens(dev, &Config::smollm2_135m(), DType::BF16, 1);
}

fn smollm2_f32(dev: &Device) {
    let mut config = Config::smollm2_135m();
    config.layers = 6;
    same_logits_and_tokens(dev, &config, DType::F32, 1);
}

/// Two layers and a short vocabulary: small enough for compute-sanitizer (scripts/gpu runs it under all four).
fn small_smollm2_bf16(dev: &Device) {
    let mut config = Config::smollm2_135m();
    (config.layers, config.vocab) = (2, 10_000);
    same_logits_and_tokens(dev, &config, DType::BF16, 1);
}

/// Batch 16, one position each: the matmuls' 16 rows take templates that do not stream their norm prologue.
fn small_smollm2_bf16_batch16(dev: &Device) {
    let mut config = Config::smollm2_135m();
    (config.layers, config.vocab) = (2, 10_000);
    same_logits_and_tokens(dev, &config, DType::BF16, 16);
}

fn qwen2_bf16(dev: &Device) {
    let mut config = Config::qwen2_5_0_5b();
    config.layers = 4;
    same_logits_and_tokens(dev, &config, DType::BF16, 4);
}

fuse::device_tests!(small_smollm2_bf16, small_smollm2_bf16_batch16, smollm2_bf16, smollm2_f32, qwen2_bf16);
