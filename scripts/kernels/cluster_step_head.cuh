// The decode step's ends in cluster_step.cu: the token's embedding (layer 0's input) and, on every block after
// the last layer, the final rms_norm, the LM head and the argmax. The embedding and the LM head share the
// file's Q8_0 token matrix (SmolLM2 ties them), stored as value + 128 bytes [VOCAB][HID] and f16 scales.
#pragma once

// The packed argmax: the step's number above the logit (as an ordered 32-bit key) above the token, so that
// atomicMax across blocks picks the step's largest logit (the higher token on an exact tie) and a later step's
// result always replaces an earlier one's (no reset between launches).
__host__ __device__ inline unsigned long long pack_best(unsigned step, float logit, unsigned token) {
    unsigned u;
    memcpy(&u, &logit, 4);
    const unsigned ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)(step & 0xFFFFu) << 48) | ((unsigned long long)ordered << 16) | (token & 0xFFFFu);
}
__host__ __device__ inline unsigned best_token(unsigned long long best) { return (unsigned)(best & 0xFFFFu); }

// Layer 0's input: the embedding row of the token the previous step picked (in a.best), in f32.
__device__ void embed(const StepArgs& a, float* x) {
    const unsigned token = min(best_token(*a.best), (unsigned)VOCAB - 1);
    for (int i = threadIdx.x; i < HID; i += THREADS)
        x[i] = __half2float(a.head_d[(size_t)token * (HID / 32) + i / 32]) * (float)((int)a.head_q[(size_t)token * HID + i] - 128);
}

// Four value + 128 bytes as two half2 of their values (1024 + byte through 1024.0's mantissa, less 1152).
__device__ __forceinline__ __half2 byte_pair(unsigned w, unsigned selector) {
    const unsigned v = __byte_perm(w, 0x64646464u, selector);
    return __hsub2(*reinterpret_cast<const __half2*>(&v), __half2half2(__float2half(1152.f)));
}
// 16 bytes (inputs j..j+15 in order) against x's halves j..j+15: two f16 sums of 8 products, in f32.
__device__ __forceinline__ float bytes_dot(uint4 w, uint4 xa, uint4 xb) {
    const __half2* p = reinterpret_cast<const __half2*>(&xa);
    const __half2* q = reinterpret_cast<const __half2*>(&xb);
    __half2 a0 = __hmul2(byte_pair(w.x, 0x4140), p[0]);
    a0 = __hfma2(byte_pair(w.x, 0x4342), p[1], a0);
    a0 = __hfma2(byte_pair(w.y, 0x4140), p[2], a0);
    a0 = __hfma2(byte_pair(w.y, 0x4342), p[3], a0);
    __half2 a1 = __hmul2(byte_pair(w.z, 0x4140), q[0]);
    a1 = __hfma2(byte_pair(w.z, 0x4342), q[1], a1);
    a1 = __hfma2(byte_pair(w.w, 0x4140), q[2], a1);
    a1 = __hfma2(byte_pair(w.w, 0x4342), q[3], a1);
    const float2 f0 = __half22float2(a0), f1 = __half22float2(a1);
    return (f0.x + f0.y) + (f1.x + f1.y);
}

// The rows of the LM head a block owns: [first, last).
__host__ __device__ inline int head_first(int block) { return (int)((long long)block * VOCAB / (CLUSTER * CLUSTERS)); }

// Thread 0: this block's LM-head rows into L2 while the last layers run (their bytes, in 64 KB prefetches).
__device__ void prefetch_head(const StepArgs& a) {
    const size_t from = (size_t)head_first(blockIdx.x) * HID, to = (size_t)head_first(blockIdx.x + 1) * HID;
    for (size_t at = from; at < to; at += 65536) {
        const unsigned size = (unsigned)(to - at < 65536 ? to - at : 65536);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a.head_q + at), "r"(size) : "memory");
    }
}

// Every block after the last layer: wait for the final residual stream, rms_norm it with out_norm (f16, in
// order, in s.att), compute the logits of its rows HEAD_CHUNK at a time (partials a row and 32 inputs, then row
// sums), and put its best into a.best (and its logits into a.logits when given). trace (or null): the cycles
// waiting for the residual stream and those after it.
__device__ void lm_head(const StepArgs& a, Smem& s, unsigned long long* trace) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const unsigned long long c0 = clock64();
    for (int i = t; i < HID; i += THREADS) {
        unsigned long long v;
        for (;;) {
            asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(a.words + i) : "memory");
            if ((unsigned)(v >> 32) == a.tag0 + LAYERS) break;
            __nanosleep(128);  // 112 blocks poll while the last layer runs on one cluster
        }
        s.x[i] = __uint_as_float((unsigned)v);
    }
    __syncthreads();
    const unsigned long long c1 = clock64();
    const float r = rms_scale(s.x);
    for (int i = t; i < HID; i += THREADS) s.att[i] = __float2half(s.x[i] * r * a.out_norm[i]);
    __syncthreads();
    constexpr int KB = HID / 32, GROUPS = THREADS / KB, CHUNK = Smem::PART / KB;
    const int first = head_first(blockIdx.x), last = head_first(blockIdx.x + 1), kb = t % KB, group = t / KB;
    const uint4* xv = reinterpret_cast<const uint4*>(s.att + kb * 32);
    const uint4 x0 = xv[0], x1 = xv[1], x2 = xv[2], x3 = xv[3];
    float best = -INFINITY;
    int best_at = 0;
    for (int c = first; c < last; c += CHUNK) {
        const int rows = min(CHUNK, last - c);
        if (group < GROUPS)
            for (int row = group; row < rows; row += GROUPS) {
                const size_t at = (size_t)(c + row) * HID + kb * 32;
                const uint4 w0 = __ldg(reinterpret_cast<const uint4*>(a.head_q + at));
                const uint4 w1 = __ldg(reinterpret_cast<const uint4*>(a.head_q + at + 16));
                const float d = __half2float(a.head_d[(size_t)(c + row) * KB + kb]);
                s.part[row * KB + kb] = d * (bytes_dot(w0, x0, x1) + bytes_dot(w1, x2, x3));
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
        atomicMax(a.best, pack_best(a.step, best, (unsigned)best_at));
        if (trace) trace[0] = c1 - c0, trace[1] = clock64() - c1;
    }
}
