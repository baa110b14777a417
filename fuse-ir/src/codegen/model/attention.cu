// attention(q [b, hq, sq, d], k, v [b, hkv, skv, d], scale, causal) -> out [b, hq, sq, d] dense, flash style:
// no score or probability ever reaches global memory. q, k and v are read through their 4-D strides (views
// as they are: q a transpose, k and v a narrow of a longer cache). Query head h reads key/value head
// h / (hq / hkv); causal query i sees keys 0 ..= skv - sq + i. attention_len passes `lens` ([b] u32, a device
// value so that a captured step replays as the cache grows): batch b then has min(lens[b], skv) keys in
// place of skv, and keys past them are never loaded. This kernel does not check lens (check_lens.cu, launched
// before it, does): a row that sees no key (lens[b] = 0, or < sq under causal) writes zeros.
//
// Work item = (batch b, kv head g, query tile, key split); blocks take items grid-stride, last query tiles
// first (under causal they see the most keys). The rows of (b, g) are u = i * group + (h - g * group): the
// queries of every head that shares kv head g, so that each key/value tile is loaded once into shared memory
// (f32, coalesced along d) for up to FUSE_ATTENTION_ROWS rows. A split covers `split_keys` keys (the host
// picks splits so that the grid fills the GPU, e.g. decode's one query, from skv: with lens, splits past
// lens[b] load nothing and leave empty partials), cut at the tile's last visible key.
//
// Warp w owns rows w, w + 4, .. of the tile (at most 4): it loads their query rows (scaled by scale * log2 e,
// so that probabilities are exp2 of the scores), computes their scores with one key per lane, keeps each
// row's running max and sum in registers (online softmax; the warp reductions give every lane the same),
// and accumulates p * v with two channels a lane (c = 2 * lane + 64 * pair). One split: the block writes the
// normalised rows. Several: it writes each row's f32 partials to `partials` ([rows][splits][d] unnormalised
// sums, then [rows][splits][2] running max in log2 units and sum) and fuse_model_attention_combine merges.
//
// Dynamic shared memory, `stride` = round_up(d, 4) | 4 floats a row (an odd count of 16-byte chunks: the
// lanes' float4 reads of 8 different key rows hit 32 different banks): query [16][stride], key [32][stride],
// value [32][stride], probabilities [4 warps][32 keys][4 rows]. The host's size: fuse-ir's attention.rs.
#define FUSE_ATTENTION_THREADS 128
#define FUSE_ATTENTION_WARPS (FUSE_ATTENTION_THREADS / 32)
#define FUSE_ATTENTION_MAX_D 256
#define FUSE_ATTENTION_KEYS 32
#define FUSE_ATTENTION_ROWS 16
#define FUSE_ATTENTION_WARP_ROWS (FUSE_ATTENTION_ROWS / FUSE_ATTENTION_WARPS)
// The head dimensions this build holds (64, 128 or 256; -D from the host): a lane keeps D / 64 channel pairs
// of each of its rows in registers, so a smaller D leaves room for more resident blocks.
#ifndef FUSE_ATTENTION_D
#define FUSE_ATTENTION_D FUSE_ATTENTION_MAX_D
#endif
#define FUSE_ATTENTION_PAIRS (FUSE_ATTENTION_D / 64)

struct FuseAttentionArgs {
  const fuse_elem* q;
  const fuse_elem* k;
  const fuse_elem* v;
  fuse_elem* out;
  float* partials;  // splits > 1 only
  const unsigned int* lens;  // attention_len: the key count of each batch; null: skv for all
  long long lens_stride;
  long long batch;
  long long q_heads;
  long long queries;
  long long kv_heads;
  long long keys;
  long long d;
  long long causal;  // 0 or 1
  double scale;
  long long q_tiles;     // ceil(queries * group / FUSE_ATTENTION_ROWS)
  long long splits;      // key splits; 1: no partials
  long long split_keys;  // keys a split covers, a multiple of FUSE_ATTENTION_KEYS
  long long q_strides[4];
  long long k_strides[4];
  long long v_strides[4];
};

// An element as f32 through the read-only cache: q, k and v do not change during the kernel (the output is
// a fresh allocation), and a non-coherent load may be moved ahead of the shared-memory stores before it.
__device__ __forceinline__ float fuse_attention_load(const fuse_elem* p, long long i) {
  const fuse_elem bits = __ldg(p + i);
  return fuse_model_load(&bits, 0);
}

