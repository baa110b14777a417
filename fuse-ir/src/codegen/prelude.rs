//! The CUDA C every generated kernel starts with: the shared CUDA prelude (`cuda/prelude.cuh`: conversions,
//! reductions, grid dependency, the sigmoid), then what only generated kernels have: the argument structs of the
//! kernel ABI, typed loads and stores selected by the `-DFUSE_IN<k>`/`-DFUSE_OUT<k>` defines, and index
//! arithmetic. Self-contained: no `#include`, so NVRTC needs no CUDA headers and compiles fast.
//!
//! Loops over slots and axes are fully unrolled so every access to the by-value `FuseArgs` parameter has a
//! constant offset (a dynamic index would copy the whole struct to local memory).

/// Block size every kernel is written for (pointwise: any grid of such blocks; row reductions: one per row).
pub const BLOCK_THREADS: u32 = 256;

/// Elements per thread and step on the `FUSE_CONTIGUOUS` path: 16 bytes of f16/bf16, two 16-byte f32 loads.
pub const VECTOR_ELEMENTS: u32 = 8;

pub(super) const PRELUDE: &str = concat!(
    include_str!("cuda/prelude.cuh"),
    include_str!("cuda/blocks.cuh"),
    r#"
#ifndef FUSE_NIN
#error "fuse: compile with -DFUSE_NIN=<inputs> -DFUSE_NOUT=<outputs> and the FUSE_IN<k>/FUSE_OUT<k> dtype codes"
#endif
#ifndef FUSE_CONTIGUOUS
#define FUSE_CONTIGUOUS 0
#endif
#define FUSE_MAX_RANK 6
// A slot's dtype code (FUSE_IN<k>): the prelude's FUSE_F32, FUSE_F16, FUSE_BF16, or a scalar argument.
#define FUSE_SCALAR 3

struct FuseIn { const void* ptr; long long strides[FUSE_MAX_RANK]; double scalar; };
struct FuseOut { void* ptr; long long strides[FUSE_MAX_RANK]; };
struct FuseArgs {
  long long sizes[FUSE_MAX_RANK];
  long long numel;
  long long rank;
  FuseIn in[FUSE_NIN];
  FuseOut out[FUSE_NOUT];
#if defined(FUSE_GEMM_PRODUCTS)
  long long product;  // a horizontal GEMM group's: the product whose epilogue this block runs
#endif
};
struct alignas(16) FuseVec16 { unsigned int w[4]; };

// One element of input slot (dtype code D) at element offset `off`; a scalar ignores the offset. A slot of
// quantized blocks (D >= FUSE_Q4_0) is decoded here: element `off` of its tensor, whatever view reads it.
template <int D> __device__ __forceinline__ float fuse_read(const FuseIn& in, long long off) {
  if constexpr (D == FUSE_SCALAR) return (float)in.scalar;
  else if constexpr (D >= FUSE_Q4_0) return fuse_q_value<D>((const unsigned char*)in.ptr, off);
  else if constexpr (D == FUSE_F32) return ((const float*)in.ptr)[off];
  else return fuse_unpack<D>(((const unsigned short*)in.ptr)[off]);
}
template <int D> __device__ __forceinline__ void fuse_write(const FuseOut& out, long long off, float v) {
  if constexpr (D == FUSE_F32) ((float*)out.ptr)[off] = v;
  else ((unsigned short*)out.ptr)[off] = fuse_pack<D>(v);
}

// Eight consecutive elements from element `i` (a multiple of 8 of a 16-byte-aligned buffer).
template <int D> __device__ __forceinline__ void fuse_read8(const FuseIn& in, long long i, float (&v)[8]) {
  if constexpr (D == FUSE_SCALAR) {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = (float)in.scalar;
  } else if constexpr (D >= FUSE_Q4_0) {
    fuse_q_decode8<D>((const unsigned char*)in.ptr, i, v);
  } else if constexpr (D == FUSE_F32) {
    const FuseVec16* p = (const FuseVec16*)((const float*)in.ptr + i);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const FuseVec16 q = p[h];
#pragma unroll
      for (int e = 0; e < 4; ++e) v[4 * h + e] = __uint_as_float(q.w[e]);
    }
  } else {
    const FuseVec16 q = *(const FuseVec16*)((const unsigned short*)in.ptr + i);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[2 * e] = fuse_unpack<D>((unsigned short)(q.w[e] & 0xffffu));
      v[2 * e + 1] = fuse_unpack<D>((unsigned short)(q.w[e] >> 16));
    }
  }
}
template <int D> __device__ __forceinline__ void fuse_write8(const FuseOut& out, long long i, const float (&v)[8]) {
  if constexpr (D == FUSE_F32) {
    FuseVec16* p = (FuseVec16*)((float*)out.ptr + i);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      FuseVec16 q;
#pragma unroll
      for (int e = 0; e < 4; ++e) q.w[e] = __float_as_uint(v[4 * h + e]);
      p[h] = q;
    }
  } else {
    FuseVec16 q;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      q.w[e] = (unsigned int)fuse_pack<D>(v[2 * e]) | ((unsigned int)fuse_pack<D>(v[2 * e + 1]) << 16);
    }
    *(FuseVec16*)((unsigned short*)out.ptr + i) = q;
  }
}

