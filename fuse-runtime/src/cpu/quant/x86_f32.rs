//! Strategy 1 on x86-64 AVX2 + FMA + F16C: each group of 32 weights' integers converted to f32 in registers and
//! multiplied with x in f32, the block's (or group's) scale applied once to that partial sum, and the min terms of
//! Q4_1 / Q5_1 / Q4_K / Q5_K added as `min * sum(x over the group)` with the sums of x computed once per row of x
//! ([`F32Row::s`]). A call takes several rows of W: with one row of x they go two at a time (the x loads shared),
//! with 2 to 4 rows of x one at a time (each block decoded once for them). Every (row of W, row of x) product is
//! the same sequence of operations in all these cases, so the results do not depend on the grouping.

use super::F32Row;
use fuse_ir::DType;
use std::arch::x86_64::*;

/// The rows of W in `rows` (whole rows of `xs[i].x.len()` values) against `xs` (1 to 4 rows):
/// `out[w * xs.len() + i]`. Only called where `Isa::Avx2.available()`.
pub(super) fn dot_rows_avx2(dtype: DType, rows: &[u8], xs: &[F32Row], out: &mut [f32]) {
    // Safety: the dispatcher checked AVX2, FMA and F16C; the lengths are checked by matmul_quantized.
    unsafe {
        match dtype {
            DType::Q4_0 => run::<Q40>(rows, xs, out),
            DType::Q4_1 => run::<Q41>(rows, xs, out),
            DType::Q5_0 => run::<Q50>(rows, xs, out),
            DType::Q5_1 => run::<Q51>(rows, xs, out),
            DType::Q8_0 => run::<Q80>(rows, xs, out),
            DType::Q4_K => run::<Q4K>(rows, xs, out),
            DType::Q5_K => run::<Q5K>(rows, xs, out),
            DType::Q6_K => run::<Q6K>(rows, xs, out),
            _ => unreachable!("a block type"),
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run<B: Block>(rows: &[u8], xs: &[F32Row], out: &mut [f32]) {
    let nb = xs[0].x.len() / B::ELEMS;
    let rb = nb * B::BYTES;
    let nr = rows.len() / rb;
    let (r, w) = (xs.len(), rows.as_ptr());
    if r == 1 {
        let mut j = 0;
        while B::PAIRS && j + 2 <= nr {
            dot::<B, 2, 1>(w.add(j * rb), rb, nb, xs, &mut out[j..j + 2]);
            j += 2;
        }
        while j < nr {
            dot::<B, 1, 1>(w.add(j * rb), rb, nb, xs, &mut out[j..j + 1]);
            j += 1;
        }
        return;
    }
    for j in 0..nr {
        let (p, o) = (w.add(j * rb), &mut out[j * r..][..r]);
        match r {
            2 => dot::<B, 1, 2>(p, rb, nb, xs, o),
            3 => dot::<B, 1, 3>(p, rb, nb, xs, o),
            4 => dot::<B, 1, 4>(p, rb, nb, xs, o),
            _ => unreachable!("1 to 4 rows"),
        }
    }
}

/// A block type: `setup` reads a block's scales, `ints` gives the integers of its values `32 g .. 32 g + 32` as
/// f32 (offsets applied), `scale` the factor of group g (of each half of it where `HALVES`), `min` adds the block's
/// min terms (`MIN`: 0 none, 1 in lane 0, 8 in all lanes) to an accumulator given the sums of x over its groups.
trait Block {
    const ELEMS: usize;
    const BYTES: usize;
    const HALVES: bool = false;
    const MIN: u8 = 0;
    /// Whether two rows of W go together at m = 1 (the K types' decoding needs the registers).
    const PAIRS: bool = Self::ELEMS == 32;
    type S: Copy;
    unsafe fn setup(b: *const u8) -> Self::S;
    unsafe fn ints(b: *const u8, g: usize) -> [__m256; 4];
    unsafe fn scale(s: &Self::S, g: usize) -> [__m256; 2];
    unsafe fn min(_s: &Self::S, _sx: *const f32, acc: __m256) -> __m256 {
        acc
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// The two f16 at `p` as `[p[0], p[1], 0, 0]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn f16x2(p: *const u8) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()))
}

/// 8 bytes at `p` as 8 i32 lanes (zero-extended).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn u8x8(p: *const u8) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

/// The 16 nibble-packed bytes at `p` as 4 x 8 lanes: low nibbles of bytes 0-7, 8-15, then high nibbles of 0-7, 8-15.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles16(p: *const u8) -> [__m256i; 4] {
    let m = _mm256_set1_epi32(0x0f);
    let (a, b) = (u8x8(p), u8x8(p.add(8)));
    [_mm256_and_si256(a, m), _mm256_and_si256(b, m), _mm256_srli_epi32(a, 4), _mm256_srli_epi32(b, 4)]
}

/// The bits `e0 .. e0 + 8` of `bits` as 8 lanes of 0 or 16 (the fifth bit of Q5 values).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bit16(bits: u32, e0: usize) -> __m256i {
    let lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    let b = _mm256_and_si256(_mm256_set1_epi32((bits >> e0) as i32), lane);
    _mm256_and_si256(_mm256_cmpeq_epi32(b, lane), _mm256_set1_epi32(16))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn cvt4(q: [__m256i; 4]) -> [__m256; 4] {
    [_mm256_cvtepi32_ps(q[0]), _mm256_cvtepi32_ps(q[1]), _mm256_cvtepi32_ps(q[2]), _mm256_cvtepi32_ps(q[3])]
}

/// The min term of Q4_1 / Q5_1, `m * sum(x)`, in lane 0 (`dm = [d, m, 0, 0]`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn min_lane0(dm: __m128, sx: *const f32, acc: __m256) -> __m256 {
    let (m, s) = (_mm256_zextps128_ps256(_mm_movehdup_ps(dm)), _mm256_zextps128_ps256(_mm_load_ss(sx)));
    _mm256_fmadd_ps(m, s, acc)
}

struct Q40;
impl Block for Q40 {
    const ELEMS: usize = 32;
    const BYTES: usize = 18;
    type S = __m256;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> __m256 {
        _mm256_broadcastss_ps(f16x2(b))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, _: usize) -> [__m256; 4] {
        let (q, eight) = (nibbles16(b.add(2)), _mm256_set1_epi32(8));
        let s = |v: __m256i| _mm256_sub_epi32(v, eight);
        cvt4([s(q[0]), s(q[1]), s(q[2]), s(q[3])])
    }
    #[inline]
    unsafe fn scale(d: &__m256, _: usize) -> [__m256; 2] {
        [*d; 2]
    }
}

struct Q41;
impl Block for Q41 {
    const ELEMS: usize = 32;
    const BYTES: usize = 20;
    const MIN: u8 = 1;
    type S = (__m256, __m128);
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> (__m256, __m128) {
        let dm = f16x2(b);
        (_mm256_broadcastss_ps(dm), dm)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, _: usize) -> [__m256; 4] {
        cvt4(nibbles16(b.add(4)))
    }
    #[inline]
    unsafe fn scale(s: &(__m256, __m128), _: usize) -> [__m256; 2] {
        [s.0; 2]
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn min(s: &(__m256, __m128), sx: *const f32, acc: __m256) -> __m256 {
        min_lane0(s.1, sx, acc)
    }
}

struct Q50;
impl Block for Q50 {
    const ELEMS: usize = 32;
    const BYTES: usize = 22;
    type S = __m256;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> __m256 {
        _mm256_broadcastss_ps(f16x2(b))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, _: usize) -> [__m256; 4] {
        let qh = u32::from_le_bytes(*(b.add(2) as *const [u8; 4]));
        let (q, sixteen) = (nibbles16(b.add(6)), _mm256_set1_epi32(16));
        let v = |i: usize| _mm256_sub_epi32(_mm256_or_si256(q[i], bit16(qh, 8 * i)), sixteen);
        cvt4([v(0), v(1), v(2), v(3)])
    }
    #[inline]
    unsafe fn scale(d: &__m256, _: usize) -> [__m256; 2] {
        [*d; 2]
    }
}

struct Q51;
impl Block for Q51 {
    const ELEMS: usize = 32;
    const BYTES: usize = 24;
    const MIN: u8 = 1;
    type S = (__m256, __m128);
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> (__m256, __m128) {
        let dm = f16x2(b);
        (_mm256_broadcastss_ps(dm), dm)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, _: usize) -> [__m256; 4] {
        let qh = u32::from_le_bytes(*(b.add(4) as *const [u8; 4]));
        let q = nibbles16(b.add(8));
        let v = |i: usize| _mm256_or_si256(q[i], bit16(qh, 8 * i));
        cvt4([v(0), v(1), v(2), v(3)])
    }
    #[inline]
    unsafe fn scale(s: &(__m256, __m128), _: usize) -> [__m256; 2] {
        [s.0; 2]
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn min(s: &(__m256, __m128), sx: *const f32, acc: __m256) -> __m256 {
        min_lane0(s.1, sx, acc)
    }
}

struct Q80;
impl Block for Q80 {
    const ELEMS: usize = 32;
    const BYTES: usize = 34;
    type S = __m256;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> __m256 {
        _mm256_broadcastss_ps(f16x2(b))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, _: usize) -> [__m256; 4] {
        let q = |i: usize| _mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(2 + 8 * i) as *const __m128i));
        cvt4([q(0), q(1), q(2), q(3)])
    }
    #[inline]
    unsafe fn scale(d: &__m256, _: usize) -> [__m256; 2] {
        [*d; 2]
    }
}

/// Q4_K / Q5_K: `d * sc` of each group of 32, and `-dmin * m` of the 8 groups.
#[derive(Clone, Copy)]
pub(super) struct KScales {
    pub d: [f32; 8],
    pub m: __m256,
}

/// A Q4_K / Q5_K block's 12 packed bytes at `s` unpacked by whole words into its 8 six-bit scales and 8 mins,
/// a byte each (groups 0-7, low byte first).
#[inline(always)]
pub(super) unsafe fn k_scale_bytes(s: *const u8) -> (u64, u64) {
    const M1: u32 = 0x3f3f_3f3f;
    const M2: u32 = 0x0f0f_0f0f;
    const M3: u32 = 0x0303_0303;
    let u = |i: usize| (s.add(4 * i) as *const u32).read_unaligned();
    let (u0, u1, u2) = (u(0), u(1), u(2));
    let sc = (u0 & M1) as u64 | (((u2 & M2) | (((u0 >> 6) & M3) << 4)) as u64) << 32;
    let mn = (u1 & M1) as u64 | ((((u2 >> 4) & M2) | (((u1 >> 6) & M3) << 4)) as u64) << 32;
    (sc, mn)
}

/// The scales of a Q4_K / Q5_K block (llama.cpp's unpacking of the 12 bytes of 6-bit scales and mins into 8 + 8
/// bytes; the values of `fuse_ir::quant::k4_scales`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn k_scales(b: *const u8) -> KScales {
    let (sc, mn) = k_scale_bytes(b.add(4));
    let dm = f16x2(b);
    let f = |v: u64| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64)));
    let mut d = [0.0f32; 8];
    _mm256_storeu_ps(d.as_mut_ptr(), _mm256_mul_ps(_mm256_broadcastss_ps(dm), f(sc)));
    let dmin = _mm256_broadcastss_ps(_mm_sub_ps(_mm_setzero_ps(), _mm_movehdup_ps(dm)));
    KScales { d, m: _mm256_mul_ps(dmin, f(mn)) }
}