__device__ __forceinline__ float fuse_attention_component(const float4& v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// One key tile (keys start .. start + n, already in shared memory) for the warp's `mine` rows: scores with
// one key a lane, the online-softmax update of each row, then p * v into the rows' accumulators. The row
// loops are unrolled to FUSE_ATTENTION_WARP_ROWS with a warp-uniform guard, so that every register array is
// indexed by constants (no local memory).
__device__ __forceinline__ void fuse_attention_tile(const float* query, const float* key, const float* value, float* probs,
                                                    unsigned int stride, unsigned int d4, unsigned int start, unsigned int n,
                                                    unsigned int mine, unsigned int row0, unsigned int group, int causal_keys,
                                                    float (&running_max)[FUSE_ATTENTION_WARP_ROWS],
                                                    float (&running_sum)[FUSE_ATTENTION_WARP_ROWS],
                                                    float2 (&acc)[FUSE_ATTENTION_WARP_ROWS][FUSE_ATTENTION_PAIRS]) {
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float minus_infinity = __int_as_float(0xff800000);
  float score[FUSE_ATTENTION_WARP_ROWS];
#pragma unroll
  for (int k = 0; k < FUSE_ATTENTION_WARP_ROWS; ++k) score[k] = 0.0f;
  // Lane j's key row against each of the warp's query rows (rows r = warp + 4 k), 4 channels a step. Lanes
  // past n read a stale row; their scores are masked below.
  const float4* key_row = reinterpret_cast<const float4*>(key + lane * stride);
  const float4* query_rows = reinterpret_cast<const float4*>(query + warp * stride);
  const unsigned int row_step = FUSE_ATTENTION_WARPS * stride / 4;  // float4s from one of the warp's rows to the next
  for (unsigned int c = 0; c < d4 / 4; ++c) {
    const float4 kv = key_row[c];
#pragma unroll
    for (int k = 0; k < FUSE_ATTENTION_WARP_ROWS; ++k) {
      if ((unsigned int)k < mine) {
        const float4 qv = query_rows[k * row_step + c];
        score[k] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
      }
    }
  }
  float4 p4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int k = 0; k < FUSE_ATTENTION_WARP_ROWS; ++k) {
    if ((unsigned int)k >= mine) continue;
    // The row's query i sees keys below causal_keys + i: keys - sq + 1 + i causal (<= 0: none), else at
    // least the batch's keys.
    const int visible = causal_keys + (int)((row0 + FUSE_ATTENTION_WARPS * k) / group);
    const float s = lane < n && (int)(start + lane) < visible ? score[k] : minus_infinity;
    const float new_max = fmaxf(running_max[k], fuse_warp_max(s));
    // A row that has seen no key yet (all masked so far) keeps max -inf, sum 0: exp2(-inf - -inf) is NaN.
    const bool any = new_max != minus_infinity;
    const float p = any ? exp2f(s - new_max) : 0.0f;
    // What was summed under the old maximum shrinks by exp2(old - new): 0 when old is -inf.
    const float correction = any ? exp2f(running_max[k] - new_max) : 1.0f;
    running_sum[k] = running_sum[k] * correction + fuse_warp_sum(p);
    running_max[k] = new_max;
#pragma unroll
    for (int pair = 0; pair < FUSE_ATTENTION_PAIRS; ++pair) {
      acc[k][pair].x *= correction;
      acc[k][pair].y *= correction;
    }
    if (k == 0) p4.x = p;
    if (k == 1) p4.y = p;
    if (k == 2) p4.z = p;
    if (k == 3) p4.w = p;
  }
  float4* warp_probs = reinterpret_cast<float4*>(probs) + warp * FUSE_ATTENTION_KEYS;
  warp_probs[lane] = p4;
  __syncwarp();
  // p * v: key j's probabilities for the warp's rows in one broadcast read, then the lane's channel pairs.
  for (unsigned int j = 0; j < n; ++j) {
    const float4 pj = warp_probs[j];
    const float* value_row = value + j * stride;
#pragma unroll
    for (int pair = 0; pair < FUSE_ATTENTION_PAIRS; ++pair) {
      const unsigned int c = 2 * lane + 64 * pair;
      if (c < d4) {
        const float2 vv = *reinterpret_cast<const float2*>(value_row + c);
#pragma unroll
        for (int k = 0; k < FUSE_ATTENTION_WARP_ROWS; ++k) {
          if ((unsigned int)k < mine) {
            const float p = fuse_attention_component(pj, k);
            acc[k][pair].x += p * vv.x;
            acc[k][pair].y += p * vv.y;
          }
        }
      }
    }
  }
  __syncwarp();  // the next tile rewrites warp_probs
}

