//! Attention on the CPU without a score matrix: each task takes one (batch, query head, block of queries) and
//! streams over its key/value head in tiles, keeping per query a running maximum, a running sum of weights
//! and an unnormalised output row (the online softmax). A tile's scores live in a small buffer on the stack;
//! a key/value tile is read once per block of queries, while it is in L1. Grouped-query heads index their
//! shared key/value head; nothing is copied.

use super::math;
use super::PARALLEL_MIN_ELEMENTS;

/// Queries per task: enough to reuse each key/value tile from cache, few enough to give every thread work.
const QUERY_BLOCK: usize = 16;
/// Keys per tile: their scores fit in a few cache lines.
const KEY_TILE: usize = 64;

/// `softmax(q k^T * scale) v` over dense f32 q [b, hq, sq, d] and k, v [b, hkv, skv, d], batch b over its
/// first `key_counts[b]` keys (skv for plain attention; `attention_len`'s checked lens). Shapes were checked
/// by inference (hq a multiple of hkv); the counts are at most skv, and at least sq when causal. A row with no
/// key is zeros. Returns [b, hq, sq, d].
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    q_shape: &[usize],
    kv_shape: &[usize],
    key_counts: &[usize],
    scale: f32,
    causal: bool,
) -> Vec<f32> {
    let [_, q_heads, queries, d] = [q_shape[0], q_shape[1], q_shape[2], q_shape[3]];
    let [kv_heads, capacity] = [kv_shape[1], kv_shape[2]];
    let mut out = crate::recycle::zeros_f32(q.len());
    if out.is_empty() {
        return out;
    }
    if queries == 1 {
        // A decode step: the query heads of a key/value head together, over stretches of its keys.
        return super::attention_decode::decode_attention(q, k, v, q_heads, kv_shape, key_counts, scale);
    }
    let head_len = queries * d;
    let most_keys = key_counts.iter().copied().max().unwrap_or(0);
    let parallel = out.len().saturating_mul(most_keys) >= PARALLEL_MIN_ELEMENTS;
    // One task: a (batch x query head, block of QUERY_BLOCK queries) and its rows of `out`.
    let run_block = |head: usize, block: usize, out_block: &mut [f32]| {
        // head = b * hq + h; its key/value head is b * hkv + h / (hq / hkv).
        let (b, h) = (head / q_heads, head % q_heads);
        let kv = b * kv_heads + h / (q_heads / kv_heads);
        let shape = Shape { queries, keys: key_counts[b], d, scale, causal };
        let kv_len = capacity * d;
        let (k_head, v_head) = (&k[kv * kv_len..(kv + 1) * kv_len], &v[kv * kv_len..(kv + 1) * kv_len]);
        let first = block * QUERY_BLOCK;
        let q_block = &q[head * head_len + first * d..][..out_block.len()];
        shape.block(q_block, k_head, v_head, first, out_block);
    };
    let blocks = out
        .chunks_mut(head_len)
        .enumerate()
        .flat_map(|(head, out_head)| out_head.chunks_mut(QUERY_BLOCK * d).enumerate().map(move |(i, c)| (head, i, c)));
    if parallel {
        // On the spin pool, every (head, block) a task: the pool's threads are the ones a decode step's
        // products run on, so rayon's are not woken beside them.
        super::spin_pool::for_each_item(blocks.collect(), &|_, (head, block, out_block)| {
            run_block(head, block, out_block)
        });
    } else {
        blocks.for_each(|(head, block, out_block)| run_block(head, block, out_block));
    }
    out
}

#[derive(Clone, Copy)]
struct Shape {
    queries: usize,
    keys: usize,
    d: usize,
    scale: f32,
    causal: bool,
}

impl Shape {
    /// The keys query `i` sees: all of them, or (causal) those up to its own position among the last
    /// `queries` keys.
    fn visible(&self, i: usize) -> usize {
        if self.causal {
            self.keys - self.queries + i + 1
        } else {
            self.keys
        }
    }

