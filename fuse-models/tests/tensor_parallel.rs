//! The Llama decoder split across the ranks of a tensor-parallel group on the CPU (`Llama::shard`,
//! `fuse::parallel`): SmolLM2's real file at 3 ranks (its 9 query heads over 3 key/value heads divide by 3)
//! generates transformers' greedy tokens on every rank; a SmolLM2-shaped random model's logits at every step
//! on 1 and 3 ranks match the whole model's; head counts that do not divide are errors.

mod common;

use common::rel_l2;
use fuse::parallel::Group;
use fuse::prelude::*;
use fuse_models::llama::{generate, Config, Llama, Sampling};

#[test]
fn smollm2_on_three_ranks_generates_transformers_greedy_tokens() {
    let Some(file) = common::model() else { return };
    let reference = common::reference();
    let model = Llama::load(file, &Device::Cpu, DType::F32).expect("the model loads");
    let prompt = &reference["prompts"].as_array().expect("prompts")[0];
    let (ids, want) = (common::ids(&prompt["prompt_ids"]), common::ids(&prompt["greedy_ids"]));
    let whole = generate(&model, &ids, want.len(), Sampling::Greedy, 2, |_| Ok(())).expect("generates");
    let ranks = Group::cpu(3)
        .unwrap()
        .run(|rank| {
            let shard = model
                .shard(rank)
                .map_err(|e| fuse::Error::Internal { function: "shard".into(), message: e.to_string() })?;
            assert_eq!((shard.config.heads, shard.config.kv_heads), (3, 1), "rank {}", rank.index());
            let got = generate(&shard, &ids, want.len(), Sampling::Greedy, 2, |_| Ok(()))
                .map_err(|e| fuse::Error::Internal { function: "generate".into(), message: e.to_string() })?;
            Ok(got)
        })
        .expect("three ranks");
    for (r, got) in ranks.iter().enumerate() {
        assert_eq!(got.ids, want, "rank {r} of 3: greedy tokens against transformers'");
        let as_f64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        let err = rel_l2(&as_f64(&got.first_logits), &as_f64(&whole.first_logits));
        eprintln!("SmolLM2 on 3 ranks, rank {r}: first-step logits {err:.2e} from the whole model's");
        assert!(err < 1e-5, "rank {r} of 3: first-step logits {err:.2e} from the whole model's");
    }
}

/// SmolLM2's head layout (9 query heads of 3 key/value groups) at a small width.
fn small_smollm2() -> Config {
    let mut config = Config::smollm2_135m();
    (config.hidden, config.intermediate, config.layers, config.vocab) = (144, 384, 2, 300);
    (config.heads, config.kv_heads, config.head_dim) = (9, 3, 16);
    config
}

/// Each step's logits of `model` (the prompt at once, then the greedy token each step).
fn logits_of(model: &Llama) -> fuse_models::Result<Vec<Vec<f32>>> {
    let (prompt, steps) = ([5u32, 17, 2, 250, 9], 6);
    let mut cache = model.new_cache(16)?;
    let mut logits = vec![model.forward(&prompt, &mut cache)?];
    for _ in 0..steps {
        let next = common::argmax(logits.last().unwrap());
        logits.push(model.forward(&[next], &mut cache)?);
    }
    Ok(logits)
}

/// `model` sharded over `world` CPU ranks steps as the whole one: every rank's logits at every step within
/// `tolerance` (relative L2) of the whole model's.
fn shards_step_as_the_whole(what: &str, model: &Llama, world: usize, tolerance: f64) {
    let whole = logits_of(model).expect("the whole model");
    let ranks = Group::cpu(world)
        .unwrap()
        .run(|rank| {
            let to_fuse =
                |e: fuse_models::Error| fuse::Error::Internal { function: "rank".into(), message: e.to_string() };
            let shard = model.shard(rank).map_err(to_fuse)?;
            assert_eq!(shard.tensor_parallel().map(|t| (t.index, t.world)), Some((rank.index(), world)));
            logits_of(&shard).map_err(to_fuse)
        })
        .unwrap_or_else(|e| panic!("{what} on {world} ranks: {e}"));
    for (r, logits) in ranks.iter().enumerate() {
        for (step, (got, want)) in logits.iter().zip(&whole).enumerate() {
            let as_f64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
            let err = rel_l2(&as_f64(got), &as_f64(want));
            assert!(
                err < tolerance,
                "{what}, rank {r} of {world}, step {step}: logits {err:.2e} from the whole model's"
            );
        }
    }
}

#[test]
fn a_sharded_model_steps_as_the_whole_one() {
    let model = Llama::random(&small_smollm2(), &Device::Cpu, DType::F32, 7).expect("a model");
    for world in [1, 3] {
        shards_step_as_the_whole("SmolLM2-shaped f32", &model, world, 1e-5);
    }
}

#[test]
fn a_sharded_qwen2_model_cuts_its_biases_with_its_heads() {
    let mut config = Config::qwen2_5_0_5b();
    (config.hidden, config.intermediate, config.layers, config.vocab) = (224, 320, 2, 300);
    (config.heads, config.kv_heads, config.head_dim) = (14, 2, 16);
    let model = Llama::random(&config, &Device::Cpu, DType::F32, 8).expect("a model");
    shards_step_as_the_whole("Qwen2-shaped f32 (q/k/v biases)", &model, 2, 1e-5);
}

#[test]
fn a_sharded_model_of_quantized_blocks_keeps_them_as_stored() {
    // Q8_0 everywhere at SmolLM2's head layout on 3 ranks (32-value blocks), and a Q4_K_M-like mix on 2 (its v
    // and down in Q6_K: v is a projection apart from q|k), whose 256-value blocks each rank's part keeps whole.
    let mut q8 = small_smollm2();
    (q8.hidden, q8.head_dim, q8.intermediate) = (288, 32, 768);
    let model = Llama::random_stored(&q8, &|_| DType::Q8_0, &Device::Cpu, DType::F32, 9).expect("a Q8_0 model");
    shards_step_as_the_whole("SmolLM2-shaped Q8_0", &model, 3, 1e-4);
    let mut k = small_smollm2();
    (k.hidden, k.intermediate, k.heads, k.kv_heads, k.head_dim) = (512, 1024, 8, 2, 64);
    let mix = |part: &str| if part == "attn_v" || part == "ffn_down" { DType::Q6_K } else { DType::Q4_K };
    let model = Llama::random_stored(&k, &mix, &Device::Cpu, DType::F32, 10).expect("a Q4_K_M-like model");
    shards_step_as_the_whole("Llama-shaped Q4_K/Q6_K", &model, 2, 1e-4);
}

#[test]
fn heads_that_do_not_divide_are_errors() {
    let model = Llama::random(&small_smollm2(), &Device::Cpu, DType::F32, 7).expect("a model");
    let outcomes = Group::cpu(2).unwrap().run(|rank| Ok(model.shard(rank).map(|_| ()))).unwrap();
    for outcome in outcomes {
        let text = outcome.expect_err("9 query heads in 2 ranks").to_string();
        assert!(text.contains("9 query heads do not divide into 2 ranks"), "{text}");
    }
    let again = Group::cpu(3).unwrap().run(|rank| {
        let shard = model.shard(rank).expect("9 heads in 3 ranks");
        Ok(shard.shard(rank).map(|_| ()))
    });
    for outcome in again.unwrap() {
        let text = outcome.expect_err("a shard of a shard").to_string();
        assert!(text.contains("a shard already"), "{text}");
    }
}
