// The decode step's ends (after stages.cuh): the token's embedding (layer 0's input) and, on every block after
// the last layer, the final rms_norm, the LM head and the argmax. The embedding and the LM head share the
// file's Q8_0 token matrix (SmolLM2 ties them), stored as value + 128 bytes [VOCAB][HID] and f16 scales.

// Layer 0's input: the embedding row of the token the previous step picked (in a.best), in f32.
__device__ void embed(const FuseDecodeStepArgs& a, float* x) {
    const unsigned token = min(best_token(*a.best), (unsigned)VOCAB - 1);
    for (int i = threadIdx.x; i < HID; i += THREADS)
        x[i] = h_to_f(a.head_d[(unsigned long long)token * (HID / 32) + i / 32]) * (float)((int)a.head_q[(unsigned long long)token * HID + i] - 128);
}

// Four value + 128 bytes as two half2 of their values (1024 + byte through 1024.0's mantissa, less 1152).
__device__ __forceinline__ unsigned byte_pair(unsigned w, unsigned selector) {
    return h2_sub(__byte_perm(w, 0x64646464u, selector), 0x64806480u);  // 0x6480: 1152.0
}
// 16 bytes (inputs j..j+15 in order) against x's halves j..j+15: two f16 sums of 8 products, in f32.
__device__ __forceinline__ float bytes_dot(uint4 w, uint4 xa, uint4 xb) {
    unsigned a0 = h2_mul(byte_pair(w.x, 0x4140), xa.x);
    a0 = h2_fma(byte_pair(w.x, 0x4342), xa.y, a0);
    a0 = h2_fma(byte_pair(w.y, 0x4140), xa.z, a0);
    a0 = h2_fma(byte_pair(w.y, 0x4342), xa.w, a0);
    unsigned a1 = h2_mul(byte_pair(w.z, 0x4140), xb.x);
    a1 = h2_fma(byte_pair(w.z, 0x4342), xb.y, a1);
    a1 = h2_fma(byte_pair(w.w, 0x4140), xb.z, a1);
    a1 = h2_fma(byte_pair(w.w, 0x4342), xb.w, a1);
    return h2_sum(a0) + h2_sum(a1);
}

// Thread 0: this block's LM-head rows into L2 while the last layers run (their bytes, in 64 KB prefetches).
__device__ void prefetch_head(const FuseDecodeStepArgs& a) {
    const unsigned long long from = (unsigned long long)head_first(blockIdx.x) * HID, to = (unsigned long long)head_first(blockIdx.x + 1) * HID;
    for (unsigned long long at = from; at < to; at += 65536) {
        const unsigned size = (unsigned)(to - at < 65536 ? to - at : 65536);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a.head_q + at), "r"(size) : "memory");
    }
}

// Thread 0 of each block after its share of the argmax: the last block to get here logs the step's token and
// advances the control words for the next launch (every block read them at its start, before its share).
__device__ void advance(const FuseDecodeStepArgs& a) {
    __threadfence();
    if (atomicAdd(&a.control[2], 1ull) != CLUSTER * CLUSTERS - 1) return;
    __threadfence();
    const unsigned long long best = atomicAdd(a.best, 0ull), steps = a.control[1];
    if (a.log) a.log[steps % a.log_len] = best_token(best);
    // Before the argmax's 16-bit step number wraps, restart it below any logit (ordered key 0).
    if ((steps & 0xFFFFu) == 0xFFFFu) atomicExch(a.best, (unsigned long long)best_token(best));
    a.control[0] += 1, a.control[1] = steps + 1, a.control[2] = 0;
}

// Every block after the last layer: wait for the final residual stream, rms_norm it with out_norm (f16, in
// order, in s.att), compute the logits of its rows a chunk at a time (partials a row and 32 inputs, then row
// sums), and put its best into a.best (and its logits into a.logits when given). trace (or null): the cycles
// waiting for the residual stream and those after it.
__device__ void lm_head(const FuseDecodeStepArgs& a, Smem& s, unsigned long long* trace) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const unsigned long long c0 = clock64();
    // Every block polls while the last layer runs on one cluster: a pause between polls.
    for (int i = t; i < HID; i += THREADS) s.x[i] = take_word(a.words + i, (unsigned)a.tag0 + LAYERS, 128);
    __syncthreads();
    const unsigned long long c1 = clock64();
    const float r = rms_scale(s.x);
    for (int i = t; i < HID; i += THREADS) s.att[i] = f_to_h(s.x[i] * r * a.out_norm[i]);
    __syncthreads();
    constexpr int KB = HID / 32, GROUPS = THREADS / KB, CHUNK = Smem::PART / KB;
    const int first = head_first(blockIdx.x), last = head_first(blockIdx.x + 1), kb = t % KB, group = t / KB;
    const uint4* xv = reinterpret_cast<const uint4*>(s.att + kb * 32);
    const uint4 x0 = xv[0], x1 = xv[1], x2 = xv[2], x3 = xv[3];
    float best = neg_inf();
    int best_at = 0;
    for (int c = first; c < last; c += CHUNK) {
        const int rows = min(CHUNK, last - c);
        if (group < GROUPS && group < rows) {
            // The next row's bytes and scale are loaded before this row's arithmetic (they come from L2).
            auto load = [&](int row, uint4& w0, uint4& w1, unsigned short& d) {
                const unsigned long long at = (unsigned long long)(c + row) * HID + kb * 32;
                w0 = __ldg(reinterpret_cast<const uint4*>(a.head_q + at));
                w1 = __ldg(reinterpret_cast<const uint4*>(a.head_q + at + 16));
                d = __ldg(a.head_d + (unsigned long long)(c + row) * KB + kb);
            };
            uint4 w0, w1;
            unsigned short d;
            load(group, w0, w1, d);
            for (int row = group; row < rows; row += GROUPS) {
                uint4 n0 = w0, n1 = w1;
                unsigned short nd = d;
                if (row + GROUPS < rows) load(row + GROUPS, n0, n1, nd);
                s.part[row * KB + kb] = h_to_f(d) * (bytes_dot(w0, x0, x1) + bytes_dot(w1, x2, x3));
                w0 = n0, w1 = n1, d = nd;
            }
        }
        __syncthreads();
        if (t < rows) {
            const float logit = row_sum<KB>(s.part, t);
            if (a.logits) a.logits[c + t] = logit;
            if (logit >= best) best = logit, best_at = c + t;  // rows ascend: the higher token on a tie
        }
        __syncthreads();
    }
    // The block's best: by warp, then over the warps in s.out.
    for (int o = 16; o; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, best, o);
        const int at = __shfl_xor_sync(0xffffffffu, best_at, o);
        if (v > best || (v == best && at > best_at)) best = v, best_at = at;
    }
    if (lane == 0) s.out[warp] = best, s.out[WARPS + warp] = __int_as_float(best_at);
    __syncthreads();
    if (t == 0) {
        for (int w = 1; w < WARPS; ++w) {
            const float v = s.out[w];
            const int at = __float_as_int(s.out[WARPS + w]);
            if (v > best || (v == best && at > best_at)) best = v, best_at = at;
        }
        atomicMax(a.best, pack_best((unsigned)a.step, __float_as_uint(best), (unsigned)best_at));
        if (trace) trace[0] = c1 - c0, trace[1] = clock64() - c1;
        if (a.control) advance(a);
    }
}
