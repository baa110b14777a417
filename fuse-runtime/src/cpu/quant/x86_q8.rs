//! Strategy 2 on x86-64 AVX2 + FMA + F16C: a block's integers unpacked to bytes once and multiplied with up to 4
//! rows of 8-bit activations by `vpmaddubsw` (unsigned x signed bytes to i16 pairs) and `vpmaddwd` (to i32, with the
//! K types' scales folded in), the scales applied in f32 once a block.

use super::q8::Q8Row;
use super::x86_f32::hsum;
use fuse_ir::quant::k4_scales;
use fuse_ir::DType;
use std::arch::x86_64::*;

/// One row of W against `xs` (1 to 4 quantized rows). Only called where `Isa::Avx2.available()`.
pub(super) fn dot_rows_avx2(dtype: DType, row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    macro_rules! go {
        ($f:ident $(, $c:expr)?) => {
            // Safety: the dispatcher checked AVX2, FMA and F16C; the lengths are checked by matmul_quantized.
            unsafe {
                match xs.len() {
                    1 => $f::<1 $(, $c)?>(row, xs, out),
                    2 => $f::<2 $(, $c)?>(row, xs, out),
                    3 => $f::<3 $(, $c)?>(row, xs, out),
                    4 => $f::<4 $(, $c)?>(row, xs, out),
                    _ => unreachable!("1 to 4 rows"),
                }
            }
        };
    }
    match dtype {
        DType::Q4_0 => go!(q32, 0),
        DType::Q4_1 => go!(q32, 1),
        DType::Q5_0 => go!(q32, 2),
        DType::Q5_1 => go!(q32, 3),
        DType::Q8_0 => go!(q32, 4),
        DType::Q4_K => go!(qk45, false),
        DType::Q5_K => go!(qk45, true),
        DType::Q6_K => go!(q6k),
        _ => unreachable!("a block type"),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn f16(p: *const u8) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes([*p, *p.add(1)]) as i32)))
}

/// Unsigned bytes `w` times signed bytes `y`, summed in fours (eight i32 lanes).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_us8(w: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), _mm256_set1_epi16(1))
}

/// The 16 nibble-packed bytes at `p` as 32 bytes: low nibbles then high nibbles (values 0-15, in value order).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles32(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p as *const __m128i);
    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f))
}

/// Byte i of the result is 0x10 where bit i of `bits` is set, else 0.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bits32(bits: u32) -> __m256i {
    let spread = _mm256_setr_epi64x(0, 0x0101_0101_0101_0101, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303);
    let b = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), spread);
    let b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_and_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10))
}

/// The 32-element types, T: 0 Q4_0, 1 Q4_1, 2 Q5_0, 3 Q5_1, 4 Q8_0. Symmetric types (offset applied, signed) use
/// |w| x sign(y, w); the ones with a min add `m * dx * sum(y)` (from the activations' per-16 sums).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q32<const R: usize, const T: u8>(row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    let bytes = [18, 20, 22, 24, 34][T as usize];
    let nb = row.len() / bytes;
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    let mut macc = [[0.0f32; 2]; R];
    for blk in 0..nb {
        let b = row.as_ptr().add(blk * bytes);
        let d = f16(b);
        let w = match T {
            0 => _mm256_sub_epi8(nibbles32(b.add(2)), _mm256_set1_epi8(8)),
            1 => nibbles32(b.add(4)),
            2 => {
                let hb = bits32(u32::from_le_bytes(*(b.add(2) as *const [u8; 4])));
                _mm256_sub_epi8(_mm256_or_si256(nibbles32(b.add(6)), hb), _mm256_set1_epi8(16))
            }
            3 => _mm256_or_si256(nibbles32(b.add(8)), bits32(u32::from_le_bytes(*(b.add(4) as *const [u8; 4])))),
            _ => _mm256_loadu_si256(b.add(2) as *const __m256i),
        };
        let signed = T == 0 || T == 2 || T == 4;
        let aw = if signed { _mm256_abs_epi8(w) } else { w };
        let m = if signed { 0.0 } else { f16(b.add(2)) };
        let t = blk & 1;
        for r in 0..R {
            let x = &xs[r];
            let y = _mm256_loadu_si256(x.qs.as_ptr().add(32 * blk) as *const __m256i);
            let y = if signed { _mm256_sign_epi8(y, w) } else { y };
            let dx = *x.d.get_unchecked(blk);
            acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(dot_us8(aw, y)), acc[r][t]);
            if !signed {
                macc[r][t] += m * *x.gs.get_unchecked(blk);
            }
        }
    }
    for r in 0..R {
        out[r] = hsum(_mm256_add_ps(acc[r][0], acc[r][1])) + (macc[r][0] + macc[r][1]);
    }
}

