// cumsum(x, -1): running sums along the last axis, the output dense. One block of 256 threads a row
// (grid-stride over rows); the row in chunks of 256 columns: each thread loads one column, the warps scan
// theirs with shuffles, the eight warp totals are scanned in shared memory, and the chunk's running total
// carries into the next chunk. Summed in f32 in a fixed order: deterministic; a NaN carries on from where it
// is, as the sums do on the CPU.
#define FUSE_CUMSUM_THREADS 256
#define FUSE_CUMSUM_WARPS (FUSE_CUMSUM_THREADS / 32)

struct FuseCumsumArgs {
  const fuse_elem* x;
  fuse_elem* out;
  long long rows;
  long long columns;
  long long column_stride;
  FuseLayout row_layout;  // the axes before the last: where each row starts
};

FUSE_KERNEL(FUSE_CUMSUM_THREADS) fuse_model_cumsum(FUSE_KERNEL_PARAM(FuseCumsumArgs) a) {
  fuse_model_grid_sync();
  __shared__ float warp_total[FUSE_CUMSUM_WARPS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (long long row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const fuse_elem* x = a.x + fuse_layout_offset(a.row_layout, row);
    fuse_elem* out = a.out + row * a.columns;
    float carry = 0.0f;  // the sum of the row's columns before this chunk
    for (long long c0 = 0; c0 < a.columns; c0 += FUSE_CUMSUM_THREADS) {
      const long long c = c0 + threadIdx.x;
      float v = c < a.columns ? fuse_model_load(x, c * a.column_stride) : 0.0f;
      // Inclusive scan within the warp.
#pragma unroll
      for (int shift = 1; shift < 32; shift <<= 1) {
        const float up = __shfl_up_sync(0xffffffffu, v, shift);
        if (lane >= shift) v += up;
      }
      if (lane == 31) warp_total[warp] = v;
      __syncthreads();
      // Each thread adds the totals of the warps before its own, in order, then the carry.
      float before = carry;
      for (int w = 0; w < warp; ++w) before += warp_total[w];
      float chunk = carry;
#pragma unroll
      for (int w = 0; w < FUSE_CUMSUM_WARPS; ++w) chunk += warp_total[w];
      if (c < a.columns) fuse_model_store(out, c, before + v);
      carry = chunk;
      // The totals are rewritten by the next chunk only after every thread has read them.
      __syncthreads();
    }
  }
}
