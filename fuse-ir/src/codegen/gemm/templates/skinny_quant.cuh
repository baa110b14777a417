// ---------------------------------------------------------------------------------------------------------
// skinny_quant.cuh: the skinny GEMM for weights of quantized blocks (GGUF Q4_0 .. Q6_K, as stored): decode
// (few rows of X), the blocks streamed once and decoded in registers (CUDA cores, f32 multiply-adds), the
// same epilogue and prologue hooks as skinny.cuh. A Skinny kernel's source holds both templates; -DFUSE_SK_WQ
// picks this one (fuse-ir's skinny.rs splices them as `#if defined(FUSE_SK_WQ) <this> #else <skinny> #endif`).
//
// MATH
//   Y[m, n] = sum_k X[m, k] * W[n, k]     m < M, n < N, k < K, f32 products and sums of the decoded values.
//   X: [M, K] row-major of -DFUSE_SK_DT (0 f32, 1 f16, 2 bf16), row stride lda elements.
//   W: [N, K] of blocks of type -DFUSE_SK_WQ (blocks.cuh's FUSE_Q4_0 .. FUSE_Q6_K), row n starting at element
//   n * ldw of the tensor at w (ldw a whole number of blocks), read as `.t()`. Dual: W0 and W1, one type.
//
// CONTRACT WITH THE CODE GENERATOR: skinny.cuh's (FuseArgs, FUSE_SKINNY_NAME, FUSE_SKINNY_DUAL,
//   fuse_gemm_epilogue, FuseGemmArgs; with -DFUSE_GEMM_PRO=1 fuse_gemm_pro_rows, FuseProRow, fuse_pro_row,
//   fuse_gemm_pro8: the prologue computes X from the tensor at x as it is loaded, rounded to DT as the
//   unfused graph stores it). fuse_gemm_epilogue is called exactly once per (row < M, col < N).
//   Requirements (the runtime checks them): K % (the type's block values) == 0, ldw likewise; lda % 8 == 0
//   and x 16-byte aligned; M, N >= 1. Deterministic: a fixed order of sums.
//
// DEFINES
//   FUSE_QG_R    weight rows per warp (the block's 8 warps: 8 * R columns)                  {1, 2}
//   FUSE_QG_BM   rows of X per block (each block streams its weight rows once for them)   {1, 2, 4, 8}
// LAUNCH: 1-D grid of ceil(N / (8 R)) * ceil(M / BM) blocks (tile = nb * ceil(M / BM) + mb), 256 threads, no
//   dynamic shared memory (static: with the prologue, its 8 x 256 partial sums).
// Each lane takes a unit of 16 values of a block (blocks.cuh's fuse_q_unit: 8 whole bytes, two runs of 8), a
// warp 512 values a step: two lanes a 32-value block, 16 lanes a K-type block, so a warp's loads of a step are
// one stretch of each weight row and every byte a lane loads is used.
// ---------------------------------------------------------------------------------------------------------

#ifndef FUSE_QG_ONCE
#define FUSE_QG_ONCE
#ifndef FUSE_SK_DT
#define FUSE_SK_DT 2
#endif
#ifndef FUSE_QG_R
#define FUSE_QG_R 1
#endif
#ifndef FUSE_QG_BM
#define FUSE_QG_BM 1
#endif

struct FuseSkinnyParams {
    FuseArgs epi;
    FuseGemmArgs gemm;
};

// 8 values of X (dtype DT) from element `at` (16-byte aligned) as f32, and one value rounded to DT.
template <int DT>
__device__ __forceinline__ void fuse_qg_load_x(const void* x, long long at, float (&v)[8]) {
    if constexpr (DT == FUSE_F32) {
        const float4* p = (const float4*)((const float*)x + at);
        const float4 a = p[0], b = p[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
        const uint4 q = *(const uint4*)((const unsigned short*)x + at);
        const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = fuse_unpack<DT>((unsigned short)(w[i] & 0xffffu));
            v[2 * i + 1] = fuse_unpack<DT>((unsigned short)(w[i] >> 16));
        }
    }
}
template <int DT>
__device__ __forceinline__ float fuse_qg_round(float v) {
    if constexpr (DT == FUSE_F32) return v;
    else if constexpr (DT == FUSE_F16) return fuse_round_f16(v);
    else return fuse_round_bf16(v);
}

// The first block of weight d's row n (rows past N are the last row's: computed, never stored).
template <int Q>
__device__ __forceinline__ const unsigned char* fuse_qg_weight_row(const FuseSkinnyParams& p, int d, long long n) {
    const long long row = n < p.gemm.n ? n : p.gemm.n - 1;
    const long long ldw = d == 0 ? p.gemm.ldw0 : p.gemm.ldw1;
    return (const unsigned char*)(d == 0 ? p.gemm.w0 : p.gemm.w1) + (row * ldw / fuse_q_values<Q>()) * fuse_q_bytes<Q>();
}

