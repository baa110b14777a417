//! Q4_K against one 8-bit activation term (`Strategy::Q8`, prefill's) with AVX-512 VNNI, eight weight rows at a
//! time: each `vpdpbusd` multiplies 8 values of each of the 8 rows by the same 8 activations (broadcast from
//! memory), so a group's sub-block scales are applied once for the 8 rows (`vpackssdw` + `vpdpwssd`) and the
//! block's float scale once as well, where the one-row kernel (`x86_q8_512::qk45_vnni`) spends 8 such
//! instructions a row and block. The rows' 32-byte nibble chunks are transposed in registers (8 bytes of each
//! row a 64-bit lane, the rows in the order `PI`); the min terms are summed after the blocks, one product of
//! each row's mins (times -dmin) and the activations' group sums (`Q8Row::gs`).

use super::q8::Q8Row;
use super::x86_f32::k_scale_bytes;
use super::x86_q8::{f16, prefetch};
use std::arch::x86_64::*;

/// Weight rows a call takes.
pub(super) const ROWS: usize = 8;
/// Blocks a row may have (the min terms wait on the stack): K up to 64 * 256.
const MAX_BLOCKS: usize = 64;
/// Bytes of a Q4_K block, and where its nibbles start.
const BYTES: usize = 144;
const QS: usize = 16;
/// The row whose 8 bytes 64-bit lane i of a transposed register holds (the order the unpacks and shuffles give).
const PI: [usize; 8] = [0, 1, 4, 5, 2, 3, 6, 7];

/// Whether rows of `row_bytes` (Q4_K) fit this kernel.
pub(super) fn fits(row_bytes: usize) -> bool {
    row_bytes.is_multiple_of(BYTES) && row_bytes / BYTES <= MAX_BLOCKS
}

/// [`ROWS`] rows of W (`w`, each `row_bytes`, whole Q4_K blocks) against `xs` (1 to 8 rows):
/// `out[j * xs.len() + i]`. Only called where `Isa::Avx512Vnni.available()` and `fits(row_bytes)`.
pub(super) fn dot_tile(w: &[u8], row_bytes: usize, xs: &[Q8Row], out: &mut [f32]) {
    debug_assert!(w.len() == ROWS * row_bytes && fits(row_bytes) && out.len() == ROWS * xs.len());
    // Safety: the caller checked the features and the lengths.
    unsafe {
        match xs.len() {
            1 => tile::<1>(w, row_bytes, xs, out),
            2 => tile::<2>(w, row_bytes, xs, out),
            3 => tile::<3>(w, row_bytes, xs, out),
            4 => tile::<4>(w, row_bytes, xs, out),
            5 => tile::<5>(w, row_bytes, xs, out),
            6 => tile::<6>(w, row_bytes, xs, out),
            7 => tile::<7>(w, row_bytes, xs, out),
            8 => tile::<8>(w, row_bytes, xs, out),
            _ => unreachable!("1 to 8 rows"),
        }
    }
}

