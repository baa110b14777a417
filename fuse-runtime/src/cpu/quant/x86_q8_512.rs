//! Strategy 2 (the 8-bit activations) on x86-64 AVX-512 (F, BW, VL) for the K types (Q4_K, Q5_K, Q6_K: all of a
//! Q4_K_M file): a register holds 64 of a block's values as bytes, against 64 activations.
//! - Without VNNI, `vpmaddubsw` makes i16 pairs and `vpmaddwd` folds in the groups' scales, half the
//!   instructions of the AVX2 kernels for the same bytes.
//! - With AVX-512 VNNI, `vpdpbusd` sums each four products straight to i32 (at most 4 * 63 * 127, so it fits
//!   i16), `vpackssdw` packs two such registers into one of i16 and `vpdpwssd` multiplies by the scales and
//!   accumulates: 3 multiplying instructions for 128 values a row instead of 4, and no separate adds.
//!
//! Each kernel prefetches the weights 2 KB ahead (`x86_q8::prefetch`): one thread's stream of blocks is otherwise bound
//! by memory latency, not arithmetic (llama-3.2-1b Q4_K_M at 1 thread: 156 -> 95 ms a token with VNNI).
//!
//! The scales and mins of Q4_K / Q5_K are unpacked from three words (`x86_f32::k_scale_bytes`). The integer sums
//! of a block are exact, so results equal the AVX2 and scalar kernels' up to f32 summation order.

use super::q8::Q8Row;
use super::x86_f32::{hsum, k_scale_bytes};
use super::x86_q8::{f16, prefetch, q5_bits};
use fuse_ir::DType;
use std::arch::x86_64::*;

/// A Q4_K / Q5_K block's 8 mins (bytes of `mn`) times `-dmin`, as f32: with the activations' per-group factors
/// (`Q8Row::gs`, the group's q summed times its block's d) one FMA a row and block gives the min terms, where
/// summing the integer products of mins and sums of q first took seven instructions a row and block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn min_factors(mn: u64, dmin: f32) -> __m256 {
    let mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(mn as i64)));
    _mm256_mul_ps(mins, _mm256_set1_ps(-dmin))
}

/// Whether this file has a kernel for `dtype`.
pub(super) fn covers(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_K | DType::Q5_K | DType::Q6_K)
}

/// One row of W against `xs` (1 to 8 quantized rows). Only called where `Isa::Avx512.available()` and
/// `covers(dtype)`.
pub(super) fn dot_rows_avx512(dtype: DType, row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    dispatch::<false>(dtype, row, xs, out)
}

/// [`dot_rows_avx512`] with VNNI. Only called where `Isa::Avx512Vnni.available()` and `covers(dtype)`.
pub(super) fn dot_rows_vnni(dtype: DType, row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    dispatch::<true>(dtype, row, xs, out)
}

fn dispatch<const VNNI: bool>(dtype: DType, row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    macro_rules! go {
        ($f:ident $(, $c:expr)?) => {
            // Safety: the dispatcher checked the features (VNNI for the `_vnni` kernels); the lengths are checked
            // by matmul_quantized.
            unsafe {
                match xs.len() {
                    1 => $f::<1 $(, $c)?>(row, xs, out),
                    2 => $f::<2 $(, $c)?>(row, xs, out),
                    3 => $f::<3 $(, $c)?>(row, xs, out),
                    4 => $f::<4 $(, $c)?>(row, xs, out),
                    5 => $f::<5 $(, $c)?>(row, xs, out),
                    6 => $f::<6 $(, $c)?>(row, xs, out),
                    7 => $f::<7 $(, $c)?>(row, xs, out),
                    8 => $f::<8 $(, $c)?>(row, xs, out),
                    _ => unreachable!("1 to 8 rows"),
                }
            }
        };
    }
    match (dtype, VNNI) {
        (DType::Q4_K, false) => go!(qk45, false),
        (DType::Q5_K, false) => go!(qk45, true),
        (DType::Q6_K, false) => go!(q6k),
        (DType::Q4_K, true) => go!(qk45_vnni, false),
        (DType::Q5_K, true) => go!(qk45_vnni, true),
        (DType::Q6_K, true) => go!(q6k_vnni),
        _ => unreachable!("Q4_K, Q5_K or Q6_K"),
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
    let mut macc = [_mm256_setzero_ps(); R];
    for blk in 0..nb {
        let b = row.as_ptr().add(blk * bytes);
        prefetch(b, bytes);
        let (d, dmin) = (f16(b), f16(b.add(2)));
        let (sc, mn) = k_scale_bytes(b.add(4));
        let scales = _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(_mm_cvtsi64_si128(sc as i64)));
        let mf = min_factors(mn, dmin);
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
            macc[r] = _mm256_fmadd_ps(mf, _mm256_loadu_ps(x.gs.as_ptr().add(8 * blk)), macc[r]);
        }
    }
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])) + hsum(macc[r]);
    }
}

