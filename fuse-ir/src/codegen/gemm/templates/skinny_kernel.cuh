// ---------------------------------------------------------------------------------------------------------
// skinny_kernel.cuh: the skinny GEMM's kernel, after skinny.cuh (its contract, defines and helpers): the body
// (each warp's cp.async weight ring, X from registers or a shared ring, the mma main loop, the fixed-order
// K reduction, split-K partials, the epilogue calls) and the extern "C" entry of the config the defines pick.
// ---------------------------------------------------------------------------------------------------------

#ifndef FUSE_SK_KERNEL_ONCE
#define FUSE_SK_KERNEL_ONCE

template <int MT, int NT, int KW, int S, int DUAL, int DT, int PF, int XS, int U, int SP, int XR>
__device__ __forceinline__ void fuse_sk_body(const FuseSkinnyParams& p, FuseSkV4* smem, bool first_wave) {
    constexpr int D = DUAL ? 2 : 1;
    constexpr int L = 2 * D * MT;     // 16-byte weight loads per thread per chunk
    constexpr int NG = 8 / KW;        // warp groups along n
    constexpr int BN = 16 * MT * NG;  // columns per block
    constexpr int BM = 8 * NT;        // rows per block
    static_assert(8 % KW == 0, "FUSE_SK_KW must divide 8");
    static_assert(S >= 2, "FUSE_SK_S must be >= 2");
    static_assert(MT >= 1 && NT >= 1 && U >= 1 && SP >= 1, "FUSE_SK_MT, NT, U and SP must be >= 1");
    constexpr int CW = 32 * U;  // chunk width in k
    FuseSkV4* const xring = smem + 8 * S * U * L * 32;  // XS, or XR: after the weight ring
    float(*red)[D][MT][4][32] = reinterpret_cast<float(*)[D][MT][4][32]>(smem);

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int kw = warp % KW, ng = warp / KW;

    const long long M = p.gemm.m, N = p.gemm.n, K = p.gemm.k;
    const unsigned mblocks = (unsigned)((M + BM - 1) / BM);
    const unsigned tile = FUSE_GEMM_BLOCK(p.gemm) / SP, split = FUSE_GEMM_BLOCK(p.gemm) % SP;
    const unsigned mb = tile % mblocks, nb = tile / mblocks;
    const long long m0 = (long long)mb * BM;
    const long long nblk = (long long)nb * BN;
    const long long n0 = nblk + (long long)ng * 16 * MT;  // first weight row of this warp
    const bool wact = n0 < N;                             // this warp has weight rows
    // This warp's chunks: global 32-wide chunk q = c * KW + kw, c = 0 .. nch-1. With XS the NG warps of the same
    // kw share the X ring, so inactive warps (n0 >= N) step along too, and every warp of the block takes the
    // same `steps` (those of kw = 0, which has the most chunks), one block-wide barrier each (see below).
    // This block's k chunks: [q0, q0 + T) of all of them (all when SP = 1).
    const long long chunks = (K + CW - 1) / CW;
    const long long q0 = chunks * split / SP;
    const long long T = chunks * (split + 1) / SP - q0;
    const int nch = ((XS || wact) && T > kw) ? (int)((T - kw + KW - 1) / KW) : 0;
    const int steps = XS ? (int)((T + KW - 1) / KW) : nch;
    const long long koff = (q0 + kw) * CW + 8 * U * t;  // + 8u for piece u
    const unsigned short* wp[D][MT][2];
#pragma unroll
    for (int d = 0; d < D; ++d) {
        const unsigned short* wb = (const unsigned short*)(d == 0 ? p.gemm.w0 : p.gemm.w1);
        const long long ldw = d == 0 ? p.gemm.ldw0 : p.gemm.ldw1;
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                long long n = n0 + 16 * i + 8 * h + g;
                n = n < N ? n : N - 1;  // clamp: rows past N are computed, never stored
                wp[d][i][h] = wb + n * ldw + koff;
            }
    }
    const unsigned ring = fuse_smem_addr(smem + (warp * S * U * L) * 32 + lane);
    // stage s, piece u, load l of this thread: ring + ((s * U + u) * L + l) * 512
    auto issue_w = [&](int c) {
        const long long k = (long long)c * (CW * KW);  // + koff in the pointers
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const bool kok = k + koff + 8 * u < K;
            const unsigned nbytes = kok ? 16u : 0u;
            const long long ko = kok ? k + 8 * u : 0;
            const unsigned dst = ring + (unsigned)(((c % S) * U + u) * L) * 512u;
#pragma unroll
            for (int d = 0; d < D; ++d)
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        fuse_cp_async16<PF>(dst + (unsigned)(((d * MT + i) * 2 + h) * 512), wp[d][i][h] + ko, nbytes);
        }
    };
    // With FUSE_GEMM_EARLY_W (the kernel before this one does not write the weights) and without X staging
    // (which uses the ring first), the first S-1 chunks are copied into the ring before the wait below, so
    // that their DRAM latency overlaps that kernel's tail. An in-kernel prologue then keeps its partials in
    // each warp's last stage, which the main loop fills only after it.
