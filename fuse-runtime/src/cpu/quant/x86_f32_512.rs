//! Strategy 1 on x86-64 AVX-512 (F, BW, VL) + FMA + F16C: the AVX2 kernels' arithmetic 16 lanes wide. A group of
//! 32 weights is two registers (values 0-15 and 16-31), so a Q4 group costs one widening load, a mask, a shift, two
//! conversions and its FMAs, half the instructions of AVX2 for the same bytes. Per (row of W, row of x), per group:
//! `t = q1 x1 + q0 x0` (or each half apart where `HALVES`), `acc += t * scale` into one of two accumulators
//! (alternating over the groups of the row), a block's min terms after its groups; the same operations whatever the
//! grouping of rows, so results do not depend on tiles or threads.

use super::x86_f32::{f16x2, k_scales, KScales};
use super::F32Row;
use fuse_ir::DType;
use std::arch::x86_64::*;

/// The rows of W in `rows` against `xs` (1 to 4 rows): `out[w * xs.len() + i]`. Only called where
/// `Isa::Avx512.available()`.
pub(super) fn dot_rows_avx512(dtype: DType, rows: &[u8], xs: &[F32Row], out: &mut [f32]) {
    // Safety: the dispatcher checked the features; the lengths are checked by matmul_quantized.
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

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn run<B: Block>(rows: &[u8], xs: &[F32Row], out: &mut [f32]) {
    let nb = xs[0].x.len() / B::ELEMS;
    let rb = nb * B::BYTES;
    let nr = rows.len() / rb;
    let (r, w) = (xs.len(), rows.as_ptr());
    if r == 1 {
        // Two rows of W at a time share the loads of x.
        let mut j = 0;
        while j + 2 <= nr {
            dot::<B, 2, 1>(w.add(j * rb), rb, nb, xs, &mut out[j..j + 2]);
            j += 2;
        }
        if j < nr {
            dot::<B, 1, 1>(w.add(j * rb), rb, nb, xs, &mut out[j..j + 1]);
        }
        return;
    }
    for j in 0..nr {
        let (p, o) = (w.add(j * rb), &mut out[j * r..][..r]);
        match r {
            2 => dot::<B, 1, 2>(p, rb, nb, xs, o),
            3 => dot::<B, 1, 3>(p, rb, nb, xs, o),
            4 => dot::<B, 1, 4>(p, rb, nb, xs, o),
            5 => dot::<B, 1, 5>(p, rb, nb, xs, o),
            6 => dot::<B, 1, 6>(p, rb, nb, xs, o),
            7 => dot::<B, 1, 7>(p, rb, nb, xs, o),
            8 => dot::<B, 1, 8>(p, rb, nb, xs, o),
            _ => unreachable!("1 to 8 rows"),
        }
    }
}

/// A block type: `setup` reads a block's scales, `ints` the integers of values `32 g .. 32 g + 32` as f32 (offsets
/// applied) in two registers, `scale` the factor of group g (of each half where `HALVES`), `min` adds the block's min
/// terms (`MIN`: 0 none, 1 in lane 0, 8 in lanes 0-7) given the sums of x over its groups.
trait Block {
    const ELEMS: usize;
    const BYTES: usize;
    const HALVES: bool = false;
    const MIN: u8 = 0;
    type S: Copy;
    unsafe fn setup(b: *const u8) -> Self::S;
    unsafe fn ints(b: *const u8, g: usize) -> [__m512; 2];
    unsafe fn scale(s: &Self::S, g: usize) -> [__m512; 2];
    unsafe fn min(_s: &Self::S, _sx: *const f32, acc: __m512) -> __m512 {
        acc
    }
}

/// 16 bytes at `p` as 16 i32 lanes (zero-extended).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn u8x16(p: *const u8) -> __m512i {
    _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn low(v: __m512i) -> __m512i {
    _mm512_and_si512(v, _mm512_set1_epi32(0x0f))
}

/// The nibbles of the 16 bytes at `p`: values 0-15 (low nibbles) and 16-31 (high ones), a Q4_0 / Q4_1 layout.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn nibbles16(p: *const u8) -> [__m512i; 2] {
    let v = u8x16(p);
    [low(v), _mm512_srli_epi32(v, 4)]
}

/// `v - c` of both registers, as f32.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn cvt2(v: [__m512i; 2], c: i32) -> [__m512; 2] {
    let c = _mm512_set1_epi32(c);
    [_mm512_cvtepi32_ps(_mm512_sub_epi32(v[0], c)), _mm512_cvtepi32_ps(_mm512_sub_epi32(v[1], c))]
}

/// The f16 scale at `p` in every lane.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn scale16(p: *const u8) -> __m512 {
    _mm512_broadcastss_ps(f16x2(p))
}

