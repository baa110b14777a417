//! Pre-tunes the Llama-3-8B MLP (hidden 4096, intermediate 14336, bf16, [out, in] weights) for a list of
//! row counts and writes the results file, to ship with a model: on a machine with the same GPU, driver,
//! NVRTC and fuse, `FUSE_TUNE_FILE=<file>` then starts with every GEMM path already chosen (no timing at
//! start-up, also with `FUSE_AUTOTUNE=off`).
//!
//! Run: `cargo run --release --example tune_mlp -- --out tune.tsv [--ms 1,4,16,64,256,1024,4096] [--mode full|fast]`

#[path = "common/llama.rs"]
mod llama;

use fuse::prelude::*;
use fuse::tune::AutotuneMode;
use llama::{bf16_tensor, llama_mlp, HIDDEN};
use std::time::Instant;

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
                    .map(|v| {
                        v.parse::<usize>()
                            .ok()
                            .filter(|&m| m > 0)
                            .ok_or(format!("--ms: `{v}` is not a positive integer"))
                    })
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

fn main() -> Result<()> {
    let opts = parse_args().unwrap_or_else(|e| {
        eprintln!("tune_mlp: {e}");
        std::process::exit(2);
    });
    let dev = Device::cuda(0)?;
    fuse::tune::set_tune_file(&opts.out);
    fuse::tune::set_mode(opts.mode);
    let [w_gate, w_up, w_down] = llama::weights(&dev)?;
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