#if !FUSE_GEMM_EARLY_W
    constexpr bool early = false;
#else
    constexpr bool early = !XS;
#endif
    if (early) {
#pragma unroll
        for (int s = 0; s < S - 1; ++s) {
            if (s < nch) issue_w(s);
            fuse_cp_async_commit();
        }
    }
    {
        // The blocks of the first wave send this warp's first S-1 weight chunks (what the ring loads first)
        // towards L2 before waiting for the kernel before this one (programmatic dependent launch, see the
        // prelude's fuse_grid_wait): a launch that overlaps it streams them while that kernel's last blocks
        // leave DRAM idle. (Measured on an H200: 8 chunks from every block made the dual kernel 18% slower.)
        // With the in-kernel prologue every block does it: the row pass holds up the main loop. So does every
        // task of a one-launch step (FUSE_TASK): each starts, and prefetches, as its block comes free.
        constexpr int PD = S - 1;
#if FUSE_GEMM_PRO || defined(FUSE_TASK)
        constexpr bool every_block = true;
#else
        constexpr bool every_block = false;
#endif
        const long long chunks = (K + 32 * U - 1) / (32 * U);
        const long long k0 = (chunks * split / SP + kw) * (32 * U) + 8 * U * t;
        if (!early && wact && (first_wave || every_block)) {
#pragma unroll
            for (int s = 0; s < PD; ++s) {
                const long long k = k0 + (long long)s * (32 * U * KW);
                if (k >= K) break;
#pragma unroll
                for (int d = 0; d < D; ++d)
#pragma unroll
                    for (int i = 0; i < 2 * MT; ++i) {
                        const long long n = n0 + 8 * i + g;
                        const unsigned short* w = (const unsigned short*)(d == 0 ? p.gemm.w0 : p.gemm.w1);
                        const long long ldw = d == 0 ? p.gemm.ldw0 : p.gemm.ldw1;
                        if (n < N) asm volatile("prefetch.global.L2 [%0];" ::"l"(w + n * ldw + k));
                    }
            }
        }
    }
#if FUSE_GEMM_PRO
    // The scaled form (the generated code's FUSE_GEMM_PRO_CAN_SCALE: X = s * h, s one value a row): h is
    // streamed from the start of the main loop, the reductions fold over what each thread loads, and s
    // multiplies the row's sums before the epilogue: no pass over the rows first. For one 8-row X tile
    // whose row the whole block's K is split over (KW = 8, NT = 1, no X staging, no K split across blocks),
    // and where s's other inputs are constant along every row of the block (checked here, the same answer
    // in every thread). bf16 only: h is rounded to the element type unnormalised, which f16's range (65504)
    // may not hold where s would have scaled it down. The check and the row's offsets read only the
    // arguments, never what the kernel before writes: before the grid wait, so that they overlap it.
    FuseProRow pro_row;
#if defined(FUSE_GEMM_PRO_CAN_SCALE)
    bool pro_scaled = DT == 2 && KW == 8 && NT == 1 && !XS && SP == 1;
    if (pro_scaled) {
        fuse_gemm_pro_offsets(p.epi, m0 + g < M ? m0 + g : M - 1, pro_row);
        FuseProRow first;
        fuse_gemm_pro_offsets(p.epi, m0, first);
        pro_scaled = fuse_gemm_pro_can_scale(first) && fuse_gemm_pro_can_scale(pro_row);
        pro_scaled = __syncthreads_and(pro_scaled);
    }
