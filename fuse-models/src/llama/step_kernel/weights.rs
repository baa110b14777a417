//! The one-launch decode step's weights from a GGUF file, written at the [`StepLayout`]'s offsets: each layer's
//! Q4_1 matrices split over the [`STEP_SHARES`] blocks of a cluster (a block's rows of QKV, the output
//! projection, gate and up, down, then both norms' weights), the Q8_0 token matrix (tied embedding and LM
//! head) as value + 128 bytes and f16 scales, the final norm and the rope table. The file's blocks are copied
//! as they are (no dequantisation); the query and key rows are put back in Hugging Face's half-split order, as
//! [`crate::llama::Llama::load`] does.

use super::layout::{StageLayout, StepLayout, STEP_HEAD_DIM, STEP_SHARES};
use crate::ggml_type::GgmlType;
use crate::gguf::GgufFile;
use crate::llama::load::{rotary_cos_sin, Architecture, Config};
use crate::rotary::unpermute_rotary_rows;
use crate::{Error, Result};

const Q4_1_BYTES: usize = 20; // 32 weights: f16 d, f16 m, 16 bytes of nibbles
const Q8_0_BYTES: usize = 34; // 32 weights: f16 d, 32 i8
type Q4_1Block = [u8; Q4_1_BYTES];

/// The kernel's weights for one model, on the host, and the layout they were written for.
pub struct DecodeStepWeights {
    pub layout: StepLayout,
    /// `[layers][STEP_SHARES][share bytes]`
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
    /// Packs `file`'s weights (every layer matrix Q4_1, the token matrix Q8_0) for its shapes and eps.
    pub fn pack(file: &GgufFile) -> Result<DecodeStepWeights> {
        Self::pack_over(file, 0)
    }

    /// [`DecodeStepWeights::pack`] into shares first filled with `fill` (tests: a byte the packer leaves
    /// keeps it).
    pub(super) fn pack_over(file: &GgufFile, fill: u8) -> Result<DecodeStepWeights> {
        let config = Config::from_gguf(file)?;
        // The kernel has no q/k/v bias and reads the token matrix as the LM head.
        if config.architecture != Architecture::Llama || file.tensor_info("output.weight").is_ok() {
            return Err(Error::BadShape {
                what: format!(
                    "the one-launch decode step runs a `llama` file with a tied embedding (this one: `{}`{})",
                    config.architecture.name(),
                    if file.tensor_info("output.weight").is_ok() { ", with output.weight" } else { "" }
                ),
            });
        }
        let layout = StepLayout::of(&config)?;
        let s = layout.shape;
        let (h, share_bytes) = (s.hidden, layout.share.bytes);
        let mut shares = vec![fill; s.layers * STEP_SHARES * share_bytes];
        for l in 0..s.layers {
            let name = |part: &str| format!("blk.{l}.{part}.weight");
            let kv = s.kv_heads * STEP_HEAD_DIM;
            let mut qkv = q4_1_rows(file, &name("attn_q"), h, h, Some(s.heads))?;
            qkv.extend(q4_1_rows(file, &name("attn_k"), kv, h, Some(s.kv_heads))?);
            qkv.extend(q4_1_rows(file, &name("attn_v"), kv, h, None)?);
            let o = q4_1_rows(file, &name("attn_output"), h, h, None)?;
            let gate = q4_1_rows(file, &name("ffn_gate"), s.intermediate, h, None)?;
            let up = q4_1_rows(file, &name("ffn_up"), s.intermediate, h, None)?;
            let down = q4_1_rows(file, &name("ffn_down"), h, s.intermediate, None)?;
            let norm1 = f32_vector(file, &name("attn_norm"), h)?;
            let norm2 = f32_vector(file, &name("ffn_norm"), h)?;
            let sh = layout.share;
            for rank in 0..STEP_SHARES {
                let out = &mut shares[(l * STEP_SHARES + rank) * share_bytes..][..share_bytes];
                put_rows(out, &sh.qkv, |r| &qkv[(rank * sh.qkv.rows + r) * sh.qkv.blocks..][..sh.qkv.blocks]);
                put_rows(out, &sh.o, |r| &o[(rank * sh.o.rows + r) * sh.o.blocks..][..sh.o.blocks]);
                let half = sh.gate_up.rows / 2;
                put_rows(out, &sh.gate_up, |r| {
                    let (m, row) = if r < half { (&gate, rank * half + r) } else { (&up, rank * half + r - half) };
                    &m[row * sh.gate_up.blocks..][..sh.gate_up.blocks]
                });
                put_rows(out, &sh.down, |r| &down[(rank * sh.down.rows + r) * sh.down.blocks..][..sh.down.blocks]);
                put_f32s(&mut out[sh.norm1.offset..sh.norm1.end()], &norm1);
                put_f32s(&mut out[sh.norm2.offset..sh.norm2.end()], &norm2);
            }
        }
        let (head_q, head_d) = token_matrix(file, s.vocab, h)?;
        Ok(DecodeStepWeights {
            layout,
            shares,
            head_q,
            head_d,
            out_norm: f32_vector(file, "output_norm.weight", h)?,
            rope: rope_table(config.rope_theta, s.max_positions),
        })
    }

