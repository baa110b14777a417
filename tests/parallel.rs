//! Tensor parallelism on the CPU's group of ranks (issue 34, `fuse::parallel`): a Llama MLP and a grouped-query
//! attention block, their weights sharded column- and row-parallel, each rank's fused and unfused result
//! against the reference interpreter of the same block on the whole weights (f64), at 1, 2 and 3 ranks, odd
//! row counts, f32 and bf16; and the errors: shards that do not divide, a sum outside a group, ranks whose
//! parts differ, a rank that leaves before a sum its peers wait in, nested groups.

use fuse::parallel::{Group, Rank};
use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};
use fuse::{Arg, Fusion};

#[fuse]
fn mlp(x: &Tensor, gate: &Tensor, up: &Tensor, down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(&gate.t())) * x.matmul(&up.t());
    Ok(h.matmul(&down.t()))
}

/// `mlp` with the row-parallel product's partial sums joined.
#[fuse]
fn mlp_parallel(x: &Tensor, gate: &Tensor, up: &Tensor, down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(&gate.t())) * x.matmul(&up.t());
    Ok(all_reduce_sum(&h.matmul(&down.t())))
}

/// Causal grouped-query self-attention over `s` positions of one sequence, `hq` query heads over `hkv`
/// key/value heads of size `d`, then the output projection and the residual: the whole block, and its twin on
/// a rank's heads (the heads its q/k/v rows give it), the projection's partial sums joined before the residual.
#[fuse]
mod blocks {
    use fuse::prelude::*;

