// ---------------------------------------------------------------------------------------------------------
// skinny_q8s.cuh: the 8-bit body with the weights streamed through a shared-memory ring (-DFUSE_QS_STAGES=S
// beside skinny_q8x.cuh's FUSE_QX_LANES), for decode GEMMs whose weights are many megabytes. The same contract,
// X in shared memory and arithmetic as skinny_q8x.cuh; what differs is how the weights' bytes arrive.
//
// Why: the register body keeps one piece a row in flight per lane and its blocks live a few steps (the 8B's
// gate/up: 4 steps a lane, 896 blocks in 3.4 waves), so at a quarter occupancy it waits on DRAM latency (ncu:
// DRAM 27-36% busy). Here each warp copies its rows' bytes with cp.async into a ring of S stages, S - 1 steps
// ahead of the step it computes, and the grid is one wave of blocks that each take an even share of the rows,
// so the copies of a warp's next rows overlap the arithmetic of its current ones and X is quantized once a
// block, not once per 16 rows.
//
// Work: the rows are sets of R consecutive rows; block b of nb (the blocks of this product / row blocks of X) takes the sets
// [sets * b / nb, sets * (b + 1) / nb), its warp w the w-th eighth of those, one set after another, a whole warp
// a row (the lanes on consecutive pieces of 64 values, skinny_q8x.cuh). A set's row takes ceil(P / 32) steps; a
// step's bytes of a row are 32 pieces, one stretch of the row (K types 8 blocks, 32-value types 64 blocks),
// copied whole as the aligned 16-byte units that cover it (zero-filled past the stretch, so never past the
// tensor) into a slot of FUSE_QS_SLOT bytes; the lanes then read their piece from it at the stretch's offset
// within its first unit (the same alignment as in memory: skinny_q8x.cuh's loads).
//
// With -DFUSE_QS_BULK (sm_90 and later; ignored below): lane 0 of a warp copies a step's stretches as one bulk
// copy a row, completing on the stage's mbarrier (static shared memory at namespace scope, 8 x S words),
// rather than every lane copying 16-byte units in cp.async groups: a warp's copies stop costing its lanes
// instructions, and a stage is complete when its bytes have landed, whoever issued them: so a one-launch step
// built with FUSE_STEP_PRELOAD issues a task's first stages while the task before it runs
// (fuse_task_preload below; docs/persistent-step.md). The units past a stretch are read, not zero-filled (the
// allocation's whole 16-byte units: never past it).
//
// DEFINES: skinny_q8x.cuh's (FUSE_QX_LANES 32), and FUSE_QS_STAGES S (>= 2), FUSE_QS_SLOT bytes of a slot
//   (fuse-ir's QuantSkinnyConfig computes it: the step's bytes rounded up to 16, plus 32). Requirements beyond
//   skinny_q8x.cuh's: each weight's first row 16-byte aligned and its allocation whole 16-byte units (fuse-runtime pads
//   every allocation so; the last unit is then read whole). Dynamic shared memory: BM rows of X, then
//   8 warps x S stages x (1 + DUAL) weights x R rows slots. LAUNCH: any number of blocks that is a multiple of
//   ceil(M / BM) (the host: one wave), 256 threads.
// ---------------------------------------------------------------------------------------------------------
#ifndef FUSE_QS_ONCE
#define FUSE_QS_ONCE
#if defined(FUSE_QS_BULK) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FUSE_QS_BULK_ON 1
#else
#define FUSE_QS_BULK_ON 0
#endif

// Bytes of one row's step: 32 pieces (K types 8 blocks, 32-value types 64 blocks).
template <int Q> __device__ __forceinline__ constexpr int fuse_qs_step_bytes() {
  return fuse_q_values<Q>() == 32 ? 64 * fuse_q_bytes<Q>() : 8 * fuse_q_bytes<Q>();
}

// Where a warp is in its sets: the step within the set's rows, the set (from 0), and each weight row's start.
template <int D, int R> struct FuseQsCursor {
  int step, set;
  const unsigned char* row[D][R];
};

// The sets of R weight rows column block bn of nblocks reads in this body: an even share of the weights' sets.
__device__ __forceinline__ FuseQgRange fuse_qs_block_sets(long long sets, long long bn, long long nblocks) {
  return {sets * bn / nblocks, sets * (bn + 1) / nblocks};
}

