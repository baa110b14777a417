// attention(q [b, hq, sq, d], k, v [b, hkv, skv, d], scale, causal) -> out [b, hq, sq, d] dense, without a
// score matrix in global memory. One block of 128 threads per query row (b, h, i), grid-stride over rows.
// Keys go in tiles of 128: each thread computes one key's score (f32 dot product with the query row held in
// shared memory), the block takes the tile's maximum and rescales what it summed so far (online softmax),
// writes the tile's probabilities to shared memory, and each thread then accumulates p * v for its own
// two channels (c = thread, thread + 128: d <= 256). Query head h reads key/value head h / (hq / hkv); causal
// query i sees keys 0 ..= skv - sq + i. q, k and v are read through their 4-D strides (views as they are).
#define FUSE_ATTENTION_THREADS 128
#define FUSE_ATTENTION_WARPS (FUSE_ATTENTION_THREADS / 32)
#define FUSE_ATTENTION_MAX_D 256

struct FuseAttentionArgs {
  const fuse_elem* q;
  const fuse_elem* k;
  const fuse_elem* v;
  fuse_elem* out;
  long long batch;
  long long q_heads;
  long long queries;
  long long kv_heads;
  long long keys;
  long long d;
  long long causal;  // 0 or 1
  double scale;
  long long q_strides[4];
  long long k_strides[4];
  long long v_strides[4];
};

// The block's maximum or sum of one value per thread; every thread gets it. `scratch` is free again on return.
template <bool Max> __device__ __forceinline__ float fuse_attention_block_reduce(float x, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, x, offset);
    x = Max ? fmaxf(x, other) : x + other;
  }
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = x;
  __syncthreads();
  float total = scratch[0];
#pragma unroll
  for (int w = 1; w < FUSE_ATTENTION_WARPS; ++w) total = Max ? fmaxf(total, scratch[w]) : total + scratch[w];
  __syncthreads();
  return total;
}

// acc + sum over the tile's keys of p * v[key][c]; channel c past d adds nothing.
__device__ __forceinline__ float fuse_attention_accumulate(float acc, const float* probs, long long in_tile, const fuse_elem* values,
                                                           const long long (&v_strides)[4], long long c, long long d) {
  if (c >= d) return acc;
  for (long long j = 0; j < in_tile; ++j) acc += probs[j] * fuse_model_load(values, j * v_strides[2] + c * v_strides[3]);
  return acc;
}

extern "C" __global__ void __launch_bounds__(FUSE_ATTENTION_THREADS) fuse_model_attention(const FuseAttentionArgs a) {
  __shared__ float query[FUSE_ATTENTION_MAX_D];
  __shared__ float probs[FUSE_ATTENTION_THREADS];
  __shared__ float scratch[FUSE_ATTENTION_WARPS];
  const int t = threadIdx.x;
  const float scale = (float)a.scale;
  const float minus_infinity = __int_as_float(0xff800000);
  const long long rows = a.batch * a.q_heads * a.queries;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    // 32-bit index arithmetic (the host checks that every count fits): 64-bit divisions cost a call.
    const unsigned int i = (unsigned int)row % (unsigned int)a.queries;
    const unsigned int h = ((unsigned int)row / (unsigned int)a.queries) % (unsigned int)a.q_heads;
    const unsigned int b = (unsigned int)row / ((unsigned int)a.queries * (unsigned int)a.q_heads);
    const unsigned int kv_head = h / ((unsigned int)a.q_heads / (unsigned int)a.kv_heads);
    const fuse_elem* q = a.q + b * a.q_strides[0] + h * a.q_strides[1] + i * a.q_strides[2];
    const fuse_elem* k = a.k + b * a.k_strides[0] + kv_head * a.k_strides[1];
    const fuse_elem* v = a.v + b * a.v_strides[0] + kv_head * a.v_strides[1];
    for (long long c = t; c < a.d; c += FUSE_ATTENTION_THREADS) query[c] = fuse_model_load(q, c * a.q_strides[3]);
    __syncthreads();
    const long long visible = a.causal ? a.keys - a.queries + i + 1 : a.keys;
    float running_max = minus_infinity, running_sum = 0.0f;
    // This thread's output channels t and t + 128 (FUSE_ATTENTION_CHANNELS == 2), unnormalised.
    float acc_low = 0.0f, acc_high = 0.0f;
    for (long long tile = 0; tile < visible; tile += FUSE_ATTENTION_THREADS) {
      const long long j = tile + t;
      float score = minus_infinity;
      if (j < visible) {
        const fuse_elem* key = k + j * a.k_strides[2];
        float dot = 0.0f;
        for (long long c = 0; c < a.d; ++c) dot += query[c] * fuse_model_load(key, c * a.k_strides[3]);
        score = dot * scale;
      }
      const float new_max = fmaxf(running_max, fuse_attention_block_reduce<true>(score, scratch));
      const float p = j < visible ? expf(score - new_max) : 0.0f;
      probs[t] = p;
      // What was summed under the old maximum shrinks by exp(old - new); 0 on the first tile (old = -inf).
      const float correction = expf(running_max - new_max);
      running_sum = running_sum * correction + fuse_attention_block_reduce<false>(p, scratch);  // also publishes probs
      const long long in_tile = visible - tile < FUSE_ATTENTION_THREADS ? visible - tile : FUSE_ATTENTION_THREADS;
      const fuse_elem* values = v + tile * a.v_strides[2];
      acc_low = fuse_attention_accumulate(acc_low * correction, probs, in_tile, values, a.v_strides, t, a.d);
      acc_high = fuse_attention_accumulate(acc_high * correction, probs, in_tile, values, a.v_strides, t + FUSE_ATTENTION_THREADS, a.d);
      running_max = new_max;
      __syncthreads();  // the next tile rewrites probs; the next row rewrites query
    }
    const float inverse = 1.0f / running_sum;
    fuse_elem* out = a.out + row * a.d;
    if (t < a.d) fuse_model_store(out, t, acc_low * inverse);
    if (t + FUSE_ATTENTION_THREADS < a.d) fuse_model_store(out, t + FUSE_ATTENTION_THREADS, acc_high * inverse);
  }
}