/// The min term of Q4_1 / Q5_1, `m * sum(x)`, in lane 0 (`dm = [d, m, 0, 0]`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn min_lane0(dm: __m128, sx: *const f32, acc: __m512) -> __m512 {
    let (m, s) = (_mm512_zextps128_ps512(_mm_movehdup_ps(dm)), _mm512_zextps128_ps512(_mm_load_ss(sx)));
    _mm512_fmadd_ps(m, s, acc)
}

/// Q5_0 / Q5_1: the nibbles at `q` with bit 4 of value i from bit i of `qh`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn q5_ints(q: *const u8, qh: u32) -> [__m512i; 2] {
    let [a, b] = nibbles16(q);
    let sixteen = _mm512_set1_epi32(16);
    [_mm512_mask_or_epi32(a, qh as u16, a, sixteen), _mm512_mask_or_epi32(b, (qh >> 16) as u16, b, sixteen)]
}

struct Q40;
impl Block for Q40 {
    const ELEMS: usize = 32;
    const BYTES: usize = 18;
    type S = __m512;
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> __m512 {
        scale16(b)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, _: usize) -> [__m512; 2] {
        cvt2(nibbles16(b.add(2)), 8)
    }
    #[inline]
    unsafe fn scale(d: &__m512, _: usize) -> [__m512; 2] {
        [*d; 2]
    }
}

struct Q41;
impl Block for Q41 {
    const ELEMS: usize = 32;
    const BYTES: usize = 20;
    const MIN: u8 = 1;
    type S = (__m512, __m128);
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> (__m512, __m128) {
        let dm = f16x2(b);
        (_mm512_broadcastss_ps(dm), dm)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, _: usize) -> [__m512; 2] {
        cvt2(nibbles16(b.add(4)), 0)
    }
    #[inline]
    unsafe fn scale(s: &(__m512, __m128), _: usize) -> [__m512; 2] {
        [s.0; 2]
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn min(s: &(__m512, __m128), sx: *const f32, acc: __m512) -> __m512 {
        min_lane0(s.1, sx, acc)
    }
}

struct Q50;
impl Block for Q50 {
    const ELEMS: usize = 32;
    const BYTES: usize = 22;
    type S = __m512;
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> __m512 {
        scale16(b)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, _: usize) -> [__m512; 2] {
        let qh = (b.add(2) as *const u32).read_unaligned();
        cvt2(q5_ints(b.add(6), qh), 16)
    }
    #[inline]
    unsafe fn scale(d: &__m512, _: usize) -> [__m512; 2] {
        [*d; 2]
    }
}

struct Q51;
impl Block for Q51 {
    const ELEMS: usize = 32;
    const BYTES: usize = 24;
    const MIN: u8 = 1;
    type S = (__m512, __m128);
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> (__m512, __m128) {
        let dm = f16x2(b);
        (_mm512_broadcastss_ps(dm), dm)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, _: usize) -> [__m512; 2] {
        let qh = (b.add(4) as *const u32).read_unaligned();
        cvt2(q5_ints(b.add(8), qh), 0)
    }
    #[inline]
    unsafe fn scale(s: &(__m512, __m128), _: usize) -> [__m512; 2] {
        [s.0; 2]
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn min(s: &(__m512, __m128), sx: *const f32, acc: __m512) -> __m512 {
        min_lane0(s.1, sx, acc)
    }
}

struct Q80;
impl Block for Q80 {
    const ELEMS: usize = 32;
    const BYTES: usize = 34;
    type S = __m512;
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> __m512 {
        scale16(b)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, _: usize) -> [__m512; 2] {
        let q = |i: usize| _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(2 + 16 * i) as _)));
        [q(0), q(1)]
    }
    #[inline]
    unsafe fn scale(d: &__m512, _: usize) -> [__m512; 2] {
        [*d; 2]
    }
}

/// The nibbles of Q4_K / Q5_K group g from its 32 bytes at `q`: low ones for even g, high ones for odd g.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn k_nibbles(q: *const u8, g: usize) -> [__m512i; 2] {
    let v = |i: usize| {
        let v = u8x16(q.add(16 * i));
        if g % 2 == 0 {
            low(v)
        } else {
            _mm512_srli_epi32(v, 4)
        }
    };
    [v(0), v(1)]
}

/// `-dmin * m` of the 8 groups of a K block in lanes 0-7, times the sums of x at `sx`, added to `acc`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn k_min(s: &KScales, sx: *const f32, acc: __m512) -> __m512 {
    _mm512_fmadd_ps(_mm512_zextps256_ps512(s.m), _mm512_zextps256_ps512(_mm256_loadu_ps(sx)), acc)
}

