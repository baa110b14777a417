//! Pre-tunes the Llama-3-8B MLP (hidden 4096, intermediate 14336, bf16, [out, in] weights) for a list of
//! row counts and writes the results file, to ship with a model: on a machine with the same GPU, driver,
//! NVRTC and fuse, `FUSE_TUNE_FILE=<file>` then starts with every GEMM path already chosen (no timing at
//! start-up, also with `FUSE_AUTOTUNE=off`).
//!
//! Run: `cargo run --release --example tune_mlp -- --out tune.tsv [--ms 1,4,16,64,256,1024,4096] [--mode full|fast]`

use fuse::prelude::*;
use fuse::tune::AutotuneMode;
use std::time::Instant;

const HIDDEN: usize = 4096;
const INTER: usize = 14336;

#[fuse]
fn llama_mlp(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(&w_gate.t())) * x.matmul(&w_up.t());
    Ok(h.matmul(&w_down.t()))
}

struct Options {
    out: String,
    ms: Vec<usize>,
    mode: AutotuneMode,
}

fn parse_args() -> std::result::Result<Options, String> {
    let mut o = Options { out: String::new(), ms: vec![1, 4, 16, 64, 256, 1024, 4096], mode: AutotuneMode::Full };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--out" => o.out = value,
            "--ms" => {
                o.ms = value
                    .split(',')
                    .map(|v| v.parse::<usize>().ok().filter(|&m| m > 0).ok_or(format!("--ms: `{v}` is not a positive integer")))
                    .collect::<std::result::Result<_, _>>()?
            }
            "--mode" => {
                o.mode = match value.as_str() {
                    "full" => AutotuneMode::Full,
                    "fast" => AutotuneMode::Fast,
                    _ => return Err(format!("--mode: `{value}` is not full or fast")),
                }
            }
            _ => return Err(format!("unknown flag {flag}; flags: --out FILE --ms A,B --mode full|fast")),
        }
    }
    if o.out.is_empty() {
        return Err("--out FILE is required".into());
    }
    Ok(o)
}

/// Uniform-ish values in [-scale, scale) from a cheap hash (the tuner needs real data, not zeros).
fn bf16_tensor(shape: &[usize], seed: u64, scale: f32, dev: &Device) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n as u64)
        .map(|i| {
            let h = (i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            ((h >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect();
    Tensor::from_vec(data, shape, dev)?.to_dtype(DType::BF16)
}

fn main() -> Result<()> {
    let opts = parse_args().unwrap_or_else(|e| {
        eprintln!("tune_mlp: {e}");
        std::process::exit(2);
    });
    let dev = Device::cuda(0)?;
    fuse::tune::set_tune_file(&opts.out);
    fuse::tune::set_mode(opts.mode);
    let w_gate = bf16_tensor(&[INTER, HIDDEN], 11, 0.02, &dev)?;
    let w_up = bf16_tensor(&[INTER, HIDDEN], 12, 0.02, &dev)?;
    let w_down = bf16_tensor(&[HIDDEN, INTER], 13, 0.02, &dev)?;
    let start = Instant::now();
    for &m in &opts.ms {
        let x = bf16_tensor(&[m, HIDDEN], 100 + m as u64, 1.0, &dev)?;
        let t = Instant::now();
        llama_mlp(&x, &w_gate, &w_up, &w_down)?;
        dev.synchronize()?;
        println!("M={m:>5}: tuned in {:.2} s", t.elapsed().as_secs_f64());
    }
    println!("tuned {} row counts in {:.1} s; results in {}:", opts.ms.len(), start.elapsed().as_secs_f64(), opts.out);
    for e in fuse::tune::results().iter().filter(|e| e.group.starts_with("llama_mlp#")) {
        println!("  rows <= {:>5}  {}  ->  {} ({:.1} us)", e.rows_bucket, e.group, e.choice, e.micros);
    }
    Ok(())
}