// One warp's share of a streaming body (the sets it takes, its steps, its ring) and the cursor of the step it
// copies next: what the body and a one-launch step's preload of the body's first stages (fuse_task_preload)
// compute alike.
template <int Q, int D, int R, int S, int SLOT> struct FuseQsWarp {
  static constexpr int STEP = fuse_qs_step_bytes<Q>(), STAGE = D * R * SLOT;
  long long w0, N;
  int T, spr, total, last;
  long long stride[D];  // bytes from one weight row to the next
  unsigned char* ring;  // this warp's S stages
  FuseQsCursor<D, R> in;

  // Warp `warp`'s share of column block bn of nblocks; its ring at `ring_base` (the block's rings).
  __device__ __forceinline__ FuseQsWarp(const FuseSkinnyParams& p, long long bn, long long nblocks, int warp,
                                        unsigned char* ring_base) {
    N = p.gemm.n;
    const int K = (int)p.gemm.k, P = K / 64;
    // This warp's sets [w0, w0 + T), spr steps each; a row's last step is `last` bytes.
    const FuseQgRange share = fuse_qs_block_sets((N + R - 1) / R, bn, nblocks);
    const long long b0 = share.first, b1 = share.end;
    w0 = b0 + (b1 - b0) * warp / 8;
    T = (int)(b0 + (b1 - b0) * (warp + 1) / 8 - w0);
    spr = (P + 31) / 32, total = T * spr;
    last = (K / fuse_q_values<Q>()) * fuse_q_bytes<Q>() - (spr - 1) * STEP;
#pragma unroll
    for (int d = 0; d < D; ++d) stride[d] = ((d == 0 ? p.gemm.ldw0 : p.gemm.ldw1) / fuse_q_values<Q>()) * fuse_q_bytes<Q>();
    ring = ring_base + warp * S * STAGE;
    in.step = 0, in.set = 0;
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
      for (int r = 0; r < R; ++r) in.row[d][r] = fuse_qg_weight_row<Q>(p, d, w0 * R + r);
  }
  __device__ __forceinline__ void advance(FuseQsCursor<D, R>& c) const {
    if (++c.step == spr) {
      c.step = 0, ++c.set;
#pragma unroll
      for (int d = 0; d < D; ++d)
#pragma unroll
        for (int r = 0; r < R; ++r) c.row[d][r] += R * stride[d];
    }
  }
  // Bytes of the rings of a block's 8 warps.
  static __device__ __forceinline__ constexpr unsigned block_ring() { return 8u * S * STAGE; }
  // Row r of a set exists (the last set of the weights may be short).
  __device__ __forceinline__ bool has_row(const FuseQsCursor<D, R>& c, int r) const { return (w0 + c.set) * R + r < N; }
  // Where weight d's row r of the step being copied starts: its first 16-byte unit, `head` bytes before it.
  __device__ __forceinline__ const unsigned char* stretch(int d, int r, int& head) const {
    const unsigned char* src = in.row[d][r] + in.step * STEP;
    head = (int)((unsigned long long)src & 15ull);
    return src - head;
  }
  // Step s (the one `in` is at, s < total) into its stage, then `in` moves on. With bulk copies lane 0 alone
  // issues them, completing on the stage's barrier of `bars`; otherwise each lane its 16-byte units.
  __device__ __forceinline__ void copy(int s, int lane, unsigned bars) {
    unsigned char* const stage = ring + (s % S) * STAGE;
    const int len = in.step == spr - 1 ? last : STEP;
#if FUSE_QS_BULK_ON
    if (lane == 0) {
      // A copy a row of the whole units that cover its stretch, then the barrier's one arrival with their
      // bytes: until it arrives the phase cannot complete, whatever bytes land first (a barrier's transaction
      // count may go below zero).
      const unsigned bar = bars + 8 * (s % S);
      unsigned bytes = 0;
#pragma unroll
      for (int d = 0; d < D; ++d)
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (has_row(in, r)) {
            int head;
            const unsigned char* a0 = stretch(d, r, head);
            const unsigned units = (unsigned)(head + len + 15) & ~15u;
            fuse_bulk_copy(fuse_smem_addr(stage + (d * R + r) * SLOT), a0, units, bar);
            bytes += units;
          }
      fuse_mbar_expect_tx(bar, bytes);
    }
#else
    (void)bars;
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!has_row(in, r)) continue;
        int head;
        const unsigned char* a0 = stretch(d, r, head);
        const int end = head + len;
        const unsigned dst = fuse_smem_addr(stage + (d * R + r) * SLOT);
        for (int u = lane; 16 * u < end; u += 32) {
          const int have = end - 16 * u;
          fuse_cp_async16<1>(dst + 16u * u, a0 + 16 * u, have < 16 ? (unsigned)have : 16u);
        }
      }
