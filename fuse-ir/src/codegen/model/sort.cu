// Sorting along the last axis, in torch's stable order: by value, ties by index, a NaN above every number
// (fuse_sort_before).
//
// fuse_model_sort: arg_sort_last_dim(x, ascending) -> u32 [rows.., n], and the first `kept` of each row into
// `out` (topk past what fuse_model_topk holds). A bitonic network over each row padded to a power of two, in
// the form where each merge's first step compares mirrored positions, so every step puts the earlier element
// at the lower position; positions past n hold virtual elements that sort after everything (such a pair is
// left as it is: the padding costs no memory and never moves). The host launches it in `mode`s, so that
// every row's work spreads over the GPU (one block a row is latency-bound: 1.2 ms for 49,152 columns):
//   0: each block sorts one chunk of FUSE_SORT_CHUNK positions of one row in shared memory (every merge up
//      to a chunk wide), into `scratch` (the row's indices, n a row);
//   1: one step of a wider merge (`width`, `distance` >= a chunk), a thread a pair, on `scratch` and `keys`
//      (the values beside their indices, f32) in global memory;
//   2: the rest of a wider merge (distances below a chunk) within each chunk, in shared memory.
// The last launch (mode 0 for a row of one chunk, else mode 2 of the widest merge) writes the first `kept`
// positions of each row to `out` (`kept` a row) as well where `out` is not `scratch`.
//
// fuse_model_topk: arg_topk(x, k) -> u32 [rows.., k], the first k of a descending sort, for k up to
// FUSE_SORT_CHUNK: one block a row selects them without sorting the row. Each column's 64-bit key, its
// value's order bits then its index inverted, is unique and orders as the sort does; eight radix passes of 8
// bits from the top find the k-th largest key (stopping early once every key sharing the chosen prefix is
// needed); the k keys at or above it are gathered and sorted in shared memory.
#define FUSE_SORT_THREADS 1024
#define FUSE_SORT_CHUNK 4096

// A chunk's keys and column indices in shared memory (namespace scope: the helpers address them as shared).
__shared__ float fuse_sort_key[FUSE_SORT_CHUNK];
__shared__ unsigned int fuse_sort_index[FUSE_SORT_CHUNK];

struct FuseSortArgs {
  const fuse_elem* x;
  unsigned int* scratch;  // n a row: the network's indices
  float* keys;            // n a row: their values, as f32 (so that no step past the first reads x)
  unsigned int* out;      // kept a row
  long long rows;
  long long columns;
  long long column_stride;
  long long ascending;
  long long kept;
  long long mode;  // 0 chunks, 1 a wide step, 2 a wide merge's rest within chunks
  long long width;
  long long distance;
  long long last;  // 1: this launch writes `out`
  FuseLayout row_layout;  // the axes before the last: where each row starts
};

// Whether (v, i) goes before (w, j): by value in the asked direction, a NaN after every number ascending and
// before them descending, equal values (two NaNs too) by index.
__device__ __forceinline__ bool fuse_sort_before(float v, unsigned int i, float w, unsigned int j, bool ascending) {
  const bool v_nan = v != v, w_nan = w != w;
  if (v_nan || w_nan) return v_nan == w_nan ? i < j : (ascending ? w_nan : v_nan);
  if (v == w) return i < j;
  return ascending ? v < w : v > w;
}

// The lower position of pair p of a step of distance `distance` (a power of two): positions whose
// `distance` bit is clear, in order.
__device__ __forceinline__ unsigned int fuse_sort_lower(unsigned int p, unsigned int distance) {
  return ((p & ~(distance - 1)) << 1) | (p & (distance - 1));
}

// The partner of `lower` in a step of distance `distance` of the merge of blocks of `width`: the mirrored
// position on the merge's first step (distance = width / 2), lower + distance after.
__device__ __forceinline__ unsigned int fuse_sort_upper(unsigned int lower, unsigned int distance, unsigned int width) {
  return distance == width / 2 ? lower ^ (width - 1) : lower + distance;
}