#else
    constexpr bool pro_scaled = false;
#endif
#endif
    fuse_grid_wait();
    fuse_grid_release();
#if FUSE_GEMM_PRO
    static_assert(BM <= FUSE_GEMM_PRO_ROWS, "the in-kernel prologue holds FUSE_GEMM_PRO_ROWS rows");
    // The weight ring holds the row pass's partial sums (8 x 256 floats) before the main loop: from its start,
    // or, when its first chunks were copied early, row r in warp r's last stage (S - 1, which the main loop
    // fills only after this pass; a stage slot of one warp holds U * L * 32 16-byte vectors, >= 256 floats).
    static_assert(FUSE_GEMM_PRO_ROWS * 256 * 4 <= 512 * S * U * 16 * (1 + DUAL) * MT, "the ring holds the partials");
    static_assert(!early || (FUSE_GEMM_PRO_ROWS <= 8 && L * 32 * 4 >= 256), "a warp's last stage holds a row's partials");
#if defined(FUSE_GEMM_PRO_CAN_SCALE)
    float pro_red[FUSE_GEMM_PRO_REDUCTIONS];
    fuse_gemm_pro_red_init(pro_red);
#endif
    if (!pro_scaled) {
        float* const part = reinterpret_cast<float*>(early ? smem + (S - 1) * U * L * 32 : smem);
        fuse_gemm_pro_rows(p.epi, m0, (int)(M - m0 < BM ? M - m0 : BM), K, part, early ? S * U * L * 32 * 4 : 256);
        __syncthreads();
        // This thread's X row (NT = 1 here): its offsets and narrow values stay in registers for the main loop.
        pro_row = fuse_pro_row[g];
    }
#endif

    FUSE_TASK_MARK(0);  // past the wait and the in-kernel prologue's set-up: the main loop starts
    float acc[D][MT][NT][4];
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[d][i][j][r] = 0.f;

    if (steps > 0) {
        auto read_w = [&](int c, int u, FuseSkV4 (&wv)[D][MT][2]) {
            const FuseSkV4* slot = smem + ((warp * S + c % S) * U + u) * L * 32 + lane;
#pragma unroll
            for (int d = 0; d < D; ++d)
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) wv[d][i][h] = slot[((d * MT + i) * 2 + h) * 32];
        };
        if (XS) {
            // ---- X staged in shared memory, shared by the NG warps of this kw --------------------------------
            // X ring slot (kw, s, j): 32 lanes x 16 B; lane (g, t) holds X row m0 + 8j + g, k 8t .. 8t+7 of the chunk.
            // Warp ng copies the tiles j with j % NG == ng.
            const unsigned short* xp[(NT + NG - 1) / NG];
            bool xok[(NT + NG - 1) / NG];
#pragma unroll
            for (int u = 0; u < (NT + NG - 1) / NG; ++u) {
                const int j = u * NG + ng;
                long long m = m0 + 8 * j + g;
                xok[u] = j < NT && m < M;
                m = m < M ? m : M - 1;
                xp[u] = (const unsigned short*)p.gemm.x + m * p.gemm.lda + koff;
            }
            // X ring slot (kw, s, u, j) at ((kw * S + s) * U + u) * NT + j.
            const unsigned xr = fuse_smem_addr(xring + (kw * S * U * NT) * 32 + lane);
            auto issue = [&](int c) {
                if (wact) issue_w(c);
                const long long k = (long long)c * (CW * KW);
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const bool kok = k + koff + 8 * u < K;
                    const long long ko = kok ? k + 8 * u : 0;
                    const unsigned dst = xr + (unsigned)(((c % S) * U + u) * NT) * 512u;
#pragma unroll
                    for (int v = 0; v < (NT + NG - 1) / NG; ++v) {
                        const int j = v * NG + ng;
                        if (j < NT)
                            fuse_cp_async16<0>(dst + (unsigned)(j * 512), xp[v] + ko, (kok && xok[v]) ? 16u : 0u);
                    }
                }
            };
#pragma unroll
            for (int s = 0; s < S - 1; ++s) {
                if (s < nch) issue(s);
                fuse_cp_async_commit();
            }
            // One block-wide barrier per step, not a named barrier per kw group: the groups may own different
            // chunk counts (K tail), and a group still at a named barrier while another waits at the barrier
            // after the loop is ordered on the GPU but not in compute-sanitizer racecheck's model, which then
            // reports the reduction's writes (red, over the weight ring) as racing this loop's last reads.
            // The steps past a warp's own chunks only keep it in step. Measured on the H200: see BENCHMARKS.md.
