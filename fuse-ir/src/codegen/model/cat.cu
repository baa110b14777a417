// Up to FUSE_CAT_COPIES independent copies in one launch: the parts of cat(parts, axis) and the rows of
// slice_set that follow one another in a call (a decoder's key and value cache writes) cost one launch, not
// one each. Copy c takes blocks first_block[c] .. first_block[c + 1] and, within them, one thread per
// element of its part (grid-stride), read through the part's strides and written into its slice of the
// output (`out` points at the slice's first element, and `out_strides` are the whole output's). Elements are
// copied bit for bit, so any dtype (u32 too) works. slice_set with its offset in device memory (`offset` not
// null) moves `out` by `*offset * offset_stride` elements on the device, after checking that the rows fit
// (`*offset <= room`); otherwise that copy writes nothing and records the fault. With `per_batch` (elements of
// the part for each index of its first axis; 0: one offset for all) each index of the first axis has its own
// offset, `offset[e / per_batch]` for element e (a batch of sequences appending at their own positions),
// checked element by element: an index whose rows do not fit writes nothing. The host only batches
// copies none of which reads what another writes.
#define FUSE_CAT_COPIES 4

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
  long long per_batch;
};

struct FuseCopiesArgs {
  FuseCatArgs copy[FUSE_CAT_COPIES];
  long long first_block[FUSE_CAT_COPIES + 1];  // first_block[copies] is the grid
  long long copies;
};

__device__ __forceinline__ void fuse_cat_copy(const FuseCatArgs& a, long long block, long long blocks) {
  fuse_elem* out = a.out;
  if (a.offset != 0 && a.per_batch == 0) {
    const unsigned int offset = *a.offset;
    if ((long long)offset > a.room) {
      if (block == 0 && threadIdx.x == 0) fuse_model_fault(a.fault, 2, offset, a.room);
      return;
    }
    out += (long long)offset * a.offset_stride;
  }
  const long long step = blocks * blockDim.x;
  unsigned int unfit = 0;  // an offset past the room (per_batch), recorded once after the loop
  for (long long e = block * blockDim.x + threadIdx.x; e < a.count; e += step) {
    fuse_elem* to = out;
    if (a.per_batch != 0) {
      const unsigned int offset = a.offset[e / a.per_batch];
      if ((long long)offset > a.room) {
        unfit = offset;
        continue;
      }
      to += (long long)offset * a.offset_stride;
    }
    long long linear = e, out_offset = 0;
#pragma unroll
    for (int axis = FUSE_MODEL_RANK - 1; axis >= 0; --axis) {
      out_offset += (linear % a.part_layout.sizes[axis]) * a.out_strides[axis];
      linear /= a.part_layout.sizes[axis];
    }
    to[out_offset] = a.part[fuse_layout_offset(a.part_layout, e)];
  }
  if (unfit != 0) fuse_model_fault(a.fault, 2, unfit, a.room);
}

FUSE_KERNEL(256) fuse_model_cat(FUSE_KERNEL_PARAM(FuseCopiesArgs) a) {
  fuse_model_grid_sync();
  const long long block = blockIdx.x;
  // Unrolled so that each copy's fields are read at constant offsets of the parameter.
#pragma unroll
  for (int c = 0; c < FUSE_CAT_COPIES; ++c) {
    if (c < a.copies && block >= a.first_block[c] && block < a.first_block[c + 1]) {
      fuse_cat_copy(a.copy[c], block - a.first_block[c], a.first_block[c + 1] - a.first_block[c]);
    }
  }
}
