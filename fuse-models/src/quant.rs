//! Dequantisation of ggml blocks to f32 (or bf16): F32, F16, BF16, Q4_0, Q4_1 and Q8_0, with ggml's block
//! layouts (little-endian, scales in f16). Any other type is an error naming it. Work is split into chunks
//! of whole blocks across threads (rayon).

use half::{bf16, f16};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;

/// Elements per parallel work item: a multiple of every block length, small enough to stay in cache.
const CHUNK_ELEMENTS: usize = 8192;

/// Whether [`dequantize_f32`] handles `ty`.
pub fn is_supported(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, F32 | F16 | BF16 | Q4_0 | Q4_1 | Q8_0)
}

/// Dequantises `n_elements` values of type `ty` stored in `bytes` to f32.
pub fn dequantize_f32(ty: GgmlType, bytes: &[u8], n_elements: usize) -> Result<Vec<f32>> {
    let bytes_per_chunk = check(ty, bytes, n_elements)?;
    let mut out = vec![0f32; n_elements];
    out.par_chunks_mut(CHUNK_ELEMENTS)
        .zip(bytes.par_chunks(bytes_per_chunk))
        .for_each(|(dst, src)| decode_run(ty, src, dst));
    Ok(out)
}

/// Dequantises `n_elements` values of type `ty` stored in `bytes` to bf16 (through f32, chunk by chunk, so no
/// full-size f32 copy is made).
pub fn dequantize_bf16(ty: GgmlType, bytes: &[u8], n_elements: usize) -> Result<Vec<bf16>> {
    let bytes_per_chunk = check(ty, bytes, n_elements)?;
    let mut out = vec![bf16::ZERO; n_elements];
    out.par_chunks_mut(CHUNK_ELEMENTS).zip(bytes.par_chunks(bytes_per_chunk)).for_each(|(dst, src)| {
        let mut tmp = [0f32; CHUNK_ELEMENTS];
        let tmp = &mut tmp[..dst.len()];
        decode_run(ty, src, tmp);
        for (d, &t) in dst.iter_mut().zip(tmp.iter()) {
            *d = bf16::from_f32(t);
        }
    });
    Ok(out)
}

/// Checks type, element count and byte length; returns the input bytes per `CHUNK_ELEMENTS` outputs.
fn check(ty: GgmlType, bytes: &[u8], n_elements: usize) -> Result<usize> {
    if !is_supported(ty) {
        return Err(Error::UnsupportedType {
            type_name: ty.to_string(),
            what: "dequantisation handles F32, F16, BF16, Q4_0, Q4_1 and Q8_0",
        });
    }
    let (block_len, block_bytes) = ty.block_layout().expect("supported types have a layout");
    if !n_elements.is_multiple_of(block_len) {
        return Err(Error::BadLength {
            type_name: ty.to_string(),
            what: format!("{n_elements} elements is not a whole number of blocks of {block_len}"),
        });
    }
    let expected = n_elements / block_len * block_bytes;
    if bytes.len() != expected {
        return Err(Error::BadLength {
            type_name: ty.to_string(),
            what: format!("{n_elements} elements take {expected} bytes, got {}", bytes.len()),
        });
    }
    Ok(CHUNK_ELEMENTS / block_len * block_bytes)
}

/// Decodes whole blocks: `src` holds exactly the blocks of `dst.len()` elements.
fn decode_run(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        GgmlType::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        GgmlType::Q4_0 => {
            for (d, s) in dst.chunks_exact_mut(32).zip(src.chunks_exact(18)) {
                // Nibbles are unsigned 0..15 with an implicit offset of 8.
                decode_nibbles(f16_at(s, 0), -8.0 * f16_at(s, 0), &s[2..18], d);
            }
        }
        GgmlType::Q4_1 => {
            for (d, s) in dst.chunks_exact_mut(32).zip(src.chunks_exact(20)) {
                decode_nibbles(f16_at(s, 0), f16_at(s, 2), &s[4..20], d);
            }
        }
        GgmlType::Q8_0 => {
            for (d, s) in dst.chunks_exact_mut(32).zip(src.chunks_exact(34)) {
                let scale = f16_at(s, 0);
                for (x, &q) in d.iter_mut().zip(&s[2..34]) {
                    *x = (q as i8) as f32 * scale;
                }
            }
        }
        _ => unreachable!("`check` admits only supported types"),
    }
}

/// A 4-bit block: byte j holds element j in its low nibble and element j + 16 in its high nibble;
/// value = nibble * scale + min.
fn decode_nibbles(scale: f32, min: f32, qs: &[u8], out: &mut [f32]) {
    let (low, high) = out.split_at_mut(16);
    for ((l, h), &q) in low.iter_mut().zip(high.iter_mut()).zip(qs) {
        *l = (q & 0x0f) as f32 * scale + min;
        *h = (q >> 4) as f32 * scale + min;
    }
}

fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

#[cfg(test)]
mod tests;
