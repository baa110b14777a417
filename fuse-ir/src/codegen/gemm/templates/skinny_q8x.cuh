// ---------------------------------------------------------------------------------------------------------
// skinny_q8x.cuh: the quantized skinny GEMM on 8-bit integer products (dp4a), -DFUSE_QX_LANES=L picks it
// over skinny_quant.cuh's f32 body. The same contract as there (MATH, hooks, epilogue once per output);
// what differs is the arithmetic: the f32 body spends ~8 instructions a weight value (ncu, 8B MLP), this one
// under 2, so that decode is bound by the weights' bytes, not by issue slots.
//
// X, 8 bits twice: each block first writes its BM rows of X (the prologue applied, rounded to DT as the
// unfused graph stores them) into shared memory as two int8 terms per value, x ~ d1 q1 + d2 q2, with d1 =
// max|x| / 127 over each 32 values and d2 the same over the residual x - d1 q1 (the CPU's Q8Residual: about
// 14 bits, the error of a bf16 round), and the exact f32 sum of each 16 values (for the blocks' offsets:
// sum (s q + o) x = s (q . x) + o sum x). Then a lane's 64 weight values (a piece: two runs of 32, each
// two halves of 16 under one integer scale) give sum_h scale_h (d1 (q . q1) + d2 (q . q2)) + off_h sum x.
//
// Pieces: K-types 4 a block (Q4_K/Q5_K: chunk c's 64 values; Q6_K: quarters t and t + 2 of half n, which
// share their bytes), 32-value types 2 blocks. Shared memory keeps each row of X in the pieces' order,
// chunk-major ([chunk 0..3][piece] of 16 bytes, then the same for q2, then [run][piece] of {d1, d2, sum of
// the first 16, sum of the second 16}), so a warp's lanes, on consecutive pieces, read consecutive 16 bytes.
//
// DEFINES: FUSE_QX_LANES L lanes a weight row (32, 16, 8, 4), FUSE_QG_R rows a lane group, FUSE_QG_BM rows
//   of X a block. Requirements beyond skinny_quant.cuh's (the runtime checks them): K % 64 == 0; the
//   weights' rows start at the piece alignment (fuse_qx_align); dynamic shared memory fuse_qx_row_bytes(K) *
//   BM; R * BM <= L. LAUNCH: ceil(N / (8 (32 / L) R)) * ceil(M / BM) blocks of 256 threads.
// ---------------------------------------------------------------------------------------------------------
#ifndef FUSE_QX_ONCE
#define FUSE_QX_ONCE
#ifndef FUSE_QX_UNROLL
#define FUSE_QX_UNROLL 1
#endif

// The types this body reads, and the alignment of each piece's first byte (whole-block rows of K % 64 == 0).
template <int Q> __device__ __forceinline__ constexpr bool fuse_qx_reads() {
  return Q == FUSE_Q4_0 || Q == FUSE_Q4_1 || Q == FUSE_Q5_0 || Q == FUSE_Q5_1 || Q == FUSE_Q8_0 || Q == FUSE_Q4_K ||
         Q == FUSE_Q5_K || Q == FUSE_Q6_K;
}
template <int Q> __device__ __forceinline__ constexpr int fuse_qx_piece_bytes() {
  return fuse_q_values<Q>() == 32 ? 2 * fuse_q_bytes<Q>() : fuse_q_bytes<Q>();
}
template <int Q> __device__ __forceinline__ constexpr int fuse_qx_align() {
  constexpr int b = fuse_qx_piece_bytes<Q>();  // (a K block's pieces lie inside it: the block's alignment)
  return (b & 15) == 0 ? 16 : (b & 7) == 0 ? 8 : (b & 3) == 0 ? 4 : 2;
}
// A piece's bytes as words: K-types the block's header (Q6_K: none) and the piece's parts; 32-value types
// the two blocks whole.
template <int Q> __device__ __forceinline__ constexpr int fuse_qx_words() {
  return Q == FUSE_Q4_0 ? 9 : Q == FUSE_Q4_1 ? 10 : Q == FUSE_Q5_0 ? 11 : Q == FUSE_Q5_1 ? 12 : Q == FUSE_Q8_0 ? 17
       : Q == FUSE_Q4_K ? 12 : Q == FUSE_Q5_K ? 20 : 19;
}

