// The persistent decode step on thread-block clusters, with real arithmetic (docs/persistent-step.md, "What
// next" 1): SmolLM2-135M's 30 layers at batch 1, layer l on cluster l % 7 of 16 blocks, each block holding its
// 1/16 of the layer's Q4_1 weights in shared memory, loaded by bulk copies while the other clusters run their
// layers (a cluster issues layer l + 7's copies as it finishes layer l). Inside a layer the stages hand over in
// distributed shared memory (QKV -> attention -> output projection -> FFN -> down); the residual stream goes
// to the next layer's cluster as tagged 64-bit words through L2. Layer 0 starts from the embedding of the token
// the previous launch picked; after layer 29 every block takes part in the LM head and the argmax
// (cluster_step_head.cuh), so that a graph of launches generates.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v cluster_step.cu -o cluster_step
//   ./cluster_step check | bench   (check: against a double-precision reference of the same layers)
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace cg = cooperative_groups;

#include "check_cuda.h"
#include "cluster_step.h"

// ---- small pieces --------------------------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// The nibble masks and exponent-trick bases of words_dot, held in registers (opaque to the compiler, which
// would otherwise rebuild a constant before every use: LOP3 takes one immediate).
struct NibbleConsts {
    unsigned lo_mask = 0x000F000Fu, hi_mask = 0x00F000F0u, lo_base = 0x64006400u, hi_base = 0x54005400u;
    __device__ NibbleConsts() { asm volatile("" : "+r"(lo_mask), "+r"(hi_mask), "+r"(lo_base), "+r"(hi_base)); }
};
// Two nibbles of w as a half2 of their values: (w & mask) | base, less the base. Those at bits 0-3 and 16-19
// through 1024.0's mantissa bits 0-3, those at bits 4-7 and 20-23 through 64.0's bits 4-7.
__device__ __forceinline__ __half2 nibbles(unsigned w, unsigned mask, unsigned base) {
    unsigned v;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(v) : "r"(w), "r"(mask), "r"(base));  // (w & mask) | base
    return __hsub2(*reinterpret_cast<const __half2*>(&v), *reinterpret_cast<const __half2*>(&base));
}
// Two 32-bit words of a Q4_1 block's nibbles (word i: bytes 4i..4i+3, weights 4i..4i+3 low, 4i+16..4i+19 high)
// against the matching 16 inputs, stored in the order `perm_slot` gives (for word i, x.x: weights 4i, 4i+2;
// x.y: 4i+16, 4i+18; x.z: 4i+1, 4i+3; x.w: 4i+17, 4i+19). Products summed in f16 (16 of them), returned in f32.
__device__ __forceinline__ float words_dot(unsigned w0, uint4 x0, unsigned w1, uint4 x1, const NibbleConsts& k) {
    const unsigned v0 = w0 >> 8, v1 = w1 >> 8;
    __half2 acc = __hmul2(nibbles(w0, k.lo_mask, k.lo_base), *reinterpret_cast<const __half2*>(&x0.x));
    acc = __hfma2(nibbles(w0, k.hi_mask, k.hi_base), *reinterpret_cast<const __half2*>(&x0.y), acc);
    acc = __hfma2(nibbles(v0, k.lo_mask, k.lo_base), *reinterpret_cast<const __half2*>(&x0.z), acc);
    acc = __hfma2(nibbles(v0, k.hi_mask, k.hi_base), *reinterpret_cast<const __half2*>(&x0.w), acc);
    acc = __hfma2(nibbles(w1, k.lo_mask, k.lo_base), *reinterpret_cast<const __half2*>(&x1.x), acc);
    acc = __hfma2(nibbles(w1, k.hi_mask, k.hi_base), *reinterpret_cast<const __half2*>(&x1.y), acc);
    acc = __hfma2(nibbles(v1, k.lo_mask, k.lo_base), *reinterpret_cast<const __half2*>(&x1.z), acc);
    acc = __hfma2(nibbles(v1, k.hi_mask, k.hi_base), *reinterpret_cast<const __half2*>(&x1.w), acc);
    const float2 f = __half22float2(acc);
    return f.x + f.y;
}