#pragma unroll 1
            for (int c = 0; c < steps; ++c) {
                fuse_cp_async_wait<S - 2>();  // this thread's copies of chunk c have landed
                // every warp's copies of chunk c are visible, and every warp is done with chunk c-1
                __syncthreads();
                if (c + S - 1 < nch) issue(c + S - 1);  // into the slot of chunk c-1
                fuse_cp_async_commit();
                if (wact && c < nch) {
#pragma unroll
                    for (int u = 0; u < U; ++u) {
                        FuseSkV4 wv[D][MT][2];
                        read_w(c, u, wv);
                        const FuseSkV4* xs = xring + (((kw * S + c % S) * U + u) * NT) * 32 + lane;
#pragma unroll
                        for (int j = 0; j < NT; ++j) {
                            FuseSkV4 xv = xs[j * 32];
#if FUSE_GEMM_PRO
                            const long long kk = (long long)c * (CW * KW) + koff + 8 * u;
                            if (kk < K && m0 + 8 * j + g < M) xv = fuse_sk_pro8<DT>(p.epi, pro_row, kk, xv);
#endif
#pragma unroll
                            for (int d = 0; d < D; ++d)
#pragma unroll
                                for (int i = 0; i < MT; ++i)
                                    fuse_sk_mma32<DT>(acc[d][i][j], wv[d][i][0], wv[d][i][1], xv);
                        }
                    }
                }
            }
        } else {
            // ---- X from L1 / L2 into registers, one chunk ahead, or (XR) through the warp's own X ring ------
            const unsigned short* xp[NT];
            bool xok[NT];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                long long m = m0 + 8 * j + g;
                xok[j] = m < M;
                m = m < M ? m : M - 1;
                xp[j] = (const unsigned short*)p.gemm.x + m * p.gemm.lda + koff;
            }
            auto loadx = [&](int c, FuseSkV4 (&xv)[U][NT]) {
                const long long k = (long long)c * (CW * KW);
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const bool kok = k + koff + 8 * u < K;
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        if (kok && xok[j]) xv[u][j] = fuse_sk_ldx(xp[j] + k + 8 * u);
                        else xv[u][j] = FuseSkV4{0u, 0u, 0u, 0u};
                    }
                }
            };
            // XR: X ring slot (warp, s, u, j) at ((warp * S + s) * U + u) * NT + j, 32 lanes x 16 B; each lane
            // copies and reads its own fragment (as the weights: no barrier). This lane's fragment of chunk c:
            FuseSkV4* const xwarp = xring + (warp * S * U * NT) * 32 + lane;
            auto xslot = [&](int c, int u, int j) { return (((c % S) * U + u) * NT + j) * 32; };
            const unsigned xw = fuse_smem_addr(xwarp);
            auto issue_x = [&](int c) {
                const long long k = (long long)c * (CW * KW);
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const bool kok = k + koff + 8 * u < K;
                    const long long ko = kok ? k + 8 * u : 0;
#pragma unroll
                    for (int j = 0; j < NT; ++j)
                        fuse_cp_async16<0>(xw + (unsigned)xslot(c, u, j) * 16u, xp[j] + ko, (kok && xok[j]) ? 16u : 0u);
                }
            };
            if (!early) {
#pragma unroll
                for (int s = 0; s < S - 1; ++s) {
                    if (s < nch) {
                        issue_w(s);
                        if (XR) issue_x(s);
                    }
                    fuse_cp_async_commit();
                }
            } else if (XR) {
                // The weights' first chunks were copied before the grid wait; X's (written by the kernel before)
                // only now, all in one group, waited for here: one round trip for X's first S-1 chunks, and
                // from here on chunk c's copies are in the group committed S-1 iterations before it, as without
                // the early copies.
#pragma unroll
                for (int s = 0; s < S - 1; ++s)
                    if (s < nch) issue_x(s);
                fuse_cp_async_commit();
                fuse_cp_async_wait<0>();
            }
            FuseSkV4 xq[U][NT];
            if (!XR) loadx(0, xq);
