//! Models written with fuse as a model crate writes them. Each example is compiled and run as a test.
//!
//! # A GPT-2 block
//!
//! LayerNorm written once and called twice, causal attention over one q/k/v projection whose parts and heads
//! are cut by sizes computed from the input's, and the tanh-GELU MLP. The functions of a `#[fuse]` impl block
//! call each other, and each call is inlined into the caller's graph, so the planner fuses across it.
//!
//! ```
//! use fuse::prelude::*;
//! use fuse::testing::{assert_close, random, TestRng};
//!
//! struct Gpt2Block {
//!     ln1_w: Tensor, ln1_b: Tensor, ln2_w: Tensor, ln2_b: Tensor,
//!     qkv_w: Tensor, qkv_b: Tensor, proj_w: Tensor, proj_b: Tensor,
//!     fc_w: Tensor, fc_b: Tensor, out_w: Tensor, out_b: Tensor,
//! }
//!
//! #[fuse]
//! impl Gpt2Block {
//!     #[fuse]
//!     fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
//!         let d = x - x.mean(-1);
//!         Ok(d * rsqrt((d * d).mean(-1) + 1e-5) * w + b)
//!     }
//!
//!     /// One of q, k, v ([b, heads, s, head]) from the projection [b, s, 3 * width].
//!     #[fuse]
//!     fn heads_of(qkv: &Tensor, part: usize, heads: usize) -> Result<Tensor> {
//!         let (b, s, width) = (qkv.dim(0), qkv.dim(1), qkv.dim(2) / 3);
//!         Ok(qkv.narrow(2, part * width, width).reshape(&[b, s, heads, width / heads]).transpose(1, 2))
//!     }
//!
//!     fn attend(&self, x: &Tensor, heads: usize) -> Result<Tensor> {
//!         let qkv = x.matmul(&self.qkv_w.t()) + &self.qkv_b;
//!         let (q, k, v) = (Self::heads_of(&qkv, 0, heads), Self::heads_of(&qkv, 1, heads), Self::heads_of(&qkv, 2, heads));
//!         let scale = 1.0 / ((x.dim(2) / heads) as f32).sqrt();
//!         let o = attention(q, k, v, scale, true).transpose(1, 2).reshape(&[x.dim(0), x.dim(1), x.dim(2)]);
//!         Ok(o.matmul(&self.proj_w.t()) + &self.proj_b)
//!     }
//!
//!     fn forward(&self, x: &Tensor, heads: usize) -> Result<Tensor> {
//!         let x = x + self.attend(&Self::layer_norm(x, &self.ln1_w, &self.ln1_b), heads);
//!         let h = Self::layer_norm(&x, &self.ln2_w, &self.ln2_b);
//!         Ok(x + gelu_tanh(h.matmul(&self.fc_w.t()) + &self.fc_b).matmul(&self.out_w.t()) + &self.out_b)
//!     }
//! }
//!
//! # fn main() -> fuse::Result<()> {
//! let (dev, mut r) = (Device::Cpu, TestRng::new(1));
//! let width = 64;
//! let mut w = |shape: &[usize], scale: f32| random(&mut r, shape, DType::F32, -scale, scale, &dev);
//! let block = Gpt2Block {
//!     ln1_w: w(&[width], 1.0), ln1_b: w(&[width], 0.1), ln2_w: w(&[width], 1.0), ln2_b: w(&[width], 0.1),
//!     qkv_w: w(&[3 * width, width], 0.2), qkv_b: w(&[3 * width], 0.1),
//!     proj_w: w(&[width, width], 0.2), proj_b: w(&[width], 0.1),
//!     fc_w: w(&[4 * width, width], 0.2), fc_b: w(&[4 * width], 0.1),
//!     out_w: w(&[width, 4 * width], 0.1), out_b: w(&[width], 0.1),
//! };
//! let x = w(&[2, 9, width], 1.0);
//! let y = block.forward(&x, 4)?;
//! assert_eq!(y.shape(), &[2, 9, width]);
//! // Causal: a new last token changes no earlier position's output.
//! let changed = cat(&[&x.narrow(1, 0, 8)?, &w(&[2, 1, width], 1.0)], 1)?;
//! let y2 = block.forward(&changed, 4)?;
//! assert_close("earlier positions", &y2.narrow(1, 0, 8)?, &y.narrow(1, 0, 8)?, DType::F32, &dev);
//! # Ok(())
//! # }
//! ```
//!
//! # Mistral-style sliding-window attention
//!
//! Each query sees the `window` keys up to its own position: the mask is built from position tensors with
//! comparisons, applied with `where_cond`, and the softmax's max and sum run over the masked scores. With a
//! window as long as the sequence it is causal attention, which `attention(.., true)` computes in one kernel.
//!
//! ```
//! use fuse::prelude::*;
//! use fuse::testing::{assert_close, random, TestRng};
//!
//! /// q [b, h, s, d], k and v [b, h, t, d]; positions of the queries [s, 1] and keys [t].
//! #[fuse]
//! fn sliding_window_attention(
//!     q: &Tensor, k: &Tensor, v: &Tensor, q_pos: &Tensor, k_pos: &Tensor, window: f32,
//! ) -> Result<Tensor> {
//!     let scores = q.matmul(&k.transpose(2, 3)) / (q.dim(3) as f32).sqrt();
//!     let behind = q_pos - k_pos;
//!     let visible = behind.ge(0.0) * behind.lt(window);
//!     Ok(softmax(visible.where_cond(scores, f32::NEG_INFINITY)).matmul(v))
//! }
//!
//! # fn main() -> fuse::Result<()> {
//! let (dev, mut r) = (Device::Cpu, TestRng::new(2));
//! let (b, h, s, d) = (1, 2, 7, 16);
//! let [q, k, v] = [0; 3].map(|_| random(&mut r, &[b, h, s, d], DType::F32, -1.0, 1.0, &dev));
//! let q_pos = Tensor::from_vec((0..s).map(|i| i as f32).collect(), &[s, 1], &dev)?;
//! let k_pos = Tensor::from_vec((0..s).map(|i| i as f32).collect(), &[s], &dev)?;
//! // A window as long as the sequence: causal attention.
//! let full = sliding_window_attention(&q, &k, &v, &q_pos, &k_pos, s as f32)?;
//! let causal = attention(&q, &k, &v, 1.0 / (d as f32).sqrt(), true)?;
//! assert_close("window = sequence", &full, &causal, DType::F32, &dev);
//! // A window of 3: the first three queries see what causal attention shows them, the later ones less.
//! let narrow = sliding_window_attention(&q, &k, &v, &q_pos, &k_pos, 3.0)?;
//! assert_close("first three queries", &narrow.narrow(2, 0, 3)?, &causal.narrow(2, 0, 3)?, DType::F32, &dev);
//! let later = (narrow.narrow(2, 3, 4)? - causal.narrow(2, 3, 4)?)?.abs()?.max(-1)?.max_keepdim(2)?;
//! assert!(later.to_vec::<f32>()?.iter().all(|&gap| gap > 1e-4), "the later queries see fewer keys");
//! # Ok(())
//! # }
//! ```
//!
//! # Qwen2-style projections from a checkpoint's separate weights, a ragged batch
//!
//! q, k and v keep the checkpoint's own weights and biases: the planner makes the three products one group
//! (`multigemm`) with the rms_norm as its prologue, so nothing needs stacking. The rotary tables hold one row
//! per sequence (`[b, 1, d/2]`), each sequence of the batch at its own position, and the new keys go into
//! the cache at each sequence's own offset (a u32 tensor of `[b]` positions).
//!
//! ```
//! use fuse::prelude::*;
//! use fuse::testing::{random, TestRng};
//!
//! struct Projections { norm: Tensor, wq: Tensor, bq: Tensor, wk: Tensor, bk: Tensor, wv: Tensor, bv: Tensor }
//!
//! #[fuse]
//! impl Projections {
//!     /// x [b, 1, hidden]; cos/sin [b, 1, d/2]; the key cache [b, kv_heads, capacity, d]; `at` [b] positions.
//!     fn step(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, k_cache: &Tensor, at: &Tensor, d: usize) -> Result<(Tensor, Tensor, Tensor)> {
//!         let h = rms_norm(x, &self.norm, 1e-6);
//!         let (b, s) = (x.dim(0), x.dim(1));
//!         let q = (h.matmul(&self.wq.t()) + &self.bq).reshape(&[b, s, -1, d]).transpose(1, 2);
//!         let k = (h.matmul(&self.wk.t()) + &self.bk).reshape(&[b, s, -1, d]).transpose(1, 2);
//!         let v = h.matmul(&self.wv.t()) + &self.bv;
//!         let k_cache = k_cache.slice_set(&rope(&k, cos, sin), 2, at);
//!         (rope(&q, cos, sin), k_cache, v)
//!     }
//! }
//!
//! # fn main() -> fuse::Result<()> {
//! let (dev, mut r) = (Device::Cpu, TestRng::new(3));
//! let (hidden, d, heads, kv_heads, capacity, b) = (64, 16, 4, 2, 8, 3);
//! let mut w = |shape: &[usize]| random(&mut r, shape, DType::F32, -0.3, 0.3, &dev);
//! let p = Projections {
//!     norm: w(&[hidden]), wq: w(&[heads * d, hidden]), bq: w(&[heads * d]),
//!     wk: w(&[kv_heads * d, hidden]), bk: w(&[kv_heads * d]), wv: w(&[kv_heads * d, hidden]), bv: w(&[kv_heads * d]),
//! };
//! let plan = Projections::step_fused().plan(Fusion::On)?;
//! let projections = plan.groups.iter().find(|g| !g.matmuls.is_empty()).expect("the projections' group");
//! assert_eq!((projections.kind.name(), projections.matmuls.len()), ("multigemm", 3));
//! let (x, cos, sin) = (w(&[b, 1, hidden]), w(&[b, 1, d / 2]), w(&[b, 1, d / 2]));
//! let k_cache = Tensor::zeros(&[b, kv_heads, capacity, d], DType::F32, &dev)?;
//! let at = Tensor::from_vec(vec![0u32, 5, 2], &[b], &dev)?;
//! let (q, k_cache, v) = p.step(&x, &cos, &sin, &k_cache, &at, d)?;
//! assert_eq!((q.shape(), v.shape()), (&[b, heads, 1, d][..], &[b, 1, kv_heads * d][..]));
//! // Sequence 1's new keys went to position 5 of its cache, and nowhere else in its rows.
//! let row = |pos: usize| k_cache.narrow(0, 1, 1).and_then(|t| t.narrow(2, pos, 1)).and_then(|t| t.to_vec::<f32>());
//! assert!(row(5)?.iter().any(|&v| v != 0.0) && row(0)?.iter().all(|&v| v == 0.0));
//! # Ok(())
//! # }
//! ```
//!
//! # Whisper's audio front end, and top-k on the device
//!
//! Two 1-D convolutions (candle's `conv1d(&kernel, padding, stride, dilation, groups)`) with a bias and GELU
//! after each, the second strided, as Whisper's encoder begins; each convolution is an `unfold` (im2col) and
//! a matmul. Then sampling's first step on the logits: the k largest, largest first, and their
//! probabilities, without a copy to the host.
//!
//! ```
//! use fuse::prelude::*;
//! use fuse::testing::{random, TestRng};
//!
//! #[fuse]
//! fn front(mel: &Tensor, w1: &Tensor, b1: &Tensor, w2: &Tensor, b2: &Tensor) -> Result<Tensor> {
//!     let h = gelu(mel.conv1d(w1, 1, 1, 1, 1) + b1.reshape(&[1, b1.dim(0), 1]));
//!     gelu(h.conv1d(w2, 1, 2, 1, 1) + b2.reshape(&[1, b2.dim(0), 1]))
//! }
//!
//! #[fuse]
//! fn top_k(logits: &Tensor, k: usize) -> Result<(Tensor, Tensor)> {
//!     let (top, indices) = logits.topk(k);
//!     (softmax(top), indices)
//! }
//!
//! # fn main() -> fuse::Result<()> {
//! let (dev, mut r) = (Device::Cpu, TestRng::new(5));
//! let (mels, frames, hidden) = (80, 30, 32);
//! let mut w = |shape: &[usize]| random(&mut r, shape, DType::F32, -0.2, 0.2, &dev);
//! let (mel, w1, b1, w2, b2) = (w(&[1, mels, frames]), w(&[hidden, mels, 3]), w(&[hidden]), w(&[hidden, hidden, 3]), w(&[hidden]));
//! let h = front(&mel, &w1, &b1, &w2, &b2)?;
//! assert_eq!(h.shape(), &[1, hidden, frames / 2]);
//! // The same convolution written out for one output: channel 0 at frame 0 of the first conv (padding 1).
//! let (x, k) = (mel.to_vec::<f32>()?, w1.to_vec::<f32>()?);
//! let direct: f32 = (0..mels).map(|c| (0..2).map(|t| x[c * frames + t] * k[c * 3 + t + 1]).sum::<f32>()).sum();
//! let first = (mel.conv1d(&w1, 1, 1, 1, 1)?.to_vec::<f32>()?)[0];
//! assert!((first - direct).abs() < 1e-5);
//!
//! let logits = Tensor::from_vec(vec![0.5f32, 3.0, -1.0, 3.0, 2.0], &[1, 5], &dev)?;
//! let (probabilities, indices) = top_k(&logits, 3)?;
//! assert_eq!(indices.to_vec::<u32>()?, [1, 3, 4], "ties keep the order of their indices");
//! let p = probabilities.to_vec::<f32>()?;
//! assert!(p[0] == p[1] && p[1] > p[2] && (p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
//! # Ok(())
//! # }
//! ```