// A GEMV's input block kb as a thread holds it: 32 f16 values in perm_slot order (4 x uint4) and their sum.
struct Input {
    uint4 v[4];
    float sum;
};
// From a f16 input already in perm_slot order with its block sums (a hand-off's).
__device__ __forceinline__ Input input_of(const __half* x, const float* xs, int kb) {
    const uint4* xv = reinterpret_cast<const uint4*>(x + kb * 32);
    return Input{{xv[0], xv[1], xv[2], xv[3]}, xs[kb]};
}
// The same without sums: the thread adds its block's 32 values (in f32).
__device__ __forceinline__ Input input_summed(const __half* x, int kb) {
    const uint4* xv = reinterpret_cast<const uint4*>(x + kb * 32);
    Input in{{xv[0], xv[1], xv[2], xv[3]}, 0.f};
    const __half2* h = reinterpret_cast<const __half2*>(in.v);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const float2 f = __half22float2(h[i]);
        in.sum += f.x + f.y;
    }
    return in;
}
// rms_norm's scale of a 576-wide f32 vector, computed by each warp alone (no block barrier).
__device__ __forceinline__ float rms_scale(const float* x) {
    float ss = 0.f;
    for (int i = threadIdx.x & 31; i < HID; i += 32) ss += x[i] * x[i];
    return rsqrtf(warp_sum(ss) / HID + EPS);
}
// rms_norm's output x * r * wn into xn (f16, perm_slot order), then a barrier.
__device__ void norm_to(const float* x, const float* wn, float r, __half* xn) {
    for (int e = threadIdx.x; e < HID; e += THREADS) xn[(e & ~31) + perm_slot(e & 31)] = __float2half(x[e] * r * wn[e]);
    __syncthreads();
}

