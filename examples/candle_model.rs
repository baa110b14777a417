//! A small candle model with its feed-forward block fused by fuse: a SmolLM2-shaped decoder stack (hidden
//! 576, intermediate 1536, 9 heads of 64 over 3 key/value heads, random weights, no rotary embedding) written
//! in plain candle ops, once as it is and once with each layer's rms_norm + MLP + residual replaced by one
//! `#[fuse]` method on the same candle weights. Checks that both give the same hidden states and times both.
//!
//! Run: `cargo run --release --features candle --example candle_model [-- --layers 4 --tokens 1,16,64 --reps 5]`
//! On candle's CUDA device (`--device cuda`): build with `scripts/build-candle-cuda.sh` (feature `candle-cuda`,
//! README "With candle") and run `target-candle-cuda/release/examples/candle_model --device cuda`.

use fuse::candle_core::{self as candle, Device, Module, Tensor, D};
use fuse::fuse;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::time::Instant;

const HIDDEN: usize = 576;
const INTER: usize = 1536;
const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const HEAD_DIM: usize = 64;
const EPS: f32 = 1e-5;

fn random(rng: &mut SmallRng, shape: &[usize], scale: f32, dev: &Device) -> candle::Result<Tensor> {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-scale..scale)).collect();
    Tensor::from_vec(v, shape, dev)
}

fn rms_norm(x: &Tensor, w: &Tensor) -> candle::Result<Tensor> {
    let r = (x.sqr()?.mean_keepdim(D::Minus1)? + EPS as f64)?.sqrt()?.recip()?;
    x.broadcast_mul(&r)?.broadcast_mul(w)
}

/// The feed-forward block in plain candle: x + down(silu(gate(h)) * up(h)), h = rms_norm(x).
struct Ffn {
    norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
    eps: f32,
}

impl Module for Ffn {
    fn forward(&self, x: &Tensor) -> candle::Result<Tensor> {
        let h = rms_norm(x, &self.norm)?;
        let g = h.broadcast_matmul(&self.gate.t()?)?.silu()?;
        let u = h.broadcast_matmul(&self.up.t()?)?;
        x + (g * u)?.broadcast_matmul(&self.down.t()?)?
    }
}

/// The same block on the same candle weights, fused: one call, candle tensors in and out.
struct FusedFfn<'a>(&'a Ffn);

impl Ffn {
    #[fuse]
    fn forward_fused_block(&self, x: &Tensor) -> candle::Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        Ok(x + (silu(h.matmul(&self.gate.t())) * h.matmul(&self.up.t())).matmul(&self.down.t()))
    }
}

impl Module for FusedFfn<'_> {
    fn forward(&self, x: &Tensor) -> candle::Result<Tensor> {
        self.0.forward_fused_block(x)
    }
}

/// Causal grouped-query self-attention with its residual, in plain candle (the same in both models).
struct Attention {
    norm: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
}

impl Module for Attention {
    fn forward(&self, x: &Tensor) -> candle::Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let h = rms_norm(x, &self.norm)?;
        let heads = |w: &Tensor, n: usize| -> candle::Result<Tensor> {
            h.broadcast_matmul(&w.t()?)?.reshape((b, t, n, HEAD_DIM))?.transpose(1, 2)?.contiguous()
        };
        let (q, k, v) = (heads(&self.q, HEADS)?, heads(&self.k, KV_HEADS)?, heads(&self.v, KV_HEADS)?);
        let group = HEADS / KV_HEADS;
        let repeat = |kv: Tensor| -> candle::Result<Tensor> {
            kv.unsqueeze(2)?.expand((b, KV_HEADS, group, t, HEAD_DIM))?.reshape((b, HEADS, t, HEAD_DIM))
        };
        let (k, v) = (repeat(k)?, repeat(v)?);
        let scores = (q.matmul(&k.t()?)? / (HEAD_DIM as f64).sqrt())?;
        let mask: Vec<f32> = (0..t * t).map(|i| if i % t > i / t { f32::NEG_INFINITY } else { 0.0 }).collect();
        let scores = scores.broadcast_add(&Tensor::from_vec(mask, (t, t), x.device())?)?;
        let e = scores.broadcast_sub(&scores.max_keepdim(D::Minus1)?)?.exp()?;
        let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
        let out = p.matmul(&v)?.transpose(1, 2)?.reshape((b, t, HEADS * HEAD_DIM))?;
        x + out.broadcast_matmul(&self.o.t()?)?
    }
}

struct Layer {
    attention: Attention,
    ffn: Ffn,
}