/// The 16-bit lanes of the scale register of chunk `c` (groups 2c, 2c + 1): lane 8L + 2k + e holds the scale of
/// row PI[2L + (k & 1)] and group 2c + (k >> 1), as an index into the rows' 8 scales each (row * 8 + group).
fn scale_index(c: usize) -> [i16; 32] {
    let mut idx = [0i16; 32];
    for l in 0..4 {
        for k in 0..4 {
            let (row, group) = (PI[2 * l + (k & 1)], 2 * c + (k >> 1));
            idx[8 * l + 2 * k] = (row * 8 + group) as i16;
            idx[8 * l + 2 * k + 1] = (row * 8 + group) as i16;
        }
    }
    idx
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile<const R: usize>(w: &[u8], row_bytes: usize, xs: &[Q8Row], out: &mut [f32]) {
    let nb = row_bytes / BYTES;
    let base = w.as_ptr();
    let m4 = _mm512_set1_epi8(0x0f);
    let zero = _mm512_setzero_si512();
    let sidx: [__m512i; 4] = std::array::from_fn(|c| _mm512_loadu_si512(scale_index(c).as_ptr() as *const _));
    // 32-bit lane 4L + k of a block's sums is row PI[2L + (k & 1)] (k = 0, 1: groups 2c; 2, 3: 2c + 1).
    let mut didx = [0i32; 16];
    for (lane, v) in didx.iter_mut().enumerate() {
        *v = PI[2 * (lane / 4) + (lane & 1)] as i32;
    }
    let didx = _mm512_loadu_si512(didx.as_ptr() as *const _);
    let mut accf = [_mm512_setzero_ps(); R];
    // Each row's mins times -dmin, block by block (8 a block): the first `ROWS * nb * 8` written below before any
    // is read (not zeroed: 16 KB a call was 3% of a prefill).
    let mut mins = [std::mem::MaybeUninit::<f32>::uninit(); ROWS * MAX_BLOCKS * 8];
    for blk in 0..nb {
        let mut sc = [0u64; ROWS];
        let mut d = [0.0f32; ROWS];
        for j in 0..ROWS {
            let b = base.add(j * row_bytes + blk * BYTES);
            prefetch(b, BYTES);
            d[j] = f16(b);
            let (s, m) = k_scale_bytes(b.add(4));
            sc[j] = s;
            let mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(m as i64)));
            _mm256_storeu_ps(
                mins.as_mut_ptr().add((j * nb + blk) * 8) as *mut f32,
                _mm256_mul_ps(mf, _mm256_set1_ps(-f16(b.add(2)))),
            );
        }
        let table = _mm512_loadu_si512(sc.as_ptr() as *const _);
        let (t_lo, t_hi) = (
            _mm512_cvtepu8_epi16(_mm512_castsi512_si256(table)),
            _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64::<1>(table)),
        );
        let dv = _mm512_permutexvar_ps(didx, _mm512_castps256_ps512(_mm256_loadu_ps(d.as_ptr())));
        let mut bacc = [zero; R];
        for (c, sidx) in sidx.iter().enumerate() {
            let sv = _mm512_permutex2var_epi16(t_lo, *sidx, t_hi);
            let ld =
                |j: usize| _mm256_loadu_si256(base.add(j * row_bytes + blk * BYTES + QS + 32 * c) as *const __m256i);
            let z = |j: usize| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(ld(j)), ld(j + 4));
            let (z0, z1, z2, z3) = (z(0), z(1), z(2), z(3));
            let (t0, t1) = (_mm512_unpacklo_epi64(z0, z1), _mm512_unpackhi_epi64(z0, z1));
            let (t2, t3) = (_mm512_unpacklo_epi64(z2, z3), _mm512_unpackhi_epi64(z2, z3));
            // s[q]: 64-bit lane i holds row PI[i]'s bytes 8q .. 8q + 8 of the chunk.
            let s = [
                _mm512_shuffle_i64x2::<0b10_00_10_00>(t0, t2),
                _mm512_shuffle_i64x2::<0b10_00_10_00>(t1, t3),
                _mm512_shuffle_i64x2::<0b11_01_11_01>(t0, t2),
                _mm512_shuffle_i64x2::<0b11_01_11_01>(t1, t3),
            ];
            let lo = s.map(|v| _mm512_and_si512(v, m4));
            let hi = s.map(|v| _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4));
            for r in 0..R {
                let y = xs[r].qs.as_ptr().add(256 * blk + 64 * c);
                let bc = |o: usize| _mm512_set1_epi64((y.add(o) as *const i64).read_unaligned());
                let mut al = _mm512_dpbusd_epi32(zero, lo[0], bc(0));
                let mut ah = _mm512_dpbusd_epi32(zero, hi[0], bc(32));
                for q in 1..4 {
                    al = _mm512_dpbusd_epi32(al, lo[q], bc(8 * q));
                    ah = _mm512_dpbusd_epi32(ah, hi[q], bc(32 + 8 * q));
                }
                // Each lane sums 16 products of at most 15 * 127: within i16.
                bacc[r] = _mm512_dpwssd_epi32(bacc[r], _mm512_packs_epi32(al, ah), sv);
            }
        }
        for r in 0..R {
            let dx = *xs[r].d.get_unchecked(blk);
            accf[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(bacc[r]), _mm512_mul_ps(dv, _mm512_set1_ps(dx)), accf[r]);
        }
    }
    let len = nb * 8;
    // Safety: rows 0 .. ROWS of `nb` blocks of 8 were written in the loop above.
    let mins = std::slice::from_raw_parts(mins.as_ptr() as *const f32, ROWS * len);
    for r in 0..R {
        let mut lanes = [0.0f32; 16];
        _mm512_storeu_ps(lanes.as_mut_ptr(), accf[r]);
        for l in 0..4 {
            for t in 0..2 {
                let j = PI[2 * l + t];
                let m = dot(&mins[j * len..(j + 1) * len], &xs[r].gs[..len]);
                out[j * R + r] = (lanes[4 * l + t] + lanes[4 * l + t + 2]) + m;
            }
        }
    }
}

/// `sum a[i] * b[i]` (equal lengths, a multiple of 8), 16 lanes at a time.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i + 16 <= a.len() {
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a.as_ptr().add(i)), _mm512_loadu_ps(b.as_ptr().add(i)), acc);
        i += 16;
    }
    if i < a.len() {
        let mask: __mmask16 = (1u16 << (a.len() - i)) - 1;
        let (x, y) = (_mm512_maskz_loadu_ps(mask, a.as_ptr().add(i)), _mm512_maskz_loadu_ps(mask, b.as_ptr().add(i)));
        acc = _mm512_fmadd_ps(x, y, acc);
    }
    _mm512_reduce_add_ps(acc)
}