/// The i16 lanes of `vpackssdw(P, Q)` (per 128-bit lane: four i32 of P, then four of Q), where P and Q hold
/// four groups of 16 values each, one per 128-bit lane: lane j's group is `j / 8` of P (j % 8 < 4) or of Q.
/// `vpermw` indices picking, for Q6_K half h, the scale of each lane (P the half's first 64 values, Q the rest).
const fn q6_pack_index(h: i16) -> [i16; 32] {
    let mut ix = [0i16; 32];
    let mut j = 0;
    while j < 32 {
        ix[j] = 8 * h + (j as i16 / 8) + if j % 8 >= 4 { 4 } else { 0 };
        j += 1;
    }
    ix
}

/// As [`q6_pack_index`] for Q4_K / Q5_K: P and Q are chunks 2p and 2p + 1, each of two groups of 32 (the low
/// and high 256 bits), so lane j's group is `2 * chunk + (j / 16)`.
const fn k4_pack_index(p: i16) -> [i16; 32] {
    let mut ix = [0i16; 32];
    let mut j = 0;
    while j < 32 {
        ix[j] = 4 * p + if j % 8 >= 4 { 2 } else { 0 } + (j as i16 / 16);
        j += 1;
    }
    ix
}

/// Q6_K's maddubs lanes (i16 lane j: values 2j, 2j + 1): scale `8 h + 4 hi + j / 8`.
const fn q6_lane_index(h: i16, hi: i16) -> [i16; 32] {
    let mut ix = [0i16; 32];
    let mut j = 0;
    while j < 32 {
        ix[j] = 8 * h + 4 * hi + j as i16 / 8;
        j += 1;
    }
    ix
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn index(ix: [i16; 32]) -> __m512i {
    _mm512_loadu_si512(ix.as_ptr() as *const _)
}

/// Q6_K half h (values 128h .. 128h + 128) as two registers of 64 unsigned 6-bit values in value order: the low
/// nibbles of the half's 64 `ql` bytes with bits 0-1 | 2-3 of its 32 `qh` bytes, then the high nibbles with
/// bits 4-5 | 6-7.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q6_half(b: *const u8, h: usize) -> [__m512i; 2] {
    let m4 = _mm512_set1_epi8(0x0f);
    let ql = _mm512_loadu_si512(b.add(64 * h) as *const _);
    let qh = _mm256_loadu_si256(b.add(128 + 32 * h) as *const __m256i);
    // The first 32 values take qh's bits 0-1 (and 4-5 for the high nibbles), the next 32 bits 2-3 (6-7).
    let qh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    let qh = _mm512_and_si512(qh, _mm512_set1_epi8(0x33));
    // 0xca: bits of the first operand choose the second, else the third.
    let lo = _mm512_ternarylogic_epi32(m4, ql, _mm512_slli_epi16(qh, 4), 0xca);
    let hi = _mm512_ternarylogic_epi32(m4, _mm512_srli_epi16(ql, 4), qh, 0xca);
    [lo, hi]
}

/// What both Q6_K kernels take from a block: d, its 16 scales as i16 (the low 256 bits), the multipliers
/// `-32 * sc` of the sums of 16 (the offset term, low 256 bits; zeros above), and both halves' values
/// ([`q6_half`]).
struct Q6Block {
    d: f32,
    sc: __m512i,
    off: __m512i,
    w: [[__m512i; 2]; 2],
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn q6_block(b: *const u8) -> Q6Block {
    let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(b.add(192) as *const __m128i));
    Q6Block {
        d: f16(b.add(208)),
        sc: _mm512_castsi256_si512(sc16),
        off: _mm512_zextsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5))),
        w: [q6_half(b, 0), q6_half(b, 1)],
    }
}

/// A row's 16 sums of 16 in block `blk` (the low 256 bits; zeros above): with `-32 * sc` they give the Q6_K
/// offset term `-32 sum(sc * sums)` by one `vpmaddwd` / `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn q6_sums(x: &Q8Row, blk: usize) -> __m512i {
    _mm512_zextsi256_si512(_mm256_loadu_si256(x.bsums.as_ptr().add(16 * blk) as *const __m256i))
}

