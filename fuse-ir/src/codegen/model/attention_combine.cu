// The second step of split-KV attention (see attention.cu): merges each output row's per-split f32 partials
// into the row, out [rows, d] dense in the element type. One block per row (grid-stride), one thread per
// channel (d <= 256 threads). With M the largest split maximum, split s weighs w = exp2(max_s - M) (the
// maxima are in log2 units); out = sum_s w acc_s / sum_s w sum_s. A split without keys (max -inf, sum 0:
// past an attention_len count, or past a causal row's last key) weighs 0; a row no split saw a key for (M
// -inf: lens[b] = 0, or < sq under causal) writes zeros. The splits are summed in order: deterministic.
#define FUSE_ATTENTION_COMBINE_THREADS 256

struct FuseAttentionCombineArgs {
  const float* partials;  // [rows][splits][d] unnormalised sums, then [rows][splits][2] (max, sum)
  fuse_elem* out;
  long long rows;
  long long splits;
  long long d;
};

FUSE_KERNEL(FUSE_ATTENTION_COMBINE_THREADS) fuse_model_attention_combine(FUSE_KERNEL_PARAM(FuseAttentionCombineArgs) a) {
  fuse_model_grid_sync();
  const unsigned int c = threadIdx.x, splits = (unsigned int)a.splits, d = (unsigned int)a.d;
  const float* sums = a.partials;
  const float* stats = a.partials + (unsigned long long)a.rows * splits * d;
  for (unsigned long long row = blockIdx.x; row < (unsigned long long)a.rows; row += gridDim.x) {
    const float* row_stats = stats + row * splits * 2;
    const float* row_sums = sums + row * splits * d;
    const float minus_infinity = __int_as_float(0xff800000);
    float most = minus_infinity;
    for (unsigned int s = 0; s < splits; ++s) most = fmaxf(most, row_stats[2 * s]);
    float total = 0.0f, acc = 0.0f;
    for (unsigned int s = 0; s < splits; ++s) {
      // exp2(-inf - -inf) is NaN: with no key anywhere every split weighs 0.
      const float w = most == minus_infinity ? 0.0f : exp2f(row_stats[2 * s] - most);
      total += w * row_stats[2 * s + 1];
      if (c < d) acc += w * row_sums[(unsigned long long)s * d + c];
    }
    if (c < d) fuse_model_store(a.out, row * d + c, total > 0.0f ? acc / total : 0.0f);
  }
}
