// The decode step's stages (after layout.cuh): the Q4_1 GEMV, rms_norm, the weight and cache loads, the
// hand-offs inside a cluster and through L2, and attention.

// ---- the Q4_1 GEMV ---------------------------------------------------------------------------------------------

// The nibble masks and exponent-trick bases of words_dot, held in registers (opaque to the compiler, which
// would otherwise rebuild a constant before every use: LOP3 takes one immediate).
struct NibbleConsts {
    unsigned lo_mask = 0x000F000Fu, hi_mask = 0x00F000F0u, lo_base = 0x64006400u, hi_base = 0x54005400u;
    __device__ NibbleConsts() { asm volatile("" : "+r"(lo_mask), "+r"(hi_mask), "+r"(lo_base), "+r"(hi_base)); }
};
// Two nibbles of w as a half2 of base + their values: (w & mask) | base. Those at bits 0-3 and 16-19 through
// 1024.0's mantissa bits 0-3, those at bits 4-7 and 20-23 through 64.0's bits 4-7.
__device__ __forceinline__ unsigned nibble_bits(unsigned w, unsigned mask, unsigned base) {
    unsigned v;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(v) : "r"(w), "r"(mask), "r"(base));
    return v;
}
// The same less the base: the two nibbles' values.
__device__ __forceinline__ unsigned nibbles(unsigned w, unsigned mask, unsigned base) { return h2_sub(nibble_bits(w, mask, base), base); }
// Two 32-bit words of a Q4_1 block's nibbles (word i: bytes 4i..4i+3, weights 4i..4i+3 low, 4i+16..4i+19 high)
// against the matching 16 inputs, stored in the order `perm_slot` gives (for word i, x.x: weights 4i, 4i+2;
// x.y: 4i+16, 4i+18; x.z: 4i+1, 4i+3; x.w: 4i+17, 4i+19). Products summed in f16 (16 of them), returned in f32.
__device__ __forceinline__ float words_dot(unsigned w0, uint4 x0, unsigned w1, uint4 x1, const NibbleConsts& k) {
    const unsigned v0 = w0 >> 8, v1 = w1 >> 8;
    unsigned acc = h2_mul(nibbles(w0, k.lo_mask, k.lo_base), x0.x);
    acc = h2_fma(nibbles(w0, k.hi_mask, k.hi_base), x0.y, acc);
    acc = h2_fma(nibbles(v0, k.lo_mask, k.lo_base), x0.z, acc);
    acc = h2_fma(nibbles(v0, k.hi_mask, k.hi_base), x0.w, acc);
    acc = h2_fma(nibbles(w1, k.lo_mask, k.lo_base), x1.x, acc);
    acc = h2_fma(nibbles(w1, k.hi_mask, k.hi_base), x1.y, acc);
    acc = h2_fma(nibbles(v1, k.lo_mask, k.lo_base), x1.z, acc);
    acc = h2_fma(nibbles(v1, k.hi_mask, k.hi_base), x1.w, acc);
    return h2_sum(acc);
}

// A GEMV's input block kb as a thread holds it: 32 f16 values in perm_slot order (4 x uint4) and their sum.
struct Input {
    uint4 v[4];
    float sum;
};
// From a f16 input already in perm_slot order with its block sums (a hand-off's).
__device__ __forceinline__ Input input_of(const unsigned short* x, const float* xs, int kb) {
    const uint4* xv = reinterpret_cast<const uint4*>(x + kb * 32);
    return Input{{xv[0], xv[1], xv[2], xv[3]}, xs[kb]};
}
// The same without sums: the thread adds its block's 32 values (in f32).
__device__ __forceinline__ Input input_summed(const unsigned short* x, int kb) {
    const uint4* xv = reinterpret_cast<const uint4*>(x + kb * 32);
    Input in{{xv[0], xv[1], xv[2], xv[3]}, 0.f};
    const unsigned* h = reinterpret_cast<const unsigned*>(in.v);
#pragma unroll
    for (int i = 0; i < 16; ++i) in.sum += h2_sum(h[i]);
    return in;
}
// rms_norm's scale of a HID-wide f32 vector, computed by each warp alone (no block barrier).
__device__ __forceinline__ float rms_scale(const float* x) {
    float ss = 0.f;
    for (int i = threadIdx.x & 31; i < HID; i += 32) ss += x[i] * x[i];
    return rsqrtf(fuse_warp_sum(ss) / HID + EPS);
}
// rms_norm's output x * r * wn into xn (f16, perm_slot order), then a barrier.
__device__ void norm_to(const float* x, const float* wn, float r, unsigned short* xn) {
    for (int e = threadIdx.x; e < HID; e += THREADS) xn[(e & ~31) + perm_slot(e & 31)] = fuse_f32_to_f16(x[e] * r * wn[e]);
    __syncthreads();
}

