//! A batch of sequences at positions of their own (issue 33, item 5): prompts of different lengths fill one
//! cache (`Llama::forward_sequence`), then a decoder steps them together, each sequence at its own position
//! (its rotary rows, its cache row, its key count). Each sequence's logits against the same sequence decoded
//! alone in a cache of one, step after step: the graph path (calls on the CPU) and, on a GPU, the one-launch
//! step; batch 4 with prompts of 1, 6, 3 and 11 tokens, f32 and bf16. On a GPU the batch's step launches the
//! decode attention kernel with rope and the appends fused once a layer and no rope kernel: the kernel takes
//! each sequence's position itself, rather than the step falling back to its members. Greedy decoding on the
//! device, which advances each sequence's position there, picks the tokens a host-driven loop does.

mod common;

use fuse::prelude::*;
use fuse_models::llama::{Config, Decoder, KvCache, Llama};

const PROMPTS: [usize; 4] = [1, 6, 3, 11];

fn small() -> Config {
    let mut config = Config::smollm2_135m();
    (config.layers, config.vocab) = (2, 10_000);
    config
}

/// The prompts (ids of their own each) into one batch cache, sequence by sequence, and each into a cache of
/// its own; the prompts' last logits agree. Returns the two and the prompts.
fn fill(model: &Llama, tolerance: f64) -> (KvCache, Vec<KvCache>, Vec<Vec<u32>>) {
    let vocab = model.config.vocab as u32;
    let mut batch = model.new_batch_cache(PROMPTS.len(), 48).unwrap();
    let (mut singles, mut prompts) = (Vec::new(), Vec::new());
    for (b, &len) in PROMPTS.iter().enumerate() {
        let ids: Vec<u32> = (0..len as u32).map(|i| (i * 7919 + 13 * b as u32 + 1) % vocab).collect();
        let mut single = model.new_cache(48).unwrap();
        let want = model.forward(&ids, &mut single).unwrap();
        let got = model.forward_sequence(b, &ids, &mut batch).unwrap();
        let error = fuse::rel_l2_error(&got, &want);
        assert!(error < tolerance, "sequence {b}'s prompt: relative L2 {error:.2e} from its own cache's");
        singles.push(single);
        prompts.push(ids);
    }
    assert_eq!(batch.lens(), PROMPTS, "each sequence holds its own prompt");
    (batch, singles, prompts)
}

/// Steps the batch with `decoder` and each sequence alone with the graph path; every sequence's logits agree,
/// and at the end agree with a prefill of the sequence's every token at once (positions written apart from the
/// decoders' step inputs: what catches a position both decoders would get wrong).
fn against_singles(
    model: &Llama,
    mut decoder: Decoder,
    (batch, singles, prompts): (&mut KvCache, &mut [KvCache], &[Vec<u32>]),
    tolerance: f64,
) {
    let vocab = model.config.vocab;
    let mut alone: Vec<Decoder> = singles.iter().map(|c| model.decoder(c, Fusion::On).unwrap()).collect();
    let mut histories = prompts.to_vec();
    let mut got = Vec::new();
    for step in 0..6u32 {
        let tokens: Vec<u32> = (0..PROMPTS.len() as u32).map(|b| (step * 977 + 31 * b + 5) % vocab as u32).collect();
        histories.iter_mut().zip(&tokens).for_each(|(h, &t)| h.push(t));
        got = decoder.step(&tokens, batch).unwrap();
        for (b, (single, cache)) in alone.iter_mut().zip(singles.iter_mut()).enumerate() {
            let want = single.step(&tokens[b..b + 1], cache).unwrap();
            let error = fuse::rel_l2_error(&got[b * vocab..(b + 1) * vocab], &want);
            assert!(
                error < tolerance,
                "step {step}, sequence {b} at position {}: relative L2 {error:.2e}",
                cache.len()
            );
        }
    }
    let expected: Vec<usize> = PROMPTS.iter().map(|p| p + 6).collect();
    assert_eq!(batch.lens(), expected);
    for (b, history) in histories.iter().enumerate() {
        let want = model.forward(history, &mut model.new_cache(48).unwrap()).unwrap();
        let error = fuse::rel_l2_error(&got[b * vocab..(b + 1) * vocab], &want);
        // The other products' sums (and f32's TF32 at many rows): a wrong position is off by far more.
        assert!(error < tolerance.max(5e-2), "sequence {b} against its {} tokens at once: {error:.2e}", history.len());
    }
}

fn ragged(dev: &Device, dtype: DType) {
    let model = Llama::random(&small(), dev, dtype, 41).expect("the model builds");
    // bf16: the batch's products take other templates (and sum in other orders) than one sequence's.
    let tolerance = if dtype == DType::F32 { 1e-4 } else { 3e-2 };
    let (mut batch, mut singles, prompts) = fill(&model, tolerance);
    // A warm step (kernels compile, paths are tuned) before a decoder records, as for any step; the single
    // caches' decoders record after their own prompts.
    let decoder = model.decoder(&batch, Fusion::On).expect("the step records");
    if let Some(names) = decoder.kernel_names().unwrap() {
        // The decode attention with rope and the appends fused takes each sequence's position: no rope kernel.
        let attention = names.iter().filter(|n| *n == "fuse_model_attention_decode").count();
        assert_eq!(attention, model.config.layers, "{names:?}");
        assert!(
            !names.iter().any(|n| n == "fuse_model_rope"),
            "the fused attention fell back to its members: {names:?}"
        );
    }
    against_singles(&model, decoder, (&mut batch, &mut singles, &prompts), tolerance);
    greedy_on_the_device(&model, tolerance);
    if dev.is_cuda() && dtype == DType::BF16 {
        let (mut batch, mut singles, prompts) = fill(&model, tolerance);
        let one = model.one_launch_decoder(&batch, Fusion::On, false).expect("the one-launch step builds");
        let report = one.one_launch_report().map(|r| (r.as_tasks, r.launches));
        eprintln!("{dev}: the ragged batch's one-launch step: {report:?} (tasks, launches)");
        against_singles(&model, one, (&mut batch, &mut singles, &prompts), tolerance);
    }
}

/// Greedy decoding on the device (`Llama::greedy_decoder`: the step picks the tokens and advances its own
/// positions, written by the host once) against the same decoding driven from the host (each step's logits
/// read back, their argmax and the positions written): the same tokens, sequence by sequence.
fn greedy_on_the_device(model: &Llama, tolerance: f64) {
    let vocab = model.config.vocab;
    let start: Vec<u32> = (0..PROMPTS.len() as u32).map(|b| 17 + 101 * b).collect();
    let (mut device_cache, _, _) = fill(model, tolerance);
    let (mut host_cache, _, _) = fill(model, tolerance);
    let mut greedy = model.greedy_decoder(&device_cache, Fusion::On).unwrap();
    let mut host = model.decoder(&host_cache, Fusion::On).unwrap();
    greedy.set_tokens(&start).unwrap();
    let mut tokens = start.clone();
    for step in 0..8 {
        greedy.advance(&mut device_cache).unwrap();
        let logits = host.step(&tokens, &mut host_cache).unwrap();
        tokens = logits.chunks(vocab).map(common::argmax).collect();
        assert_eq!(greedy.tokens().unwrap(), tokens, "step {step}");
    }
    assert_eq!(device_cache.lens(), host_cache.lens());
}

fn ragged_f32(dev: &Device) {
    ragged(dev, DType::F32);
}

fn ragged_bf16(dev: &Device) {
    ragged(dev, DType::BF16);
}

fuse::device_tests!(ragged_f32, ragged_bf16);
