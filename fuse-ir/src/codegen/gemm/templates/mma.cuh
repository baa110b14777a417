// ---------------------------------------------------------------------------------------------------------
// mma.cuh: tiled tensor-core GEMM for many rows on sm_80 and later (mma.sync m16n8k16, a cp.async ring of
// k-slices in shared memory, ldmatrix), with the same fused epilogue hook as skinny.cuh.
//
// MATH
//   Y[m, n] = sum_k X[m, k] * W[n, k], f32 accumulate. X: [M, K] row-major, row stride lda elements, unit
//   column stride. W: [N, K] row-major (checkpoint "[out, in]" layout), row stride ldw. Dual
//   (FUSE_MMA_DUAL=1): two weights W0, W1 of the same shape, the same X; acc0 = X W0^T, acc1 = X W1^T.
//   dtype: -DFUSE_MM_DT=2 bf16, =1 f16 (X, W0, W1 all the same). Weights of quantized blocks: mma_quant.cuh.
//
// CONTRACT WITH THE CODE GENERATOR
//   Before this text the generated code defines struct FuseArgs, #define FUSE_MMA_NAME <symbol>,
//   #define FUSE_MMA_DUAL 0|1, and the epilogue hook of skinny.cuh in its two parts:
//     FuseGemmRow fuse_gemm_row(const FuseArgs& args, long long row);
//     void fuse_gemm_store(const FuseArgs& args, const FuseGemmRow& r, long long col, float acc0, float acc1);
//   fuse_gemm_store is called exactly once per (row < M, col < N), consecutive lanes on consecutive col.
//   The CUDA prelude (codegen/cuda/prelude.cuh): fuse_grid_wait() / fuse_grid_release() (the launch may
//   overlap the kernel before it), fuse_smem_addr, cp.async and fuse_mma_m16n8k16; and struct FuseGemmArgs as
//   skinny.cuh's contract describes it (ws and counters unused).
//   This file defines FuseMmaParams { FuseArgs epi; FuseGemmArgs gemm; } and
//     FUSE_KERNEL(256, 1) FUSE_MMA_NAME(FUSE_KERNEL_PARAM(FuseMmaParams) p);
//   Requirements (the runtime guarantees them): M, N >= 1; K >= 8, K % 8 == 0; lda, ldw0, ldw1 % 8 == 0;
//   x, w0, w1 16-byte aligned. Deterministic (each output is one thread's sum in a fixed order).
//
// COMPILE-TIME DEFINES
//   FUSE_MM_DT  2 bf16, 1 f16                                                            (default 2)
//   FUSE_MM_BM  rows of X per block, 64 or 128                                           (default 128)
//   FUSE_MM_BN  weight rows (output columns) per block, 64 or 128                        (default 128)
//   FUSE_MM_S   stages of the ring, >= 2                                                 (default 4)
//   FUSE_MM_WQ  the weights' block type: the kernel is mma_quant.cuh's                   (default 0: dense)
//
// LAUNCH: 1-D grid of ceil(M / BM) * ceil(N / BN) blocks (block = nb * ceil(M / BM) + mb: the blocks that
//   share a weight tile run together), 256 threads, dynamic shared memory FUSE_MM_SMEM_BYTES (below; set
//   CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it).
//
// HOW: 8 warps as 2 (m) x 4 (n), each computing a (BM/2) x (BN/4) sub-tile in m16n8 pieces. Each ring stage
//   holds a 32-wide k slice of the X tile and of each weight tile, rows of 64 bytes whose four 16-byte chunks
//   are permuted by (row / 2) % 4 so that ldmatrix's 8-row reads hit distinct banks. One barrier per slice:
//   after it the slice is in place and every warp is done with the slot the next copy overwrites. After the
//   main loop the accumulators go through shared memory (the ring, then idle), and each warp writes whole
//   rows through the hook.
// ---------------------------------------------------------------------------------------------------------

#ifndef FUSE_MM_DT
#define FUSE_MM_DT 2
#endif
#ifndef FUSE_MM_BM
#define FUSE_MM_BM 128
#endif
#ifndef FUSE_MM_BN
#define FUSE_MM_BN 128
#endif
#ifndef FUSE_MM_S
#define FUSE_MM_S 4
#endif
#ifndef FUSE_MM_WQ
#define FUSE_MM_WQ 0
#endif

struct FuseMmaParams {
    FuseArgs epi;
    FuseGemmArgs gemm;
};

