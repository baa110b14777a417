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
    /// A panel row's min factors a block: Q4_K's and Q5_K's 8 groups (kept for every K type, unused by
    /// Q6_K), Q4_1's one (kept for every 32-value type, unused by Q4_0 and Q8_0).
    const fn mins(self) -> usize {
        if self.k_type() {
            8
        } else {
            1
        }
    }
    /// The K types (one 8-bit activation term, integer sums over a block's groups, panels of scaled values in
    /// two byte planes: `x86_amx_k`); else the 32-value types (two terms, each block scaled in f32, a block's
    /// values a panel row).
    pub(super) const fn k_type(self) -> bool {
        matches!(self, Format::Q4K | Format::Q5K | Format::Q6K)
    }
}

/// The activations of one call, 16 rows a tile: `b` in `tdpbusd`'s second-operand layout ([tile][k / 4][16
/// rows][4 values], on whole cache lines like the panels), `dx` the rows' block scales ([tile][block][16]), and
/// `gs` their group sums ([tile][group of 32][16]).
pub(super) struct Packed {
    pub b: Lines,
    pub dx: Vec<f32>,
    pub gs: Vec<f32>,
}

/// Values of x from which tiles are packed in parallel.
const PARALLEL_VALUES: usize = 1 << 16;

/// Rows `term`, `term + terms`, .. of `acts` (the first or second 8-bit term of each row of x) as m rows.
pub(super) fn pack(acts: &Q8Acts, m: usize, k: usize, term: usize, terms: usize) -> Packed {
    let (tiles, blocks, groups) = (m.div_ceil(T), k / acts.block, k / 32);
    let mut p = Packed {
        b: Lines::zeroed(tiles * k * T),
        dx: vec![0.0; tiles * blocks * T],
        gs: vec![0.0; tiles * groups * T],
    };
    // A tile's values: each row's 4-value words side by side, 16 rows a 64-byte line.
    let tile_values = |tile: usize, b: &mut [u8]| {
        for lane in 0..T.min(m - tile * T) {
            let row = acts.row((tile * T + lane) * terms + term);
            for (q, four) in row.qs.as_chunks::<4>().0.iter().enumerate() {
                b[q * 4 * T + 4 * lane..][..4].copy_from_slice(&four.map(|v| v as u8));
            }
        }
    };
    if m * k >= PARALLEL_VALUES {
        crate::cpu::spin_pool::for_each_chunk_mut(&mut p.b, k * T, &tile_values);
    } else {
        p.b.chunks_mut(k * T).enumerate().for_each(|(tile, b)| tile_values(tile, b));
    }
    for r in 0..m {
        let (tile, lane) = (r / T, r % T);
        let row = acts.row(r * terms + term);
        for (i, &d) in row.d.iter().enumerate() {
            p.dx[(tile * blocks + i) * T + lane] = d;
        }
        for (g, &s) in row.gs.iter().enumerate() {
            p.gs[(tile * groups + g) * T + lane] = s;
        }
    }
    p
}

/// Bytes on whole cache lines (a panel's tiles: unaligned, each 64-byte row of a tile would straddle two
/// lines, and filling the panel cost 1.4x).
pub(super) struct Lines(Vec<Line>, usize);

#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Line([u8; 64]);

impl Lines {
    fn zeroed(len: usize) -> Lines {
        Lines(vec![Line([0; 64]); len.div_ceil(64)], len)
    }
}

impl std::ops::Deref for Lines {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // Safety: the lines hold at least `self.1` initialised bytes, contiguous.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr() as *const u8, self.1) }
    }
}

impl std::ops::DerefMut for Lines {
    fn deref_mut(&mut self) -> &mut [u8] {
        // Safety: as above, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr() as *mut u8, self.1) }
    }
}

/// One task's 16 weight rows, widened (`a`): the K types' two planes of scaled values (`plane_at`), the
/// 32-value types' blocks as 16 rows of 32 signed bytes each; per block and row its d (`d`) and, for Q4_K, Q5_K
/// and Q4_1, its min factors (`-dmin * m` per group; Q4_1's m).
pub(super) struct Panel {
    pub format: Format,
    pub a: Lines,
    pub d: Vec<f32>,
    pub mins: Vec<f32>,
}

