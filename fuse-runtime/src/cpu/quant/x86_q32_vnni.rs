//! The two-term strategy for the 32-value types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) on AVX-512 VNNI: decode's
//! products, and any count of rows below the tiles' (`x86_amx32`).
//!
//! The f32 kernels spend ~14 instructions a block on 32 weights (widen, convert, two FMAs, the scale and the min
//! term), which makes SmolLM2's decode compute-bound. Here a register holds two blocks as 64 bytes in value order
//! and the activations are the two-term rows of `Q8Acts::with_residuals`, whose second scale is the first's / 256:
//! `256 q1 + q2` is a 16-bit integer, so `vpdpbusd` of q1, a shift by 8 and `vpdpbusd` of q2 give each four
//! values' exact integer product, one conversion and one FMA a pair of blocks apply both blocks' scales (from a
//! vector of eight lanes a block), and one FMA the offset or min terms. About 9 instructions a block.
//!
//! The weights are unsigned bytes (`vpdpbusd` multiplies unsigned by signed): the nibbles as stored, Q5's fifth
//! bit or'd in, Q8_0's bytes + 128. Their offsets (8, 16, 128) come back as `-offset * d * sum(x)` and Q4_1 /
//! Q5_1's min as `m * sum(x)`, with sum(x) the sum of the quantized x, so offset and product cancel exactly.

use super::q8::{Q8Acts, Q8Row};
use super::x86_q8::prefetch;
use fuse_ir::DType;
use std::arch::x86_64::*;

/// The activations of [`Q8Acts::with_residuals`] (blocks of 32) laid out for these kernels: per row and pair of
/// blocks 64 bytes of q1, 64 of q2 (in the order the weights' register has them: value order for Q8_0; for the
/// nibble types each block's values 0-15 of both blocks, then their values 16-31, as the two nibbles of 16 bytes
/// come), and 32 f32 lanes: the x scale `d2` of each lane's block, then the block sums of the quantized x divided
/// by 8 (a block has eight lanes, which add up to its sum). A missing odd block is zeros.
pub(crate) struct Q16Acts {
    q: Vec<i8>,
    lanes: Vec<f32>,
    blocks: usize,
}

/// One row of a [`Q16Acts`].
#[derive(Clone, Copy)]
pub(crate) struct Q16Row<'a> {
    q: &'a [i8],
    lanes: &'a [f32],
    blocks: usize,
}

impl Q16Acts {
    pub fn new(dtype: DType, acts: &Q8Acts, m: usize) -> Q16Acts {
        let nb = acts.k / 32;
        let pairs = nb.div_ceil(2);
        let nibbles = dtype != DType::Q8_0;
        let (mut q, mut lanes) = (vec![0i8; m * pairs * 128], vec![0.0f32; m * pairs * 32]);
        for i in 0..m {
            let (r1, r2): (Q8Row, Q8Row) = (acts.row(2 * i), acts.row(2 * i + 1));
            let (q, lanes) = (&mut q[i * pairs * 128..][..pairs * 128], &mut lanes[i * pairs * 32..][..pairs * 32]);
            for b in 0..nb {
                let (p, second) = (b / 2, b % 2);
                for (t, r) in [r1, r2].iter().enumerate() {
                    let (src, dst) = (&r.qs[32 * b..][..32], &mut q[p * 128 + 64 * t..][..64]);
                    if nibbles {
                        dst[16 * second..][..16].copy_from_slice(&src[..16]);
                        dst[32 + 16 * second..][..16].copy_from_slice(&src[16..]);
                    } else {
                        dst[32 * second..][..32].copy_from_slice(src);
                    }
                }
                let (scale, sum) = (r2.d[b], (r1.gs[b] + r2.gs[b]) / 8.0);
                let l = &mut lanes[p * 32..][..32];
                let at: &[usize] = if nibbles { &[4 * second, 8 + 4 * second] } else { &[8 * second] };
                for &a in at {
                    let n = if nibbles { 4 } else { 8 };
                    l[a..a + n].fill(scale);
                    l[16 + a..16 + a + n].fill(sum);
                }
            }
        }
        Q16Acts { q, lanes, blocks: nb }
    }

