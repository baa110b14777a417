//! Strategy 1 on x86-64 AVX2 + FMA + F16C: each block's integers decoded to f32 values in registers (the reference
//! decoder's values, fused multiply-adds aside) and FMA'd with up to 4 rows of x.

use super::common::k4_scales;
use fuse_ir::DType;
use std::arch::x86_64::*;

/// One row of W against `xs` (1 to 4 rows). Only called where `Isa::Avx2.available()`.
pub(super) fn dot_rows_avx2(dtype: DType, row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    macro_rules! go {
        ($b:ty) => {
            // Safety: the dispatcher checked AVX2, FMA and F16C; the lengths are checked by matmul_quantized.
            unsafe {
                match xs.len() {
                    1 => dot::<$b, 1>(row, xs, out),
                    2 => dot::<$b, 2>(row, xs, out),
                    3 => dot::<$b, 3>(row, xs, out),
                    4 => dot::<$b, 4>(row, xs, out),
                    _ => unreachable!("1 to 4 rows"),
                }
            }
        };
    }
    match dtype {
        DType::Q4_0 => go!(Q40),
        DType::Q4_1 => go!(Q41),
        DType::Q5_0 => go!(Q50),
        DType::Q5_1 => go!(Q51),
        DType::Q8_0 => go!(Q80),
        DType::Q4_K => go!(Q4K),
        DType::Q5_K => go!(Q5K),
        DType::Q6_K => go!(Q6K),
        _ => unreachable!("a block type"),
    }
}

/// `[e(0), e(1), e(2), e(3)]` without a closure (closures need not inherit the target features, nor be inlined).
macro_rules! lanes4 {
    (|$i:ident| $e:expr) => {
        [{ let $i = 0usize; $e }, { let $i = 1usize; $e }, { let $i = 2usize; $e }, { let $i = 3usize; $e }]
    };
}

/// A block type's decoder: `setup` reads a block's scales, `group` gives its values `32 g .. 32 g + 32`.
trait Block {
    const ELEMS: usize;
    const BYTES: usize;
    type S: Copy;
    unsafe fn setup(b: *const u8) -> Self::S;
    unsafe fn group(b: *const u8, s: &Self::S, g: usize) -> [__m256; 4];
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16(p: *const u8) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes([*p, *p.add(1)]) as i32)))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
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

struct Q40;
impl Block for Q40 {
    const ELEMS: usize = 32;
    const BYTES: usize = 18;
    type S = __m256;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> __m256 {
        _mm256_set1_ps(f16(b))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn group(b: *const u8, d: &__m256, _: usize) -> [__m256; 4] {
        let eight = _mm256_set1_epi32(8);
        let q = nibbles16(b.add(2));
        lanes4!(|i| _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[i], eight)), *d))
    }
}

struct Q41;
impl Block for Q41 {
    const ELEMS: usize = 32;
    const BYTES: usize = 20;
    type S = (__m256, __m256);
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> (__m256, __m256) {
        (_mm256_set1_ps(f16(b)), _mm256_set1_ps(f16(b.add(2))))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn group(b: *const u8, &(d, m): &(__m256, __m256), _: usize) -> [__m256; 4] {
        let q = nibbles16(b.add(4));
        lanes4!(|i| _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[i]), d, m))
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
        _mm256_set1_ps(f16(b))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn group(b: *const u8, d: &__m256, _: usize) -> [__m256; 4] {
        let qh = u32::from_le_bytes(*(b.add(2) as *const [u8; 4]));
        let sixteen = _mm256_set1_epi32(16);
        let q = nibbles16(b.add(6));
        lanes4!(|i| {
            let v = _mm256_sub_epi32(_mm256_or_si256(q[i], bit16(qh, 8 * i)), sixteen);
            _mm256_mul_ps(_mm256_cvtepi32_ps(v), *d)
        })
    }
}

struct Q51;
impl Block for Q51 {
    const ELEMS: usize = 32;
    const BYTES: usize = 24;
    type S = (__m256, __m256);
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn setup(b: *const u8) -> (__m256, __m256) {
        (_mm256_set1_ps(f16(b)), _mm256_set1_ps(f16(b.add(2))))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn group(b: *const u8, &(d, m): &(__m256, __m256), _: usize) -> [__m256; 4] {
        let qh = u32::from_le_bytes(*(b.add(4) as *const [u8; 4]));
        let q = nibbles16(b.add(8));
        lanes4!(|i| _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_or_si256(q[i], bit16(qh, 8 * i))), d, m))
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
        _mm256_set1_ps(f16(b))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn group(b: *const u8, d: &__m256, _: usize) -> [__m256; 4] {
        lanes4!(|i| {
            let q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(2 + 8 * i) as *const __m128i));
            _mm256_mul_ps(_mm256_cvtepi32_ps(q), *d)
        })
    }
}

/// Q4_K / Q5_K: per group of 32, `d * sc` and `dmin * m`.
type KScales = ([f32; 8], [f32; 8]);

#[inline]
unsafe fn k_scales(b: *const u8) -> KScales {
    let block = std::slice::from_raw_parts(b, 16);
    let (d, dmin) = (super::common::half_at(block, 0), super::common::half_at(block, 2));
    let (sc, mn) = k4_scales(&block[4..16]);
    (sc.map(|s| d * s as f32), mn.map(|m| dmin * m as f32))
}

