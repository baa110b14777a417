// ---------------------------------------------------------------------------------------------------------
// skinny.cuh: "skinny" GEMM for decode (few rows of X), tensor cores (mma.sync m16n8k16), fused epilogue hook.
// This file: the contract, the defines, the config set and the small helpers; skinny_kernel.cuh, which follows
// it in every kernel source (fuse-ir's SKINNY_TEMPLATE is the two concatenated): the kernel.
//
// MATH
//   Y[m, n] = sum_k X[m, k] * W[n, k]           m < M, n < N, k < K, accumulated in f32.
//   X: [M, K] row-major, row stride lda elements, unit column stride.
//   W: [N, K] row-major (checkpoint "[out, in]" layout), row stride ldw elements.
//   Dual (FUSE_SKINNY_DUAL=1): two weights W0, W1 of the same [N, K] shape (separate pointers, own row
//   strides ldw0, ldw1; not repacked), the same X; acc0 = X W0^T, acc1 = X W1^T for the same (m, n).
//   dtype: -DFUSE_SK_DT=2 bf16, =1 f16 (X, W0, W1 all the same dtype). Tensor-core mma, f32 accumulate.
//
// CONTRACT WITH THE CODE GENERATOR
//   Before this text the generated code defines:
//     struct FuseArgs;                            (opaque here: the epilogue's arguments)
//     #define FUSE_SKINNY_NAME <symbol>           (extern "C" name of the kernel)
//     #define FUSE_SKINNY_DUAL 0|1
//     __device__ __forceinline__ void fuse_gemm_epilogue(const FuseArgs& args, long long row, long long col,
//                                                        float acc0, float acc1);
//     the CUDA prelude (fuse-ir's codegen/cuda/prelude.cuh): fuse_grid_wait / fuse_grid_release (the kernel
//                                                 may be launched overlapping the one before it; see there),
//                                                 fuse_smem_addr, cp.async (fuse_cp_async16/_commit/_wait),
//                                                 fuse_ld_cg, fuse_mma_m16n8k16, fuse_unpack, fuse_pack2_cvt
//     struct FuseGemmArgs { const void* x; const void* w0; const void* w1; long long m, n, k, lda, ldw0, ldw1;
//                           float* ws; unsigned* counters; };   (ws/counters: only when FUSE_SK_SP > 1)
//   fuse_gemm_epilogue is called exactly once per (row < M, col < N) (row = m, col = n); consecutive threads
//   get consecutive col. Non-dual: acc1 = 0.f.
//   With -DFUSE_GEMM_PRO=1 (an in-kernel prologue: X is computed from the tensor at `x` as it is loaded),
//   the generated code also defines FUSE_GEMM_PRO_ROWS (>= BM) and
//     __device__ void fuse_gemm_pro_rows(const FuseArgs& args, long long m0, int rows, long long k, float* part, int stride);
//     struct FuseProRow;  __shared__ FuseProRow fuse_pro_row[FUSE_GEMM_PRO_ROWS];
//     __device__ void fuse_gemm_pro8(const FuseArgs& args, const FuseProRow& row, long long kk, float (&a)[8]);
//   fuse_gemm_pro_rows is called once by the whole block (rows = the block's rows < M, k = K, part = 8
//   arrays of 256 floats `stride` floats apart in the weight ring, where the main loop writes only after it)
//   before the main loop; X[m0 + r, kk .. kk + 8] is then what
//   fuse_gemm_pro8(args, fuse_pro_row[r], kk, a) leaves in `a`, given the values at x there, for every 8
//   elements the block reads (kk % 8 == 0; elements past M or K stay 0).
//   This file defines (guarded so that it may be included several times with different configs):
//     struct FuseSkinnyParams { FuseArgs epi; FuseGemmArgs gemm; };
//     FUSE_KERNEL(256, FUSE_SK_MINB) FUSE_SKINNY_NAME(FUSE_KERNEL_PARAM(FuseSkinnyParams) p);  (the prelude's
//     entry macros: an extern "C" kernel, or a device function in a one-launch step)
//   w1 / ldw1 are ignored when FUSE_SKINNY_DUAL == 0.
//   Requirements (the runtime guarantees them): M, N >= 1; K >= 8, K % 8 == 0; lda, ldw0, ldw1 % 8 == 0;
//   x, w0, w1 16-byte aligned. N, K otherwise arbitrary (N edge and K tail are handled), M arbitrary.
//   Deterministic: the same inputs give bit-identical outputs. (With FUSE_SK_SP > 1 one atomic counter per
//   tile only decides which block sums the partial results; the sum runs in a fixed order either way.)
//   No #include; only names fuse_sk_* / FUSE_SK_* / FuseSk* / FuseSkinnyParams are defined.
//
// COMPILE-TIME DEFINES (each has a default in skinny_kernel.cuh; the defaults are config k1).
// Every combination listed under CONFIG SET is valid for any M, N, K and for both dual and single kernels.
//   FUSE_SK_DT    2 = bf16, 1 = f16                                                      (default 2)
//   FUSE_SK_MT    16-row weight tiles per warp (weight rows per warp = 16*MT)    {1, 2}  (default 1)
//   FUSE_SK_NT    8-row X tiles per block (rows m per block = 8*NT)          {1, 2, 4, 8} (default 1)
//   FUSE_SK_KW    warps of the block that split K (divides 8). The 8 warps form NG = 8/KW groups along n; the
//                 KW warps of a group take interleaved (32*U)-wide k chunks and are summed through shared
//                 memory in a fixed order (deterministic)                     {1, 2, 4, 8} (default 8)
//   FUSE_SK_S     stages of each warp's cp.async weight ring (S-1 chunks in flight per warp) (default 4)
//                 (measured: power-of-two S was faster for the single kernel at MT=1, S=6/12 ~20% slower)
//   FUSE_SK_PF    L2 prefetch-size hint on the weight copies: 0 none, 1 .L2::128B, 2 .L2::256B (default 1)
//   FUSE_SK_XS    0: each warp loads its X fragments from global memory (L1/L2) into registers, one chunk ahead.
//                 1: X is staged through shared memory with cp.async in the same ring as the weights; the NG
//                 warps of the same kw share one copy (a block-wide barrier per chunk), so X traffic from L2 is
//                 divided by NG. Pays for M >= 16 with KW <= 2 (dual).                    (default 0)
//   FUSE_SK_XR    with XS = 0 and NT <= 2 (ignored otherwise): 1: each warp copies its X fragments with cp.async
//                 into an X ring of its own beside its weight ring, in the same copy groups (S-1 chunks ahead,
//                 every chunk of a short K at once) rather than loading them one chunk ahead, a round trip to L2
//                 a chunk. The runtime sets it in a step recorded for one launch (tasks: one block an SM, no
//                 occupancy to lose to the extra shared memory).                          (default 0)
//   FUSE_SK_U     16-byte k pieces per thread per chunk (chunk width 32*U). Accepted, not in the set: U=2/4 was
//                 never faster and was ~2x slower for the single kernel.                  (default 1)
//   FUSE_SK_MINB  min resident blocks per SM (__launch_bounds__(256, MINB)): bounds the registers
//                 (2 -> <= 128, 3 -> <= 80); use the value from CONFIG SET, others may spill (default 3)
//   FUSE_SK_XD    (v1) ignored.
//   FUSE_GEMM_EARLY_W  1: the host found that the kernel before this one in the stream does not write the
//                 weights (fuse-runtime's `weights_unwritten_before`): without X staging
//                 the first S-1 weight chunks are copied before the grid wait (default 0)
//   FUSE_SK_SP    blocks that split K across the grid (default 1). Each of the SP blocks of a tile takes a
//                 contiguous 1/SP of the k chunks and writes its partial [BM x BN] sums to `ws`; the block that
//                 finds itself last on the tile's counter (atomicAdd) sums the SP partials in order 0..SP-1,
//                 runs the epilogue and sets the counter back to 0 for the next launch. For small N (the down
//                 projection's 4096 columns give only 256 blocks of BN = 16).
//
// LAUNCH: 1-D grid, block = 256 threads, DYNAMIC shared memory (static: 4 bytes when SP > 1):
//   BN    = 16 * MT * (8 / KW)                      columns n per block
//   BM    = 8 * NT                                  rows m per block
//   tiles = ceil(N / BN) * ceil(M / BM)             (tile = nb * ceil(M / BM) + mb: m fastest, so the blocks
//                                                    that share a weight tile run together)
//   grid  = tiles * SP                              (blockIdx.x = tile * SP + split)
//   SP > 1: ws = tiles * SP * BM * BN * (1 + DUAL) floats; counters = tiles unsigned ints, all 0 before the
//           first launch (each launch leaves them 0 again)
//   block = 256
//   dynamic smem bytes = FUSE_SK_SMEM_BYTES (skinny_kernel.cuh defines it from the config and FUSE_SKINNY_DUAL):
//                      = 512 * S * U * (16 * (1 + DUAL) * MT + (XS ? KW * NT : XR && NT <= 2 ? 8 * NT : 0))
//   The kernel needs CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES >= that value whenever it is > 48 KB
//   (set it always: it is harmless below 48 KB) and the same value as sharedMemBytes at launch. Every config
//   in the set is <= 131072 bytes (H200 limit per block: 232448).
//
// CONFIG SET for the autotuner (PF=1, U=1, SP=1 in all). fuse-ir's `SKINNY_CONFIGS` names them by block tile:
// k1 r8c16, k2 r8c32, k3 r16c16, k4 r16c64xs, k5 r32c16, k6 r32c64xs, k7 r64c128xs, k8 r64c32xs; plus r8c16k2
// (k1 with SP=2: correct, not faster as measured so far). (k1 with S=8, 7 chunks per warp in flight, was tried
// for the down projection on 2026-11-29: 41.2 against 40.2 us at M = 1, L2 flushed; not kept.) Registers from nvcc 13.0 -Xptxas -v, sm_90, dual / single;
// 0 bytes spilled and 0 stack frame for all. smem = dynamic bytes dual / single. grid for Llama-3-8B at M=1:
// dual N=14336, single N=4096.
//   name  MT NT KW S  XS MINB  BN x BM   regs      smem (bytes)      grid dual/single   meant for
//   k1     1  1  8 4  0  3     16 x 8    72 / 80   65536 / 32768     896 / 256          dual M<=4, single M<=8
//   k2     2  1  8 2  0  2     32 x 8   100 / 70   65536 / 32768     448 / 128          dual M=8
//   k3     1  2  8 4  0  2     16 x 16   92 / 72   65536 / 32768     896 / 256          single M=16
//   k4     1  2  2 4  1  2     64 x 16   79 / 59   73728 / 40960     224 / 64           dual M=16
//   k5     1  4  8 4  0  2     16 x 32  124 / 102  65536 / 32768     896 / 256          single M=32
//   k6     1  4  2 4  1  2     64 x 32   98 / 74   81920 / 49152     224 / 64           dual M=32
//   k7     1  8  1 4  1  1    128 x 64  128 / 96   81920 / 49152     112 / 32           dual M>=64
//   k8     1  8  4 4  1  1     32 x 64  144 / 112 131072 / 98304     448 / 128          single M>=64
// MEASURED on one H200 (2026-11-29, scripts/kernels/run-skinny.sh harness, copy bandwidth 4.254 TB/s, median of
// 30 event-timed launches, 3 weight sets rotated; Llama-3-8B MLP: dual = [M,4096] x 2 x [14336,4096],
// single = [M,14336] x [4096,14336]; cuBLAS = cublasGemmEx bf16, dual = 2 calls; v1 = the previous template's
// best config, timed in the same device command):
//   M     dual: config   us  %copy (cuBLAS us) [v1 us]        single: config  us  %copy (cuBLAS us) [v1 us]
//   1           k1     60.1  91.9% (64.4) [61.0]                      k1   32.5  85.1% (34.0) [36.6]
//   2           k1     60.0  92.0% (63.7) [61.5]                      k1   33.3  83.0% (33.3) [36.0]
//   4           k1     60.1  91.9% (64.2) [61.8]                      k1   33.4  82.6% (34.3) [36.2]
//   8           k2     61.6  89.7% (64.1) [62.8]                      k1   34.3  80.6% (34.0) [36.5]
//   16          k4     65.4  84.5% (65.0) [69.2]                      k3   36.9  74.9% (34.7) [38.1]
//   32          k6     70.9  77.9% (65.5) [83.4]                      k5   42.4  65.1% (35.2) [44.5]
//   64          k7     92.1  59.9% (70.7) [123.4]                     k8   64.8  42.6% (38.5) [66.6]
//   128         k7    132.1  41.8% (70.2) [213.9]                     k8   95.9  28.8% (39.0) [122.1]
//   So: dual M <= 8 beats cuBLAS by 4-7%, single M <= 4 by 0-5% (ties at M = 8); at M = 16 cuBLAS is 1-6%
//   faster; M >= 32 cuBLAS wins clearly: use cuBLAS / a tiled GEMM there. Let the autotuner choose among k1..k8.
// ---------------------------------------------------------------------------------------------------------

