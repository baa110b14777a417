// What the model-op kernels (embedding, argmax, rope, attention, cat) share beyond the CUDA prelude that comes
// before this file (codegen/cuda/prelude.cuh: conversions, reductions, grid dependency): the element type chosen
// by -DFUSE_MODEL_DTYPE (0 f32, 1 f16, 2 bf16: the prelude's codes; 3 u32), f32 loads and stores of it, the
// padded 6-axis layout of a strided operand, and fault reporting. Includes nothing: `ModelKernel::source`
// concatenates the prelude, this file and the kernel's own. Every argument struct holds 8-byte words only, so
// the host packs it as a plain array of u64 (see fuse-runtime's cuda/exec/model.rs).
#ifndef FUSE_MODEL_DTYPE
#error "fuse: compile the model kernels with -DFUSE_MODEL_DTYPE=<0 f32, 1 f16, 2 bf16, 3 u32>"
#endif
#define FUSE_MODEL_RANK 6

#if FUSE_MODEL_DTYPE == FUSE_F32 || FUSE_MODEL_DTYPE == 3
typedef unsigned int fuse_elem;
#else
typedef unsigned short fuse_elem;
#endif

// A 16-bit element's bits (f16 or bf16, in the low half of `bits`) as f32, widened exactly.
__device__ __forceinline__ float fuse_model_widen(unsigned int bits) {
#if FUSE_MODEL_DTYPE == FUSE_F16
  return fuse_f16_to_f32((unsigned short)bits);
#else
  return fuse_bf16x2_lo(bits);
#endif
}

// An element's bits as f32 (f16/bf16 widened exactly; u32 is never read as a number).
__device__ __forceinline__ float fuse_model_float(unsigned int bits) {
#if FUSE_MODEL_DTYPE == FUSE_F32
  return __uint_as_float(bits);
#else
  return fuse_model_widen(bits);
#endif
}

__device__ __forceinline__ float fuse_model_load(const fuse_elem* p, long long i) {
  return fuse_model_float((unsigned int)p[i]);
}

// f32 rounded to nearest even in the element type, as the CPU backend rounds (a NaN's payload aside): the
// element's bits.
__device__ __forceinline__ unsigned int fuse_model_narrow(float f) {
#if FUSE_MODEL_DTYPE == FUSE_F32
  return __float_as_uint(f);
#elif FUSE_MODEL_DTYPE == FUSE_F16
  return fuse_f32_to_f16(f);
#else
  return fuse_f32_to_bf16_cvt(f);
#endif
}

// Stores f32 rounded to the element type (fuse_model_narrow).
__device__ __forceinline__ void fuse_model_store(fuse_elem* p, long long i, float f) {
  p[i] = (fuse_elem)fuse_model_narrow(f);
}

// A strided operand of up to 6 axes, padded in front with axes of size 1: element offsets of linear
// (row-major) indices. The loops are unrolled so each field has a constant offset in the parameter.
struct FuseLayout { long long sizes[FUSE_MODEL_RANK]; long long strides[FUSE_MODEL_RANK]; };

__device__ __forceinline__ long long fuse_layout_offset(const FuseLayout& l, long long linear) {
  long long offset = 0;
#pragma unroll
  for (int a = FUSE_MODEL_RANK - 1; a >= 0; --a) {
    const long long size = l.sizes[a];
    offset += (linear % size) * l.strides[a];
    linear /= size;
  }
  return offset;
}

// A check on data only the GPU holds failed (an id past the table, a position past the end): the first
// such fault on the device is kept in its record (code, value, limit; see fuse-runtime's
// `CudaDevice::fault_address`), which the host reports at its next synchronisation. The caller skips the
// access. A null record means the host checked already.
__device__ __forceinline__ void fuse_model_fault(unsigned long long* fault, unsigned int code, unsigned long long value,
                                                 unsigned long long limit) {
  if (fault != 0 && atomicCAS(fault, 0ull, (unsigned long long)code) == 0ull) {
    fault[1] = value;
    fault[2] = limit;
  }
}

// attention_len's key counts checked as the CPU checks them (fuse-ir's check_key_count), by the first block
// once the kernel before has written them: a count above the `keys` k and v hold (code 3), or under causal
// below the `queries` (code 4), is recorded (the kernels then clamp it, and the host reports the fault).
// The decode attention kernel uses every register it has: it calls this not inlined, before its work. The
// prefill kernel, at its register limit in every build (it spills with this even inlined after its work),
// clamps its counts: check_lens.cu runs this in a launch of its own before it.
__device__ __noinline__ void fuse_model_check_lens(const unsigned int* lens, long long stride, long long batch,
                                                      unsigned int keys, unsigned int queries, bool causal,
                                                      unsigned long long* fault) {
  for (long long b = threadIdx.x; b < batch; b += blockDim.x) {
    const unsigned int n = __ldg(lens + b * stride);
    if (n > keys) {
      fuse_model_fault(fault, 3, n, keys);
    } else if (causal && n < queries) {
      fuse_model_fault(fault, 4, n, queries);
    }
  }
}

// Every model kernel's first statement: wait for the kernel before it (the host may launch a model kernel while
// that one still runs; see the prelude's fuse_grid_wait), then let the next kernel launch early, so that its
// set-up overlaps this one's work.
__device__ __forceinline__ void fuse_model_grid_sync() {
  fuse_grid_wait();
  fuse_grid_release();
}