struct Q4K;
impl Block for Q4K {
    const ELEMS: usize = 256;
    const BYTES: usize = 144;
    const MIN: u8 = 8;
    type S = KScales;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> KScales {
        k_scales(b)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, g: usize) -> [__m256; 4] {
        let q = b.add(16 + 32 * (g / 2));
        let mask = _mm256_set1_epi32(0x0f);
        let v = |i: usize| {
            let v = u8x8(q.add(8 * i));
            if g % 2 == 0 {
                _mm256_and_si256(v, mask)
            } else {
                _mm256_srli_epi32(v, 4)
            }
        };
        cvt4([v(0), v(1), v(2), v(3)])
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn scale(s: &KScales, g: usize) -> [__m256; 2] {
        [_mm256_set1_ps(s.d[g]); 2]
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn min(s: &KScales, sx: *const f32, acc: __m256) -> __m256 {
        _mm256_fmadd_ps(s.m, _mm256_loadu_ps(sx), acc)
    }
}

struct Q5K;
impl Block for Q5K {
    const ELEMS: usize = 256;
    const BYTES: usize = 176;
    const MIN: u8 = 8;
    type S = KScales;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> KScales {
        k_scales(b)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, g: usize) -> [__m256; 4] {
        let q = b.add(48 + 32 * (g / 2));
        cvt4([q5k_lanes(b, q, g, 0), q5k_lanes(b, q, g, 1), q5k_lanes(b, q, g, 2), q5k_lanes(b, q, g, 3)])
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn scale(s: &KScales, g: usize) -> [__m256; 2] {
        [_mm256_set1_ps(s.d[g]); 2]
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn min(s: &KScales, sx: *const f32, acc: __m256) -> __m256 {
        _mm256_fmadd_ps(s.m, _mm256_loadu_ps(sx), acc)
    }
}

/// The integers of values `8 i .. 8 i + 8` of Q5_K group g.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q5k_lanes(b: *const u8, q: *const u8, g: usize, i: usize) -> __m256i {
    let v = u8x8(q.add(8 * i));
    let v = if g % 2 == 0 { _mm256_and_si256(v, _mm256_set1_epi32(0x0f)) } else { _mm256_srli_epi32(v, 4) };
    let h = _mm256_srl_epi32(u8x8(b.add(16 + 8 * i)), _mm_cvtsi32_si128(g as i32));
    _mm256_or_si256(v, _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(1)), 4))
}

struct Q6K;
impl Block for Q6K {
    const ELEMS: usize = 256;
    const BYTES: usize = 210;
    const HALVES: bool = true;
    /// `d * sc` for each group of 16.
    type S = [f32; 16];
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> [f32; 16] {
        let d = _mm256_broadcastss_ps(f16x2(b.add(208)));
        let sc = |i: usize| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(192 + 8 * i) as _)));
        let mut ds = [0.0; 16];
        _mm256_storeu_ps(ds.as_mut_ptr(), _mm256_mul_ps(d, sc(0)));
        _mm256_storeu_ps(ds.as_mut_ptr().add(8), _mm256_mul_ps(d, sc(1)));
        ds
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, g: usize) -> [__m256; 4] {
        // Group g: half h = g / 4, s = g % 4: low nibbles of ql[64 h + 32 (s & 1)..] for s < 2, else high ones;
        // bits 2 s, 2 s + 1 of qh[32 h..].
        let (h, s) = (g / 4, g % 4);
        let (ql, qh) = (b.add(64 * h + 32 * (s & 1)), b.add(128 + 32 * h));
        cvt4([q6_lanes(ql, qh, s, 0), q6_lanes(ql, qh, s, 1), q6_lanes(ql, qh, s, 2), q6_lanes(ql, qh, s, 3)])
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn scale(ds: &[f32; 16], g: usize) -> [__m256; 2] {
        [_mm256_set1_ps(ds[2 * g]), _mm256_set1_ps(ds[2 * g + 1])]
    }
}

