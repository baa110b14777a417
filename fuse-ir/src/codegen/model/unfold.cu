// unfold(x, w, padding, stride, dilation, groups) -> the columns [groups, b, oh, ow, kc] of a convolution
// (fuse-ir's model_op/unfold.rs: a 1-D one is one row, h = kh = 1): one thread per column element
// (grid-stride), each the x element its receptive field puts there, or 0 in the padding. x may be strided.
struct FuseUnfoldArgs {
  const fuse_elem* x;
  fuse_elem* out;
  long long count;
  long long batch;
  long long channels;
  long long groups;
  long long in_h, in_w;
  long long kernel_h, kernel_w;
  long long out_h, out_w;
  long long pad_h, pad_w;
  long long stride_h, stride_w;
  long long dilation;
  long long x_strides[4];  // b, c, h, w (h: 0 for a 1-D x)
};

FUSE_KERNEL(256) fuse_model_unfold(FUSE_KERNEL_PARAM(FuseUnfoldArgs) a) {
  fuse_model_grid_sync();
  const long long step = (long long)gridDim.x * blockDim.x;
  const long long per_group = a.channels / a.groups;
  const long long kc = per_group * a.kernel_h * a.kernel_w;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += step) {
    const long long k = i % kc, position = i / kc;
    const long long ox = position % a.out_w, oy = position / a.out_w % a.out_h;
    const long long rest = position / (a.out_w * a.out_h);
    const long long b = rest % a.batch, g = rest / a.batch;
    const long long kx = k % a.kernel_w, ky = k / a.kernel_w % a.kernel_h;
    const long long channel = g * per_group + k / (a.kernel_w * a.kernel_h);
    const long long y = oy * a.stride_h + ky * a.dilation - a.pad_h;
    const long long x = ox * a.stride_w + kx * a.dilation - a.pad_w;
    fuse_elem value = 0;
    if (y >= 0 && y < a.in_h && x >= 0 && x < a.in_w) {
      value = a.x[b * a.x_strides[0] + channel * a.x_strides[1] + y * a.x_strides[2] + x * a.x_strides[3]];
    }
    a.out[i] = value;
  }
}
