//! The weights of the one-launch decode step (`fuse::ir::codegen::decode_step_source`,
//! docs/persistent-step.md) from a GGUF file, in the kernel's layout: each layer's Q4_1 matrices split over
//! the [`STEP_SHARES`] blocks of a cluster (a block's rows of QKV, the output projection, gate and up, down,
//! then both norms' weights), the Q8_0 token matrix (tied embedding and LM head) as value + 128 bytes and f16
//! scales, the final norm and the rope table. The file's blocks are copied as they are (no dequantisation); the
//! query and key rows are put back in Hugging Face's half-split order, as [`super::Llama::load`] does.

use super::load::{rotary_cos_sin, Config};
use crate::ggml_type::GgmlType;
use crate::gguf::GgufFile;
use crate::rotary::unpermute_rotary_rows;
use crate::{Error, Result};
use fuse::prelude::*;

/// Blocks a layer's rows are split over: one thread-block cluster (`CLUSTER` in the kernel).
pub const STEP_SHARES: usize = 16;
/// Positions the library builds the kernel for (`FUSE_STEP_MAX_POSITIONS`: its scores and rope table).
pub const STEP_MAX_POSITIONS: usize = 2048;
/// Dynamic shared memory a block may have on sm_90 (227 KB).
pub const STEP_SHARED_MEMORY_LIMIT: usize = 232_448;
const HEAD_DIM: usize = 64;
const Q4_1_BYTES: usize = 20; // 32 weights: f16 d, f16 m, 16 bytes of nibbles
const Q8_0_BYTES: usize = 34; // 32 weights: f16 d, 32 i8
const THREADS: usize = 256;

/// A model's shapes as the kernel takes them (its `FUSE_STEP_*` defines), and a block's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub vocab: usize,
    /// Positions a step can attend to ([`STEP_MAX_POSITIONS`] as [`StepShape::of`] builds it).
    pub max_positions: usize,
    /// The GEMVs on tensor cores (`FUSE_STEP_MMA`): rows stored in tiles of 16. Off as [`StepShape::of`]
    /// builds it; [`StepShape::with_tensor_cores`] turns it on.
    pub tensor_cores: bool,
}

impl StepShape {
    /// The shapes of `config`, or an error naming the first of the kernel's limits it is past.
    pub fn of(config: &Config) -> Result<StepShape> {
        let c = config;
        let shape = StepShape {
            hidden: c.hidden,
            heads: c.heads,
            kv_heads: c.kv_heads,
            intermediate: c.intermediate,
            layers: c.layers,
            vocab: c.vocab,
            max_positions: STEP_MAX_POSITIONS,
            tensor_cores: false,
        };
        let limit = |ok: bool, what: String| {
            if ok {
                Ok(())
            } else {
                Err(Error::BadShape { what: format!("the one-launch decode step cannot run this model: {what}") })
            }
        };
        limit(c.head_dim == HEAD_DIM, format!("heads of {} dimensions (it is written for {HEAD_DIM})", c.head_dim))?;
        limit(
            c.heads <= STEP_SHARES && c.heads % c.kv_heads == 0,
            format!(
                "{} query heads over {} kv heads (at most {STEP_SHARES}, a whole number a kv head)",
                c.heads, c.kv_heads
            ),
        )?;
        limit(
            c.hidden % 64 == 0 && c.hidden / 32 <= THREADS,
            format!("hidden size {} (a multiple of 64, at most {})", c.hidden, 32 * THREADS),
        )?;
        limit(
            c.intermediate % (STEP_SHARES * 32) == 0 && c.intermediate / 32 <= THREADS,
            format!("intermediate size {} (a multiple of {})", c.intermediate, STEP_SHARES * 32),
        )?;
        limit(
            c.intermediate / STEP_SHARES <= 128,
            format!("intermediate size {} (at most {} rows of h a block)", c.intermediate, 128),
        )?;
        limit(
            c.vocab <= 1 << 16 && c.vocab > 0 && c.vocab % 16 == 0,
            format!("a vocabulary of {} (token ids in 16 bits, the LM head's rows in 16s)", c.vocab),
        )?;
        limit(c.layers > 0, "no layers".into())?;
        limit(
            shape.head_slots() >= 2,
            format!("hidden size {} (the LM head's ring needs two chunks of rows)", c.hidden),
        )?;
        let bytes = shape.shared_memory_bytes();
        limit(
            bytes <= STEP_SHARED_MEMORY_LIMIT,
            format!("{bytes} bytes of shared memory a block (at most {STEP_SHARED_MEMORY_LIMIT})"),
        )?;
        Ok(shape)
    }