/// The integers (`q - 32`) of values `8 i .. 8 i + 8` of a Q6_K group (see `Q6K::ints`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_lanes(ql: *const u8, qh: *const u8, s: usize, i: usize) -> __m256i {
    let lo = u8x8(ql.add(8 * i));
    let lo = if s < 2 { _mm256_and_si256(lo, _mm256_set1_epi32(0x0f)) } else { _mm256_srli_epi32(lo, 4) };
    let hi = _mm256_srl_epi32(u8x8(qh.add(8 * i)), _mm_cvtsi32_si128(2 * s as i32));
    let hi = _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4);
    _mm256_sub_epi32(_mm256_or_si256(lo, hi), _mm256_set1_epi32(32))
}

/// W rows of W (`rb` bytes apart from `w`, `nb` blocks each) against X rows of x: `out[w * X + i]`. Per (row of
/// W, row of x): per group of 32, `t = ((q0 x0 + q1 x1) + q2 x2) + q3 x3` (or two halves where `B::HALVES`) and
/// `acc += t * scale` into one of two accumulators (alternating over the groups of the row), a block's min terms
/// after its groups; the same operations whatever W and X are. The loops are unrolled so that the accumulators are registers.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot<B: Block, const W: usize, const X: usize>(
    w: *const u8,
    rb: usize,
    nb: usize,
    xs: &[F32Row],
    out: &mut [f32],
) {
    let groups = B::ELEMS / 32;
    let mut x = [std::ptr::null::<f32>(); X];
    let mut sx = [std::ptr::null::<f32>(); X];
    for i in 0..X {
        debug_assert!(xs[i].x.len() == nb * B::ELEMS && (B::MIN == 0 || xs[i].s.len() == nb * groups));
        x[i] = xs[i].x.as_ptr();
        sx[i] = xs[i].s.as_ptr();
    }
    let zero = _mm256_setzero_ps();
    let (mut acc0, mut acc1) = ([[zero; X]; W], [[zero; X]; W]);
    let mut blk = 0;
    while blk < nb {
        block::<B, W, X>(w, rb, blk, &x, &sx, &mut acc0, &mut acc1);
        if blk + 1 < nb {
            // A block of one group leaves the other accumulator next.
            let (a, b) = if groups == 1 { (&mut acc1, &mut acc0) } else { (&mut acc0, &mut acc1) };
            block::<B, W, X>(w, rb, blk + 1, &x, &sx, a, b);
        }
        blk += 2;
    }
    for r in 0..W {
        for i in 0..X {
            out[r * X + i] = hsum(_mm256_add_ps(acc0[r][i], acc1[r][i]));
        }
    }
}

