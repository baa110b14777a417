//! Activations quantized to 8 bits for the integer-dot strategy, as llama.cpp does: each row of x in blocks of 32
//! (for the 32-element weight types, like Q8_0) or 256 (for the K types, like Q8_K) with one f32 scale `d` a block
//! (`x ≈ d * q`, q in -127..=127) and the integer sum of every 16 q's (the min / offset terms need it).

/// The quantized rows of an m x k activation matrix.
pub(crate) struct Q8Acts {
    pub block: usize,
    pub k: usize,
    pub qs: Vec<i8>,
    pub d: Vec<f32>,
    pub bsums: Vec<i16>,
    /// Per 32 values, their block's `d` times the sum of their q: the min terms' factor (a Q4_1 / Q5_1 block's
    /// whole, a K block's group by group).
    pub gs: Vec<f32>,
}

/// One quantized row: `qs` k values, `d` one scale per block, `bsums` one sum per 16 values, `gs` as
/// [`Q8Acts`]'s.
#[derive(Clone, Copy)]
pub(crate) struct Q8Row<'a> {
    pub qs: &'a [i8],
    pub d: &'a [f32],
    pub bsums: &'a [i16],
    pub gs: &'a [f32],
}

/// One row's slices of a [`Q8Acts`] being filled: values, block scales, sums of 16, min factors of 32.
type RowMut<'r> = (&'r mut [i8], &'r mut [f32], &'r mut [i16], &'r mut [f32]);

/// Rows in parallel from this many values on.
const PARALLEL_VALUES: usize = 1 << 16;
/// Values a parallel task quantizes at least (whole rows): a task a row of SmolLM2's 576 values is under a
/// microsecond, and 16 threads claiming 128 of them spent more on the claims than on the rows.
const TASK_VALUES: usize = 1 << 13;

/// `items` (rows of `k` values) in tasks of whole rows of at least [`TASK_VALUES`] values.
fn in_tasks<T: Send>(items: Vec<T>, k: usize, one: &(dyn Fn(T) + Sync)) {
    let per_task = TASK_VALUES.div_ceil(k.max(1));
    crate::cpu::spin_pool::for_each_item_grouped(items, per_task, &|_, item| one(item));
}

impl Q8Acts {
    /// Quantizes the m rows of `x` (m * k values, k a multiple of `block`, itself a multiple of 16); rows in
    /// parallel when there are many. Each row's result depends on that row alone.
    pub fn new(x: &[f32], m: usize, k: usize, block: usize) -> Q8Acts {
        debug_assert!(block % 16 == 0 && k % block == 0 && x.len() == m * k);
        let mut acts = Q8Acts::zeroed(m, k, block);
        let rows: Vec<_> = acts.rows_mut().into_iter().zip(x.chunks(k.max(1))).collect();
        let one = |((qs, d, bsums, gs), x): (RowMut, &[f32])| quantize_row(x, block, qs, d, bsums, gs);
        if m * k >= PARALLEL_VALUES {
            in_tasks(rows, k, &one);
        } else {
            rows.into_iter().for_each(one);
        }
        acts
    }

    /// Each row of `x` as two quantized rows (rows 2i and 2i + 1): x itself, then what its rounding left,
    /// `x - d q` (at most half a step of the first scale in each block), quantized again with `d2 = d1 / 256`
    /// exactly: x = d1 q1 + d2 q2 up to half a step of the second scale, about 1e-5 of each block's largest
    /// value. The fixed ratio makes `256 q1 + q2` a 16-bit integer with the one scale `d2` (what
    /// `x86_q32_vnni` multiplies by); kernels that scale each term by its own d get the same values.
    pub fn with_residuals(x: &[f32], m: usize, k: usize, block: usize) -> Q8Acts {
        debug_assert!(block % 16 == 0 && k % block == 0 && x.len() == m * k);
        let mut acts = Q8Acts::zeroed(2 * m, k, block);
        let mut rows = acts.rows_mut();
        let pairs: Vec<_> = rows.chunks_exact_mut(2).zip(x.chunks(k.max(1))).collect();
        let one = |(pair, x): (&mut [RowMut], &[f32])| {
            let [(qs, d, bsums, gs), (rqs, rd, rbsums, rgs)] = pair else { unreachable!("rows in pairs") };
            quantize_row(x, block, qs, d, bsums, gs);
            let mut residual = vec![0.0f32; x.len()];
            residual_row(x, block, qs, d, &mut residual);
            quantize_residual_row_with(simd(), &residual, block, d, rqs, rd, rbsums, rgs);
        };
        if m * k >= PARALLEL_VALUES {
            in_tasks(pairs, k, &one);
        } else {
            pairs.into_iter().for_each(one);
        }
        acts
    }

