//! The Llama-3-8B MLP (hidden 4096, intermediate 14336, bf16, checkpoint [out, in] weights read through
//! `.t()`) on the GPU at M in {1, 4, 16, 64, 256, 1024, 4096}, fused against unfused, timed with CUDA
//! events three ways: per call (events around each call, median of 50 after warm-up: the GPU idles while
//! the host queues the call) and back to back (events around 50 calls in a row, divided by 50, median of
//! 5: how a serving loop sees it, host work hidden behind the GPU's), and as the PyTorch peers are timed
//! (`triton.testing.do_bench`: runs queued without waits, 256 MB of zeros written before each to evict L2,
//! events around each run), beside the floors of this GPU: bytes
//! over copy bandwidth (from a 1 GiB device-to-device copy) and FLOPs over the cuBLAS bf16 rate (an
//! 8192^3 product). The host column is the host time to queue one fused call. The first fused call of
//! each M is timed apart (it tunes the GEMM paths of that rows bucket, see `fuse::tune`), and the paths
//! the tuner chose are printed. A second table times the fused MLP with each GEMM path forced (cuBLAS,
//! each skinny config) at the M where the skinny template applies, to show each path's own rate. A third
//! times the FFN block (rms_norm in front, the residual after) beside the MLP alone at those M.
//!
//! With `--overlap-ab`, a last table times programmatic dependent launch on against off (see
//! `CudaDevice::set_launch_overlap`), alternated in one process.
//!
//! Run: `cargo run --release --example bench_mlp [-- --ms 1,16 --reps 50 --paths-max-m 256 --json FILE --overlap-ab]`

#[path = "common/llama.rs"]
mod llama;

use fuse::prelude::*;
use fuse::CudaDevice;
use llama::{bf16_tensor, llama_mlp_fused, HIDDEN, INTER};
use std::fmt::Write as _;

/// One transformer FFN block: rms_norm in front, the residual after (BENCHMARKS.md, with the MLP). Fused,
/// rms_norm is the dual GEMM's prologue, which the skinny template runs as it loads x.
#[fuse]
fn ffn_block(x: &Tensor, norm: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor, eps: f32) -> Result<Tensor> {
    let h = rms_norm(x, norm, eps);
    Ok(x + (silu(h.matmul(&w_gate.t())) * h.matmul(&w_up.t())).matmul(&w_down.t()))
}

const WARMUP: usize = 5;
const BACK_TO_BACK_ROUNDS: usize = 5;
/// What `do_bench` zeroes before each run: `torch.empty(int(256e6 // 4), dtype=torch.int)`.
const FLUSH_BYTES: usize = 256_000_000;

struct Options {
    ms: Vec<usize>,
    reps: usize,
    json: Option<String>,
    /// The per-path table covers the M up to this.
    paths_max_m: usize,
    /// Also time programmatic dependent launch on against off, alternated in this process.
    overlap_ab: bool,
}

fn parse_args() -> std::result::Result<Options, String> {
    let mut o =
        Options { ms: vec![1, 4, 16, 64, 256, 1024, 4096], reps: 50, json: None, paths_max_m: 256, overlap_ab: false };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--overlap-ab" {
            o.overlap_ab = true;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|_| format!("{flag}: `{v}` is not a positive integer"));
        match flag.as_str() {
            "--ms" => o.ms = value.split(',').map(num).collect::<std::result::Result<_, _>>()?,
            "--reps" => o.reps = num(&value)?.max(1),
            "--json" => o.json = Some(value),
            "--paths-max-m" => o.paths_max_m = num(&value)?,
            _ => {
                return Err(format!(
                    "unknown flag {flag}; flags: --ms A,B --reps N --paths-max-m M --json FILE --overlap-ab"
                ))
            }
        }
    }
    Ok(o)
}