// N words of bytes from p (A-byte aligned): the widest loads A allows; at A == 2 the aligned words around p,
// funnel-shifted (the word past the end is read only where p is not 4-byte aligned, so never past a tensor).
template <int A, int N> __device__ __forceinline__ void fuse_qx_load(const unsigned char* p, unsigned* w) {
  if constexpr (A >= 16 && N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const uint4 v = ((const uint4*)p)[i];
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (A >= 8 && N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const uint2 v = ((const uint2*)p)[i];
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else if constexpr (A >= 4) {
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = ((const unsigned*)p)[i];
  } else {
    const unsigned* a = (const unsigned*)((unsigned long long)p & ~3ull);
    const unsigned shift = ((unsigned)(unsigned long long)p & 2u) * 8u;
    unsigned prev = a[0];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const unsigned next = (i + 1 < N || shift) ? a[i + 1] : 0u;
      w[i] = __funnelshift_r(prev, next, shift);
      prev = next;
    }
  }
}

// Piece `piece` of the weight row at `row` (its first block): its words. `part` is the piece's place in its
// block (K-types, 0..3; the same for every piece a lane visits when L % 4 == 0, but not assumed).
template <int Q> __device__ __forceinline__ void fuse_qx_fetch(const unsigned char* row, int piece, unsigned* w) {
  constexpr int A = fuse_qx_align<Q>();
  if constexpr (Q >= FUSE_Q4_K) {
    const unsigned char* b = row + (long long)(piece >> 2) * fuse_q_bytes<Q>();
    const int part = piece & 3;
    if constexpr (Q == FUSE_Q6_K) {
      const int n = part >> 1, t = part & 1;
      fuse_qx_load<2, 8>(b + 64 * n + 32 * t, w);       // ql: quarter t's low nibbles, t + 2's high
      fuse_qx_load<2, 8>(b + 128 + 32 * n, w + 8);      // qh: 2 bits of each quarter
      // Half n's 8 scales and d by halfwords: a funnel-shifted word could read past the tensor's last block.
      const unsigned short* sc = (const unsigned short*)(b + 192 + 8 * n);
      w[16] = sc[0] | ((unsigned)sc[1] << 16);
      w[17] = sc[2] | ((unsigned)sc[3] << 16);
      w[18] = *(const unsigned short*)(b + 208);
    } else {
      fuse_qx_load<16, 4>(b, w);  // d | dmin, 12 scale bytes
      if constexpr (Q == FUSE_Q5_K) {
        fuse_qx_load<16, 8>(b + 16, w + 4);              // qh: bits 2c, 2c + 1 of each byte
        fuse_qx_load<16, 8>(b + 48 + 32 * part, w + 12);  // qs: chunk c
      } else {
        fuse_qx_load<16, 8>(b + 16 + 32 * part, w + 4);
      }
    }
  } else {
    fuse_qx_load<A, fuse_qx_words<Q>()>(row + (long long)piece * fuse_qx_piece_bytes<Q>(), w);
  }
}

// A piece decoded: run h's half s codes (4 words of 4 byte codes, small non-negative ints or Q8_0's signed
// bytes), the run's scale of the integer dot and offsets of the halves' sums of x; Q6_K's integer scale of
// each half.
struct FuseQxPiece {
  unsigned code[2][2][4];
  int mul[2][2];
  float scale[2], off[2][2];
};
template <int Q> __device__ __forceinline__ FuseQxPiece fuse_qx_decode(const unsigned* w, int piece) {
  FuseQxPiece o;
  const unsigned M4 = 0x0f0f0f0fu;
  if constexpr (Q == FUSE_Q4_K || Q == FUSE_Q5_K) {
    const int c = piece & 3;
    const float d = fuse_f16_to_f32((unsigned short)(w[0] & 0xffffu)), dmin = fuse_f16_to_f32((unsigned short)(w[0] >> 16));
    constexpr int QS = Q == FUSE_Q5_K ? 12 : 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      unsigned sc, mn;
      fuse_q_scale_min_k4w(w[1], w[2], w[3], 2 * c + h, sc, mn);
      o.scale[h] = d * (float)sc;
      o.off[h][0] = o.off[h][1] = -(dmin * (float)mn);
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          unsigned v = (w[QS + 4 * s + i] >> (4 * h)) & M4;
          if constexpr (Q == FUSE_Q5_K) v |= ((w[4 + 4 * s + i] >> (2 * c + h)) & 0x01010101u) << 4;
          o.code[h][s][i] = v;
        }
    }
  } else if constexpr (Q == FUSE_Q6_K) {
    const int t = piece & 1;
    const float d = fuse_f16_to_f32((unsigned short)(w[18] & 0xffffu));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      o.scale[h] = d;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int at = 2 * t + 4 * h + s;  // the half's scale byte of the 8
        o.mul[h][s] = (int)(signed char)((w[16 + (at >> 2)] >> (8 * (at & 3))) & 0xffu);
        o.off[h][s] = -32.0f * d * (float)o.mul[h][s];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          o.code[h][s][i] = ((w[4 * s + i] >> (4 * h)) & M4) | (((w[8 + 4 * s + i] >> (2 * t + 4 * h)) & 0x03030303u) << 4);
      }
    }
  } else {
    // Two blocks: d (and m), Q5's 32 fifth bits, 16 bytes whose low nibbles are values 0..15 (Q8_0: 32 bytes).
    constexpr bool has_min = Q == FUSE_Q4_1 || Q == FUSE_Q5_1, five = Q == FUSE_Q5_0 || Q == FUSE_Q5_1;
    constexpr int BW = fuse_q_bytes<Q>();  // a block's bytes; the second block starts at byte BW
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Word i of the block's bytes from `from` on (2-byte aligned within the piece).
      auto word = [&](int from) -> unsigned {
        const int at = h * BW + from;
        return (at & 3) ? __funnelshift_r(w[at >> 2], w[(at >> 2) + 1], 16) : w[at >> 2];
      };
      const unsigned head = word(0);
      const float d = fuse_f16_to_f32((unsigned short)(head & 0xffffu));
      o.scale[h] = d;
      const float off = has_min ? fuse_f16_to_f32((unsigned short)(head >> 16)) : Q == FUSE_Q8_0 ? 0.0f : (five ? -16.0f : -8.0f) * d;
      o.off[h][0] = o.off[h][1] = off;
      constexpr int qs = (has_min ? 4 : 2) + (five ? 4 : 0);
      const unsigned high = five ? word(has_min ? 4 : 2) : 0u;
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if constexpr (Q == FUSE_Q8_0) {
            o.code[h][s][i] = word(2 + 16 * s + 4 * i);
          } else {
            unsigned v = (word(qs + 4 * i) >> (4 * s)) & M4;
            if constexpr (five) v |= fuse_q_spread4(high >> (16 * s + 4 * i));
            o.code[h][s][i] = v;
          }
        }
    }
  }
  return o;
}

