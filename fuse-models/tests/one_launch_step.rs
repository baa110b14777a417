//! The decode step run as one persistent kernel generated from its own kernels (issue 33,
//! `Llama::one_launch_decoder`, `fuse::CudaGraph::capture_one_launch`) against the same kernels as a CUDA graph
//! (`Llama::one_launch_graph_decoder`: the same logits bit for bit, step after step, and the same greedy
//! tokens over 64 steps) and against the graph path (itself checked against calls and transformers
//! elsewhere: logits within the dtype's relative L2, the same greedy tokens). Cases: SmolLM2's shape in bf16
//! (batch 1; 2 layers at batch 16, and with 8,000 of 8,192 cached positions in use), a Qwen2.5-0.5B-shaped
//! model (biases on q, k, v; 4 of its layers, batch 4), weights as GGUF files store them (Q4_K_M-like and
//! Q8_0, `Llama::random_stored`); in f32 (cuBLAS's matmuls, which cannot be tasks) the step stays the
//! recorded graph and says why. On the CPU the decoders call the step and agree trivially; the GPU case also
//! checks what became tasks.

mod common;

use fuse::prelude::*;
use fuse_models::llama::{Config, Llama, StepInputs};

/// How a case's step runs: all tasks but a few kept launches, or (f32 by f32 matmuls, which only cuBLAS
/// multiplies) the recorded graph.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    Tasks,
    Graph,
}

fn same_logits_and_tokens(dev: &Device, config: &Config, dtype: DType, batch: usize) {
    let model = Llama::random(config, dev, dtype, 23).expect("the model builds");
    let expect = if dtype == DType::F32 { Expect::Graph } else { Expect::Tasks };
    // bf16 logits of 30 layers: the kernels' forms sum in other orders than the graph path's.
    let tolerance = if dtype == DType::F32 { 1e-4 } else { 3e-2 };
    same_as_graphs(dev, &model, batch, expect, tolerance, SHORT);
}

/// A case's caches: their capacity, and the positions counted in after the prompt without being written (the
/// zeros a new cache holds: every path reads the same rows), so that the steps see a long cache.
#[derive(Clone, Copy)]
struct Cache {
    capacity: usize,
    skipped: usize,
}

const SHORT: Cache = Cache { capacity: 160, skipped: 0 };

/// The tokens each teacher-forced step of `same_as_graphs` feeds (row `b` of a batch: `(token + 31 b) % vocab`).
const FORCED: [u32; 8] = [411, 5, 9999, 7, 7, 300, 12, 9000];

fn forced(token: u32, batch: usize, vocab: usize) -> Vec<u32> {
    (0..batch as u32).map(|b| (token + 31 * b) % vocab as u32).collect()
}

