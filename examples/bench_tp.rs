//! Tensor parallelism on the GPUs of one machine (issue 34; `fuse::parallel`, NCCL): the Llama-3-8B MLP
//! (bf16, BENCH.md's M) and a Llama-3-8B-shaped decoder layer's step (hidden 4096, 32 query heads over 8
//! key/value heads of 128, intermediate 14336; random bf16 weights; batch 1 and 16, 128 cached, the LM head a
//! 256-word vocabulary) on 1 GPU and sharded over `--gpus` (Megatron-style: gate/up and q/k/v by rows, down
//! and the output projection by columns, each block's last product summed by NCCL). Each rank times its own
//! stream back to back with CUDA events (calls queued in a row, divided by their number, the median of
//! rounds); a step's time is the slowest rank's. Beside them: the all-reduce of the MLP's output alone, its
//! share of the sharded MLP, and the ratio to 1 GPU (issue 34's targets: at most 0.55x at M >= 1024, 0.65x at
//! M = 1). Every sharded result is checked against the 1-GPU one first. The PyTorch peer of the MLP is
//! `benches/peers/torch_tp_mlp.py` (two processes, torch.distributed with NCCL, CUDA graphs).
//!
//! Run (2 GPUs; NCCL_NVLS_ENABLE=0 keeps NVLink multicast off):
//! `cargo run --release --example bench_tp [-- --gpus 2 --ms 1,4,16,64,256,1024,4096 --calls 20 --rounds 5]`

#[path = "common/llama.rs"]
mod llama;
#[path = "common/timing.rs"]
mod timing;

use fuse::parallel::{Group, Rank};
use fuse::prelude::*;
use fuse_models::llama::{Config, KvCache, Llama, StepInputs};
use llama::{llama_mlp, weights, HIDDEN, INTER};

/// The MLP on a rank's shards: its columns of the hidden layer, its part of every output summed over the ranks.
#[fuse]
fn llama_mlp_parallel(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(&w_gate.t())) * x.matmul(&w_up.t());
    Ok(all_reduce_sum(&h.matmul(&w_down.t())))
}

#[fuse]
fn sum_over_ranks(x: &Tensor) -> Result<Tensor> {
    Ok(all_reduce_sum(x))
}

struct Options {
    gpus: usize,
    ms: Vec<usize>,
    calls: usize,
    rounds: usize,
}

fn parse_args() -> std::result::Result<Options, String> {
    let mut o = Options { gpus: 2, ms: vec![1, 4, 16, 64, 256, 1024, 4096], calls: 20, rounds: 5 };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--gpus" => o.gpus = number(&value)?,
            "--ms" => o.ms = value.split(',').map(number).collect::<std::result::Result<_, _>>()?,
            "--calls" => o.calls = number(&value)?,
            "--rounds" => o.rounds = number(&value)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(o)
}

fn cuda_of(dev: &Device) -> Result<&fuse::CudaDevice> {
    match dev {
        Device::Cuda(gpu) => Ok(gpu),
        other => Err(Error::InvalidArgument { op: "bench_tp", reason: format!("a rank on {other}") }),
    }
}

/// `f` timed back to back on `rank`'s stream, us a call.
fn rank_time(rank: &Rank, o: &Options, f: impl FnMut() -> Result<()>) -> Result<f64> {
    timing::time(cuda_of(rank.device())?, o.rounds, o.calls, f)
}

/// The MLP at `m` rows: (1-GPU us, sharded us, all-reduce us), after checking every rank's output.
fn mlp_row(o: &Options, one: &Group, many: &Group, whole: &[Tensor; 3], m: usize) -> Result<(f64, f64, f64)> {
    let x = llama::bf16_tensor(&[m, HIDDEN], 7 + m as u64, 1.0, &Device::Cpu)?;
    let [wg, wu, wd] = whole;
    let (want, single) = one
        .run(|rank| {
            let dev = rank.device();
            let (x, wg, wu, wd) = (x.to_device(dev)?, wg.to_device(dev)?, wu.to_device(dev)?, wd.to_device(dev)?);
            let y = llama_mlp(&x, &wg, &wu, &wd)?.to_vec::<f32>()?;
            Ok((y, rank_time(rank, o, || llama_mlp(&x, &wg, &wu, &wd).map(drop))?))
        })?
        .remove(0);
    let ranks = many.run(|rank| {
        let dev = rank.device();
        let x = x.to_device(dev)?;
        let (g, u) = (rank.column_parallel(wg)?.to_device(dev)?, rank.column_parallel(wu)?.to_device(dev)?);
        let d = rank.row_parallel(wd)?.to_device(dev)?;
        let got = llama_mlp_parallel(&x, &g, &u, &d)?.to_vec::<f32>()?;
        let err = fuse::rel_l2_error(&got, &want);
        if err > 2.5e-2 {
            let reason = format!("M={m}: rank {} is {err:.2e} from the 1-GPU MLP", rank.index());
            return Err(Error::InvalidArgument { op: "bench_tp", reason });
        }
        let mlp = rank_time(rank, o, || llama_mlp_parallel(&x, &g, &u, &d).map(drop))?;
        let y = llama_mlp(&x, &g, &u, &d)?;
        Ok((mlp, rank_time(rank, o, || sum_over_ranks(&y).map(drop))?))
    })?;
    let slowest = |pick: fn(&(f64, f64)) -> f64| ranks.iter().map(pick).fold(0.0, f64::max);
    Ok((single, slowest(|r| r.0), slowest(|r| r.1)))
}