struct Q4K;
impl Block for Q4K {
    const ELEMS: usize = 256;
    const BYTES: usize = 144;
    type S = KScales;
    #[inline]
    unsafe fn setup(b: *const u8) -> KScales {
        k_scales(b)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn group(b: *const u8, (d, m): &KScales, g: usize) -> [__m256; 4] {
        let (dv, mv) = (_mm256_set1_ps(d[g]), _mm256_set1_ps(-m[g]));
        let q = b.add(16 + 32 * (g / 2));
        let mask = _mm256_set1_epi32(0x0f);
        lanes4!(|i| {
            let v = u8x8(q.add(8 * i));
            let v = if g % 2 == 0 { _mm256_and_si256(v, mask) } else { _mm256_srli_epi32(v, 4) };
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), dv, mv)
        })
    }
}

struct Q5K;
impl Block for Q5K {
    const ELEMS: usize = 256;
    const BYTES: usize = 176;
    type S = KScales;
    #[inline]
    unsafe fn setup(b: *const u8) -> KScales {
        k_scales(b)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn group(b: *const u8, (d, m): &KScales, g: usize) -> [__m256; 4] {
        let (dv, mv) = (_mm256_set1_ps(d[g]), _mm256_set1_ps(-m[g]));
        let q = b.add(48 + 32 * (g / 2));
        lanes4!(|i| q5k_lanes(b, q, g, i, dv, mv))
    }
}

/// Values `8 i .. 8 i + 8` of Q5_K group g: `d * q - m`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q5k_lanes(b: *const u8, q: *const u8, g: usize, i: usize, dv: __m256, mv: __m256) -> __m256 {
    let v = u8x8(q.add(8 * i));
    let v = if g % 2 == 0 { _mm256_and_si256(v, _mm256_set1_epi32(0x0f)) } else { _mm256_srli_epi32(v, 4) };
    let h = _mm256_srl_epi32(u8x8(b.add(16 + 8 * i)), _mm_cvtsi32_si128(g as i32));
    let h = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(1)), 4);
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_or_si256(v, h)), dv, mv)
}

struct Q6K;
impl Block for Q6K {
    const ELEMS: usize = 256;
    const BYTES: usize = 210;
    /// `d * sc` for each group of 16.
    type S = [f32; 16];
    #[inline]
    unsafe fn setup(b: *const u8) -> [f32; 16] {
        let block = std::slice::from_raw_parts(b, 210);
        let d = super::common::half_at(block, 208);
        let mut ds = [0.0; 16];
        for (o, &sc) in ds.iter_mut().zip(&block[192..208]) {
            *o = d * (sc as i8) as f32;
        }
        ds
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn group(b: *const u8, ds: &[f32; 16], g: usize) -> [__m256; 4] {
        // Group g: half h = g / 4, s = g % 4: low nibbles of ql[64 h + 32 (s & 1)..] for s < 2, else high ones;
        // bits 2 s, 2 s + 1 of qh[32 h..]; scales 8 h + 2 s (first 16 values) and 8 h + 2 s + 1.
        let (h, s) = (g / 4, g % 4);
        let (ql, qh) = (b.add(64 * h + 32 * (s & 1)), b.add(128 + 32 * h));
        let (d0, d1) = (_mm256_set1_ps(ds[8 * h + 2 * s]), _mm256_set1_ps(ds[8 * h + 2 * s + 1]));
        [q6_lanes(ql, qh, s, 0, d0), q6_lanes(ql, qh, s, 1, d0), q6_lanes(ql, qh, s, 2, d1), q6_lanes(ql, qh, s, 3, d1)]
    }
}

/// Values `8 i .. 8 i + 8` of a Q6_K group (see `Q6K::group`), times `d`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_lanes(ql: *const u8, qh: *const u8, s: usize, i: usize, d: __m256) -> __m256 {
    let lo = u8x8(ql.add(8 * i));
    let lo = if s < 2 { _mm256_and_si256(lo, _mm256_set1_epi32(0x0f)) } else { _mm256_srli_epi32(lo, 4) };
    let hi = _mm256_srl_epi32(u8x8(qh.add(8 * i)), _mm_cvtsi32_si128(2 * s as i32));
    let hi = _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4);
    _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(lo, hi), _mm256_set1_epi32(32))))
}

/// Each row's sum: per group of 32, (v0 x0 + v2 x2) + (v1 x1 + v3 x3) added to one of two accumulators
/// (alternating), the same operations whatever R is.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot<B: Block, const R: usize>(row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    let nb = row.len() / B::BYTES;
    let groups = B::ELEMS / 32;
    let x: [*const f32; R] = std::array::from_fn(|r| {
        debug_assert!(xs[r].len() == nb * B::ELEMS);
        xs[r].as_ptr()
    });
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for blk in 0..nb {
        let b = row.as_ptr().add(blk * B::BYTES);
        let s = B::setup(b);
        for g in 0..groups {
            let v = B::group(b, &s, g);
            let (at, t) = (blk * B::ELEMS + 32 * g, (blk * groups + g) & 1);
            for r in 0..R {
                let p = x[r].add(at);
                let t0 = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(p.add(16)), _mm256_mul_ps(v[0], _mm256_loadu_ps(p)));
                let t1 =
                    _mm256_fmadd_ps(v[3], _mm256_loadu_ps(p.add(24)), _mm256_mul_ps(v[1], _mm256_loadu_ps(p.add(8))));
                acc[r][t] = _mm256_add_ps(acc[r][t], _mm256_add_ps(t0, t1));
            }
        }
    }
    for r in 0..R {
        out[r] = hsum(_mm256_add_ps(acc[r][0], acc[r][1]));
    }
}
