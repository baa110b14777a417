//! The eager views and layout ops: `reshape`, `transpose`, `permute`, `narrow`, `contiguous`, `dim`, `cat` and
//! `slice_set`. Like every eager op, each builds a one-op graph and runs it through the executor; the view
//! it returns is resolved there (`views.rs`) into a strided `Tensor` over its source's storage, with no copy.
//!
//! A `reshape` is a view when the source's strides allow it (always for a dense tensor); otherwise the CPU
//! backend first makes a dense copy of the source, and the GPU backend reports it as unsupported (call
//! `.contiguous()` first there).

use crate::eager::{run, Operand};
use crate::error::EAGER;
use crate::{Error, Result, Tensor};
use fuse_ir::view::{Axes, ViewOp, MAX_AXES};
use fuse_ir::ReduceOp;

/// An axis index: `usize`, or a signed integer counting from the end when negative (`-1` is the last axis).
pub trait Axis: Copy {
    fn index(self) -> i64;
}

macro_rules! axis_for {
    ($($t:ty),*) => {$(
        impl Axis for $t {
            fn index(self) -> i64 {
                self as i64
            }
        }
    )*};
}
axis_for!(usize, i64, i32, isize);

/// An axis as a view op stores it (`i8`: no tensor has more than [`MAX_AXES`] axes).
fn stored_axis(op: &'static str, axis: impl Axis, shape: &[usize]) -> Result<i8> {
    i8::try_from(axis.index()).map_err(|_| {
        Error::unsupported(EAGER, op, format!("axis {} is out of range for a tensor of shape {shape:?}", axis.index()))
    })
}

/// Sizes as scalar operands named `d0`, `d1`, ..: the graph text stays the same for every size.
fn size_operands<'a>(x: &'a Tensor, sizes: &[usize]) -> Vec<(String, Operand<'a>)> {
    let mut operands = vec![("x".to_string(), Operand::Tensor(x))];
    operands.extend(sizes.iter().enumerate().map(|(i, &d)| (format!("d{i}"), Operand::Scalar(d as f64))));
    operands
}