    /// The heads' attention output, [s, hq * d].
    #[allow(clippy::too_many_arguments)]
    fn heads(
        x: &Tensor,
        wq: &Tensor,
        wk: &Tensor,
        wv: &Tensor,
        s: usize,
        hq: usize,
        hkv: usize,
        d: usize,
        scale: f32,
    ) -> Result<Tensor> {
        let q = x.matmul(&wq.t()).reshape(&[1, s, hq, d]).transpose(1, 2);
        let k = x.matmul(&wk.t()).reshape(&[1, s, hkv, d]).transpose(1, 2);
        let v = x.matmul(&wv.t()).reshape(&[1, s, hkv, d]).transpose(1, 2);
        Ok(attention(&q, &k, &v, scale, true).transpose(1, 2).reshape(&[s, hq * d]))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn attention_block(
        x: &Tensor,
        wq: &Tensor,
        wk: &Tensor,
        wv: &Tensor,
        wo: &Tensor,
        s: usize,
        hq: usize,
        hkv: usize,
        d: usize,
        scale: f32,
    ) -> Result<Tensor> {
        Ok(x + heads(x, wq, wk, wv, s, hq, hkv, d, scale).matmul(&wo.t()))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn attention_block_parallel(
        x: &Tensor,
        wq: &Tensor,
        wk: &Tensor,
        wv: &Tensor,
        wo: &Tensor,
        s: usize,
        hq: usize,
        hkv: usize,
        d: usize,
        scale: f32,
    ) -> Result<Tensor> {
        Ok(x + all_reduce_sum(&heads(x, wq, wk, wv, s, hq, hkv, d, scale).matmul(&wo.t())))
    }
}
use blocks::{attention_block_fused, attention_block_parallel_fused};

/// Each rank's result of `f` on `args(rank)`, fused and unfused, against `want` (the whole block's reference).
fn check_ranks(
    what: &str,
    world: usize,
    f: &fuse::FusedFn,
    args: impl Fn(&Rank) -> fuse::Result<(Vec<Tensor>, Vec<f64>)> + Sync,
    want: &Tensor,
    dtype: DType,
) {
    let dev = Device::Cpu;
    for fusion in [Fusion::On, Fusion::Off] {
        let results = Group::cpu(world)
            .expect("a group")
            .run(|rank| {
                let (tensors, scalars) = args(rank)?;
                let mut call: Vec<Arg<'_>> = tensors.iter().map(Arg::Tensor).collect();
                call.extend(scalars.iter().map(|&v| Arg::Scalar(v)));
                Ok(f.call_with(&call, fusion)?.remove(0))
            })
            .unwrap_or_else(|e| panic!("{what}, {world} ranks ({fusion:?}): {e}"));
        assert_eq!(results.len(), world);
        for (r, got) in results.iter().enumerate() {
            assert_close(&format!("{what}, rank {r} of {world} ({fusion:?})"), got, want, dtype, &dev);
            // Every rank adds the parts in the same order: the same bits.
            assert_eq!(got.to_vec::<f32>().unwrap(), results[0].to_vec::<f32>().unwrap(), "{what}: rank {r}");
        }
    }
}

#[test]
fn a_sharded_mlp_matches_the_whole_one() {
    let dev = Device::Cpu;
    let mut rng = TestRng::new(34);
    for dtype in [DType::F32, DType::BF16] {
        for (rows, hidden, inter) in [(1, 24, 36), (5, 40, 60), (7, 16, 48)] {
            let t = |rng: &mut TestRng, shape: &[usize], scale: f32| random(rng, shape, dtype, -scale, scale, &dev);
            let x = t(&mut rng, &[rows, hidden], 1.0);
            let gate = t(&mut rng, &[inter, hidden], 0.3);
            let up = t(&mut rng, &[inter, hidden], 0.3);
            let down = t(&mut rng, &[hidden, inter], 0.3);
            let whole = [&x, &gate, &up, &down].map(Arg::Tensor);
            let want = fuse::reference(&mlp_fused(), &whole).expect("the reference").remove(0);
            for world in [1, 2, 3] {
                let args = |rank: &Rank| {
                    let shards = vec![
                        x.clone(),
                        rank.column_parallel(&gate)?,
                        rank.column_parallel(&up)?,
                        rank.row_parallel(&down)?,
                    ];
                    Ok((shards, vec![]))
                };
                let what = format!("mlp {dtype} [{rows}, {hidden}] x {inter}");
                check_ranks(&what, world, &mlp_parallel_fused(), args, &want, dtype);
            }
        }
    }
}

#[test]
fn a_sharded_attention_block_matches_the_whole_one() {
    let dev = Device::Cpu;
    let mut rng = TestRng::new(35);
    // (positions, query heads, key/value heads, head size): the heads split with the ranks, each rank taking
    // whole key/value groups (hq / world query heads over hkv / world key/value heads).
    for (s, hq, hkv, d) in [(5, 6, 2, 8), (3, 12, 6, 4)] {
        let hidden = 24;
        let dtype = DType::F32;
        let t = |rng: &mut TestRng, shape: &[usize], scale: f32| random(rng, shape, dtype, -scale, scale, &dev);
        let x = t(&mut rng, &[s, hidden], 1.0);
        let wq = t(&mut rng, &[hq * d, hidden], 0.3);
        let wk = t(&mut rng, &[hkv * d, hidden], 0.3);
        let wv = t(&mut rng, &[hkv * d, hidden], 0.3);
        let wo = t(&mut rng, &[hidden, hq * d], 0.3);
        let scale = 1.0 / (d as f64).sqrt();
        let sizes = |heads: usize, kv: usize| {
            [s, heads, kv, d].map(|v| v as f64).into_iter().chain([scale]).collect::<Vec<f64>>()
        };
        let mut whole: Vec<Arg<'_>> = [&x, &wq, &wk, &wv, &wo].map(Arg::Tensor).to_vec();
        whole.extend(sizes(hq, hkv).into_iter().map(Arg::Scalar));
        let want = fuse::reference(&attention_block_fused(), &whole).expect("the reference").remove(0);
        for world in [1, 2] {
            let args = |rank: &Rank| {
                let shards = vec![
                    x.clone(),
                    rank.column_parallel(&wq)?,
                    rank.column_parallel(&wk)?,
                    rank.column_parallel(&wv)?,
                    rank.row_parallel(&wo)?,
                ];
                Ok((shards, sizes(hq / world, hkv / world)))
            };
            let what = format!("attention s={s} hq={hq} hkv={hkv} d={d}");
            check_ranks(&what, world, &attention_block_parallel_fused(), args, &want, dtype);
        }
    }
}

#[test]
fn a_sharded_mlp_of_quantized_weights_matches_the_whole_one() {
    use fuse::ir::quant::random_blocks;
    let dev = Device::Cpu;
    let blocks = |dtype: DType, rows: usize, cols: usize, seed: u64| {
        let count = rows * cols / dtype.block().unwrap().elements;
        Tensor::from_blocks(dtype, &[rows, cols], random_blocks(dtype, count, seed), &dev).unwrap()
    };
    let mut rng = TestRng::new(37);
    // Q8_0 splits its 32-value blocks, Q4_K its 256-value ones, along K (down) at 2 ranks: 512 columns.
    for dtype in [DType::Q8_0, DType::Q4_K] {
        let (rows, hidden, inter) = (3, 512, 512);
        let x = random(&mut rng, &[rows, hidden], DType::F32, -1.0, 1.0, &dev);
        let (gate, up, down) =
            (blocks(dtype, inter, hidden, 1), blocks(dtype, inter, hidden, 2), blocks(dtype, hidden, inter, 3));
        let whole = mlp(&x, &gate, &up, &down).expect("the whole MLP").to_vec::<f32>().unwrap();
        let results = Group::cpu(2)
            .unwrap()
            .run(|rank| {
                let (g, u, d) = (rank.column_parallel(&gate)?, rank.column_parallel(&up)?, rank.row_parallel(&down)?);
                assert_eq!((g.dtype(), d.dtype(), d.shape()), (dtype, dtype, &[hidden, inter / 2][..]));
                // The shard's blocks are the whole weight's, as stored.
                let part = |t: &Tensor| t.to_dtype(DType::F32).and_then(|t| t.to_vec::<f32>());
                let want = down.to_dtype(DType::F32)?.narrow(1, rank.index() * inter / 2, inter / 2)?.contiguous()?;
                assert_eq!(part(&d)?, want.to_vec::<f32>()?, "{dtype} rank {}: the down shard", rank.index());
                mlp_parallel(&x, &g, &u, &d)?.to_vec::<f32>()
            })
            .expect("two ranks");
        for (r, got) in results.iter().enumerate() {
            // The ranks' partial sums in another order than one product's: f32 rounding apart.
            let err = fuse::rel_l2_error(got, &whole);
            assert!(err < 1e-4, "{dtype} mlp, rank {r} of 2: relative error {err:.3e} against the whole weights");
        }
    }
    // A part that would cut a block is an error naming the shape: 512 Q4_K columns in 4 parts of 128.
    let w = blocks(DType::Q4_K, 2, 512, 4);
    let errors = Group::cpu(4).unwrap().run(|rank| Ok(rank.row_parallel(&w).map(|_| ()))).unwrap();
    for e in errors {
        let text = e.expect_err("128-value parts of 256-value blocks").to_string();
        assert!(text.contains("[2, 512]") && text.contains("on a block"), "{text}");
    }
}

#[test]
fn the_eager_sum_adds_every_ranks_part() {
    let sums = Group::cpu(3)
        .unwrap()
        .run(|rank| {
            let part = Tensor::from_vec(vec![rank.index() as f32 + 1.0, 10.0], &[1, 2], rank.device())?;
            all_reduce_sum(&part)?.to_vec::<f32>()
        })
        .expect("three ranks");
    assert_eq!(sums, vec![vec![6.0, 30.0]; 3]);
}

#[test]
fn shards_that_do_not_divide_are_errors_naming_the_shape() {
    let w = Tensor::from_vec(vec![0.0f32; 5 * 4], &[5, 4], &Device::Cpu).unwrap();
    let errors = Group::cpu(2).unwrap().run(|rank| Ok(rank.column_parallel(&w).map(|_| ()))).unwrap();
    for e in errors {
        let text = e.expect_err("5 rows in 2 parts").to_string();
        assert!(text.contains("[5, 4]") && text.contains("2 equal parts"), "{text}");
    }
    let errors = Group::cpu(3).unwrap().run(|rank| Ok(rank.row_parallel(&w).map(|_| ()))).unwrap();
    assert!(errors.iter().all(|e| e.is_err()), "4 columns in 3 parts");
    let text = Group::cpu(2).unwrap().run(|rank| rank.shard(&w, 2)).unwrap_err().to_string();
    assert!(text.contains("axis 2"), "{text}");
    assert!(Group::cpu(0).is_err(), "a group of no ranks");
    let text = Group::cuda(&[0, 1, 0]).unwrap_err().to_string();
    assert!(text.contains("GPU 0 is rank 0 and rank 2"), "{text}");
    assert!(Group::cuda(&[]).is_err(), "a group of no GPUs");
    // A stacked weight's parts: each rank its slice of every part, in order; parts that do not add up or
    // divide are errors naming them.
    let stack = Tensor::from_vec((0..6 * 2).map(|v| v as f32).collect::<Vec<_>>(), &[6, 2], &Device::Cpu).unwrap();
    let parts = Group::cpu(2).unwrap().run(|rank| rank.shard_stacked(&stack, 0, &[4, 2])?.to_vec::<f32>()).unwrap();
    assert_eq!(parts, [vec![0., 1., 2., 3., 8., 9.], vec![4., 5., 6., 7., 10., 11.]]);
    for bad in [&[4usize, 1][..], &[3, 3]] {
        let text = Group::cpu(2).unwrap().run(|rank| rank.shard_stacked(&stack, 0, bad)).unwrap_err().to_string();
        assert!(text.contains(&format!("{bad:?}")), "{text}");
    }
}

#[test]
fn a_sum_outside_a_group_is_an_error() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2], &Device::Cpu).unwrap();
    let text = all_reduce_sum(&x).unwrap_err().to_string();
    assert!(text.contains("Group::run"), "{text}");
    let text = mlp_parallel(
        &x.reshape(&[1, 2]).unwrap(),
        &x.reshape(&[1, 2]).unwrap(),
        &x.reshape(&[1, 2]).unwrap(),
        &x.reshape(&[2, 1]).unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(text.contains("outside a tensor-parallel group"), "{text}");
}

