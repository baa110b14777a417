//! Strategy 2 (the 8-bit activations) on x86-64 AVX-512 (F, BW, VL) for the K types of 4 and 5 bits (Q4_K,
//! Q5_K: most of a Q4_K_M file): a chunk of 64 values (two groups of 32) is one register of bytes, multiplied
//! with the 64 activations by `vpmaddubsw` and its two groups' 6-bit scales folded in by `vpmaddwd`, half the
//! instructions of the AVX2 kernel for the same bytes; the scales and mins are unpacked from three words
//! (`x86_f32::k_scale_bytes`). The
//! integer sums of a block are exact, so results equal the AVX2 and scalar kernels' up to f32 summation order.

use super::q8::Q8Row;
use super::x86_f32::k_scale_bytes;
use super::x86_q8::{f16, hsum4, k_min_terms, q5_bits};
use fuse_ir::DType;
use std::arch::x86_64::*;

/// Whether this file has a kernel for `dtype`.
pub(super) fn covers(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_K | DType::Q5_K)
}

/// One row of W against `xs` (1 to 4 quantized rows). Only called where `Isa::Avx512.available()` and
/// `covers(dtype)`.
pub(super) fn dot_rows_avx512(dtype: DType, row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    macro_rules! go {
        ($five:expr) => {
            // Safety: the dispatcher checked the features; the lengths are checked by matmul_quantized.
            unsafe {
                match xs.len() {
                    1 => qk45::<1, $five>(row, xs, out),
                    2 => qk45::<2, $five>(row, xs, out),
                    3 => qk45::<3, $five>(row, xs, out),
                    4 => qk45::<4, $five>(row, xs, out),
                    _ => unreachable!("1 to 4 rows"),
                }
            }
        };
    }
    match dtype {
        DType::Q4_K => go!(false),
        DType::Q5_K => go!(true),
        _ => unreachable!("Q4_K or Q5_K"),
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn qk45<const R: usize, const FIVE: bool>(row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = row.len() / bytes;
    let m4 = _mm256_set1_epi8(0x0f);
    // Chunk c's scale lanes: 16 x group 2c's scale (its low nibbles), then 16 x group 2c + 1's.
    let pick = |c: i16| {
        let (a, b) = (2 * c, 2 * c + 1);
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(a)), _mm256_set1_epi16(b), 1)
    };
    let picks = [pick(0), pick(1), pick(2), pick(3)];
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let mut macc = [_mm_setzero_ps(); R];
    for blk in 0..nb {
        let b = row.as_ptr().add(blk * bytes);
        let (d, dmin) = (f16(b), f16(b.add(2)));
        let (sc, mn) = k_scale_bytes(b.add(4));
        let scales = _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(_mm_cvtsi64_si128(sc as i64)));
        let mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mn as i64));
        let qs = b.add(if FIVE { 48 } else { 16 });
        let qh = if FIVE { _mm256_loadu_si256(b.add(16) as *const __m256i) } else { _mm256_setzero_si256() };
        let mut sumi = [_mm512_setzero_si512(); R];
        for (c, pick) in picks.iter().enumerate() {
            let q = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
            let (mut lo, mut hi) = (_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            if FIVE {
                lo = _mm256_or_si256(lo, q5_bits(qh, 2 * c as i32));
                hi = _mm256_or_si256(hi, q5_bits(qh, 2 * c as i32 + 1));
            }
            let w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            let s = _mm512_permutexvar_epi16(*pick, scales);
            for r in 0..R {
                let y = _mm512_loadu_si512(xs[r].qs.as_ptr().add(256 * blk + 64 * c) as *const _);
                sumi[r] = _mm512_add_epi32(sumi[r], _mm512_madd_epi16(_mm512_maddubs_epi16(w, y), s));
            }
        }
        let t = blk & 1;
        for r in 0..R {
            let x = &xs[r];
            let dx = *x.d.get_unchecked(blk);
            acc[r][t] = _mm512_fmadd_ps(_mm512_set1_ps(dx * d), _mm512_cvtepi32_ps(sumi[r]), acc[r][t]);
            macc[r] = k_min_terms(mins, x, blk, -dx * dmin, macc[r]);
        }
    }
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])) + hsum4(macc[r]);
    }
}