#pragma unroll 1
            for (int c = 0; c < nch; ++c) {
                if (c + S - 1 < nch) {
                    issue_w(c + S - 1);  // into the slot of chunk c-1, which this thread has read
                    if (XR) issue_x(c + S - 1);
                }
                fuse_cp_async_commit();
                FuseSkV4 xc[U][NT];
                if (XR) {
                    fuse_cp_async_wait<S - 1>();  // chunk c's weights and X have landed (this thread's copies)
#pragma unroll
                    for (int u = 0; u < U; ++u)
#pragma unroll
                        for (int j = 0; j < NT; ++j) xc[u][j] = xwarp[xslot(c, u, j)];
                } else {
#pragma unroll
                    for (int u = 0; u < U; ++u)
#pragma unroll
                        for (int j = 0; j < NT; ++j) xc[u][j] = xq[u][j];
                    loadx(c + 1, xq);
                }
#if FUSE_GEMM_PRO
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const long long kk = (long long)c * (CW * KW) + koff + 8 * u;
#pragma unroll
                    for (int j = 0; j < NT; ++j)
                        if (kk < K && xok[j]) {
#if defined(FUSE_GEMM_PRO_CAN_SCALE)
                            if (pro_scaled) xc[u][j] = fuse_sk_pro8_scaled<DT>(p.epi, pro_row, kk, xc[u][j], pro_red);
                            else
#endif
                            xc[u][j] = fuse_sk_pro8<DT>(p.epi, pro_row, kk, xc[u][j]);
                        }
                }
#endif
                if (!XR) fuse_cp_async_wait<S - 1>();  // chunk c has landed (each thread reads only what it copied itself)
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    FuseSkV4 wv[D][MT][2];
                    read_w(c, u, wv);
#pragma unroll
                    for (int d = 0; d < D; ++d)
#pragma unroll
                        for (int i = 0; i < MT; ++i)
#pragma unroll
                            for (int j = 0; j < NT; ++j)
                                fuse_sk_mma32<DT>(acc[d][i][j], wv[d][i][0], wv[d][i][1], xc[u][j]);
                }
                if (c == 0) FUSE_TASK_MARK(1);  // thread 0's first chunk is done (its X and weights had landed)
            }
        }
        fuse_cp_async_wait<0>();
    }
#if FUSE_GEMM_PRO && defined(FUSE_GEMM_PRO_CAN_SCALE)
    // The scaled form's reductions: the 4 lanes of an X row in a warp merged (xor 1, 2), then each warp's
    // value of each row in shared memory, merged in warp order by whoever needs a row's s (deterministic).
    __shared__ float fuse_sk_pro_red[8][8][FUSE_GEMM_PRO_REDUCTIONS];
    if (pro_scaled) {
#pragma unroll
        for (int x = 1; x <= 2; x <<= 1) {
            float other[FUSE_GEMM_PRO_REDUCTIONS];
#pragma unroll
            for (int q = 0; q < FUSE_GEMM_PRO_REDUCTIONS; ++q) other[q] = __shfl_xor_sync(0xffffffffu, pro_red[q], x);
            fuse_gemm_pro_red_merge(pro_red, other);
        }
        if ((lane & 3) == 0) {
#pragma unroll
            for (int q = 0; q < FUSE_GEMM_PRO_REDUCTIONS; ++q) fuse_sk_pro_red[warp][g][q] = pro_red[q];
        }
    }
#endif
    __syncthreads();  // the ring is reused for the reduction
#if FUSE_GEMM_PRO && defined(FUSE_GEMM_PRO_CAN_SCALE)
    // Each row's s, by one thread a row from every warp's reductions in warp order, ready for the epilogue
    // after the barrier below (the X tile's 8 rows: NT = 1).
    __shared__ float fuse_sk_pro_scale[8];
    if (pro_scaled && tid < 8 && m0 + tid < M) {
        float total[FUSE_GEMM_PRO_REDUCTIONS];
        fuse_gemm_pro_red_warps(fuse_sk_pro_red, tid, total);
        FuseProRow row;
        fuse_gemm_pro_offsets(p.epi, m0 + tid, row);
        fuse_sk_pro_scale[tid] = fuse_gemm_pro_scale(p.epi, row, K, total);
    }