// Bytes of shared memory one row of X takes.
__host__ __device__ __forceinline__ constexpr long long fuse_qx_row_bytes(long long k) { return 2 * k + k / 2; }

// Where X's 32-value block b of a row goes: its piece and its run in the piece.
template <int Q> __device__ __forceinline__ void fuse_qx_place(int b, int& piece, int& h) {
  if constexpr (Q == FUSE_Q6_K) {
    piece = 2 * (b >> 2) + (b & 1);
    h = (b >> 1) & 1;
  } else {
    piece = b >> 1;
    h = b & 1;
  }
}

// Four signed values (|v| <= 127) as the bytes of a word.
__device__ __forceinline__ unsigned fuse_qx_pack4(int a, int b, int c, int e) {
  return (unsigned)(a & 0xff) | ((unsigned)(b & 0xff) << 8) | ((unsigned)(c & 0xff) << 16) | ((unsigned)(e & 0xff) << 24);
}

// The scaled form of the in-kernel prologue (the generated FUSE_GEMM_PRO_CAN_SCALE: X = s * h with s one
// value a row, as skinny_kernel.cuh takes it), asked for by -DFUSE_QX_SCALED=1: X is staged as h in one pass,
// each reduction's operand folded as its values load (a warp's lanes are on one row: K whole 256-value warps),
// and s multiplies a row's sums before the epilogue; no row pass before staging. Not for f16 (h unnormalised
// may pass its range), nor where s's other inputs vary along a row (checked from the arguments, before the
// grid wait). The rounding differs from the row pass's: h is rounded to DT and quantised, not s * h.
#if FUSE_GEMM_PRO && defined(FUSE_GEMM_PRO_CAN_SCALE) && defined(FUSE_QX_SCALED)
#define FUSE_QX_SCALES 1
// Each warp's folds of each row's reductions (lane 0 keeps them, one warp's rows in its own order).
__shared__ float fuse_qx_red[8][FUSE_GEMM_PRO_ROWS][FUSE_GEMM_PRO_REDUCTIONS];
// Whether this block takes the scaled form: every thread's answer the same. Before the grid wait: the rows'
// offsets (into fuse_pro_row) and the check read only the arguments.
template <int DT, int BM>
__device__ __forceinline__ bool fuse_qx_can_scale(const FuseSkinnyParams& p, long long m0) {
  static_assert(BM <= FUSE_GEMM_PRO_ROWS, "the in-kernel prologue holds FUSE_GEMM_PRO_ROWS rows");
  const int tid = threadIdx.x;
  bool ok = true;
  if (tid < BM) {
    fuse_gemm_pro_offsets(p.epi, m0 + tid < p.gemm.m ? m0 + tid : p.gemm.m - 1, fuse_pro_row[tid]);
    ok = fuse_gemm_pro_can_scale(fuse_pro_row[tid]);
  }
  return __syncthreads_and(ok) && DT != FUSE_F16 && p.gemm.k % 256 == 0;
}
// s of the block's row i: the 8 warps' folds merged in warp order (after staging's barrier), then the row's
// scale, by each thread that stores one of the row's outputs.
__device__ __forceinline__ float fuse_qx_row_scale(const FuseSkinnyParams& p, int i) {
  float total[FUSE_GEMM_PRO_REDUCTIONS];
  fuse_gemm_pro_red_warps(fuse_qx_red, i, total);
  return fuse_gemm_pro_scale(p.epi, fuse_pro_row[i], p.gemm.k, total);
}
#else
#define FUSE_QX_SCALES 0
#endif