#endif
    advance(in);
  }
};

#if FUSE_QS_BULK_ON && defined(FUSE_QS_STAGES)
// A barrier a stage of each warp's ring: one arrival (lane 0's, with the stage's bytes) and the copies' bytes.
// At namespace scope (in a one-launch step, the task kernel's namespace), so that a step's preload arms the
// same barriers the body waits on.
__shared__ __align__(8) unsigned long long fuse_qs_bars[8][FUSE_QS_STAGES];
// Lane 0 sets up its warp's barriers (before any copy completes on them).
__device__ __forceinline__ unsigned fuse_qs_warp_bars(int warp, int lane, bool fresh) {
  const unsigned bars = fuse_smem_addr(&fuse_qs_bars[warp][0]);
  if (fresh && lane == 0) {
#pragma unroll
    for (int st = 0; st < FUSE_QS_STAGES; ++st) fuse_mbar_init(bars + 8 * st, 1);
    fuse_mbar_init_fence();
  }
  return bars;
}
#endif

// The ring's offset in dynamic shared memory where a one-launch step preloaded this task's first S - 1 stages
// (fuse_task_preload: their copies issued, their barriers armed); 0 where it did not.
#if FUSE_QS_BULK_ON && defined(FUSE_TASK) && defined(FUSE_STEP_PRELOAD)
#define FUSE_QS_PRELOADED fuse_task_ring_at
#else
#define FUSE_QS_PRELOADED 0u
#endif

template <int Q, int DT, int R, int BM, int DUAL, int S, int SLOT>
__device__ __forceinline__ void fuse_qs_body(const FuseSkinnyParams& p) {
  static_assert(fuse_qx_reads<Q>(), "a block type this body reads");
  static_assert(R * BM <= 32, "a lane an output");
  static_assert(S >= 2 && SLOT % 16 == 0 && SLOT >= fuse_qs_step_bytes<Q>() + 32, "the ring's slots");
  constexpr int D = DUAL ? 2 : 1, WORDS = fuse_qx_words<Q>(), STEP = fuse_qs_step_bytes<Q>();
  constexpr int STAGE = D * R * SLOT;  // one stage of a warp's ring
  extern __shared__ __align__(16) unsigned char fuse_qx_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long M = p.gemm.m;
  const int K = (int)p.gemm.k, P = K / 64;
  const long long mblocks = (M + BM - 1) / BM, nblocks = FUSE_GEMM_BLOCKS(p.gemm) / mblocks;
  const long long m0 = (FUSE_GEMM_BLOCK(p.gemm) % mblocks) * BM, bn = FUSE_GEMM_BLOCK(p.gemm) / mblocks;
  const int rows = (int)(M - m0 < BM ? M - m0 : BM);
  const unsigned preloaded = FUSE_QS_PRELOADED;
  FuseQsWarp<Q, D, R, S, SLOT> w(p, bn, nblocks, warp,
                                 fuse_qx_smem + (preloaded ? preloaded : BM * fuse_qx_row_bytes(K)));
  const int total = w.total;
#if FUSE_QS_BULK_ON
  static_assert(S == FUSE_QS_STAGES, "the barriers' stages");
  const unsigned bars = fuse_qs_warp_bars(warp, lane, preloaded == 0);
  __syncwarp();
#else
  const unsigned bars = 0;
#endif
  FuseQsCursor<D, R> out = w.in;  // the step being computed (w.in: the one being copied, S - 1 ahead)
  // The next step into its stage (the cp.async form commits a group each call, empty past the end: every
  // lane keeps S - 1 groups ahead).
  auto issue = [&](int s) {
    if (s < total) w.copy(s, lane, bars);
#if !FUSE_QS_BULK_ON
    fuse_cp_async_commit();
#endif
  };
  // The first S - 1 steps: already in flight where the step preloaded them (`in` moves past them), else
  // issued here; where the kernel before this one does not write the weights, while it finishes.
  auto first_stages = [&]() {
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (!preloaded) issue(s);
      else if (s < total) w.advance(w.in);
    }
  };
