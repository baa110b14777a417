// ---------------------------------------------------------------------------------------------------------
// mma_quant.cuh: mma.cuh's tiled tensor-core GEMM for weights of quantized blocks (GGUF Q4_0 .. Q6_K, as
// stored, -DFUSE_MM_WQ=<blocks.cuh's type code>): the blocks are decoded into the tiles in shared memory,
// never written to global memory. Spliced after mma.cuh (its helpers, params and epilogue hook).
//
// MATH: mma.cuh's, W's row n starting at element n * ldw (ldw and K multiples of 256). The decoded weights
//   are rounded to DT (bf16 or f16, nearest even); with -DFUSE_MM_XF32=1 X is f32, rounded to bf16 as it is
//   loaded. The tensor cores then multiply values each within 2^-9 of themselves in bf16, well under the 4-6
//   bit weights' own error; llama.cpp's kernels round X coarser (8 bits a value, a scale per 32).
//
// HOW: every global read is a cp.async, issued S - 1 slices of 32 values ahead:
//   - X: 16-bit rows straight into an S-stage ring of A tiles (mma.cuh's layout); f32 rows into an S-stage ring
//     of raw rows (128 bytes a slice), converted one slice ahead into a 2-slot ring of A tiles;
//   - W: each weight row's blocks of 256 values (one K block, or 8 of 32: a contiguous stretch of COLB bytes),
//     copied as the 16-byte units that cover it (a Q6_K stretch starts anywhere even) into a 2-slot ring of
//     columns, issued with the X slice 4 before the column's first (so 3-7 slices ahead), and decoded one
//     slice ahead into a 2-slot ring of B tiles (blocks.cuh's fuse_q_decode8 on shared memory, each thread
//     the same 8-value chunk of 2 rows every slice).
//   Iteration kt: wait for the copies of slice kt + 1; one barrier (slice kt's tiles decoded and visible,
//   the copies of kt + 1 visible, every warp done with the slots the next copies and decodes overwrite);
//   issue slice kt + S - 1; the mma of slice kt; decode slice kt + 1.
// Requirements (the runtime checks them): mma.cuh's, K % 256 == 0, S >= 3.
// ---------------------------------------------------------------------------------------------------------

#if FUSE_MM_WQ
#ifndef FUSE_MM_XF32
#define FUSE_MM_XF32 0
#endif
// A row's stretch of 256 values, in bytes, and its slot (the 16-byte units covering it from any even start).
#define FUSE_MM_COLB (256 / fuse_q_values<FUSE_MM_WQ>() * fuse_q_bytes<FUSE_MM_WQ>())
#define FUSE_MM_COL_SLOT ((FUSE_MM_COLB + 15 + 15) / 16 * 16)
// Shared memory: the X ring (A tiles, or raw f32 rows and 2 converted A tiles), 2 columns of raw weight rows,
// 2 decoded B tiles; or the accumulators staged for the epilogue.
#define FUSE_MM_X_BYTES \
    (FUSE_MM_XF32 ? FUSE_MM_S * FUSE_MM_BM * 128 + 2 * FUSE_MM_BM * 64 : FUSE_MM_S * FUSE_MM_BM * 64)
#define FUSE_MM_W_BYTES (2 * FUSE_MM_D * FUSE_MM_BN * (FUSE_MM_COL_SLOT + 64))
#define FUSE_MM_Q_BYTES (FUSE_MM_X_BYTES + FUSE_MM_W_BYTES)
#undef FUSE_MM_SMEM_BYTES
#define FUSE_MM_SMEM_BYTES (FUSE_MM_Q_BYTES > FUSE_MM_STAGE_BYTES ? FUSE_MM_Q_BYTES : FUSE_MM_STAGE_BYTES)

// Eight values rounded to DT (nearest even), as one 16-byte row chunk of a tile.
template <int DT>
__device__ __forceinline__ uint4 fuse_mm_pack8(float a, float b, float c, float d, float e, float f, float g,
                                               float h) {
    return make_uint4(fuse_pack2_cvt<DT>(a, b), fuse_pack2_cvt<DT>(c, d), fuse_pack2_cvt<DT>(e, f),
                      fuse_pack2_cvt<DT>(g, h));
}