// One pass's 8 values of X (its row's `row`, column k8; `on`: its piece exists, stored at row i) into shared
// memory as above, after the prologue where there is one (`scaled`: h, the row's reductions folded into
// fuse_qx_red): both terms' codes and, by the first of a 32-value block's 4 lanes, the block's meta.
template <int Q, int DT>
__device__ __forceinline__ void fuse_qx_write_pass(const FuseSkinnyParams& p, unsigned char* smem, bool scaled, bool on, int i, int k8,
                                                   int row, float (&x)[8]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int K = (int)p.gemm.k, P = K / 64;
  const long long row_bytes = fuse_qx_row_bytes(K);
#if FUSE_QX_SCALES
  if (scaled) {
    float red[FUSE_GEMM_PRO_REDUCTIONS];
    fuse_gemm_pro_red_init(red);
    fuse_gemm_pro8_scaled(p.epi, fuse_pro_row[row], k8, x, red);
    // The warp's 256 values are one row's (K % 256 == 0): its lanes' folds merged, kept by lane 0.
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) {
      float other[FUSE_GEMM_PRO_REDUCTIONS];
#pragma unroll
      for (int q = 0; q < FUSE_GEMM_PRO_REDUCTIONS; ++q) other[q] = __shfl_xor_sync(0xffffffffu, red[q], o);
      fuse_gemm_pro_red_merge(red, other);
    }
    if (lane == 0 && on) fuse_gemm_pro_red_merge(fuse_qx_red[warp][i], red);
  } else {
    fuse_gemm_pro8(p.epi, fuse_pro_row[row], k8, x);
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) x[e] = fuse_qg_round<DT>(x[e]);
#elif FUSE_GEMM_PRO
  fuse_gemm_pro8(p.epi, fuse_pro_row[row], k8, x);
#pragma unroll
  for (int e = 0; e < 8; ++e) x[e] = fuse_qg_round<DT>(x[e]);