#if FUSE_GEMM_EARLY_W
  first_stages();
#endif
  const bool scaled = fuse_qx_scaled<DT, BM>(p, m0);
  fuse_grid_wait();
  fuse_grid_release();
#if !FUSE_GEMM_EARLY_W
  first_stages();
#endif
  fuse_qx_stage_x<Q, DT, BM>(p, m0, rows, fuse_qx_smem, scaled);
  FUSE_TASK_MARK(0);  // X is staged (8-bit, with its prologue): the stream's main loop starts
  const int xrow = (int)fuse_qx_row_bytes(K);
  float acc[D][R][BM];
  fuse_qg_zero(acc);
#pragma unroll 1
  for (int s = 0; s < total; ++s) {
    issue(s + S - 1);
#if FUSE_QS_BULK_ON
    fuse_mbar_wait(bars + 8 * (s % S), (unsigned)(s / S) & 1u);  // the stage's bytes have landed
#else
    fuse_cp_async_wait<S - 1>();  // this lane's copies of step s have landed
    __syncwarp();                 // and every lane's
#endif
    const int piece = out.step * 32 + lane;
    if (piece < P) {
      const unsigned char* const stage = w.ring + (s % S) * STAGE;
      unsigned words[D][R][WORDS];
#pragma unroll
      for (int d = 0; d < D; ++d)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int head = (int)((unsigned long long)(out.row[d][r] + out.step * STEP) & 15ull);
          if (w.has_row(out, r)) fuse_qx_fetch<Q>(stage + (d * R + r) * SLOT + head, lane, words[d][r]);
        }
#pragma unroll
      for (int i = 0; i < BM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const FuseQxHalf x = fuse_qx_x_half(fuse_qx_smem + i * xrow, K, P, piece, h);
#pragma unroll
          for (int d = 0; d < D; ++d)
#pragma unroll
            for (int r = 0; r < R; ++r)
              if (w.has_row(out, r)) fuse_qx_dot_half<Q>(fuse_qx_decode<Q>(words[d][r], piece), h, x, acc[d][r][i]);
        }
    }
    if (out.step == w.spr - 1) {
      // The set's last step: its sums, stored by lane r * BM + i, then a fresh set.
      float out0, out1;
      fuse_qx_group_sums<32, R, BM, D>(acc, lane, out0, out1);
      const int r = lane / BM, i = lane % BM;
      if (r < R && i < rows && w.has_row(out, r)) fuse_qx_epilogue(p, scaled, m0, i, (w.w0 + out.set) * R + r, out0, out1);
      fuse_qg_zero(acc);
    }
    w.advance(out);
    __syncwarp();  // every lane is done with step s's stage before step s + 1 refills it
    if (s == 0) FUSE_TASK_MARK(1);  // thread 0's first step is done (its stage had landed)
  }
#if FUSE_QS_BULK_ON
  // Every stage issued was waited for: no copy is in flight, and the barriers can end (a task's next run of
  // this kernel on the block sets them up again).
  if (lane == 0) {
#pragma unroll
    for (int st = 0; st < S; ++st) fuse_mbar_inval(bars + 8 * st);
  }
#else
  fuse_cp_async_wait<0>();
#endif
  FUSE_TASK_MARK(2);  // the stream is done (every set's epilogue run)
}