#define FUSE_MM_D (1 + FUSE_MMA_DUAL)
// Ring: S stages of (BM + D * BN) rows of 64 bytes; the epilogue's staging: D tiles of BM x (BN + 4) floats.
#define FUSE_MM_RING_BYTES (FUSE_MM_S * (FUSE_MM_BM + FUSE_MM_D * FUSE_MM_BN) * 64)
#define FUSE_MM_STAGE_BYTES (FUSE_MM_D * FUSE_MM_BM * (FUSE_MM_BN + 4) * 4)
#define FUSE_MM_SMEM_BYTES \
    (FUSE_MM_RING_BYTES > FUSE_MM_STAGE_BYTES ? FUSE_MM_RING_BYTES : FUSE_MM_STAGE_BYTES)

// Byte offset of (row, 16-byte chunk) in a tile of 64-byte rows, chunks permuted against bank conflicts.
__device__ __forceinline__ unsigned fuse_mm_at(int row, int chunk) {
    return (unsigned)(row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4));
}
__device__ __forceinline__ void fuse_mm_ldsm4(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
// The kernel's start: a launch with less dynamic shared memory than `bytes` would corrupt the tiles silently,
// so it stops instead; then the grid dependency (nothing global is read or written before: see the prelude);
// the block's first row of X (m0) and of the weights (n0).
template <int BM, int BN>
__device__ __forceinline__ void fuse_mm_begin(const FuseMmaParams& p, unsigned bytes, long long& m0, long long& n0) {
    unsigned dsize;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dsize));
    if (dsize < bytes) __trap();
    fuse_grid_wait();
    fuse_grid_release();
    const long long mblocks = (p.gemm.m + BM - 1) / BM;
    m0 = (long long)(FUSE_GEMM_BLOCK(p.gemm) % mblocks) * BM;
    n0 = (long long)(FUSE_GEMM_BLOCK(p.gemm) / mblocks) * BN;
}

// Every accumulator to zero.
template <int D, int MI, int NI>
__device__ __forceinline__ void fuse_mm_zero(float (&acc)[D][MI][NI][4]) {
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[d][i][j][r] = 0.f;
}

// The two k16 steps of one 32-wide slice: A rows from the tile at `a_base` (BM rows of 64 bytes), B rows from
// the D tiles at `b_base` (D * BN rows), into this warp's accumulators (warp (wm, wn) of 2 x 4).
template <int BM, int BN, int D, int DT>
__device__ __forceinline__ void fuse_mm_slice(float (&acc)[D][BM / 32][BN / 32][4], unsigned a_base, unsigned b_base,
                                              int wm, int wn, int lane) {
    constexpr int WM = BM / 2, WN = BN / 4, MI = WM / 16, NI = WN / 8;
    // ldmatrix row addresses of this lane: A pieces (rows 0-15 x k 0-15 as four 8x8 matrices) and B pieces
    // (two n8 pieces x k 0-15).
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
    const int b_row = (lane & 7) + (lane >> 4) * 8, b_chunk = (lane >> 3) & 1;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {  // two k16 steps per slice
        unsigned a[MI][4];
#pragma unroll
        for (int i = 0; i < MI; ++i)
            fuse_mm_ldsm4(a_base + fuse_mm_at(wm * WM + i * 16 + a_row, ks * 2 + a_chunk), a[i]);
#pragma unroll
        for (int d = 0; d < D; ++d) {
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                unsigned b[4];
                fuse_mm_ldsm4(b_base + fuse_mm_at(d * BN + wn * WN + j * 8 + b_row, ks * 2 + b_chunk), b);
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    fuse_mma_m16n8k16<DT>(acc[d][i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[0], b[1]);
                    fuse_mma_m16n8k16<DT>(acc[d][i][j + 1], a[i][0], a[i][1], a[i][2], a[i][3], b[2], b[3]);
                }
            }
        }
    }
}

