//! Dequantisation of a file's tensors to f32 (or bf16): F32, F16, BF16 and every block type fuse reads
//! (`fuse::DType::QUANTIZED`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), the blocks by fuse's own
//! decoder (`fuse::ir::quant`, checked against gguf-py). Any other type is an error naming it. Work is split
//! into chunks of whole blocks across threads (rayon).

use half::{bf16, f16};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;

/// Elements per parallel work item: a multiple of every block length, small enough to stay in cache.
const CHUNK_ELEMENTS: usize = 8192;

/// Whether [`dequantize_f32`] handles `ty`.
pub fn is_supported(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) || ty.block_dtype().is_some()
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
            what: "fuse reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K",
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
        block => {
            let dtype = block.block_dtype().expect("`check` admits only supported types");
            fuse::ir::quant::dequantize(dtype, src, dst).expect("`check` gave whole blocks");
        }
    }
}

#[cfg(test)]
mod tests;