/// Q4_K (FIVE false) and Q5_K: per chunk of 64 values the low / high nibbles (plus Q5_K's fifth bits), their
/// products with the 6-bit scales folded in by `vpmaddwd`; the mins times the activations' group sums.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn qk45<const R: usize, const FIVE: bool>(row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = row.len() / bytes;
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    let mut macc = [_mm_setzero_ps(); R];
    for blk in 0..nb {
        let b = row.as_ptr().add(blk * bytes);
        prefetch(b, bytes);
        let (d, dmin) = (f16(b), f16(b.add(2)));
        let (sc, mn) = k4_scales(std::slice::from_raw_parts(b.add(4), 12));
        let mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(mn.as_ptr() as *const __m128i));
        let qs = b.add(if FIVE { 48 } else { 16 });
        let qh = if FIVE { _mm256_loadu_si256(b.add(16) as *const __m256i) } else { _mm256_setzero_si256() };
        let mut sumi = [_mm256_setzero_si256(); R];
        for c in 0..4 {
            let q = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
            let (mut lo, mut hi) = (_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            if FIVE {
                lo = _mm256_or_si256(lo, q5_bits(qh, 2 * c as i32));
                hi = _mm256_or_si256(hi, q5_bits(qh, 2 * c as i32 + 1));
            }
            let (sl, sh) = (_mm256_set1_epi16(sc[2 * c] as i16), _mm256_set1_epi16(sc[2 * c + 1] as i16));
            for r in 0..R {
                let y = xs[r].qs.as_ptr().add(256 * blk + 64 * c) as *const __m256i;
                let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(y)), sl);
                let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256(y.add(1))), sh);
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(pl, ph));
            }
        }
        let t = blk & 1;
        for r in 0..R {
            let x = &xs[r];
            let dx = *x.d.get_unchecked(blk);
            acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * d), _mm256_cvtepi32_ps(sumi[r]), acc[r][t]);
            macc[r] = k_min_terms(mins, x, blk, -dx * dmin, macc[r]);
        }
    }
    for r in 0..R {
        out[r] = hsum(_mm256_add_ps(acc[r][0], acc[r][1])) + hsum4(macc[r]);
    }
}

/// A K block's min terms for one quantized row, added to `acc`: its 8 groups' `mins` (i16) times the row's sums
/// over each group of 32 (from its sums of 16 in block `blk`), times `factor` (`-dx * dmin`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn k_min_terms(mins: __m128i, x: &Q8Row, blk: usize, factor: f32, acc: __m128) -> __m128 {
    let bs = _mm256_loadu_si256(x.bsums.as_ptr().add(16 * blk) as *const __m256i);
    let gs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    _mm_fmadd_ps(_mm_set1_ps(factor), _mm_cvtepi32_ps(_mm_madd_epi16(mins, gs)), acc)
}

/// The sum of the four lanes of `m`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn hsum4(m: __m128) -> f32 {
    let m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)))
}

/// Q6_K group g's scales as 16 i16: scale 2g for its first 16 values (the low 128 bits), 2g + 1 for the rest.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_scale(scales: __m128i, g: i64) -> __m256i {
    let ix = _mm_set_epi64x(0x0101_0101_0101_0101 * (2 * g + 1), 0x0101_0101_0101_0101 * (2 * g));
    _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, ix))
}

/// Q5_K's fifth bits for the values at bit `s` of each of the 32 bytes `qh`: 0x10 or 0.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q5_bits(qh: __m256i, s: i32) -> __m256i {
    _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), _mm256_set1_epi8(1)), 4)
}

/// Q6_K: 6-bit values 0-63 (unsigned) times the activations, scales folded in by `vpmaddwd`, then the offset
/// `32 * sum(sc * group sums)` taken off in integers.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k<const R: usize>(row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    let nb = row.len() / 210;
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for blk in 0..nb {
        let b = row.as_ptr().add(blk * 210);
        prefetch(b, 210);
        let d = f16(b.add(208));
        let scales = _mm_loadu_si128(b.add(192) as *const __m128i);
        let mut sumi = [_mm256_setzero_si256(); R];
        for h in 0..2 {
            let ql1 = _mm256_loadu_si256(b.add(64 * h) as *const __m256i);
            let ql2 = _mm256_loadu_si256(b.add(64 * h + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i);
            let q = [
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql2, m4),
                    _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(12)), 2),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_and_si256(qh, _mm256_set1_epi8(48)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql2, 4), m4),
                    _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(-64)), 2),
                ),
            ];
            let s = [
                q6_scale(scales, 4 * h as i64),
                q6_scale(scales, 4 * h as i64 + 1),
                q6_scale(scales, 4 * h as i64 + 2),
                q6_scale(scales, 4 * h as i64 + 3),
            ];
            for r in 0..R {
                let y = xs[r].qs.as_ptr().add(256 * blk + 128 * h) as *const __m256i;
                for i in 0..4 {
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[i], _mm256_loadu_si256(y.add(i))), s[i]);
                    sumi[r] = _mm256_add_epi32(sumi[r], p);
                }
            }
        }
        let scales16 = _mm256_cvtepi8_epi16(scales);
        let t = blk & 1;
        for r in 0..R {
            let x = &xs[r];
            let bs = _mm256_loadu_si256(x.bsums.as_ptr().add(16 * blk) as *const __m256i);
            let si = _mm256_sub_epi32(sumi[r], _mm256_slli_epi32(_mm256_madd_epi16(bs, scales16), 5));
            acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d.get_unchecked(blk) * d), _mm256_cvtepi32_ps(si), acc[r][t]);
        }
    }
    for r in 0..R {
        out[r] = hsum(_mm256_add_ps(acc[r][0], acc[r][1]));
    }
}

/// How far ahead of the block being read its weights are prefetched (bytes).
const PREFETCH: usize = 2048;

/// Prefetches the lines of the `bytes`-byte block `PREFETCH` bytes after `b` (the K kernels, AVX2 and AVX-512):
/// one thread's stream of weights otherwise waits on memory. Past the end of the weights nothing is read (a
/// prefetch does not fault).
#[inline(always)]
pub(super) fn prefetch(b: *const u8, bytes: usize) {
    let p = b.wrapping_add(PREFETCH);
    let mut o = 0;
    while o < bytes {
        // SAFETY: SSE prefetches are baseline on x86-64 and never fault, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o) as *const i8) };
        o += 64;
    }
}
