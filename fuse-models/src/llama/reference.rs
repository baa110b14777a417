//! A Llama-family forward pass in plain Rust and f64, one position at a time, straight from a GGUF file's
//! tensors as llama.cpp reads them: the definition the loaded models are tested against. It shares nothing with
//! the loader but the dequantisation (`tensor_f32`): no stacking, no row reordering; the rotary embedding turns
//! the file's rows as llama.cpp's graph for the architecture does (adjacent pairs for `llama`, whose converter
//! permuted the q/k rows; halves `d/2` apart, its NEOX rope, for `qwen2`).

use crate::gguf::GgufFile;
use crate::llama::{Architecture, Config};

/// What the reference computes beyond the file's own definition, to show that a test can tell them apart.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Variant {
    /// Adds the q/k/v biases where the file has them.
    pub bias: bool,
    /// Turns adjacent pairs (`llama`) rather than halves (`qwen2`).
    pub adjacent_pairs: bool,
}

impl Variant {
    /// The file's own definition.
    pub fn of(c: &Config) -> Variant {
        Variant { bias: true, adjacent_pairs: c.architecture == Architecture::Llama }
    }
}

/// The logits of every position of `ids` (a sequence from position 0), `[ids.len()][vocab]`.
pub(crate) fn reference_logits(file: &GgufFile, ids: &[u32], variant: Variant) -> Vec<Vec<f32>> {
    let c = Config::from_gguf(file).unwrap();
    let t = |name: &str| file.tensor_f32(name).unwrap();
    let maybe = |name: &str| file.tensor_info(name).ok().map(|_| t(name));
    let (d, hq, hkv) = (c.head_dim, c.heads, c.kv_heads);
    let embedding = t("token_embd.weight");
    let mut xs: Vec<Vec<f64>> = ids
        .iter()
        .map(|&id| embedding[id as usize * c.hidden..][..c.hidden].iter().map(|&v| v as f64).collect())
        .collect();
    for l in 0..c.layers {
        let w = |part: &str| t(&format!("blk.{l}.{part}.weight"));
        let b = |part: &str, rows: usize| match (variant.bias, maybe(&format!("blk.{l}.{part}.bias"))) {
            (true, Some(b)) => b.iter().map(|&v| v as f64).collect(),
            _ => vec![0.0; rows],
        };
        let (wq, wk, wv, wo) = (w("attn_q"), w("attn_k"), w("attn_v"), w("attn_output"));
        let (bq, bk, bv) = (b("attn_q", hq * d), b("attn_k", hkv * d), b("attn_v", hkv * d));
        let norm = w("attn_norm");
        let (mut keys, mut values, mut outs) = (Vec::new(), Vec::new(), Vec::new());
        for (p, x) in xs.iter().enumerate() {
            let h = rms_norm(x, &norm, c.eps);
            let add = |mut y: Vec<f64>, b: &[f64]| {
                y.iter_mut().zip(b).for_each(|(y, b)| *y += b);
                y
            };
            let mut q = add(matvec(&wq, &h), &bq);
            let mut k = add(matvec(&wk, &h), &bk);
            for head in q.chunks_exact_mut(d).chain(k.chunks_exact_mut(d)) {
                rotate(head, p, c.rope_theta, variant.adjacent_pairs);
            }
            keys.push(k);
            values.push(add(matvec(&wv, &h), &bv));
            let mut o = vec![0.0; hq * d];
            for head in 0..hq {
                let kv = head / (hq / hkv);
                let qh = &q[head * d..][..d];
                let scores: Vec<f64> = (0..=p)
                    .map(|j| {
                        qh.iter().zip(&keys[j][kv * d..][..d]).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = e.iter().sum();
                for (j, e) in e.iter().enumerate() {
                    for i in 0..d {
                        o[head * d + i] += e / total * values[j][kv * d + i];
                    }
                }
            }
            outs.push(matvec(&wo, &o));
        }
        let (gate, up, down, norm) = (w("ffn_gate"), w("ffn_up"), w("ffn_down"), w("ffn_norm"));
        for (x, o) in xs.iter_mut().zip(outs) {
            x.iter_mut().zip(o).for_each(|(x, o)| *x += o);
            let h = rms_norm(x, &norm, c.eps);
            let g: Vec<f64> =
                matvec(&gate, &h).iter().zip(matvec(&up, &h)).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            x.iter_mut().zip(matvec(&down, &g)).for_each(|(x, y)| *x += y);
        }
    }
    let (norm, head) = (t("output_norm.weight"), maybe("output.weight").unwrap_or(embedding));
    xs.iter().map(|x| matvec(&head, &rms_norm(x, &norm, c.eps)).iter().map(|&v| v as f32).collect()).collect()
}

fn matvec(w: &[f32], x: &[f64]) -> Vec<f64> {
    w.chunks_exact(x.len()).map(|row| row.iter().zip(x).map(|(&a, b)| a as f64 * b).sum()).collect()
}

fn rms_norm(x: &[f64], w: &[f32], eps: f32) -> Vec<f64> {
    let r = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + eps as f64).sqrt();
    x.iter().zip(w).map(|(v, &w)| v * r * w as f64).collect()
}

/// Rotates one head at position `p`: pair i (x[2i], x[2i+1]) or (x[i], x[i + d/2]) by p * theta^(-2i/d).
fn rotate(head: &mut [f64], p: usize, theta: f64, adjacent_pairs: bool) {
    let d = head.len();
    for i in 0..d / 2 {
        let angle = p as f64 * theta.powf(-((2 * i) as f64) / d as f64);
        let (a, b) = if adjacent_pairs { (2 * i, 2 * i + 1) } else { (i, i + d / 2) };
        let (x0, x1) = (head[a], head[b]);
        head[a] = x0 * angle.cos() - x1 * angle.sin();
        head[b] = x0 * angle.sin() + x1 * angle.cos();
    }
}