const PREFETCH: bool = true;

type Acc<const W: usize, const X: usize> = [[__m256; X]; W];

/// Block `blk` of the W rows: its even groups into `a`, odd ones into `b`, then its min terms into `a`.
// Always inlined into `dot` (which has the target features): a call would keep the accumulators in memory.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn block<B: Block, const W: usize, const X: usize>(
    w: *const u8,
    rb: usize,
    blk: usize,
    x: &[*const f32; X],
    sx: &[*const f32; X],
    a: &mut Acc<W, X>,
    b: &mut Acc<W, X>,
) {
    let groups = B::ELEMS / 32;
    let mut p = [w; W];
    for (r, p) in p.iter_mut().enumerate() {
        *p = w.add(r * rb + blk * B::BYTES);
    }
    let mut s = [B::setup(p[0]); W];
    for r in 1..W {
        s[r] = B::setup(p[r]);
    }
    let at = blk * B::ELEMS;
    if PREFETCH {
        for r in 0..W {
            _mm_prefetch::<_MM_HINT_T0>(p[r].add(2 * W * rb) as *const i8);
        }
    }
    macro_rules! groups {
        ($($g:literal)*) => {
            $(if $g < groups {
                group::<B, W, X>(&p, &s, $g, x, at, if $g % 2 == 0 { &mut *a } else { &mut *b });
            })*
        };
    }
    groups!(0 1 2 3 4 5 6 7);
    if B::MIN != 0 {
        for i in 0..X {
            for r in 0..W {
                a[r][i] = B::min(&s[r], sx[i].add(blk * groups), a[r][i]);
            }
        }
    }
}