// A GEMV's partial sums, one a (row, Q4_1 block): part[row * KB + kb] = d * sum(q * x) + m * sum(x) over the
// block's 32 inputs. q: [rows][KB] 16-byte nibble blocks, dm: [rows][KB] (d, m) f16 pairs. A thread holds one
// input block (kb = thread % KB; `input(kb)` gives it) and takes every (THREADS / KB)-th row (consecutive
// threads read consecutive nibble blocks); the next row's loads are issued before this row's arithmetic.
template <int KB, class In>
__device__ void gemv_partials(const uint4* q, const unsigned* dm, int rows, In input, float* part) {
    constexpr int GROUPS = THREADS / KB;
    const int kb = threadIdx.x % KB, group = threadIdx.x / KB;
    if (group >= GROUPS || group >= rows) return;
    const Input x = input(kb);
    const NibbleConsts k;
    int u = group * KB + kb;
    uint4 w = q[u];
    unsigned sc = dm[u];
    for (int r = group; r < rows; r += GROUPS, u += GROUPS * KB) {
        uint4 w_next = w;
        unsigned sc_next = sc;
        if (r + GROUPS < rows) w_next = q[u + GROUPS * KB], sc_next = dm[u + GROUPS * KB];
        const float s = words_dot(w.x, x.v[0], w.y, x.v[1], k) + words_dot(w.z, x.v[2], w.w, x.v[3], k);
        part[u] = fuse_f16_to_f32((unsigned short)(sc & 0xFFFFu)) * s + fuse_f16_to_f32((unsigned short)(sc >> 16)) * x.sum;
        w = w_next, sc = sc_next;
    }
}
template <int KB>
__device__ __forceinline__ float row_sum(const float* part, int row) {
    float s = 0.f;
#pragma unroll 6
    for (int kb = 0; kb < KB; ++kb) s += part[row * KB + kb];
    return s;
}

// ---- the residual stream between clusters: 64-bit words, tag << 32 | f32 bits --------------------------------

// The residual stream's HID words once every one carries `tag`, into x (f32). A thread loads all of its words in
// each poll (their L2 round trips overlap instead of following one another), polls again while any is older:
// `pause` ns apart, or (pause 0) 256 ns apart while a word is older than the layer before ours and back to back
// after it.
__device__ void take_words(const unsigned long long* words, unsigned tag, float* x, unsigned pause = 0) {
    constexpr int MINE = (HID + THREADS - 1) / THREADS;
    unsigned long long v[MINE];
    for (;;) {
        bool ready = true, far = false;
#pragma unroll
        for (int j = 0; j < MINE; ++j) {
            const int i = threadIdx.x + j * THREADS;
            if (i < HID) v[j] = load_relaxed(words + i);
        }
#pragma unroll
        for (int j = 0; j < MINE; ++j) {
            const unsigned seen = (unsigned)(v[j] >> 32);
            if (threadIdx.x + j * THREADS < HID && seen != tag) ready = false, far = far || tag - seen > 1u;
        }
        if (ready) break;
        if (pause) __nanosleep(pause);
        else if (far) __nanosleep(256);  // not the layer before ours yet: poll less often
    }
#pragma unroll
    for (int j = 0; j < MINE; ++j)
        if (threadIdx.x + j * THREADS < HID) x[threadIdx.x + j * THREADS] = __uint_as_float((unsigned)v[j]);
}
__device__ __forceinline__ void put_word(unsigned long long* p, unsigned tag, float v) {
    store_relaxed(p, ((unsigned long long)tag << 32) | __float_as_uint(v));
}

// ---- a layer's weights (and an attention block's cache rows) into shared memory -----------------------------

