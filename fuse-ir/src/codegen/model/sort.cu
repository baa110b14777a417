// arg_sort_last_dim(x, ascending) -> u32 [rows.., n]: each row's column indices ordered by value, ties by
// index and a NaN above every number (torch's stable order; common order: fuse_sort_before). One block of
// FUSE_SORT_THREADS a row (grid-stride over rows): a bitonic network over the row padded to a power of two,
// in the form where each merge's first step compares mirrored positions, so every step puts the earlier
// element at the lower position. Positions past n hold virtual elements that sort after everything: such
// a pair is left as it is, so the padding costs no memory and never moves.
//
// The network in chunks of FUSE_SORT_CHUNK positions: every step whose pairs lie within a chunk runs in
// shared memory (keys and indices), a chunk at a time; only the steps of distance >= FUSE_SORT_CHUNK (rows
// longer than a chunk) run on the output itself, in global memory, each key read through its index (the
// row stays in L2). A row of at most a chunk is sorted in shared memory alone and written once.
#define FUSE_SORT_THREADS 1024
#define FUSE_SORT_CHUNK 4096

// The chunk in shared memory: its keys and their column indices (one array each for the whole block, at
// namespace scope so that the helpers address them as shared memory).
__shared__ float fuse_sort_key[FUSE_SORT_CHUNK];
__shared__ unsigned int fuse_sort_index[FUSE_SORT_CHUNK];

struct FuseSortArgs {
  const fuse_elem* x;
  unsigned int* out;
  long long rows;
  long long columns;
  long long column_stride;
  long long ascending;
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

// Loads the chunk of `chunk` positions at `base` into shared memory: its keys, and as indices its own
// positions (`fresh`) or those the output holds.
__device__ __forceinline__ void fuse_sort_load(const fuse_elem* x, long long column_stride, const unsigned int* out,
                                               unsigned int base, unsigned int chunk, unsigned int n, bool fresh) {
  for (unsigned int c = threadIdx.x; c < chunk; c += FUSE_SORT_THREADS) {
    if (base + c < n) {
      const unsigned int i = fresh ? base + c : out[base + c];
      fuse_sort_index[c] = i;
      fuse_sort_key[c] = fuse_model_load(x, (long long)i * column_stride);
    }
  }
  __syncthreads();
}

// Writes the chunk's indices back to the output.
__device__ __forceinline__ void fuse_sort_store(unsigned int* out, unsigned int base, unsigned int chunk,
                                                unsigned int n) {
  for (unsigned int c = threadIdx.x; c < chunk; c += FUSE_SORT_THREADS) {
    if (base + c < n) out[base + c] = fuse_sort_index[c];
  }
  __syncthreads();
}

extern "C" __global__ void __launch_bounds__(FUSE_SORT_THREADS, 1) fuse_model_sort(const FuseSortArgs a) {
  fuse_model_grid_sync();
  const bool ascending = a.ascending != 0;
  const unsigned int n = (unsigned int)a.columns;
  unsigned int padded = 1;
  while (padded < n) padded <<= 1;
  const unsigned int chunk = padded < FUSE_SORT_CHUNK ? padded : FUSE_SORT_CHUNK;
  for (long long row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const fuse_elem* x = a.x + fuse_layout_offset(a.row_layout, row);
    unsigned int* out = a.out + row * a.columns;
    // Every merge of blocks up to a chunk wide: within each chunk.
    for (unsigned int base = 0; base < n; base += chunk) {
      fuse_sort_load(x, a.column_stride, out, base, chunk, n, true);
      for (unsigned int width = 2; width <= chunk; width <<= 1) {
        fuse_sort_chunk_steps(base, chunk, n, width / 2, width, ascending);
      }
      fuse_sort_store(out, base, chunk, n);
    }
    // Wider merges: their long-distance steps on the output, then the rest of each within each chunk.
    for (unsigned int width = 2 * chunk; width <= padded; width <<= 1) {
      for (unsigned int distance = width / 2; distance >= chunk; distance >>= 1) {
        for (unsigned int p = threadIdx.x; p < padded / 2; p += FUSE_SORT_THREADS) {
          const unsigned int lo = fuse_sort_lower(p, distance), hi = fuse_sort_upper(lo, distance, width);
          if (hi >= n) continue;
          const unsigned int i = out[lo], j = out[hi];
          const float v = fuse_model_load(x, (long long)i * a.column_stride);
          const float w = fuse_model_load(x, (long long)j * a.column_stride);
          if (fuse_sort_before(w, j, v, i, ascending)) {
            out[lo] = j;
            out[hi] = i;
          }
        }
        __syncthreads();
      }
      for (unsigned int base = 0; base < n; base += chunk) {
        fuse_sort_load(x, a.column_stride, out, base, chunk, n, false);
        fuse_sort_chunk_steps(base, chunk, n, chunk / 2, width, ascending);
        fuse_sort_store(out, base, chunk, n);
      }
    }
  }
}
