// rope(x [.., seq, d], cos, sin [seq, d/2]) in the half-split layout: one thread per output pair (row, i),
// i < d/2, writing out[i] = x[i] cos - x[i + d/2] sin and out[i + d/2] = x[i + d/2] cos + x[i] sin, in f32
// then rounded. x, cos and sin may be strided; the output is dense. A row's position is its index mod seq; its
// table row that position, in its batch's block where the tables are [b, seq, d/2] (each sequence at its own
// positions: rows_per_batch rows of x a batch, and the tables' batch strides; one block for [seq, d/2]
// tables, whose rows_per_batch is every row).
struct FuseRopeArgs {
  const fuse_elem* x;
  const fuse_elem* cos;
  const fuse_elem* sin;
  fuse_elem* out;
  long long pairs;  // rows * half
  long long half;
  long long seq;
  long long x_column_stride;
  long long cos_strides[2];
  long long sin_strides[2];
  FuseLayout x_rows;  // the axes before the last: where each row of x starts
  long long cos_batch_stride;
  long long sin_batch_stride;
  long long rows_per_batch;
};

FUSE_KERNEL(256) fuse_model_rope(FUSE_KERNEL_PARAM(FuseRopeArgs) a) {
  fuse_model_grid_sync();
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < a.pairs; p += step) {
    const long long row = p / a.half;
    const long long i = p - row * a.half;
    const long long position = row % a.seq, batch = row / a.rows_per_batch;
    const fuse_elem* x = a.x + fuse_layout_offset(a.x_rows, row);
    const float lo = fuse_model_load(x, i * a.x_column_stride);
    const float hi = fuse_model_load(x, (i + a.half) * a.x_column_stride);
    const float c =
        fuse_model_load(a.cos, batch * a.cos_batch_stride + position * a.cos_strides[0] + i * a.cos_strides[1]);
    const float s =
        fuse_model_load(a.sin, batch * a.sin_batch_stride + position * a.sin_strides[0] + i * a.sin_strides[1]);
    fuse_elem* out = a.out + row * 2 * a.half;
    fuse_model_store(out, i, lo * c - hi * s);
    fuse_model_store(out, i + a.half, hi * c + lo * s);
  }
}