// A GEMV's partial sums, one a (row, Q4_1 block): part[row * KB + kb] = d * sum(q * x) + m * sum(x) over the
// block's 32 inputs. q: [rows][KB] 16-byte nibble blocks, dm: [rows][KB] (d, m). A thread holds one input
// block (kb = thread % KB; `input(kb)` gives it) and takes every (THREADS / KB)-th row (consecutive threads
// read consecutive nibble blocks).
template <int KB, class In>
__device__ void gemv_partials(const uint4* q, const __half2* dm, int rows, In input, float* part) {
    constexpr int GROUPS = THREADS / KB;
    const int kb = threadIdx.x % KB, group = threadIdx.x / KB;
    if (group >= GROUPS) return;
    const Input x = input(kb);
    const NibbleConsts k;
    int u = group * KB + kb;
    if (group >= rows) return;
    uint4 w = q[u];
    __half2 sc = dm[u];
    for (int r = group; r < rows; r += GROUPS, u += GROUPS * KB) {
        uint4 w_next = w;  // the next row's loads issued before this row's arithmetic
        __half2 sc_next = sc;
        if (r + GROUPS < rows) w_next = q[u + GROUPS * KB], sc_next = dm[u + GROUPS * KB];
        const float s = words_dot(w.x, x.v[0], w.y, x.v[1], k) + words_dot(w.z, x.v[2], w.w, x.v[3], k);
        const float2 f = __half22float2(sc);
        part[u] = f.x * s + f.y * x.sum;
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

__device__ __forceinline__ float take_word(const unsigned long long* p, unsigned tag) {
    unsigned long long v;
    for (;;) {
        asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
        const unsigned seen = (unsigned)(v >> 32);
        if (seen == tag) break;
        if (tag - seen > 1u) __nanosleep(256);  // not the layer before ours yet: poll less often
    }
    return __uint_as_float((unsigned)v);
}
__device__ __forceinline__ void put_word(unsigned long long* p, unsigned tag, float v) {
    const unsigned long long w = ((unsigned long long)tag << 32) | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}

// Thread 0: bulk copies of this block's share of layer l into W and, in an attention block, its kv head's first
// PRE_KEYS cached keys and values and the position's rope row, completing on `bar`.
__device__ void bulk_copy(void* to, const void* from, unsigned bytes, unsigned bar) {
    for (unsigned at = 0; at < bytes; at += COPY)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(smem_u32((char*)to + at)), "l"((const char*)from + at), "r"(bytes - at < COPY ? bytes - at : COPY), "r"(bar) : "memory");
}
__device__ void load_share(const StepArgs& a, const Smem& s, int l, int rank) {
    const unsigned b = smem_u32(s.bar), keys = (unsigned)min(a.pos, PRE_KEYS), kv_bytes = keys * HD * 2;
    const bool attends = rank < NQ;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our earlier reads of this memory before the copies
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"((unsigned)Share::bytes + (attends ? 2 * kv_bytes + HD * 4 : 0)) : "memory");
    bulk_copy(s.W, a.w + ((size_t)l * CLUSTER + rank) * Share::bytes, (unsigned)Share::bytes, b);
    if (!attends) return;
    const size_t head_at = ((size_t)l * NKV + rank / (NQ / NKV)) * MAXPOS * HD;
    if (keys) {
        bulk_copy(s.kpre, a.kc + head_at, kv_bytes, b);
        bulk_copy(s.vpre, a.vc + head_at, kv_bytes, b);
    }
    bulk_copy(s.rope, a.rope + (size_t)a.pos * HD, HD * 4, b);
}
__device__ void wait_phase(unsigned long long* bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
}

// ---- in-cluster hand-offs: st.async stores into the consumers' buffers, completing on their mbarriers -------

__device__ __forceinline__ unsigned peer_addr(const void* p, int peer) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_u32(p)), "r"(peer));
    return r;
}
// `bytes` (a multiple of 16) from this block's `src` to `dst` (the buffer's address here) in peers [p0, p1).
__device__ void send(const void* src, const void* dst, unsigned bytes, unsigned long long* bar, int p0, int p1) {
    const int chunks = (int)bytes / 16;
    for (int e = threadIdx.x; e < (p1 - p0) * chunks; e += THREADS) {
        const int peer = p0 + e / chunks, c = e % chunks;
        const uint4 v = reinterpret_cast<const uint4*>(src)[c];
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                     ::"r"(peer_addr((const char*)dst + c * 16, peer)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(peer_addr(bar, peer)) : "memory");
    }
}
__device__ __forceinline__ void send_word(float v, const float* dst, unsigned long long* bar, int peer) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                 ::"r"(peer_addr(dst, peer)), "r"(__float_as_uint(v)), "r"(peer_addr(bar, peer)) : "memory");
}
// Thread 0: this block's arrival on a hand-off's mbarrier for this turn, with the bytes it will receive.
__device__ __forceinline__ void expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// ---- attention of one query head (blocks 0..8 of the cluster) ------------------------------------------------
// q, k and v of the new position from the QKV hand-off (f32); rope on q and k (the row in shared memory); block 3g appends k and v of kv
// head g at `pos`; scores over the cached keys and the new one; the head's 64 outputs (f16, perm_slot order)
// and their two block sums into every block of the cluster.
template <class Mark>
__device__ void attention_head(const StepArgs& a, Smem& s, int l, int head, cg::cluster_group& cluster, Mark& mark) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = head / (NQ / NKV), pos = a.pos;
    float* qr = s.scratch;               // [64] roped q, scaled by 1/8
    float* kr = qr + HD;                 // [64] roped new key
    float* sc = kr + HD;                 // [MAXPOS + 1] scores, then probabilities
    float* pv = sc + MAXPOS + 1;         // [KEY_GROUPS][64] P.V partials
    float* outv = pv + KEY_GROUPS * HD;  // [64]
    float* ps = outv + HD;               // [KEY_GROUPS] softmax denominators a key group
    float* wmax = ps + KEY_GROUPS;       // [WARPS] the scores' maximum a warp
    const size_t head_at = ((size_t)l * NKV + g) * MAXPOS * HD;
    if (t < 2 * HD) {
        const int d = t & (HD - 1), i = d & 31;
        const float* src = t < HD ? s.qkv + head * HD : s.qkv + HID + g * HD;
        const float c = s.rope[i], sn = s.rope[32 + i];
        const float v = d < 32 ? src[d] * c - src[d + 32] * sn : src[d] * c + src[d - 32] * sn;
        if (t < HD) qr[d] = v * 0.125f;
        else {
            kr[d] = v;
            if (head % (NQ / NKV) == 0) {
                a.kc[head_at + (size_t)pos * HD + d] = __float2bfloat16(v);
                a.vc[head_at + (size_t)pos * HD + d] = __float2bfloat16(s.qkv[HID + NKV * HD + g * HD + d]);
            }
        }
    }
    __syncthreads();
    mark();
    // Scores: 8 lanes a key (8 dims each, one 16-byte load), 4 keys a warp, 4 passes in flight.
    const int kg = lane >> 3, dp = (lane & 7) * 8;
    float qv[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) qv[j] = qr[dp + j];
    const __nv_bfloat16* kbase = a.kc + head_at;
    float mx = -INFINITY;
    for (int base = 0; base < pos; base += 4 * 4 * WARPS) {
        uint4 kv[4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int key = base + p * 4 * WARPS + warp * 4 + kg;
            const __nv_bfloat16* row = key < PRE_KEYS ? s.kpre + key * HD : kbase + (size_t)key * HD;
            kv[p] = key < pos ? *reinterpret_cast<const uint4*>(row + dp) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int key = base + p * 4 * WARPS + warp * 4 + kg;
            const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&kv[p]);
            float d = 0.f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 f = __bfloat1622float2(k2[j]);
                d += qv[2 * j] * f.x + qv[2 * j + 1] * f.y;
            }
            d += __shfl_xor_sync(0xffffffffu, d, 1);
            d += __shfl_xor_sync(0xffffffffu, d, 2);
            d += __shfl_xor_sync(0xffffffffu, d, 4);
            if (key < pos) {
                if ((lane & 7) == 0) sc[key] = d;
                mx = fmaxf(mx, d);
            }
        }
    }
    if (warp == 0) {  // the new key
        const float d = warp_sum(qr[lane] * kr[lane] + qr[lane + 32] * kr[lane + 32]);
        if (lane == 0) sc[pos] = d;
        mx = fmaxf(mx, d);
    }
    mx = warp_max(mx);
    if (lane == 0) wmax[warp] = mx;
    __syncthreads();
    for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, wmax[w]);
    mark();
    // P.V: 8 threads a key (8 dims each, 16-byte loads), KEY_GROUPS keys a pass, 4 passes in flight.
    float acc[8] = {}, psum = 0.f;  // psum: the softmax's denominator over this thread's keys
    const __nv_bfloat16* vbase = a.vc + head_at;
    const int kt = t >> 3, dv = (t & 7) * 8;
    for (int base = 0; base < pos; base += 4 * KEY_GROUPS) {
        uint4 vv[4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int key = base + p * KEY_GROUPS + kt;
            const __nv_bfloat16* row = key < PRE_KEYS ? s.vpre + key * HD : vbase + (size_t)key * HD;
            vv[p] = key < pos ? *reinterpret_cast<const uint4*>(row + dv) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int key = base + p * KEY_GROUPS + kt;
            const float pk = key < pos ? __expf(sc[key] - mx) : 0.f;
            psum += pk;
            const __nv_bfloat162* v2 = reinterpret_cast<const __nv_bfloat162*>(&vv[p]);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 f = __bfloat1622float2(v2[j]);
                acc[2 * j] += pk * f.x, acc[2 * j + 1] += pk * f.y;
            }
        }
    }
    if (kt == 0) {  // the new key's value row
        const float pk = __expf(sc[pos] - mx);
        psum += pk;
        for (int j = 0; j < 8; ++j) acc[j] += pk * s.qkv[HID + NKV * HD + g * HD + dv + j];
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
            const __half h = __float2half(o / sum);
            outv[d] = __half2float(h);
            s.stage[(d & ~31) + perm_slot(d & 31)] = h;
        }
    }
    __syncthreads();
    // Hand-off: the 64 outputs (f16) and the sums of the head's two input blocks of the output projection.