fn run_view(operands: &[(String, Operand<'_>)], op: ViewOp, label: &str) -> Result<Tensor> {
    let named: Vec<(&str, Operand<'_>)> = operands.iter().map(|(n, o)| (n.as_str(), o.clone())).collect();
    run(&named, |g, inputs| g.view(op, inputs, label))
}

impl Tensor {
    /// The same elements in row-major order as `shape` (same element count). A view when the strides allow
    /// it (always for a dense tensor); otherwise a dense copy on the CPU, and an error on a GPU (call
    /// `.contiguous()` first there).
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let rank = u8::try_from(shape.len())
            .map_err(|_| Error::unsupported(EAGER, "reshape", format!("{} axes are too many", shape.len())))?;
        run_view(&size_operands(self, shape), ViewOp::Reshape { rank }, &format!("x.reshape(&{shape:?})"))
    }

    /// Axes `a` and `b` swapped (negative axes count from the end): a view, nothing is copied.
    pub fn transpose(&self, a: impl Axis, b: impl Axis) -> Result<Tensor> {
        let op = ViewOp::Transpose {
            a: stored_axis("transpose", a, self.shape())?,
            b: stored_axis("transpose", b, self.shape())?,
        };
        let label = format!("x.transpose({}, {})", a.index(), b.index());
        run_view(&size_operands(self, &[]), op, &label)
    }

    /// The axes reordered: axis `i` of the result is axis `axes[i]` of `self`. A view.
    pub fn permute(&self, axes: &[usize]) -> Result<Tensor> {
        let stored = Axes::new(axes).ok_or_else(|| {
            Error::unsupported(EAGER, "permute", format!("{axes:?}: at most {MAX_AXES} axes, each below {MAX_AXES}"))
        })?;
        run_view(&size_operands(self, &[]), ViewOp::Permute(stored), &format!("x.permute(&{axes:?})"))
    }

    /// `len` entries of axis `axis` from `start` on: a view (an offset into the same storage).
    pub fn narrow(&self, axis: impl Axis, start: usize, len: usize) -> Result<Tensor> {
        let op = ViewOp::Narrow { axis: stored_axis("narrow", axis, self.shape())? };
        let label = format!("x.narrow({}, {start}, {len})", axis.index());
        run_view(&size_operands(self, &[start, len]), op, &label)
    }

    /// The values repeated to `shape` (numpy's rule: new leading axes, and axes of size 1 stretched), as a new
    /// dense tensor (candle's `broadcast_as`, which candle makes a view; inside `#[fuse]` the copy is a kernel of
    /// its own).
    pub fn broadcast_as(&self, shape: &[usize]) -> Result<Tensor> {
        let rank = u8::try_from(shape.len())
            .map_err(|_| Error::unsupported(EAGER, "broadcast_as", format!("{} axes are too many", shape.len())))?;
        let label = format!("x.broadcast_as(&{shape:?})");
        run_view(&size_operands(self, shape), ViewOp::BroadcastAs { rank }, &label)
    }

    /// `chunks` views along `axis`, as candle splits: `dim / chunks` entries each, the first `dim % chunks` one
    /// more (`dim` views of one entry when `dim < chunks`). Under `#[fuse]`: `let (a, b) = x.chunk(2, -1);`, which
    /// always binds every name (the last ones empty when `dim < chunks`).
    pub fn chunk(&self, chunks: usize, axis: impl Axis) -> Result<Vec<Tensor>> {
        let i = fuse_ir::view::normalize_axis(axis.index(), self.rank()).ok_or_else(|| {
            Error::unsupported(EAGER, "chunk", format!("axis {} of shape {:?}", axis.index(), self.shape()))
        })?;
        if chunks == 0 {
            return Err(Error::unsupported(EAGER, "chunk", "0 chunks"));
        }
        let dim = self.shape()[i];
        let (base, extra) = (dim / chunks, dim % chunks);
        let mut start = 0;
        let mut parts = Vec::with_capacity(chunks.min(dim));
        for k in 0..chunks.min(dim) {
            let len = if dim < chunks { 1 } else { base + usize::from(k < extra) };
            parts.push(self.narrow(axis, start, len)?);
            start += len;
        }
        Ok(parts)
    }

    /// A new axis of size 1 at `axis` of the result (negative counts from its end: `-1` appends one). A view.
    pub fn unsqueeze(&self, axis: impl Axis) -> Result<Tensor> {
        let op = ViewOp::Unsqueeze { axis: stored_axis("unsqueeze", axis, self.shape())? };
        run_view(&size_operands(self, &[]), op, &format!("x.unsqueeze({})", axis.index()))
    }

    /// `axis` removed; it must have size 1. A view.
    pub fn squeeze(&self, axis: impl Axis) -> Result<Tensor> {
        let op = ViewOp::Squeeze { axis: stored_axis("squeeze", axis, self.shape())? };
        run_view(&size_operands(self, &[]), op, &format!("x.squeeze({})", axis.index()))
    }

    /// The same values, dense in row-major order: a cheap clone when they already are, else a copy.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        run_view(&size_operands(self, &[]), ViewOp::Contiguous, "x.contiguous()")
    }

    /// The size of axis `axis` (negative counts from the end).
    pub fn dim(&self, axis: impl Axis) -> Result<usize> {
        fuse_ir::view::normalize_axis(axis.index(), self.rank()).map(|i| self.shape()[i]).ok_or_else(|| Error::Shape {
            function: EAGER.into(),
            op: "dim",
            label: format!("x.dim({})", axis.index()),
            error: fuse_ir::infer::InferError::View(format!(
                "dim: axis {} is out of range for a tensor of shape {:?}",
                axis.index(),
                self.shape()
            )),
        })
    }

    /// Writes `src` into this tensor's memory, in place, at `offset ..` along `axis` (`src` has this
    /// tensor's sizes on every other axis), and returns this tensor (a handle to the same memory, which now
    /// holds the rows). Like candle's `slice_set`, it changes memory every clone and view of this tensor
    /// shares: what a key/value cache's append needs, with no copy of the rows already there.
    ///
    /// ```
    /// // In a user's crate these are `fuse::...`: the facade re-exports this crate.
    /// use fuse_runtime::{DType, Device, Tensor};
    /// let cache = Tensor::zeros(&[1, 4, 2], DType::F32, &Device::Cpu)?;
    /// let row = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 1, 2], &Device::Cpu)?;
    /// cache.slice_set(&row, 1, 2)?;
    /// assert_eq!(cache.to_vec::<f32>()?, [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0]);
    /// # Ok::<(), fuse_runtime::Error>(())
    /// ```
    ///
    /// The offset may also be a u32 tensor of one element ([`SliceOffset::Held`]): the position is then read
    /// where the write runs (on the GPU, by the kernel), so the same call writes wherever the tensor says,
    /// which is what a step captured in a CUDA graph needs. A position past the end is then found by the
    /// kernel and reported at the next synchronisation (`Error::DeviceCheck`).
    pub fn slice_set<'a>(&self, src: &Tensor, axis: impl Axis, offset: impl Into<SliceOffset<'a>>) -> Result<Tensor> {
        let axis = stored_axis("slice_set", axis, self.shape())?;
        let (op, offset) = match offset.into() {
            SliceOffset::At(at) => (ViewOp::SliceSet { axis, at_tensor: false }, Operand::Scalar(at as f64)),
            SliceOffset::Held(t) => (ViewOp::SliceSet { axis, at_tensor: true }, Operand::Tensor(t)),
        };
        let operands = [("dest", Operand::Tensor(self)), ("src", Operand::Tensor(src)), ("offset", offset)];
        run(&operands, |g, inputs| g.view(op, inputs, "dest.slice_set(&src, axis, offset)"))
    }

    /// `cat(tensors, axis)` as an associated function, as candle has it.
    pub fn cat(tensors: &[&Tensor], axis: impl Axis) -> Result<Tensor> {
        cat(tensors, axis)
    }
}

