//! The CPU's quantized products alone: GMAC/s of `x.matmul(&w.t())` with `w` a `[n, k]` matrix of a block type
//! (random blocks), for each row count m (1 is decode's shape, 128 a prefill's).
//!
//! Run: `RAYON_NUM_THREADS=2 cargo run --release --example cpu_quant [-- --ms 1,128 --types Q4_K,Q6_K --n 2048
//! --k 8192 --reps 10]`
use fuse::ir::quant::random_blocks;
use fuse::{DType, Device, Tensor};
use std::time::Instant;

struct Options {
    ms: Vec<usize>,
    types: Vec<DType>,
    n: usize,
    k: usize,
    reps: usize,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options { ms: vec![1, 128], types: vec![DType::Q4_K, DType::Q6_K], n: 2048, k: 8192, reps: 10 };
    let num = |v: &str| v.parse::<usize>().map_err(|_| format!("`{v}` is not a count"));
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--ms" => o.ms = value.split(',').map(num).collect::<Result<_, _>>()?,
            "--types" => {
                o.types = value
                    .split(',')
                    .map(|t| DType::parse(t).filter(|d| d.is_quantized()).ok_or(format!("--types: `{t}`")))
                    .collect::<Result<_, _>>()?
            }
            "--n" => o.n = num(&value)?,
            "--k" => o.k = num(&value)?,
            "--reps" => o.reps = num(&value)?.max(1),
            _ => return Err(format!("unknown flag {flag}; flags: --ms A,B --types Q4_K,Q4_1 --n N --k K --reps R")),
        }
    }
    Ok(o)
}

fn run(o: &Options) -> fuse::Result<()> {
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "all".into());
    println!("n {} k {}, {threads} threads (RAYON_NUM_THREADS)", o.n, o.k);
    println!("{:>5} {:>5} {:>10} {:>8}", "type", "m", "ms", "GMAC/s");
    for &dtype in &o.types {
        let blocks = o.n * o.k / dtype.block().map_or(1, |b| b.elements);
        let w = Tensor::from_blocks(dtype, &[o.n, o.k], random_blocks(dtype, blocks, 7), &Device::Cpu)?.t()?;
        for &m in &o.ms {
            let values = (0..m * o.k).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0).collect();
            let x = Tensor::from_vec(values, &[m, o.k], &Device::Cpu)?;
            x.matmul(&w)?; // warm: threads started, panels allocated
            let start = Instant::now();
            for _ in 0..o.reps {
                x.matmul(&w)?;
            }
            let s = start.elapsed().as_secs_f64() / o.reps as f64;
            println!("{:>5} {m:>5} {:>10.3} {:>8.1}", dtype.name(), s * 1e3, (m * o.n * o.k) as f64 / s / 1e9);
        }
    }
    Ok(())
}

fn main() {
    let result = parse_args().map_err(|e| e.to_string()).and_then(|o| run(&o).map_err(|e| e.to_string()));
    if let Err(e) = result {
        eprintln!("cpu_quant: {e}");
        std::process::exit(2);
    }
}
