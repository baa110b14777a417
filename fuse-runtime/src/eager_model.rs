//! The model ops as eager functions: `embedding(&ids, &table)`, `x.argmax(-1)`, `x.cumsum(axis)`, the sorts
//! (`x.arg_sort_last_dim(asc)`, `sort_last_dim`, `topk`), `x.gather(&indexes, axis)`, `rope(&x, &cos, &sin)`,
//! `attention(&q, &k, &v, scale, causal)`, `attention_len(&q, &k, &v, &lens, scale, causal)` and
//! `all_reduce_sum(&x)` (tensor parallelism, `parallel.rs`). Like every eager op, each builds a one-op graph and runs it through
//! the executor, so `#[fuse]` and eager code share one implementation (and one definition: `fuse_ir::ModelOp`).

use crate::eager::{run, Operand};
use crate::error::EAGER;
use crate::{Error, Result, Tensor};
use fuse_ir::ModelOp;

/// The rows of `table` [vocab, hidden] picked by the u32 token `ids` (any shape [..]): [.., hidden], in the
/// table's dtype. An id >= vocab is an error naming it and the vocabulary size.
pub fn embedding(ids: &Tensor, table: &Tensor) -> Result<Tensor> {
    run(&[("ids", Operand::Tensor(ids)), ("table", Operand::Tensor(table))], |g, i| {
        g.model(ModelOp::Embedding, &[i[0], i[1]], "embedding(ids, table)")
    })
}

/// Rotary position embedding in the half-split layout of Hugging Face's Llama: `x` [.., seq, d] (d even),
/// `cos` and `sin` [seq, d/2]; `out[i] = x[i] cos[i] - x[i + d/2] sin[i]`, `out[i + d/2] = x[i + d/2] cos[i] +
/// x[i] sin[i]` for i < d/2.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let operands = [("x", Operand::Tensor(x)), ("cos", Operand::Tensor(cos)), ("sin", Operand::Tensor(sin))];
    run(&operands, |g, i| g.model(ModelOp::Rope, &[i[0], i[1], i[2]], "rope(x, cos, sin)"))
}

/// `softmax(q k^T * scale) v` per head, without materialising the scores: q [b, hq, sq, d], k and v [b, hkv,
/// skv, d] with hq a multiple of hkv (grouped-query: query head h reads key/value head h / (hq / hkv), no
/// copy). With `causal`, the queries are the last sq positions: query i sees keys 0 ..= skv - sq + i.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: impl Into<f64>, causal: bool) -> Result<Tensor> {
    let operands = [
        ("q", Operand::Tensor(q)),
        ("k", Operand::Tensor(k)),
        ("v", Operand::Tensor(v)),
        ("scale", Operand::Scalar(scale.into())),
    ];
    let label = format!("attention(q, k, v, scale, {causal})");
    run(&operands, |g, i| g.model(ModelOp::Attention { causal, with_lens: false }, &[i[0], i[1], i[2], i[3]], &label))
}

/// [`attention`] over the first `lens[b]` keys of each batch b: `lens` is a u32 tensor `[b]` on the device, so
/// k and v can be a whole preallocated cache [b, hkv, capacity, d] whose filled length changes from step to
/// step without any host value changing (a captured step replays as is). Keys past `lens[b]` are never read
/// (they may hold anything, NaN included). With `causal`, the queries are the last sq of the `lens[b]` keys:
/// query i sees keys `0 ..= lens[b] - sq + i`.
///
/// A count above the capacity, or below sq under `causal`, is an error naming it: on the CPU at the call; on
/// the GPU, where the counts stay on the device, the kernels check them and the error
/// (`Error::DeviceCheck`) comes at the next synchronisation.
pub fn attention_len(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    lens: &Tensor,
    scale: impl Into<f64>,
    causal: bool,
) -> Result<Tensor> {
    let operands = [
        ("q", Operand::Tensor(q)),
        ("k", Operand::Tensor(k)),
        ("v", Operand::Tensor(v)),
        ("scale", Operand::Scalar(scale.into())),
        ("lens", Operand::Tensor(lens)),
    ];
    let label = format!("attention_len(q, k, v, lens, scale, {causal})");
    run(&operands, |g, i| {
        g.model(ModelOp::Attention { causal, with_lens: true }, &[i[0], i[1], i[2], i[3], i[4]], &label)
    })
}

