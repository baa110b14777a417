//! The CUDA C every kernel starts with: the argument structs of the kernel ABI, f16/bf16 conversions, typed
//! loads and stores selected by the `-DFUSE_IN<k>`/`-DFUSE_OUT<k>` defines, index arithmetic, and block
//! reductions. Self-contained: no `#include`, so NVRTC needs no CUDA headers and compiles fast.
//!
//! Loops over slots and axes are fully unrolled so every access to the by-value `FuseArgs` parameter has a
//! constant offset (a dynamic index would copy the whole struct to local memory).

/// Block size every kernel is written for (pointwise: any grid of such blocks; row reductions: one per row).
pub const BLOCK_THREADS: u32 = 256;

/// Elements per thread and step on the `FUSE_CONTIGUOUS` path: 16 bytes of f16/bf16, two 16-byte f32 loads.
pub const VECTOR_ELEMENTS: u32 = 8;

pub(super) const PRELUDE: &str = r#"#ifndef FUSE_NIN
#error "fuse: compile with -DFUSE_NIN=<inputs> -DFUSE_NOUT=<outputs> and the FUSE_IN<k>/FUSE_OUT<k> dtype codes"
#endif
#ifndef FUSE_CONTIGUOUS
#define FUSE_CONTIGUOUS 0
#endif
#define FUSE_MAX_RANK 6
#define FUSE_F32 0
#define FUSE_F16 1
#define FUSE_BF16 2
#define FUSE_SCALAR 3

struct FuseIn { const void* ptr; long long strides[FUSE_MAX_RANK]; double scalar; };
struct FuseOut { void* ptr; long long strides[FUSE_MAX_RANK]; };
struct FuseArgs {
  long long sizes[FUSE_MAX_RANK];
  long long numel;
  long long rank;
  FuseIn in[FUSE_NIN];
  FuseOut out[FUSE_NOUT];
};
struct alignas(16) FuseVec16 { unsigned int w[4]; };

// bf16 is the high half of an f32; rounding to nearest even by bit arithmetic, NaN kept quiet.
__device__ __forceinline__ float fuse_bf16_to_f32(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }
__device__ __forceinline__ unsigned short fuse_f32_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float fuse_f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short fuse_f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
// `x.to_dtype(..)` inside a kernel: the value as that dtype would store it.
__device__ __forceinline__ float fuse_round_f16(float f) { return fuse_f16_to_f32(fuse_f32_to_f16(f)); }
__device__ __forceinline__ float fuse_round_bf16(float f) { return fuse_bf16_to_f32(fuse_f32_to_bf16(f)); }

template <int D> __device__ __forceinline__ float fuse_unpack(unsigned short h) {
  if constexpr (D == FUSE_F16) return fuse_f16_to_f32(h); else return fuse_bf16_to_f32(h);
}
template <int D> __device__ __forceinline__ unsigned short fuse_pack(float f) {
  if constexpr (D == FUSE_F16) return fuse_f32_to_f16(f); else return fuse_f32_to_bf16(f);
}

// One element of input slot (dtype code D) at element offset `off`; a scalar ignores the offset.
template <int D> __device__ __forceinline__ float fuse_read(const FuseIn& in, long long off) {
  if constexpr (D == FUSE_SCALAR) return (float)in.scalar;
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

// 1 / (1 + exp(-x)) from the hardware's exp2 and reciprocal approximations (relative error ~1e-7 but for
// |x| in the tens, ~1e-6): expf and an IEEE division cost ~30 instructions, which made the SwiGLU epilogue
// kernel over a [256, 14336] product compute-bound (ncu on an H200: 11.3 us, 27% of DRAM bandwidth).
// exp(-x) overflowing to inf gives 0, so silu(x) = x * sigmoid(x) is -0 for very negative x, as the
// reference's x / (1 + inf) is.
__device__ __forceinline__ float fuse_sigmoid(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
}

// Programmatic dependent launch (sm_90 and later): the runtime may launch a kernel while the kernel before it
// in the stream is still running. fuse_grid_wait() returns once that kernel has completed and its writes are
// visible (at once when the launch did not overlap); every kernel calls it before it reads a tensor or writes
// anything, so only L2 prefetches may come before it. fuse_grid_release() lets the next kernel launch as this
// one's blocks finish.
__device__ __forceinline__ void fuse_grid_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void fuse_grid_release() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Block reductions in a fixed tree order (deterministic). Every thread gets the result. The leading barrier
// keeps `smem` from being overwritten while an earlier reduction's warps still read it.
__device__ __forceinline__ float fuse_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float fuse_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float fuse_block_sum(float v, float* smem) {
  v = fuse_warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  const unsigned int lane = threadIdx.x & 31;
  return fuse_warp_sum(lane < ((blockDim.x + 31) >> 5) ? smem[lane] : 0.0f);
}
__device__ __forceinline__ float fuse_block_max(float v, float* smem) {
  v = fuse_warp_max(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  const unsigned int lane = threadIdx.x & 31;
  return fuse_warp_max(lane < ((blockDim.x + 31) >> 5) ? smem[lane] : -__int_as_float(0x7f800000));
}
"#;