    /// `rows` rows of zeros.
    fn zeroed(rows: usize, k: usize, block: usize) -> Q8Acts {
        Q8Acts {
            block,
            k,
            qs: vec![0; rows * k],
            d: vec![0.0; rows * k / block],
            bsums: vec![0; rows * k / 16],
            gs: vec![0.0; rows * k / 32],
        }
    }

    /// Every row's slices, to fill.
    fn rows_mut(&mut self) -> Vec<RowMut<'_>> {
        let (k, block) = (self.k.max(1), self.block);
        let (blocks, groups) = ((self.k / block).max(1), (self.k / 16).max(1));
        let rows = self.qs.chunks_mut(k).zip(self.d.chunks_mut(blocks)).zip(self.bsums.chunks_mut(groups));
        let rows = rows.zip(self.gs.chunks_mut((self.k / 32).max(1)));
        rows.map(|(((qs, d), bsums), gs)| (qs, d, bsums, gs)).collect()
    }

    pub fn row(&self, i: usize) -> Q8Row<'_> {
        let (k, b) = (self.k, self.block);
        Q8Row {
            qs: &self.qs[i * k..][..k],
            d: &self.d[i * k / b..][..k / b],
            bsums: &self.bsums[i * k / 16..][..k / 16],
            gs: &self.gs[i * k / 32..][..k / 32],
        }
    }
}

/// One row: per block, d = max|x| / 127 and q = round-half-even(x * 127 / max|x|) (all zeros for a zero block),
/// with AVX-512 where the CPU has it (`x86_quantize`, the same values).
pub(crate) fn quantize_row(x: &[f32], block: usize, qs: &mut [i8], d: &mut [f32], bsums: &mut [i16], gs: &mut [f32]) {
    quantize_row_with(simd(), x, block, qs, d, bsums, gs)
}

/// [`quantize_row`] with AVX-512 or (`simd` false) in portable Rust, the reference the other is tested against.
pub(crate) fn quantize_row_with(
    simd: bool,
    x: &[f32],
    block: usize,
    qs: &mut [i8],
    d: &mut [f32],
    bsums: &mut [i16],
    gs: &mut [f32],
) {
    // The blocks' largest magnitudes first, then the values at 127 / that, then d from it.
    for (x, d) in x.chunks_exact(block).zip(d.iter_mut()) {
        *d = abs_max(simd, x);
    }
    round_blocks(simd, x, block, &|b| if d[b] > 0.0 { 127.0 / d[b] } else { 0.0 }, qs, bsums);
    d.iter_mut().for_each(|d| *d /= 127.0);
    group_sums(block, d, bsums, gs);
}

/// The residual `r` of a row quantized by [`quantize_row`] to scales `d1`: per block `d = d1 / 256` and
/// q = round-half-even(r / d) clamped to -127..=127 (|r| <= d1 / 2 gives at most 128; the clamp takes off one step
/// of d2 where a residual sits on the first rounding's boundary). With AVX-512 where `simd` ([`simd`]: the CPU has
/// it), else in portable Rust, the reference the AVX-512 version is tested against (the same values).
#[allow(clippy::too_many_arguments)]
pub(crate) fn quantize_residual_row_with(
    simd: bool,
    r: &[f32],
    block: usize,
    d1: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    bsums: &mut [i16],
    gs: &mut [f32],
) {
    round_blocks(simd, r, block, &|b| if d1[b] > 0.0 { 256.0 / d1[b] } else { 0.0 }, qs, bsums);
    d.iter_mut().zip(d1).for_each(|(d, &d1)| *d = d1 / 256.0);
    group_sums(block, d, bsums, gs);
}

