//! The decode attention task body with AVX2 + FMA: per tile of keys, each key row is read once for the scores
//! of every query of the group (four keys at a time, their four dot products reduced together by `vhaddps`
//! where one reduction a key was most of the scores' instructions), and each value row once for the outputs of
//! every query, whose accumulators stay in registers across the tile's keys (eight values of the head at a
//! time). The tile's maximum and sum of weights fold in eight lanes, not one chain of dependent steps. The group
//! size is a const parameter so those accumulators are registers, not an array in memory. SmolLM2's 9 query
//! heads on 3 key/value heads of 64, one thread: 128 keys 11.6 -> 8.6 us, 1024 keys 86.8 -> 66.6 us.

use super::{math, run, Task, TILE};
use std::arch::x86_64::*;

/// Runs `t` into `out` (see `super::run`, whose contract this keeps).
///
/// Safety: the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn run_fma(t: &Task, out: &mut [f32]) {
    let rows = t.q.len().checked_div(t.d).unwrap_or(0);
    if !t.d.is_multiple_of(8) {
        return run(t, out);
    }
    // A body for each group size up to 8 (query heads a key/value head); larger groups run the portable loops.
    match rows {
        1 => group::<1>(t, out),
        2 => group::<2>(t, out),
        3 => group::<3>(t, out),
        4 => group::<4>(t, out),
        5 => group::<5>(t, out),
        6 => group::<6>(t, out),
        7 => group::<7>(t, out),
        8 => group::<8>(t, out),
        _ => run(t, out),
    }
}

/// `G` queries (rows of `t.q`) against the task's keys. `out` per query: the running maximum, the sum of
/// weights, then d unnormalised outputs (maximum -inf, the rest zeros where the task has no key).
#[target_feature(enable = "avx2,fma")]
unsafe fn group<const G: usize>(t: &Task, out: &mut [f32]) {
    let d = t.d;
    let stride = d + 2;
    assert!(t.q.len() == G * d && out.len() >= G * stride && t.end * d <= t.k.len().min(t.v.len()));
    for r in 0..G {
        out[r * stride] = f32::NEG_INFINITY;
    }
    let mut weights = [[0.0f32; TILE]; G];
    for tile in (t.first..t.end).step_by(TILE) {
        let n = TILE.min(t.end - tile);
        let keys = t.k.as_ptr().add(tile * d);
        let values = t.v.as_ptr().add(tile * d);
        // The next tile's rows, fetched while this one computes (a row with each key's scores): a head's keys
        // come from memory each token (the weights stream through the caches between layers), and one thread's
        // plain loads drew about half the bandwidth it gets with these.
        let ahead = TILE.min(t.end.saturating_sub(tile + TILE));
        for j in 0..ahead {
            for line in (0..d).step_by(16) {
                _mm_prefetch::<_MM_HINT_T0>(keys.add((TILE + j) * d + line).cast());
                _mm_prefetch::<_MM_HINT_T0>(values.add((TILE + j) * d + line).cast());
            }
        }
        // Four keys at a time: their four dot products reduced together.
        let scale = _mm_set1_ps(t.scale);
        let mut j = 0;
        while j + 4 <= n {
            for (r, w) in weights.iter_mut().enumerate() {
                let s = _mm_mul_ps(dot4(t.q.as_ptr().add(r * d), keys.add(j * d), d), scale);
                _mm_storeu_ps(w.as_mut_ptr().add(j), s);
            }
            j += 4;
        }
        for j in j..n {
            for (r, w) in weights.iter_mut().enumerate() {
                w[j] = dot(t.q.as_ptr().add(r * d), keys.add(j * d), d) * t.scale;
            }
        }
        // Per query: the new maximum, what was summed rescaled once, the tile's weights.
        for (r, w) in weights.iter_mut().enumerate() {
            let head = &mut out[r * stride..(r + 1) * stride];
            let tile_max = lanes_fold(&w[..n], f32::NEG_INFINITY, f32::max);
            let new_max = head[0].max(tile_max);
            let correction = math::exp(head[0] - new_max);
            if correction != 1.0 {
                head[1..].iter_mut().for_each(|a| *a *= correction);
            }
            // The weights first (a loop that vectorises), then their sum in eight lanes.
            for p in &mut w[..n] {
                *p = math::exp(*p - new_max);
            }
            let sum = head[1] + lanes_fold(&w[..n], 0.0, |a, b| a + b);
            head[0] = new_max;
            head[1] = sum;
        }
        // acc[r] += sum_j w[r][j] v[j], eight values of the head at a time.
        let base = out.as_mut_ptr();
        let acc_of = |r: usize, c: usize| base.add(r * stride + 2 + c);
        for c in (0..d).step_by(8) {
            let mut acc = [_mm256_setzero_ps(); G];
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(acc_of(r, c));
            }
            for j in 0..n {
                let v = _mm256_loadu_ps(values.add(j * d + c));
                for (a, w) in acc.iter_mut().zip(&weights) {
                    *a = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), v, *a);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(acc_of(r, c), *a);
            }
        }
    }
}

/// `values` folded by `f` in eight lanes (each lane's values in order, then the lanes pairwise): a loop that
/// vectorises where one chain through every value would wait on each step.
#[inline(always)]
fn lanes_fold(values: &[f32], init: f32, f: impl Fn(f32, f32) -> f32 + Copy) -> f32 {
    let mut lanes = [init; 8];
    let chunks = values.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = f(*l, v);
        }
    }
    for (l, &v) in lanes.iter_mut().zip(rest) {
        *l = f(*l, v);
    }
    let [a, b, c, d, e, g, h, i] = lanes;
    f(f(f(a, b), f(c, d)), f(f(e, g), f(h, i)))
}

/// `a . b_i` for the four rows `b_0 .. b_3` of `d` values (a multiple of 8) from `b`, one FMA chain a row and
/// the four sums reduced together.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot4(a: *const f32, b: *const f32, d: usize) -> __m128 {
    let mut s = [_mm256_setzero_ps(); 4];
    for c in (0..d).step_by(8) {
        let q = _mm256_loadu_ps(a.add(c));
        for (i, s) in s.iter_mut().enumerate() {
            *s = _mm256_fmadd_ps(q, _mm256_loadu_ps(b.add(i * d + c)), *s);
        }
    }
    // [s0 s0 s1 s1 | ..] pairs, then [s0 s1 s2 s3] in each half, then the halves.
    let h = _mm256_hadd_ps(_mm256_hadd_ps(s[0], s[1]), _mm256_hadd_ps(s[2], s[3]));
    _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1))
}

/// `a . b` over `d` values (a multiple of 8), two FMA chains.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot(a: *const f32, b: *const f32, d: usize) -> f32 {
    let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut c = 0;
    while c + 16 <= d {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(c)), _mm256_loadu_ps(b.add(c)), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(c + 8)), _mm256_loadu_ps(b.add(c + 8)), s1);
        c += 16;
    }
    if c < d {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(c)), _mm256_loadu_ps(b.add(c)), s0);
    }
    let s = _mm256_add_ps(s0, s1);
    let half = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)))
}