// Bytes [p, p + bytes) of global memory into L2, in 64 KB bulk prefetches (no completion to wait for).
__device__ void prefetch_l2(const void* p, unsigned long long bytes) {
    const char* c = reinterpret_cast<const char*>(p);
    for (unsigned long long at = 0; at < bytes; at += 65536) {
        const unsigned size = (unsigned)(bytes - at < 65536 ? bytes - at : 65536);
        fuse_bulk_prefetch_l2(c + at, size);
    }
}
__device__ void bulk_copy(void* to, const void* from, unsigned bytes, unsigned bar) {
    for (unsigned at = 0; at < bytes; at += COPY)
        fuse_bulk_copy(fuse_smem_addr((char*)to + at), (const char*)from + at, bytes - at < COPY ? bytes - at : COPY, bar);
}
// Thread 0: bulk copies of this block's share of layer l into W and, in an attention block, its kv head's first
// PRE_KEYS cached keys and values and the position's rope row, completing on s.bar; the kv head's later keys
// and values prefetched into L2.
__device__ void load_share(const FuseDecodeStepArgs& a, const Smem& s, int l, int rank) {
    const unsigned b = fuse_smem_addr(s.bar), keys = (unsigned)min((int)a.pos, PRE_KEYS), kv_bytes = keys * HD * 2;
    const bool attends = rank < NQ;
    fuse_fence_proxy_async();  // our earlier reads of this memory before the copies
    fuse_mbar_expect_tx(b, (unsigned)Share::bytes + (attends ? 2 * kv_bytes + HD * 4 : 0));
    bulk_copy(s.W, a.w + ((unsigned long long)l * CLUSTER + rank) * Share::bytes, (unsigned)Share::bytes, b);
    if (!attends) return;
    const unsigned long long head_at = (unsigned long long)(rank / (NQ / NKV)) * a.capacity * HD;
    const unsigned short* k = reinterpret_cast<const unsigned short*>(a.k_layers[l]) + head_at;
    const unsigned short* v = reinterpret_cast<const unsigned short*>(a.v_layers[l]) + head_at;
    if (keys) {
        bulk_copy(s.kpre, k, kv_bytes, b);
        bulk_copy(s.vpre, v, kv_bytes, b);
    }
    bulk_copy(s.rope, a.rope + (unsigned long long)a.pos * HD, HD * 4, b);
    // The keys and values past those into L2 (the kv group's first block), so that attention reads them there.
    if (rank % (NQ / NKV) == 0 && a.pos > PRE_KEYS) {
        const unsigned long long bytes = (unsigned long long)(a.pos - PRE_KEYS) * HD * 2;
        prefetch_l2(k + PRE_KEYS * HD, bytes);
        prefetch_l2(v + PRE_KEYS * HD, bytes);
    }
}
// ---- in-cluster hand-offs: st.async stores into the consumers' buffers, completing on their mbarriers -------

// `bytes` (a multiple of 16) from this block's `src` to `dst` (the buffer's address here) in peers [p0, p1).
__device__ void send(const void* src, const void* dst, unsigned bytes, unsigned long long* bar, int p0, int p1) {
    const int chunks = (int)bytes / 16;
    for (int e = threadIdx.x; e < (p1 - p0) * chunks; e += THREADS) {
        const int peer = p0 + e / chunks, c = e % chunks;
        const uint4 v = reinterpret_cast<const uint4*>(src)[c];
        const unsigned to = fuse_cluster_map(fuse_smem_addr((const char*)dst + c * 16), peer);
        fuse_st_async_v4(to, v.x, v.y, v.z, v.w, fuse_cluster_map(fuse_smem_addr(bar), peer));
    }
}
__device__ __forceinline__ void send_word(float v, const float* dst, unsigned long long* bar, int peer) {
    const unsigned to = fuse_cluster_map(fuse_smem_addr(dst), peer);
    fuse_st_async_b32(to, __float_as_uint(v), fuse_cluster_map(fuse_smem_addr(bar), peer));
}
// Thread 0: this block's arrival on a hand-off's mbarrier for this turn, with the bytes it will receive.
__device__ __forceinline__ void expect(unsigned long long* bar, unsigned bytes) {
    fuse_mbar_expect_tx(fuse_smem_addr(bar), bytes);
}