// Weight row `row`'s K values toward L2, its 128-byte lines dealt over `lanes` lanes from `lane` (the first
// lane's from the row's first byte): sent before the grid wait, the whole row arrives while the kernel (or task)
// before finishes and X is staged, where the lanes' first pieces alone left the rest to the main loop's loads.
#ifndef FUSE_QG_ROW_PREFETCH
#define FUSE_QG_ROW_PREFETCH 0
#endif
// `bytes` from `at` toward L2, its 128-byte lines dealt over `threads` threads from `thread`.
__device__ __forceinline__ void fuse_qg_prefetch_lines(const unsigned char* at, long long bytes, int thread, int threads) {
    const long long head = (long long)((unsigned long long)at & 127ull);
    for (long long off = (long long)thread * 128 - head; off < bytes; off += (long long)threads * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(at + (off < 0 ? 0 : off)));
}
template <int Q>
__device__ __forceinline__ void fuse_qg_prefetch_row(const unsigned char* row, long long K, int lane, int lanes) {
    fuse_qg_prefetch_lines(row, (K / fuse_q_values<Q>()) * fuse_q_bytes<Q>(), lane, lanes);
}

// Weight rows [n0, n1) of every weight toward L2 (at most FUSE_QG_TASK_PREFETCH_BYTES in all, the runtime's:
// half the L2 over the multiprocessors, so that one product's share a block ahead fits beside the current
// one's), dealt over the step block's threads in 128-byte lines: a one-launch step's next task
// (FUSE_STEP_PREFETCH, fuse_task_prefetch below).
#ifndef FUSE_QG_TASK_PREFETCH_BYTES
#define FUSE_QG_TASK_PREFETCH_BYTES (160 * 1024)
#endif
template <int Q, int D>
__device__ __forceinline__ void fuse_qg_prefetch_rows(const FuseSkinnyParams& p, long long n0, long long n1, int threads) {
    n1 = n1 < p.gemm.n ? n1 : p.gemm.n;
    if (n1 <= n0) return;
    const long long row_bytes = (p.gemm.k / fuse_q_values<Q>()) * fuse_q_bytes<Q>(), cap = FUSE_QG_TASK_PREFETCH_BYTES / D;
#pragma unroll
    for (int d = 0; d < D; ++d) {
        const long long stride = ((d == 0 ? p.gemm.ldw0 : p.gemm.ldw1) / fuse_q_values<Q>()) * fuse_q_bytes<Q>();
        // Rows back to back (a whole tensor's): one run of lines; otherwise a run a row.
        const bool whole = stride == row_bytes;
        const long long runs = whole ? 1 : n1 - n0, run = whole ? (n1 - n0) * row_bytes : row_bytes;
        const unsigned char* const first = fuse_qg_weight_row<Q>(p, d, n0);
        for (long long r = 0; r < runs && r * run < cap; ++r)
            fuse_qg_prefetch_lines(first + r * stride, run < cap ? run : cap, (int)threadIdx.x, threads);
    }
}

// Every accumulator of every body (weights, weight rows, rows of X) to zero.
template <int D, int R, int BM>
__device__ __forceinline__ void fuse_qg_zero(float (&acc)[D][R][BM]) {
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int i = 0; i < BM; ++i) acc[d][r][i] = 0.0f;
}

// A range [first, end) of weight rows, or of sets of them (its end may pass the weights' last).
struct FuseQgRange {
    long long first, end;
};
// The weight rows column block bn reads in the f32 body (8 warps of R rows): written once for the body and for
// a one-launch step's fetch of its next task's rows (skinny_q8s.cuh's fuse_task_prefetch).
template <int R>
__device__ __forceinline__ FuseQgRange fuse_qg_block_rows(long long bn) {
    return {bn * (8 * R), (bn + 1) * (8 * R)};
}