    /// One block of queries (`q` and `out`: its rows; `first`: the index of its first query) against one
    /// key/value head: compiled for AVX2 where the CPU has it (the same operations, 8 lanes wide: `math`'s
    /// helpers are always inlined), else for the baseline.
    fn block(&self, q: &[f32], k: &[f32], v: &[f32], first: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            // Safety: AVX2 is available (checked above).
            return unsafe { self.block_avx2(q, k, v, first, out) };
        }
        self.block_any(q, k, v, first, out)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn block_avx2(&self, q: &[f32], k: &[f32], v: &[f32], first: usize, out: &mut [f32]) {
        self.block_any(q, k, v, first, out)
    }

    #[inline(always)]
    fn block_any(&self, q: &[f32], k: &[f32], v: &[f32], first: usize, out: &mut [f32]) {
        let d = self.d;
        let rows = out.len().checked_div(d).unwrap_or(0);
        let mut max = [f32::NEG_INFINITY; QUERY_BLOCK];
        let mut sum = [0.0f32; QUERY_BLOCK];
        let mut scores = [0.0f32; KEY_TILE];
        let keys_read = if rows == 0 { 0 } else { self.visible(first + rows - 1) };
        for tile in (0..keys_read).step_by(KEY_TILE) {
            for r in 0..rows {
                let end = self.visible(first + r).min(tile + KEY_TILE);
                if end <= tile {
                    continue;
                }
                let (keys, values) = (&k[tile * d..end * d], &v[tile * d..end * d]);
                let (query, acc) = (&q[r * d..(r + 1) * d], &mut out[r * d..(r + 1) * d]);
                let tile_scores = &mut scores[..end - tile];
                math::softmax_tile(query, keys, values, self.scale, tile_scores, &mut max[r], &mut sum[r], acc);
            }
        }
        for r in 0..rows {
            // A row that saw no key (a count of 0) has sum 0 and stays zeros.
            let inv = if sum[r] > 0.0 { 1.0 / sum[r] } else { 0.0 };
            out[r * d..(r + 1) * d].iter_mut().for_each(|a| *a *= inv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain definition, for comparison: scores, softmax, weighted sum (f64); batch b over its first
    /// `counts[b]` keys.
    #[allow(clippy::too_many_arguments)]
    fn plain(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        q_shape: [usize; 4],
        kv_shape: [usize; 4],
        counts: &[usize],
        scale: f32,
        causal: bool,
    ) -> Vec<f32> {
        let [b, hq, sq, d] = q_shape;
        let [_, hkv, skv, _] = kv_shape;
        let mut out = Vec::new();
        for bi in 0..b {
            for h in 0..hq {
                let kv = bi * hkv + h / (hq / hkv);
                for i in 0..sq {
                    let visible = if causal { counts[bi] - sq + i + 1 } else { counts[bi] };
                    let qr = &q[((bi * hq + h) * sq + i) * d..][..d];
                    let s: Vec<f64> = (0..visible)
                        .map(|j| {
                            qr.iter().zip(&k[(kv * skv + j) * d..][..d]).map(|(x, y)| (x * y) as f64).sum::<f64>()
                                * scale as f64
                        })
                        .collect();
                    let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let total: f64 = w.iter().sum();
                    for c in 0..d {
                        // No key (a count of 0): zeros.
                        out.push(
                            (0..visible).map(|j| w[j] / total * v[(kv * skv + j) * d + c] as f64).sum::<f64>() as f32
                        );
                    }
                }
            }
        }
        out
    }

    #[test]
    fn tiles_and_blocks_match_the_plain_definition() {
        let mut seed = 7u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        // More keys than a tile, more queries than a block, grouped heads; causal and not.
        for (q_shape, kv_shape) in
            [([2, 4, 37, 5], [2, 2, 130, 5]), ([1, 3, 1, 8], [1, 1, 65, 8]), ([1, 1, 17, 3], [1, 1, 17, 3])]
        {
            let n = |s: [usize; 4]| s.iter().product::<usize>();
            let q: Vec<f32> = (0..n(q_shape)).map(|_| next() * 4.0).collect();
            let k: Vec<f32> = (0..n(kv_shape)).map(|_| next() * 4.0).collect();
            let v: Vec<f32> = (0..n(kv_shape)).map(|_| next()).collect();
            for causal in [false, true] {
                let all = vec![kv_shape[2]; q_shape[0]];
                let got = attention(&q, &k, &v, &q_shape, &kv_shape, &all, 0.7, causal);
                let want = plain(&q, &k, &v, q_shape, kv_shape, &all, 0.7, causal);
                let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(worst < 1e-5, "{q_shape:?} {kv_shape:?} causal {causal}: off by {worst}");
            }
        }
    }

    #[test]
    fn key_counts_limit_each_batch_and_never_read_past_it() {
        let (q_shape, kv_shape) = ([3, 4, 5, 8], [3, 2, 130, 8]);
        let counts = [130, 5, 71];
        let n = |s: [usize; 4]| s.iter().product::<usize>();
        let q: Vec<f32> = (0..n(q_shape)).map(|i| (i % 7) as f32 * 0.1).collect();
        // Keys past each batch's count are NaN: one read would show in its output.
        let past = |i: usize| (i / 8) % 130 >= counts[i / (2 * 130 * 8)];
        let k: Vec<f32> = (0..n(kv_shape)).map(|i| if past(i) { f32::NAN } else { (i % 11) as f32 * 0.05 }).collect();
        let v: Vec<f32> = (0..n(kv_shape)).map(|i| if past(i) { f32::NAN } else { (i % 13) as f32 * 0.1 }).collect();
        for causal in [false, true] {
            let got = attention(&q, &k, &v, &q_shape, &kv_shape, &counts, 0.7, causal);
            let want = plain(&q, &k, &v, q_shape, kv_shape, &counts, 0.7, causal);
            // (f32::max drops a NaN: check for one first.)
            assert!(got.iter().all(|x| x.is_finite()), "causal {causal}: a key past its count was read");
            let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "causal {causal}: off by {worst}");
        }
        // A count of 0 gives zeros, not the NaN of 0 / 0.
        let got = attention(&q, &k, &v, &q_shape, &kv_shape, &[0, 5, 0], 0.7, false);
        assert!(got[..160].iter().chain(&got[320..]).all(|&x| x == 0.0) && got[160..320].iter().all(|x| x.is_finite()));
    }

    #[test]
    fn decode_steps_take_grouped_heads_over_stretches_of_keys() {
        let mut seed = 11u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        // Groups of 3, 4 and 7 query heads a key/value head; caches of several stretches of keys; counts that
        // end inside a stretch, on its edge, at 1 and at 0; NaN past each count.
        for (q_shape, kv_shape, counts) in [
            ([1, 9, 1, 64], [1, 3, 1100, 64], vec![1029]),
            ([3, 8, 1, 12], [3, 2, 600, 12], vec![512, 1, 0]),
            ([2, 14, 1, 10], [2, 2, 300, 10], vec![300, 257]),
        ] {
            let n = |s: [usize; 4]| s.iter().product::<usize>();
            let (skv, d, hkv) = (kv_shape[2], kv_shape[3], kv_shape[1]);
            let past = |i: usize| (i / d) % skv >= counts[i / (hkv * skv * d)];
            let q: Vec<f32> = (0..n(q_shape)).map(|_| next() * 4.0).collect();
            let k: Vec<f32> = (0..n(kv_shape)).map(|i| if past(i) { f32::NAN } else { next() * 4.0 }).collect();
            let v: Vec<f32> = (0..n(kv_shape)).map(|i| if past(i) { f32::NAN } else { next() }).collect();
            for causal in [false, true] {
                if causal && counts.contains(&0) {
                    continue; // causal attention needs a key for each query
                }
                let got = attention(&q, &k, &v, &q_shape, &kv_shape, &counts, 0.3, causal);
                let want = plain(&q, &k, &v, q_shape, kv_shape, &counts, 0.3, causal);
                assert!(got.iter().all(|x| x.is_finite()), "{kv_shape:?}: a key past its count was read");
                let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(worst < 1e-5, "{q_shape:?} {kv_shape:?} causal {causal}: off by {worst}");
            }
        }
    }
}
