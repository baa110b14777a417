// gather(x, indexes, -1) -> out [.., m]: out[.., j] = x[.., indexes[.., j]], one thread per output element
// (grid-stride), the element copied bit for bit (floats and u32 alike). x and indexes may be strided. The
// indexes live on the device, so they are checked here: one past x's last axis writes zero and records
// the fault (code 5), which the host reports at its next synchronisation.
struct FuseGatherArgs {
  const fuse_elem* x;
  const unsigned int* indexes;
  fuse_elem* out;
  long long count;  // elements of out
  long long picks;  // m: out's (and indexes') last axis
  long long columns;  // n: x's last axis
  long long column_stride;  // x's
  unsigned long long* fault;
  FuseLayout row_layout;  // x's axes before the last: where each row starts
  FuseLayout index_layout;  // every axis of indexes
};

FUSE_KERNEL(256) fuse_model_gather(FUSE_KERNEL_PARAM(FuseGatherArgs) a) {
  fuse_model_grid_sync();
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += step) {
    const long long row = i / a.picks;
    const unsigned int index = __ldg(a.indexes + fuse_layout_offset(a.index_layout, i));
    if (index >= a.columns) {
      fuse_model_fault(a.fault, 5, index, a.columns);
      a.out[i] = 0;
      continue;
    }
    a.out[i] = a.x[fuse_layout_offset(a.row_layout, row) + index * a.column_stride];
  }
}