#[test]
fn ranks_whose_parts_differ_all_fail() {
    let outcomes = Group::cpu(2)
        .unwrap()
        .run(|rank| {
            let n = 2 + rank.index();
            let part = Tensor::from_vec(vec![1.0f32; n], &[n], rank.device())?;
            Ok(all_reduce_sum(&part).map(|_| ()))
        })
        .unwrap();
    for outcome in outcomes {
        let text = outcome.expect_err("shapes [2] and [3]").to_string();
        assert!(text.contains("[2]") && text.contains("[3]"), "{text}");
    }
}

#[test]
fn a_rank_that_leaves_early_fails_its_peers_instead_of_hanging() {
    let outcomes = Group::cpu(3)
        .unwrap()
        .run(|rank| {
            let part = Tensor::from_vec(vec![1.0f32; 4], &[4], rank.device())?;
            // Rank 1 makes one sum fewer than the others.
            let sums = if rank.index() == 1 { 1 } else { 2 };
            let mut last = part;
            for _ in 0..sums {
                last = match all_reduce_sum(&last) {
                    Ok(t) => t,
                    Err(e) => return Ok(Err(e.to_string())),
                };
            }
            Ok(Ok(last.to_vec::<f32>()?))
        })
        .unwrap();
    assert_eq!(outcomes[1], Ok(vec![3.0; 4]), "the first sum completes on every rank");
    for r in [0, 2] {
        let text = outcomes[r].clone().expect_err("rank 1 left before the second sum");
        assert!(text.contains("rank 1") && text.contains("left the group"), "rank {r}: {text}");
    }
    // A rank's error before any sum is returned, and its peers' sums fail rather than wait.
    let text = Group::cpu(2)
        .unwrap()
        .run(|rank| {
            if rank.index() == 0 {
                return Err(fuse::Error::InvalidArgument { op: "test", reason: "rank 0 fails first".into() });
            }
            all_reduce_sum(&Tensor::from_vec(vec![1.0f32], &[1], rank.device())?).map(|_| ())
        })
        .unwrap_err()
        .to_string();
    assert!(text.contains("rank 0 fails first"), "{text}");
}