    /// The same shapes with the GEMVs on tensor cores, if their shared memory fits.
    pub fn with_tensor_cores(self) -> Result<StepShape> {
        let shape = StepShape { tensor_cores: true, ..self };
        let bytes = shape.shared_memory_bytes();
        if bytes > STEP_SHARED_MEMORY_LIMIT {
            return Err(Error::BadShape { what: format!("the one-launch decode step on tensor cores needs {bytes} bytes of shared memory a block (at most {STEP_SHARED_MEMORY_LIMIT})") });
        }
        Ok(shape)
    }

    /// [`StepShape::of`], on tensor cores when `tensor_cores` ([`StepShape::with_tensor_cores`]).
    pub fn of_build(config: &Config, tensor_cores: bool) -> Result<StepShape> {
        let shape = StepShape::of(config)?;
        if tensor_cores {
            shape.with_tensor_cores()
        } else {
            Ok(shape)
        }
    }

    /// The defines that build the kernel for these shapes.
    pub fn defines(&self) -> Vec<String> {
        [
            ("HID", self.hidden),
            ("HEADS", self.heads),
            ("KV_HEADS", self.kv_heads),
            ("FF", self.intermediate),
            ("LAYERS", self.layers),
            ("VOCAB", self.vocab),
            ("MAX_POSITIONS", self.max_positions),
            ("MMA", self.tensor_cores as usize),
        ]
        .iter()
        .map(|(name, value)| format!("-DFUSE_STEP_{name}={value}"))
        .collect()
    }

    /// A stage's rows as stored: in tiles of 16 on tensor cores (the padding rows zero).
    pub fn stored(&self, rows: usize) -> usize {
        if self.tensor_cores {
            rows.div_ceil(16) * 16
        } else {
            rows
        }
    }

    /// Cached keys (and values) an attention block holds in shared memory (`PRE_KEYS`).
    pub fn preloaded_keys(&self) -> usize {
        if self.tensor_cores {
            128
        } else {
            192
        }
    }

    /// A block's rows of QKV, the output projection, gate and up together, and down.
    pub fn rows(&self) -> [usize; 4] {
        let qkv = self.hidden + 2 * self.kv_heads * HEAD_DIM;
        [qkv / STEP_SHARES, self.hidden / STEP_SHARES, 2 * self.intermediate / STEP_SHARES, self.hidden / STEP_SHARES]
    }

    /// Where each part of a block's share starts (common.cuh's `Share`): QKV's nibbles and scales, the output
    /// projection's, gate/up's, down's, the two norms; and the share's size.
    pub fn share_layout(&self) -> [usize; 11] {
        let [qkv, o, gu, d] = self.rows().map(|r| self.stored(r));
        let (kh, kf) = (self.hidden / 32, self.intermediate / 32);
        let mut at = [0usize; 11];
        let sizes = [
            qkv * kh * 16,
            qkv * kh * 4,
            o * kh * 16,
            o * kh * 4,
            gu * kh * 16,
            gu * kh * 4,
            d * kf * 16,
            d * kf * 4,
            self.hidden * 4,
            self.hidden * 4,
        ];
        for (i, size) in sizes.iter().enumerate() {
            at[i + 1] = at[i] + size;
        }
        at
    }

    pub fn share_bytes(&self) -> usize {
        self.share_layout()[10]
    }

    /// A block's dynamic shared memory (common.cuh's `Smem::bytes`).
    pub fn shared_memory_bytes(&self) -> usize {
        let [_, _, gu, _] = self.rows();
        let qkv_rows = self.hidden + 2 * self.kv_heads * HEAD_DIM;
        let key_groups = THREADS / 8;
        let attention = 2 * HEAD_DIM
            + (self.max_positions + 1).div_ceil(4) * 4
            + key_groups * HEAD_DIM
            + HEAD_DIM
            + key_groups
            + THREADS / 32;
        let part = (gu * (self.hidden / 32)).max(attention).div_ceil(4) * 4;
        self.share_bytes()
            + 2 * 2 * self.preloaded_keys() * HEAD_DIM
            + 4 * HEAD_DIM
            + 4 * (2 * self.hidden + qkv_rows + 32 + 32 + 64 + part + 256)
            + 2 * (2 * self.hidden + self.intermediate + 128)
            + 8 * (5 + self.head_slots())
    }

