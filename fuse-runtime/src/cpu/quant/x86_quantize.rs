//! The activations' 8-bit rows (`q8.rs`) with AVX-512: the same arithmetic as the portable code, value for
//! value (block maximum, `127 / max`, round half to even, the sums of 16, the residual `x - d q` without a fused
//! multiply-add), 16 values an instruction. At prefill the rows are quantized for every product (two terms on
//! AMX), 18% of SmolLM2's prefill in the portable code.

use std::arch::x86_64::*;

/// The largest magnitude of `x` (a multiple of 16 values). Only called where AVX-512 (F, BW) is available.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn abs_max(x: &[f32]) -> f32 {
    let mut most = _mm512_setzero_ps();
    for v in x.chunks_exact(16) {
        most = _mm512_max_ps(most, _mm512_abs_ps(_mm512_loadu_ps(v.as_ptr())));
    }
    _mm512_reduce_max_ps(most)
}

/// `super::q8::round_blocks`' values and sums of 16: block b of `x` times `id(b)`, clamped, rounded. Only called
/// where AVX-512 (F, BW) is available; `block` a multiple of 16.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn round_blocks(
    x: &[f32],
    block: usize,
    id: &dyn Fn(usize) -> f32,
    qs: &mut [i8],
    bsums: &mut [i16],
) {
    let (lo, hi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
    for (b, (x, q)) in x.chunks_exact(block).zip(qs.chunks_exact_mut(block)).enumerate() {
        let idv = _mm512_set1_ps(id(b));
        for (i, (v, q)) in x.chunks_exact(16).zip(q.chunks_exact_mut(16)).enumerate() {
            let scaled = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(v.as_ptr()), idv), lo), hi);
            // The current rounding mode (round half to even, Rust's default) as the portable code's.
            let ints = _mm512_cvtps_epi32(scaled);
            _mm_storeu_si128(q.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(ints));
            bsums[b * block / 16 + i] = _mm512_reduce_add_epi32(ints) as i16;
        }
    }
}

/// `out[j] = x[j] - d[j / block] * q[j]` (a product, then a difference: no fused multiply-add, as the portable
/// code). Only called where AVX-512 F is available; `block` a multiple of 16.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn residual(x: &[f32], block: usize, qs: &[i8], d: &[f32], out: &mut [f32]) {
    for (j, ((x, q), out)) in x.chunks_exact(16).zip(qs.chunks_exact(16)).zip(out.chunks_exact_mut(16)).enumerate() {
        let q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q.as_ptr() as *const __m128i)));
        let r = _mm512_sub_ps(_mm512_loadu_ps(x.as_ptr()), _mm512_mul_ps(_mm512_set1_ps(d[j * 16 / block]), q));
        _mm512_storeu_ps(out.as_mut_ptr(), r);
    }
}