#[test]
fn groups_do_not_nest() {
    let outcomes = Group::cpu(2).unwrap().run(|_| Ok(Group::cpu(2)?.run(|_| Ok(())).map(|_| ()))).unwrap();
    for outcome in outcomes {
        assert!(outcome.unwrap_err().to_string().contains("do not nest"));
    }
}

/// A GPU group of `world` ranks on GPUs 0 .. world, or `None` after saying why not: no GPU (`FUSE_TEST_GPU=1`
/// makes that a failure), fewer GPUs than ranks (`FUSE_TEST_GPUS=N`, N >= world, makes that a failure: the
/// 2-GPU machine's runner sets it), or no NCCL where a GPU is (a failure with `FUSE_TEST_GPU=1`).
fn gpu_group(world: usize) -> Option<Group> {
    use std::io::Write as _;
    fuse::testing::gpu_or_skip()?;
    let required = std::env::var("FUSE_TEST_GPUS").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
    if let Err(e) = Device::cuda(world - 1) {
        assert!(required < world, "FUSE_TEST_GPUS={required} but GPU {} cannot start: {e}", world - 1);
        let _ = writeln!(std::io::stderr(), "skipped: {world} ranks need {world} GPUs ({e})");
        return None;
    }
    let group = Group::cuda(&(0..world).collect::<Vec<_>>()).expect("a GPU group");
    // NCCL loads when a group runs: a missing library is an error then, which says so.
    match group.run(|_| Ok(())) {
        Ok(_) => Some(group),
        Err(e) => {
            let required = std::env::var("FUSE_TEST_GPU").is_ok_and(|v| v == "1");
            assert!(!required, "FUSE_TEST_GPU=1 but a GPU group of {world} cannot start: {e}");
            let _ = writeln!(std::io::stderr(), "skipped: a GPU group of {world} cannot start ({e})");
            None
        }
    }
}

