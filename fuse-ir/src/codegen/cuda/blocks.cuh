// blocks.cuh: GGUF's block-quantized weights read as stored, part of the CUDA prelude (after prelude.cuh). A
// tensor of blocks is its elements in row-major order cut into blocks of 32 (Q4_0 .. Q8_0) or 256 (the K types)
// consecutive values, the last axis whole blocks, so element `off` of a tensor is value off % B of block off / B
// whatever view reads it. The layouts and the order of operations are fuse_ir::quant's (blocks.rs, checked there
// against gguf-py's dequantizer); each helper here decodes 8 consecutive values in registers.
//
// Codes: 16 + the type's place in fuse_ir's DType::QUANTIZED, as in every kernel's dtype defines.
#ifndef FUSE_BLOCKS_ONCE
#define FUSE_BLOCKS_ONCE

#define FUSE_Q4_0 16
#define FUSE_Q4_1 17
#define FUSE_Q5_0 18
#define FUSE_Q5_1 19
#define FUSE_Q8_0 20
#define FUSE_Q4_K 21
#define FUSE_Q5_K 22
#define FUSE_Q6_K 23

// Values and bytes of one block, and the alignment every block start has (its size's largest power of two up
// to 16: allocations are 256-byte aligned and views start at whole blocks).
template <int Q> __device__ __forceinline__ constexpr int fuse_q_values() { return Q >= FUSE_Q4_K ? 256 : 32; }
template <int Q> __device__ __forceinline__ constexpr int fuse_q_bytes() {
  return Q == FUSE_Q4_0 ? 18 : Q == FUSE_Q4_1 ? 20 : Q == FUSE_Q5_0 ? 22 : Q == FUSE_Q5_1 ? 24 : Q == FUSE_Q8_0 ? 34
       : Q == FUSE_Q4_K ? 144 : Q == FUSE_Q5_K ? 176 : 210;
}
template <int Q> __device__ __forceinline__ constexpr int fuse_q_align() {
  return (fuse_q_bytes<Q>() & 15) == 0 ? 16 : (fuse_q_bytes<Q>() & 7) == 0 ? 8 : (fuse_q_bytes<Q>() & 3) == 0 ? 4 : 2;
}

// Whether the type's values have an offset besides their scale (a min: Q4_1, Q5_1, Q4_K, Q5_K).
template <int Q> __device__ __forceinline__ constexpr bool fuse_q_has_offset() {
  return Q == FUSE_Q4_1 || Q == FUSE_Q5_1 || Q == FUSE_Q4_K || Q == FUSE_Q5_K;
}

// 8 bytes from `p`, which is A-byte aligned (A = 2, 4, 8 or 16), as two little-endian words.
struct FuseQBytes8 {
  unsigned lo, hi;
};
template <int A> __device__ __forceinline__ FuseQBytes8 fuse_q_load8(const unsigned char* p) {
  if constexpr (A >= 8) {
    const unsigned long long v = *(const unsigned long long*)p;
    return FuseQBytes8{(unsigned)v, (unsigned)(v >> 32)};
  } else if constexpr (A == 4) {
    const unsigned* w = (const unsigned*)p;
    return FuseQBytes8{w[0], w[1]};
  } else {
    const unsigned short* h = (const unsigned short*)p;
    return FuseQBytes8{h[0] | ((unsigned)h[1] << 16), h[2] | ((unsigned)h[3] << 16)};
  }
}
// The f16 at `p` (2-byte aligned) as f32.
__device__ __forceinline__ float fuse_q_half(const unsigned char* p) { return fuse_f16_to_f32(*(const unsigned short*)p); }
// Group j's 6-bit scale and min of a Q4_K / Q5_K block's 12 packed bytes at `s` (fuse_ir::quant::scale_min_k4).
__device__ __forceinline__ void fuse_q_scale_min_k4(const unsigned char* s, int j, unsigned& sc, unsigned& mn) {
  if (j < 4) {
    sc = s[j] & 63u;
    mn = s[j + 4] & 63u;
  } else {
    sc = (s[j + 4] & 0x0fu) | ((unsigned)(s[j - 4] >> 6) << 4);
    mn = (unsigned)(s[j + 4] >> 4) | ((unsigned)(s[j] >> 6) << 4);
  }
}

