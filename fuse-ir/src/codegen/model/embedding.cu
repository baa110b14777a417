// embedding(ids, table) -> out [ids.., hidden]: one thread per output element (grid-stride), each element
// copied bit for bit from the table row its id names; a table of quantized blocks (FUSE_MODEL_DTYPE >=
// FUSE_Q4_0) is decoded instead, into f32 (blocks.cuh: element id * row_stride + col * col_stride of the
// table). ids are dense u32; the table may be strided. The ids live on the device, so they are checked here:
// an id past the table writes zeros and records the fault, which the host reports at its next synchronisation.
#if FUSE_MODEL_DTYPE >= FUSE_Q4_0
typedef unsigned char fuse_embedding_table;
typedef float fuse_embedding_out;
#else
typedef fuse_elem fuse_embedding_table;
typedef fuse_elem fuse_embedding_out;
#endif
struct FuseEmbeddingArgs {
  const unsigned int* ids;
  const fuse_embedding_table* table;
  fuse_embedding_out* out;
  long long count;  // ids * hidden
  long long hidden;
  long long vocab;
  long long row_stride;
  long long col_stride;
  unsigned long long* fault;
};

FUSE_KERNEL(256) fuse_model_embedding(FUSE_KERNEL_PARAM(FuseEmbeddingArgs) a) {
  fuse_model_grid_sync();
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += step) {
    const long long row = i / a.hidden;
    const long long col = i - row * a.hidden;
    const long long id = a.ids[row];
    if (id >= a.vocab) {
      if (col == 0) fuse_model_fault(a.fault, 1, id, a.vocab);
      a.out[i] = 0;
      continue;
    }
#if FUSE_MODEL_DTYPE >= FUSE_Q4_0
    a.out[i] = fuse_q_value<FUSE_MODEL_DTYPE>(a.table, id * a.row_stride + col * a.col_stride);
#else
    a.out[i] = a.table[id * a.row_stride + col * a.col_stride];
#endif
  }
}
