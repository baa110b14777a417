//! CPU quantized products at prefill and decode shapes: GMAC/s of `x.matmul(&w.t())` for each block type.
//! Run: `RAYON_NUM_THREADS=2 cargo run --release --example cpu_quant [-- --ms 1,128 --types Q4_K,Q6_K --n 2048 --k 8192 --reps 10]`
use fuse::ir::quant::random_blocks;
use fuse::{DType, Device, Tensor};
use std::time::Instant;

fn main() {
    let mut ms = vec![1usize, 128];
    let mut types = vec![DType::Q4_K, DType::Q6_K];
    let (mut n, mut k, mut reps) = (2048usize, 8192usize, 10usize);
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let v = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--ms" => ms = v.split(',').map(|s| s.parse().unwrap()).collect(),
            "--types" => types = v.split(',').map(|t| DType::parse(t).expect("a dtype")).collect(),
            "--n" => n = v.parse().unwrap(),
            "--k" => k = v.parse().unwrap(),
            "--reps" => reps = v.parse().unwrap(),
            f => panic!("unknown flag {f}"),
        }
    }
    println!("n {n} k {k}, {} threads", std::env::var("RAYON_NUM_THREADS").unwrap_or_default());
    for &dtype in &types {
        let blocks = n * k / dtype.block().unwrap().elements;
        let w = Tensor::from_blocks(dtype, &[n, k], random_blocks(dtype, blocks, 7), &Device::Cpu).unwrap();
        for &m in &ms {
            let x = Tensor::from_vec(
                (0..m * k).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0).collect(),
                &[m, k],
                &Device::Cpu,
            )
            .unwrap();
            let wt = w.t().unwrap();
            x.matmul(&wt).unwrap();
            let t = Instant::now();
            for _ in 0..reps {
                x.matmul(&wt).unwrap();
            }
            let s = t.elapsed().as_secs_f64() / reps as f64;
            println!("{:>5} m {m:>4}: {:>9.3} ms  {:>7.1} GMAC/s", dtype.name(), s * 1e3, (m * n * k) as f64 / s / 1e9);
        }
    }
}