/// The sharded MLP on a GPU group against the whole one's reference (bf16 and f32, through NCCL on each
/// rank's stream), at `world` ranks.
fn gpu_mlp(world: usize) {
    let Some(group) = gpu_group(world) else { return };
    let mut rng = TestRng::new(36);
    for dtype in [DType::F32, DType::BF16] {
        let (rows, hidden, inter) = (5, 64, 96);
        let cpu = Device::Cpu;
        let t = |rng: &mut TestRng, shape: &[usize], scale: f32| random(rng, shape, dtype, -scale, scale, &cpu);
        let (x, gate) = (t(&mut rng, &[rows, hidden], 1.0), t(&mut rng, &[inter, hidden], 0.3));
        let (up, down) = (t(&mut rng, &[inter, hidden], 0.3), t(&mut rng, &[hidden, inter], 0.3));
        let whole = [&x, &gate, &up, &down].map(Arg::Tensor);
        let want = fuse::reference(&mlp_fused(), &whole).expect("the reference").remove(0);
        for fusion in [Fusion::On, Fusion::Off] {
            let results = group
                .run(|rank| {
                    let dev = rank.device();
                    let shards = [
                        x.to_device(dev)?,
                        rank.column_parallel(&gate)?.to_device(dev)?,
                        rank.column_parallel(&up)?.to_device(dev)?,
                        rank.row_parallel(&down)?.to_device(dev)?,
                    ];
                    let y = mlp_parallel_fused().call_with(&shards.each_ref().map(Arg::Tensor), fusion)?.remove(0);
                    y.to_device(&Device::Cpu)
                })
                .unwrap_or_else(|e| panic!("mlp on {world} GPUs ({dtype}, {fusion:?}): {e}"));
            for (r, got) in results.iter().enumerate() {
                let gpu = Device::cuda(0).expect("a GPU");
                let what = format!("mlp {dtype}, rank {r} of {world} GPUs ({fusion:?})");
                // The GPU's tolerance (its silu), the result read back to the CPU.
                let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
                let (err, tol) = (fuse::rel_l2_error(&g, &w), fuse::testing::tolerance(dtype, &gpu));
                assert!(err <= tol, "{what}: relative error {err:.3e} > {tol:.1e}");
            }
        }
    }
}

#[test]
fn a_sharded_mlp_on_one_gpu_through_nccl() {
    gpu_mlp(1);
}

#[test]
fn a_sharded_mlp_on_two_gpus_through_nccl() {
    gpu_mlp(2);
}

#[test]
fn a_gpu_tensor_in_a_cpu_group_is_an_error() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    let x = Tensor::from_vec(vec![1.0f32; 4], &[4], &gpu).unwrap();
    let text = Group::cpu(1).unwrap().run(|_| all_reduce_sum(&x)).unwrap_err().to_string();
    assert!(text.contains("Group::cuda"), "{text}");
}
