//! The Llama-3-8B MLP (BENCHMARKS.md's shapes: hidden 4096, intermediate 14336, `[out, in]` weights read
//! through `.t()`, bf16 activations) with its weights as GGUF stores them, on the GPU: for each block type and
//! M, each path forced (every config of the quantized skinny template, which decodes the blocks as it
//! streams them, from 16 rows the mma template's, which decodes them into its tensor-core tiles, and cuBLAS
//! on a copy dequantized by the dequantize kernel) and the tuner's choice, beside the
//! same MLP on bf16 weights; L2 flushed before each timed run (as `triton.testing.do_bench` times the peers),
//! events around it, the median. The floor is the weights' bytes over the copy bandwidth (a 1 GiB
//! device-to-device copy). Random blocks (`fuse::ir::quant::random_blocks`): the time does not depend on the
//! values.
//!
//! Run: `cargo run --release --example bench_quant [-- --ms 1,4,16,64,512 --types Q4_K,Q6_K,Q4_0,Q8_0 --reps 20]`
//! (`--acts f32` for the activations decode runs; `--paths qskinny:r1c8` for one path, as under a profiler).

#[path = "common/llama.rs"]
mod llama;

use fuse::ir::codegen::{MMA_CONFIGS, QUANT_SKINNY_CONFIGS};
use fuse::ir::quant::random_blocks;
use fuse::prelude::*;
use fuse::CudaDevice;
use llama::{bf16_tensor, llama_mlp_fused, HIDDEN, INTER};

const WARMUP: usize = 3;
const FLUSH_BYTES: usize = 256_000_000;

struct Options {
    ms: Vec<usize>,
    types: Vec<DType>,
    reps: usize,
    /// The activations' dtype (decode runs f32 ones, prefill bf16).
    acts: DType,
    /// Only these paths (`tuned`, `qskinny:<config>`, `cublas`); all when empty. For a profiler's one kernel.
    paths: Vec<String>,
}

fn parse_args() -> std::result::Result<Options, String> {
    let mut o = Options {
        ms: vec![1, 4, 16, 64, 512],
        types: vec![DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q8_0],
        reps: 20,
        acts: DType::BF16,
        paths: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|_| format!("{flag}: `{v}` is not a positive integer"));
        match flag.as_str() {
            "--ms" => o.ms = value.split(',').map(num).collect::<std::result::Result<_, _>>()?,
            "--reps" => o.reps = num(&value)?.max(1),
            "--types" => {
                o.types = value
                    .split(',')
                    .map(|t| DType::parse(t).filter(|d| d.is_quantized()).ok_or(format!("--types: `{t}`")))
                    .collect::<std::result::Result<_, _>>()?
            }
            "--acts" => {
                o.acts = DType::parse(&value).filter(|d| d.is_float()).ok_or(format!("--acts: `{value}` is not a float dtype"))?
            }
            "--paths" => o.paths = value.split(',').map(str::to_string).collect(),
            _ => {
                return Err(format!(
                    "unknown flag {flag}; flags: --ms A,B --types Q4_K,Q8_0 --reps N --acts f32|bf16 --paths tuned,qskinny:r1c8,cublas"
                ))
            }
        }
    }
    Ok(o)
}