/// Group g (of 32 values) of the W rows' blocks at `p` against the X rows of x (block values from `at`).
// Always inlined into `dot` (which has the target features): a call would keep the accumulators in memory.
#[inline(always)]
unsafe fn group<B: Block, const W: usize, const X: usize>(
    p: &[*const u8; W],
    s: &[B::S; W],
    g: usize,
    x: &[*const f32; X],
    at: usize,
    acc: &mut Acc<W, X>,
) {
    let mut q = [[_mm256_setzero_ps(); 4]; W];
    for r in 0..W {
        q[r] = B::ints(p[r], g);
    }
    for i in 0..X {
        let p = x[i].add(at + 32 * g);
        let xv =
            [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)), _mm256_loadu_ps(p.add(16)), _mm256_loadu_ps(p.add(24))];
        for r in 0..W {
            let (q, sc, a) = (&q[r], B::scale(&s[r], g), &mut acc[r][i]);
            if B::HALVES {
                let t0 = _mm256_fmadd_ps(q[1], xv[1], _mm256_mul_ps(q[0], xv[0]));
                let t1 = _mm256_fmadd_ps(q[3], xv[3], _mm256_mul_ps(q[2], xv[2]));
                *a = _mm256_fmadd_ps(t1, sc[1], _mm256_fmadd_ps(t0, sc[0], *a));
            } else {
                let v = _mm256_fmadd_ps(q[1], xv[1], _mm256_mul_ps(q[0], xv[0]));
                let v = _mm256_fmadd_ps(q[3], xv[3], _mm256_fmadd_ps(q[2], xv[2], v));
                *a = _mm256_fmadd_ps(v, sc[0], *a);
            }
        }
    }
}