#if STEP_HANDOFF_ASYNC
    send(s.stage, s.att + head * HD, HD * 2, s.handoff + H_ATT, 0, CLUSTER);
    if (warp < 2) {
        const float bs = warp_sum(outv[warp * 32 + lane]);
        if (lane < CLUSTER) send_word(bs, s.atts + head * 2 + warp, s.handoff + H_ATT, lane);
    }
    __syncthreads();  // outv aliases the partials the output projection writes next
#else
    for (int e = t; e < HD * CLUSTER; e += THREADS) {
        const int peer = e / HD, d = e % HD, at = head * HD + (d & ~31) + perm_slot(d & 31);
        cluster.map_shared_rank(s.att, peer)[at] = __float2half(outv[d]);
    }
    if (warp < 2) {
        const float bs = warp_sum(outv[warp * 32 + lane]);
        if (lane < CLUSTER) cluster.map_shared_rank(s.atts, lane)[head * 2 + warp] = bs;
    }
#endif
}

#include "cluster_step_head.cuh"

// ---- the step -------------------------------------------------------------------------------------------------

__global__ void __launch_bounds__(THREADS, 1) cluster_decode_step(StepArgs a) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    Smem s = Smem::at(smem_raw);
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank(), me = blockIdx.x / CLUSTER, t = threadIdx.x;
    if (t == 0) {
        for (int k = 0; k <= HANDOFFS; ++k) asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_u32(s.bar + k)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        load_share(a, s, me, rank);
    }
    cluster.sync();  // every block of the cluster is running before any writes another's shared memory
    const uint4* W4 = reinterpret_cast<const uint4*>(s.W);
    const float* norm1 = reinterpret_cast<const float*>(s.W + Share::norm1);
    const float* norm2 = reinterpret_cast<const float*>(s.W + Share::norm2);
    unsigned turn = 0;
    for (int l = me; l < LAYERS; l += CLUSTERS, ++turn) {
        unsigned long long clocks[NOTES];
        int note = 0;
        auto mark = [&]() { if (a.trace && t == 0 && note < NOTES) clocks[note++] = clock64(); };
        mark();
        wait_phase(s.bar, turn & 1u);
#if STEP_HANDOFF_ASYNC
        if (t == 0)
            for (int k = rank < NQ ? H_QKV : H_ATT; k < HANDOFFS; ++k) expect(s.handoff + k, handoff_bytes(k));
#endif
        mark();
        if (l == 0) embed(a, s.x);
        else
            for (int i = t; i < HID; i += THREADS) s.x[i] = take_word(a.words + i, a.tag0 + l);
        __syncthreads();
        mark();
        // QKV of rms_norm(x): this block's 60 rows into every block.
        norm_to(s.x, norm1, rms_scale(s.x), s.xn);
        gemv_partials<HID / 32>(W4 + Share::qkv_q / 16, reinterpret_cast<const __half2*>(s.W + Share::qkv_dm), R_QKV,
                                [&](int kb) { return input_summed(s.xn, kb); }, s.part);
        __syncthreads();
        if (t < R_QKV) s.out[t] = row_sum<HID / 32>(s.part, t);
        __syncthreads();
        mark();
#if STEP_HANDOFF_ASYNC
        send(s.out, s.qkv + rank * R_QKV, R_QKV * 4, s.handoff + H_QKV, 0, NQ);
        if (rank < NQ) wait_phase(s.handoff + H_QKV, turn & 1u);
#else
        for (int e = t; e < R_QKV * CLUSTER; e += THREADS)
            cluster.map_shared_rank(s.qkv, e / R_QKV)[rank * R_QKV + e % R_QKV] = s.out[e % R_QKV];
        cluster.sync();
#endif
        mark();
        if (rank < NQ) attention_head(a, s, l, rank, cluster, mark);
        mark();
#if STEP_HANDOFF_ASYNC
        wait_phase(s.handoff + H_ATT, turn & 1u);
#else
        cluster.sync();
#endif
        mark();
        // Output projection + residual: this block's 36 rows of xm = x + o into every block.
        gemv_partials<HID / 32>(W4 + Share::o_q / 16, reinterpret_cast<const __half2*>(s.W + Share::o_dm), R_O,
                                [&](int kb) { return input_of(s.att, s.atts, kb); }, s.part);
        __syncthreads();
        if (t < R_O) s.out[t] = s.x[rank * R_O + t] + row_sum<HID / 32>(s.part, t);
        __syncthreads();
        mark();
#if STEP_HANDOFF_ASYNC
        send(s.out, s.xm + rank * R_O, R_O * 4, s.handoff + H_XM, 0, CLUSTER);
        if (t < 32) {  // and the sum of squares of this block's rows, for the next rms_norm
            float v = s.out[t] * s.out[t];
            if (t + 32 < R_O) v += s.out[t + 32] * s.out[t + 32];
            v = warp_sum(v);
            if (t < CLUSTER) send_word(v, s.sq + rank, s.handoff + H_XM, t);
        }
        wait_phase(s.handoff + H_XM, turn & 1u);
#else
        for (int e = t; e < R_O * CLUSTER; e += THREADS)
            cluster.map_shared_rank(s.xm, e / R_O)[rank * R_O + e % R_O] = s.out[e % R_O];
        if (t < 32) {
            float v = s.out[t] * s.out[t];
            if (t + 32 < R_O) v += s.out[t + 32] * s.out[t + 32];
            v = warp_sum(v);
            if (t < CLUSTER) cluster.map_shared_rank(s.sq, t)[rank] = v;
        }
        cluster.sync();
#endif
        mark();
        // Gate and up of rms_norm(xm): this block's 96 rows of h = silu(gate) * up (f16) and their three block sums.
        {  // rms_norm's scale from the producers' sums of squares (in rank order: the same in every block)
            float ss = 0.f;
            for (int i = 0; i < CLUSTER; ++i) ss += s.sq[i];
            norm_to(s.xm, norm2, rsqrtf(ss / HID + EPS), s.xn);
        }
        gemv_partials<HID / 32>(W4 + Share::gu_q / 16, reinterpret_cast<const __half2*>(s.W + Share::gu_dm), R_GU,
                                [&](int kb) { return input_summed(s.xn, kb); }, s.part);
        __syncthreads();
        if (t < R_GU / 2) {
            const float gate = row_sum<HID / 32>(s.part, t), up = row_sum<HID / 32>(s.part, t + R_GU / 2);
            const __half h = __float2half(gate / (1.f + __expf(-gate)) * up);
            s.out[t] = __half2float(h);
            s.stage[(t & ~31) + perm_slot(t & 31)] = h;
        }
        __syncthreads();
        mark();
        {
            const int lane = t & 31, warp = t >> 5, h0 = rank * (R_GU / 2);
#if STEP_HANDOFF_ASYNC
            send(s.stage, s.h + h0, R_GU / 2 * 2, s.handoff + H_H, 0, CLUSTER);
            if (warp < R_GU / 64) {
                const float bs = warp_sum(s.out[warp * 32 + lane]);
                if (lane < CLUSTER) send_word(bs, s.hs + h0 / 32 + warp, s.handoff + H_H, lane);
            }
            wait_phase(s.handoff + H_H, turn & 1u);
#else
            for (int e = t; e < (R_GU / 2) * CLUSTER; e += THREADS) {
                const int peer = e / (R_GU / 2), r = e % (R_GU / 2), at = h0 + (r & ~31) + perm_slot(r & 31);
                cluster.map_shared_rank(s.h, peer)[at] = __float2half(s.out[r]);
            }
            if (warp < R_GU / 64) {
                const float bs = warp_sum(s.out[warp * 32 + lane]);
                if (lane < CLUSTER) cluster.map_shared_rank(s.hs, lane)[h0 / 32 + warp] = bs;
            }
            cluster.sync();
#endif
        }
        mark();
        // Down + residual: this block's 36 rows of the next layer's input, as tagged words.
        gemv_partials<FF / 32>(W4 + Share::d_q / 16, reinterpret_cast<const __half2*>(s.W + Share::d_dm), R_D,
                               [&](int kb) { return input_of(s.h, s.hs, kb); }, s.part);
        __syncthreads();  // also: every read of W is done
        if (t < 160) {  // four threads a row, 12 partials each
            const int row = t >> 2, q4 = t & 3;
            float v = 0.f;
            if (row < R_D)
#pragma unroll
                for (int kb = q4 * 12; kb < q4 * 12 + 12; ++kb) v += s.part[row * (FF / 32) + kb];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            if (row < R_D && q4 == 0) put_word(a.words + rank * R_D + row, a.tag0 + l + 1, s.xm[rank * R_D + row] + v);
        }
        if (t == 0 && l + CLUSTERS < LAYERS) load_share(a, s, l + CLUSTERS, rank);
        mark();
        if (a.trace && t == 0 && rank == 0)
            for (int i = 1; i < note; ++i) a.trace[(size_t)l * NOTES + i] = clocks[i] - clocks[i - 1];
    }
    if (t == 0) prefetch_head(a);
    lm_head(a, s, a.trace && blockIdx.x == 0 ? a.trace + (size_t)LAYERS * NOTES : nullptr);
    cluster.sync();  // no block leaves while another may still write its shared memory
}