impl Panel {
    /// A panel for `format` and `blocks` blocks a row; it serves every format of the same family (K types or
    /// 32-value types) and block count, see [`Panel::serves`].
    pub(super) fn new(format: Format, blocks: usize) -> Panel {
        let k_type = format.k_type();
        Panel {
            format,
            a: Lines::zeroed(if k_type { panel_bytes(blocks) } else { blocks * 32 * T }),
            d: vec![0.0; blocks * T],
            mins: vec![0.0; blocks * format.mins() * T],
        }
    }

    /// Whether this panel can hold `format`'s rows of `blocks` blocks (then taking that format).
    pub(super) fn serves(&mut self, format: Format, blocks: usize) -> bool {
        let fits = self.format.k_type() == format.k_type() && self.d.len() == blocks * T;
        if fits {
            self.format = format;
        }
        fits
    }

    /// Where a 32-value type's block `blk` starts in `a` for row `lane`.
    fn block_at(&self, blk: usize, lane: usize) -> usize {
        (blk * T + lane) * 32
    }

    /// Rows `rows` of `w` (at most 16; the rest of the panel zeros). Only called where AVX-512 (F, BW, VL),
    /// AVX2, FMA and F16C are available (with AMX, always).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn fill(&mut self, w: &[u8], row_bytes: usize, rows: std::ops::Range<usize>) {
        let (bytes, mins) = (self.format.block_bytes(), self.format.mins());
        let blocks = row_bytes / bytes;
        for lane in 0..T {
            for blk in 0..blocks {
                if lane >= rows.len() {
                    if self.format.k_type() {
                        for (plane, c) in (0..2).flat_map(|p| (0..4).map(move |c| (p, c))) {
                            let at = plane_at(blk, plane, c, lane);
                            self.a[at..at + 64].fill(0);
                        }
                    } else {
                        let at = self.block_at(blk, lane);
                        self.a[at..at + 32].fill(0);
                    }
                    let at = (blk * T + lane) * mins;
                    self.mins[at..at + mins].fill(0.0);
                    self.d[blk * T + lane] = 0.0;
                    continue;
                }
                // Safety (below): `b` holds a whole block (the slice), the panel this row's groups and scales.
                let b = w[(rows.start + lane) * row_bytes + blk * bytes..][..bytes].as_ptr();
                // This row's stream of blocks, 2 KB ahead (16 rows' streams wait on memory otherwise).
                prefetch(b, bytes);
                match self.format {
                    Format::Q4K | Format::Q5K => fill_block(self, b, self.format == Format::Q5K, blk, lane),
                    Format::Q4_0 | Format::Q4_1 | Format::Q8_0 => {
                        self.d[blk * T + lane] = f16(b);
                        let to = self.a.as_mut_ptr().add(self.block_at(blk, lane));
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
                    Format::Q6K => fill_q6_block(self, b, blk, lane),
                }
            }
        }
    }
}

/// Where chunk `c` (values 64c..64c + 64) of plane `plane` (0: the low bytes, 1: the high) of block `blk`
/// starts in a split panel's bytes for row `lane`: 16 rows of 64 bytes a tile.
pub(super) fn plane_at(blk: usize, plane: usize, c: usize, lane: usize) -> usize {
    (((blk * 2 + plane) * 4 + c) * T + lane) * 64
}

/// Bytes of a split panel of `blocks` blocks.
pub(super) fn panel_bytes(blocks: usize) -> usize {
    blocks * 2 * 256 * T
}