// Steps of distances `first` down to 1 of the merge of blocks of `width`, on the chunk of `chunk` positions
// starting at `base` (positions at or past n are virtual), in shared memory.
__device__ __forceinline__ void fuse_sort_chunk_steps(unsigned int base, unsigned int chunk, unsigned int n,
                                                      unsigned int first, unsigned int width, bool ascending) {
  float* key = fuse_sort_key;
  unsigned int* index = fuse_sort_index;
  for (unsigned int distance = first; distance > 0; distance >>= 1) {
    for (unsigned int p = threadIdx.x; p < chunk / 2; p += FUSE_SORT_THREADS) {
      const unsigned int lo = fuse_sort_lower(p, distance), hi = fuse_sort_upper(lo, distance, width);
      if (base + hi < n && fuse_sort_before(key[hi], index[hi], key[lo], index[lo], ascending)) {
        const float k = key[lo];
        const unsigned int i = index[lo];
        key[lo] = key[hi];
        index[lo] = index[hi];
        key[hi] = k;
        index[hi] = i;
      }
    }
    __syncthreads();
  }
}

// Loads the chunk of `chunk` positions at `base` into shared memory: from x with their own positions as
// indices (`fresh`), or the keys and indices an earlier launch stored.
__device__ __forceinline__ void fuse_sort_load(const fuse_elem* x, long long column_stride, const unsigned int* scratch,
                                               const float* keys, unsigned int base, unsigned int chunk,
                                               unsigned int n, bool fresh) {
  for (unsigned int c = threadIdx.x; c < chunk; c += FUSE_SORT_THREADS) {
    if (base + c < n) {
      fuse_sort_index[c] = fresh ? base + c : scratch[base + c];
      fuse_sort_key[c] = fresh ? fuse_model_load(x, (long long)(base + c) * column_stride) : keys[base + c];
    }
  }
  __syncthreads();
}

// Writes the chunk's keys and indices back, and the indices of the first `kept` positions to `out` (when
// given).
__device__ __forceinline__ void fuse_sort_store(unsigned int* scratch, float* keys, unsigned int* out, unsigned int kept,
                                                unsigned int base, unsigned int chunk, unsigned int n) {
  for (unsigned int c = threadIdx.x; c < chunk; c += FUSE_SORT_THREADS) {
    if (base + c < n) {
      scratch[base + c] = fuse_sort_index[c];
      keys[base + c] = fuse_sort_key[c];
    }
    if (out != 0 && base + c < kept) out[base + c] = fuse_sort_index[c];
  }
  __syncthreads();
}

