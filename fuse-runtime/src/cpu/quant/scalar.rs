//! Portable kernels, the fallback on every CPU and the definition the SIMD kernels are tested against.
//!
//! A kernel takes one row of W (whole blocks) and r rows of activations and writes the r dot products: each
//! block is decoded once and used for every activation row.

use super::q8::Q8Row;
use super::F32Row;
use fuse_ir::quant::{half_at, k4_scales};
use fuse_ir::DType;

/// Strategy 1: each block decoded to f32 (fuse_ir's reference decoder) and multiplied with the f32 rows `xs`;
/// `rows` holds whole rows of W, `out[j * xs.len() + i]`.
pub(crate) fn dot_rows_f32(dtype: DType, rows: &[u8], xs: &[F32Row], out: &mut [f32]) {
    let b = dtype.block().expect("a block type");
    let row_bytes = xs[0].x.len() / b.elements * b.bytes;
    for (row, out) in rows.chunks_exact(row_bytes).zip(out.chunks_exact_mut(xs.len())) {
        dot_row_f32(dtype, row, xs, out);
    }
}

fn dot_row_f32(dtype: DType, row: &[u8], xs: &[F32Row], out: &mut [f32]) {
    let b = dtype.block().expect("a block type");
    let mut values = [0.0f32; 256];
    let values = &mut values[..b.elements];
    let mut acc = [0.0f32; 16];
    let acc = &mut acc[..xs.len()];
    for (blk, block) in row.chunks_exact(b.bytes).enumerate() {
        fuse_ir::quant::dequantize_block(dtype, block, values);
        for (a, x) in acc.iter_mut().zip(xs) {
            let x = &x.x[blk * b.elements..][..b.elements];
            *a += values.iter().zip(x).fold(0.0f32, |s, (v, x)| s + v * x);
        }
    }
    out[..xs.len()].copy_from_slice(acc);
}

/// A block's integers as i8 (the types' offsets -8 / -16 / -32 applied where they have no min), in value order.
pub(crate) fn block_ints(dtype: DType, block: &[u8], q: &mut [i8]) {
    match dtype {
        DType::Q4_0 | DType::Q4_1 => {
            let off = if dtype == DType::Q4_0 { 8 } else { 0 };
            let at = if dtype == DType::Q4_0 { 2 } else { 4 };
            for (j, &v) in block[at..at + 16].iter().enumerate() {
                q[j] = (v & 0x0f) as i8 - off;
                q[j + 16] = (v >> 4) as i8 - off;
            }
        }
        DType::Q5_0 | DType::Q5_1 => {
            let (off, at) = if dtype == DType::Q5_0 { (16, 2) } else { (0, 4) };
            let qh = u32::from_le_bytes(block[at..at + 4].try_into().unwrap());
            for (j, &v) in block[at + 4..at + 20].iter().enumerate() {
                q[j] = ((v & 0x0f) | ((qh >> j) as u8 & 1) << 4) as i8 - off;
                q[j + 16] = ((v >> 4) | ((qh >> (j + 16)) as u8 & 1) << 4) as i8 - off;
            }
        }
        DType::Q8_0 => {
            for (q, &v) in q.iter_mut().zip(&block[2..34]) {
                *q = v as i8;
            }
        }
        DType::Q4_K | DType::Q5_K => {
            let (qh, qs) =
                if dtype == DType::Q5_K { (&block[16..48], &block[48..176]) } else { (&[][..], &block[16..144]) };
            for c in 0..4 {
                for l in 0..32 {
                    let (mut lo, mut hi) = (qs[32 * c + l] & 0x0f, qs[32 * c + l] >> 4);
                    if dtype == DType::Q5_K {
                        lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                        hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
                    }
                    q[64 * c + l] = lo as i8;
                    q[64 * c + 32 + l] = hi as i8;
                }
            }
        }
        DType::Q6_K => {
            let (ql, qh) = (&block[0..128], &block[128..192]);
            for h in 0..2 {
                let (ql, qh, q) = (&ql[64 * h..], &qh[32 * h..], &mut q[128 * h..]);
                for l in 0..32 {
                    q[l] = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i8 - 32;
                    q[l + 32] = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                    q[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                    q[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                }
            }
        }
        _ => unreachable!("a block type"),
    }
}

#[inline]
fn idot(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&a, &b)| a as i32 * b as i32).sum()
}

/// Strategy 2: integer dot products of the block's integers with the 8-bit activation rows `xs` (quantized in
/// blocks of 32 for the 32-element types, 256 for the K types), the scales applied in f32 once a block.
pub(crate) fn dot_rows_q8(dtype: DType, row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    let b = dtype.block().expect("a block type");
    let mut q = [0i8; 256];
    let q = &mut q[..b.elements];
    let mut acc = [0.0f32; 16];
    let acc = &mut acc[..xs.len()];
    for (blk, block) in row.chunks_exact(b.bytes).enumerate() {
        block_ints(dtype, block, q);
        for (a, x) in acc.iter_mut().zip(xs) {
            let (y, dx) = (&x.qs[blk * b.elements..][..b.elements], x.d[blk]);
            let bs = &x.bsums[blk * b.elements / 16..][..b.elements / 16];
            *a += match dtype {
                DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => half_at(block, 0) * dx * idot(q, y) as f32,
                DType::Q4_1 | DType::Q5_1 => {
                    let (d, m) = (half_at(block, 0), half_at(block, 2));
                    d * dx * idot(q, y) as f32 + m * x.gs[blk]
                }
                DType::Q4_K | DType::Q5_K => {
                    let (d, dmin) = (half_at(block, 0), half_at(block, 2));
                    let (sc, mn) = k4_scales(&block[4..16]);
                    let (mut si, mut mi) = (0i32, 0i32);
                    for g in 0..8 {
                        si += sc[g] as i32 * idot(&q[32 * g..][..32], &y[32 * g..][..32]);
                        mi += mn[g] as i32 * (bs[2 * g] as i32 + bs[2 * g + 1] as i32);
                    }
                    dx * (d * si as f32 - dmin * mi as f32)
                }
                DType::Q6_K => {
                    let d = half_at(block, 208);
                    let si: i32 = (0..16)
                        .map(|g| (block[192 + g] as i8) as i32 * idot(&q[16 * g..][..16], &y[16 * g..][..16]))
                        .sum();
                    dx * d * si as f32
                }
                _ => unreachable!("a block type"),
            };
        }
    }
    out[..xs.len()].copy_from_slice(acc);
}