#endif
    FUSE_TASK_MARK(2);  // the main loop is done

    // Reduce the KW partial sums of each n-group through shared memory (fixed order: deterministic), one 8-row
    // X tile at a time, and call the epilogue with consecutive threads on consecutive columns.
    // Accumulator layout (m16n8 C fragment): reg r of lane (g, t) holds tile row (= n) g + 8*(r>>1),
    // tile column (= m) 2t + (r&1).
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        if (j > 0) __syncthreads();
#pragma unroll
        for (int d = 0; d < D; ++d)
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int r = 0; r < 4; ++r) red[warp][d][i][r][lane] = acc[d][i][j][r];
        __syncthreads();
        for (int e = tid; e < 8 * BN; e += 256) {
            const int c = e % BN, rr = e / BN;  // block-local column (n) and row (m) within this X tile
            const long long m = m0 + 8 * j + rr, n = nblk + c;
            if (m < M && n < N) {
                const int grp = c / (16 * MT), i = (c / 16) % MT, nn = c % 16;
                const int reg = ((nn >> 3) << 1) | (rr & 1);
                const int ln = (nn & 7) * 4 + (rr >> 1);
                float s0 = 0.f, s1 = 0.f;
#pragma unroll
                for (int w = 0; w < KW; ++w) {
                    s0 += red[grp * KW + w][0][i][reg][ln];
                    if (DUAL) s1 += red[grp * KW + w][D - 1][i][reg][ln];
                }
#if FUSE_GEMM_PRO && defined(FUSE_GEMM_PRO_CAN_SCALE)
                if (pro_scaled) {
                    s0 *= fuse_sk_pro_scale[rr];  // X row rr of the only X tile
                    s1 *= fuse_sk_pro_scale[rr];
                }
#endif
                if (SP == 1) {
                    fuse_gemm_epilogue(p.epi, m, n, s0, DUAL ? s1 : 0.f);
                } else {
                    float* w = p.gemm.ws + ((long long)FUSE_GEMM_BLOCK(p.gemm) * (BM * BN) + (8 * j + rr) * BN + c) * D;
                    w[0] = s0;
                    if (DUAL) w[1] = s1;
                }
            }
        }
    }
    if (SP > 1) {
        // The last of the tile's SP blocks to get here sums the partials in split order and runs the epilogue.
        __shared__ unsigned fuse_sk_last;
        __threadfence();
        __syncthreads();
        if (tid == 0) fuse_sk_last = atomicAdd(p.gemm.counters + tile, 1u) == SP - 1;
        __syncthreads();
        if (!fuse_sk_last) return;
        __threadfence();
        for (int e = tid; e < BM * BN; e += 256) {
            const int c = e % BN, r = e / BN;
            const long long m = m0 + r, n = nblk + c;
            if (m < M && n < N) {
                float s0 = 0.f, s1 = 0.f;
#pragma unroll
                for (int q = 0; q < SP; ++q) {
                    const float* w = p.gemm.ws + ((long long)(tile * SP + q) * (BM * BN) + e) * D;
                    s0 += fuse_ld_cg(w);
                    if (DUAL) s1 += fuse_ld_cg(w + 1);
                }
                fuse_gemm_epilogue(p.epi, m, n, s0, DUAL ? s1 : 0.f);
            }
        }
        if (tid == 0) p.gemm.counters[tile] = 0u;
    }
}

#endif  // FUSE_SK_KERNEL_ONCE

#ifndef FUSE_SK_DT
#define FUSE_SK_DT 2
#endif
#ifndef FUSE_SK_MT
#define FUSE_SK_MT 1
#endif
#ifndef FUSE_SK_NT
#define FUSE_SK_NT 1
#endif
#ifndef FUSE_SK_KW
#define FUSE_SK_KW 8
#endif
#ifndef FUSE_SK_S
#define FUSE_SK_S 4
#endif
#ifndef FUSE_SK_PF
#define FUSE_SK_PF 1
#endif
#ifndef FUSE_SK_XS
#define FUSE_SK_XS 0
#endif
#ifndef FUSE_SK_U
#define FUSE_SK_U 1
#endif
#ifndef FUSE_SK_MINB
#define FUSE_SK_MINB 3
#endif
#ifndef FUSE_SK_SP
#define FUSE_SK_SP 1
#endif
#ifndef FUSE_SK_XR
#define FUSE_SK_XR 0
#endif
// X through each warp's own ring: without X staging, for at most 2 X tiles (see skinny.cuh).
#undef FUSE_SK_XR_ON
#define FUSE_SK_XR_ON (FUSE_SK_XR && !FUSE_SK_XS && FUSE_SK_NT <= 2)
// Dynamic shared memory bytes the launch must pass (and the kernel's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
#undef FUSE_SK_SMEM_BYTES
#define FUSE_SK_SMEM_BYTES \
    (512 * FUSE_SK_S * FUSE_SK_U *                                                                              \
     (16 * (1 + FUSE_SKINNY_DUAL) * FUSE_SK_MT + (FUSE_SK_XS ? FUSE_SK_KW * FUSE_SK_NT : FUSE_SK_XR_ON ? 8 * FUSE_SK_NT : 0)))