/// A Llama-3-8B-shaped model of one layer.
fn layer_config() -> Config {
    let mut c = Config::smollm2_135m();
    (c.hidden, c.intermediate, c.layers, c.vocab, c.context) = (4096, 14336, 1, 256, 1024);
    (c.heads, c.kv_heads, c.head_dim) = (32, 8, 128);
    c
}

/// A step of `batch` sequences, 128 cached, on `model` (a whole model or a rank's shard): us a step.
fn step_time(rank: &Rank, o: &Options, model: &Llama, batch: usize) -> Result<f64> {
    let fail = |e: fuse_models::Error| Error::InvalidArgument { op: "bench_tp", reason: e.to_string() };
    let cache: KvCache = model.new_batch_cache(batch, 256).map_err(fail)?;
    let inputs = StepInputs::new(batch, 1, rank.device()).map_err(fail)?;
    let ids: Vec<u32> = (0..batch as u32).map(|i| 3 + i).collect();
    inputs.set(&ids, 128).map_err(fail)?;
    rank_time(rank, o, || model.step(&inputs, &cache, Fusion::On).map(drop).map_err(fail))
}

fn main() -> Result<()> {
    let o = parse_args().map_err(|reason| Error::InvalidArgument { op: "bench_tp", reason })?;
    let ordinals: Vec<usize> = (0..o.gpus).collect();
    let (one, many) = (Group::cuda(&[0])?, Group::cuda(&ordinals)?);
    let whole = weights(&Device::Cpu)?;
    let bandwidth = one.run(|rank| timing::copy_bandwidth(rank.device(), cuda_of(rank.device())?))?[0];
    let weight_us = (3 * HIDDEN * INTER * 2) as f64 / bandwidth * 1e6;
    println!("Llama-3-8B MLP, bf16 ({HIDDEN} x {INTER}): 1 GPU against {} (us a call, the slowest rank's)", o.gpus);
    println!(
        "floors (weights over GPU 0's copy bandwidth, {:.0} GB/s): {weight_us:.1} us on 1 GPU, {:.1} a rank",
        bandwidth / 1e9,
        weight_us / o.gpus as f64
    );
    println!("{:>6} {:>10} {:>10} {:>8} {:>12} {:>10}", "M", "1 GPU", "sharded", "ratio", "all-reduce", "its share");
    for &m in &o.ms {
        let (single, sharded, reduce) = mlp_row(&o, &one, &many, &whole, m)?;
        println!(
            "{m:>6} {single:>10.1} {sharded:>10.1} {:>8.3} {reduce:>12.1} {:>9.1}%",
            sharded / single,
            100.0 * reduce / sharded
        );
    }
    let fail = |e: fuse_models::Error| Error::InvalidArgument { op: "bench_tp", reason: e.to_string() };
    let model = Llama::random(&layer_config(), &Device::Cpu, DType::BF16, 5).map_err(fail)?;
    println!("\nLlama-3-8B-shaped decoder layer (and a 256-word head), bf16, 128 cached: us a step");
    println!("{:>6} {:>10} {:>10} {:>8}", "batch", "1 GPU", "sharded", "ratio");
    for batch in [1, 16] {
        // The whole layer on one GPU (the same seed: the same weights), with no sum.
        let whole_model = |rank: &Rank| Llama::random(&layer_config(), rank.device(), DType::BF16, 5).map_err(fail);
        let single = one.run(|rank| step_time(rank, &o, &whole_model(rank)?, batch))?[0];
        let ranks = many.run(|rank| step_time(rank, &o, &model.shard(rank).map_err(fail)?, batch))?;
        let sharded = ranks.into_iter().fold(0.0, f64::max);
        println!("{batch:>6} {single:>10.1} {sharded:>10.1} {:>8.3}", sharded / single);
    }
    Ok(())
}