#endif
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(x[e]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float d1 = amax / 127.0f, inv1 = amax > 0.0f ? 127.0f / amax : 0.0f;
  int q1[8];
  float r[8], rmax = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    q1[e] = __float2int_rn(x[e] * inv1);
    r[e] = fmaf(-d1, (float)q1[e], x[e]);
    rmax = fmaxf(rmax, fabsf(r[e]));
  }
  rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, 1));
  rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, 2));
  const float d2 = rmax / 127.0f, inv2 = rmax > 0.0f ? 127.0f / rmax : 0.0f;
  int q2[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) q2[e] = __float2int_rn(r[e] * inv2);
  const float s8 = ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]));
  const float s16 = s8 + __shfl_xor_sync(0xffffffffu, s8, 1);
  const float s16b = __shfl_xor_sync(0xffffffffu, s16, 2);
  if (on) {
    int piece, h;
    fuse_qx_place<Q>(k8 >> 5, piece, h);
    const int sub = (k8 >> 3) & 3, chunk = 2 * h + (sub >> 1);
    unsigned char* q = smem + i * row_bytes + (long long)(chunk * P + piece) * 16 + 8 * (sub & 1);
    *(uint2*)q = make_uint2(fuse_qx_pack4(q1[0], q1[1], q1[2], q1[3]), fuse_qx_pack4(q1[4], q1[5], q1[6], q1[7]));
    *(uint2*)(q + K) = make_uint2(fuse_qx_pack4(q2[0], q2[1], q2[2], q2[3]), fuse_qx_pack4(q2[4], q2[5], q2[6], q2[7]));
    if (sub == 0) ((float4*)(smem + i * row_bytes + 2 * K))[h * P + piece] = make_float4(d1, d2, s16, s16b);
  }
}

// The block's rows of X into shared memory as above: 4 lanes a 32-value block, 8 values each (`scaled`: h, and
// each row's reductions folded into fuse_qx_red).
template <int Q, int DT, int BM>
__device__ __forceinline__ void fuse_qx_write_x(const FuseSkinnyParams& p, long long m0, int rows, unsigned char* smem, bool scaled) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int per_row = (int)p.gemm.k / 8;
  const int total = BM * per_row;  // 8-value pieces; a warp takes 32 a pass, the block 256
  // Where a pass is, for each lane: BM * per_row % 4 == 0, so a block's 4 lanes are all on or all off; rows
  // past M repeat the last (computed, never stored).
  auto place = [&](int base, bool& on, int& i, int& k8, int& row) {
    const int idx = base + lane;
    on = idx < total;
    i = on ? idx / per_row : 0, k8 = on ? (idx % per_row) * 8 : 0;
    row = i < rows ? i : rows - 1;
  };
  for (int base = warp * 32; base < total; base += 256) {
    bool on;
    int i, k8, row;
    place(base, on, i, k8, row);
    float x[8];
    fuse_qg_load_x<DT>(p.gemm.x, (m0 + row) * p.gemm.lda + k8, x);
    fuse_qx_write_pass<Q, DT>(p, smem, scaled, on, i, k8, row, x);
  }
}

// The block's rows of X into shared memory (fuse_qx_write_x), after the in-kernel prologue's pass over them
// where there is one and the block does not take the scaled form, then a barrier: every warp reads every row.
template <int Q, int DT, int BM>
__device__ __forceinline__ void fuse_qx_stage_x(const FuseSkinnyParams& p, long long m0, int rows, unsigned char* smem, bool scaled) {
#if FUSE_QX_SCALES
  if (scaled && (threadIdx.x & 31) == 0) {
#pragma unroll
    for (int i = 0; i < BM; ++i) fuse_gemm_pro_red_init(fuse_qx_red[threadIdx.x >> 5][i]);
  }
#endif
#if FUSE_GEMM_PRO
  static_assert(BM <= FUSE_GEMM_PRO_ROWS, "the in-kernel prologue holds FUSE_GEMM_PRO_ROWS rows");
  __shared__ float fuse_qx_part[BM * 256];
  if (!scaled) {
    fuse_gemm_pro_rows(p.epi, m0, rows, (int)p.gemm.k, fuse_qx_part, 256);
    __syncthreads();
  }
#endif
  fuse_qx_write_x<Q, DT, BM>(p, m0, rows, smem, scaled);
  __syncthreads();
}