    /// Its rows (k is at least one block).
    pub fn rows(&self) -> Vec<Q16Row<'_>> {
        let p = self.blocks.div_ceil(2);
        let row = |(q, lanes)| Q16Row { q, lanes, blocks: self.blocks };
        self.q.chunks_exact(p * 128).zip(self.lanes.chunks_exact(p * 32)).map(row).collect()
    }
}

/// Whether this file has a kernel for `dtype`.
pub(super) fn covers(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0)
}

/// The rows of W in `rows` (whole rows of `dtype`) against `xs` (1 to 4 rows): `out[j * xs.len() + i]`. Only
/// called where `Isa::Avx512Vnni.available()` and `covers(dtype)`.
pub(super) fn dot_rows(dtype: DType, rows: &[u8], xs: &[Q16Row], out: &mut [f32]) {
    macro_rules! go {
        ($t:expr) => {
            // Safety: the dispatcher checked the features; matmul_quantized checked the lengths.
            unsafe {
                match xs.len() {
                    1 => run::<1, $t>(rows, xs, out),
                    2 => run::<2, $t>(rows, xs, out),
                    3 => run::<3, $t>(rows, xs, out),
                    4 => run::<4, $t>(rows, xs, out),
                    _ => unreachable!("1 to 4 rows"),
                }
            }
        };
    }
    match dtype {
        DType::Q4_0 => go!(Q4_0),
        DType::Q4_1 => go!(Q4_1),
        DType::Q5_0 => go!(Q5_0),
        DType::Q5_1 => go!(Q5_1),
        DType::Q8_0 => go!(Q8_0),
        _ => unreachable!("a 32-value type"),
    }
}

const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q5_0: u8 = 2;
const Q5_1: u8 = 3;
const Q8_0: u8 = 4;