    /// The LM head's ring of row chunks (common.cuh's `HEAD_SLOTS`): chunks of 4 rows a row group (a group:
    /// a block's threads over the hidden size's blocks of 32; 1 row a group past 16 groups), as many as the
    /// share and the preloaded keys' memory holds, at most 8.
    pub fn head_slots(&self) -> usize {
        let (kb, groups) = (self.hidden / 32, THREADS / (self.hidden / 32));
        let chunk_bytes = groups * if groups > 16 { 1 } else { 4 } * (self.hidden + kb * 2);
        ((self.share_bytes() + 4 * self.preloaded_keys() * HEAD_DIM) / chunk_bytes).min(8)
    }
}

/// The kernel's weights for one model, on the host.
pub struct DecodeStepWeights {
    pub shape: StepShape,
    /// `[layers][STEP_SHARES][share_bytes]`
    pub shares: Vec<u8>,
    /// `[vocab][hidden]`: the token matrix's Q8_0 values + 128.
    pub head_q: Vec<u8>,
    /// `[vocab][hidden / 32]`: their scales (f16 bits).
    pub head_d: Vec<u16>,
    /// `[hidden]`: the final rms_norm's weights.
    pub out_norm: Vec<f32>,
    /// `[max_positions][64]`: cos of position p times frequency i at i < 32, its sin at 32 + i (f32, as
    /// Hugging Face computes them).
    pub rope: Vec<f32>,
}

impl DecodeStepWeights {
    /// Packs `file`'s weights: every layer matrix must be Q4_1, the token matrix Q8_0.
    pub fn pack(file: &GgufFile) -> Result<DecodeStepWeights> {
        Self::pack_as(file, false)
    }

