//! One block of each type into its values, in f32 and in ggml's order of operations.

use crate::DType;

/// An f16 (IEEE binary16 bits) as f32, exactly.
#[inline]
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits >> 15) as u32) << 31;
    let exponent = ((bits >> 10) & 0x1f) as u32;
    let mantissa = (bits & 0x3ff) as u32;
    let magnitude = match exponent {
        // Subnormal (or zero): mantissa * 2^-24.
        0 => return sign_of(sign) * mantissa as f32 * (1.0 / 16_777_216.0),
        0x1f => 0x7f80_0000 | (mantissa << 13),
        e => ((e + 112) << 23) | (mantissa << 13),
    };
    f32::from_bits(sign | magnitude)
}

#[inline]
fn sign_of(sign: u32) -> f32 {
    if sign == 0 {
        1.0
    } else {
        -1.0
    }
}

/// The f16 scale at byte `at` of `block`, as f32.
#[inline]
pub fn half_at(block: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]]))
}

/// The byte offsets of a block type's f16 scales: `d` first, then `m` or `dmin` where the type has one.
pub fn scale_fields(dtype: DType) -> &'static [usize] {
    match dtype {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q6_K => &[208],
        _ => &[],
    }
}

/// Decodes one block of `dtype` (`block`: its bytes) into `out` (its values). Panics on lengths other than
/// the type's (callers hold whole blocks).
pub fn dequantize_block(dtype: DType, block: &[u8], out: &mut [f32]) {
    let layout = dtype.block().expect("a block-quantized dtype");
    assert!(block.len() == layout.bytes && out.len() == layout.elements, "one {} block", dtype.name());
    match dtype {
        DType::Q4_0 => {
            let d = half_at(block, 0);
            for (j, &q) in block[2..18].iter().enumerate() {
                out[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
                out[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
            }
        }
        DType::Q4_1 => {
            let (d, m) = (half_at(block, 0), half_at(block, 2));
            for (j, &q) in block[4..20].iter().enumerate() {
                out[j] = (q & 0x0f) as f32 * d + m;
                out[j + 16] = (q >> 4) as f32 * d + m;
            }
        }
        DType::Q5_0 => {
            let d = half_at(block, 0);
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            for (j, &q) in block[6..22].iter().enumerate() {
                let high0 = ((qh >> j) << 4) & 0x10;
                let high1 = (qh >> (j + 12)) & 0x10;
                out[j] = (((q as u32 & 0x0f) | high0) as i32 - 16) as f32 * d;
                out[j + 16] = (((q as u32 >> 4) | high1) as i32 - 16) as f32 * d;
            }
        }
        DType::Q5_1 => {
            let (d, m) = (half_at(block, 0), half_at(block, 2));
            let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
            for (j, &q) in block[8..24].iter().enumerate() {
                let high0 = ((qh >> j) << 4) & 0x10;
                let high1 = (qh >> (j + 12)) & 0x10;
                out[j] = ((q as u32 & 0x0f) | high0) as f32 * d + m;
                out[j + 16] = ((q as u32 >> 4) | high1) as f32 * d + m;
            }
        }
        DType::Q8_0 => {
            let d = half_at(block, 0);
            for (o, &q) in out.iter_mut().zip(&block[2..34]) {
                *o = (q as i8) as f32 * d;
            }
        }
        DType::Q4_K | DType::Q5_K => {
            let (d, dmin) = (half_at(block, 0), half_at(block, 2));
            let scales = &block[4..16];
            let (qh, qs) =
                if dtype == DType::Q5_K { (&block[16..48], &block[48..176]) } else { (&[][..], &block[16..144]) };
            // Four chunks of 64 values: 32 bytes of nibbles, the low nibbles the chunk's first group of 32
            // (scale and min 2c), the high ones its second (2c + 1); Q5_K's fifth bits are bits 2c and 2c+1 of
            // each of qh's 32 bytes.
            for chunk in 0..4 {
                let (sc0, m0) = scale_min_k4(2 * chunk, scales);
                let (sc1, m1) = scale_min_k4(2 * chunk + 1, scales);
                let (d0, min0, d1, min1) = (d * sc0 as f32, dmin * m0 as f32, d * sc1 as f32, dmin * m1 as f32);
                let q = &qs[32 * chunk..32 * chunk + 32];
                for l in 0..32 {
                    let (mut lo, mut hi) = ((q[l] & 0x0f) as u32, (q[l] >> 4) as u32);
                    if dtype == DType::Q5_K {
                        lo += (((qh[l] >> (2 * chunk)) & 1) as u32) << 4;
                        hi += (((qh[l] >> (2 * chunk + 1)) & 1) as u32) << 4;
                    }
                    out[64 * chunk + l] = d0 * lo as f32 - min0;
                    out[64 * chunk + 32 + l] = d1 * hi as f32 - min1;
                }
            }
        }
        DType::Q6_K => {
            let (ql, qh, scales, d) = (&block[0..128], &block[128..192], &block[192..208], half_at(block, 208));
            // Two halves of 128 values: 64 bytes of low nibbles, 32 of 2-bit high parts, 8 scales.
            for half in 0..2 {
                let (ql, qh) = (&ql[64 * half..64 * half + 64], &qh[32 * half..32 * half + 32]);
                let sc = |i: usize| (scales[8 * half + i] as i8) as f32;
                let y = &mut out[128 * half..128 * half + 128];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    y[l] = d * sc(is) * q1 as f32;
                    y[l + 32] = d * sc(is + 2) * q2 as f32;
                    y[l + 64] = d * sc(is + 4) * q3 as f32;
                    y[l + 96] = d * sc(is + 6) * q4 as f32;
                }
            }
        }
        _ => unreachable!("block() is None for element types"),
    }
}

/// The 8 groups' 6-bit scales and mins of a Q4_K / Q5_K block's 12 packed bytes ([`scale_min_k4`] of each).
#[inline]
pub fn k4_scales(q: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        (sc[j], mn[j]) = scale_min_k4(j, q);
    }
    (sc, mn)
}

/// Group `j`'s 6-bit scale and min of a Q4_K / Q5_K block's 12 packed bytes: groups 0-3 in the low 6 bits of
/// bytes j and j + 4; groups 4-7 in the nibbles of bytes j + 4 with their top 2 bits in bytes j - 4 and j.
#[inline]
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}
