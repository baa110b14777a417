// ---------------------------------------------------------------------------------------------------------
// wgmma.cuh: tensor-core GEMM for many rows on sm_90a: TMA loads into a pipelined shared-memory ring, wgmma
// (warpgroup MMA) from shared memory, one producer warpgroup and FUSE_WG_CW consumer warpgroups, fused
// epilogue hook.
//
// MATH (as skinny.cuh)
//   Y[m, n] = sum_k X[m, k] * W[n, k], f32 accumulation. X: [M, K] row-major (row stride lda), W: [N, K]
//   row-major (checkpoint "[out, in]" layout, row stride ldw). Dual (FUSE_WGMMA_DUAL=1): W0 and W1 of the
//   same shape, the same X; acc0 = X W0^T, acc1 = X W1^T for the same (m, n). bf16 (FUSE_WG_DT=2) or f16 (1).
//   Computed transposed ("swap AB"): weight rows are the instruction's M (64 per consumer warpgroup), rows of
//   X its N (BM = FUSE_WG_BM, 8..256), so a block of few rows wastes no tensor-core work, and both operands
//   are K-major in shared memory, as wgmma reads them without transposition.
//
// CONTRACT WITH THE CODE GENERATOR
//   Before this text the generated code defines:
//     struct FuseArgs;                              (opaque here: the epilogue's arguments)
//     #define FUSE_WGMMA_NAME <symbol>              (extern "C" name of the kernel)
//     #define FUSE_WGMMA_DUAL 0|1
//     struct FuseGemmRow;  FuseGemmRow fuse_gemm_row(const FuseArgs& args, long long row);
//     void fuse_gemm_store(const FuseArgs& args, const FuseGemmRow& r, long long col, float acc0, float acc1);
//       (the epilogue at one element: `fuse_gemm_row` once per row, then `fuse_gemm_store` per column)
//     template <int DT> void fuse_wg_mma(float (&d)[BM / 2], unsigned long long a, unsigned long long b);
//       one overload per BM of the config set: one `wgmma.mma_async m64n<BM>k16` (scale-d = 1).
//     the CUDA prelude (codegen/cuda/prelude.cuh: fuse_grid_wait / fuse_grid_release, as the launch may
//       overlap the kernel before it; fuse_smem_addr, fuse_ld_cg) and the sm_90 header (codegen/cuda/sm90.cuh:
//       mbarriers, the cluster barrier and rank, TMA loads)
//     struct FuseGemmArgs  (skinny.cuh's contract describes it)
//   fuse_gemm_store is called exactly once per (row < M, col < N), consecutive lanes on consecutive col;
//   non-dual: acc1 = 0.f.
//   This file defines (guarded, so that it may be included several times with different configs):
//     struct alignas(128) FuseWgTmap { unsigned long long words[16]; };      (a CUtensorMap)
//     struct FuseWgmmaParams { FuseWgTmap tx, tw0, tw1; FuseArgs epi; FuseGemmArgs gemm; };
//     extern "C" __global__ void FUSE_WGMMA_NAME(const __grid_constant__ FuseWgmmaParams p);
//   Block: 128 * (1 + FUSE_WG_CW) threads. Grid: tiles * FUSE_WG_SP blocks, tiles = ceil(N / BN) * MB, where
//   MB = ceil(M / BM) rounded up to a multiple of FUSE_WG_MC; BN = 64 * FUSE_WG_CW. The tile's m-block varies
//   fastest, so neighbouring blocks share a weight tile in L2. FUSE_WG_MC = 2 (no split-K): launched in
//   clusters of 2 along m; the two blocks share each weight tile, each loading half of it with TMA multicast
//   into both (half the L2 traffic for weights); a block past M only lends its half.
//   Tensor maps (the runtime encodes them: cuTensorMapEncodeTiled, 2-D, dims {K, rows}, stride ld * 2 bytes,
//   CU_TENSOR_MAP_SWIZZLE_128B, out-of-bounds elements read as zero):
//     tx  over X with box {64, BM};  tw0 / tw1 over W0 / W1 with box {64, BN / MC} (tw1 unused when not dual).
//   The x / w0 / w1 / lda / ldw fields of FuseGemmArgs are not read (the maps carry them); m, n, k are.
//   Split-K (FUSE_WG_SP > 1): ws holds tiles * SP * D * BN * BM floats, counters one zeroed word per tile;
//   every launch leaves the counters zero again.
//   Requirements (the runtime guarantees them): M, N >= 1; K >= 8; K, lda, ldw % 8 == 0; 16-byte aligned
//   operands (TMA's); M, N, K < 2^31.
//   Dynamic shared memory: FUSE_WG_SMEM_BYTES (the kernel traps when launched with less).
//   Deterministic: with splits, the last block of a tile (found with an atomic counter) sums the partial
//   tiles in split order.
//
// PIPELINE
//   Stage s of the ring (1024-byte aligned, as the 128-byte swizzle needs): W0 tile [BN][64], W1 tile, X tile
//   [BM][64], each row 128 bytes, swizzled by TMA. full[s]: the producer's one arrival plus the TMA bytes;
//   empty[s]: one arrival per consumer warp (of both blocks of a cluster) once its wgmmas reading the stage
//   have completed. Consumers keep one stage of wgmmas in flight (wgmma.wait_group 1) and release the stage
//   before it. The producer warpgroup gives registers to the consumers (setmaxnreg) when there are two.
//   After the main loop the tile goes through the (then idle) ring to the epilogue, one row per warp.
//
// MEASURED (H200, BENCHMARKS.md): beats cuBLAS + an epilogue kernel on the Llama MLP's dual GEMM up to 64
// rows (0.95-0.99x); 1.09-1.35x cuBLAS's time from 256 rows (the tensor pipe at 67.5% at M = 4096: each
// block is one tile, so the pipe idles while a block drains its epilogue and the next one fills its ring).
// ---------------------------------------------------------------------------------------------------------

