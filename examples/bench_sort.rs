//! Sorting on the device, timed: top-k sampling's first step (`let (top, indices) = logits.topk(k);` and the
//! softmax of the k values, one `#[fuse]` function) and a whole descending sort (`sort_last_dim(false)`:
//! values and indices, what top-p sampling needs), over bf16 logits of SmolLM2's vocabulary (49,152) and
//! Qwen2's (151,936) at 1 and 16 rows. Back to back: events around 20 calls in a row, divided by 20, median
//! of 5 rounds, after warm-up. The floor is the logits' bytes read once over the copy bandwidth of this
//! GPU. The peer, torch's `topk` and `sort` on the same shapes, is `benches/peers/torch_sort.py`.
//!
//! Run: `cargo run --release --example bench_sort`

use fuse::prelude::*;

#[path = "common/timing.rs"]
mod timing;
use timing::copy_bandwidth;

#[fuse]
fn top_k(logits: &Tensor, k: usize) -> Result<(Tensor, Tensor)> {
    let (top, indices) = logits.topk(k);
    Ok((softmax(top.to_dtype(DType::F32)), indices))
}

#[fuse]
fn sorted(logits: &Tensor) -> Result<(Tensor, Tensor)> {
    let (values, indices) = logits.sort_last_dim(false);
    Ok((values, indices))
}

const ROUNDS: usize = 5;
const CALLS: usize = 20;

fn main() -> Result<()> {
    let dev = Device::cuda(0)?;
    let Device::Cuda(gpu) = &dev else { unreachable!("Device::cuda gives a GPU") };
    let bandwidth = copy_bandwidth(&dev, gpu)?;
    println!("# {} | copy bandwidth {:.0} GB/s", gpu.arch(), bandwidth / 1e9);
    println!("| vocab | rows | topk(50) + softmax (us) | sort, values and indices (us) | floor (us) |");
    println!("|---|---|---|---|---|");
    for vocab in [49152, 151936] {
        for rows in [1, 16] {
            let data: Vec<f32> =
                (0..rows * vocab).map(|i| ((i * 7919 % 100_003) as f32 / 100_003.0 - 0.5) * 20.0).collect();
            let logits = Tensor::from_vec(data, &[rows, vocab], &dev)?.to_dtype(DType::BF16)?;
            let topk = timing::time(gpu, ROUNDS, CALLS, || top_k(&logits, 50).map(|_| ()))?;
            let sort = timing::time(gpu, ROUNDS, CALLS, || sorted(&logits).map(|_| ()))?;
            let floor = (rows * vocab * 2) as f64 / bandwidth * 1e6;
            println!("| {vocab} | {rows} | {topk:.1} | {sort:.1} | {floor:.2} |");
        }
    }
    Ok(())
}