/// Whether the AVX-512 versions of the row loops run here.
pub(crate) fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    return super::Isa::Avx512.available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The largest magnitude of `x` (0 for an empty or zero block).
fn abs_max(simd: bool, x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // Safety: `simd` is only true where AVX-512 is available; Q8Acts' blocks are multiples of 16 values.
        return unsafe { super::x86_quantize::abs_max(x) };
    }
    let _ = simd;
    x.iter().fold(0.0f32, |a, v| a.max(v.abs()))
}

/// Each block b of `x`: q = round-half-even(x * id(b)) clamped to -127..=127, and the sums of every 16 q.
fn round_blocks(simd: bool, x: &[f32], block: usize, id: &dyn Fn(usize) -> f32, qs: &mut [i8], bsums: &mut [i16]) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // Safety: `simd` is only true where AVX-512 is available; `block` is a multiple of 16.
        return unsafe { super::x86_quantize::round_blocks(x, block, id, qs, bsums) };
    }
    let _ = simd;
    for (b, (x, q)) in x.chunks_exact(block).zip(qs.chunks_exact_mut(block)).enumerate() {
        let id = id(b);
        // Round half to even by adding and taking off 1.5 * 2^23 (exact for |v| <= 127: no libm call, and the
        // loop vectorises where `round_ties_even` is a call to rintf on baseline x86-64).
        const ROUND: f32 = 12_582_912.0;
        for (q, v) in q.iter_mut().zip(x) {
            *q = (((v * id).clamp(-127.0, 127.0) + ROUND) - ROUND) as i8;
        }
    }
    for (s, q) in bsums.iter_mut().zip(qs.chunks_exact(16)) {
        *s = q.iter().map(|&v| v as i16).sum();
    }
}

/// Each 32 values' `gs`: their block's d times their two sums of 16 (both quantizing paths end with it).
fn group_sums(block: usize, d: &[f32], bsums: &[i16], gs: &mut [f32]) {
    for (g, (gs, bs)) in gs.iter_mut().zip(bsums.chunks_exact(2)).enumerate() {
        *gs = d[g * 32 / block] * (bs[0] as i32 + bs[1] as i32) as f32;
    }
}

/// `out[j] = x[j] - d[j / block] * q[j]`, what a row's rounding to `qs` left (AVX-512 where the CPU has it,
/// the same values).
fn residual_row(x: &[f32], block: usize, qs: &[i8], d: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // Safety: AVX-512 is available; the slices are one row's, `block` a multiple of 16.
        return unsafe { super::x86_quantize::residual(x, block, qs, d, out) };
    }
    for (j, (r, &v)) in out.iter_mut().zip(x).enumerate() {
        *r = v - d[j / block] * qs[j] as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows quantized together in parallel tasks (groups of whole rows) are the rows quantized one at a time.
    #[test]
    fn rows_in_parallel_groups_are_each_row_alone() {
        let (m, k, block) = (131, 576, 32); // 75,456 values: the parallel path, groups of 15 rows
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 7919 % 1013) as f32 - 506.0) * 0.013).collect();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let (all, both) = pool.install(|| (Q8Acts::new(&x, m, k, block), Q8Acts::with_residuals(&x, m, k, block)));
        for i in 0..m {
            let row = &x[i * k..(i + 1) * k];
            let (one, pair) = (Q8Acts::new(row, 1, k, block), Q8Acts::with_residuals(row, 1, k, block));
            let same = |a: Q8Row, b: Q8Row| a.qs == b.qs && a.d == b.d && a.bsums == b.bsums && a.gs == b.gs;
            assert!(same(all.row(i), one.row(0)), "row {i}");
            assert!(same(both.row(2 * i), pair.row(0)) && same(both.row(2 * i + 1), pair.row(1)), "row {i}'s pair");
        }
    }
}