FUSE_KERNEL(FUSE_SORT_THREADS, 1) fuse_model_sort(FUSE_KERNEL_PARAM(FuseSortArgs) a) {
  fuse_model_grid_sync();
  const bool ascending = a.ascending != 0;
  const unsigned int n = (unsigned int)a.columns;
  unsigned int padded = 1;
  while (padded < n) padded <<= 1;
  const unsigned int chunk = padded < FUSE_SORT_CHUNK ? padded : FUSE_SORT_CHUNK;
  const long long chunks = (n + chunk - 1) / chunk;
  if (a.mode == 1) {
    // One wide step, a thread a pair of one row.
    const long long pairs = padded / 2, step = (long long)gridDim.x * blockDim.x;
    const unsigned int width = (unsigned int)a.width, distance = (unsigned int)a.distance;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < a.rows * pairs; t += step) {
      const long long row = t / pairs;
      const unsigned int lo = fuse_sort_lower((unsigned int)(t - row * pairs), distance);
      const unsigned int hi = fuse_sort_upper(lo, distance, width);
      if (hi >= n) continue;
      unsigned int* scratch = a.scratch + row * a.columns;
      float* keys = a.keys + row * a.columns;
      const unsigned int i = scratch[lo], j = scratch[hi];
      const float v = keys[lo], w = keys[hi];
      if (fuse_sort_before(w, j, v, i, ascending)) {
        scratch[lo] = j;
        scratch[hi] = i;
        keys[lo] = w;
        keys[hi] = v;
      }
    }
    return;
  }
  // Modes 0 and 2: a block a (row, chunk).
  for (long long item = blockIdx.x; item < a.rows * chunks; item += gridDim.x) {
    const long long row = item / chunks;
    const unsigned int base = (unsigned int)(item - row * chunks) * chunk;
    const fuse_elem* x = a.x + fuse_layout_offset(a.row_layout, row);
    unsigned int* scratch = a.scratch + row * a.columns;
    float* keys = a.keys + row * a.columns;
    unsigned int* out = a.last && a.out != a.scratch ? a.out + row * a.kept : 0;
    const unsigned int kept = (unsigned int)a.kept;
    if (a.mode == 0) {
      fuse_sort_load(x, a.column_stride, scratch, keys, base, chunk, n, true);
      for (unsigned int width = 2; width <= chunk; width <<= 1) {
        fuse_sort_chunk_steps(base, chunk, n, width / 2, width, ascending);
      }
    } else {
      fuse_sort_load(x, a.column_stride, scratch, keys, base, chunk, n, false);
      fuse_sort_chunk_steps(base, chunk, n, chunk / 2, (unsigned int)a.width, ascending);
    }
    fuse_sort_store(scratch, keys, out, kept, base, chunk, n);
  }
}

// ---- topk ----

struct FuseTopkArgs {
  const fuse_elem* x;
  unsigned int* out;  // k a row
  long long rows;
  long long columns;
  long long column_stride;
  long long k;
  FuseLayout row_layout;
};

