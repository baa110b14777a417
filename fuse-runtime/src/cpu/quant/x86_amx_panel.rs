//! The operands of the AMX kernels (`x86_amx`, `x86_amx32`) in the layouts `tileloadd` reads as they are: the
//! activations packed 16 rows a tile, and 16 weight rows of blocks widened into a panel, group by group (16
//! rows of the group's values as bytes), with each row's scales.

use super::q8::Q8Acts;
use super::x86_f32::k_scale_bytes;
use super::x86_q8::{f16, prefetch};
use super::x86_q8_512::q6_half;
use std::arch::x86_64::*;

/// Rows of a tile.
pub(super) const T: usize = 16;

/// The block types the AMX kernels read, and the shape of their groups (values that share one scale).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Format {
    /// 8 groups of 32 a block, 6-bit scales and mins (Q5_K: a fifth bit from its `qh`).
    Q4K,
    Q5K,
    /// 16 groups of 16 a block, 8-bit signed scales, values 0..63 less 32.
    Q6K,
    /// Blocks of 32 values (one group a block, its f16 scale): 4-bit less 8 (Q4_0), 4-bit with a min (Q4_1),
    /// 8-bit (Q8_0); the panel holds them signed.
    Q4_0,
    Q4_1,
    Q8_0,
}

impl Format {
    pub(super) const fn block_bytes(self) -> usize {
        match self {
            Format::Q4K => 144,
            Format::Q5K => 176,
            Format::Q6K => 210,
            Format::Q4_0 => 18,
            Format::Q4_1 => 20,
            Format::Q8_0 => 34,
        }
    }
    /// Values of a block.
    pub(super) const fn block_values(self) -> usize {
        match self {
            Format::Q4K | Format::Q5K | Format::Q6K => 256,
            _ => 32,
        }
    }
    /// Values of a group (the `tdpbusd` depth: one scale a row).
    pub(super) const fn group(self) -> usize {
        match self {
            Format::Q6K => 16,
            _ => 32,
        }
    }
    pub(super) const fn groups(self) -> usize {
        self.block_values() / self.group()
    }
    /// The K types (one 8-bit activation term, integer sums over a block's groups); else the 32-value types
    /// (two terms, each block scaled in f32).
    pub(super) const fn k_type(self) -> bool {
        matches!(self, Format::Q4K | Format::Q5K | Format::Q6K)
    }
}

/// The activations of one call, 16 rows a tile: `b` in `tdpbusd`'s second-operand layout ([tile][k / 4][16
/// rows][4 values]), `dx` the rows' block scales ([tile][block][16]), `gs` their group sums ([tile][group of
/// 32][16]), `bs` 32 times their integer sums of 16 ([tile][k / 16][16]: Q6_K's offset).
pub(super) struct Packed {
    pub b: Vec<i8>,
    pub dx: Vec<f32>,
    pub gs: Vec<f32>,
    pub bs: Vec<i32>,
}

/// Rows `term`, `term + terms`, .. of `acts` (the first or second 8-bit term of each row of x) as m rows.
pub(super) fn pack(acts: &Q8Acts, m: usize, k: usize, term: usize, terms: usize) -> Packed {
    let (tiles, blocks, groups) = (m.div_ceil(T), k / acts.block, k / 32);
    let mut p = Packed {
        b: vec![0; tiles * k * T],
        dx: vec![0.0; tiles * blocks * T],
        gs: vec![0.0; tiles * groups * T],
        bs: vec![0; tiles * (k / 16) * T],
    };
    for r in 0..m {
        let (tile, lane) = (r / T, r % T);
        let row = acts.row(r * terms + term);
        let b = &mut p.b[tile * k * T..][..k * T];
        for (q, four) in row.qs.chunks_exact(4).enumerate() {
            b[q * 4 * T + 4 * lane..][..4].copy_from_slice(four);
        }
        for (i, &d) in row.d.iter().enumerate() {
            p.dx[(tile * blocks + i) * T + lane] = d;
        }
        for (g, &s) in row.gs.iter().enumerate() {
            p.gs[(tile * groups + g) * T + lane] = s;
        }
        for (g, &s) in row.bsums.iter().enumerate() {
            p.bs[(tile * (k / 16) + g) * T + lane] = 32 * s as i32;
        }
    }
    p
}

/// One task's 16 weight rows, widened: per block and group, 16 rows of the group's values as bytes (`a`); per
/// block and row, its group scales (`sc`, i32), its d (`d`) and, for Q4_K, its min factors `-dmin * m`
/// (`mins`, per group).
pub(super) struct Panel {
    pub format: Format,
    pub a: Vec<u8>,
    pub sc: Vec<i32>,
    pub d: Vec<f32>,
    pub mins: Vec<f32>,
}

impl Panel {
    pub(super) fn new(format: Format, blocks: usize) -> Panel {
        let groups = format.groups();
        Panel {
            format,
            a: vec![0; blocks * format.block_values() * T],
            sc: vec![0; blocks * groups * T],
            d: vec![0.0; blocks * T],
            mins: vec![
                0.0;
                if matches!(format, Format::Q4K | Format::Q5K | Format::Q4_1) { blocks * groups * T } else { 0 }
            ],
        }
    }

    /// Where group `g` of block `blk` starts in `a` for row `lane`.
    fn at(&self, blk: usize, g: usize, lane: usize) -> usize {
        ((blk * self.format.groups() + g) * T + lane) * self.format.group()
    }

