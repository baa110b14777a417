//! The decoder against transformers' LlamaForCausalLM on the same file (tests/data/smollm2_reference.json,
//! f32 on the CPU), on each device (`case::cpu`, and `case::cuda` on CUDA device 0, skipped visibly without
//! one): in f32 the first-step logits of each reference prompt (its top 64 and every 48th, relative L2) and its
//! greedy tokens; in bf16 the logits within a few percent and the first token; bad inputs as errors.

mod common;

use common::rel_l2;
use fuse::prelude::*;
use fuse_models::llama::{generate, Config, Llama, Sampling};

/// The reference's strided first-step logits and ours at the same stride.
fn strided_logits(reference: &serde_json::Value, prompt: &serde_json::Value, logits: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let stride = reference["logits"]["stride"].as_u64().unwrap_or(48) as usize;
    let want = prompt["first_step_logits"]["strided"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    (logits.iter().step_by(stride).map(|&v| v as f64).collect(), want)
}

fn logits_and_greedy_tokens_match_transformers_in_f32(dev: &Device) {
    let Some(file) = common::model() else { return };
    let reference = common::reference();
    let model = Llama::load(file, dev, DType::F32).expect("the model loads");
    let eos = 2;
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let name = prompt["name"].as_str().unwrap_or("?");
        let ids = common::ids(&prompt["prompt_ids"]);
        let want_ids = common::ids(&prompt["greedy_ids"]);
        let got = generate(&model, &ids, want_ids.len(), Sampling::Greedy, eos, |_| Ok(())).expect("generates");
        let (ours, want) = strided_logits(&reference, prompt, &got.first_logits);
        let err = rel_l2(&ours, &want);
        eprintln!("`{name}` on {dev}: first-step logits (strided) relative L2 {err:.2e}");
        assert!(err <= 1e-3, "`{name}` on {dev}: first-step logits (strided) relative L2 {err:.2e} > 1e-3");
        let top = prompt["first_step_logits"]["top"].as_array().unwrap();
        let top = top.iter().map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_f64().unwrap()));
        let (top_ours, top_want): (Vec<f64>, Vec<f64>) = top.map(|(id, v)| (got.first_logits[id] as f64, v)).unzip();
        let err = rel_l2(&top_ours, &top_want);
        eprintln!("`{name}` on {dev}: the 64 largest logits, relative L2 {err:.2e}; {} greedy tokens", want_ids.len());
        assert!(err <= 1e-3, "`{name}` on {dev}: the 64 largest logits, relative L2 {err:.2e} > 1e-3");
        assert_eq!(got.ids, want_ids, "`{name}` on {dev}: greedy tokens");
    }
}

fn bf16_logits_stay_close_to_the_f32_reference(dev: &Device) {
    let Some(file) = common::model() else { return };
    let reference = common::reference();
    let model = Llama::load(file, dev, DType::BF16).expect("the model loads in bf16");
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let name = prompt["name"].as_str().unwrap_or("?");
        let ids = common::ids(&prompt["prompt_ids"]);
        let got = generate(&model, &ids, 1, Sampling::Greedy, 2, |_| Ok(())).expect("generates");
        let (ours, want) = strided_logits(&reference, prompt, &got.first_logits);
        // bf16 weights and activations (8 bits of mantissa) through 30 layers: a few percent.
        let err = rel_l2(&ours, &want);
        eprintln!("`{name}` in bf16 on {dev}: first-step logits relative L2 {err:.2e}");
        assert!(err <= 5e-2, "`{name}` in bf16 on {dev}: first-step logits relative L2 {err:.2e} > 5e-2");
        let first = common::ids(&prompt["greedy_ids"])[0];
        assert_eq!(got.ids[0], first, "`{name}` in bf16 on {dev}: the first greedy token");
    }
}