FUSE_KERNEL(256, FUSE_SK_MINB) FUSE_SKINNY_NAME(FUSE_KERNEL_PARAM(FuseSkinnyParams) fuse_params) {
    FUSE_GEMM_PARAMS(FuseSkinnyParams, p, fuse_params);
    extern __shared__ FuseSkV4 fuse_sk_dsmem[];
    // A launch with less dynamic shared memory than the ring needs would corrupt it silently: stop instead.
    unsigned fuse_sk_dsize;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(fuse_sk_dsize));
    if (fuse_sk_dsize < (unsigned)(FUSE_SK_SMEM_BYTES)) __trap();
    unsigned fuse_sk_nsm;
    asm("mov.u32 %0, %%nsmid;" : "=r"(fuse_sk_nsm));
    fuse_sk_body<FUSE_SK_MT, FUSE_SK_NT, FUSE_SK_KW, FUSE_SK_S, FUSE_SKINNY_DUAL, FUSE_SK_DT, FUSE_SK_PF,
                 FUSE_SK_XS, FUSE_SK_U, FUSE_SK_SP, FUSE_SK_XR_ON>(p, fuse_sk_dsmem, blockIdx.x < fuse_sk_nsm * FUSE_SK_MINB);
}

#if defined(FUSE_TASK) && !defined(FUSE_GEMM_PRODUCTS)
// As a task of a one-launch step built with FUSE_STEP_PREFETCH: the weight bytes block `block` of this launch
// reads (its columns' rows over its split of K), fetched into L2 by the step while this step block runs the
// task before it. Found by argument-dependent lookup (one_launch.cuh's fuse_task_prefetch).
__device__ __forceinline__ void fuse_task_prefetch(const FuseSkinnyParams& p, unsigned block, unsigned) {
    constexpr long long BN = 16 * FUSE_SK_MT * (8 / FUSE_SK_KW), BM = 8 * FUSE_SK_NT, CW = 32 * FUSE_SK_U;
    const long long N = p.gemm.n, K = p.gemm.k;
    const long long mblocks = (p.gemm.m + BM - 1) / BM;
    const long long tile = block / FUSE_SK_SP, split = block % FUSE_SK_SP;
    if (tile % mblocks != 0) return;  // the blocks of one column tile read the same weights: the first fetches
    const long long n0 = tile / mblocks * BN, cols = N - n0 < BN ? N - n0 : BN;  // weight rows of each weight
    const long long chunks = (K + CW - 1) / CW, k0 = chunks * split / FUSE_SK_SP * CW;
    const long long k_end = chunks * (split + 1) / FUSE_SK_SP * CW, k1 = k_end < K ? k_end : K;
    if (cols <= 0 || k1 <= k0) return;
    const long long lines = ((k1 - k0) * 2 + 127) / 128 + 1;  // + 1: a row need not start at a line
    for (long long i = threadIdx.x; i < (1 + FUSE_SKINNY_DUAL) * cols * lines; i += blockDim.x) {
        const long long r = i / lines, line = i % lines, d = r / cols, n = n0 + r % cols;
        const unsigned short* w = (const unsigned short*)(d == 0 ? p.gemm.w0 : p.gemm.w1) + n * (d == 0 ? p.gemm.ldw0 : p.gemm.ldw1);
        const long long k = k0 + line * 64 < k1 ? k0 + line * 64 : k1 - 1;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(w + k));
    }
}
#endif
