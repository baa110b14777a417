// One part of cat(parts, axis): one thread per element of the part (grid-stride), read through the part's
// strides, written into its slice of the dense output (`out` points at the slice's first element, and
// `out_strides` are the whole output's). Elements are copied bit for bit, so any dtype (u32 too) works.
struct FuseCatArgs {
  const fuse_elem* part;
  fuse_elem* out;
  long long count;  // elements of the part
  FuseLayout part_layout;
  long long out_strides[FUSE_MODEL_RANK];
};

extern "C" __global__ void __launch_bounds__(256) fuse_model_cat(const FuseCatArgs a) {
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < a.count; e += step) {
    long long linear = e, out_offset = 0;
#pragma unroll
    for (int axis = FUSE_MODEL_RANK - 1; axis >= 0; --axis) {
      out_offset += (linear % a.part_layout.sizes[axis]) * a.out_strides[axis];
      linear /= a.part_layout.sizes[axis];
    }
    a.out[out_offset] = a.part[fuse_layout_offset(a.part_layout, e)];
  }
}
