//! Block-quantized weights as GGUF (ggml) stores them: each block's layout and its dequantization, the
//! definition every quantized kernel (CPU and GPU) is tested against.
//!
//! A tensor of a block type holds its last axis in blocks of [`BlockLayout::elements`] values; a block is
//! [`BlockLayout::bytes`] bytes of little-endian scales (f16) and packed integers. Values are computed in f32
//! in ggml's order of operations, so they are what llama.cpp's dequantizer gives, bit for bit:
//!
//! | type | values a block | bytes | a value |
//! |---|---|---|---|
//! | `Q4_0` | 32 | 18 | `d * (q - 8)`, q 4 bits |
//! | `Q4_1` | 32 | 20 | `d * q + m`, q 4 bits |
//! | `Q5_0` | 32 | 22 | `d * (q - 16)`, q 5 bits (the fifth in a 32-bit mask) |
//! | `Q5_1` | 32 | 24 | `d * q + m`, q 5 bits |
//! | `Q8_0` | 32 | 34 | `d * q`, q a signed byte |
//! | `Q4_K` | 256 | 144 | `d * sc * q - dmin * m`, 8 groups of 32 with 6-bit scale sc and min m, q 4 bits |
//! | `Q5_K` | 256 | 176 | as Q4_K with 5-bit q |
//! | `Q6_K` | 256 | 210 | `d * sc * (q - 32)`, 16 groups of 16 with a signed 8-bit scale, q 6 bits |
//!
//! `d`, `m` and `dmin` are f16.

mod blocks;

pub use blocks::{dequantize_block, half_at, k4_scales, scale_fields};

use crate::{BlockLayout, DType};

/// Why bytes are not a whole number of blocks of a type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantError(pub String);

impl std::fmt::Display for QuantError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for QuantError {}

fn layout(dtype: DType) -> Result<BlockLayout, QuantError> {
    dtype.block().ok_or_else(|| QuantError(format!("{} is not a block-quantized type", dtype.name())))
}

/// The values of `bytes` (whole blocks of `dtype`) into `out` (as many values as the blocks hold).
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let b = layout(dtype)?;
    if bytes.len() % b.bytes != 0 || bytes.len() / b.bytes * b.elements != out.len() {
        return Err(QuantError(format!(
            "{} bytes of {} are not {} values ({} bytes hold {} values a block)",
            bytes.len(),
            dtype.name(),
            out.len(),
            b.bytes,
            b.elements
        )));
    }
    for (block, values) in bytes.chunks_exact(b.bytes).zip(out.chunks_exact_mut(b.elements)) {
        dequantize_block(dtype, block, values);
    }
    Ok(())
}

/// The values of `bytes` (whole blocks of `dtype`) as a new vector.
pub fn dequantize_to_vec(dtype: DType, bytes: &[u8]) -> Result<Vec<f32>, QuantError> {
    let b = layout(dtype)?;
    let mut out = vec![0.0; bytes.len() / b.bytes * b.elements];
    dequantize(dtype, bytes, &mut out)?;
    Ok(out)
}

/// Value `index` of a tensor whose elements, in row-major order, are the blocks of `bytes` (the block holding
/// it is decoded: for the odd element a view reads, not for bulk work).
pub fn dequantize_element(dtype: DType, bytes: &[u8], index: usize) -> f32 {
    let b = dtype.block().expect("a block-quantized dtype");
    let block = &bytes[index / b.elements * b.bytes..][..b.bytes];
    let mut values = [0.0f32; 256];
    dequantize_block(dtype, block, &mut values[..b.elements]);
    values[index % b.elements]
}

/// `blocks` blocks of `dtype` from a seeded generator: random integers and random finite f16 scales (2^-10 to
/// 2^-4 for the plain types, 2^-14 to 2^-8 for the K types' super-block scales and mins), so that values are
/// of the sizes real weights have; for tests. The same arguments give the same bytes.
pub fn random_blocks(dtype: DType, blocks: usize, seed: u64) -> Vec<u8> {
    let b = dtype.block().expect("a block-quantized dtype");
    let mut rng = crate::SplitMix64::new(seed ^ 0x9E37_79B9_7F4A_7C15);
    let mut next = move || rng.next_u64();
    let mut bytes: Vec<u8> = (0..blocks * b.bytes).map(|_| next() as u8).collect();
    for block in bytes.chunks_exact_mut(b.bytes) {
        for (k, at) in scale_fields(dtype).iter().enumerate() {
            // An f16 of a random exponent and mantissa; the plain types' d of either sign, the K types'
            // super-block scales and every min positive.
            let r = next();
            let plain = b.elements == 32;
            let sign = u16::from(k == 0 && plain && r & 1 == 1) << 15;
            let exponent = if plain { 5 } else { 1 } + (r >> 1) % 6;
            let bits = sign | (exponent as u16) << 10 | ((r >> 8) & 0x3ff) as u16;
            block[*at..*at + 2].copy_from_slice(&bits.to_le_bytes());
        }
    }
    bytes
}

#[cfg(test)]
mod tests;
