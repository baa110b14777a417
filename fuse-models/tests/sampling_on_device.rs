//! Seeded top-p sampling on the device (issue 33, items 4 and 5: `Llama::sampling_decoder` and its one-launch
//! form): each step draws every sequence's next token from its logits with the uniform of its position in the
//! seed's table, with no host round trip. Checked against the host's draw (`top_p_choice`) on the same logits
//! and uniform, step by step, for a batch of sequences at positions of their own: the same token, or (f32
//! running sums on the device, f64 on the host) its neighbour in the sorted order where the uniform falls
//! within rounding of their boundary; the same seed gives the same tokens, another seed others; a temperature
//! of 0 is greedy; an out-of-range top-p is an error.

use fuse::prelude::*;
use fuse_models::llama::{sampling_uniforms, top_p_choice, Config, Decoder, KvCache, Llama, Sampling};

const PROMPTS: [usize; 3] = [4, 1, 7];
const CAPACITY: usize = 40;

fn model(dev: &Device) -> Llama {
    let mut config = Config::smollm2_135m();
    (config.layers, config.vocab) = (2, 3_000);
    Llama::random(&config, dev, DType::BF16, 57).expect("the model builds")
}

fn filled(model: &Llama) -> KvCache {
    let mut cache = model.new_batch_cache(PROMPTS.len(), CAPACITY).unwrap();
    for (b, &len) in PROMPTS.iter().enumerate() {
        let ids: Vec<u32> = (0..len as u32).map(|i| (i * 613 + 7 * b as u32 + 3) % model.config.vocab as u32).collect();
        model.forward_sequence(b, &ids, &mut cache).unwrap();
    }
    cache
}

/// Tokens of `steps` steps of `decoder` from `start`, each step's checked against the host's draw.
fn run(model: &Llama, mut decoder: Decoder, cache: &mut KvCache, sampling: Sampling, steps: usize) -> Vec<u32> {
    let Sampling::TopP { temperature, top_p, seed } = sampling else { unreachable!() };
    let (vocab, batch) = (model.config.vocab, PROMPTS.len());
    let uniforms = sampling_uniforms(seed, batch, CAPACITY);
    decoder.set_tokens(&[11, 22, 33]).unwrap();
    let (mut tokens, mut neighbours) = (Vec::new(), 0);
    for step in 0..steps {
        let at = cache.lens().to_vec();
        decoder.advance(cache).unwrap();
        let (picked, logits) = (decoder.tokens().unwrap(), decoder.logits().unwrap());
        for s in 0..batch {
            let row = &logits[s * vocab..(s + 1) * vocab];
            let want = top_p_choice(row, temperature, top_p, uniforms[at[s] * batch + s] as f64);
            if picked[s] != want {
                // Neighbours in the order of probability, where the draw falls within rounding of their boundary.
                let rank = |id: u32| row.iter().filter(|&&v| v > row[id as usize]).count();
                assert_eq!(
                    rank(picked[s]).abs_diff(rank(want)),
                    1,
                    "step {step}, sequence {s}: {} against {want}",
                    picked[s]
                );
                neighbours += 1;
            }
        }
        tokens.extend(picked);
    }
    assert!(neighbours * 10 <= steps * batch, "{neighbours} of {} draws picked a neighbour", steps * batch);
    tokens
}

fn sampling(dev: &Device) {
    let model = model(dev);
    let seeded = |seed| Sampling::TopP { temperature: 0.8, top_p: 0.9, seed };
    let mut cache = filled(&model);
    let first = run(&model, model.sampling_decoder(&cache, Fusion::On, seeded(5)).unwrap(), &mut cache, seeded(5), 8);
    let mut cache = filled(&model);
    let again = run(&model, model.sampling_decoder(&cache, Fusion::On, seeded(5)).unwrap(), &mut cache, seeded(5), 8);
    assert_eq!(first, again, "the same seed");
    let mut cache = filled(&model);
    let other = run(&model, model.sampling_decoder(&cache, Fusion::On, seeded(6)).unwrap(), &mut cache, seeded(6), 8);
    assert_ne!(first, other, "another seed");
    if dev.is_cuda() {
        let mut cache = filled(&model);
        let one = model.one_launch_sampling_decoder(&cache, Fusion::On, seeded(5)).expect("the one-launch step builds");
        let tasks = one.one_launch_report().map(|r| (r.as_tasks, r.launches));
        eprintln!("{dev}: the sampling one-launch step: {tasks:?} (tasks, launches)");
        assert_eq!(run(&model, one, &mut cache, seeded(5), 8), first, "the one-launch step draws the same");
    }
    // A temperature of 0 is greedy; a top-p of 0 is an error.
    let cache = filled(&model);
    let zero = Sampling::TopP { temperature: 0.0, top_p: 0.9, seed: 1 };
    let mut greedy = model.sampling_decoder(&cache, Fusion::On, zero).unwrap();
    let mut cache_g = cache;
    greedy.set_tokens(&[11, 22, 33]).unwrap();
    greedy.advance(&mut cache_g).unwrap();
    let logits = greedy.logits().unwrap();
    let argmax: Vec<u32> = logits
        .chunks(model.config.vocab)
        .map(|row| (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best }) as u32)
        .collect();
    assert_eq!(greedy.tokens().unwrap(), argmax);
    let bad = Sampling::TopP { temperature: 0.8, top_p: 0.0, seed: 1 };
    assert!(model.sampling_decoder(&filled(&model), Fusion::On, bad).is_err());
}

fuse::device_tests!(sampling);