// A value's order bits: larger for a later place in an ascending sort (a NaN above +inf, -0 as 0).
__device__ __forceinline__ unsigned int fuse_topk_order(float f) {
  if (f != f) return 0xffffffffu;
  const unsigned int bits = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// Column c's key from its value: the value's order bits, then c inverted (a lower index first among equal
// values).
__device__ __forceinline__ unsigned long long fuse_topk_key(float value, unsigned int c) {
  return ((unsigned long long)fuse_topk_order(value) << 32) | (unsigned long long)(0xffffffffu - c);
}

// body(c, key) for every column c < n of this thread's share of the row, in key form: FUSE_TOPK_UNROLL
// columns (c0, c0 + a block, ..) loaded before any is used, since a pass over a long row is bound by the
// latency of its loads. The selection's passes and its gathering pass both go over the row this way.
#define FUSE_TOPK_UNROLL 8
template <typename Body>
__device__ __forceinline__ void fuse_topk_for_each_key(const fuse_elem* x, long long column_stride, unsigned int n,
                                                       Body body) {
  for (unsigned int c0 = threadIdx.x; c0 < n; c0 += FUSE_TOPK_UNROLL * FUSE_SORT_THREADS) {
    float v[FUSE_TOPK_UNROLL];
#pragma unroll
    for (int u = 0; u < FUSE_TOPK_UNROLL; ++u) {
      const unsigned int c = c0 + u * FUSE_SORT_THREADS;
      v[u] = c < n ? fuse_model_load(x, (long long)c * column_stride) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < FUSE_TOPK_UNROLL; ++u) {
      const unsigned int c = c0 + u * FUSE_SORT_THREADS;
      if (c < n) body(c, fuse_topk_key(v[u], c));
    }
  }
}

FUSE_KERNEL(FUSE_SORT_THREADS, 1) fuse_model_topk(FUSE_KERNEL_PARAM(FuseTopkArgs) a) {
  fuse_model_grid_sync();
  __shared__ unsigned int histogram[256];
  __shared__ unsigned int chosen_digit, still_needed, done, gathered;
  const unsigned int n = (unsigned int)a.columns, k = (unsigned int)a.k;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (long long row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const fuse_elem* x = a.x + fuse_layout_offset(a.row_layout, row);
    unsigned long long prefix = 0, mask = 0;
    if (threadIdx.x == 0) {
      still_needed = k;
      done = 0;
      gathered = 0;
    }
    __syncthreads();
    // Eight passes of 8 bits from the top: the digit of the k-th largest key among those with the prefix.
    for (int shift = 56; shift >= 0 && !done; shift -= 8) {
      for (int b = threadIdx.x; b < 256; b += FUSE_SORT_THREADS) histogram[b] = 0;
      __syncthreads();
      fuse_topk_for_each_key(x, a.column_stride, n, [&](unsigned int, unsigned long long key) {
        if ((key & mask) == prefix) atomicAdd(&histogram[(key >> shift) & 255], 1u);
      });
      __syncthreads();
      if (warp == 0) {
        // Lane l holds digits 255 - 8l down to 248 - 8l: their count, the counts of the lanes above it. Every
        // lane reads what is still needed before the one that finds the digit rewrites it.
        const unsigned int need = still_needed;
        __syncwarp();
        unsigned int mine = 0;
#pragma unroll
        for (int d = 0; d < 8; ++d) mine += histogram[255 - 8 * lane - d];
        unsigned int above = mine;
#pragma unroll
        for (int offset = 1; offset < 32; offset <<= 1) {
          const unsigned int up = __shfl_up_sync(0xffffffffu, above, offset);
          if (lane >= offset) above += up;
        }
        above -= mine;
        if (above < need && need <= above + mine) {
          unsigned int before = above;
          for (int d = 0; d < 8; ++d) {
            const unsigned int digit = 255 - 8 * lane - d, count = histogram[digit];
            if (need <= before + count) {
              chosen_digit = digit;
              still_needed = need - before;
              // Every key with this prefix is needed: the selection stops here.
              done = need - before == count;
              break;
            }
            before += count;
          }
        }
      }
      __syncthreads();
      prefix |= (unsigned long long)chosen_digit << shift;
      mask |= 255ull << shift;
    }
    // The k keys at or above the selected prefix, gathered (in no order), then sorted largest first: the order
    // bits in the chunk's key array (read as integers), the columns in its index array.
    unsigned int* order = reinterpret_cast<unsigned int*>(fuse_sort_key);
    fuse_topk_for_each_key(x, a.column_stride, n, [&](unsigned int c, unsigned long long key) {
      if ((key & mask) >= prefix) {
        const unsigned int slot = atomicAdd(&gathered, 1u);
        if (slot < k) {
          order[slot] = (unsigned int)(key >> 32);
          fuse_sort_index[slot] = c;
        }
      }
    });
    __syncthreads();
    unsigned int padded = 1;
    while (padded < k) padded <<= 1;
    for (unsigned int width = 2; width <= padded; width <<= 1) {
      for (unsigned int distance = width / 2; distance > 0; distance >>= 1) {
        for (unsigned int p = threadIdx.x; p < padded / 2; p += FUSE_SORT_THREADS) {
          const unsigned int lo = fuse_sort_lower(p, distance), hi = fuse_sort_upper(lo, distance, width);
          if (hi >= k) continue;
          const unsigned int u = order[lo], v = order[hi], i = fuse_sort_index[lo], j = fuse_sort_index[hi];
          if (v > u || (v == u && j < i)) {
            order[lo] = v;
            order[hi] = u;
            fuse_sort_index[lo] = j;
            fuse_sort_index[hi] = i;
          }
        }
        __syncthreads();
      }
    }
    for (unsigned int j = threadIdx.x; j < k; j += FUSE_SORT_THREADS) a.out[row * a.k + j] = fuse_sort_index[j];
    __syncthreads();  // the next row rewrites the shared arrays and counters
  }
}