/// Per type: bytes a block, where its quants start, whether it has a min (else an offset, subtracted).
const fn layout(t: u8) -> (usize, usize, bool, f32) {
    match t {
        Q4_0 => (18, 2, false, 8.0),
        Q4_1 => (20, 4, true, 0.0),
        Q5_0 => (22, 6, false, 16.0),
        Q5_1 => (24, 8, true, 0.0),
        _ => (34, 2, false, 128.0),
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run<const R: usize, const T: u8>(rows: &[u8], xs: &[Q16Row], out: &mut [f32]) {
    let rb = xs[0].blocks * layout(T).0;
    let count = rows.len() / rb;
    // Two rows of W at a time: each row's blocks are one chain of dependent FMAs (a short row is only a few
    // pairs), so two independent chains keep the core busy while the loads of both are in flight.
    for j in (0..count - count % 2).step_by(2) {
        let b = rows.as_ptr().add(j * rb);
        rows_dot::<R, T, 2>([b, b.add(rb)], xs, &mut out[j * R..(j + 2) * R]);
    }
    if count % 2 == 1 {
        let j = count - 1;
        rows_dot::<R, T, 1>([rows.as_ptr().add(j * rb)], xs, &mut out[j * R..(j + 1) * R]);
    }
}

/// The `W` rows of W at `b` against `xs`, their chains interleaved: `out[w * R + r]`. Each row's arithmetic is
/// the same whatever `W`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn rows_dot<const R: usize, const T: u8, const W: usize>(b: [*const u8; W], xs: &[Q16Row], out: &mut [f32]) {
    let (bytes, _, has_min, offset) = layout(T);
    let nb = xs[0].blocks;
    let mut acc = [[_mm512_setzero_ps(); R]; W];
    let mut off = [[_mm512_setzero_ps(); R]; W];
    for p in 0..nb / 2 {
        for w in 0..W {
            pair::<R, T>(b[w].add(2 * p * bytes), b[w].add((2 * p + 1) * bytes), xs, p, &mut acc[w], &mut off[w]);
        }
    }
    if nb % 2 == 1 {
        // The last block twice: the second's activations and lanes are zeros.
        for w in 0..W {
            let last = b[w].add((nb - 1) * bytes);
            pair::<R, T>(last, last, xs, nb / 2, &mut acc[w], &mut off[w]);
        }
    }
    // One reduction a row (rows are short: SmolLM2's 576 values are 9 pairs).
    let c = _mm512_set1_ps(if has_min { 1.0 } else { -offset });
    for w in 0..W {
        for r in 0..R {
            out[w * R + r] = _mm512_reduce_add_ps(_mm512_fmadd_ps(off[w][r], c, acc[w][r]));
        }
    }
}

/// Blocks at `b` and `next` (pair `p` of the activations).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn pair<const R: usize, const T: u8>(
    b: *const u8,
    next: *const u8,
    xs: &[Q16Row],
    p: usize,
    acc: &mut [__m512; R],
    off: &mut [__m512; R],
) {
    let (bytes, qs, has_min, _) = layout(T);
    prefetch(b, 2 * bytes);
    // The weights as 64 unsigned bytes in the activations' order.
    let w = if T == Q8_0 {
        let v = _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_loadu_si256(b.add(qs) as *const __m256i)),
            _mm256_loadu_si256(next.add(qs) as *const __m256i),
        );
        _mm512_xor_si512(v, _mm512_set1_epi8(-128))
    } else {
        // [b's low nibbles (values 0-15), next's, b's high nibbles (16-31), next's].
        let v = _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadu_si128(b.add(qs) as *const __m128i)),
            _mm_loadu_si128(next.add(qs) as *const __m128i),
        );
        let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(v), _mm256_srli_epi16::<4>(v));
        let z = _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
        if T == Q5_0 || T == Q5_1 {
            // Bit i of qh is value i's fifth bit (added: the nibble is below 16), to the bytes' order.
            let at = if T == Q5_0 { 2 } else { 4 };
            let qh = |p: *const u8| (p.add(at) as *const u32).read_unaligned() as u64;
            let (h, g) = (qh(b), qh(next));
            let bits = (h & 0xffff) | (g & 0xffff) << 16 | (h >> 16) << 32 | (g >> 16) << 48;
            _mm512_mask_add_epi8(z, bits, z, _mm512_set1_epi8(0x10))
        } else {
            z
        }
    };
    // d (and m) of both blocks, f16 -> f32: [d, m, d', m'], to the lanes of each block.
    let word = |p: *const u8| (p as *const i32).read_unaligned();
    let dm = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_insert_epi32::<1>(_mm_cvtsi32_si128(word(b)), word(next))));
    let spread = |d: i32| {
        let e = d + 2;
        if T == Q8_0 {
            _mm512_setr_epi32(d, d, d, d, d, d, d, d, e, e, e, e, e, e, e, e)
        } else {
            _mm512_setr_epi32(d, d, d, d, e, e, e, e, d, d, d, d, e, e, e, e)
        }
    };
    let dv = _mm512_permutexvar_ps(spread(0), dm);
    let cv = if has_min { _mm512_permutexvar_ps(spread(1), dm) } else { dv };
    for r in 0..R {
        let x = &xs[r];
        let q = x.q.as_ptr().add(128 * p);
        let t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(q as *const _));
        let t = _mm512_dpbusd_epi32(_mm512_slli_epi32::<8>(t), w, _mm512_loadu_si512(q.add(64) as *const _));
        let l = x.lanes.as_ptr().add(32 * p);
        let scale = _mm512_mul_ps(dv, _mm512_loadu_ps(l));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), scale, acc[r]);
        off[r] = _mm512_fmadd_ps(cv, _mm512_loadu_ps(l.add(16)), off[r]);
    }
}