/// Q6_K without VNNI: 6-bit values 0-63 (unsigned) times the activations by `vpmaddubsw`, the 16 scales folded
/// in by `vpmaddwd`, the offset `32 * sum(sc * sums of 16)` taken off in integers.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn q6k<const R: usize>(row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    let nb = row.len() / 210;
    let ix = [
        index(q6_lane_index(0, 0)),
        index(q6_lane_index(0, 1)),
        index(q6_lane_index(1, 0)),
        index(q6_lane_index(1, 1)),
    ];
    let mut acc = [_mm512_setzero_ps(); R];
    for blk in 0..nb {
        let b = row.as_ptr().add(blk * 210);
        prefetch(b, 210);
        let Q6Block { d, sc, off, w } = q6_block(b);
        let s = ix.map(|i| _mm512_permutexvar_epi16(i, sc));
        for r in 0..R {
            let x = &xs[r];
            let y = x.qs.as_ptr().add(256 * blk);
            let mut sumi = _mm512_madd_epi16(q6_sums(x, blk), off);
            for h in 0..2 {
                for (i, w) in w[h].iter().enumerate() {
                    let yv = _mm512_loadu_si512(y.add(128 * h + 64 * i) as *const _);
                    sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(*w, yv), s[2 * h + i]));
                }
            }
            let dx = *x.d.get_unchecked(blk);
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(dx * d), _mm512_cvtepi32_ps(sumi), acc[r]);
        }
    }
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]);
    }
}

/// Q6_K with VNNI: per half and row, `vpdpbusd` on its two registers, packed to i16, `vpdpwssd` with the scales.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q6k_vnni<const R: usize>(row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    let nb = row.len() / 210;
    let ix = [index(q6_pack_index(0)), index(q6_pack_index(1))];
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); R];
    for blk in 0..nb {
        let b = row.as_ptr().add(blk * 210);
        prefetch(b, 210);
        let Q6Block { d, sc, off, w } = q6_block(b);
        let s = ix.map(|i| _mm512_permutexvar_epi16(i, sc));
        for r in 0..R {
            let x = &xs[r];
            let y = x.qs.as_ptr().add(256 * blk);
            let mut sumi = _mm512_dpwssd_epi32(zero, q6_sums(x, blk), off);
            for h in 0..2 {
                let p = |i: usize| {
                    let yv = _mm512_loadu_si512(y.add(128 * h + 64 * i) as *const _);
                    _mm512_dpbusd_epi32(zero, w[h][i], yv)
                };
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(p(0), p(1)), s[h]);
            }
            let dx = *x.d.get_unchecked(blk);
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(dx * d), _mm512_cvtepi32_ps(sumi), acc[r]);
        }
    }
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]);
    }
}

/// Q4_K / Q5_K with VNNI: chunk c (groups 2c, 2c + 1) is its 32 bytes broadcast to both halves, shifted by 0 | 4
/// and masked: the low nibbles then the high ones, in value order, without a lane insert. Per row, `vpdpbusd`
/// on each chunk, pairs of chunks packed to i16, `vpdpwssd` with the scales; the mins as in [`qk45`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn qk45_vnni<const R: usize, const FIVE: bool>(row: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = row.len() / bytes;
    let m4 = _mm512_set1_epi8(0x0f);
    let shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    let ix = [index(k4_pack_index(0)), index(k4_pack_index(1))];
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); R];
    let mut macc = [_mm256_setzero_ps(); R];
    for blk in 0..nb {
        let b = row.as_ptr().add(blk * bytes);
        prefetch(b, bytes);
        let (d, dmin) = (f16(b), f16(b.add(2)));
        let (sc, mn) = k_scale_bytes(b.add(4));
        let scales = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
        let s = ix.map(|i| _mm512_permutexvar_epi16(i, scales));
        let mf = min_factors(mn, dmin);
        let qs = b.add(if FIVE { 48 } else { 16 });
        let qh = if FIVE { _mm512_broadcast_i64x4(_mm256_loadu_si256(b.add(16) as *const __m256i)) } else { zero };
        let w: [__m512i; 4] = std::array::from_fn(|c| {
            let q = _mm512_broadcast_i64x4(_mm256_loadu_si256(qs.add(32 * c) as *const __m256i));
            let v = _mm512_and_si512(_mm512_srlv_epi16(q, shift), m4);
            if FIVE {
                // Bit 2c of each qh byte for the low nibbles, 2c + 1 for the high ones, to 0x10.
                let sh = _mm512_add_epi16(_mm512_set1_epi16(2 * c as i16), _mm512_srli_epi16(shift, 2));
                let bit = _mm512_and_si512(_mm512_srlv_epi16(qh, sh), _mm512_set1_epi8(1));
                _mm512_or_si512(v, _mm512_slli_epi16(bit, 4))
            } else {
                v
            }
        });
        for r in 0..R {
            let x = &xs[r];
            let y = x.qs.as_ptr().add(256 * blk);
            let p = |c: usize| _mm512_dpbusd_epi32(zero, w[c], _mm512_loadu_si512(y.add(64 * c) as *const _));
            let sumi = _mm512_dpwssd_epi32(zero, _mm512_packs_epi32(p(0), p(1)), s[0]);
            let sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(p(2), p(3)), s[1]);
            let dx = *x.d.get_unchecked(blk);
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(dx * d), _mm512_cvtepi32_ps(sumi), acc[r]);
            macc[r] = _mm256_fmadd_ps(mf, _mm256_loadu_ps(x.gs.as_ptr().add(8 * blk)), macc[r]);
        }
    }
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]) + hsum(macc[r]);
    }
}