// At least 4 blocks a multiprocessor: a register cap of 128 that ptxas meets without spills for every D (left
// to itself it picks a lower cap for some and spills).
FUSE_KERNEL(FUSE_ATTENTION_THREADS, 4) fuse_model_attention(FUSE_KERNEL_PARAM(FuseAttentionArgs) a) {
  fuse_model_grid_sync();
  extern __shared__ float4 fuse_attention_shared[];
  // 32-bit index arithmetic (the host checks that rows, keys and work items fit): 64-bit divisions cost a
  // call. Element offsets stay 64-bit.
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned int d = (unsigned int)a.d, d4 = (d + 3u) & ~3u, stride = d4 | 4u;
  float* const query = reinterpret_cast<float*>(fuse_attention_shared);
  float* const key = query + FUSE_ATTENTION_ROWS * stride;
  float* const value = key + FUSE_ATTENTION_KEYS * stride;
  float* const probs = value + FUSE_ATTENTION_KEYS * stride;
  const unsigned int q_heads = (unsigned int)a.q_heads, kv_heads = (unsigned int)a.kv_heads;
  const unsigned int queries = (unsigned int)a.queries, keys = (unsigned int)a.keys;
  const unsigned int group = q_heads / kv_heads, group_rows = queries * group;
  const unsigned int q_tiles = (unsigned int)a.q_tiles, splits = (unsigned int)a.splits;
  const unsigned int split_keys = (unsigned int)a.split_keys;
  const unsigned int items = (unsigned int)a.batch * kv_heads * q_tiles * splits;
  const float q_scale = (float)(a.scale * 1.4426950408889634);  // log2(e): probabilities are exp2 of scores
  const float minus_infinity = __int_as_float(0xff800000);
  for (unsigned int item = blockIdx.x; item < items; item += gridDim.x) {
    const unsigned int split = item % splits;
    const unsigned int tile = q_tiles - 1 - (item / splits) % q_tiles;
    const unsigned int g = (item / splits / q_tiles) % kv_heads, b = item / splits / q_tiles / kv_heads;
    const unsigned int first = tile * FUSE_ATTENTION_ROWS;
    const unsigned int rows = min(FUSE_ATTENTION_ROWS, group_rows - first);
    // The batch's keys (lens clamped to skv), and the causal limit in signed arithmetic: lens[b] < sq makes
    // it negative. The host checks skv + sq < 2^31.
    const unsigned int batch_keys = a.lens ? min(__ldg(a.lens + b * a.lens_stride), keys) : keys;
    const int causal_keys = a.causal ? (int)batch_keys - (int)queries + 1 : (int)batch_keys;
    // This split's keys, cut at the last key the tile's last query sees (it sees the most).
    const int last_query = (int)((first + rows - 1) / group);
    const unsigned int seen = (unsigned int)max(0, min(causal_keys + last_query, (int)batch_keys));
    const unsigned int begin = split * split_keys;
    const unsigned int end = min(min(begin + split_keys, batch_keys), seen);  // <= begin: no key, empty partials
    // The warp's rows r = warp + 4 k, k < mine; it loads their query rows itself (so only __syncwarp).
    const unsigned int mine = rows > warp ? (rows - warp + FUSE_ATTENTION_WARPS - 1) / FUSE_ATTENTION_WARPS : 0;
    float running_max[FUSE_ATTENTION_WARP_ROWS], running_sum[FUSE_ATTENTION_WARP_ROWS];
    float2 acc[FUSE_ATTENTION_WARP_ROWS][FUSE_ATTENTION_PAIRS];
#pragma unroll
    for (int k = 0; k < FUSE_ATTENTION_WARP_ROWS; ++k) {
      running_max[k] = minus_infinity;
      running_sum[k] = 0.0f;
#pragma unroll
      for (int pair = 0; pair < FUSE_ATTENTION_PAIRS; ++pair) acc[k][pair] = make_float2(0.0f, 0.0f);
      if ((unsigned int)k < mine) {
        const unsigned int u = first + warp + FUSE_ATTENTION_WARPS * k, h = g * group + u % group;
        const fuse_elem* q = a.q + b * a.q_strides[0] + h * a.q_strides[1] + (u / group) * a.q_strides[2];
        float* row = query + (warp + FUSE_ATTENTION_WARPS * k) * stride;
        for (unsigned int c = lane; c < d4; c += 32) row[c] = c < d ? fuse_attention_load(q, c * a.q_strides[3]) * q_scale : 0.0f;
      }
    }
    __syncwarp();
    const fuse_elem* k_base = a.k + b * a.k_strides[0] + g * a.k_strides[1];
    const fuse_elem* v_base = a.v + b * a.v_strides[0] + g * a.v_strides[1];
    for (unsigned int start = begin; start < end; start += FUSE_ATTENTION_KEYS) {
      const unsigned int n = min(FUSE_ATTENTION_KEYS, end - start);
      __syncthreads();  // every warp is done with the previous tile
      // Warp w loads keys w, w + 4, ..; the lanes go along d (coalesced when d is the unit-stride axis).
      // Channels d .. d4 are zero so that the float4 dot products need no tail.
#pragma unroll 2
      for (unsigned int j = warp; j < n; j += FUSE_ATTENTION_WARPS) {
        const fuse_elem* k_row = k_base + (start + j) * a.k_strides[2];
        const fuse_elem* v_row = v_base + (start + j) * a.v_strides[2];
        for (unsigned int c = lane; c < d4; c += 32) {
          key[j * stride + c] = c < d ? fuse_attention_load(k_row, c * a.k_strides[3]) : 0.0f;
          value[j * stride + c] = c < d ? fuse_attention_load(v_row, c * a.v_strides[3]) : 0.0f;
        }
      }
      __syncthreads();
      // A warp without rows (a tile of fewer than 4) only helps load.
      if (mine > 0) fuse_attention_tile(query, key, value, probs, stride, d4, start, n, mine, first + warp, group, causal_keys, running_max, running_sum, acc);
    }
#pragma unroll
    for (int k = 0; k < FUSE_ATTENTION_WARP_ROWS; ++k) {
      if ((unsigned int)k >= mine) continue;
      const unsigned int u = first + warp + FUSE_ATTENTION_WARPS * k, h = g * group + u % group;
      const unsigned int row = (b * q_heads + h) * queries + u / group;  // of the dense output [b, hq, sq]
      if (splits == 1) {
        // A row that saw no key (lens[b] = 0, or < sq under causal) has sum 0 and acc 0: it writes zeros.
        const float inverse = running_sum[k] > 0.0f ? 1.0f / running_sum[k] : 0.0f;
        fuse_elem* out = a.out + (unsigned long long)row * d;
#pragma unroll
        for (int pair = 0; pair < FUSE_ATTENTION_PAIRS; ++pair) {
          const unsigned int c = 2 * lane + 64 * pair;
          if (c < d) fuse_model_store(out, c, acc[k][pair].x * inverse);
          if (c + 1 < d) fuse_model_store(out, c + 1, acc[k][pair].y * inverse);
        }
      } else {
        const unsigned long long part = (unsigned long long)row * splits + split;
        float* partial = a.partials + part * d;
#pragma unroll
        for (int pair = 0; pair < FUSE_ATTENTION_PAIRS; ++pair) {
          const unsigned int c = 2 * lane + 64 * pair;
          if (c < d) partial[c] = acc[k][pair].x;
          if (c + 1 < d) partial[c + 1] = acc[k][pair].y;
        }
        if (lane == 0) {
          float* stats = a.partials + (unsigned long long)a.batch * q_heads * queries * splits * d + 2 * part;
          stats[0] = running_max[k];
          stats[1] = running_sum[k];
        }
      }
    }
    // The next item rewrites this warp's query rows (its own) and, after a __syncthreads, the key tile.
    __syncwarp();
  }
}