    /// Weights of `config`'s shapes with random values (Q4_1 scales near 0.008, minimums near -8 scales,
    /// random nibbles; a random token matrix; norms near 1), seeded: for timing without a model file.
    pub fn random(config: &Config, seed: u64) -> Result<DecodeStepWeights> {
        let layout = StepLayout::of(config)?;
        let s = layout.shape;
        let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 32) as u32
        };
        let f16_bits = |x: f32| half::f16::from_f32(x).to_bits();
        let mut shares = vec![0u8; s.layers * STEP_SHARES * layout.share.bytes];
        for block in shares.chunks_exact_mut(layout.share.bytes) {
            for stage in layout.share.stages() {
                block[stage.nibbles.offset..stage.nibbles.end()].iter_mut().for_each(|b| *b = next() as u8);
                for pair in block[stage.scales.offset..stage.scales.end()].chunks_exact_mut(4) {
                    let d = 0.004 + (next() % 1000) as f32 * 8e-6;
                    pair[..2].copy_from_slice(&f16_bits(d).to_le_bytes());
                    pair[2..].copy_from_slice(&f16_bits(-7.5 * d).to_le_bytes());
                }
            }
            for norm in [layout.share.norm1, layout.share.norm2] {
                let values: Vec<f32> = (0..s.hidden).map(|_| 0.9 + (next() % 200) as f32 * 1e-3).collect();
                put_f32s(&mut block[norm.offset..norm.end()], &values);
            }
        }
        let head_q = (0..s.vocab * s.hidden).map(|_| (1 + next() % 255) as u8).collect();
        let head_d = (0..s.vocab * s.hidden / 32).map(|_| f16_bits(0.005 + (next() % 1000) as f32 * 1e-5)).collect();
        let out_norm = (0..s.hidden).map(|_| 0.9 + (next() % 200) as f32 * 1e-3).collect();
        Ok(DecodeStepWeights {
            layout,
            shares,
            head_q,
            head_d,
            out_norm,
            rope: rope_table(config.rope_theta, s.max_positions),
        })
    }
}

/// Writes a stage's rows into a share: row r's blocks (`row(r)`, the stage's `blocks` of them) as nibbles
/// `[r][kb][16]` and (d, m) `[r][kb][4]` at the stage's regions.
fn put_rows<'a>(out: &mut [u8], stage: &StageLayout, row: impl Fn(usize) -> &'a [Q4_1Block]) {
    for r in 0..stage.rows {
        for (kb, block) in row(r).iter().enumerate() {
            let at = r * stage.blocks + kb;
            out[stage.nibbles.offset + at * 16..][..16].copy_from_slice(&block[4..]);
            out[stage.scales.offset + at * 4..][..4].copy_from_slice(&block[..4]);
        }
    }
}

fn put_f32s(out: &mut [u8], values: &[f32]) {
    for (bytes, v) in out.chunks_exact_mut(4).zip(values) {
        bytes.copy_from_slice(&v.to_le_bytes());
    }
}

/// The Q4_1 blocks of the `rows` x `cols` matrix `name` ([rows][cols / 32]), its rows in Hugging Face's
/// half-split order when `heads` is given (a query or key projection).
fn q4_1_rows(file: &GgufFile, name: &str, rows: usize, cols: usize, heads: Option<usize>) -> Result<Vec<Q4_1Block>> {
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
    let mut blocks = Vec::with_capacity(rows * cols / 32);
    for chunk in file.tensor_bytes(name)?.chunks_exact(Q4_1_BYTES) {
        let mut block = [0u8; Q4_1_BYTES];
        block.copy_from_slice(chunk);
        blocks.push(block);
    }
    match heads {
        Some(heads) => unpermute_rotary_rows(&blocks, rows, cols / 32, heads),
        None => Ok(blocks),
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
    let (cos, sin) = rotary_cos_sin(theta, STEP_HEAD_DIM, positions);
    cos.chunks(STEP_HEAD_DIM / 2)
        .zip(sin.chunks(STEP_HEAD_DIM / 2))
        .flat_map(|(c, s)| c.iter().chain(s).copied())
        .collect()
}