#if defined(FUSE_TASK)
// As a task of a one-launch step built with FUSE_STEP_PREFETCH: the weight rows block `block` of the launch's
// `blocks` reads (each body's share of rows), fetched into L2 by the step block while it runs the task before
// this one, so that the weights stream from DRAM while the step waits and computes, not only after its wait.
// Found by argument-dependent lookup (one_launch.cuh's fuse_task_prefetch).
__device__ __forceinline__ void fuse_task_prefetch(const FuseSkinnyParams& given, unsigned block, unsigned blocks) {
  FUSE_GEMM_TASK_PARAMS(FuseSkinnyParams, p, given, block, blocks);
  constexpr int R = FUSE_QG_R;
  const long long mblocks = (p.gemm.m + FUSE_QG_BM - 1) / FUSE_QG_BM, bn = block / mblocks;
  if (block % mblocks != 0) return;  // the row blocks of X read the same weights: the first fetches them
#if defined(FUSE_QS_STAGES)
  const FuseQgRange sets = fuse_qs_block_sets((p.gemm.n + R - 1) / R, bn, blocks / mblocks);
  const FuseQgRange rows = {sets.first * R, sets.end * R};
#elif defined(FUSE_QX_LANES)
  const FuseQgRange rows = fuse_qx_block_rows<FUSE_QX_LANES, R>(bn);
#else
  const FuseQgRange rows = fuse_qg_block_rows<R>(bn);
#endif
#if defined(FUSE_STEP_THREADS)
  fuse_qg_prefetch_rows<FUSE_SK_WQ, 1 + FUSE_SKINNY_DUAL>(p, rows.first, rows.end, FUSE_STEP_THREADS);
#else
  fuse_qg_prefetch_rows<FUSE_SK_WQ, 1 + FUSE_SKINNY_DUAL>(p, rows.first, rows.end, 256);
#endif
}
#endif

#if defined(FUSE_TASK) && defined(FUSE_STEP_PRELOAD) && defined(FUSE_QS_STAGES) && FUSE_QS_BULK_ON && FUSE_GEMM_EARLY_W
// As a task of a one-launch step built with FUSE_STEP_PRELOAD, where the weights are the host's (never
// written by a kernel): block `block` of the launch's `blocks` issues its warps' first S - 1 stages into a
// ring at or past `from` (the dynamic shared memory the task running now uses) and below `limit`, while that
// task runs; the body then finds them in flight on its barriers (FUSE_QS_PRELOADED). Returns the ring's
// place, or {0, 0} where it does not fit. Found by argument-dependent lookup (one_launch.cuh's).
__device__ __forceinline__ FuseStepPreload fuse_task_preload(const FuseSkinnyParams& given, unsigned block,
                                                             unsigned blocks, unsigned from, unsigned limit) {
  FUSE_GEMM_TASK_PARAMS(FuseSkinnyParams, p, given, block, blocks);
  constexpr int BM = FUSE_QG_BM;
  typedef FuseQsWarp<FUSE_SK_WQ, 1 + FUSE_SKINNY_DUAL, FUSE_QG_R, FUSE_QS_STAGES, FUSE_QS_SLOT> Warp;
  const unsigned x_bytes = (unsigned)(BM * fuse_qx_row_bytes((int)p.gemm.k));
  const unsigned at = ((from > x_bytes ? from : x_bytes) + 127u) & ~127u;
  if (at + Warp::block_ring() > limit) return {0u, 0u};
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (warp < 8 && lane == 0) {
    extern __shared__ __align__(16) unsigned char fuse_qx_smem[];
    const long long mblocks = (p.gemm.m + BM - 1) / BM;
    Warp w(p, block / mblocks, blocks / mblocks, warp, fuse_qx_smem + at);
    const unsigned bars = fuse_qs_warp_bars(warp, lane, true);
    for (int s = 0; s < FUSE_QS_STAGES - 1 && s < w.total; ++s) w.copy(s, lane, bars);
  }
  return {at, at + Warp::block_ring()};
}
#endif

FUSE_KERNEL(256, 1) FUSE_SKINNY_NAME(FUSE_KERNEL_PARAM(FuseSkinnyParams) fuse_params) {
  FUSE_GEMM_PARAMS(FuseSkinnyParams, p, fuse_params);
#if defined(FUSE_QS_STAGES)
  static_assert(FUSE_QX_LANES == 32, "the streaming body gives a weight row a whole warp");
  fuse_qs_body<FUSE_SK_WQ, FUSE_SK_DT, FUSE_QG_R, FUSE_QG_BM, FUSE_SKINNY_DUAL, FUSE_QS_STAGES, FUSE_QS_SLOT>(p);
#elif defined(FUSE_QX_LANES)
  fuse_qx_body<FUSE_SK_WQ, FUSE_SK_DT, FUSE_QX_LANES, FUSE_QG_R, FUSE_QG_BM, FUSE_SKINNY_DUAL>(p);
#else
  fuse_qg_body<FUSE_SK_WQ, FUSE_SK_DT, FUSE_QG_R, FUSE_QG_BM, FUSE_SKINNY_DUAL>(p);
#endif
}

#endif  // FUSE_QS_ONCE