template <int Q, int DT, int R, int BM, int DUAL>
__device__ __forceinline__ void fuse_qg_body(const FuseSkinnyParams& p) {
    constexpr int D = DUAL ? 2 : 1, B = fuse_q_values<Q>(), BYTES = fuse_q_bytes<Q>();
    static_assert(R >= 1 && BM >= 1 && R * BM <= 32, "a lane an output of the block's warp");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long M = p.gemm.m, N = p.gemm.n, K = p.gemm.k;
    const long long mblocks = (M + BM - 1) / BM;
    const long long m0 = (FUSE_GEMM_BLOCK(p.gemm) % mblocks) * BM;
    const long long n0 = fuse_qg_block_rows<R>(FUSE_GEMM_BLOCK(p.gemm) / mblocks).first + warp * R;
    const int rows = (int)(M - m0 < BM ? M - m0 : BM);
    // Each lane takes one unit (blocks.cuh: 16 values from 8 whole bytes, two runs of 8) of a block, the same
    // unit of every block it visits, so its weight pointers step by whole blocks and its scales are at the
    // same place of each block; a warp's 32 units are 512 consecutive values of a row (blocks / step blocks).
    constexpr int U = fuse_q_units<Q>(), GAP = fuse_q_run_gap<Q>();
    constexpr int STEP = (32 / U) * BYTES;
    const int u = lane % U, j = fuse_q_unit_start<Q>(u);
    const int first = (lane / U) * B;  // the lane's first block, as a value index
    const unsigned char* wp[D][R];
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
        for (int r = 0; r < R; ++r) wp[d][r] = fuse_qg_weight_row<Q>(p, d, n0 + r) + (lane / U) * BYTES;
    // Each lane's first weight bytes toward L2 while the kernel before this one finishes (programmatic
    // dependent launch): a prefetch is a hint, coherent with whatever that kernel writes.
#if FUSE_QG_ROW_PREFETCH
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
        for (int r = 0; r < R; ++r) fuse_qg_prefetch_row<Q>(fuse_qg_weight_row<Q>(p, d, n0 + r), K, lane, 32);
#else
    if (first < K) {
#pragma unroll
        for (int d = 0; d < D; ++d)
#pragma unroll
            for (int r = 0; r < R; ++r) asm volatile("prefetch.global.L2 [%0];" ::"l"(wp[d][r]));
    }
#endif
    fuse_grid_wait();
    fuse_grid_release();
#if FUSE_GEMM_PRO
    static_assert(BM <= FUSE_GEMM_PRO_ROWS, "the in-kernel prologue holds FUSE_GEMM_PRO_ROWS rows");
    __shared__ float fuse_qg_part[8 * 256];
    fuse_gemm_pro_rows(p.epi, m0, rows, K, fuse_qg_part, 256);
    __syncthreads();
#endif
    FUSE_TASK_MARK(0);  // past the wait and the in-kernel prologue's row pass: the main loop starts
    float acc[D][R][BM];
    fuse_qg_zero(acc);
    const int k_end = (int)K;
#pragma unroll 2
    for (int kb = first; kb < k_end; kb += 512) {
        // Every weight row's unit first (their loads in flight together), then each run against X.
        FuseQUnit wu[D][R];
#pragma unroll
        for (int d = 0; d < D; ++d)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                wu[d][r] = fuse_q_unit<Q>(wp[d][r], u);
                wp[d][r] += STEP;
            }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int k = kb + j + h * GAP;
            // X's 8 values of each row and their sum (for the blocks' offsets: sum of (s q + o) x = s (q . x) + o sum x).
            float xv[BM][8], xs[BM];
#pragma unroll
            for (int i = 0; i < BM; ++i) {
                const int row = i < rows ? i : rows - 1;  // rows past M repeat the last: computed, never stored
                fuse_qg_load_x<DT>(p.gemm.x, (m0 + row) * p.gemm.lda + k, xv[i]);
#if FUSE_GEMM_PRO
                fuse_gemm_pro8(p.epi, fuse_pro_row[row], k, xv[i]);
#pragma unroll
                for (int e = 0; e < 8; ++e) xv[i][e] = fuse_qg_round<DT>(xv[i][e]);
#endif
                if constexpr (fuse_q_has_offset<Q>())
                    xs[i] = ((xv[i][0] + xv[i][1]) + (xv[i][2] + xv[i][3])) + ((xv[i][4] + xv[i][5]) + (xv[i][6] + xv[i][7]));
            }
#pragma unroll
            for (int d = 0; d < D; ++d)
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    float q[8];
                    fuse_q_run_ints<Q>(wu[d][r], h, q);
                    const float scale = wu[d][r].scale[h], offset = wu[d][r].offset[h];
#pragma unroll
                    for (int i = 0; i < BM; ++i) {
                        float dot = q[0] * xv[i][0];
#pragma unroll
                        for (int e = 1; e < 8; ++e) dot = fmaf(q[e], xv[i][e], dot);
                        if constexpr (fuse_q_has_offset<Q>()) acc[d][r][i] = fmaf(offset, xs[i], acc[d][r][i]);
                        acc[d][r][i] = fmaf(scale, dot, acc[d][r][i]);
                    }
                }
        }
    }
    FUSE_TASK_MARK(2);  // the main loop is done (thread 0's units)
    // Every lane gets every sum (a fixed butterfly); lane r * BM + i stores (row m0 + i, column n0 + r).
    float out0 = 0.0f, out1 = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < BM; ++i) {
            const float s0 = fuse_warp_sum(acc[0][r][i]);
            const float s1 = DUAL ? fuse_warp_sum(acc[D - 1][r][i]) : 0.0f;
            if (lane == r * BM + i) out0 = s0, out1 = s1;
        }
    const int r = lane / BM, i = lane % BM;
    if (r < R && i < rows && n0 + r < N) fuse_gemm_epilogue(p.epi, m0 + i, n0 + r, out0, out1);
}

// The kernel's entry is skinny_q8x.cuh's (after the 8-bit body, which it may call instead).

#endif  // FUSE_QG_ONCE