// After the main loop (every copy waited for, a barrier after the last read of the tiles): the accumulators
// staged in shared memory at `smem`, then each warp writes whole rows through the hook.
template <int BM, int BN, int D>
__device__ __forceinline__ void fuse_mm_store(const FuseMmaParams& p, float (&acc)[D][BM / 32][BN / 32][4],
                                              unsigned char* smem, long long m0, long long n0) {
    constexpr int WM = BM / 2, WN = BN / 4, MI = WM / 16, NI = WN / 8;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 1, wn = warp >> 1;
    // C piece layout (m16n8): regs 0,1 = row g, columns 2t, 2t+1; regs 2,3 = row g + 8.
    float* stage = reinterpret_cast<float*>(smem);
    constexpr int LD = BN + 4;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int row = wm * WM + i * 16 + g + (r >> 1) * 8, col = wn * WN + j * 8 + 2 * t + (r & 1);
                    stage[(d * BM + row) * LD + col] = acc[d][i][j][r];
                }
    __syncthreads();
    // One row per warp at a time, consecutive lanes on consecutive columns.
    for (int row = warp; row < BM; row += 8) {
        const long long m = m0 + row;
        if (m >= p.gemm.m) break;
        const FuseGemmRow r = fuse_gemm_row(p.epi, m);
        for (int col = lane; col < BN; col += 32) {
            const long long n = n0 + col;
            if (n < p.gemm.n) fuse_gemm_store(p.epi, r, n, stage[row * LD + col], D == 2 ? stage[(BM + row) * LD + col] : 0.f);
        }
    }
}

#if !FUSE_MM_WQ
FUSE_KERNEL(256, 1) FUSE_MMA_NAME(FUSE_KERNEL_PARAM(FuseMmaParams) fuse_params) {
    FUSE_GEMM_PARAMS(FuseMmaParams, p, fuse_params);
    constexpr int BM = FUSE_MM_BM, BN = FUSE_MM_BN, S = FUSE_MM_S, D = FUSE_MM_D, DT = FUSE_MM_DT;
    constexpr int WM = BM / 2, WN = BN / 4;  // warp sub-tile
    constexpr int MI = WM / 16, NI = WN / 8;  // m16 and n8 pieces per warp
    static_assert(BM % 32 == 0 && BN % 64 == 0 && NI % 2 == 0 && S >= 2, "FUSE_MM_BM/BN/S");
    constexpr int TILE_ROWS = BM + D * BN;  // 64-byte rows per stage
    extern __shared__ __align__(128) unsigned char fuse_mm_smem[];
    long long m0, n0;
    fuse_mm_begin<BM, BN>(p, FUSE_MM_SMEM_BYTES, m0, n0);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 1, wn = warp >> 1;
    const long long M = p.gemm.m, N = p.gemm.n, K = p.gemm.k;
    const unsigned short* x = (const unsigned short*)p.gemm.x;
    const unsigned short* w[2] = {(const unsigned short*)p.gemm.w0, (const unsigned short*)p.gemm.w1};
    const long long ldw[2] = {p.gemm.ldw0, p.gemm.ldw1};
    const unsigned ring = fuse_smem_addr(fuse_mm_smem);

    // One k slice (32 wide) of every tile into stage `s`: each 64-byte row is 4 chunks of 16 bytes.
    auto load = [&](int s, long long k0) {
        const unsigned base = ring + (unsigned)(s * TILE_ROWS * 64);
        for (int i = tid; i < TILE_ROWS * 4; i += 256) {
            const int row = i >> 2, chunk = i & 3;
            const long long k = k0 + chunk * 8;
            const void* src;
            bool ok;
            if (row < BM) {
                const long long m = m0 + row;
                ok = m < M && k < K;
                src = x + (ok ? m * p.gemm.lda + k : 0);
            } else {
                const int j = (row - BM) / BN, r = (row - BM) % BN;
                const long long n = n0 + r;
                ok = n < N && k < K;
                src = w[j] + (ok ? n * ldw[j] + k : 0);
            }
            // nbytes = 0 fills zeros (rows past M or N, k past K).
            fuse_cp_async16<1>(base + fuse_mm_at(row, chunk), src, ok ? 16u : 0u);
        }
    };

    float acc[D][MI][NI][4];
    fuse_mm_zero(acc);

    const long long slices = (K + 31) / 32;
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        if (s < slices) load(s, (long long)s * 32);
        fuse_cp_async_commit();
    }
#pragma unroll 1
    for (long long kt = 0; kt < slices; ++kt) {
        fuse_cp_async_wait<S - 2>();
        __syncthreads();  // slice kt is in place; every warp is done with the slot of slice kt - 1
        if (kt + S - 1 < slices) load((int)((kt + S - 1) % S), (kt + S - 1) * 32);
        fuse_cp_async_commit();
        const unsigned base = ring + (unsigned)((kt % S) * TILE_ROWS * 64);
        fuse_mm_slice<BM, BN, D, DT>(acc, base, base + BM * 64, wm, wn, lane);
    }
    fuse_cp_async_wait<0>();
    __syncthreads();  // the ring is free: stage the accumulators there
    fuse_mm_store<BM, BN, D>(p, acc, fuse_mm_smem, m0, n0);
}
#endif  // !FUSE_MM_WQ