struct Q4K;
impl Block for Q4K {
    const ELEMS: usize = 256;
    const BYTES: usize = 144;
    const MIN: u8 = 8;
    type S = KScales;
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> KScales {
        k_scales(b)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, g: usize) -> [__m512; 2] {
        cvt2(k_nibbles(b.add(16 + 32 * (g / 2)), g), 0)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn scale(s: &KScales, g: usize) -> [__m512; 2] {
        [_mm512_set1_ps(s.d[g]); 2]
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn min(s: &KScales, sx: *const f32, acc: __m512) -> __m512 {
        k_min(s, sx, acc)
    }
}

struct Q5K;
impl Block for Q5K {
    const ELEMS: usize = 256;
    const BYTES: usize = 176;
    const MIN: u8 = 8;
    type S = KScales;
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> KScales {
        k_scales(b)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, g: usize) -> [__m512; 2] {
        // Bit 4 of value i of group g is bit g of qh[i] (the 32 bytes at b + 16).
        let q = k_nibbles(b.add(48 + 32 * (g / 2)), g);
        let shift = _mm_cvtsi32_si128(g as i32);
        let hi = |i: usize| {
            let h = _mm512_srl_epi32(u8x16(b.add(16 + 16 * i)), shift);
            _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(1)), 4)
        };
        cvt2([_mm512_or_si512(q[0], hi(0)), _mm512_or_si512(q[1], hi(1))], 0)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn scale(s: &KScales, g: usize) -> [__m512; 2] {
        [_mm512_set1_ps(s.d[g]); 2]
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn min(s: &KScales, sx: *const f32, acc: __m512) -> __m512 {
        k_min(s, sx, acc)
    }
}

struct Q6K;
impl Block for Q6K {
    const ELEMS: usize = 256;
    const BYTES: usize = 210;
    const HALVES: bool = true;
    /// `d * sc` for each group of 16.
    type S = [f32; 16];
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> [f32; 16] {
        let d = scale16(b.add(208));
        let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(192) as _)));
        let mut ds = [0.0; 16];
        _mm512_storeu_ps(ds.as_mut_ptr(), _mm512_mul_ps(d, sc));
        ds
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ints(b: *const u8, g: usize) -> [__m512; 2] {
        // Group g: half h = g / 4, s = g % 4: low nibbles of ql[64 h + 32 (s & 1)..] for s < 2, else high ones;
        // bits 2 s, 2 s + 1 of qh[32 h..].
        let (h, s) = (g / 4, g % 4);
        let (ql, qh) = (b.add(64 * h + 32 * (s & 1)), b.add(128 + 32 * h));
        let shift = _mm_cvtsi32_si128(2 * s as i32);
        let v = |i: usize| {
            let lo = u8x16(ql.add(16 * i));
            let lo = if s < 2 { low(lo) } else { _mm512_srli_epi32(lo, 4) };
            let hi = _mm512_srl_epi32(u8x16(qh.add(16 * i)), shift);
            _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(3)), 4))
        };
        cvt2([v(0), v(1)], 32)
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn scale(ds: &[f32; 16], g: usize) -> [__m512; 2] {
        [_mm512_set1_ps(ds[2 * g]), _mm512_set1_ps(ds[2 * g + 1])]
    }
}

type Acc<const W: usize, const X: usize> = [[__m512; X]; W];

/// W rows of W (`rb` bytes apart from `w`, `nb` blocks each) against X rows of x: `out[w * X + i]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
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
    let zero = _mm512_setzero_ps();
    let (mut acc0, mut acc1): (Acc<W, X>, Acc<W, X>) = ([[zero; X]; W], [[zero; X]; W]);
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
            out[r * X + i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r][i], acc1[r][i]));
        }
    }
}

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
    for r in 0..W {
        _mm_prefetch::<_MM_HINT_T0>(p[r].add(2 * W * rb) as *const i8);
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
    let mut q = [[_mm512_setzero_ps(); 2]; W];
    for r in 0..W {
        q[r] = B::ints(p[r], g);
    }
    for i in 0..X {
        let xp = x[i].add(at + 32 * g);
        let xv = [_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16))];
        for r in 0..W {
            let (q, sc, a) = (&q[r], B::scale(&s[r], g), &mut acc[r][i]);
            if B::HALVES {
                let t = _mm512_fmadd_ps(_mm512_mul_ps(q[0], xv[0]), sc[0], *a);
                *a = _mm512_fmadd_ps(_mm512_mul_ps(q[1], xv[1]), sc[1], t);
            } else {
                let t = _mm512_fmadd_ps(q[1], xv[1], _mm512_mul_ps(q[0], xv[0]));
                *a = _mm512_fmadd_ps(t, sc[0], *a);
            }
        }
    }
}