/// `x` summed over the ranks of the tensor-parallel group this thread runs in ([`crate::parallel::Group::run`]),
/// every rank getting the same sum in x's shape and dtype: what joins the partial outputs of a row-parallel
/// product. Inside `#[fuse]` it is a planned step of the call like any other model op. Outside a group it is
/// an error (a group of one rank returns x's values).
pub fn all_reduce_sum(x: &Tensor) -> Result<Tensor> {
    run(&[("x", Operand::Tensor(x))], |g, i| g.model(ModelOp::AllReduceSum, &[i[0]], "all_reduce_sum(x)"))
}

impl Tensor {
    /// The u32 index of the largest value along the last axis (`axis` is -1 or the last axis' index), which
    /// is kept with size 1 as `sum`, `mean` and `max` keep it: [.., n] gives [.., 1]. Ties give the first
    /// index and a NaN counts as the largest, as in torch.
    pub fn argmax(&self, axis: i64) -> Result<Tensor> {
        let last = self.rank() as i64 - 1;
        if axis != -1 && axis != last {
            let reason = format!(
                "only the last axis (-1) is supported, got axis {axis} of a tensor of shape {:?}",
                self.shape()
            );
            return Err(Error::unsupported(EAGER, "argmax", reason));
        }
        run(&[("x", Operand::Tensor(self))], |g, i| g.model(ModelOp::Argmax, &[i[0]], "x.argmax(-1)"))
    }

    /// Running sums along `axis` (candle's `cumsum`): `out[.., i, ..] = x[.., 0, ..] + .. + x[.., i, ..]`, the
    /// shape and dtype of `x`, summed in f32 in order.
    pub fn cumsum(&self, axis: impl crate::Axis) -> Result<Tensor> {
        let (rank, asked) = (self.rank(), axis.index());
        let axis = fuse_ir::view::normalize_axis(asked, rank).ok_or_else(|| {
            let why = format!("axis {asked} is out of range for a tensor of shape {:?}", self.shape());
            Error::unsupported(EAGER, "cumsum", why)
        })?;
        let last = rank - 1;
        run(&[("x", Operand::Tensor(self))], |g, i| {
            if axis == last {
                return g.model(ModelOp::Cumsum, &[i[0]], "x.cumsum(-1)");
            }
            let swap = fuse_ir::view::ViewOp::Transpose { a: axis as i8, b: -1 };
            let t = g.view(swap, &[i[0]], "x.cumsum(axis)");
            let sums = g.model(ModelOp::Cumsum, &[t], "x.cumsum(axis)");
            g.view(swap, &[sums], "x.cumsum(axis)")
        })
    }
}

impl Tensor {
    /// Each row's indices (u32, the shape of `self`) ordered by value along the last axis (candle's name):
    /// smallest first when `ascending`, else largest first. As torch's stable sort: equal values keep the
    /// order of their indices, and a NaN counts as larger than every number.
    ///
    /// ```
    /// // In a user's crate these are `fuse::...`: the facade re-exports this crate.
    /// use fuse_runtime::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![3.0f32, 1.0, 2.0], &[1, 3], &Device::Cpu)?;
    /// assert_eq!(x.arg_sort_last_dim(true)?.to_vec::<u32>()?, [1, 2, 0]);
    /// # Ok::<(), fuse_runtime::Error>(())
    /// ```
    pub fn arg_sort_last_dim(&self, ascending: bool) -> Result<Tensor> {
        let label = format!("x.arg_sort_last_dim({ascending})");
        run(&[("x", Operand::Tensor(self))], |g, i| g.model(ModelOp::ArgSort { ascending }, &[i[0]], &label))
    }

    /// The values sorted along the last axis and their indices (candle's `sort_last_dim`):
    /// `(self.gather(&indices, -1), indices)` with the indices of [`Tensor::arg_sort_last_dim`].
    pub fn sort_last_dim(&self, ascending: bool) -> Result<(Tensor, Tensor)> {
        let indices = self.arg_sort_last_dim(ascending)?;
        Ok((self.gather(&indices, -1)?, indices))
    }