/// The median of `reps` runs of `work`, each after 256 MB written over L2, in ms.
fn flushed_ms(gpu: &CudaDevice, reps: usize, mut work: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..WARMUP {
        work()?;
    }
    let mut times = gpu.time_queued_ms(reps, || gpu.queue_l2_flush(FLUSH_BYTES), &mut work)?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Bytes per second of a 1 GiB device-to-device copy (read + write counted).
fn copy_bandwidth(dev: &Device, gpu: &CudaDevice) -> Result<f64> {
    let elements = (1usize << 30) / 4;
    let x = Tensor::from_vec(vec![1.0f32; elements], &[elements], dev)?;
    let ms = flushed_ms(gpu, 10, || x.to_cuda_slice().map(drop))?;
    Ok(2.0 * (elements * 4) as f64 / (ms * 1e-3))
}

/// A `[rows, cols]` weight of random `dtype` blocks on `dev`.
fn blocks(dtype: DType, rows: usize, cols: usize, seed: u64, dev: &Device) -> Result<Tensor> {
    let count = rows * cols / dtype.block().map_or(1, |b| b.elements);
    Tensor::from_blocks(dtype, &[rows, cols], random_blocks(dtype, count, seed), dev)
}

fn main() -> Result<()> {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench_quant: {e}");
            std::process::exit(2);
        }
    };
    let dev = Device::cuda(0)?;
    let Device::Cuda(gpu) = &dev else { return Ok(()) };
    let bandwidth = copy_bandwidth(&dev, gpu)?;
    let acts = o.acts.name();
    println!(
        "{dev} ({}): copy {:.2} TB/s; Llama-3-8B MLP, {acts} activations, L2 flushed",
        gpu.arch(),
        bandwidth / 1e12
    );
    println!("{:>5} {:>5} {:<16} {:>10} {:>10} {:>8}", "type", "M", "path", "us", "floor us", "floor/t");
    let f = llama_mlp_fused();
    let mut formats: Vec<Option<DType>> = vec![None];
    formats.extend(o.types.iter().copied().map(Some));
    for format in formats {
        let weights = match format {
            // Dense weights in the activations' dtype (a matmul takes one dtype): the baseline row.
            None => {
                let [gate, up, down] = llama::weights(&dev)?;
                [gate.to_dtype(o.acts)?, up.to_dtype(o.acts)?, down.to_dtype(o.acts)?]
            }
            Some(q) => [
                blocks(q, INTER, HIDDEN, 11, &dev)?,
                blocks(q, INTER, HIDDEN, 12, &dev)?,
                blocks(q, HIDDEN, INTER, 13, &dev)?,
            ],
        };
        let bytes: usize = weights.iter().map(|w| w.dtype().storage_bytes(w.numel()).unwrap_or(0)).sum();
        let name = format.map_or(acts.to_string(), |q| q.name().to_string());
        for &m in &o.ms {
            let x = bf16_tensor(&[m, HIDDEN], 7, 1.0, &dev)?.to_dtype(o.acts)?;
            let args = [fuse::arg(&x), fuse::arg(&weights[0]), fuse::arg(&weights[1]), fuse::arg(&weights[2])];
            let floor_us = (bytes + 2 * m * (HIDDEN + INTER)) as f64 / bandwidth * 1e6;
            let mut paths: Vec<Option<String>> = vec![None];
            if format.is_some() {
                paths.extend(
                    QUANT_SKINNY_CONFIGS.iter().filter(|_| m <= 64).map(|c| Some(format!("qskinny:{}", c.name))),
                );
                // The tensor-core template (blocks decoded into its tiles) for many rows.
                paths.extend(MMA_CONFIGS.iter().filter(|_| m >= 16).map(|c| Some(format!("mma:{}", c.name))));
                paths.push(Some("cublas".to_string()));
            }
            let wanted =
                |p: &Option<String>| o.paths.is_empty() || o.paths.contains(p.as_ref().unwrap_or(&"tuned".into()));
            for path in paths.into_iter().filter(wanted) {
                let run = || f.call_with(&args, Fusion::On).map(drop);
                let timed = match &path {
                    None => flushed_ms(gpu, o.reps, run),
                    Some(p) => fuse::tune::with_gemm_choice(p, || flushed_ms(gpu, o.reps, run)),
                };
                let label = path.clone().unwrap_or_else(|| "tuned".into());
                match timed {
                    Ok(ms) => println!(
                        "{name:>5} {m:>5} {label:<16} {:>10.1} {floor_us:>10.1} {:>8.2}",
                        ms * 1e3,
                        floor_us / (ms * 1e3)
                    ),
                    Err(e) => println!("{name:>5} {m:>5} {label:<16} failed: {e}"),
                }
            }
        }
    }
    Ok(())
}