/// The cache's memory is the one allocated up front: a handle taken before a step sees the step's rows
/// (written in place), rows past the length stay as they were (zero), earlier rows are not rewritten.
fn decode_writes_the_cache_in_place(dev: &Device) {
    let Some(file) = common::model() else { return };
    let model = Llama::load(file, dev, DType::F32).expect("the model loads");
    let mut cache = model.new_cache(8).expect("a cache");
    let (keys, values) = (cache.layer(0).0.clone(), cache.layer(29).1.clone());
    let row = |t: &Tensor, head: usize, pos: usize| {
        t.narrow(1, head, 1).unwrap().narrow(2, pos, 1).unwrap().to_vec::<f32>().unwrap()
    };
    let written = |t: &Tensor, pos: usize| (0..3).all(|h| row(t, h, pos).iter().any(|&v| v != 0.0));
    model.forward(&[1, 9690, 28], &mut cache).expect("prefill");
    for t in [&keys, &values] {
        assert!(
            (0..3).all(|p| written(t, p)) && !(3..8).any(|p| written(t, p)),
            "rows 0..3 written by the prefill, no others"
        );
    }
    let before = keys.to_vec::<f32>().unwrap();
    model.forward(&[253], &mut cache).expect("a decode step");
    let after = keys.to_vec::<f32>().unwrap();
    assert!(written(&keys, 3) && !(4..8).any(|p| written(&keys, p)), "the step wrote row 3 only");
    let head_rows =
        |data: &[f32]| -> Vec<f32> { data.chunks(8 * 64).flat_map(|head| head[..3 * 64].to_vec()).collect() };
    assert_eq!(head_rows(&before), head_rows(&after), "the rows already there are not rewritten");
}

/// The decode step recorded as a CUDA graph (on the GPU; the CPU runs it call by call) gives the logits of
/// the step run call by call, step after step; the greedy decoder picks their argmax on the device.
fn a_recorded_decode_step_matches_calls(dev: &Device) {
    // Random weights of the model's shape: replayed against called needs no file, so this runs everywhere.
    let model = Llama::random(&Config::smollm2_135m(), dev, DType::F32, 11).expect("the model builds");
    let prompt = [1u32, 9690, 28, 253];
    let (mut recorded, mut called) = (model.new_cache(12).unwrap(), model.new_cache(12).unwrap());
    model.forward(&prompt, &mut recorded).unwrap();
    model.forward(&prompt, &mut called).unwrap();
    model.forward(&[30], &mut recorded).unwrap(); // the warm one-token step
    model.forward(&[30], &mut called).unwrap();
    let mut decoder = model.decoder(&recorded, Fusion::On).expect("the step records");
    let recording = dev.is_cuda() && std::env::var("FUSE_GRAPHS").is_err();
    assert_eq!(decoder.is_recorded(), recording, "recorded on a GPU only");
    for token in [411u32, 5, 49151] {
        let got = decoder.step(&[token], &mut recorded).unwrap();
        let want = model.forward(&[token], &mut called).unwrap();
        let wide = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        let err = common::rel_l2(&wide(&got), &wide(&want));
        assert!(err < 1e-5, "token {token} on {dev}: replayed logits differ from called ones by {err:.2e}");
    }
    assert_eq!(recorded.len(), called.len());
    let err = decoder.step(&[49152], &mut recorded).unwrap_err();
    assert!(matches!(err, fuse_models::Error::UnknownTokenId { id: 49152, vocab_size: 49152 }), "{err}");
    assert_eq!(recorded.len(), called.len(), "a refused step leaves the cache as it was");
    let wrong = model.new_cache(12).unwrap();
    let mut other = wrong;
    assert!(decoder.step(&[1], &mut other).is_err(), "a decoder steps its own cache only");
    // Greedy on the device: the next token is the argmax of the logits the call by call step gives.
    let mut greedy = model.greedy_decoder(&recorded, Fusion::On).unwrap();
    greedy.set_tokens(&[253]).unwrap();
    greedy.advance(&mut recorded).unwrap();
    let logits = model.forward(&[253], &mut called).unwrap();
    let max = logits.iter().copied().fold(f32::MIN, f32::max);
    let picked = greedy.tokens().unwrap();
    assert_eq!(picked.len(), 1);
    // Random weights can leave near ties: the picked token's logit must be the maximum, not a given index.
    let at = logits[picked[0] as usize];
    assert!(
        at >= max - 1e-5 * max.abs().max(1.0),
        "the greedy step wrote token {} ({at}), the maximum is {max}",
        picked[0]
    );
}