#ifndef FUSE_WG_ONCE
#define FUSE_WG_ONCE

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the wgmma template needs sm_90a (wgmma, TMA and setmaxnreg)"
#endif

struct alignas(128) FuseWgTmap {
    unsigned long long words[16];
};
struct FuseWgmmaParams {
    FuseWgTmap tx, tw0, tw1;
    FuseArgs epi;
    FuseGemmArgs gemm;
};

// ---- wgmma -----------------------------------------------------------------------------------------------
// Shared-memory matrix descriptor of a K-major tile with 128-byte swizzle: rows of 128 bytes, 8-row groups
// 1024 bytes apart (stride byte offset); the leading byte offset is unused for this layout. Stepping 16
// elements of k adds 32 bytes to the start address (+2 in the descriptor).
__device__ __forceinline__ unsigned long long fuse_wg_desc(unsigned addr) {
    unsigned long long d = (unsigned long long)((addr & 0x3FFFFu) >> 4);
    d |= 1ull << 16;
    d |= (unsigned long long)(1024 >> 4) << 32;
    d |= 1ull << 62;
    return d;
}
__device__ __forceinline__ void fuse_wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void fuse_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void fuse_wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmmas.
template <int NACC>
__device__ __forceinline__ void fuse_wg_pin(float (&d)[NACC]) {
#pragma unroll
    for (int i = 0; i < NACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int BM, int CW, int S, int DUAL, int DT, int SP, int MC>
__device__ __forceinline__ void fuse_wg_body(const FuseWgmmaParams& p, unsigned char* raw) {
    constexpr int D = DUAL ? 2 : 1;
    constexpr int BN = 64 * CW;              // weight rows per block
    constexpr int W_BYTES = BN * 128;        // one weight tile: BN rows x 64 k x 2 bytes
    constexpr int X_BYTES = BM * 128;        // the X tile: BM rows x 64 k
    constexpr int STAGE = D * W_BYTES + X_BYTES;
    constexpr int NACC = BM / 2;             // accumulators per thread per product (m64 x BM / 128 threads)
    constexpr int CT = 128 * CW;             // consumer threads
    static_assert(BM % 8 == 0 && BM >= 8 && BM <= 256, "FUSE_WG_BM: 8..256, a multiple of 8");
    static_assert(CW == 1 || CW == 2, "FUSE_WG_CW: 1 or 2");
    static_assert(S >= 2 && SP >= 1, "FUSE_WG_S >= 2, FUSE_WG_SP >= 1");
    static_assert(MC == 1 || (MC == 2 && SP == 1), "FUSE_WG_MC: 1, or 2 without split-K");

    const unsigned raw_addr = fuse_smem_addr(raw);
    const unsigned base = (raw_addr + 1023u) & ~1023u;
    const unsigned bars = base + S * STAGE;  // full[S], empty[S], then one word: "this block is last"
    unsigned* last_flag = reinterpret_cast<unsigned*>(raw + (bars + 16u * S - raw_addr));

    const long long M = p.gemm.m, N = p.gemm.n, K = p.gemm.k;
    const unsigned mblocks = (unsigned)((M + BM - 1) / BM + MC - 1) / MC * MC;
    const unsigned tile = blockIdx.x / SP, split = blockIdx.x % SP;
    const int m0 = (int)((tile % mblocks) * BM);
    const int n0 = (int)((tile / mblocks) * BN);
    unsigned rank = 0;  // this block's rank in its cluster (MC = 2: the tile's m-block parity)
    if (MC == 2) rank = fuse_cluster_rank();
    const int ktiles = (int)((K + 63) / 64);
    const int kt0 = (int)((long long)ktiles * split / SP);
    const int nk = (int)((long long)ktiles * (split + 1) / SP) - kt0;

    // Nothing global is read or written before this (see the prelude). The runtime launches this kernel
    // without overlap (measured on an H200: overlapping the skinny kernel before it cost ~10 us per call).
    fuse_grid_wait();
    fuse_grid_release();

    if (threadIdx.x == 0) {
#pragma unroll 1
        for (int s = 0; s < S; ++s) {
            fuse_mbar_init(bars + 8u * s, 1u);
            fuse_mbar_init(bars + 8u * (S + s), (unsigned)(CW * 4 * MC));
        }
        fuse_mbar_init_fence();
    }
    // The peer's barriers must be initialised before this block's consumers arrive on them.
    if (MC == 2) fuse_cluster_sync();
    else __syncthreads();

    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        // ---- producer: one thread issues every TMA ----------------------------------------------------------
        if (CW == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0) {
#pragma unroll 1
            for (int i = 0; i < nk; ++i) {
                const int s = i % S;
                const unsigned round = (unsigned)(i / S);
                fuse_mbar_wait(bars + 8u * (S + s), (round & 1u) ^ 1u);
                const unsigned full = bars + 8u * s;
                // A block past M (the second of a cluster) loads no X: it only lends its half of the weights.
                const bool xload = m0 < M;
                fuse_mbar_expect_tx(full, (unsigned)(D * W_BYTES + (xload ? X_BYTES : 0)));
                const unsigned st = base + (unsigned)(s * STAGE);
                const int k = (kt0 + i) * 64;
                if (MC == 1) {
                    fuse_tma_load_2d(st, &p.tw0, k, n0, full);
                    if (DUAL) fuse_tma_load_2d(st + W_BYTES, &p.tw1, k, n0, full);
                } else {
                    const unsigned half = rank * (W_BYTES / 2);
                    const int row = n0 + (int)rank * (BN / 2);
                    // Into both blocks of the cluster (mask 0b11), each loading its half of the tile.
                    fuse_tma_load_2d_multicast(st + half, &p.tw0, k, row, full, 3);
                    if (DUAL) fuse_tma_load_2d_multicast(st + W_BYTES + half, &p.tw1, k, row, full, 3);
                }
                if (xload) fuse_tma_load_2d(st + D * W_BYTES, &p.tx, k, m0, full);
            }
        }
        // Neither block of a cluster may exit while the other can still multicast into it or arrive on it.
        if (MC == 2) fuse_cluster_sync();
        return;  // the consumers synchronise among themselves only (named barrier 1)
    }

    // ---- consumers ------------------------------------------------------------------------------------------
    if (CW == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int c = wg - 1;  // this warpgroup's weight rows: n0 + 64c ..
    const int ct = threadIdx.x - 128;
    const int warp = (ct / 32) % 4, lane = ct % 32;
    float acc0[NACC], acc1[NACC];  // acc1: dual only (unused otherwise, so never allocated)
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc0[i] = acc1[i] = 0.f;

#pragma unroll 1
    for (int i = 0; i < nk; ++i) {
        const int s = i % S;
        fuse_mbar_wait(bars + 8u * s, (unsigned)(i / S) & 1u);
        const unsigned st = base + (unsigned)(s * STAGE);
        const unsigned long long a0 = fuse_wg_desc(st + (unsigned)(c * 8192));
        const unsigned long long a1 = fuse_wg_desc(st + W_BYTES + (unsigned)(c * 8192));
        const unsigned long long b = fuse_wg_desc(st + D * W_BYTES);
        fuse_wg_pin(acc0);
        if constexpr (DUAL) fuse_wg_pin(acc1);
        fuse_wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            fuse_wg_mma<DT>(acc0, a0 + 2 * kk, b + 2 * kk);
            if constexpr (DUAL) fuse_wg_mma<DT>(acc1, a1 + 2 * kk, b + 2 * kk);
        }
        fuse_wg_commit();
        fuse_wg_pin(acc0);
        if constexpr (DUAL) fuse_wg_pin(acc1);
        fuse_wg_wait<1>();  // the previous stage's wgmmas have completed: release it
        if (i > 0 && lane == 0) {
            const unsigned empty = bars + 8u * (S + (i - 1) % S);
            fuse_mbar_arrive(empty);
            if (MC == 2) fuse_mbar_arrive_remote(empty, rank ^ 1u);  // the peer's producer writes here too
        }
    }
    fuse_wg_wait<0>();
    fuse_wg_pin(acc0);
    if constexpr (DUAL) fuse_wg_pin(acc1);
    if (MC == 2) fuse_cluster_sync();

    if (SP > 1) {
        // Partial tile to the workspace as [accumulator][consumer thread]; the tile's last block sums them.
        float* part = p.gemm.ws + (long long)(tile * SP + split) * (D * NACC * CT);
#pragma unroll
        for (int i = 0; i < NACC; ++i) {
            part[i * CT + ct] = acc0[i];
            if (DUAL) part[(NACC + i) * CT + ct] = acc1[i];
        }
        __threadfence();
        asm volatile("bar.sync 1, %0;" ::"n"(CT) : "memory");
        if (ct == 0) *last_flag = atomicAdd(p.gemm.counters + tile, 1u) == (unsigned)(SP - 1);
        asm volatile("bar.sync 1, %0;" ::"n"(CT) : "memory");
        if (!*last_flag) return;
        __threadfence();
#pragma unroll
        for (int i = 0; i < NACC; ++i) {
            float s0 = 0.f, s1 = 0.f;
#pragma unroll 1
            for (int q = 0; q < SP; ++q) {
                const float* w = p.gemm.ws + (long long)(tile * SP + q) * (D * NACC * CT);
                s0 += fuse_ld_cg(w + i * CT + ct);
                if (DUAL) s1 += fuse_ld_cg(w + (NACC + i) * CT + ct);
            }
            acc0[i] = s0;
            if (DUAL) acc1[i] = s1;
        }
        if (ct == 0) p.gemm.counters[tile] = 0u;
    }

    // Stage the tile through shared memory (the ring is free once every warpgroup's wgmmas are done), then
    // write it one row per warp, lanes along the columns: stores coalesce, the row's offsets are computed
    // once, and the code stays a loop (fully unrolled per accumulator it was hundreds of KB, and slow).
    // Accumulator i = 4j + r of thread (warp, lane): weight row 16 warp + lane / 4 + 8 (r / 2) of this
    // warpgroup's 64, row of X 8j + 2 (lane % 4) + r % 2 of the block's BM. Rows are padded by 4 floats so
    // the 4 X rows one store instruction touches fall in different banks.
    constexpr int LD = BN + 4;
    static_assert(D * BM * LD * 4 <= S * STAGE, "the staged tile fits in the ring");
    float* staged = reinterpret_cast<float*>(raw + (base - raw_addr));
    asm volatile("bar.sync 1, %0;" ::"n"(CT) : "memory");
#pragma unroll
    for (int i = 0; i < NACC; ++i) {
        const int nl = 64 * c + 16 * warp + lane / 4 + 8 * ((i % 4) / 2);
        const int ml = 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
        staged[ml * LD + nl] = acc0[i];
        if (DUAL) staged[(BM + ml) * LD + nl] = acc1[i];
    }
    asm volatile("bar.sync 1, %0;" ::"n"(CT) : "memory");
#pragma unroll 1
    for (int ml = ct / 32; ml < BM && m0 + ml < M; ml += CT / 32) {
        const FuseGemmRow r = fuse_gemm_row(p.epi, m0 + ml);
#pragma unroll
        for (int nl = lane; nl < BN; nl += 32) {
            const long long n = (long long)n0 + nl;
            if (n < N) fuse_gemm_store(p.epi, r, n, staged[ml * LD + nl], DUAL ? staged[(BM + ml) * LD + nl] : 0.f);
        }
    }
}

#endif  // FUSE_WG_ONCE

#ifndef FUSE_WG_DT
#define FUSE_WG_DT 2
#endif
#ifndef FUSE_WG_BM
#define FUSE_WG_BM 128
#endif
#ifndef FUSE_WG_CW
#define FUSE_WG_CW 2
#endif
#ifndef FUSE_WG_S
#define FUSE_WG_S 4
#endif
#ifndef FUSE_WG_SP
#define FUSE_WG_SP 1
#endif
#ifndef FUSE_WG_MC
#define FUSE_WG_MC 1
#endif
// Dynamic shared memory bytes the launch must pass: the ring, the barriers and flag, and 1024 bytes of slack
// to align the ring.
#undef FUSE_WG_SMEM_BYTES
#define FUSE_WG_SMEM_BYTES \
    (FUSE_WG_S * 128 * ((1 + FUSE_WGMMA_DUAL) * 64 * FUSE_WG_CW + FUSE_WG_BM) + 16 * FUSE_WG_S + 16 + 1024)

extern "C" __global__ void __launch_bounds__(128 * (1 + FUSE_WG_CW), 1) FUSE_WGMMA_NAME(const __grid_constant__ FuseWgmmaParams p) {
    extern __shared__ __align__(1024) unsigned char fuse_wg_dsmem[];
    unsigned fuse_wg_dsize;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(fuse_wg_dsize));
    if (fuse_wg_dsize < (unsigned)(FUSE_WG_SMEM_BYTES)) __trap();
    fuse_wg_body<FUSE_WG_BM, FUSE_WG_CW, FUSE_WG_S, FUSE_WGMMA_DUAL, FUSE_WG_DT, FUSE_WG_SP, FUSE_WG_MC>(p, fuse_wg_dsmem);
}