/// Where [`Tensor::slice_set`] writes: a position known here, or one held in a u32 tensor of one element.
#[derive(Clone, Copy, Debug)]
pub enum SliceOffset<'a> {
    At(usize),
    Held(&'a Tensor),
}

impl From<usize> for SliceOffset<'_> {
    fn from(at: usize) -> Self {
        SliceOffset::At(at)
    }
}

impl<'a> From<&'a Tensor> for SliceOffset<'a> {
    fn from(t: &'a Tensor) -> Self {
        SliceOffset::Held(t)
    }
}

/// The tensors joined along `axis` (they agree on every other axis): a copy.
pub fn cat(tensors: &[&Tensor], axis: impl Axis) -> Result<Tensor> {
    let first = tensors.first().ok_or_else(|| Error::unsupported(EAGER, "cat", "no tensors to join"))?;
    let parts = u8::try_from(tensors.len())
        .map_err(|_| Error::unsupported(EAGER, "cat", format!("{} tensors: at most 255 at once", tensors.len())))?;
    let op = ViewOp::Cat { axis: stored_axis("cat", axis, first.shape())?, parts };
    let names: Vec<String> = (0..tensors.len()).map(|i| format!("t{i}")).collect();
    let operands: Vec<(&str, Operand<'_>)> =
        names.iter().zip(tensors).map(|(n, &t)| (n.as_str(), Operand::Tensor(t))).collect();
    let label = format!("cat(&[{}], {})", names.join(", "), axis.index());
    run(&operands, |g, inputs| g.view(op, inputs, &label))
}

/// Reductions over any axis, built from the views above and the last-axis reductions.
impl Tensor {
    /// Sum over any axis (negative counts from the end), keeping it with size 1 (candle's `sum_keepdim`).
    pub fn sum_keepdim(&self, axis: impl Axis) -> Result<Tensor> {
        self.reduce_keepdim(ReduceOp::Sum, axis.index())
    }

    /// Mean over any axis, keeping it with size 1.
    pub fn mean_keepdim(&self, axis: impl Axis) -> Result<Tensor> {
        self.reduce_keepdim(ReduceOp::Mean, axis.index())
    }

    /// Maximum over any axis, keeping it with size 1 (NaN if the axis holds one).
    pub fn max_keepdim(&self, axis: impl Axis) -> Result<Tensor> {
        self.reduce_keepdim(ReduceOp::Max, axis.index())
    }

    /// Minimum over any axis, keeping it with size 1.
    pub fn min_keepdim(&self, axis: impl Axis) -> Result<Tensor> {
        self.reduce_keepdim(ReduceOp::Min, axis.index())
    }

    /// Another axis than the last: swapped with the last (a view), reduced there, swapped back, so the
    /// size-1 axis lands where `axis` was; as `#[fuse]` traces it.
    fn reduce_keepdim(&self, op: ReduceOp, axis: i64) -> Result<Tensor> {
        let last = self.rank() as i64 - 1;
        if axis == -1 || axis == last {
            return self.reduce(op, -1);
        }
        self.transpose(axis, -1)?.reduce(op, -1)?.transpose(axis, -1)
    }
}