/// In bf16 (the skinny GEMM kernels take the rms_norm prologues) a recorded decode step launches at most 5
/// kernels a layer: the QKV GEMM; rope, both cache appends and attention in one; the output projection; the
/// FFN's dual GEMM; the down projection. Plus the embeddings, the head and the greedy pick.
///
/// The GEMM paths come from the fixed rule, not from timing: the tests of this binary run at the same time,
/// and a timing made while others run can prefer cuBLAS with separate prologue and epilogue kernels. (This
/// sets the process's autotuning off, and its results file to a fresh one, for the other tests too: only
/// which correct path they take changes.)
fn a_recorded_bf16_step_is_at_most_five_kernels_a_layer(dev: &Device) {
    if dev.is_cuda() {
        let file = std::env::temp_dir().join(format!("fuse-kernel-count-{}.tsv", std::process::id()));
        fuse::tune::set_tune_file(&file);
        fuse::tune::set_mode(fuse::tune::AutotuneMode::Off);
    }
    let config = Config::smollm2_135m();
    let model = Llama::random(&config, dev, DType::BF16, 12).expect("the model builds");
    let mut cache = model.new_cache(8).unwrap();
    model.forward(&[1, 9690, 28], &mut cache).unwrap();
    model.forward(&[30], &mut cache).unwrap(); // the warm one-token step
    let decoder = model.greedy_decoder(&cache, Fusion::On).expect("the step records");
    match decoder.kernel_count().unwrap() {
        Some(kernels) => assert!(kernels <= 5 * config.layers + 8, "{kernels} kernels for {} layers", config.layers),
        None => assert!(!decoder.is_recorded(), "a recorded step has a kernel count"),
    }
}

fn an_unknown_token_or_a_full_cache_is_an_error(dev: &Device) {
    let Some(file) = common::model() else { return };
    let model = Llama::load(file, dev, DType::F32).expect("the model loads");
    let mut cache = model.new_cache(8).expect("a cache");
    let err = model.forward(&[1, 49152], &mut cache).unwrap_err();
    assert!(matches!(err, fuse_models::Error::UnknownTokenId { id: 49152, vocab_size: 49152 }), "{err}");
    let c = &model.config;
    let mut small = fuse_models::llama::KvCache::new(c.layers, 1, c.kv_heads, c.head_dim, 4, DType::F32, dev).unwrap();
    model.forward(&[1, 2, 3], &mut small).expect("three positions fit in four");
    let err = model.forward(&[4, 5], &mut small).unwrap_err();
    assert!(matches!(err, fuse_models::Error::CacheFull { capacity: 4, used: 3, asked: 2 }), "{err}");
    assert!(err.to_string().contains("holds 4 positions; 3 are used and 2 more"), "{err}");
    assert_eq!(small.len(), 3, "a refused step leaves the cache as it was");
    let too_long = model.new_cache(c.context + 1).err().expect("a cache past the context is refused");
    assert!(matches!(too_long, fuse_models::Error::CacheFull { asked, .. } if asked == c.context + 1), "{too_long}");
}

/// `generate` with every token it may make (`usize::MAX`) runs until the cache is full and says so (it panicked
/// on an overflowing add); a NaN temperature or a top-p past 1 is an error before any work.
fn generate_refuses_bad_sampling_and_stops_at_a_full_cache(dev: &Device) {
    let mut config = Config::smollm2_135m();
    (config.layers, config.context) = (1, 6);
    let model = Llama::random(&config, dev, DType::F32, 5).expect("the model builds");
    let never = u32::MAX; // an end token no step makes
    let mut seen = 0;
    let err = generate(&model, &[1, 2, 3], usize::MAX, Sampling::Greedy, never, |_| {
        seen += 1;
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(err, fuse_models::Error::CacheFull { capacity: 6, .. }), "{err}");
    assert_eq!(seen, 4, "tokens until the six positions are used (the fourth is never fed back)");
    for (temperature, top_p, what) in
        [(f32::NAN, 0.9, "temperature NaN"), (0.7, 1.5, "top_p 1.5"), (-1.0, 0.9, "temperature -1")]
    {
        let sampling = Sampling::TopP { temperature, top_p, seed: 1 };
        let err = generate(&model, &[1], 4, sampling, never, |_| Ok(())).unwrap_err();
        assert!(matches!(err, fuse_models::Error::InvalidArgument { .. }) && err.to_string().contains(what), "{err}");
    }
}

fuse::device_tests!(
    generate_refuses_bad_sampling_and_stops_at_a_full_cache,
    logits_and_greedy_tokens_match_transformers_in_f32,
    bf16_logits_stay_close_to_the_f32_reference,
    an_unknown_token_or_a_full_cache_is_an_error,
    decode_writes_the_cache_in_place,
    a_recorded_decode_step_matches_calls,
    a_recorded_bf16_step_is_at_most_five_kernels_a_layer,
);
