// argmax(x, -1) -> u32 [rows.., 1]: one block of 1024 threads per row (grid-stride over rows). Each thread
// scans its columns FUSE_ARGMAX_UNROLL at a time, every load of a round issued before any comparison (a
// decoder's 49,152 logits at batch 1 are one row: the latency of dependent loads, not bytes, set its time),
// then the block reduces (value, index) pairs. Rows the host found vector-loadable (`vector`: unit column
// stride, every row on a 16-byte boundary) are read 16 bytes at a time, FUSE_ARGMAX_VECTOR_UNROLL vectors a
// round: the 49,152 bf16 logits are 6 vectors a thread, one round of loads (the scalar loop takes 6 rounds
// of 8 dependent loads' latency). Order: a NaN beats any number, a larger value beats a smaller,
// and equal values (or two NaNs) go to the lower index: the first, as the CPU does. The result does not
// depend on the order of comparisons.
#define FUSE_ARGMAX_THREADS 1024
#define FUSE_ARGMAX_UNROLL 8
#define FUSE_ARGMAX_WARPS (FUSE_ARGMAX_THREADS / 32)
#define FUSE_ARGMAX_VECTOR_UNROLL 8
// Elements a 16-byte vector holds.
#define FUSE_ARGMAX_VECTOR_ELEMS (16 / (int)sizeof(fuse_elem))

struct FuseArgmaxArgs {
  const fuse_elem* x;
  unsigned int* out;
  long long rows;
  long long columns;
  long long column_stride;
  long long vector;  // 1: unit column stride and 16-byte aligned rows
  FuseLayout row_layout;  // the axes before the last: where each row starts
};

__device__ __forceinline__ bool fuse_argmax_better(float v, unsigned int i, float w, unsigned int j) {
  const bool v_nan = v != v, w_nan = w != w;
  if (v_nan || w_nan) return v_nan && (!w_nan || i < j);
  return v > w || (v == w && i < j);
}

FUSE_KERNEL(FUSE_ARGMAX_THREADS) fuse_model_argmax(FUSE_KERNEL_PARAM(FuseArgmaxArgs) a) {
  fuse_model_grid_sync();
  __shared__ float warp_value[FUSE_ARGMAX_WARPS];
  __shared__ unsigned int warp_index[FUSE_ARGMAX_WARPS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (long long row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const fuse_elem* x = a.x + fuse_layout_offset(a.row_layout, row);
    // No column yet: -inf at an index past every real one, so any element beats it.
    float best = __int_as_float(0xff800000);
    unsigned int best_index = 0xffffffffu;
    // The vector path's columns (whole vectors); the loop below takes the rest (all of them otherwise).
    const long long vectors = a.vector ? a.columns / FUSE_ARGMAX_VECTOR_ELEMS : 0;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (long long v0 = threadIdx.x; v0 < vectors; v0 += FUSE_ARGMAX_VECTOR_UNROLL * FUSE_ARGMAX_THREADS) {
      uint4 raw[FUSE_ARGMAX_VECTOR_UNROLL];
#pragma unroll
      for (int u = 0; u < FUSE_ARGMAX_VECTOR_UNROLL; ++u) {
        const long long v = v0 + (long long)u * FUSE_ARGMAX_THREADS;
        raw[u] = v < vectors ? __ldg(xv + v) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int u = 0; u < FUSE_ARGMAX_VECTOR_UNROLL; ++u) {
        const long long v = v0 + (long long)u * FUSE_ARGMAX_THREADS;
        if (v >= vectors) continue;
        const unsigned int w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
#pragma unroll
        for (int e = 0; e < FUSE_ARGMAX_VECTOR_ELEMS; ++e) {
#if FUSE_MODEL_DTYPE == 0 || FUSE_MODEL_DTYPE == 3
          const float value = fuse_model_float(w[e]);
#else
          const float value = fuse_model_float(e % 2 == 0 ? w[e / 2] & 0xffffu : w[e / 2] >> 16);
#endif
          const unsigned int c = (unsigned int)(v * FUSE_ARGMAX_VECTOR_ELEMS + e);
          if (fuse_argmax_better(value, c, best, best_index)) {
            best = value;
            best_index = c;
          }
        }
      }
    }
    for (long long c0 = vectors * FUSE_ARGMAX_VECTOR_ELEMS + threadIdx.x; c0 < a.columns; c0 += FUSE_ARGMAX_UNROLL * FUSE_ARGMAX_THREADS) {
      float v[FUSE_ARGMAX_UNROLL];
#pragma unroll
      for (int u = 0; u < FUSE_ARGMAX_UNROLL; ++u) {
        const long long c = c0 + (long long)u * FUSE_ARGMAX_THREADS;
        v[u] = c < a.columns ? fuse_model_load(x, c * a.column_stride) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < FUSE_ARGMAX_UNROLL; ++u) {
        const long long c = c0 + (long long)u * FUSE_ARGMAX_THREADS;
        if (c < a.columns && fuse_argmax_better(v[u], (unsigned int)c, best, best_index)) {
          best = v[u];
          best_index = (unsigned int)c;
        }
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float v = __shfl_down_sync(0xffffffffu, best, offset);
      const unsigned int i = __shfl_down_sync(0xffffffffu, best_index, offset);
      if (fuse_argmax_better(v, i, best, best_index)) {
        best = v;
        best_index = i;
      }
    }
    if (lane == 0) {
      warp_value[warp] = best;
      warp_index[warp] = best_index;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < FUSE_ARGMAX_WARPS; ++w) {
        if (fuse_argmax_better(warp_value[w], warp_index[w], best, best_index)) {
          best = warp_value[w];
          best_index = warp_index[w];
        }
      }
      a.out[row] = best_index;
    }
    __syncthreads();  // the next row rewrites warp_value and warp_index
  }
}