    /// [`DecodeStepWeights::pack`] for the kernel with its GEMVs on tensor cores (`FUSE_STEP_MMA`) when
    /// `tensor_cores`.
    pub fn pack_as(file: &GgufFile, tensor_cores: bool) -> Result<DecodeStepWeights> {
        let config = Config::from_gguf(file)?;
        let shape = StepShape::of_build(&config, tensor_cores)?;
        let (h, kh) = (shape.hidden, shape.hidden / 32);
        let layout = shape.share_layout();
        let share = shape.share_bytes();
        let mut shares = vec![0u8; shape.layers * STEP_SHARES * share];
        for l in 0..shape.layers {
            let name = |part: &str| format!("blk.{l}.{part}.weight");
            let kv = shape.kv_heads * HEAD_DIM;
            let mut qkv = q4_1_rows(file, &name("attn_q"), h, h, Some(shape.heads))?;
            qkv.extend(q4_1_rows(file, &name("attn_k"), kv, h, Some(shape.kv_heads))?);
            qkv.extend(q4_1_rows(file, &name("attn_v"), kv, h, None)?);
            let o = q4_1_rows(file, &name("attn_output"), h, h, None)?;
            let gate = q4_1_rows(file, &name("ffn_gate"), shape.intermediate, h, None)?;
            let up = q4_1_rows(file, &name("ffn_up"), shape.intermediate, h, None)?;
            let down = q4_1_rows(file, &name("ffn_down"), h, shape.intermediate, None)?;
            let norm1 = f32_vector(file, &name("attn_norm"), h)?;
            let norm2 = f32_vector(file, &name("ffn_norm"), h)?;
            let [r_qkv, r_o, r_gu, r_d] = shape.rows();
            for rank in 0..STEP_SHARES {
                let out = &mut shares[(l * STEP_SHARES + rank) * share..][..share];
                let tiles = shape.tensor_cores;
                put_rows(out, layout[0], layout[1], &qkv, kh, (0..r_qkv).map(|r| rank * r_qkv + r), tiles);
                put_rows(out, layout[2], layout[3], &o, kh, (0..r_o).map(|r| rank * r_o + r), tiles);
                let half = r_gu / 2;
                let gate_up: Vec<[u8; Q4_1_BYTES]> = (0..r_gu)
                    .flat_map(|r| {
                        let (m, row) = if r < half { (&gate, rank * half + r) } else { (&up, rank * half + r - half) };
                        m[row * kh..(row + 1) * kh].iter().copied()
                    })
                    .collect();
                put_rows(out, layout[4], layout[5], &gate_up, kh, 0..r_gu, tiles);
                put_rows(
                    out,
                    layout[6],
                    layout[7],
                    &down,
                    shape.intermediate / 32,
                    (0..r_d).map(|r| rank * r_d + r),
                    tiles,
                );
                for (i, v) in norm1.iter().enumerate() {
                    out[layout[8] + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
                }
                for (i, v) in norm2.iter().enumerate() {
                    out[layout[9] + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        let (head_q, head_d) = token_matrix(file, shape.vocab, h)?;
        let rope = rope_table(config.rope_theta, shape.max_positions);
        Ok(DecodeStepWeights {
            shape,
            shares,
            head_q,
            head_d,
            out_norm: f32_vector(file, "output_norm.weight", h)?,
            rope,
        })
    }

    /// Weights of `config`'s shapes with random values (Q4_1 scales near 0.008, minimums near -8 scales,
    /// random nibbles; a random token matrix; norms near 1), seeded: for timing without a model file.
    pub fn random(config: &Config, seed: u64) -> Result<DecodeStepWeights> {
        Self::random_as(config, seed, false)
    }

    /// [`DecodeStepWeights::random`] laid out for the GEMVs on tensor cores when `tensor_cores`.
    pub fn random_as(config: &Config, seed: u64, tensor_cores: bool) -> Result<DecodeStepWeights> {
        let shape = StepShape::of_build(config, tensor_cores)?;
        let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 32) as u32
        };
        let f16_bits = |x: f32| half::f16::from_f32(x).to_bits();
        let layout = shape.share_layout();
        let share = shape.share_bytes();
        let mut shares = vec![0u8; shape.layers * STEP_SHARES * share];
        for block in shares.chunks_exact_mut(share) {
            for stage in 0..4 {
                let (q, dm, end) = (layout[2 * stage], layout[2 * stage + 1], layout[2 * stage + 2]);
                block[q..dm].iter_mut().for_each(|b| *b = next() as u8);
                for pair in block[dm..end].chunks_exact_mut(4) {
                    let d = 0.004 + (next() % 1000) as f32 * 8e-6;
                    pair[..2].copy_from_slice(&f16_bits(d).to_le_bytes());
                    pair[2..].copy_from_slice(&f16_bits(-7.5 * d).to_le_bytes());
                }
            }
            for i in 0..2 * shape.hidden {
                block[layout[8] + 4 * i..][..4].copy_from_slice(&(0.9 + (next() % 200) as f32 * 1e-3).to_le_bytes());
            }
        }
        let head_q = (0..shape.vocab * shape.hidden).map(|_| (1 + next() % 255) as u8).collect();
        let head_d =
            (0..shape.vocab * shape.hidden / 32).map(|_| f16_bits(0.005 + (next() % 1000) as f32 * 1e-5)).collect();
        let out_norm = (0..shape.hidden).map(|_| 0.9 + (next() % 200) as f32 * 1e-3).collect();
        Ok(DecodeStepWeights {
            shape,
            shares,
            head_q,
            head_d,
            out_norm,
            rope: rope_table(config.rope_theta, shape.max_positions),
        })
    }

    /// The kernel on `device` (an sm_90 GPU) with these weights uploaded.
    pub fn kernel(&self, device: &Device) -> Result<fuse::DecodeStep> {
        let s = self.shape;
        let defines = s.defines();
        Ok(fuse::DecodeStep::new(
            device,
            fuse::DecodeStepWeightsRef {
                defines: &defines,
                shared_bytes: s.shared_memory_bytes(),
                layers: s.layers,
                kv_heads: s.kv_heads,
                hidden: s.hidden,
                vocab: s.vocab,
                max_positions: s.max_positions,
                shares: &self.shares,
                head_q: &self.head_q,
                head_d: &self.head_d,
                out_norm: &self.out_norm,
                rope: &self.rope,
            },
        )?)
    }
}

/// The Q4_1 blocks of the `rows` x `cols` matrix `name` ([rows][cols / 32]), its rows in Hugging Face's
/// half-split order when `heads` is given (a query or key projection).
fn q4_1_rows(
    file: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
    heads: Option<usize>,
) -> Result<Vec<[u8; Q4_1_BYTES]>> {
    let info = file.tensor_info(name)?;
    if info.ggml_type != GgmlType::Q4_1 || info.shape() != [rows, cols] {
        return Err(Error::BadShape {
            what: format!(
                "{name} is {} {:?}; the one-launch decode step reads Q4_1 [{rows}, {cols}]",
                info.ggml_type,
                info.shape()
            ),
        });
    }
    let blocks: Vec<[u8; Q4_1_BYTES]> =
        file.tensor_bytes(name)?.chunks_exact(Q4_1_BYTES).map(|b| b.try_into().expect("20-byte chunks")).collect();
    match heads {
        Some(heads) => unpermute_rotary_rows(&blocks, rows, cols / 32, heads),
        None => Ok(blocks),
    }
}

/// Writes the given rows of `m` ([rows][kbs] blocks) into a share, rows numbered in the share from 0: their
/// nibbles at `q_at` ([row][kb][16]) and (d, m) at `dm_at` ([row][kb][4]); or, in `tiles` of 16 rows (the
/// tensor-core GEMVs), the nibbles [tile][kb][lane 4g + t][rows g, g + 8] as words of bytes 2t, 2t + 8,
/// 2t + 1, 2t + 9, and (d, m) [tile][kb][g][rows g, g + 8].
fn put_rows(
    out: &mut [u8],
    q_at: usize,
    dm_at: usize,
    m: &[[u8; Q4_1_BYTES]],
    kbs: usize,
    rows: impl Iterator<Item = usize>,
    tiles: bool,
) {
    for (r, row) in rows.enumerate() {
        for kb in 0..kbs {
            let block = &m[row * kbs + kb];
            if !tiles {
                out[q_at + (r * kbs + kb) * 16..][..16].copy_from_slice(&block[4..]);
                out[dm_at + (r * kbs + kb) * 4..][..4].copy_from_slice(&block[..4]);
                continue;
            }
            let (unit, g, second) = ((r / 16) * kbs + kb, r % 8, (r % 16) / 8);
            let qs = &block[4..];
            for t in 0..4 {
                let word = [qs[2 * t], qs[2 * t + 8], qs[2 * t + 1], qs[2 * t + 9]];
                out[q_at + ((unit * 32 + 4 * g + t) * 2 + second) * 4..][..4].copy_from_slice(&word);
            }
            out[dm_at + ((unit * 8 + g) * 2 + second) * 4..][..4].copy_from_slice(&block[..4]);
        }
    }
}

fn f32_vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>> {
    let v = file.tensor_f32(name)?;
    if v.len() != len {
        return Err(Error::BadShape { what: format!("{name} has {} values, expected {len}", v.len()) });
    }
    Ok(v)
}

/// The Q8_0 token matrix as value + 128 bytes [vocab][hidden] and f16 scale bits [vocab][hidden / 32].
fn token_matrix(file: &GgufFile, vocab: usize, hidden: usize) -> Result<(Vec<u8>, Vec<u16>)> {
    let name = "token_embd.weight";
    let info = file.tensor_info(name)?;
    if info.ggml_type != GgmlType::Q8_0 || info.shape() != [vocab, hidden] {
        return Err(Error::BadShape {
            what: format!(
                "{name} is {} {:?}; the one-launch decode step reads Q8_0 [{vocab}, {hidden}]",
                info.ggml_type,
                info.shape()
            ),
        });
    }
    let bytes = file.tensor_bytes(name)?;
    let mut q = Vec::with_capacity(vocab * hidden);
    let mut d = Vec::with_capacity(vocab * hidden / 32);
    for block in bytes.chunks_exact(Q8_0_BYTES) {
        d.push(u16::from_le_bytes([block[0], block[1]]));
        q.extend(block[2..].iter().map(|&b| (b as i8 as i16 + 128) as u8));
    }
    Ok((q, d))
}

/// The loader's rotary cos and sin tables for p < `positions`, a row a position: its 32 cosines, then its 32
/// sines.
fn rope_table(theta: f64, positions: usize) -> Vec<f32> {
    let (cos, sin) = rotary_cos_sin(theta, HEAD_DIM, positions);
    cos.chunks(HEAD_DIM / 2).zip(sin.chunks(HEAD_DIM / 2)).flat_map(|(c, s)| c.iter().chain(s).copied()).collect()
}

#[cfg(test)]
#[path = "decode_step_tests.rs"]
mod tests;