// Whether the block takes the scaled form (fuse_qx_can_scale; false without it). Before the grid wait.
template <int DT, int BM>
__device__ __forceinline__ bool fuse_qx_scaled(const FuseSkinnyParams& p, long long m0) {
#if FUSE_QX_SCALES
  return fuse_qx_can_scale<DT, BM>(p, m0);
#else
  return false;
#endif
}

// The epilogue of row m0 + i's sums: multiplied by the row's s first where the block took the scaled form.
__device__ __forceinline__ void fuse_qx_epilogue(const FuseSkinnyParams& p, bool scaled, long long m0, int i, long long n, float out0, float out1) {
#if FUSE_QX_SCALES
  if (scaled) {
    const float s = fuse_qx_row_scale(p, i);
    out0 *= s, out1 *= s;
  }
#endif
  fuse_gemm_epilogue(p.epi, m0 + i, n, out0, out1);
}

// X's half h of a piece (run h: its meta {d1, d2, sum of the first 16, of the second 16} and both terms' codes)
// from one row of X at `x` (row_bytes apart from the next).
struct FuseQxHalf {
  float4 meta;
  uint4 q1[2], q2[2];
};
__device__ __forceinline__ FuseQxHalf fuse_qx_x_half(const unsigned char* x, int K, int P, int piece, int h) {
  FuseQxHalf o;
  o.meta = ((const float4*)(x + 2 * K))[h * P + piece];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    o.q1[s] = ((const uint4*)x)[(2 * h + s) * P + piece];
    o.q2[s] = ((const uint4*)(x + K))[(2 * h + s) * P + piece];
  }
  return o;
}

// Run h of a decoded piece against X's half: acc += its dot.
template <int Q>
__device__ __forceinline__ void fuse_qx_dot_half(const FuseQxPiece& w, int h, const FuseQxHalf& x, float& acc) {
  int i1[2], i2[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const uint4 a = x.q1[s], b = x.q2[s];
    const unsigned* c = w.code[h][s];
    i1[s] = __dp4a((int)c[3], (int)a.w, __dp4a((int)c[2], (int)a.z, __dp4a((int)c[1], (int)a.y, __dp4a((int)c[0], (int)a.x, 0))));
    i2[s] = __dp4a((int)c[3], (int)b.w, __dp4a((int)c[2], (int)b.z, __dp4a((int)c[1], (int)b.y, __dp4a((int)c[0], (int)b.x, 0))));
  }
  const float4 m = x.meta;
  if constexpr (Q == FUSE_Q6_K) {
    const int j1 = w.mul[h][0] * i1[0] + w.mul[h][1] * i1[1], j2 = w.mul[h][0] * i2[0] + w.mul[h][1] * i2[1];
    acc = fmaf(w.scale[h], fmaf(m.y, (float)j2, m.x * (float)j1), acc);
    acc = fmaf(w.off[h][0], m.z, acc);
    acc = fmaf(w.off[h][1], m.w, acc);
  } else {
    acc = fmaf(w.scale[h], fmaf(m.y, (float)(i2[0] + i2[1]), m.x * (float)(i1[0] + i1[1])), acc);
    if constexpr (Q != FUSE_Q8_0) acc = fmaf(w.off[h][0], m.z + m.w, acc);
  }
}

// One piece against one row of X: acc += its dot.
template <int Q>
__device__ __forceinline__ void fuse_qx_dot(const FuseQxPiece& w, const unsigned char* x, int K, int P, int piece, float& acc) {
#pragma unroll
  for (int h = 0; h < 2; ++h) fuse_qx_dot_half<Q>(w, h, fuse_qx_x_half(x, K, P, piece, h), acc);
}

// The group's L lanes' sums of acc[d][r][i] (a butterfly: every lane gets each, the same order of additions in
// all); lane r * BM + i of the group gets (row i, column r) in out0 (weight 0) and out1 (weight 1).
template <int L, int R, int BM, int D>
__device__ __forceinline__ void fuse_qx_group_sums(const float (&acc)[D][R][BM], int li, float& out0, float& out1) {
  out0 = 0.0f, out1 = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < BM; ++i) {
      float s0 = acc[0][r][i], s1 = acc[D - 1][r][i];
#pragma unroll
      for (int o = L / 2; o >= 1; o >>= 1) {
        s0 += __shfl_xor_sync(0xffffffffu, s0, o);
        if (D == 2) s1 += __shfl_xor_sync(0xffffffffu, s1, o);
      }
      if (li == r * BM + i) out0 = s0, out1 = D == 2 ? s1 : 0.0f;
    }
}

