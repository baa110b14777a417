// attention_len's key counts checked before the prefill attention kernel (many queries), which is at its
// register limit and clamps them unchecked: one block runs common.cuh's fuse_model_check_lens, the check the
// decode kernel makes itself, so a count that does not fit is recorded on either path (codes 3 and 4).
struct FuseCheckLensArgs {
  const unsigned int* lens;
  long long stride;
  long long batch;
  long long keys;
  long long queries;
  long long causal;
  unsigned long long* fault;
};

FUSE_KERNEL(256) fuse_model_lens_check(FUSE_KERNEL_PARAM(FuseCheckLensArgs) a) {
  fuse_model_grid_sync();
  fuse_model_check_lens(a.lens, a.stride, a.batch, (unsigned int)a.keys, (unsigned int)a.queries, a.causal != 0,
                        a.fault);
}
