// The decode step's ends (after stages.cuh): the token's embedding (layer 0's input) and, on every block after
// the last layer, the final rms_norm, the LM head and the argmax. The embedding and the LM head share the
// file's Q8_0 token matrix (SmolLM2 ties them), stored as value + 128 bytes [VOCAB][HID] and f16 scales.

// Layer 0's input: the embedding row of the token the previous step picked (in a.best), in f32.
__device__ void embed(const FuseDecodeStepArgs& a, float* x) {
    const unsigned token = min(best_token(*a.best), (unsigned)VOCAB - 1);
    for (int i = threadIdx.x; i < HID; i += THREADS)
        x[i] = fuse_f16_to_f32(a.head_d[(unsigned long long)token * (HID / 32) + i / 32]) * (float)((int)a.head_q[(unsigned long long)token * HID + i] - 128);
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

// Thread 0, after the block's last layer (its share and preloaded keys no longer read): chunk c of the block's
// LM-head rows into ring slot c % HEAD_SLOTS (values, then scales), completing on that slot's mbarrier.
__device__ void load_head_chunk(const FuseDecodeStepArgs& a, const Smem& s, int c) {
    const int r0 = head_first(blockIdx.x) + c * HEAD_CHUNK, last = head_first(blockIdx.x + 1);
    if (r0 >= last) return;
    const unsigned rows = (unsigned)min(HEAD_CHUNK, last - r0), bar = fuse_smem_addr(s.ring + c % HEAD_SLOTS);
    unsigned char* slot = s.W + (unsigned long long)(c % HEAD_SLOTS) * HEAD_CHUNK_BYTES;
    fuse_mbar_expect_tx(bar, rows * (HID + HEAD_KB * 2));
    bulk_copy(slot, a.head_q + (unsigned long long)r0 * HID, rows * HID, bar);
    bulk_copy(slot + HEAD_CHUNK * HID, a.head_d + (unsigned long long)r0 * HEAD_KB, rows * HEAD_KB * 2, bar);
}
// Thread 0 after the block's last layer: the ring's first chunks, the rows past them into L2, and (on the
// cluster whose last layer is two before the end) the rows of the last layer's cluster into L2, whose ring
// starts only as the final residual stream does.
__device__ void start_head(const FuseDecodeStepArgs& a, const Smem& s, int me, int rank) {
    fuse_fence_proxy_async();  // the layers' reads of this memory before the copies
    for (int c = 0; c < HEAD_SLOTS; ++c) load_head_chunk(a, s, c);
    const int first = head_first(blockIdx.x), last = head_first(blockIdx.x + 1);
    if (first + HEAD_SLOTS * HEAD_CHUNK < last)
        prefetch_l2(a.head_q + (unsigned long long)(first + HEAD_SLOTS * HEAD_CHUNK) * HID, (unsigned long long)(last - first - HEAD_SLOTS * HEAD_CHUNK) * HID);
    if (LAYERS >= 3 && me == (LAYERS - 3) % CLUSTERS) {
        const int other = ((LAYERS - 1) % CLUSTERS) * CLUSTER + rank;
        prefetch_l2(a.head_q + (unsigned long long)head_first(other) * HID, (unsigned long long)(head_first(other + 1) - head_first(other)) * HID);
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

// Every block after the last layer (start_head issued its ring): wait for the final residual stream, rms_norm it
// with out_norm (f16, in order, in s.att), compute the logits of its rows a ring chunk at a time (partials a row
// and 32 inputs into one of two buffers, then row sums while the next chunk's partials are made; each slot
// refilled as soon as its chunk is read), and put its best into a.best (and its logits into a.logits when
// given). trace (or null: the trace's tail on block 0 and the last layer's cluster's rank 0): the times in TraceTail.
__device__ void lm_head(const FuseDecodeStepArgs& a, Smem& s, unsigned long long* trace) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const unsigned long long c0 = clock64();
    // Every block polls while the last layer runs on one cluster: a pause between polls.
    take_words(a.words, (unsigned)a.tag0 + LAYERS, s.x, 128);
    __syncthreads();
    const unsigned long long c1 = clock64(), seen = global_ns();
    const float r = rms_scale(s.x);
    for (int i = t; i < HID; i += THREADS) s.att[i] = fuse_f32_to_f16(s.x[i] * r * a.out_norm[i]);
    __syncthreads();
    constexpr int KB = HEAD_KB;
    const int first = head_first(blockIdx.x), last = head_first(blockIdx.x + 1);
    constexpr int MINE = HEAD_CHUNK / HEAD_GROUPS;
    // Thread (kb, group) takes bytes [16 kb, 16 kb + 16) of each half of its rows (consecutive threads read
    // consecutive 16 bytes: no bank conflicts): half-blocks of Q8_0 blocks kb / 2 and KB / 2 + kb / 2.
    const int kb = t % KB, group = t / KB;
    const uint4* xa = reinterpret_cast<const uint4*>(s.att + kb * 16);
    const uint4* xb = reinterpret_cast<const uint4*>(s.att + HID / 2 + kb * 16);
    const uint4 x0 = xa[0], x1 = xa[1], x2 = xb[0], x3 = xb[1];
    float best = neg_inf();
    int best_at = 0;
    unsigned long long ring_wait = 0;
    for (int c = 0; first + c * HEAD_CHUNK < last; ++c) {
        const int r0 = first + c * HEAD_CHUNK, rows = min(HEAD_CHUNK, last - r0);
        const unsigned char* slot = s.W + (unsigned long long)(c % HEAD_SLOTS) * HEAD_CHUNK_BYTES;
        const unsigned short* scales = reinterpret_cast<const unsigned short*>(slot + HEAD_CHUNK * HID);
        float* part = s.part + (c & 1) * HEAD_PARTIALS;
        const unsigned long long w0 = trace ? clock64() : 0;  // only the traced block keeps the ring's waits
        fuse_mbar_wait(fuse_smem_addr(s.ring + c % HEAD_SLOTS), (unsigned)(c / HEAD_SLOTS) & 1u);
        if (trace) ring_wait += clock64() - w0;
        if (group < HEAD_GROUPS) {
            // All of the thread's rows' loads, then their arithmetic.
            uint4 wa[MINE], wb[MINE];
            unsigned short da[MINE], db[MINE];
#pragma unroll
            for (int j = 0; j < MINE; ++j) {
                const int row = group + j * HEAD_GROUPS;
                if (row < rows) {
                    wa[j] = *reinterpret_cast<const uint4*>(slot + row * HID + kb * 16);
                    wb[j] = *reinterpret_cast<const uint4*>(slot + row * HID + HID / 2 + kb * 16);
                    da[j] = scales[row * KB + kb / 2], db[j] = scales[row * KB + KB / 2 + kb / 2];
                }
            }
#pragma unroll
            for (int j = 0; j < MINE; ++j) {
                const int row = group + j * HEAD_GROUPS;
                if (row < rows) part[row * KB + kb] = fuse_f16_to_f32(da[j]) * bytes_dot(wa[j], x0, x1) + fuse_f16_to_f32(db[j]) * bytes_dot(wb[j], x2, x3);
            }
        }
        __syncthreads();  // the chunk's partials are in, and its slot is read: refill it
        if (t == 0) {
            fuse_fence_proxy_async();
            load_head_chunk(a, s, c + HEAD_SLOTS);
        }
        if (t < rows) {
            const float logit = row_sum<KB>(part, t);
            if (a.logits) a.logits[r0 + t] = logit;
            if (logit >= best) best = logit, best_at = r0 + t;  // rows ascend: the higher token on a tie
        }
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
        if (trace && blockIdx.x == 0) trace[T_HEAD_WAIT] = c1 - c0, trace[T_HEAD_WORK] = clock64() - c1, trace[T_END] = global_ns(), trace[T_HEAD_RING] = ring_wait;
        else if (trace) trace[T_LAST_RESIDUAL] = seen, trace[T_LAST_END] = global_ns();
        if (a.control) advance(a);
    }
}