// ---- attention of one query head (blocks 0..NQ-1 of the cluster) --------------------------------------------
// q, k and v of the new position from the QKV hand-off (f32); rope on q and k (the row in shared memory); the
// kv group's first block appends k and v at `pos`; scores over the cached keys (the first PRE_KEYS from shared
// memory, the rest from the caches) and the new one; the head's 64 outputs (f16, perm_slot order) and their
// two block sums into every block of the cluster. `mark` notes the clock (trace).
template <class Mark>
__device__ void attention_head(const FuseDecodeStepArgs& a, Smem& s, int l, int head, Mark& mark) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = head / (NQ / NKV), pos = (int)a.pos;
    float* qr = s.scratch + ATT_Q;       // [64] roped q, scaled by 1/8
    float* kr = s.scratch + ATT_K;       // [64] roped new key
    float* sc = s.scratch + ATT_SCORES;  // [MAXPOS + 1] scores (SCORES with the padding)
    float* pv = s.scratch + ATT_PV;      // [KEY_GROUPS][64] P.V partials
    float* outv = s.scratch + ATT_OUT;   // [64]
    float* ps = s.scratch + ATT_SUMS;    // [KEY_GROUPS] softmax denominators a key group
    float* wmax = s.scratch + ATT_MAX;   // [WARPS] the scores' maximum a warp
    unsigned short* kbase = reinterpret_cast<unsigned short*>(a.k_layers[l]) + (unsigned long long)g * a.capacity * HD;
    unsigned short* vbase = reinterpret_cast<unsigned short*>(a.v_layers[l]) + (unsigned long long)g * a.capacity * HD;
    const float* vnew = s.qkv + HID + NKV * HD + g * HD;
    if (t < 2 * HD) {
        const int d = t & (HD - 1), i = d & 31;
        const float* src = t < HD ? s.qkv + head * HD : s.qkv + HID + g * HD;
        const float c = s.rope[i], sn = s.rope[32 + i];
        const float v = d < 32 ? src[d] * c - src[d + 32] * sn : src[d] * c + src[d - 32] * sn;
        if (t < HD) qr[d] = v * 0.125f;
        else {
            kr[d] = v;
            if (head % (NQ / NKV) == 0) {
                kbase[(unsigned long long)pos * HD + d] = fuse_f32_to_bf16_cvt(v);
                vbase[(unsigned long long)pos * HD + d] = fuse_f32_to_bf16_cvt(vnew[d]);
            }
        }
    }
    __syncthreads();
    mark();
    // Scores: 8 lanes a key (8 dims each, one 16-byte load), 4 keys a warp, 4 passes in flight; the 8 lanes'
    // partial dots of the 4 passes added by a transposing butterfly (4 shuffles, not 12). Keys from shared memory
    // and from the caches in loops of their own (shared loads, not generic ones).
    const int kg = lane >> 3, dp = (lane & 7) * 8;
    const bool b4 = lane & 4, b2 = lane & 2;
    const int mine = (b4 ? 2 : 0) + (b2 ? 1 : 0);  // the pass whose sum this lane ends with
    float qv[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) qv[j] = qr[dp + j];
    float mx = neg_inf();
    auto scores = [&](const unsigned short* rows, int first, int last) {  // keys [first, last), rows from `first`
        for (int base = first; base < last; base += 4 * 4 * WARPS) {
            uint4 kv[4];
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const int key = base + p * 4 * WARPS + warp * 4 + kg;
                kv[p] = key < last ? *reinterpret_cast<const uint4*>(rows + (unsigned long long)(key - first) * HD + dp) : make_uint4(0, 0, 0, 0);
            }
            float d[4];
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const unsigned* k2 = reinterpret_cast<const unsigned*>(&kv[p]);
                d[p] = 0.f;
#pragma unroll
                for (int j = 0; j < 4; ++j) d[p] += qv[2 * j] * fuse_bf16x2_lo(k2[j]) + qv[2 * j + 1] * fuse_bf16x2_hi(k2[j]);
            }
            const float a0 = (b4 ? d[2] : d[0]) + __shfl_xor_sync(0xffffffffu, b4 ? d[0] : d[2], 4);
            const float a1 = (b4 ? d[3] : d[1]) + __shfl_xor_sync(0xffffffffu, b4 ? d[1] : d[3], 4);
            float v = (b2 ? a1 : a0) + __shfl_xor_sync(0xffffffffu, b2 ? a0 : a1, 2);
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            const int key = base + mine * 4 * WARPS + warp * 4 + kg;
            if (key < last) {
                if ((lane & 1) == 0) sc[key] = v;
                mx = fmaxf(mx, v);
            }
        }
    };
    scores(s.kpre, 0, min(pos, PRE_KEYS));
    if (pos > PRE_KEYS) scores(kbase + (unsigned long long)PRE_KEYS * HD, PRE_KEYS, pos);
    if (warp == 0) {  // the new key
        const float d = fuse_warp_sum(qr[lane] * kr[lane] + qr[lane + 32] * kr[lane + 32]);
        if (lane == 0) sc[pos] = d;
        mx = fmaxf(mx, d);
    }
    mx = fuse_warp_max(mx);
    if (lane == 0) wmax[warp] = mx;
    __syncthreads();
    for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, wmax[w]);
    mark();
    // P.V: 8 threads a key (8 dims each, 16-byte loads), KEY_GROUPS keys a pass, 4 passes in flight; shared
    // memory's keys and the caches' in loops of their own.
    float acc[8] = {}, psum = 0.f;  // psum: the softmax's denominator over this thread's keys
    const int kt = t >> 3, dv = (t & 7) * 8;
    auto values = [&](const unsigned short* rows, int first, int last) {
        for (int base = first; base < last; base += 4 * KEY_GROUPS) {
            uint4 vv[4];
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const int key = base + p * KEY_GROUPS + kt;
                vv[p] = key < last ? *reinterpret_cast<const uint4*>(rows + (unsigned long long)(key - first) * HD + dv) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const int key = base + p * KEY_GROUPS + kt;
                const float pk = key < last ? __expf(sc[key] - mx) : 0.f;
                psum += pk;
                const unsigned* v2 = reinterpret_cast<const unsigned*>(&vv[p]);
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[2 * j] += pk * fuse_bf16x2_lo(v2[j]), acc[2 * j + 1] += pk * fuse_bf16x2_hi(v2[j]);
            }
        }
    };
    values(s.vpre, 0, min(pos, PRE_KEYS));
    if (pos > PRE_KEYS) values(vbase + (unsigned long long)PRE_KEYS * HD, PRE_KEYS, pos);
    if (kt == 0) {  // the new key's value row
        const float pk = __expf(sc[pos] - mx);
        psum += pk;
        for (int j = 0; j < 8; ++j) acc[j] += pk * vnew[dv + j];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) pv[kt * HD + dv + j] = acc[j];
    if (dv == 0) ps[kt] = psum;
    __syncthreads();
    mark();
    if (t < 4 * HD) {  // four threads a dim, a quarter of the key groups each
        const int d = t >> 2, q4 = t & 3;
        float o = 0.f, sum = 0.f;
#pragma unroll
        for (int k = 0; k < KEY_GROUPS / 4; ++k) o += pv[(q4 * (KEY_GROUPS / 4) + k) * HD + d], sum += ps[q4 * (KEY_GROUPS / 4) + k];
        o += __shfl_xor_sync(0xffffffffu, o, 1);
        o += __shfl_xor_sync(0xffffffffu, o, 2);
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        if (q4 == 0) {
            const unsigned short h = fuse_f32_to_f16(o / sum);
            outv[d] = fuse_f16_to_f32(h);
            s.stage[(d & ~31) + perm_slot(d & 31)] = h;
        }
    }
    __syncthreads();
    // Hand-off: the 64 outputs (f16) and the sums of the head's two input blocks of the output projection.
    send(s.stage, s.att + head * HD, HD * 2, s.handoff + H_ATT, 0, CLUSTER);
    if (warp < 2) {
        const float bs = fuse_warp_sum(outv[warp * 32 + lane]);
        if (lane < CLUSTER) send_word(bs, s.atts + head * 2 + warp, s.handoff + H_ATT, lane);
    }
    __syncthreads();  // outv aliases the partials the output projection writes next
}