/// Times `work` with CUDA events on the device's stream: the median of `reps` runs after warm-up, in ms.
fn time_ms(gpu: &CudaDevice, reps: usize, mut work: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..WARMUP {
        work()?;
    }
    let mut times = (0..reps).map(|_| gpu.time_ms(&mut work)).collect::<Result<Vec<f64>>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Times `work` as the peers' `triton.testing.do_bench` does: warm-up, then `reps` runs queued with no wait
/// between them, each after zeros are written over 256 MB (evicting L2), events around each run; the median,
/// in ms.
fn flushed_ms(gpu: &CudaDevice, reps: usize, mut work: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..WARMUP {
        work()?;
    }
    let mut times = gpu.time_queued_ms(reps, || gpu.queue_l2_flush(FLUSH_BYTES), &mut work)?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Milliseconds per call of `reps` calls queued back to back between two events (median of
/// `BACK_TO_BACK_ROUNDS` such runs, after warm-up).
fn back_to_back_ms(gpu: &CudaDevice, reps: usize, mut work: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..WARMUP {
        work()?;
    }
    let mut times = (0..BACK_TO_BACK_ROUNDS)
        .map(|_| {
            gpu.time_ms(|| {
                for _ in 0..reps {
                    work()?;
                }
                Ok(())
            })
        })
        .collect::<Result<Vec<f64>>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2] / reps as f64)
}

/// Host microseconds to queue one call (median of `reps`; the GPU is idle between them): when this
/// approaches the GPU time, the host, not the GPU, sets the pace.
fn host_us(gpu: &CudaDevice, reps: usize, mut work: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        gpu.synchronize()?;
        let start = std::time::Instant::now();
        work()?;
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Bytes per second of a 1 GiB device-to-device copy (read + write counted).
fn copy_bandwidth(dev: &Device, gpu: &CudaDevice, reps: usize) -> Result<f64> {
    let elements = (1usize << 30) / 4;
    let x = Tensor::from_vec(vec![1.0f32; elements], &[elements], dev)?;
    let ms = time_ms(gpu, reps, || x.to_cuda_slice().map(drop))?;
    Ok(2.0 * (elements * 4) as f64 / (ms * 1e-3))
}

/// FLOP per second of an 8192^3 bf16 product through fuse's cuBLAS path.
fn matmul_rate(dev: &Device, gpu: &CudaDevice, reps: usize) -> Result<f64> {
    let n = 8192;
    let a = bf16_tensor(&[n, n], 1, 1.0, dev)?;
    let b = bf16_tensor(&[n, n], 2, 1.0, dev)?;
    let ms = time_ms(gpu, reps, || a.matmul(&b).map(drop))?;
    Ok(2.0 * (n as f64).powi(3) / (ms * 1e-3))
}

/// One measured M.
struct Row {
    m: usize,
    fused: f64,
    unfused: f64,
    fused_back_to_back: f64,
    unfused_back_to_back: f64,
    /// As the peers are timed (`flushed_ms`).
    fused_flushed: f64,
    unfused_flushed: f64,
    floor: f64,
    host_us: f64,
    /// Relative L2 distance of the fused result from the unfused one (both from repeated calls).
    fused_vs_unfused: f64,
    /// Wall time of the first fused call at this M (tuning this rows bucket, compiling what it needs).
    first_call_ms: f64,
    /// The GEMM path per group the tuner chose for this rows bucket (`group=path`).
    paths: String,
    /// (path, (ms per call, ms as the peers are timed)) with that path forced on every GEMM group.
    forced: Vec<(String, (f64, f64))>,
}

/// What `fuse::tune` chose for `function`'s groups at `m` rows, as `#0=skinny:.. #1=cublas`.
fn chosen_paths(function: &str, m: usize) -> String {
    let bucket = m.next_power_of_two();
    let prefix = format!("{function}#");
    let mut out: Vec<String> = fuse::tune::results()
        .into_iter()
        .filter(|e| e.group.starts_with(&prefix) && e.rows_bucket == bucket)
        .map(|e| format!("#{}={}", e.group.trim_start_matches(&prefix).split(':').next().unwrap_or("?"), e.choice))
        .collect();
    out.sort();
    out.dedup();
    if out.is_empty() {
        "-".into()
    } else {
        out.join(" ")
    }
}

/// The results as one JSON object (written by hand: the example needs no serialisation crate).
fn to_json(dev: &Device, gpu: &CudaDevice, bandwidth: f64, rate: f64, reps: usize, rows: &[Row]) -> String {
    let mut json = String::from("{");
    let _ = write!(json, "\"device\": \"{dev}\", \"arch\": \"{}\", ", gpu.arch());
    let _ = write!(json, "\"copy_bytes_per_s\": {bandwidth:.6e}, \"matmul_flop_per_s\": {rate:.6e}, ");
    let _ =
        write!(json, "\"hidden\": {HIDDEN}, \"inter\": {INTER}, \"dtype\": \"bf16\", \"reps\": {reps}, \"rows\": [");
    for (i, r) in rows.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(json, "{sep}{{\"m\": {}, \"fused_ms\": {:.6}, \"unfused_ms\": {:.6}, ", r.m, r.fused, r.unfused);
        let _ = write!(json, "\"fused_back_to_back_ms\": {:.6}, ", r.fused_back_to_back);
        let _ = write!(json, "\"unfused_back_to_back_ms\": {:.6}, ", r.unfused_back_to_back);
        let _ = write!(
            json,
            "\"fused_flushed_ms\": {:.6}, \"unfused_flushed_ms\": {:.6}, ",
            r.fused_flushed, r.unfused_flushed
        );
        let _ = write!(json, "\"floor_ms\": {:.6}, \"host_us\": {:.2}, ", r.floor, r.host_us);
        let _ = write!(json, "\"first_call_ms\": {:.3}, \"paths\": \"{}\", ", r.first_call_ms, r.paths);
        let forced: Vec<String> = r.forced.iter().map(|(p, (ms, _))| format!("\"{p}\": {ms:.6}")).collect();
        let _ = write!(json, "\"forced_path_ms\": {{{}}}, ", forced.join(", "));
        let flushed: Vec<String> = r.forced.iter().map(|(p, (_, ms))| format!("\"{p}\": {ms:.6}")).collect();
        let _ = write!(json, "\"forced_path_flushed_ms\": {{{}}}, ", flushed.join(", "));
        let _ = write!(json, "\"fused_vs_unfused_rel_l2\": {:.3e}}}", r.fused_vs_unfused);
    }
    json.push_str("]}\n");
    json
}

/// The FFN block at the M up to `--paths-max-m`, beside the MLP alone from the same run: what rms_norm and
/// the residual add on top of the MLP.
fn ffn_table(dev: &Device, gpu: &CudaDevice, opts: &Options, rows: &[Row], [wg, wu, wd]: [&Tensor; 3]) -> Result<()> {
    let f = ffn_block_fused();
    let norm = bf16_tensor(&[HIDDEN], 14, 1.0, dev)?;
    println!("\nFFN block (rms_norm -> MLP -> + x), ms per call / back to back, beside the MLP alone:");
    println!(
        "{:>6} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  tuned paths",
        "M", "ffn fused", "ffn b2b", "ffn unfused", "mlp fused", "mlp b2b", "ffn - mlp"
    );
    for r in rows.iter().filter(|r| r.m <= opts.paths_max_m) {
        let x = bf16_tensor(&[r.m, HIDDEN], 200 + r.m as u64, 1.0, dev)?;
        let args = [fuse::arg(&x), fuse::arg(&norm), fuse::arg(wg), fuse::arg(wu), fuse::arg(wd), fuse::arg(&1e-5f32)];
        f.call_with(&args, Fusion::On)?;
        let fused = time_ms(gpu, opts.reps, || f.call_with(&args, Fusion::On).map(drop))?;
        let b2b = back_to_back_ms(gpu, opts.reps, || f.call_with(&args, Fusion::On).map(drop))?;
        let unfused = time_ms(gpu, opts.reps, || f.call_with(&args, Fusion::Off).map(drop))?;
        let diff = b2b - r.fused_back_to_back;
        let paths = chosen_paths("ffn_block", r.m);
        println!(
            "{:>6} {fused:>11.4} {b2b:>11.4} {unfused:>11.4} {:>11.4} {:>11.4} {diff:>11.4}  {paths}",
            r.m, r.fused, r.fused_back_to_back
        );
    }
    Ok(())
}

/// The fused MLP with programmatic dependent launch on and off, alternated (`OVERLAP_ROUNDS` rounds of
/// each) so that clock and thermal drift fall on both alike: back to back and as the peers are timed,
/// the median of the rounds.
fn overlap_table(dev: &Device, gpu: &CudaDevice, opts: &Options, [wg, wu, wd]: [&Tensor; 3]) -> Result<()> {
    const OVERLAP_ROUNDS: usize = 3;
    let initial = gpu.overlaps_launches();
    println!("\nprogrammatic dependent launch on / off (ms, median of {OVERLAP_ROUNDS} alternated rounds):");
    println!("{:>6} {:>11} {:>11} {:>11} {:>11}", "M", "b2b on", "b2b off", "flushed on", "flushed off");
    let f = llama_mlp_fused();
    for &m in &opts.ms {
        let x = bf16_tensor(&[m, HIDDEN], 100 + m as u64, 1.0, dev)?;
        let args = [fuse::arg(&x), fuse::arg(wg), fuse::arg(wu), fuse::arg(wd)];
        let mut times = [[0.0; OVERLAP_ROUNDS]; 4];
        for round in 0..OVERLAP_ROUNDS {
            for (j, on) in [true, false].into_iter().enumerate() {
                gpu.set_launch_overlap(on);
                times[j][round] = back_to_back_ms(gpu, opts.reps, || f.call_with(&args, Fusion::On).map(drop))?;
                times[2 + j][round] = flushed_ms(gpu, opts.reps, || f.call_with(&args, Fusion::On).map(drop))?;
            }
        }
        let median = |mut v: [f64; OVERLAP_ROUNDS]| {
            v.sort_by(f64::total_cmp);
            v[OVERLAP_ROUNDS / 2]
        };
        let [a, b, c, d] = times.map(median);
        println!("{m:>6} {a:>11.4} {b:>11.4} {c:>11.4} {d:>11.4}");
    }
    gpu.set_launch_overlap(initial);
    Ok(())
}

fn main() -> Result<()> {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench_mlp: {e}");
            std::process::exit(2);
        }
    };
    let dev = Device::cuda(0)?;
    let Device::Cuda(gpu) = &dev else { return Ok(()) };
    let bandwidth = copy_bandwidth(&dev, gpu, 20)?;
    let rate = matmul_rate(&dev, gpu, 20)?;
    println!("{dev} ({}): copy {:.2} TB/s, cuBLAS bf16 {:.0} TFLOP/s", gpu.arch(), bandwidth / 1e12, rate / 1e12);

    let [w_gate, w_up, w_down] = llama::weights(&dev)?;
    let f = llama_mlp_fused();
    println!(
        "{:>6} {:>11} {:>11} {:>11} {:>11} {:>11} {:>8} {:>9} {:>13} {:>10}",
        "M",
        "fused ms",
        "unfused ms",
        "fused b2b",
        "unfused b2b",
        "floor ms",
        "speedup",
        "of floor",
        "host us/call",
        "rel diff"
    );
    let mut rows: Vec<Row> = Vec::new();
    for &m in &opts.ms {
        let x = bf16_tensor(&[m, HIDDEN], 100 + m as u64, 1.0, &dev)?;
        let args = [fuse::arg(&x), fuse::arg(&w_gate), fuse::arg(&w_up), fuse::arg(&w_down)];
        let start = std::time::Instant::now();
        f.call_with(&args, Fusion::On)?;
        gpu.synchronize()?;
        let first_call_ms = start.elapsed().as_secs_f64() * 1e3;
        let fused = time_ms(gpu, opts.reps, || f.call_with(&args, Fusion::On).map(drop))?;
        let unfused = time_ms(gpu, opts.reps, || f.call_with(&args, Fusion::Off).map(drop))?;
        let fused_b2b = back_to_back_ms(gpu, opts.reps, || f.call_with(&args, Fusion::On).map(drop))?;
        let unfused_b2b = back_to_back_ms(gpu, opts.reps, || f.call_with(&args, Fusion::Off).map(drop))?;
        let host = host_us(gpu, opts.reps, || f.call_with(&args, Fusion::On).map(drop))?;
        let fused_flushed = flushed_ms(gpu, opts.reps, || f.call_with(&args, Fusion::On).map(drop))?;
        let unfused_flushed = flushed_ms(gpu, opts.reps, || f.call_with(&args, Fusion::Off).map(drop))?;
        let result = |fusion| -> Result<Vec<f32>> { f.call_with(&args, fusion)?[0].to_vec::<f32>() };
        let fused_vs_unfused = fuse::rel_l2_error(&result(Fusion::On)?, &result(Fusion::Off)?);
        let bytes = 2.0 * (3 * HIDDEN * INTER + 2 * m * HIDDEN) as f64;
        let flops = 2.0 * 3.0 * (m * HIDDEN * INTER) as f64;
        let floor = (bytes / bandwidth).max(flops / rate) * 1e3;
        println!(
            "{m:>6} {fused:>11.4} {unfused:>11.4} {fused_b2b:>11.4} {unfused_b2b:>11.4} {floor:>11.4} {:>7.2}x {:>8.0}% {host:>13.1} {fused_vs_unfused:>10.2e}",
            unfused / fused,
            floor / fused * 100.0
        );
        let mut forced = Vec::new();
        if m <= opts.paths_max_m {
            let paths = std::iter::once("cublas".to_string())
                .chain(fuse::ir::codegen::SKINNY_CONFIGS.iter().map(|c| format!("skinny:{}", c.name)))
                .chain(
                    fuse::ir::codegen::WGMMA_CONFIGS
                        .iter()
                        .filter(|c| c.supports(true))
                        .map(|c| format!("wgmma:{}", c.name)),
                )
                .chain(
                    fuse::ir::codegen::MMA_CONFIGS
                        .iter()
                        .filter(|c| c.supports(true))
                        .map(|c| format!("mma:{}", c.name)),
                );
            for path in paths {
                let timed = fuse::tune::with_gemm_choice(&path, || {
                    let per_call = time_ms(gpu, opts.reps.min(20), || f.call_with(&args, Fusion::On).map(drop))?;
                    let flushed = flushed_ms(gpu, opts.reps.min(20), || f.call_with(&args, Fusion::On).map(drop))?;
                    Ok::<_, fuse::Error>((per_call, flushed))
                });
                match timed {
                    Ok(ms) => forced.push((path, ms)),
                    Err(e) => eprintln!("bench_mlp: M={m} with {path} forced: {e}"),
                }
            }
        }
        rows.push(Row {
            first_call_ms,
            paths: chosen_paths("llama_mlp", m),
            forced,
            m,
            fused,
            unfused,
            fused_back_to_back: fused_b2b,
            unfused_back_to_back: unfused_b2b,
            fused_flushed,
            unfused_flushed,
            floor,
            host_us: host,
            fused_vs_unfused,
        });
    }
    println!("\ntimed as the peers are (do_bench: runs queued without waits, 256 MB of zeros written before each, events around it):");
    println!("{:>6} {:>11} {:>11} {:>8} {:>9}", "M", "fused ms", "unfused ms", "speedup", "of floor");
    for r in &rows {
        let (f, u) = (r.fused_flushed, r.unfused_flushed);
        println!("{:>6} {f:>11.4} {u:>11.4} {:>7.2}x {:>8.0}%", r.m, u / f, r.floor / f * 100.0);
    }
    println!("\n{:>6} {:>10}  tuned GEMM path per group", "M", "1st call");
    for r in &rows {
        println!("{:>6} {:>8.0}ms  {}", r.m, r.first_call_ms, r.paths);
    }
    println!("\nfused MLP with one GEMM path forced (ms per call / as the peers are timed; no launch-plan replay):");
    for r in rows.iter().filter(|r| !r.forced.is_empty()) {
        let cells: Vec<String> = r.forced.iter().map(|(p, (ms, fl))| format!("{p} {ms:.4}/{fl:.4}")).collect();
        println!("{:>6}  {}", r.m, cells.join("  "));
    }
    ffn_table(&dev, gpu, &opts, &rows, [&w_gate, &w_up, &w_down])?;
    if opts.overlap_ab {
        overlap_table(&dev, gpu, &opts, [&w_gate, &w_up, &w_down])?;
    }
    if let Some(path) = &opts.json {
        let json = to_json(&dev, gpu, bandwidth, rate, opts.reps, &rows);
        if let Err(e) = std::fs::write(path, json) {
            eprintln!("bench_mlp: cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
    Ok(())
}
