//! The main job: the Llama-3-8B MLP (hidden 4096, intermediate 14336, bf16 weights in checkpoint [out, in]
//! layout) at batch 1 and 16 on the best device available, checked against the reference interpreter on a
//! few rows, with its plan and the time of the fused plan against the unfused one.
//!
//! Run: `cargo run --release --example llama_mlp [-- --hidden 4096 --inter 14336 --batches 1,16 --reps 5]`

// Its hash-filled weights and fixed sizes serve the benchmarks; this job draws its own at any size.
#[allow(dead_code)]
#[path = "common/llama.rs"]
mod llama;

use fuse::prelude::*;
use llama::{llama_mlp, llama_mlp_fused};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::time::{Duration, Instant};

struct Options {
    hidden: usize,
    inter: usize,
    batches: Vec<usize>,
    reps: usize,
}

fn parse_args() -> std::result::Result<Options, String> {
    let mut o = Options { hidden: 4096, inter: 14336, batches: vec![1, 16], reps: 5 };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|_| format!("{flag}: `{v}` is not a positive integer"));
        match flag.as_str() {
            "--hidden" => o.hidden = num(&value)?,
            "--inter" => o.inter = num(&value)?,
            "--reps" => o.reps = num(&value)?.max(1),
            "--batches" => o.batches = value.split(',').map(num).collect::<std::result::Result<_, _>>()?,
            _ => return Err(format!("unknown flag {flag}; flags: --hidden N --inter N --batches A,B --reps N")),
        }
    }
    Ok(o)
}

/// Uniform in [-scale, scale), seeded: never zeros, the magnitudes of an initialised checkpoint.
fn random_bf16(rng: &mut SmallRng, shape: &[usize], scale: f32, dev: &Device) -> Result<Tensor> {
    let n = shape.iter().product();
    let data: Vec<half::bf16> = (0..n).map(|_| half::bf16::from_f32(rng.gen_range(-scale..scale))).collect();
    Tensor::from_vec(data, shape, dev)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Wall time of one call until its result is ready (GPU work is asynchronous: wait for the device).
fn time_calls(reps: usize, dev: &Device, mut f: impl FnMut() -> Result<Tensor>) -> Result<Duration> {
    f()?; // warm-up: first-call work (plans, kernels, f32 shadows of the weights) stays out of the numbers
    dev.synchronize()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        dev.synchronize()?;
        times.push(t.elapsed());
    }
    Ok(median(times))
}

fn main() -> Result<()> {
    let opts = parse_args().unwrap_or_else(|e| {
        eprintln!("llama_mlp: {e}");
        std::process::exit(2)
    });
    let dev = Device::cuda_if_available(0);
    let (h, i) = (opts.hidden, opts.inter);
    println!("llama_mlp: hidden {h}, intermediate {i}, bf16, device {dev:?}, {} threads", rayon_threads());
    let mut rng = SmallRng::seed_from_u64(0x11a3a);
    let started = Instant::now();
    let w_gate = random_bf16(&mut rng, &[i, h], 1.0 / (h as f32).sqrt(), &dev)?;
    let w_up = random_bf16(&mut rng, &[i, h], 1.0 / (h as f32).sqrt(), &dev)?;
    let w_down = random_bf16(&mut rng, &[h, i], 1.0 / (i as f32).sqrt(), &dev)?;
    println!("weights: {:.1} MB, made in {:.1?}", 3.0 * (h * i * 2) as f64 / 1e6, started.elapsed());

    let f = llama_mlp_fused();
    let mut table =
        vec![format!("{:>6} {:>12} {:>12} {:>8} {:>14}", "batch", "fused", "unfused", "speedup", "rel err (ref)")];
    for (k, &m) in opts.batches.iter().enumerate() {
        let x = random_bf16(&mut rng, &[m, h], 1.0, &dev)?;
        let args = [fuse::arg(&x), fuse::arg(&w_gate), fuse::arg(&w_up), fuse::arg(&w_down)];
        if k == 0 {
            println!("\nthe plan (batch {m}):\n{}", f.explain(&args)?);
        }
        let first = Instant::now();
        let y = llama_mlp(&x, &w_gate, &w_up, &w_down)?;
        dev.synchronize()?;
        if k == 0 {
            // Start-up: plans, kernel compilation (or the on-disk cache), weight preparation, the run itself.
            println!("first call (batch {m}): {:.1?}", first.elapsed());
        }
        let err = check_rows(&x, &y, &w_gate, &w_up, &w_down)?;
        let fused = time_calls(opts.reps, &dev, || llama_mlp(&x, &w_gate, &w_up, &w_down))?;
        let unfused = time_calls(opts.reps, &dev, || Ok(f.call_with(&args, Fusion::Off)?.remove(0)))?;
        table.push(format!(
            "{m:>6} {:>12} {:>12} {:>7.2}x {:>14.2e}",
            format!("{fused:.2?}"),
            format!("{unfused:.2?}"),
            unfused.as_secs_f64() / fused.as_secs_f64(),
            err
        ));
        println!("{}", table.last().map(String::as_str).unwrap_or_default());
        if err > 2e-2 {
            eprintln!("llama_mlp: batch {m}: relative error {err:.3e} against the reference exceeds 2e-2 (bf16)");
            std::process::exit(1);
        }
    }
    println!("\n{}", table.join("\n"));
    println!("\ntotal {:.1?} (fused and unfused: medians of {} calls after a warm-up)", started.elapsed(), opts.reps);
    Ok(())
}

/// Relative L2 error of up to three rows of `y` (first, middle, last) against the reference interpreter (f64).
fn check_rows(x: &Tensor, y: &Tensor, wg: &Tensor, wu: &Tensor, wd: &Tensor) -> Result<f64> {
    let m = x.shape()[0];
    let mut rows = vec![0, m / 2, m - 1];
    rows.dedup();
    let h = x.shape()[1];
    let xs: Vec<half::bf16> = x.to_vec()?;
    let ys: Vec<f32> = y.to_vec()?;
    let picked: Vec<half::bf16> = rows.iter().flat_map(|&r| xs[r * h..(r + 1) * h].iter().copied()).collect();
    let x_rows = Tensor::from_vec(picked, &[rows.len(), h], x.device())?;
    let reference =
        fuse::reference(llama_mlp_fused(), &[fuse::arg(&x_rows), fuse::arg(wg), fuse::arg(wu), fuse::arg(wd)])?;
    let want: Vec<f32> = reference[0].to_vec()?;
    let n = y.shape()[1];
    let got: Vec<f32> = rows.iter().flat_map(|&r| ys[r * n..(r + 1) * n].iter().copied()).collect();
    Ok(fuse::rel_l2_error(&got, &want))
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