#ifndef FUSE_SK_ONCE
#define FUSE_SK_ONCE

struct FuseSkinnyParams {
    FuseArgs epi;
    FuseGemmArgs gemm;
};

struct alignas(16) FuseSkV4 {
    unsigned x, y, z, w;
};

// X: small and re-read by every block: keep it in L1 / L2. (Through the read-only path only in a kernel of
// its own: in a one-launch step (FUSE_TASK) another task of the same launch wrote X.)
__device__ __forceinline__ FuseSkV4 fuse_sk_ldx(const unsigned short* p) {
    FuseSkV4 v;
#if defined(FUSE_TASK)
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
#else
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
#endif
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
// One 32-wide k chunk. Thread (g = lane/4, t = lane%4) holds 8 consecutive k (at 8t) of weight rows g (wl) and
// g+8 (wh) and of X row g (xv). k permutation (the same for A and B): mma #1 takes the thread's elements 0..3,
// mma #2 its elements 4..7. A fragment regs: {row g k-pair 0, row g+8 k-pair 0, row g k-pair 1, row g+8 k-pair 1};
// B fragment regs: {k-pair 0, k-pair 1} of X row g (the mma's column n = g).
template <int DT>
__device__ __forceinline__ void fuse_sk_mma32(float (&c)[4], const FuseSkV4& wl, const FuseSkV4& wh,
                                              const FuseSkV4& xv) {
    fuse_mma_m16n8k16<DT>(c, wl.x, wh.x, wl.y, wh.y, xv.x, xv.y);
    fuse_mma_m16n8k16<DT>(c, wl.z, wh.z, wl.w, wh.w, xv.z, xv.w);
}

// Shared memory per block (dynamic, FUSE_SK_SMEM_BYTES): the weight ring, 8 warps x S stages x (2*D*MT) x 32
// lanes x 16 bytes = 8192 * S * D * MT bytes, then (XS=1) the X ring, KW x S x NT x 32 lanes x 16 bytes
// = 512 * S * KW * NT bytes. The weight ring is reused for the K-split reduction after the main loop.
#if FUSE_GEMM_PRO
// 8 consecutive k of one X row (16-bit elements of dtype DT) as f32, and back, rounded two at a time
// (cvt.rn.{bf16,f16}x2: round to nearest even, as fuse_pack).
template <int DT>
__device__ __forceinline__ void fuse_sk_unpack8(FuseSkV4 v, float (&a)[8]) {
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        a[2 * i] = fuse_unpack<DT>((unsigned short)(w[i] & 0xffffu));
        a[2 * i + 1] = fuse_unpack<DT>((unsigned short)(w[i] >> 16));
    }
}
template <int DT>
__device__ __forceinline__ FuseSkV4 fuse_sk_pack8(const float (&a)[8]) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = fuse_pack2_cvt<DT>(a[2 * i], a[2 * i + 1]);
    return FuseSkV4{w[0], w[1], w[2], w[3]};
}
// The in-kernel prologue on 8 consecutive k of one X row, whose FuseProRow the caller holds.
template <int DT>
__device__ __forceinline__ FuseSkV4 fuse_sk_pro8(const FuseArgs& args, const FuseProRow& row, long long k, FuseSkV4 v) {
    float a[8];
    fuse_sk_unpack8<DT>(v, a);
    fuse_gemm_pro8(args, row, k, a);
    return fuse_sk_pack8<DT>(a);
}
#if defined(FUSE_GEMM_PRO_CAN_SCALE)
// The same in the scaled form: h in place of X, each reduction's operand folded into `red` (see the
// generated fuse_gemm_pro8_scaled).
template <int DT>
__device__ __forceinline__ FuseSkV4 fuse_sk_pro8_scaled(const FuseArgs& args, const FuseProRow& row, long long k, FuseSkV4 v,
                                                        float (&red)[FUSE_GEMM_PRO_REDUCTIONS]) {
    float a[8];
    fuse_sk_unpack8<DT>(v, a);
    fuse_gemm_pro8_scaled(args, row, k, a, red);
    return fuse_sk_pack8<DT>(a);
}
#endif
#endif

#endif  // FUSE_SK_ONCE
