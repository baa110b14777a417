// fuse's CUDA prelude: the device helpers every kernel source fuse builds starts with (the generated kernels,
// the GEMM templates, the model-op kernels), exported as `fuse_ir::codegen::CUDA_PRELUDE` so that a model
// crate's own kernel can start with it too. It holds:
//   - the element-type codes the kernels' `-D` defines use, and f32 <-> f16 / bf16 conversions;
//   - warp and block reductions in a fixed order (deterministic);
//   - programmatic dependent launch: waiting for the kernel before and releasing the one after (sm_90);
//   - small math (a fast, stable sigmoid);
//   - the sm_80 instructions more than one kernel wraps: shared-memory addresses, cp.async, ld.global.cg and
//     the tensor cores' mma.sync m16n8k16.
// The sm_90 instructions (mbarriers, clusters, bulk copies, st.async) are in sm90.cuh (`SM90_HEADER`).
//
// Self-contained (it includes nothing), so NVRTC compiles it as it is, without CUDA headers. Naming: every
// function is `fuse_<what>` and every macro `FUSE_<WHAT>`; a kernel's own helpers add its part (`fuse_model_*`,
// `fuse_sk_*`, `fuse_wg_*`, `fuse_mm_*`), so they never collide with these. A helper that wraps an instruction
// needs the arch that instruction needs only where it is called (an unused inline function emits no PTX).
// Helpers that take a global pointer are templates on its pointee, so that callers' pointers reach the
// instruction unconverted.
#ifndef FUSE_PRELUDE_ONCE
#define FUSE_PRELUDE_ONCE

// ---- kernel entries -----------------------------------------------------------------------------------------

// Every kernel's entry is written `FUSE_KERNEL(threads[, min blocks]) name(FUSE_KERNEL_PARAM(Args) a)`: an
// extern "C" kernel taking its arguments by value; or, where the source is compiled as a task of a one-launch
// step (`FUSE_TASK` defined: fuse-ir's codegen/one_launch.rs), a device function the step's tasks call with
// the arguments in memory. Called, not inlined, by default (with 15 task kernels, inlined into the step's
// dispatch they spilled 204 / 260 bytes, called none). But ptxas gives the called bodies of one step disjoint
// bands of registers beside a shared few (forty-fifth session, SASS: 4 copies of one streaming body, each 48 of
// its own), so each body's share shrinks as the step holds more kernels: one body alone in a step takes 151
// registers, 4 copies spill 60-108 bytes each, 8 copies 144; inlined, 148 registers and no spill at any count
// (with 17 task kernels tests/one_launch_compile.rs' step spills 552 / 680 bytes called, 208 / 280 inlined;
// 540 / 672 and 264 / 340 with the launch table and arguments in shared memory).
// -DFUSE_STEP_INLINE_TASKS (the runtime's FUSE_STEP_INLINE) inlines them.
#if defined(FUSE_TASK)
#if defined(FUSE_STEP_INLINE_TASKS)
#define FUSE_KERNEL(...) static __device__ __forceinline__ void
#else
#define FUSE_KERNEL(...) static __device__ __noinline__ void
#endif
#define FUSE_KERNEL_PARAM(T) const T&
#else
#define FUSE_KERNEL(...) extern "C" __global__ void __launch_bounds__(__VA_ARGS__)
#define FUSE_KERNEL_PARAM(T) const T
#endif

// ---- element types ------------------------------------------------------------------------------------------

// The codes of the float element types in every kernel's defines (FUSE_IN<k>, FUSE_MODEL_DTYPE, FUSE_SK_DT ...).
#define FUSE_F32 0
#define FUSE_F16 1
#define FUSE_BF16 2

// bf16 is the high half of an f32; rounding to nearest even by bit arithmetic, NaN kept quiet with its payload:
// the CPU backend's rounding bit for bit, on any arch.
__device__ __forceinline__ float fuse_bf16_to_f32(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }
__device__ __forceinline__ unsigned short fuse_f32_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
// The same rounding in one instruction (sm_80 and later), for kernels that need sm_80 anyway; a NaN becomes the
// canonical 0x7fff.
__device__ __forceinline__ unsigned short fuse_f32_to_bf16_cvt(float f) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
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

