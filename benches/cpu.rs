//! CPU benchmark: fused against unfused plans from the same binary.
//!
//! `cargo bench --bench cpu` prints a table; under `cargo test` (no `--bench` flag) every workload runs once
//! at a tiny size as a smoke test, so the benchmark cannot rot.

#[path = "../tests/common/fused_fns.rs"]
mod fused_fns;
use fused_fns::{chain10_fused, ffn_block_fused, llama_mlp_fused};

use fuse::prelude::*;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::time::{Duration, Instant};

fn random(rng: &mut SmallRng, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let n = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    Tensor::from_vec(data, shape, &Device::Cpu)?.to_dtype(dtype)
}

fn median_time(reps: usize, mut f: impl FnMut() -> Result<Vec<Tensor>>) -> Result<Duration> {
    f()?;
    let mut t: Vec<Duration> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f().map(|_| s.elapsed())
        })
        .collect::<Result<_>>()?;
    t.sort();
    Ok(t[t.len() / 2])
}

struct Row {
    name: String,
    fused: Duration,
    unfused: Duration,
}

fn measure(name: String, f: &FusedFn, args: &[fuse::Arg<'_>], reps: usize) -> Result<Row> {
    // The two plans must agree before their times mean anything.
    let a: Vec<f32> = f.call_with(args, Fusion::On)?[0].to_vec()?;
    let b: Vec<f32> = f.call_with(args, Fusion::Off)?[0].to_vec()?;
    let err = fuse::rel_l2_error(&a, &b);
    assert!(err < 2e-2, "{name}: fused and unfused differ by {err:.3e}");
    let fused = median_time(reps, || f.call_with(args, Fusion::On))?;
    let unfused = median_time(reps, || f.call_with(args, Fusion::Off))?;
    Ok(Row { name, fused, unfused })
}

fn main() -> Result<()> {
    let bench = std::env::args().any(|a| a == "--bench");
    let (hidden, inter, batches, chain_shape, reps) =
        if bench { (1024, 3584, vec![1, 16, 64], [1024, 4096], 15) } else { (16, 40, vec![3], [17, 33], 1) };
    let mut rng = SmallRng::seed_from_u64(7);
    let mut rows = Vec::new();
    let bf = DType::BF16;
    let (wg, wu, wd) = (
        random(&mut rng, &[inter, hidden], bf)?,
        random(&mut rng, &[inter, hidden], bf)?,
        random(&mut rng, &[hidden, inter], bf)?,
    );
    let norm = random(&mut rng, &[hidden], bf)?;
    for &m in &batches {
        let x = random(&mut rng, &[m, hidden], bf)?;
        let args = [fuse::arg(&x), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd)];
        rows.push(measure(format!("mlp {hidden}/{inter} bf16, M={m}"), llama_mlp_fused(), &args, reps)?);
        let eps = 1e-5f32;
        let args = [fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd), fuse::arg(&eps)];
        rows.push(measure(format!("rms_norm+mlp+residual bf16, M={m}"), ffn_block_fused(), &args, reps)?);
    }
    let x = random(&mut rng, &chain_shape, DType::F32)?;
    let bias = random(&mut rng, &chain_shape[1..], DType::F32)?;
    let s = 0.75f32;
    let args = [fuse::arg(&x), fuse::arg(&bias), fuse::arg(&s)];
    rows.push(measure(format!("10-op pointwise chain f32 {chain_shape:?}"), chain10_fused(), &args, reps)?);

    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("CPU, {threads} threads, median of {reps}{}", if bench { "" } else { " (smoke test: tiny sizes)" });
    println!("{:<44} {:>12} {:>12} {:>8}", "workload", "fused", "unfused", "speedup");
    for r in rows {
        let speedup = r.unfused.as_secs_f64() / r.fused.as_secs_f64();
        println!(
            "{:<44} {:>12} {:>12} {:>7.2}x",
            r.name,
            format!("{:.2?}", r.fused),
            format!("{:.2?}", r.unfused),
            speedup
        );
    }
    Ok(())
}