FUSE_KERNEL(256, 1) FUSE_MMA_NAME(FUSE_KERNEL_PARAM(FuseMmaParams) fuse_params) {
    FUSE_GEMM_PARAMS(FuseMmaParams, p, fuse_params);
    constexpr int BM = FUSE_MM_BM, BN = FUSE_MM_BN, S = FUSE_MM_S, D = FUSE_MM_D, DT = FUSE_MM_DT;
    constexpr int WQ = FUSE_MM_WQ, XF32 = FUSE_MM_XF32;
    constexpr int MI = BM / 32, NI = BN / 32;
    constexpr int QB = fuse_q_values<WQ>(), QBYTES = fuse_q_bytes<WQ>();
    constexpr int COLB = FUSE_MM_COLB, SLOT = FUSE_MM_COL_SLOT, UNITS = SLOT / 16;
    constexpr int WROWS = D * BN;  // weight rows of a tile
    // S <= 6: a column's copy (with the X slice 4 before its first) must not overwrite the column before it.
    static_assert(BM % 32 == 0 && BN % 64 == 0 && NI % 2 == 0 && S >= 3 && S <= 6, "FUSE_MM_BM/BN/S");
    static_assert(WROWS * 4 % 256 == 0 && BM * 4 % 256 == 0, "whole chunks a thread");
    extern __shared__ __align__(128) unsigned char fuse_mm_smem[];
    long long m0, n0;
    fuse_mm_begin<BM, BN>(p, FUSE_MM_SMEM_BYTES, m0, n0);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 1, wn = warp >> 1;
    const long long M = p.gemm.m, N = p.gemm.n, K = p.gemm.k;
    const long long ldw[2] = {p.gemm.ldw0, p.gemm.ldw1};
    const unsigned char* wbase[2] = {(const unsigned char*)p.gemm.w0, (const unsigned char*)p.gemm.w1};
    // Regions: X ring (S slots), [converted A tiles (2 slots)], raw columns (2), decoded B tiles (2).
    unsigned char* const xring = fuse_mm_smem;
    unsigned char* const xconv = fuse_mm_smem + S * BM * 128;  // f32 X only
    unsigned char* const wraw = fuse_mm_smem + FUSE_MM_X_BYTES;
    unsigned char* const wdec = wraw + 2 * WROWS * SLOT;
    const unsigned smem = fuse_smem_addr(fuse_mm_smem);
    const unsigned xring_at = smem, xconv_at = smem + S * BM * 128, wraw_at = smem + FUSE_MM_X_BYTES;
    const unsigned wdec_at = wraw_at + 2 * WROWS * SLOT;

    // Weight row r of the tile (0 .. WROWS - 1): its first byte (null past N).
    auto weight_row = [&](int r) -> const unsigned char* {
        const int j = r / BN;
        const long long n = n0 + r % BN;
        return n < N ? wbase[j] + (n * ldw[j] / QB) * QBYTES : nullptr;
    };
    // The copies of slice g (X) and, with the X slice 4 before its first, of column (g + 4) / 8 (W).
    const long long slices = K / 32, columns = K / 256;
    auto issue = [&](long long g) {
        if (g < slices) {
            const long long k0 = g * 32;
            if constexpr (XF32) {
                const unsigned base = xring_at + (unsigned)((g % S) * BM * 128);
                for (int i = tid; i < BM * 8; i += 256) {
                    const int row = i >> 3, unit = i & 7;
                    const long long m = m0 + row;
                    const float* src = (const float*)p.gemm.x + (m < M ? m * p.gemm.lda + k0 + unit * 4 : 0);
                    fuse_cp_async16<1>(base + row * 128 + unit * 16, src, m < M ? 16u : 0u);
                }
            } else {
                const unsigned base = xring_at + (unsigned)((g % S) * BM * 64);
                for (int i = tid; i < BM * 4; i += 256) {
                    const int row = i >> 2, chunk = i & 3;
                    const long long m = m0 + row;
                    const unsigned short* src =
                        (const unsigned short*)p.gemm.x + (m < M ? m * p.gemm.lda + k0 + chunk * 8 : 0);
                    fuse_cp_async16<1>(base + fuse_mm_at(row, chunk), src, m < M ? 16u : 0u);
                }
            }
        }
        const long long c = g == 0 ? 0 : ((g + 4) % 8 == 0 ? (g + 4) / 8 : -1);
        if (c >= 0 && c < columns) {
            const unsigned base = wraw_at + (unsigned)((c & 1) * WROWS * SLOT);
            for (int i = tid; i < WROWS * UNITS; i += 256) {
                const int r = i / UNITS, u = i % UNITS;
                const unsigned char* row = weight_row(r);
                if (row == nullptr) continue;
                const unsigned char* from = row + c * COLB;
                const int shift = (int)((unsigned long long)from & 15);
                if (u * 16 < shift + COLB) fuse_cp_async16<1>(base + r * SLOT + u * 16, from - shift + u * 16, 16u);
            }
        }
    };

    // This thread's chunk (8 values) of the rows it decodes and converts: rows tid / 4 + 64 i.
    const int chunk = tid & 3;
    constexpr int WITEMS = WROWS * 4 / 256, XITEMS = BM * 4 / 256;
    const unsigned char* wrow[WITEMS];
#pragma unroll
    for (int i = 0; i < WITEMS; ++i) wrow[i] = weight_row((tid >> 2) + 64 * i);
    // Slice g's B tile (and with f32 X its A tile) into slot g % 2, from the raw copies.
    auto decode = [&](long long g) {
        const long long c = g / 8;
        const int off = (int)(g % 8) * 32 + chunk * 8;  // in the column's 256 values
        unsigned char* const dec = wdec + (g & 1) * WROWS * 64;
#pragma unroll
        for (int i = 0; i < WITEMS; ++i) {
            const int r = (tid >> 2) + 64 * i;
            float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            if (wrow[i] != nullptr) {
                const int shift = (int)((unsigned long long)(wrow[i] + c * COLB) & 15);
                fuse_q_decode8<WQ>(wraw + (c & 1) * WROWS * SLOT + r * SLOT + shift, off, v);
            }
            const uint4 packed = fuse_mm_pack8<DT>(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
            *(uint4*)(dec + fuse_mm_at(r, chunk)) = packed;
        }
        if constexpr (XF32) {
            const unsigned char* raw = xring + (g % S) * BM * 128;
            unsigned char* const conv = xconv + (g & 1) * BM * 64;
#pragma unroll
            for (int i = 0; i < XITEMS; ++i) {
                const int row = (tid >> 2) + 64 * i;
                const float4 a = *(const float4*)(raw + row * 128 + chunk * 32);
                const float4 b = *(const float4*)(raw + row * 128 + chunk * 32 + 16);
                *(uint4*)(conv + fuse_mm_at(row, chunk)) = fuse_mm_pack8<DT>(a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
            }
        }
    };

    float acc[D][MI][NI][4];
    fuse_mm_zero(acc);

#pragma unroll
    for (int g = 0; g < S - 1; ++g) {
        issue(g);
        fuse_cp_async_commit();
    }
    fuse_cp_async_wait<S - 2>();  // slice 0's copies (group 0)
    __syncthreads();
    decode(0);
#pragma unroll 1
    for (long long kt = 0; kt < slices; ++kt) {
        fuse_cp_async_wait<S - 3>();  // groups 0 .. kt + 1: the copies slice kt + 1 decodes from
        __syncthreads();
        issue(kt + S - 1);
        fuse_cp_async_commit();
        const unsigned a_at =
            XF32 ? xconv_at + (unsigned)((kt & 1) * BM * 64) : xring_at + (unsigned)((kt % S) * BM * 64);
        fuse_mm_slice<BM, BN, D, DT>(acc, a_at, wdec_at + (unsigned)((kt & 1) * WROWS * 64), wm, wn, lane);
        if (kt + 1 < slices) decode(kt + 1);
    }
    fuse_cp_async_wait<0>();
    __syncthreads();  // every region is free: stage the accumulators there
    fuse_mm_store<BM, BN, D>(p, acc, fuse_mm_smem, m0, n0);
}
#endif  // FUSE_MM_WQ
