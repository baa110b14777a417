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

#[test]
fn a_sharded_model_steps_as_the_whole_one() {
    let model = Llama::random(&small_smollm2(), &Device::Cpu, DType::F32, 7).expect("a model");
    let (prompt, steps) = ([5u32, 17, 2, 250, 9], 6);
    // The whole model: the prompt at once, then the greedy token each step, every step's logits kept.
    let run = |m: &Llama| -> fuse_models::Result<Vec<Vec<f32>>> {
        let mut cache = m.new_cache(16)?;
        let mut logits = vec![m.forward(&prompt, &mut cache)?];
        for _ in 0..steps {
            let next = common::argmax(logits.last().unwrap());
            logits.push(m.forward(&[next], &mut cache)?);
        }
        Ok(logits)
    };
    let whole = run(&model).expect("the whole model");
    for world in [1, 3] {
        let ranks = Group::cpu(world)
            .unwrap()
            .run(|rank| {
                let to_fuse =
                    |e: fuse_models::Error| fuse::Error::Internal { function: "rank".into(), message: e.to_string() };
                let shard = model.shard(rank).map_err(to_fuse)?;
                assert_eq!(shard.tensor_parallel().map(|t| (t.index, t.world)), Some((rank.index(), world)));
                run(&shard).map_err(to_fuse)
            })
            .expect("the ranks");
        for (r, logits) in ranks.iter().enumerate() {
            for (step, (got, want)) in logits.iter().zip(&whole).enumerate() {
                let as_f64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
                let err = rel_l2(&as_f64(got), &as_f64(want));
                assert!(err < 1e-5, "rank {r} of {world}, step {step}: logits {err:.2e} from the whole model's");
            }
        }
    }
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