    /// The `k` largest values along the last axis, largest first, and their indices (torch's `topk` with
    /// its defaults), for sampling on the device: the first `k` of [`Tensor::sort_last_dim`] descending,
    /// selected without sorting the row where k is at most 4,096 on the GPU. `k` past the axis is an error.
    pub fn topk(&self, k: usize) -> Result<(Tensor, Tensor)> {
        let operands = [("x", Operand::Tensor(self)), ("k", Operand::Scalar(k as f64))];
        let indices = run(&operands, |g, i| g.model(ModelOp::ArgTopK, &[i[0], i[1]], "x.topk(k)"))?;
        Ok((self.gather(&indices, -1)?, indices))
    }

    /// `out[.., j, ..] = self[.., indexes[.., j, ..], ..]` along `axis` (candle's `gather`): `indexes` is u32,
    /// of `self`'s rank and sizes except along `axis`, and gives the result its shape; floats and u32 are
    /// copied as they are. An index past the axis is an error naming it (on the GPU, found by the kernel and
    /// reported at the next synchronisation).
    pub fn gather(&self, indexes: &Tensor, axis: impl crate::Axis) -> Result<Tensor> {
        let (rank, asked) = (self.rank(), axis.index());
        let axis = fuse_ir::view::normalize_axis(asked, rank).ok_or_else(|| {
            let why = format!("axis {asked} is out of range for a tensor of shape {:?}", self.shape());
            Error::unsupported(EAGER, "gather", why)
        })?;
        let operands = [("x", Operand::Tensor(self)), ("indexes", Operand::Tensor(indexes))];
        // The last axis as -1 (the op itself), another by its index (swapped there and back).
        let axis = if axis + 1 == rank { -1 } else { axis as i8 };
        run(&operands, |g, i| g.gather(i[0], i[1], axis, "x.gather(indexes, axis)"))
    }
}

impl Tensor {
    /// A 1-D convolution (candle's `conv1d`, no bias): `self` [b, c, l], `kernel` [co, c / groups, k] give
    /// [b, co, (l + 2 padding - dilation (k - 1) - 1) / stride + 1]. Computed as the columns of `unfold`
    /// (im2col) and a matmul per group (an ordinary GEMM: cuBLAS or a template on the GPU).
    ///
    /// ```
    /// // In a user's crate these are `fuse::...`: the facade re-exports this crate.
    /// use fuse_runtime::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4], &Device::Cpu)?;
    /// let kernel = Tensor::from_vec(vec![1.0f32, 1.0], &[1, 1, 2], &Device::Cpu)?;
    /// assert_eq!(x.conv1d(&kernel, 0, 1, 1, 1)?.to_vec::<f32>()?, [3.0, 5.0, 7.0]);
    /// # Ok::<(), fuse_runtime::Error>(())
    /// ```
    pub fn conv1d(
        &self,
        kernel: &Tensor,
        padding: usize,
        stride: usize,
        dilation: usize,
        groups: usize,
    ) -> Result<Tensor> {
        conv(self, kernel, [padding, stride, dilation, groups], 1)
    }

    /// A 2-D convolution (candle's `conv2d`, no bias): `self` [b, c, h, w], `kernel` [co, c / groups, kh, kw]
    /// give [b, co, oh, ow], the same padding, stride and dilation along both axes; as [`Tensor::conv1d`].
    pub fn conv2d(
        &self,
        kernel: &Tensor,
        padding: usize,
        stride: usize,
        dilation: usize,
        groups: usize,
    ) -> Result<Tensor> {
        conv(self, kernel, [padding, stride, dilation, groups], 2)
    }
}

fn conv(x: &Tensor, kernel: &Tensor, sizes: [usize; 4], spatial: usize) -> Result<Tensor> {
    let [padding, stride, dilation, groups] = sizes.map(|s| Operand::Scalar(s as f64));
    let operands = [
        ("x", Operand::Tensor(x)),
        ("kernel", Operand::Tensor(kernel)),
        ("padding", padding),
        ("stride", stride),
        ("dilation", dilation),
        ("groups", groups),
    ];
    let label = format!("x.conv{spatial}d(kernel, padding, stride, dilation, groups)");
    run(&operands, |g, i| g.conv(i[0], i[1], [i[2], i[3], i[4], i[5]], spatial, &label))
}