    /// Rows `rows` of `w` (at most 16; the rest of the panel zeros). Only called where AVX-512 (F, BW, VL),
    /// AVX2, FMA and F16C are available (with AMX, always).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn fill(&mut self, w: &[u8], row_bytes: usize, rows: std::ops::Range<usize>) {
        let (bytes, groups, group) = (self.format.block_bytes(), self.format.groups(), self.format.group());
        let blocks = row_bytes / bytes;
        for lane in 0..T {
            for blk in 0..blocks {
                let scales = (blk * T + lane) * groups;
                if lane >= rows.len() {
                    for g in 0..groups {
                        let at = self.at(blk, g, lane);
                        self.a[at..at + group].fill(0);
                    }
                    self.sc[scales..scales + groups].fill(0);
                    if !self.mins.is_empty() {
                        self.mins[scales..scales + groups].fill(0.0);
                    }
                    self.d[blk * T + lane] = 0.0;
                    continue;
                }
                // Safety (below): `b` holds a whole block (the slice), the panel this row's groups and scales.
                let b = w[(rows.start + lane) * row_bytes + blk * bytes..][..bytes].as_ptr();
                // This row's stream of blocks, 2 KB ahead (16 rows' streams wait on memory otherwise).
                prefetch(b, bytes);
                match self.format {
                    Format::Q4K | Format::Q5K => {
                        let (sc, mn) = k_scale_bytes(b.add(4));
                        self.d[blk * T + lane] = f16(b);
                        let widen = |v: u64| _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64));
                        _mm256_storeu_si256(self.sc.as_mut_ptr().add(scales) as *mut __m256i, widen(sc));
                        let mins = _mm256_mul_ps(_mm256_cvtepi32_ps(widen(mn)), _mm256_set1_ps(-f16(b.add(2))));
                        _mm256_storeu_ps(self.mins.as_mut_ptr().add(scales), mins);
                        // Chunk c's 32 bytes: low nibbles are group 2c, high nibbles group 2c + 1; Q5_K's fifth
                        // bits are bits 2c and 2c + 1 of each of its 32 `qh` bytes.
                        let five = self.format == Format::Q5K;
                        let (qs, qh) =
                            (b.add(if five { 48 } else { 16 }), _mm256_loadu_si256(b.add(16) as *const __m256i));
                        let (m4, one) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(1));
                        let bit = |i: i32| {
                            let v = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(i)), one);
                            _mm256_slli_epi16::<4>(v)
                        };
                        for c in 0..4 {
                            let q = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
                            let (mut lo, mut hi) =
                                (_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4));
                            if five {
                                lo = _mm256_or_si256(lo, bit(2 * c as i32));
                                hi = _mm256_or_si256(hi, bit(2 * c as i32 + 1));
                            }
                            let (at_lo, at_hi) = (self.at(blk, 2 * c, lane), self.at(blk, 2 * c + 1, lane));
                            _mm256_storeu_si256(self.a.as_mut_ptr().add(at_lo) as *mut __m256i, lo);
                            _mm256_storeu_si256(self.a.as_mut_ptr().add(at_hi) as *mut __m256i, hi);
                        }
                    }
                    Format::Q4_0 | Format::Q4_1 | Format::Q8_0 => {
                        self.d[blk * T + lane] = f16(b);
                        let to = self.a.as_mut_ptr().add(self.at(blk, 0, lane));
                        if self.format == Format::Q8_0 {
                            _mm256_storeu_si256(to as *mut __m256i, _mm256_loadu_si256(b.add(2) as *const __m256i));
                            continue;
                        }
                        let qs =
                            _mm_loadu_si128(b.add(if self.format == Format::Q4_1 { 4 } else { 2 }) as *const __m128i);
                        let m4 = _mm_set1_epi8(0x0f);
                        let (mut lo, mut hi) = (_mm_and_si128(qs, m4), _mm_and_si128(_mm_srli_epi16::<4>(qs), m4));
                        if self.format == Format::Q4_1 {
                            self.mins[blk * T + lane] = f16(b.add(2));
                        } else {
                            (lo, hi) = (_mm_sub_epi8(lo, _mm_set1_epi8(8)), _mm_sub_epi8(hi, _mm_set1_epi8(8)));
                        }
                        _mm_storeu_si128(to as *mut __m128i, lo);
                        _mm_storeu_si128(to.add(16) as *mut __m128i, hi);
                    }
                    Format::Q6K => {
                        self.d[blk * T + lane] = f16(b.add(208));
                        let sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(192) as *const __m128i));
                        _mm512_storeu_si512(self.sc.as_mut_ptr().add(scales) as *mut _, sc);
                        // Each half's 128 values in order (0..63 unsigned), 16 to a group.
                        for h in 0..2 {
                            for (i, v) in q6_half(b, h).into_iter().enumerate() {
                                let first = 8 * h + 4 * i;
                                let base = self.a.as_mut_ptr();
                                let to = |j: usize| base.add(self.at(blk, first + j, lane)) as *mut __m128i;
                                _mm_storeu_si128(to(0), _mm512_extracti32x4_epi32::<0>(v));
                                _mm_storeu_si128(to(1), _mm512_extracti32x4_epi32::<1>(v));
                                _mm_storeu_si128(to(2), _mm512_extracti32x4_epi32::<2>(v));
                                _mm_storeu_si128(to(3), _mm512_extracti32x4_epi32::<3>(v));
                            }
                        }
                    }
                }
            }
        }
    }
}
