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
// Byte i (0..7) of the 8.
__device__ __forceinline__ unsigned fuse_q_byte(const FuseQBytes8& b, int i) {
  return ((i < 4 ? b.lo : b.hi) >> (8 * (i & 3))) & 0xffu;
}
// The f16 at `p` (2-byte aligned) as f32.
__device__ __forceinline__ float fuse_q_half(const unsigned char* p) { return fuse_f16_to_f32(*(const unsigned short*)p); }
// A small unsigned integer v (< 2^23) minus `bias`, as f32, exactly: v placed in the mantissa of 2^23, then
// 2^23 + bias taken off (two instructions; an int-to-float conversion runs at a quarter of the FMA rate).
__device__ __forceinline__ float fuse_q_int(unsigned v, int bias) {
  return __uint_as_float(0x4b000000u | v) - (8388608.0f + (float)bias);
}
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

// Values off .. off+7 of the tensor of type Q whose first block is at `base` (off % 8 == 0: the 8 lie in one
// block) into w.
template <int Q> __device__ __forceinline__ void fuse_q_decode8(const unsigned char* base, long long off, float (&w)[8]) {
  constexpr int B = fuse_q_values<Q>(), A = fuse_q_align<Q>();
  const unsigned char* b = base + (off / B) * fuse_q_bytes<Q>();
  const int j = (int)(off % B);
  if constexpr (Q == FUSE_Q4_0 || Q == FUSE_Q4_1 || Q == FUSE_Q5_0 || Q == FUSE_Q5_1) {
    // d (and m) first; Q5 then the 32 fifth bits (bit e for value e); 16 bytes whose low nibbles are values
    // 0..15 and high nibbles 16..31.
    constexpr bool has_min = Q == FUSE_Q4_1 || Q == FUSE_Q5_1, five = Q == FUSE_Q5_0 || Q == FUSE_Q5_1;
    constexpr int qs = (has_min ? 4 : 2) + (five ? 4 : 0);
    const float d = fuse_q_half(b);
    const float m = has_min ? fuse_q_half(b + 2) : 0.0f;
    const FuseQBytes8 q = fuse_q_load8<A>(b + qs + (j & 15));
    const int shift = j >= 16 ? 4 : 0;
    unsigned high = 0;
    if constexpr (five) {
      const unsigned short* h = (const unsigned short*)(b + (has_min ? 4 : 2));
      high = (h[0] | ((unsigned)h[1] << 16)) >> j;
    }
    constexpr int bias = has_min ? 0 : (five ? 16 : 8);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      unsigned v = (fuse_q_byte(q, i) >> shift) & 15u;
      if constexpr (five) v |= ((high >> i) & 1u) << 4;
      if constexpr (has_min) w[i] = fuse_q_int(v, 0) * d + m;
      else w[i] = fuse_q_int(v, bias) * d;
    }
  } else if constexpr (Q == FUSE_Q8_0) {
    const float d = fuse_q_half(b);
    const FuseQBytes8 q = fuse_q_load8<A>(b + 2 + j);
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = fuse_q_int(fuse_q_byte(q, i) ^ 0x80u, 128) * d;
  } else if constexpr (Q == FUSE_Q4_K || Q == FUSE_Q5_K) {
    // Four chunks of 64 values: 32 bytes of nibbles, low nibbles the chunk's first 32 values (group 2c), high
    // nibbles its second (2c + 1); Q5_K's fifth bits are bits 2c and 2c + 1 of each of qh's 32 bytes.
    const int c = j >> 6, h = (j >> 5) & 1, l = j & 31;
    unsigned sc, mn;
    fuse_q_scale_min_k4(b + 4, 2 * c + h, sc, mn);
    const float d = fuse_q_half(b) * (float)sc, dmin = fuse_q_half(b + 2) * (float)mn;
    constexpr int qs = Q == FUSE_Q5_K ? 48 : 16;
    const FuseQBytes8 q = fuse_q_load8<8>(b + qs + 32 * c + l);
    FuseQBytes8 qh{0, 0};
    if constexpr (Q == FUSE_Q5_K) qh = fuse_q_load8<8>(b + 16 + l);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      unsigned v = (fuse_q_byte(q, i) >> (4 * h)) & 15u;
      if constexpr (Q == FUSE_Q5_K) v |= ((fuse_q_byte(qh, i) >> (2 * c + h)) & 1u) << 4;
      w[i] = d * fuse_q_int(v, 0) - dmin;
    }
  } else {
    static_assert(Q == FUSE_Q6_K, "a block type code (FUSE_Q4_0 .. FUSE_Q6_K)");
    // Two halves of 128 values: 64 bytes of low nibbles (ql), 32 of 2-bit high parts (qh), 8 signed scales;
    // quarter t of a half: ql bytes 32 * (t & 1) on, nibble t >> 1, qh bits 2t, scale 2t + l / 16.
    const int n = j >> 7, t = (j >> 5) & 3, l = j & 31;
    const FuseQBytes8 ql = fuse_q_load8<A>(b + 64 * n + 32 * (t & 1) + l);
    const FuseQBytes8 qh = fuse_q_load8<A>(b + 128 + 32 * n + l);
    const float ds = fuse_q_half(b + 208) * (float)(signed char)b[192 + 8 * n + 2 * t + (l >> 4)];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const unsigned v = ((fuse_q_byte(ql, i) >> (4 * (t >> 1))) & 15u) | (((fuse_q_byte(qh, i) >> (2 * t)) & 3u) << 4);
      w[i] = ds * fuse_q_int(v, 32);
    }
  }
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