// Byte i (0..3) of w minus `bias`, as f32, exactly: prmt places the byte in the mantissa of 2^23 (one
// instruction), then 2^23 + bias is taken off.
template <int I> __device__ __forceinline__ float fuse_q_byte_int(unsigned w, int bias) {
  unsigned r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(w), "r"(0x4b000000u), "n"(0x7650 | I));
  return __uint_as_float(r) - (8388608.0f + (float)bias);
}
// Bits 0..3 of x into bit 4 of bytes 0..3.
__device__ __forceinline__ unsigned fuse_q_spread4(unsigned x) {
  return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

// Values j .. j+7 (j % 8 == 0) of the block at `b` of type Q as small integers q (exact, in f32) and the scale
// and offset that make them the values: value e = scale * q[e] + offset (ggml's order of operations). Per
// value one byte placement and one subtraction; the scales are decoded once for the eight.
template <int Q>
__device__ __forceinline__ void fuse_q_ints8(const unsigned char* b, int j, float (&q)[8], float& scale, float& offset) {
  constexpr int A = fuse_q_align<Q>();
  unsigned lo, hi;  // the 8 values' integer parts, a byte each
  int bias = 0;
  if constexpr (Q == FUSE_Q4_0 || Q == FUSE_Q4_1 || Q == FUSE_Q5_0 || Q == FUSE_Q5_1) {
    // d (and m) first; Q5 then the 32 fifth bits (bit e for value e); 16 bytes whose low nibbles are values
    // 0..15 and high nibbles 16..31.
    constexpr bool has_min = Q == FUSE_Q4_1 || Q == FUSE_Q5_1, five = Q == FUSE_Q5_0 || Q == FUSE_Q5_1;
    constexpr int qs = (has_min ? 4 : 2) + (five ? 4 : 0);
    scale = fuse_q_half(b);
    offset = has_min ? fuse_q_half(b + 2) : 0.0f;
    const FuseQBytes8 w = fuse_q_load8<A>(b + qs + (j & 15));
    const int shift = j >= 16 ? 4 : 0;
    lo = (w.lo >> shift) & 0x0f0f0f0fu;
    hi = (w.hi >> shift) & 0x0f0f0f0fu;
    if constexpr (five) {
      const unsigned short* h = (const unsigned short*)(b + (has_min ? 4 : 2));
      const unsigned high = (h[0] | ((unsigned)h[1] << 16)) >> j;
      lo |= fuse_q_spread4(high);
      hi |= fuse_q_spread4(high >> 4);
    }
    bias = has_min ? 0 : (five ? 16 : 8);
  } else if constexpr (Q == FUSE_Q8_0) {
    scale = fuse_q_half(b);
    offset = 0.0f;
    const FuseQBytes8 w = fuse_q_load8<A>(b + 2 + j);
    lo = w.lo ^ 0x80808080u;  // signed bytes + 128
    hi = w.hi ^ 0x80808080u;
    bias = 128;
  } else if constexpr (Q == FUSE_Q4_K || Q == FUSE_Q5_K) {
    // Four chunks of 64 values: 32 bytes of nibbles, low nibbles the chunk's first 32 values (group 2c), high
    // nibbles its second (2c + 1); Q5_K's fifth bits are bits 2c and 2c + 1 of each of qh's 32 bytes.
    const int c = j >> 6, h = (j >> 5) & 1, l = j & 31;
    unsigned sc, mn;
    fuse_q_scale_min_k4(b + 4, 2 * c + h, sc, mn);
    scale = fuse_q_half(b) * (float)sc;
    offset = -(fuse_q_half(b + 2) * (float)mn);
    constexpr int qs = Q == FUSE_Q5_K ? 48 : 16;
    const FuseQBytes8 w = fuse_q_load8<8>(b + qs + 32 * c + l);
    lo = (w.lo >> (4 * h)) & 0x0f0f0f0fu;
    hi = (w.hi >> (4 * h)) & 0x0f0f0f0fu;
    if constexpr (Q == FUSE_Q5_K) {
      const FuseQBytes8 qh = fuse_q_load8<8>(b + 16 + l);
      lo |= ((qh.lo >> (2 * c + h)) & 0x01010101u) << 4;
      hi |= ((qh.hi >> (2 * c + h)) & 0x01010101u) << 4;
    }
  } else {
    static_assert(Q == FUSE_Q6_K, "a block type code (FUSE_Q4_0 .. FUSE_Q6_K)");
    // Two halves of 128 values: 64 bytes of low nibbles (ql), 32 of 2-bit high parts (qh), 8 signed scales;
    // quarter t of a half: ql bytes 32 * (t & 1) on, nibble t >> 1, qh bits 2t, scale 2t + l / 16.
    const int n = j >> 7, t = (j >> 5) & 3, l = j & 31;
    const FuseQBytes8 ql = fuse_q_load8<A>(b + 64 * n + 32 * (t & 1) + l);
    const FuseQBytes8 qh = fuse_q_load8<A>(b + 128 + 32 * n + l);
    scale = fuse_q_half(b + 208) * (float)(signed char)b[192 + 8 * n + 2 * t + (l >> 4)];
    offset = 0.0f;
    lo = ((ql.lo >> (4 * (t >> 1))) & 0x0f0f0f0fu) | (((qh.lo >> (2 * t)) & 0x03030303u) << 4);
    hi = ((ql.hi >> (4 * (t >> 1))) & 0x0f0f0f0fu) | (((qh.hi >> (2 * t)) & 0x03030303u) << 4);
    bias = 32;
  }
  q[0] = fuse_q_byte_int<0>(lo, bias), q[1] = fuse_q_byte_int<1>(lo, bias);
  q[2] = fuse_q_byte_int<2>(lo, bias), q[3] = fuse_q_byte_int<3>(lo, bias);
  q[4] = fuse_q_byte_int<0>(hi, bias), q[5] = fuse_q_byte_int<1>(hi, bias);
  q[6] = fuse_q_byte_int<2>(hi, bias), q[7] = fuse_q_byte_int<3>(hi, bias);
}

// A lane's unit of 16 values of a block, for kernels that stream blocks: the block's bytes cut so that each
// unit's integer parts are 8 whole bytes of one place (one wide load, every bit used where the layout allows),
// read as two runs of 8 consecutive values: values j .. j+7 and j+gap .. j+gap+7 (j = fuse_q_unit_start(u)),
// each run with its scale and offset. Units per block B / 16; the runs' distance fuse_q_run_gap.
template <int Q> __device__ __forceinline__ constexpr int fuse_q_units() { return fuse_q_values<Q>() / 16; }
template <int Q> __device__ __forceinline__ constexpr int fuse_q_run_gap() {
  return Q == FUSE_Q8_0 ? 8 : Q == FUSE_Q6_K ? 64 : Q >= FUSE_Q4_K ? 32 : 16;
}
// The first run's place in the block of unit u (0 .. units - 1).
template <int Q> __device__ __forceinline__ int fuse_q_unit_start(int u) {
  if constexpr (Q == FUSE_Q8_0) return 16 * u;
  else if constexpr (Q == FUSE_Q4_K || Q == FUSE_Q5_K) return 64 * (u >> 2) + 8 * (u & 3);
  else if constexpr (Q == FUSE_Q6_K) return 128 * (u >> 3) + 32 * ((u >> 2) & 1) + 8 * (u & 3);
  else return 8 * u;
}
// A unit read from its block: run h's integer parts (plus `bias`) are bytes lo[h] (values 0..3) and hi[h]
// (4..7); value e of run h = scale[h] * (byte e - bias) + offset[h].
struct FuseQUnit {
  unsigned lo[2], hi[2];
  float scale[2], offset[2];
};
// Group j's (0..7) 6-bit scale and min of a K block's 12 packed scale bytes given as three words
// (fuse_q_scale_min_k4 from whole-word loads).
__device__ __forceinline__ void fuse_q_scale_min_k4w(unsigned s0, unsigned s1, unsigned s2, int j, unsigned& sc, unsigned& mn) {
  const int i = 8 * (j & 3);
  const unsigned a = (s0 >> i) & 0xffu, b = (s1 >> i) & 0xffu;
  if (j < 4) {
    sc = a & 63u;
    mn = b & 63u;
  } else {
    const unsigned c = (s2 >> i) & 0xffu;
    sc = (c & 0x0fu) | ((a >> 6) << 4);
    mn = (c >> 4) | ((b >> 6) << 4);
  }
}
template <int Q> __device__ __forceinline__ constexpr int fuse_q_bias() {
  return Q == FUSE_Q4_0 ? 8 : Q == FUSE_Q5_0 ? 16 : Q == FUSE_Q8_0 ? 128 : Q == FUSE_Q6_K ? 32 : 0;
}
// Unit u of the block at `b` of type Q.
template <int Q> __device__ __forceinline__ FuseQUnit fuse_q_unit(const unsigned char* b, int u) {
  constexpr int A = fuse_q_align<Q>();
  FuseQUnit o;
  if constexpr (Q == FUSE_Q4_0 || Q == FUSE_Q4_1 || Q == FUSE_Q5_0 || Q == FUSE_Q5_1) {
    // Bytes 8u .. 8u+7 of the 16: low nibbles values 8u.., high nibbles 16 + 8u.. (the same scale).
    constexpr bool has_min = Q == FUSE_Q4_1 || Q == FUSE_Q5_1, five = Q == FUSE_Q5_0 || Q == FUSE_Q5_1;
    constexpr int qs = (has_min ? 4 : 2) + (five ? 4 : 0);
    o.scale[0] = o.scale[1] = fuse_q_half(b);
    o.offset[0] = o.offset[1] = has_min ? fuse_q_half(b + 2) : 0.0f;
    const FuseQBytes8 w = fuse_q_load8<A>(b + qs + 8 * u);
    o.lo[0] = w.lo & 0x0f0f0f0fu, o.hi[0] = w.hi & 0x0f0f0f0fu;
    o.lo[1] = (w.lo >> 4) & 0x0f0f0f0fu, o.hi[1] = (w.hi >> 4) & 0x0f0f0f0fu;
    if constexpr (five) {
      const unsigned short* h = (const unsigned short*)(b + (has_min ? 4 : 2));
      const unsigned high = h[0] | ((unsigned)h[1] << 16);
      const unsigned h0 = high >> (8 * u), h1 = high >> (16 + 8 * u);
      o.lo[0] |= fuse_q_spread4(h0), o.hi[0] |= fuse_q_spread4(h0 >> 4);
      o.lo[1] |= fuse_q_spread4(h1), o.hi[1] |= fuse_q_spread4(h1 >> 4);
    }
  } else if constexpr (Q == FUSE_Q8_0) {
    // 16 consecutive signed bytes (+ 128).
    o.scale[0] = o.scale[1] = fuse_q_half(b);
    o.offset[0] = o.offset[1] = 0.0f;
    const FuseQBytes8 w0 = fuse_q_load8<A>(b + 2 + 16 * u), w1 = fuse_q_load8<A>(b + 10 + 16 * u);
    o.lo[0] = w0.lo ^ 0x80808080u, o.hi[0] = w0.hi ^ 0x80808080u;
    o.lo[1] = w1.lo ^ 0x80808080u, o.hi[1] = w1.hi ^ 0x80808080u;
  } else if constexpr (Q == FUSE_Q4_K || Q == FUSE_Q5_K) {
    // Chunk c's bytes l .. l+7: low nibbles group 2c's values l.., high nibbles group 2c + 1's.
    const int c = u >> 2, l = 8 * (u & 3);
    const unsigned* words = (const unsigned*)b;  // 16-byte aligned blocks: d|dmin, then the 12 scale bytes
    const unsigned dm = words[0];
    const float d = fuse_f16_to_f32((unsigned short)(dm & 0xffffu)), dmin = fuse_f16_to_f32((unsigned short)(dm >> 16));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      unsigned sc, mn;
      fuse_q_scale_min_k4w(words[1], words[2], words[3], 2 * c + h, sc, mn);
      o.scale[h] = d * (float)sc;
      o.offset[h] = -(dmin * (float)mn);
    }
    constexpr int qs = Q == FUSE_Q5_K ? 48 : 16;
    const FuseQBytes8 w = fuse_q_load8<8>(b + qs + 32 * c + l);
    o.lo[0] = w.lo & 0x0f0f0f0fu, o.hi[0] = w.hi & 0x0f0f0f0fu;
    o.lo[1] = (w.lo >> 4) & 0x0f0f0f0fu, o.hi[1] = (w.hi >> 4) & 0x0f0f0f0fu;
    if constexpr (Q == FUSE_Q5_K) {
      const FuseQBytes8 qh = fuse_q_load8<8>(b + 16 + l);
      o.lo[0] |= ((qh.lo >> (2 * c)) & 0x01010101u) << 4, o.hi[0] |= ((qh.hi >> (2 * c)) & 0x01010101u) << 4;
      o.lo[1] |= ((qh.lo >> (2 * c + 1)) & 0x01010101u) << 4, o.hi[1] |= ((qh.hi >> (2 * c + 1)) & 0x01010101u) << 4;
    }
  } else {
    static_assert(Q == FUSE_Q6_K, "a block type code (FUSE_Q4_0 .. FUSE_Q6_K)");
    // Half n, ql bytes 32t + l .. +7: low nibbles quarter t, high nibbles quarter t + 2; qh bits 2t and 2t + 4.
    const int n = u >> 3, t = (u >> 2) & 1, l = 8 * (u & 3);
    const FuseQBytes8 ql = fuse_q_load8<A>(b + 64 * n + 32 * t + l);
    const FuseQBytes8 qh = fuse_q_load8<A>(b + 128 + 32 * n + l);
    const float d = fuse_q_half(b + 208);
    const signed char* scales = (const signed char*)(b + 192 + 8 * n + (l >> 4));
    o.scale[0] = d * (float)scales[2 * t];
    o.scale[1] = d * (float)scales[2 * t + 4];
    o.offset[0] = o.offset[1] = 0.0f;
    o.lo[0] = (ql.lo & 0x0f0f0f0fu) | (((qh.lo >> (2 * t)) & 0x03030303u) << 4);
    o.hi[0] = (ql.hi & 0x0f0f0f0fu) | (((qh.hi >> (2 * t)) & 0x03030303u) << 4);
    o.lo[1] = ((ql.lo >> 4) & 0x0f0f0f0fu) | (((qh.lo >> (2 * t + 4)) & 0x03030303u) << 4);
    o.hi[1] = ((ql.hi >> 4) & 0x0f0f0f0fu) | (((qh.hi >> (2 * t + 4)) & 0x03030303u) << 4);
  }
  return o;
}
// Run h's 8 integer parts of a unit (exact, in f32).
template <int Q> __device__ __forceinline__ void fuse_q_run_ints(const FuseQUnit& o, int h, float (&q)[8]) {
  constexpr int bias = fuse_q_bias<Q>();
  const unsigned lo = h ? o.lo[1] : o.lo[0], hi = h ? o.hi[1] : o.hi[0];
  q[0] = fuse_q_byte_int<0>(lo, bias), q[1] = fuse_q_byte_int<1>(lo, bias);
  q[2] = fuse_q_byte_int<2>(lo, bias), q[3] = fuse_q_byte_int<3>(lo, bias);
  q[4] = fuse_q_byte_int<0>(hi, bias), q[5] = fuse_q_byte_int<1>(hi, bias);
  q[6] = fuse_q_byte_int<2>(hi, bias), q[7] = fuse_q_byte_int<3>(hi, bias);
}

// Values off .. off+7 of the tensor of type Q whose first block is at `base` (off % 8 == 0: the 8 lie in one
// block) into w.
template <int Q> __device__ __forceinline__ void fuse_q_decode8(const unsigned char* base, long long off, float (&w)[8]) {
  constexpr int B = fuse_q_values<Q>();
  float q[8], scale, offset;
  fuse_q_ints8<Q>(base + (off / B) * fuse_q_bytes<Q>(), (int)(off % B), q, scale, offset);
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = scale * q[i] + offset;
}

// One value (element `off`) of the tensor of type Q whose first block is at `base`.
template <int Q> __device__ __forceinline__ float fuse_q_value(const unsigned char* base, long long off) {
  float w[8];
  fuse_q_decode8<Q>(base, off & ~7ll, w);
  float v = w[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) v = (off & 7) == i ? w[i] : v;
  return v;
}

#endif  // FUSE_BLOCKS_ONCE
