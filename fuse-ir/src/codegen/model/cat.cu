// One part of cat(parts, axis), or the rows of slice_set: one thread per element of the part (grid-stride),
// read through the part's strides, written into its slice of the output (`out` points at the slice's first
// element, and `out_strides` are the whole output's). Elements are copied bit for bit, so any dtype (u32
// too) works. slice_set with its offset in device memory (`offset` not null) moves `out` by
// `*offset * offset_stride` elements on the device, after checking that the rows fit (`*offset <= room`);
// otherwise it writes nothing and records the fault.
struct FuseCatArgs {
  const fuse_elem* part;
  fuse_elem* out;
  long long count;  // elements of the part
  FuseLayout part_layout;
  long long out_strides[FUSE_MODEL_RANK];
  const unsigned int* offset;
  long long offset_stride;
  long long room;
  unsigned long long* fault;
};

extern "C" __global__ void __launch_bounds__(256) fuse_model_cat(const FuseCatArgs a) {
  fuse_model_grid_sync();
  fuse_elem* out = a.out;
  if (a.offset != 0) {
    const unsigned int offset = *a.offset;
    if ((long long)offset > a.room) {
      if (blockIdx.x == 0 && threadIdx.x == 0) fuse_model_fault(a.fault, 2, offset, a.room);
      return;
    }
    out += (long long)offset * a.offset_stride;
  }
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < a.count; e += step) {
    long long linear = e, out_offset = 0;
#pragma unroll
    for (int axis = FUSE_MODEL_RANK - 1; axis >= 0; --axis) {
      out_offset += (linear % a.part_layout.sizes[axis]) * a.out_strides[axis];
      linear /= a.part_layout.sizes[axis];
    }
    out[out_offset] = a.part[fuse_layout_offset(a.part_layout, e)];
  }
}