// The weight rows column block bn reads in the 8-bit body (8 warps of 32 / L lane groups of R rows).
template <int L, int R>
__device__ __forceinline__ FuseQgRange fuse_qx_block_rows(long long bn) {
  constexpr int G = 32 / L;
  return {bn * (8 * G * R), (bn + 1) * (8 * G * R)};
}

template <int Q, int DT, int L, int R, int BM, int DUAL>
__device__ __forceinline__ void fuse_qx_body(const FuseSkinnyParams& p) {
  static_assert(fuse_qx_reads<Q>(), "a block type this body reads");
  static_assert((L == 32 || L == 16 || L == 8 || L == 4) && R * BM <= L, "a lane of the group an output");
  constexpr int D = DUAL ? 2 : 1, G = 32 / L, WORDS = fuse_qx_words<Q>();
  extern __shared__ __align__(16) unsigned char fuse_qx_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, li = lane % L, g = lane / L;
  const long long M = p.gemm.m, N = p.gemm.n;
  const int K = (int)p.gemm.k, P = K / 64;
  const long long mblocks = (M + BM - 1) / BM;
  const long long m0 = (FUSE_GEMM_BLOCK(p.gemm) % mblocks) * BM;
  const long long n0 = fuse_qx_block_rows<L, R>(FUSE_GEMM_BLOCK(p.gemm) / mblocks).first + (long long)(warp * G + g) * R;
  const int rows = (int)(M - m0 < BM ? M - m0 : BM);
  const unsigned char* wrow[D][R];
#pragma unroll
  for (int d = 0; d < D; ++d)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      wrow[d][r] = fuse_qg_weight_row<Q>(p, d, n0 + r);
#if FUSE_QG_ROW_PREFETCH
      fuse_qg_prefetch_row<Q>(wrow[d][r], K, li, L);
#else
      if (li < P) asm volatile("prefetch.global.L2 [%0];" ::"l"(wrow[d][r] + (Q >= FUSE_Q4_K ? (li >> 2) * fuse_q_bytes<Q>() : li * 2 * fuse_q_bytes<Q>())));
#endif
    }
  const bool scaled = fuse_qx_scaled<DT, BM>(p, m0);
  fuse_grid_wait();
  fuse_grid_release();
  fuse_qx_stage_x<Q, DT, BM>(p, m0, rows, fuse_qx_smem, scaled);
  FUSE_TASK_MARK(0);  // X is staged (8-bit, with its prologue): the main loop starts
  const long long row_bytes = fuse_qx_row_bytes(K);
  float acc[D][R][BM];
  fuse_qg_zero(acc);
#pragma unroll FUSE_QX_UNROLL
  for (int piece = li; piece < P; piece += L) {
    // Every row's bytes first (their loads in flight together), then each against X.
    unsigned words[D][R][WORDS];
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
      for (int r = 0; r < R; ++r) fuse_qx_fetch<Q>(wrow[d][r], piece, words[d][r]);
#pragma unroll
    for (int d = 0; d < D; ++d)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const FuseQxPiece w = fuse_qx_decode<Q>(words[d][r], piece);
#pragma unroll
        for (int i = 0; i < BM; ++i) fuse_qx_dot<Q>(w, fuse_qx_smem + i * row_bytes, K, P, piece, acc[d][r][i]);
      }
  }
  FUSE_TASK_MARK(2);  // the main loop is done (thread 0's pieces)
  // Lane r * BM + i of the group stores (row m0 + i, column n0 + r).
  float out0, out1;
  fuse_qx_group_sums<L, R, BM, D>(acc, li, out0, out1);
  const int r = li / BM, i = li % BM;
  if (r < R && i < rows && n0 + r < N) fuse_qx_epilogue(p, scaled, m0, i, n0 + r, out0, out1);
}

// The kernel's entry is skinny_q8s.cuh's (after the streaming body, which it may call instead).

#endif  // FUSE_QX_ONCE