/// The K types' planes (`x86_amx_k` multiplies them): row `lane`'s block `blk` of a Q4_K (`five` false) or Q5_K
/// block at `b` into `panel`'s planes, d and mins. Only called where AVX-512 (F, BW) and F16C are available
/// (with AMX, always).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,f16c")]
pub(super) unsafe fn fill_block(panel: &mut Panel, b: *const u8, five: bool, blk: usize, lane: usize) {
    let (sc, mn) = k_scale_bytes(b.add(4));
    panel.d[blk * T + lane] = f16(b);
    let widen = |v: u64| _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64));
    let mins = _mm256_mul_ps(_mm256_cvtepi32_ps(widen(mn)), _mm256_set1_ps(-f16(b.add(2))));
    _mm256_storeu_ps(panel.mins.as_mut_ptr().add((blk * T + lane) * 8), mins);
    // Chunk c's 32 bytes: low nibbles are group 2c, high nibbles group 2c + 1; Q5_K's fifth bits are bits 2c
    // and 2c + 1 of each of its 32 `qh` bytes.
    let (qs, qh) = (b.add(if five { 48 } else { 16 }), _mm256_loadu_si256(b.add(16) as *const __m256i));
    let (m4, one) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(1));
    let bit = |i: i32| _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(i)), one));
    let base = panel.a.as_mut_ptr();
    for c in 0..4 {
        let q = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
        let (mut lo, mut hi) = (_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4));
        if five {
            lo = _mm256_or_si256(lo, bit(2 * c as i32));
            hi = _mm256_or_si256(hi, bit(2 * c as i32 + 1));
        }
        // The chunk's 64 values times their group's scale, in 16 bits (at most 63 * 31): each 16-bit lane's
        // two bytes multiplied apart (even and odd values), so both planes come out in place, byte for byte.
        let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        let scale = |g: usize| _mm256_set1_epi16(((sc >> (8 * g)) & 0xff) as i16);
        let scale = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(scale(2 * c)), scale(2 * c + 1));
        let even = _mm512_mullo_epi16(_mm512_and_si512(q, _mm512_set1_epi16(0xff)), scale);
        let odd = _mm512_mullo_epi16(_mm512_srli_epi16::<8>(q), scale);
        // low: even's low byte, odd's low byte above it; high: even's high byte, odd's in place (0xCA: a ? b : c).
        let byte = _mm512_set1_epi16(0xff);
        let low = _mm512_ternarylogic_epi32::<0xCA>(byte, even, _mm512_slli_epi16::<8>(odd));
        let high = _mm512_ternarylogic_epi32::<0xCA>(byte, _mm512_srli_epi16::<8>(even), odd);
        _mm512_storeu_si512(base.add(plane_at(blk, 0, c, lane)) as *mut _, low);
        _mm512_storeu_si512(base.add(plane_at(blk, 1, c, lane)) as *mut _, high);
    }
}

/// Row `lane`'s block `blk` of a Q6_K block at `b` into `panel`'s signed planes and d.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn fill_q6_block(panel: &mut Panel, b: *const u8, blk: usize, lane: usize) {
    panel.d[blk * T + lane] = f16(b.add(208));
    let sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(b.add(192) as *const __m128i)));
    let base = panel.a.as_mut_ptr();
    let (byte, seven) = (_mm512_set1_epi16(0xff), _mm512_set1_epi8(0x7f));
    for h in 0..2 {
        for (i, v) in q6_half(b, h).into_iter().enumerate() {
            let c = 2 * h + i;
            // Chunk c's groups of 16 are 4c .. 4c + 4: each 16-bit lane (two values) takes its group's scale.
            let groups: [i16; 32] = std::array::from_fn(|l| (4 * c + l / 8) as i16);
            let scale = _mm512_permutexvar_epi16(_mm512_loadu_si512(groups.as_ptr() as *const _), sc);
            let v = _mm512_sub_epi8(v, _mm512_set1_epi8(32));
            let even = _mm512_mullo_epi16(_mm512_srai_epi16::<8>(_mm512_slli_epi16::<8>(v)), scale);
            let odd = _mm512_mullo_epi16(_mm512_srai_epi16::<8>(v), scale);
            // Each product's low 7 bits, and the rest shifted down (-32..32), as bytes in the values' places.
            let low =
                _mm512_and_si512(_mm512_ternarylogic_epi32::<0xCA>(byte, even, _mm512_slli_epi16::<8>(odd)), seven);
            let high = _mm512_ternarylogic_epi32::<0xCA>(
                byte,
                _mm512_srai_epi16::<7>(even),
                _mm512_slli_epi16::<8>(_mm512_srai_epi16::<7>(odd)),
            );
            _mm512_storeu_si512(base.add(plane_at(blk, 0, c, lane)) as *mut _, low);
            _mm512_storeu_si512(base.add(plane_at(blk, 1, c, lane)) as *mut _, high);
        }
    }
}