/// `count` caches of `model` for `batch` sequences, each holding the same prompt and a warm one-token step
/// (kernels compiled, paths tuned), then `at.skipped` positions counted in.
fn prepared_caches(
    dev: &Device,
    model: &Llama,
    batch: usize,
    at: Cache,
    count: usize,
) -> Vec<fuse_models::llama::KvCache> {
    let config = &model.config;
    let prompt: Vec<u32> = (0..batch as u32 * 5).map(|i| (i * 7919 + 1) % config.vocab as u32).collect();
    let mut caches: Vec<_> = (0..count).map(|_| model.new_batch_cache(batch, at.capacity).unwrap()).collect();
    if at.skipped > 0 {
        // The skipped rows hold the same random keys and values in every cache (zeros would leave the
        // attention an average of nothing): the steps' attention weighs thousands of them.
        for cache in &caches {
            for (i, (k, v)) in cache.layers().iter().enumerate() {
                for (j, t) in [k, v].into_iter().enumerate() {
                    let mut state = 0x9e37_79b9_u32.wrapping_mul(1 + (2 * i + j) as u32);
                    let values: Vec<half::bf16> = (0..t.numel())
                        .map(|_| {
                            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                            half::bf16::from_f32((state >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0)
                        })
                        .collect();
                    t.copy_from_host(&values).unwrap();
                }
            }
        }
    }
    for cache in &mut caches {
        for (ids, len) in [(&prompt[..], 5), (&vec![30; batch][..], 1)] {
            let inputs = StepInputs::new(batch, len, dev).unwrap();
            inputs.set(ids, cache.len()).unwrap();
            model.step(&inputs, cache, Fusion::On).unwrap();
            cache.advance_by(len).unwrap();
        }
        cache.advance_by(at.skipped).unwrap();
    }
    caches
}

/// The one-launch step of `model` against its kernels as a graph (bit for bit) and the graph path (relative
/// L2 within `tolerance`; the same greedy tokens, but where the two paths' logits are a near tie).
fn same_as_graphs(dev: &Device, model: &Llama, batch: usize, expect: Expect, tolerance: f64, at: Cache) {
    let config = &model.config;
    let mut caches = prepared_caches(dev, model, batch, at, 3);
    let [graphed, kernels, stepped] = &mut caches[..] else { unreachable!() };
    // The graph path (clustered attention, tuned GEMM paths), the one-launch step's own kernels as a graph,
    // and the one-launch step.
    let mut graph = model.decoder(graphed, Fusion::On).expect("the graph records");
    let mut same = model.one_launch_graph_decoder(kernels, Fusion::On, false).expect("the kernels record");
    let mut one = model.one_launch_decoder(stepped, Fusion::On, false).expect("the one-launch step builds");
    check_report(dev, config, expect, batch, &one);
    for (i, token) in FORCED.into_iter().enumerate() {
        let tokens = forced(token, batch, config.vocab);
        let want = graph.step(&tokens, graphed).unwrap();
        let exact = same.step(&tokens, kernels).unwrap();
        let got = one.step(&tokens, stepped).unwrap();
        let differ = exact.iter().zip(&got).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "step {i} on {dev}: {differ} of {} logits differ from its kernels' graph's", got.len());
        let error = fuse::rel_l2_error(&got, &want);
        eprintln!("step {i}: relative L2 {error:.2e} from the graph path's logits");
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
    if let Some(first) = got.iter().zip(&want).position(|(a, b)| a != b) {
        near_tie(dev, model, batch, at, tolerance, &start, &want, &got, first);
    }
}

/// Where the one-launch step's greedy tokens first part from the graph path's (index `first` of the tokens,
/// step-major), both paths' logits replayed there from the tokens the two agreed on: each path's logits must
/// choose its own token, and in the graph path's logits the step's token must lie within `tolerance` times
/// their spread (standard deviation) of the graph path's choice: a near tie that another summation order may
/// break either way. Anything else fails the test.
#[allow(clippy::too_many_arguments)]
fn near_tie(
    dev: &Device,
    model: &Llama,
    batch: usize,
    at: Cache,
    tolerance: f64,
    start: &[u32],
    want: &[u32],
    got: &[u32],
    first: usize,
) {
    let (step, row) = (first / batch, first % batch);
    let vocab = model.config.vocab;
    let mut caches = prepared_caches(dev, model, batch, at, 2);
    let [graphed, stepped] = &mut caches[..] else { unreachable!() };
    let mut graph = model.decoder(graphed, Fusion::On).unwrap();
    let mut one = model.one_launch_decoder(stepped, Fusion::On, false).unwrap();
    let mut inputs: Vec<Vec<u32>> = FORCED.iter().map(|&t| forced(t, batch, vocab)).collect();
    inputs.push(start.to_vec());
    inputs.extend((0..step).map(|s| want[s * batch..(s + 1) * batch].to_vec()));
    let (mut graph_logits, mut step_logits) = (Vec::new(), Vec::new());
    for tokens in &inputs {
        graph_logits = graph.step(tokens, graphed).unwrap();
        step_logits = one.step(tokens, stepped).unwrap();
    }
    let (g, s) = (&graph_logits[row * vocab..(row + 1) * vocab], &step_logits[row * vocab..(row + 1) * vocab]);
    let (chosen, wanted) = (got[first], want[first]);
    assert_eq!(
        common::argmax(s),
        chosen,
        "step {step}, row {row} on {dev}: the replayed step's logits choose otherwise"
    );
    assert_eq!(
        common::argmax(g),
        wanted,
        "step {step}, row {row} on {dev}: the replayed graph path's logits choose otherwise"
    );
    let mean = g.iter().map(|&v| v as f64).sum::<f64>() / vocab as f64;
    let spread = (g.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / vocab as f64).sqrt();
    let gap = (g[wanted as usize] - g[chosen as usize]) as f64;
    eprintln!(
        "greedy tokens on {dev} part at step {step}, row {row}: {chosen} against the graph path's {wanted}, \
         {gap:.3e} apart in its logits (spread {spread:.3e}; relative L2 {:.2e})",
        fuse::rel_l2_error(s, g)
    );
    assert!(
        gap <= tolerance * spread,
        "greedy tokens on {dev} at step {step}, row {row}: {chosen} against the graph path's {wanted}, {gap:.3e} apart \
         in its logits, past {tolerance} of their spread {spread:.3e}: not a near tie"
    );
}

/// What became tasks: in f32 nothing (cuBLAS's matmuls), in bf16 most launches.
fn check_report(dev: &Device, config: &Config, expect: Expect, batch: usize, one: &fuse_models::llama::Decoder) {
    let Some(report) = one.one_launch_report() else {
        assert!(!dev.is_cuda() || std::env::var("FUSE_GRAPHS").is_ok(), "a GPU capture reports");
        return;
    };
    eprintln!("{dev} {} layers, batch {batch}: {report:?}", config.layers);
    if expect == Expect::Graph {
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

/// A cache of 8,192 positions with 8,000 of them in use (issue 33's longest): the decode attention's most
/// splits, in the step and in the graph path's clusters.
fn small_smollm2_bf16_long_cache(dev: &Device) {
    let mut config = Config::smollm2_135m();
    (config.layers, config.vocab) = (2, 10_000);
    let model = Llama::random(&config, dev, DType::BF16, 23).expect("the model builds");
    same_as_graphs(dev, &model, 1, Expect::Tasks, 3e-2, Cache { capacity: 8192, skipped: 8000 });
}

fn qwen2_bf16(dev: &Device) {
    let mut config = Config::qwen2_5_0_5b();
    config.layers = 4;
    same_logits_and_tokens(dev, &config, DType::BF16, 4);
}

/// A Llama-3.2-1B-like shape, small: K-quant rows of whole 256-value blocks.
fn small_llama() -> Config {
    let mut config = Config::smollm2_135m();
    (config.hidden, config.intermediate, config.heads, config.kv_heads) = (512, 1536, 8, 2);
    (config.layers, config.vocab) = (2, 4096);
    config
}

/// Weights as GGUF files store them (random blocks, `Llama::random_stored`): a Q4_K_M-like mix (Q4_K, with v,
/// down and the tied embedding in Q6_K, so v is a product apart) and Q8_0, bf16 and f32 activations: the
/// quantized skinny bodies as tasks. The graph path's tuned configs may take the activations to 8 bits where
/// the recorded rule does not: its logits within 3e-2.
fn quantized(dev: &Device) {
    let q4_k_m = |part: &str| match part {
        "attn_v" | "ffn_down" | "token_embd" => DType::Q6_K,
        _ => DType::Q4_K,
    };
    let q8_0 = |_: &str| DType::Q8_0;
    let mixes: [(&str, &dyn Fn(&str) -> DType); 2] = [("Q4_K_M-like", &q4_k_m), ("Q8_0", &q8_0)];
    for (name, mix) in mixes {
        for dtype in [DType::BF16, DType::F32] {
            eprintln!("{name}, {dtype} activations:");
            let model = Llama::random_stored(&small_llama(), mix, dev, dtype, 29).expect("the model loads");
            same_as_graphs(dev, &model, 1, Expect::Tasks, 3e-2, SHORT);
        }
    }
}

/// GGUF files as their users have them (issue 33, item 5: `FUSE_TEST_GGUF=FILE[,FILE...]`, written by
/// `../shared/peers/llama.cpp/make_gguf.py` on the GPU machine by `scripts/gpu/one-launch-files.sh`): each
/// loaded as stored with bf16 activations, its step at batch 1, 4 and 16 against the graph path. Without the
/// variable the case says it skipped.
fn gguf_files(dev: &Device) {
    let Ok(files) = std::env::var("FUSE_TEST_GGUF") else {
        eprintln!("gguf_files on {dev}: skipped (FUSE_TEST_GGUF names no file)");
        return;
    };
    for path in files.split(',').filter(|p| !p.is_empty()) {
        let file = fuse_models::gguf::GgufFile::open_for(path, dev).unwrap_or_else(|e| panic!("{path}: {e}"));
        let model = Llama::load_stored_as(&file, dev, DType::BF16).unwrap_or_else(|e| panic!("{path}: {e}"));
        for batch in [1, 4, 16] {
            eprintln!("{path}, batch {batch}:");
            same_as_graphs(dev, &model, batch, Expect::Tasks, 3e-2, SHORT);
        }
    }
}

fuse::device_tests!(
    gguf_files,
    small_smollm2_bf16,
    small_smollm2_bf16_batch16,
    small_smollm2_bf16_long_cache,
    smollm2_bf16,
    smollm2_f32,
    qwen2_bf16,
    quantized
);