// A 16-bit element of type D (FUSE_F16 or FUSE_BF16) as f32, and back.
template <int D> __device__ __forceinline__ float fuse_unpack(unsigned short h) {
  if constexpr (D == FUSE_F16) return fuse_f16_to_f32(h); else return fuse_bf16_to_f32(h);
}
template <int D> __device__ __forceinline__ unsigned short fuse_pack(float f) {
  if constexpr (D == FUSE_F16) return fuse_f32_to_f16(f); else return fuse_f32_to_bf16(f);
}
// Two f32 as a pair of type D in one word (`lo` in the low half), rounded to nearest even in one instruction
// (sm_80 and later; a NaN becomes canonical).
template <int D> __device__ __forceinline__ unsigned int fuse_pack2_cvt(float lo, float hi) {
  unsigned int w;
  if (D == FUSE_BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
// The two bf16 of a word as f32: the low half, the high half.
__device__ __forceinline__ float fuse_bf16x2_lo(unsigned int w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float fuse_bf16x2_hi(unsigned int w) { return __uint_as_float(w & 0xffff0000u); }

// ---- reductions ---------------------------------------------------------------------------------------------

// torch's maximum and minimum: NaN when either operand is NaN (fmaxf and fminf return the other one); one
// instruction on sm_80 and later.
__device__ __forceinline__ float fuse_max(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
#else
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
#endif
}
__device__ __forceinline__ float fuse_min(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float d;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
#else
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : fminf(a, b);
#endif
}

// Warp-wide sum, max and min in a fixed butterfly order: every lane gets the same result; max and min keep a
// NaN as torch does.
__device__ __forceinline__ float fuse_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float fuse_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fuse_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float fuse_warp_min(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fuse_min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum, max and min in a fixed tree order (deterministic), `smem` holding a float per warp; every
// thread gets the result. The leading barrier keeps `smem` from being overwritten while an earlier reduction's
// warps still read it. (Three copies of one shape rather than a template over the warp reduction: the sum's and
// the max's code stays what every kernel was measured and sanitized with.)
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
__device__ __forceinline__ float fuse_block_min(float v, float* smem) {
  v = fuse_warp_min(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  const unsigned int lane = threadIdx.x & 31;
  return fuse_warp_min(lane < ((blockDim.x + 31) >> 5) ? smem[lane] : __int_as_float(0x7f800000));
}

// ---- grid dependency ----------------------------------------------------------------------------------------

// Programmatic dependent launch (sm_90 and later): the runtime may launch a kernel while the kernel before it
// in the stream is still running. fuse_grid_wait() returns once that kernel has completed and its writes are
// visible (at once when the launch did not overlap); every kernel calls it before it reads a tensor or writes
// anything, so only L2 prefetches may come before it. fuse_grid_release() lets the next kernel launch as this
// one's blocks finish. Both are no-ops below sm_90.
// As a task of a one-launch step (FUSE_TASK), the step's own wait for the kernel before, and no release.
__device__ __forceinline__ void fuse_grid_wait() {
#if defined(FUSE_TASK)
  fuse_task_wait();
#elif __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void fuse_grid_release() {
#if !defined(FUSE_TASK) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// FUSE_TASK_MARK(n), n in 0..2: as a task of a one-launch step built with FUSE_STEP_TRACE, thread 0 stamps the
// time it passes there (one_launch.cuh's fuse_task_mark: where a task's time goes inside its kernel); nothing
// otherwise.
#if defined(FUSE_TASK) && defined(FUSE_STEP_TRACE)
#define FUSE_TASK_MARK(n) fuse_task_mark(n)
#else
#define FUSE_TASK_MARK(n) ((void)0)
#endif

// ---- math ---------------------------------------------------------------------------------------------------

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

// ---- memory and tensor cores (sm_80) ------------------------------------------------------------------------

// A shared-memory pointer as the 32-bit address the shared-memory instructions take. The compiler's own
// conversion, not an asm cvta: it knows the result is the pointer's offset in shared memory, so addresses of
// shared arrays fold into 32-bit constants (an asm block kept each one a 64-bit cvta and 64-bit arithmetic).
__device__ __forceinline__ unsigned fuse_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// 16 bytes global -> shared at `dst` (a fuse_smem_addr), past L1 (cp.async.cg); nbytes = 0 fills zeros. PF is
// the L2 prefetch hint: 0 none, 1 .L2::128B, 2 .L2::256B. `src` may point to any type (T is deduced): a
// conversion to void* would move instructions around the copy in the PTX.
template <int PF, class T>
__device__ __forceinline__ void fuse_cp_async16(unsigned dst, const T* src, unsigned nbytes) {
  if (PF == 2)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(nbytes) : "memory");
  else if (PF == 1)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(nbytes) : "memory");
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(nbytes) : "memory");
}
// Closes this thread's group of cp.async copies; waits until at most N of its groups are in flight.
__device__ __forceinline__ void fuse_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void fuse_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// A float another block wrote, read past L1 (which may hold a stale line of it).
__device__ __forceinline__ float fuse_ld_cg(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}
// c += A B on the tensor cores, one m16n8k16 tile of type DT (FUSE_BF16 or FUSE_F16), f32 accumulators; a0..a3
// and b0, b1 are the fragments' registers in mma.sync's order.
template <int DT>
__device__ __forceinline__ void fuse_mma_m16n8k16(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                  unsigned b0, unsigned b1) {
  if (DT == FUSE_BF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

#endif  // FUSE_PRELUDE_ONCE
