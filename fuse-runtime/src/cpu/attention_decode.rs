//! Decode attention on the CPU (one query a sequence): each task takes one key/value head of one sequence, all
//! the query heads that share it (grouped-query attention: the keys and values are read once for the group,
//! not once a head) and one stretch of keys ([`keys_a_task`]), keeping per query a running maximum, sum and
//! unnormalised output (the online softmax); the stretches of a head are then merged. Long caches give many
//! tasks, so the threads share one head's keys. The stretch follows from the key count alone (not the thread
//! count), so the result does not depend on the number of threads. The task body is compiled for AVX2 + FMA where the CPU has
//! them (the crate's baseline is SSE2).

use super::math;

#[cfg(target_arch = "x86_64")]
mod x86;

/// Keys a task, from the longest sequence's count: up to [`STRETCHES`] stretches a head of at least
/// [`MIN_KEYS`] and at most [`MAX_KEYS`] keys (a multiple of [`MIN_KEYS`]). Short caches still give a head two or
/// more tasks (SmolLM2's 3 key/value heads at 128 cached: 6 tasks, where stretches of 256 gave 3 for 16 threads);
/// long ones keep the merge cheap (256-key stretches ran ~5% faster than 64-key ones at 1024 cached, 2 threads).
fn keys_a_task(keys: usize) -> usize {
    keys.div_ceil(STRETCHES).next_multiple_of(MIN_KEYS).clamp(MIN_KEYS, MAX_KEYS)
}
const STRETCHES: usize = 8;
const MIN_KEYS: usize = 64;
const MAX_KEYS: usize = 256;

/// `softmax(q k^T * scale) v` for one query a sequence: q `[b, hq, 1, d]`, k and v `[b, hkv, capacity, d]`,
/// sequence `i` over its first `key_counts[i]` keys (zeros where none); hq a multiple of hkv (checked by
/// inference). Returns `[b, hq, 1, d]`.
pub(super) fn decode_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    q_heads: usize,
    kv_shape: &[usize],
    key_counts: &[usize],
    scale: f32,
) -> Vec<f32> {
    let [batch, kv_heads, capacity, d] = [kv_shape[0], kv_shape[1], kv_shape[2], kv_shape[3]];
    let group = q_heads / kv_heads;
    let longest = key_counts.iter().copied().max().unwrap_or(0).min(capacity);
    let keys_a_task = keys_a_task(longest);
    let stretches = longest.div_ceil(keys_a_task).max(1);
    // Per task and query of its group: the running maximum, the sum, then d unnormalised outputs.
    let part = group * (d + 2);
    let mut parts = vec![0.0f32; batch * kv_heads * stretches * part];
    let body = task_body();
    super::spin_pool::for_each_chunk_mut(&mut parts, part, &|t, out| {
        let (head, stretch) = (t / stretches, t % stretches);
        let (b, kv) = (head / kv_heads, head % kv_heads);
        let keys = key_counts[b].min(capacity);
        let (first, end) = ((stretch * keys_a_task).min(keys), ((stretch + 1) * keys_a_task).min(keys));
        let kv_at = head * capacity * d;
        let q_at = (b * q_heads + kv * group) * d;
        let task = Task { q: &q[q_at..q_at + group * d], k: &k[kv_at..], v: &v[kv_at..], first, end, d, scale };
        body(&task, out);
    });
    // Merge each query's stretches: out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) sum_s.
    let mut out = vec![0.0f32; batch * q_heads * d];
    for (head, out_group) in out.chunks_mut(group * d).enumerate() {
        for (r, row) in out_group.chunks_mut(d).enumerate() {
            let of = |s: usize| &parts[(head * stretches + s) * part + r * (d + 2)..][..d + 2];
            let top = (0..stretches).map(|s| of(s)[0]).fold(f32::NEG_INFINITY, f32::max);
            if top == f32::NEG_INFINITY {
                continue; // no key: zeros
            }
            let mut total = 0.0f32;
            for s in 0..stretches {
                let p = of(s);
                if p[0] == f32::NEG_INFINITY {
                    continue;
                }
                let w = math::exp(p[0] - top);
                total += w * p[1];
                row.iter_mut().zip(&p[2..]).for_each(|(o, &a)| *o += w * a);
            }
            let inv = 1.0 / total;
            row.iter_mut().for_each(|o| *o *= inv);
        }
    }
    out
}

/// One task: the group's queries `q` (`rows * d`) against keys `first .. end` of the head's `k` and `v`.
struct Task<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    first: usize,
    end: usize,
    d: usize,
    scale: f32,
}

type Body = fn(&Task, &mut [f32]);

/// The task body for this CPU: AVX2 + FMA with the group's accumulators in registers where the head size is a
/// multiple of 8 and the group at most 8 queries, else the portable loops (with AVX2 + FMA
/// where the CPU has them).
fn task_body() -> Body {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // Safety: the features were just detected.
        return |t, out| unsafe { x86::run_fma(t, out) };
    }
    run_portable
}

fn run_portable(t: &Task, out: &mut [f32]) {
    run(t, out)
}

/// Keys a tile: their scores for every query of the group fit in a few cache lines, and the tile's keys and
/// values stay in L1 while every query of the group reads them.
const TILE: usize = 32;

/// `out`: per query of the group, the running maximum, the sum of weights and the unnormalised output over the
/// task's keys (maximum -inf, the rest zeros where it has none).
#[inline(always)]
fn run(t: &Task, out: &mut [f32]) {
    let d = t.d;
    let rows = t.q.len() / d;
    for r in 0..rows {
        out[r * (d + 2)] = f32::NEG_INFINITY;
    }
    let mut scores = [0.0f32; TILE];
    for tile in (t.first..t.end).step_by(TILE) {
        let n = TILE.min(t.end - tile);
        let (keys, values) = (&t.k[tile * d..(tile + n) * d], &t.v[tile * d..(tile + n) * d]);
        for r in 0..rows {
            let (head, acc) = out[r * (d + 2)..(r + 1) * (d + 2)].split_at_mut(2);
            let (max, sum) = head.split_at_mut(1);
            let query = &t.q[r * d..(r + 1) * d];
            math::softmax_tile(query, keys, values, t.scale, &mut scores[..n], &mut max[0], &mut sum[0], acc);
        }
    }
}
