// dequantize(blocks) -> out: values [0, count) of a tensor of quantized blocks (FUSE_MODEL_DTYPE: its type's
// code) as dense elements of type FUSE_DEQUANT_OUT (the prelude's FUSE_F32, FUSE_F16 or FUSE_BF16), eight values
// a thread and step (grid-stride). count is whole blocks; `out` is a fresh allocation (16-byte aligned).
// Where a matmul's weight is quantized and cuBLAS computes it, and for an eager `to_dtype` of a whole tensor.
#ifndef FUSE_DEQUANT_OUT
#define FUSE_DEQUANT_OUT FUSE_BF16
#endif
struct FuseDequantizeArgs {
  const unsigned char* blocks;
  void* out;
  long long count;
};

FUSE_KERNEL(256) fuse_model_dequantize(FUSE_KERNEL_PARAM(FuseDequantizeArgs) a) {
  fuse_model_grid_sync();
  const long long step = 8ll * gridDim.x * blockDim.x;
  for (long long i = 8ll * ((long long)blockIdx.x * blockDim.x + threadIdx.x); i < a.count; i += step) {
    float w[8];
    fuse_q_decode8<FUSE_MODEL_DTYPE>(a.blocks, i, w);
#if FUSE_DEQUANT_OUT == FUSE_F32
    float4* o = (float4*)((float*)a.out + i);
    o[0] = make_float4(w[0], w[1], w[2], w[3]);
    o[1] = make_float4(w[4], w[5], w[6], w[7]);
#else
    uint4 v;
    v.x = fuse_pack2_cvt<FUSE_DEQUANT_OUT>(w[0], w[1]);
    v.y = fuse_pack2_cvt<FUSE_DEQUANT_OUT>(w[2], w[3]);
    v.z = fuse_pack2_cvt<FUSE_DEQUANT_OUT>(w[4], w[5]);
    v.w = fuse_pack2_cvt<FUSE_DEQUANT_OUT>(w[6], w[7]);
    *(uint4*)((unsigned short*)a.out + i) = v;
#endif
  }
}
