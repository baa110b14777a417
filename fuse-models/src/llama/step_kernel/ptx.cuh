// The decode step's own helpers (sm_90a), after fuse's CUDA prelude and sm_90 header (`fuse::ir::codegen::
// {CUDA_PRELUDE, SM90_HEADER}`, which the preamble puts before this file: conversions, warp reductions, the
// cluster, mbarriers, bulk copies, st.async). Here only what no other kernel uses: f16x2 arithmetic on words,
// relaxed gpu-scope loads and stores of the hand-off words, the global timer.

// ---- f16x2 as bits (no headers): a half2 is an unsigned of two f16 ---------------------------------------------

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
// The sum of a half2's two values, in f32.
__device__ __forceinline__ float h2_sum(unsigned h2) { return fuse_f16_to_f32((unsigned short)(h2 & 0xFFFFu)) + fuse_f16_to_f32((unsigned short)(h2 >> 16)); }
__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

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