// Element offsets of every slot for the domain's linear (row-major) index `i`.
__device__ __forceinline__ void fuse_offsets(const FuseArgs& args, long long i, long long (&oi)[FUSE_NIN],
                                             long long (&oo)[FUSE_NOUT]) {
#pragma unroll
  for (int k = 0; k < FUSE_NIN; ++k) oi[k] = 0;
#pragma unroll
  for (int k = 0; k < FUSE_NOUT; ++k) oo[k] = 0;
  long long rest = i;
#pragma unroll
  for (int d = FUSE_MAX_RANK - 1; d >= 0; --d) {
    if (d < args.rank) {
      // The outermost axis takes what is left: no division (a rank-2 domain divides nothing).
      const long long size = args.sizes[d];
      const long long c = d == 0 ? rest : rest % size;
      if (d > 0) rest /= size;
#pragma unroll
      for (int k = 0; k < FUSE_NIN; ++k) oi[k] += c * args.in[k].strides[d];
#pragma unroll
      for (int k = 0; k < FUSE_NOUT; ++k) oo[k] += c * args.out[k].strides[d];
    }
  }
}

// Rows: the domain without its last axis. Length of a row, and number of rows (1 for a 0-d domain).
__device__ __forceinline__ long long fuse_row_length(const FuseArgs& args) {
  long long n = 1;
#pragma unroll
  for (int d = 0; d < FUSE_MAX_RANK; ++d) if (d == args.rank - 1) n = args.sizes[d];
  return n;
}
__device__ __forceinline__ long long fuse_row_count(const FuseArgs& args) {
  long long rows = 1;
#pragma unroll
  for (int d = 0; d < FUSE_MAX_RANK; ++d) if (d < args.rank - 1) rows *= args.sizes[d];
  return rows;
}
// Offset of each slot's first element of row `row`, and its stride along the row.
__device__ __forceinline__ void fuse_row_offsets(const FuseArgs& args, long long row, long long (&bi)[FUSE_NIN],
                                                 long long (&si)[FUSE_NIN], long long (&bo)[FUSE_NOUT],
                                                 long long (&so)[FUSE_NOUT]) {
#pragma unroll
  for (int k = 0; k < FUSE_NIN; ++k) { bi[k] = 0; si[k] = 0; }
#pragma unroll
  for (int k = 0; k < FUSE_NOUT; ++k) { bo[k] = 0; so[k] = 0; }
  long long rest = row;
#pragma unroll
  for (int d = FUSE_MAX_RANK - 1; d >= 0; --d) {
    if (d == args.rank - 1) {
#pragma unroll
      for (int k = 0; k < FUSE_NIN; ++k) si[k] = args.in[k].strides[d];
#pragma unroll
      for (int k = 0; k < FUSE_NOUT; ++k) so[k] = args.out[k].strides[d];
    } else if (d < args.rank - 1) {
      // The outermost axis takes what is left: no division (a rank-2 domain divides nothing).
      const long long size = args.sizes[d];
      const long long c = d == 0 ? rest : rest % size;
      if (d > 0) rest /= size;
#pragma unroll
      for (int k = 0; k < FUSE_NIN; ++k) bi[k] += c * args.in[k].strides[d];
#pragma unroll
      for (int k = 0; k < FUSE_NOUT; ++k) bo[k] += c * args.out[k].strides[d];
    }
  }
}
"#
);
