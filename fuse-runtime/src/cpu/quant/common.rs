//! Small pieces every kernel shares: f16 scales and the packed 6-bit scales of Q4_K / Q5_K.

/// An f16 (IEEE binary16 bits) as f32, exactly.
#[inline]
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits >> 15) as u32) << 31;
    let exponent = ((bits >> 10) & 0x1f) as u32;
    let mantissa = (bits & 0x3ff) as u32;
    let magnitude = match exponent {
        // Subnormal or zero: mantissa * 2^-24 (exact in f32).
        0 => {
            let v = mantissa as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        0x1f => 0x7f80_0000 | (mantissa << 13),
        e => ((e + 112) << 23) | (mantissa << 13),
    };
    f32::from_bits(sign | magnitude)
}

/// The f16 at byte `at` of `block`.
#[inline]
pub(crate) fn half_at(block: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]]))
}

/// The 8 six-bit scales and 8 six-bit mins of a Q4_K / Q5_K block's 12 packed bytes (groups 0-3 in the low 6 bits
/// of bytes j and j + 4; groups 4-7 in the nibbles of bytes j + 4 with their top 2 bits in bytes j - 4 and j).
#[inline]
pub(crate) fn k4_scales(q: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        (sc[j], mn[j]) = if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
        };
    }
    (sc, mn)
}
