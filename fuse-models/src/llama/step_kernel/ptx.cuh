// The decode step's PTX helpers and small conversions (sm_90a), all of them here: f16 and bf16 as bits, warp
// reductions, the cluster's rank and barrier, distributed shared memory (mapa, st.async), mbarriers, bulk
// copies and L2 prefetches, the async-proxy fence, relaxed gpu-scope loads and stores, the global timer.
// Self-contained (includes nothing); the one file to swap for a shared CUDA prelude and sm_90 header.

// ---- f16 and bf16 as bits (no headers): a half2 is an unsigned of two f16 -----------------------------------

__device__ __forceinline__ unsigned h2_sub(unsigned a, unsigned b) {
    unsigned d;
    asm("sub.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ unsigned h2_mul(unsigned a, unsigned b) {
    unsigned d;
    asm("mul.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ unsigned h2_fma(unsigned a, unsigned b, unsigned c) {
    unsigned d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ float h_to_f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short f_to_h(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
// The sum of a half2's two values, in f32.
__device__ __forceinline__ float h2_sum(unsigned h2) { return h_to_f((unsigned short)(h2 & 0xFFFFu)) + h_to_f((unsigned short)(h2 >> 16)); }
__device__ __forceinline__ unsigned short f_to_bf(float f) {
    unsigned short b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
}
// Two bf16 in a word as f32 (low, high).
__device__ __forceinline__ float bf2_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf2_hi(unsigned w) { return __uint_as_float(w & 0xFFFF0000u); }

// ---- reductions --------------------------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

// ---- shared memory and the cluster -------------------------------------------------------------------------

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Every block of the cluster here, its earlier memory operations visible to the others after it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The address of this block's shared `p` in block `peer` of the cluster.
__device__ __forceinline__ unsigned peer_addr(const void* p, int peer) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_u32(p)), "r"(peer));
    return r;
}
// 16 bytes into a peer's shared memory (a mapa address), completing `bytes` of its mbarrier's transaction.
__device__ __forceinline__ void st_async_v4(unsigned to, uint4 v, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                 ::"r"(to), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar) : "memory");
}
// One word the same way.
__device__ __forceinline__ void st_async_b32(unsigned to, unsigned v, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(to), "r"(v), "r"(bar) : "memory");
}

// ---- mbarriers ----------------------------------------------------------------------------------------------

// An mbarrier of one arrival a phase.
__device__ __forceinline__ void mbarrier_init(const unsigned long long* bar) {
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_u32(bar)));
}
// The mbarriers' initialisation visible to the cluster (and to the async proxy).
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// This thread's arrival on the mbarrier at shared address `bar`, with the bytes its phase will receive.
__device__ __forceinline__ void mbarrier_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the mbarrier's phase of `parity` is complete.
__device__ void wait_phase(unsigned long long* bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
}

// ---- bulk copies -----------------------------------------------------------------------------------------------

// `bytes` (a multiple of 16) from global `from` to shared address `to`, completing on the mbarrier `bar`.
__device__ __forceinline__ void bulk_copy_chunk(unsigned to, const void* from, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(to), "l"(from), "r"(bytes), "r"(bar) : "memory");
}
// `bytes` of global memory from `p` into L2 (no completion to wait for).
__device__ __forceinline__ void bulk_prefetch_l2(const void* p, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}
// This thread's earlier accesses of shared memory ordered before the bulk copies it issues next.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---- global memory at gpu scope, the clock ---------------------------------------------------------------

__device__ __forceinline__ unsigned long long load_relaxed(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void store_relaxed(unsigned long long* p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
}