#include "cluster_step_model.h"

// ---- host: device state, check, bench ------------------------------------------------------------------------

struct Device {
    unsigned char *w, *head_q;
    __half* head_d;
    float *rope, *out_norm, *logits;
    unsigned long long *words, *trace, *best;
    __nv_bfloat16 *kc, *vc;
    size_t cache_elems = (size_t)LAYERS * NKV * MAXPOS * HD;
    Device(const Model& m, const std::vector<unsigned char>& packed) {
        CK(cudaMalloc(&w, packed.size()));
        CK(cudaMemcpy(w, packed.data(), packed.size(), cudaMemcpyHostToDevice));
        CK(cudaMalloc(&head_q, m.head_q.size()));
        CK(cudaMemcpy(head_q, m.head_q.data(), m.head_q.size(), cudaMemcpyHostToDevice));
        CK(cudaMalloc(&head_d, m.head_d.size() * 2));
        CK(cudaMemcpy(head_d, m.head_d.data(), m.head_d.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&out_norm, HID * 4));
        CK(cudaMemcpy(out_norm, m.out_norm.data(), HID * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&logits, VOCAB * 4));
        CK(cudaMalloc(&rope, m.rope.size() * 4));
        CK(cudaMemcpy(rope, m.rope.data(), m.rope.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&words, HID * 8));
        CK(cudaMalloc(&best, 8));
        CK(cudaMalloc(&trace, ((size_t)LAYERS * NOTES + 2) * 8));
        CK(cudaMalloc(&kc, cache_elems * 2));
        CK(cudaMalloc(&vc, cache_elems * 2));
        CK(cudaFuncSetAttribute(cluster_decode_step, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Smem::bytes()));
        CK(cudaFuncSetAttribute(cluster_decode_step, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
    ~Device() {
        for (void* p : {(void*)w, (void*)head_q, (void*)head_d, (void*)out_norm, (void*)logits, (void*)rope, (void*)words, (void*)best,
                        (void*)trace, (void*)kc, (void*)vc})
            cudaFree(p);
    }
    StepArgs args(int pos, unsigned step, unsigned tag0, bool traced, bool with_logits) const {
        return StepArgs{w, head_q, head_d, out_norm, best, with_logits ? logits : nullptr, step, words, kc, vc, rope, pos, tag0,
                        traced ? trace : nullptr};
    }
    void launch(const StepArgs& a, cudaStream_t stream = 0) const {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = CLUSTER, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr, cfg.numAttrs = 1;
        cfg.gridDim = dim3(CLUSTER * CLUSTERS), cfg.blockDim = dim3(THREADS), cfg.dynamicSmemBytes = Smem::bytes(), cfg.stream = stream;
        CK(cudaLaunchKernelEx(&cfg, cluster_decode_step, a));
    }
};

static std::vector<__nv_bfloat16> random_cache(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<__nv_bfloat16> c(n);
    for (auto& e : c) e = __float2bfloat16(u(rng));
    return c;
}

static double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    return std::sqrt(num / den);
}

// Every position in `positions`: one step from a fresh random cache and token against the reference (the last
// layer's residual stream, the appended rows, the logits and the token picked); returns the failures.
static int check(const Model& m, Device& dev, const std::vector<int>& positions) {
    int failures = 0;
    std::mt19937 rng(7);
    for (int pos : positions) {
        const int token = (int)(rng() % VOCAB);
        std::vector<__nv_bfloat16> kc = random_cache(dev.cache_elems, 11 + pos), vc = random_cache(dev.cache_elems, 13 + pos);
        CK(cudaMemcpy(dev.kc, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dev.vc, vc.data(), vc.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemset(dev.words, 0, HID * 8));
        const unsigned long long first = pack_best(0, 0.f, (unsigned)token);
        CK(cudaMemcpy(dev.best, &first, 8, cudaMemcpyHostToDevice));
        const unsigned tag0 = 1;
        dev.launch(dev.args(pos, 1, tag0, false, true));
        CK(cudaDeviceSynchronize());
        std::vector<unsigned long long> words(HID);
        CK(cudaMemcpy(words.data(), dev.words, HID * 8, cudaMemcpyDeviceToHost));
        std::vector<__nv_bfloat16> gk(kc.size()), gv(vc.size());
        CK(cudaMemcpy(gk.data(), dev.kc, gk.size() * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gv.data(), dev.vc, gv.size() * 2, cudaMemcpyDeviceToHost));
        std::vector<float> glog(VOCAB);
        CK(cudaMemcpy(glog.data(), dev.logits, VOCAB * 4, cudaMemcpyDeviceToHost));
        unsigned long long best = 0;
        CK(cudaMemcpy(&best, dev.best, 8, cudaMemcpyDeviceToHost));
        const std::vector<double> want = m.step(token, pos, kc, vc), want_logits = m.logits(want);
        std::vector<double> got(HID), got_logits(glog.begin(), glog.end());
        int bad_tags = 0;
        for (int i = 0; i < HID; ++i) {
            bad_tags += (unsigned)(words[i] >> 32) != tag0 + LAYERS;
            uint32_t bits = (uint32_t)words[i];
            float f;
            std::memcpy(&f, &bits, 4);
            got[i] = f;
        }
        // The appended rows (and that nothing else in the caches moved).
        std::vector<double> ak, wk, av, wv;
        size_t moved = 0;
        for (size_t i = 0; i < kc.size(); ++i) {
            const bool appended = (i / HD) % MAXPOS == (size_t)pos;
            const float a = __bfloat162float(gk[i]), b = __bfloat162float(kc[i]), c = __bfloat162float(gv[i]), d = __bfloat162float(vc[i]);
            if (appended) ak.push_back(a), wk.push_back(b), av.push_back(c), wv.push_back(d);
            else moved += (a != b) + (c != d);
        }
        // The token: the reference's best, or one whose reference logit is within 0.02 of it (a near tie).
        const int want_token = (int)(std::max_element(want_logits.begin(), want_logits.end()) - want_logits.begin());
        const unsigned picked = best_token(best);
        const bool token_ok = (best >> 48) == 1 && picked < (unsigned)VOCAB && want_logits[picked] >= want_logits[want_token] - 0.02;
        const double ex = rel_l2(got, want), ek = rel_l2(ak, wk), ev = rel_l2(av, wv), el = rel_l2(got_logits, want_logits);
        const bool ok = bad_tags == 0 && moved == 0 && ex < 1e-2 && ek < 1e-2 && ev < 1e-2 && el < 1e-2 && token_ok;
        failures += !ok;
        printf("check pos %4d, token %5d: residual rel. L2 %.2e, appended k %.2e v %.2e, logits %.2e, picked %5u (reference %5d, "
               "%+.4f), words not tagged %d, cache entries moved %zu: %s\n",
               pos, token, ex, ek, ev, el, picked, want_token, picked < (unsigned)VOCAB ? want_logits[picked] - want_logits[want_token] : 0.0,
               bad_tags, moved, ok ? "ok" : "FAILED");
    }
    return failures;
}

static void bench(Device& dev, int pos) {
    const std::vector<__nv_bfloat16> kc = random_cache(dev.cache_elems, 3);
    CK(cudaMemcpy(dev.kc, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dev.vc, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    // A graph of 20 steps, each from the token the one before picked (the words and the argmax cleared first:
    // the tags and the step numbers restart at every replay; the first step's token is 0).
    constexpr int STEPS = 20;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(dev.words, 0, HID * 8, stream));
    CK(cudaMemsetAsync(dev.best, 0, 8, stream));
    for (int i = 0; i < STEPS; ++i) dev.launch(dev.args(pos, 1 + i, 1 + 32u * i, false, false), stream);
    CK(cudaStreamEndCapture(stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> us;
    for (int rep = 0; rep < 6; ++rep) {
        CK(cudaEventRecord(e0, stream));
        CK(cudaGraphLaunch(exec, stream));
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (rep) us.push_back(ms * 1e3f / STEPS);
    }
    std::sort(us.begin(), us.end());
    printf("bench pos %4d: %.1f us a step (median of 5 replays of %d; min %.1f, max %.1f), %.2f a layer\n", pos, us[us.size() / 2], STEPS, us[0],
           us.back(), us[us.size() / 2] / LAYERS);
    // Traced: block 0's cycles between its clock notes, mean over layers 1..29 and 10 steps.
    std::vector<double> sum(NOTES, 0.0);
    std::vector<unsigned long long> tr((size_t)LAYERS * NOTES + 2);
    double head_wait = 0, head_work = 0;
    for (int i = 0; i < 10; ++i) {
        CK(cudaMemsetAsync(dev.words, 0, HID * 8, stream));
        CK(cudaMemsetAsync(dev.best, 0, 8, stream));
        dev.launch(dev.args(pos, 1, 1, true, false), stream);
        CK(cudaStreamSynchronize(stream));
        CK(cudaMemcpy(tr.data(), dev.trace, tr.size() * 8, cudaMemcpyDeviceToHost));
        for (int l = 1; l < LAYERS; ++l)
            for (int k = 1; k < NOTES; ++k) sum[k] += (double)tr[(size_t)l * NOTES + k] / (10.0 * (LAYERS - 1));
        head_wait += tr[(size_t)LAYERS * NOTES] / 10.0, head_work += tr[(size_t)LAYERS * NOTES + 1] / 10.0;
    }
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const char* names[NOTES] = {"", "weights wait", "x in (poll)", "norm + QKV GEMV", "QKV hand-off", "attention: rope", "attention: scores", "attention: P.V", "attention: sum, send", "attention wait",
                                "o-proj GEMV", "o-proj hand-off", "norm + gate/up GEMV", "h hand-off", "down GEMV + store"};
    double own = 0;
    printf("  traced (block 0 of the layer's cluster, ns at %.2f GHz, mean of layers 1-29 x 10 steps):\n", khz * 1e-6);
    for (int k = 1; k < NOTES; ++k) {
        printf("    %-22s %7.0f\n", names[k], sum[k] / (khz * 1e-6));
        if (k > 2) own += sum[k] / (khz * 1e-6);
    }
    printf("    %-22s %7.0f (after its input arrived)\n", "layer", own);
    printf("    LM head, block 0 (ns): from its last layer to the final residual stream %.0f, norm + rows + argmax %.0f\n",
           head_wait / (khz * 1e-6), head_work / (khz * 1e-6));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(stream));
}

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "all";
    printf("cluster_decode_step: %d clusters of %d blocks x %d threads, %zu bytes of shared memory a block (%zu of weights)\n", CLUSTERS,
           CLUSTER, THREADS, Smem::bytes(), Share::bytes);
    const Model model(2026);
    Device dev(model, model.pack());
    {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = CLUSTER, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr, cfg.numAttrs = 1, cfg.gridDim = dim3(CLUSTER * CLUSTERS), cfg.blockDim = dim3(THREADS), cfg.dynamicSmemBytes = Smem::bytes();
        int clusters = 0;
        CK(cudaOccupancyMaxActiveClusters(&clusters, cluster_decode_step, &cfg));
        if (clusters < CLUSTERS) {
            printf("only %d clusters of %d can be resident; the step needs %d\n", clusters, CLUSTER, CLUSTERS);
            return 1;
        }
    }
    int failures = 0;
    if (mode == "all" || mode == "check") failures += check(model, dev, {0, 1, 37, 128, 1023});
    if (mode == "check-small") failures += check(model, dev, {5});
    if (mode == "all" || mode == "bench")
        for (int pos : {128, 1000}) bench(dev, pos);
    printf("%s\n", failures ? "FAILED" : "done");
    return failures ? 1 : 0;
}
