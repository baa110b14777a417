//! Horizontal fusion, timed: rms_norm then the q, k and v projections with their biases (bf16, checkpoint
//! [out, in] weights) on the GPU, three ways at each M: separate weights fused (one MultiGemm group: the
//! norm its prologue, one template launch for the three products where a template wins), the same weights
//! concatenated by hand into one (what a model crate had to do before: one Gemm group, then three narrow
//! views), and separate weights unfused (each op its own kernel or library call). Back to back: events
//! around 50 calls in a row, divided by 50, median of 5 rounds, after warm-up calls that also tune each
//! rows bucket. The floor is the weights' bytes over the copy bandwidth of this GPU (a 1 GiB device-to-device
//! copy). Shapes: Qwen2.5-0.5B (hidden 896, q 896, k and v 128) and Llama-3-8B (4096, 4096, 1024).
//!
//! Run: `cargo run --release --example bench_qkv [-- --ms 1,4,16,64,256]`

use fuse::prelude::*;

#[path = "common/timing.rs"]
mod timing;
use timing::copy_bandwidth;

#[fuse]
#[allow(clippy::too_many_arguments)]
fn separate(
    x: &Tensor,
    norm: &Tensor,
    wq: &Tensor,
    bq: &Tensor,
    wk: &Tensor,
    bk: &Tensor,
    wv: &Tensor,
    bv: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let h = rms_norm(x, norm, 1e-6);
    (h.matmul(&wq.t()) + bq, h.matmul(&wk.t()) + bk, h.matmul(&wv.t()) + bv)
}

#[fuse]
fn concatenated(
    x: &Tensor,
    norm: &Tensor,
    wqkv: &Tensor,
    bqkv: &Tensor,
    nq: usize,
    nk: usize,
) -> Result<(Tensor, Tensor, Tensor)> {
    let qkv = rms_norm(x, norm, 1e-6).matmul(&wqkv.t()) + bqkv;
    (qkv.narrow(1, 0, nq), qkv.narrow(1, nq, nk), qkv.narrow(1, nq + nk, nk))
}

const ROUNDS: usize = 5;
const CALLS: usize = 50;

fn weight(rows: usize, cols: usize, seed: usize, dev: &Device) -> Result<Tensor> {
    let data: Vec<f32> = (0..rows * cols).map(|i| (((i * 37 + seed * 11) % 101) as f32 - 50.0) / 500.0).collect();
    Tensor::from_vec(data, &[rows, cols], dev)?.to_dtype(DType::BF16)
}

fn main() -> Result<()> {
    let mut ms = vec![1, 4, 16, 64, 256];
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, list] = &args[..] {
        if flag == "--ms" {
            ms = list.split(',').map(|m| m.trim().parse().expect("--ms takes numbers")).collect();
        }
    }
    let dev = Device::cuda(0)?;
    let Device::Cuda(gpu) = &dev else { unreachable!("Device::cuda gives a GPU") };
    let bandwidth = copy_bandwidth(&dev, gpu)?;
    println!("# {} | copy bandwidth {:.0} GB/s", gpu.arch(), bandwidth / 1e9);
    println!("| model | M | separate, fused (us) | concatenated, fused (us) | separate, unfused (us) | floor (us) | fused / concatenated |");
    println!("|---|---|---|---|---|---|---|");
    for (model, hidden, nq, nk) in [("qwen2.5-0.5b", 896, 896, 128), ("llama-3-8b", 4096, 4096, 1024)] {
        let norm = weight(1, hidden, 1, &dev)?.reshape(&[hidden])?;
        let w = [weight(nq, hidden, 2, &dev)?, weight(nk, hidden, 3, &dev)?, weight(nk, hidden, 4, &dev)?];
        let b = [
            weight(1, nq, 5, &dev)?.reshape(&[nq])?,
            weight(1, nk, 6, &dev)?.reshape(&[nk])?,
            weight(1, nk, 7, &dev)?.reshape(&[nk])?,
        ];
        let wqkv = Tensor::cat(&[&w[0], &w[1], &w[2]], 0)?;
        let bqkv = Tensor::cat(&[&b[0], &b[1], &b[2]], 0)?;
        let floor = (wqkv.numel() * 2) as f64 / bandwidth * 1e6;
        for &m in &ms {
            let x = weight(m, hidden, 8, &dev)?;
            let sep = [&x, &norm, &w[0], &b[0], &w[1], &b[1], &w[2], &b[2]];
            let fused = timing::time(gpu, ROUNDS, CALLS, || {
                separate(sep[0], sep[1], sep[2], sep[3], sep[4], sep[5], sep[6], sep[7]).map(|_| ())
            })?;
            let cat = timing::time(gpu, ROUNDS, CALLS, || concatenated(&x, &norm, &wqkv, &bqkv, nq, nk).map(|_| ()))?;
            let args: Vec<fuse::Arg<'_>> = sep.iter().map(|t| fuse::arg(*t)).collect();
            let unfused =
                timing::time(gpu, ROUNDS, CALLS, || separate_fused().call_with(&args, Fusion::Off).map(|_| ()))?;
            println!("| {model} | {m} | {fused:.1} | {cat:.1} | {unfused:.1} | {floor:.1} | {:.2} |", fused / cat);
        }
    }
    Ok(())
}