fn model(layers: usize, seed: u64, dev: &Device) -> candle::Result<Vec<Layer>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut random = |shape: &[usize], scale: f32| random(&mut rng, shape, scale, dev);
    let s = 1.0 / (HIDDEN as f32).sqrt();
    (0..layers)
        .map(|_| {
            Ok(Layer {
                attention: Attention {
                    norm: random(&[HIDDEN], 1.0)?.affine(0.25, 1.0)?,
                    q: random(&[HEADS * HEAD_DIM, HIDDEN], s)?,
                    k: random(&[KV_HEADS * HEAD_DIM, HIDDEN], s)?,
                    v: random(&[KV_HEADS * HEAD_DIM, HIDDEN], s)?,
                    o: random(&[HIDDEN, HEADS * HEAD_DIM], s)?,
                },
                ffn: Ffn {
                    norm: random(&[HIDDEN], 1.0)?.affine(0.25, 1.0)?,
                    gate: random(&[INTER, HIDDEN], s)?,
                    up: random(&[INTER, HIDDEN], s)?,
                    down: random(&[HIDDEN, INTER], 1.0 / (INTER as f32).sqrt())?,
                    eps: EPS,
                },
            })
        })
        .collect()
}

/// The stack's hidden states for `x` [1, tokens, HIDDEN]; `fused` picks the FFN block.
fn forward(layers: &[Layer], x: &Tensor, fused: bool) -> candle::Result<Tensor> {
    let mut x = x.clone();
    for layer in layers {
        x = layer.attention.forward(&x)?;
        x = if fused { FusedFfn(&layer.ffn).forward(&x)? } else { layer.ffn.forward(&x)? };
    }
    Ok(x)
}

fn rel_err(a: &Tensor, b: &Tensor) -> candle::Result<f32> {
    let d = (a - b)?.sqr()?.sum_all()?.to_scalar::<f32>()?.sqrt();
    Ok(d / b.sqr()?.sum_all()?.to_scalar::<f32>()?.sqrt())
}

/// Median wall time of `f` after a warm-up (fuse plans and compiles on first use), each run waited for.
fn median_ms(reps: usize, dev: &Device, mut f: impl FnMut() -> candle::Result<Tensor>) -> candle::Result<f64> {
    f()?;
    dev.synchronize()?;
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t0 = Instant::now();
            f()?;
            dev.synchronize()?;
            Ok(t0.elapsed().as_secs_f64() * 1e3)
        })
        .collect::<candle::Result<_>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

struct Options {
    layers: usize,
    tokens: Vec<usize>,
    reps: usize,
    cuda: bool,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options { layers: 4, tokens: vec![1, 16, 64], reps: 5, cuda: false };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| match v.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{flag}: `{v}` is not a positive integer")),
        };
        match flag.as_str() {
            "--layers" => o.layers = num(&value)?,
            "--reps" => o.reps = num(&value)?,
            "--tokens" => o.tokens = value.split(',').map(num).collect::<Result<_, _>>()?,
            "--device" => {
                o.cuda = match value.as_str() {
                    "cpu" => false,
                    "cuda" => true,
                    _ => return Err(format!("--device: `{value}` is neither cpu nor cuda")),
                }
            }
            _ => return Err(format!("unknown flag {flag}; flags: --layers N --tokens A,B --reps N --device cpu|cuda")),
        }
    }
    Ok(o)
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("candle_model: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o) {
        // candle's errors carry a backtrace after their first line.
        eprintln!("candle_model: {}", e.to_string().lines().next().unwrap_or_default());
        std::process::exit(1);
    }
}

fn run(o: &Options) -> candle::Result<()> {
    let (dev, on) = if o.cuda {
        let dev = Device::new_cuda(0).map_err(|e| {
            candle::Error::msg(format!(
                "candle's CUDA device 0: {e} (build with scripts/build-candle-cuda.sh for candle's CUDA build)"
            ))
        })?;
        (dev, "candle's CUDA device 0".to_string())
    } else {
        (Device::Cpu, format!("CPU, {} threads", candle::utils::get_num_threads()))
    };
    let layers = model(o.layers, 5, &dev)?;
    println!(
        "SmolLM2-shaped decoder stack in candle ({on}, f32): {} layers, hidden {HIDDEN}, intermediate {INTER}",
        o.layers
    );
    println!("tokens   candle ms   candle + #[fuse] FFN ms   speed-up   rel. error");
    let mut rng = SmallRng::seed_from_u64(6);
    let mut worst = 0f32;
    for &t in &o.tokens {
        let x = random(&mut rng, &[1, t, HIDDEN], 1.0, &dev)?;
        let want = forward(&layers, &x, false)?;
        let got = forward(&layers, &x, true)?;
        let err = rel_err(&got, &want)?;
        worst = worst.max(err);
        let plain = median_ms(o.reps, &dev, || forward(&layers, &x, false))?;
        let fused = median_ms(o.reps, &dev, || forward(&layers, &x, true))?;
        println!("{t:>6}   {plain:>9.2}   {fused:>23.2}   {:>7.2}x   {err:.2e}", plain / fused);
    }
    // f32 both ways, different summation orders: far below this unless a block is wrong.
    if worst > 1e-4 {
        return Err(candle::Error::msg(format!(
            "the fused model differs from plain candle: relative error {worst:e} over 1e-4"
        )));
    }
    println!("hidden states match plain candle (worst relative error {worst:.2e})");
    Ok(())
}
