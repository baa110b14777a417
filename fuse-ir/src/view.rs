//! View and layout ops: `reshape`, `transpose(a, b)`, `permute`, `narrow`, `cat`, `contiguous` and `x.dim(i)`,
//! each defined here once: its arity, text form, shape inference, strided layout and reference semantics.
//!
//! Sizes that vary per call (`reshape` entries, `narrow`'s start and length) are graph arguments of the view
//! node (literals, `usize` parameters or `x.dim(i)` nodes), so the graph stays shape-agnostic and `Op` stays
//! `Copy`; what must be known when tracing (axes, a permutation, how many parts `cat` joins) is in the op.
//!
//! `reshape` (when the strides allow it), `transpose`, `permute` and `narrow` are views: [`ViewOp::layout`]
//! says where their elements lie in their source's memory, and the backends read them through those strides.
//! `cat` and `contiguous` compute (a copy); `dim` is a size, a 0-d value.

use crate::array::Array;
use crate::error::InferError;

/// Most axes a permutation may have (more than any kernel domain: see `codegen::MAX_RANK`).
pub const MAX_AXES: usize = 8;

/// A permutation of at most [`MAX_AXES`] axes, stored inline so that `Op` stays `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Axes {
    len: u8,
    axes: [u8; MAX_AXES],
}

impl Axes {
    /// `None` for more than [`MAX_AXES`] entries or an entry past them (checked against the rank later).
    pub fn new(axes: &[usize]) -> Option<Axes> {
        if axes.len() > MAX_AXES || axes.iter().any(|&a| a >= MAX_AXES) {
            return None;
        }
        let mut stored = [0u8; MAX_AXES];
        for (s, &a) in stored.iter_mut().zip(axes) {
            *s = a as u8;
        }
        Some(Axes { len: axes.len() as u8, axes: stored })
    }

    pub fn to_vec(&self) -> Vec<usize> {
        self.axes[..self.len as usize].iter().map(|&a| a as usize).collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViewOp {
    /// `x.reshape(&[d0, .., d{rank-1}])`: arguments `[x, d0, ..]`; one entry may be -1 (inferred).
    Reshape { rank: u8 },
    /// `x.transpose(a, b)`: swaps two axes; negative axes count from the end.
    Transpose { a: i8, b: i8 },
    /// `x.permute(&[..])`: axis `i` of the result is axis `axes[i]` of `x`.
    Permute(Axes),
    /// `x.narrow(axis, start, len)`: arguments `[x, start, len]`.
    Narrow { axis: i8 },
    /// `x.unsqueeze(axis)`: a new axis of size 1 at `axis` of the result (negative counts from its end).
    Unsqueeze { axis: i8 },
    /// `x.squeeze(axis)`: removes `axis`, which must have size 1.
    Squeeze { axis: i8 },
    /// `x.broadcast_as(&[d0, ..])`: arguments `[x, d0, ..]`; `x` repeated along new leading axes and along its
    /// axes of size 1 (numpy's rule). A copy, as `contiguous` is (a view with stride 0 would give a row
    /// reduction over the repeated axis one element where it has many).
    BroadcastAs { rank: u8 },
    /// `cat(&[a, b, ..], axis)`: `parts` tensors joined along `axis` (a copy).
    Cat { axis: i8, parts: u8 },
    /// `x.contiguous()`: the same values, dense row-major (a copy).
    Contiguous,
    /// `dest.slice_set(&src, axis, offset)`: writes `src` into `dest` at `offset ..` along `axis`, in place,
    /// and is `dest` after the write (arguments `[dest, src, offset]`). The one op that changes an operand:
    /// `dest` must be an argument of the function that nothing else reads (see `Graph::verify`), so no
    /// order of the other ops can observe the write; a key/value cache's append is what it is for.
    /// `offset` is a size, or with `at_tensor` a u32 tensor of one element: a position that lives on the
    /// device, so that a step captured in a CUDA graph writes where the position says on every replay.
    SliceSet { axis: i8, at_tensor: bool },
    /// `x.dim(axis)`: the size of an axis, as a 0-d value (usable as a size in `reshape` and `narrow`).
    Dim { axis: i8 },
}

/// Where a strided value's elements lie: `offset + sum(index[i] * strides[i])`, in elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
}

impl Layout {
    /// A dense row-major layout of `shape`.
    pub fn dense(shape: &[usize]) -> Layout {
        Layout { shape: shape.to_vec(), strides: dense_strides(shape), offset: 0 }
    }
}

/// Row-major strides of a dense `shape`.
pub fn dense_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut step = 1;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = step;
        step *= d;
    }
    strides
}

/// `axis` (negative from the end) as an index below `rank`.
pub fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    (0..rank as i64).contains(&a).then_some(a as usize)
}

fn error(message: String) -> InferError {
    InferError::View(message)
}

fn axis_error(what: &str, axis: i64, shape: &[usize]) -> InferError {
    error(format!("{what} {axis} is out of range for a tensor of shape {shape:?} ({} axes)", shape.len()))
}

impl ViewOp {
    pub fn arity(&self) -> usize {
        match self {
            ViewOp::Reshape { rank } | ViewOp::BroadcastAs { rank } => 1 + *rank as usize,
            ViewOp::Narrow { .. } | ViewOp::SliceSet { .. } => 3,
            ViewOp::Cat { parts, .. } => *parts as usize,
            ViewOp::Transpose { .. }
            | ViewOp::Permute(_)
            | ViewOp::Contiguous
            | ViewOp::Dim { .. }
            | ViewOp::Unsqueeze { .. }
            | ViewOp::Squeeze { .. } => 1,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            ViewOp::Reshape { .. } => "reshape",
            ViewOp::Transpose { .. } => "transpose",
            ViewOp::Permute(_) => "permute",
            ViewOp::Narrow { .. } => "narrow",
            ViewOp::Unsqueeze { .. } => "unsqueeze",
            ViewOp::Squeeze { .. } => "squeeze",
            ViewOp::BroadcastAs { .. } => "broadcast_as",
            ViewOp::Cat { .. } => "cat",
            ViewOp::Contiguous => "contiguous",
            ViewOp::Dim { .. } => "dim",
            ViewOp::SliceSet { .. } => "slice_set",
        }
    }

    /// `cat`, `contiguous`, `broadcast_as` and `slice_set` write memory (a group of their own); the others
    /// cost no copy.
    pub fn is_copy(&self) -> bool {
        matches!(self, ViewOp::Cat { .. } | ViewOp::Contiguous | ViewOp::BroadcastAs { .. } | ViewOp::SliceSet { .. })
    }

    /// Which arguments are sizes (0-d values read at run time), not tensors.
    pub fn is_size_argument(&self, index: usize) -> bool {
        match self {
            ViewOp::Reshape { .. } | ViewOp::BroadcastAs { .. } | ViewOp::Narrow { .. } => index > 0,
            ViewOp::SliceSet { at_tensor, .. } => index == 2 && !at_tensor,
            _ => false,
        }
    }

    /// The words after the name in the graph's text form (arguments follow as `%N`).
    pub fn params(&self) -> Vec<String> {
        match self {
            ViewOp::Transpose { a, b } => vec![a.to_string(), b.to_string()],
            ViewOp::Permute(axes) => axes.to_vec().iter().map(|a| a.to_string()).collect(),
            ViewOp::Narrow { axis }
            | ViewOp::Unsqueeze { axis }
            | ViewOp::Squeeze { axis }
            | ViewOp::Cat { axis, .. }
            | ViewOp::Dim { axis }
            | ViewOp::SliceSet { axis, at_tensor: false } => {
                vec![axis.to_string()]
            }
            // The second word marks the offset as a tensor.
            ViewOp::SliceSet { axis, at_tensor: true } => vec![axis.to_string(), "1".into()],
            ViewOp::Reshape { .. } | ViewOp::BroadcastAs { .. } | ViewOp::Contiguous => vec![],
        }
    }

    /// Reads the text form back: the name, its parameters, and how many arguments follow.
    pub fn parse(name: &str, params: &[&str], args: usize) -> Option<ViewOp> {
        let ints: Vec<i64> = params.iter().map(|p| p.parse().ok()).collect::<Option<_>>()?;
        let small = |v: i64| i8::try_from(v).ok();
        let op = match (name, ints.as_slice()) {
            ("reshape", []) => ViewOp::Reshape { rank: u8::try_from(args.checked_sub(1)?).ok()? },
            ("broadcast_as", []) => ViewOp::BroadcastAs { rank: u8::try_from(args.checked_sub(1)?).ok()? },
            ("transpose", &[a, b]) => ViewOp::Transpose { a: small(a)?, b: small(b)? },
            ("permute", axes) => {
                let axes: Vec<usize> = axes.iter().map(|&a| usize::try_from(a).ok()).collect::<Option<_>>()?;
                ViewOp::Permute(Axes::new(&axes)?)
            }
            ("narrow", &[axis]) => ViewOp::Narrow { axis: small(axis)? },
            ("unsqueeze", &[axis]) => ViewOp::Unsqueeze { axis: small(axis)? },
            ("squeeze", &[axis]) => ViewOp::Squeeze { axis: small(axis)? },
            ("cat", &[axis]) => ViewOp::Cat { axis: small(axis)?, parts: u8::try_from(args).ok().filter(|&p| p > 0)? },
            ("contiguous", []) => ViewOp::Contiguous,
            ("dim", &[axis]) => ViewOp::Dim { axis: small(axis)? },
            ("slice_set", &[axis]) => ViewOp::SliceSet { axis: small(axis)?, at_tensor: false },
            ("slice_set", &[axis, 1]) => ViewOp::SliceSet { axis: small(axis)?, at_tensor: true },
            _ => return None,
        };
        (op.arity() == args).then_some(op)
    }

    /// The result's shape from the arguments' shapes and, for size arguments, their values.
    pub fn infer_shape(&self, shapes: &[&[usize]], sizes: &[Option<f64>]) -> Result<Vec<usize>, InferError> {
        let x = shapes[0];
        match *self {
            ViewOp::Reshape { .. } => reshape_shape(x, &sizes[1..]),
            ViewOp::BroadcastAs { .. } => {
                let target = sizes[1..]
                    .iter()
                    .map(|&d| size_value("broadcast_as: an entry", d))
                    .collect::<Result<Vec<usize>, _>>()?;
                let fits = x.len() <= target.len()
                    && x.iter().rev().zip(target.iter().rev()).all(|(&from, &to)| from == to || from == 1);
                if !fits {
                    return Err(error(format!(
                        "broadcast_as: {x:?} does not broadcast to {target:?} (each axis, aligned from the last, \
                         must be equal or 1)"
                    )));
                }
                Ok(target)
            }
            ViewOp::Transpose { a, b } => {
                let ia = normalize_axis(a as i64, x.len()).ok_or_else(|| axis_error("transpose: axis", a as i64, x))?;
                let ib = normalize_axis(b as i64, x.len()).ok_or_else(|| axis_error("transpose: axis", b as i64, x))?;
                let mut s = x.to_vec();
                s.swap(ia, ib);
                Ok(s)
            }
            ViewOp::Permute(axes) => {
                let axes = axes.to_vec();
                let mut seen = vec![false; x.len()];
                let valid = axes.len() == x.len()
                    && axes.iter().all(|&a| a < x.len() && !std::mem::replace(&mut seen[a], true));
                if !valid {
                    return Err(error(format!(
                        "permute: {axes:?} is not a permutation of the {} axes of shape {x:?}",
                        x.len()
                    )));
                }
                Ok(axes.iter().map(|&a| x[a]).collect())
            }
            ViewOp::Narrow { axis } => {
                let i =
                    normalize_axis(axis as i64, x.len()).ok_or_else(|| axis_error("narrow: axis", axis as i64, x))?;
                let start = size_value("narrow: start", sizes[1])?;
                let len = size_value("narrow: length", sizes[2])?;
                if start.checked_add(len).is_none_or(|end| end > x[i]) {
                    return Err(error(format!(
                        "narrow: start {start} + length {len} is past the end of axis {axis} (size {}) of shape {x:?}",
                        x[i]
                    )));
                }
                let mut s = x.to_vec();
                s[i] = len;
                Ok(s)
            }
            ViewOp::Cat { axis, .. } => {
                let i = normalize_axis(axis as i64, x.len()).ok_or_else(|| axis_error("cat: axis", axis as i64, x))?;
                let mut s = x.to_vec();
                for other in &shapes[1..] {
                    let same_elsewhere = other.len() == x.len() && (0..x.len()).all(|k| k == i || other[k] == x[k]);
                    if !same_elsewhere {
                        return Err(error(format!(
                            "cat along axis {axis}: shapes {x:?} and {other:?} differ on another axis"
                        )));
                    }
                    s[i] += other[i];
                }
                Ok(s)
            }
            ViewOp::Contiguous => Ok(x.to_vec()),
            ViewOp::Unsqueeze { axis } => {
                let i = normalize_axis(axis as i64, x.len() + 1)
                    .ok_or_else(|| axis_error("unsqueeze: axis", axis as i64, x))?;
                let mut s = x.to_vec();
                s.insert(i, 1);
                Ok(s)
            }
            ViewOp::Squeeze { axis } => {
                let i =
                    normalize_axis(axis as i64, x.len()).ok_or_else(|| axis_error("squeeze: axis", axis as i64, x))?;
                if x[i] != 1 {
                    return Err(error(format!("squeeze: axis {axis} of shape {x:?} has size {}, not 1", x[i])));
                }
                let mut s = x.to_vec();
                s.remove(i);
                Ok(s)
            }
            ViewOp::SliceSet { axis, at_tensor } => {
                let (src, i) = (
                    shapes[1],
                    normalize_axis(axis as i64, x.len())
                        .ok_or_else(|| axis_error("slice_set: axis", axis as i64, x))?,
                );
                // A tensor offset holds one position for the whole destination, or one for each index of its
                // first axis (a batch of sequences at their own positions) when the slice is along another.
                let per_batch = i > 0 && shapes[2] == [x[0]];
                if at_tensor && shapes[2].iter().product::<usize>() != 1 && !per_batch {
                    return Err(error(format!(
                        "slice_set: a tensor offset holds one position, or one for each of the {} indices of the \
                         destination's first axis when the slice is along another, not shape {:?}",
                        x.first().copied().unwrap_or(0),
                        shapes[2]
                    )));
                }
                let same_elsewhere = src.len() == x.len() && (0..x.len()).all(|k| k == i || src[k] == x[k]);
                if !same_elsewhere {
                    return Err(error(format!("slice_set along axis {axis}: the source {src:?} and the destination {x:?} differ on another axis")));
                }
                // A tensor offset's value is checked where it is read (`check_slice_set_offset` there too).
                if !at_tensor {
                    check_slice_set_offset(sizes[2], i, src, x)?;
                }
                Ok(x.to_vec())
            }
            ViewOp::Dim { axis } => {
                normalize_axis(axis as i64, x.len()).ok_or_else(|| axis_error("dim: axis", axis as i64, x))?;
                Ok(vec![])
            }
        }
    }

    /// The value of `x.dim(axis)` for an `x` of `shape` (shape inference has checked the axis).
    pub fn dim_value(axis: i8, shape: &[usize]) -> Option<f64> {
        normalize_axis(axis as i64, shape.len()).map(|i| shape[i] as f64)
    }

    /// For a view op (not `cat`, `contiguous` or `dim`): where the result's elements lie, given its source's
    /// layout, the result's shape (from [`ViewOp::infer_shape`]) and its size arguments. `None` when a reshape
    /// cannot be expressed as strides of this source (the runtime then makes a contiguous copy first).
    pub fn layout(&self, src: &Layout, out_shape: &[usize], sizes: &[Option<f64>]) -> Option<Layout> {
        match *self {
            // A size-1 axis added or removed: always a reshape that strides express.
            ViewOp::Reshape { .. } | ViewOp::Unsqueeze { .. } | ViewOp::Squeeze { .. } => {
                let strides = reshape_strides(&src.shape, &src.strides, out_shape)?;
                Some(Layout { shape: out_shape.to_vec(), strides, offset: src.offset })
            }
            ViewOp::BroadcastAs { .. } => {
                let lead = out_shape.len().checked_sub(src.shape.len())?;
                let strides = (0..out_shape.len())
                    .map(|i| match i.checked_sub(lead) {
                        Some(j) if src.shape[j] == out_shape[i] => src.strides[j],
                        _ => 0,
                    })
                    .collect();
                Some(Layout { shape: out_shape.to_vec(), strides, offset: src.offset })
            }
            ViewOp::Transpose { a, b } => {
                let (ia, ib) = (normalize_axis(a as i64, src.shape.len())?, normalize_axis(b as i64, src.shape.len())?);
                let mut l = src.clone();
                l.shape.swap(ia, ib);
                l.strides.swap(ia, ib);
                Some(l)
            }
            ViewOp::Permute(axes) => {
                let axes = axes.to_vec();
                let strides = axes.iter().map(|&a| src.strides.get(a).copied()).collect::<Option<Vec<_>>>()?;
                Some(Layout { shape: out_shape.to_vec(), strides, offset: src.offset })
            }
            ViewOp::Narrow { axis } => {
                let i = normalize_axis(axis as i64, src.shape.len())?;
                let start = size_value("", sizes[1]).ok()?;
                Some(Layout {
                    shape: out_shape.to_vec(),
                    strides: src.strides.clone(),
                    offset: src.offset + start * src.strides[i],
                })
            }
            ViewOp::Cat { .. } | ViewOp::Contiguous | ViewOp::Dim { .. } | ViewOp::SliceSet { .. } => None,
        }
    }

    /// The reference semantics, in f64 on dense arrays. `args` are the arguments' values (sizes as 0-d
    /// arrays), `out_shape` what [`ViewOp::infer_shape`] gave. Errs only for a `slice_set` offset held in a
    /// tensor that does not fit (shape inference cannot see a tensor's value).
    pub fn eval(&self, args: &[&Array], out_shape: Vec<usize>) -> Result<Array, InferError> {
        let x = args[0];
        Ok(match *self {
            ViewOp::Contiguous => x.clone(),
            ViewOp::SliceSet { axis, .. } => {
                let (src, i) = (args[1], normalize_axis(axis as i64, x.shape.len()).unwrap_or(0));
                // One offset, or one for each index of the first axis (`infer_shape` allowed it).
                let offsets = match args[2].data.len() {
                    1 => vec![check_slice_set_offset(args[2].data.first().copied(), i, &src.shape, &x.shape)?],
                    _ => args[2]
                        .data
                        .iter()
                        .map(|&o| check_slice_set_offset(Some(o), i, &src.shape, &x.shape))
                        .collect::<Result<Vec<usize>, InferError>>()?,
                };
                let (inner, rows): (usize, usize) = (x.shape[i + 1..].iter().product(), x.shape[i]);
                // Chunks (one a slice written) per index of the first axis.
                let per_first: usize = x.shape[1..i.max(1)].iter().product();
                let mut data = x.data.clone();
                for (o, chunk) in src.data.chunks(src.shape[i] * inner).enumerate().filter(|_| !src.data.is_empty()) {
                    let offset = offsets[if offsets.len() == 1 { 0 } else { o / per_first.max(1) }];
                    let at = (o * rows + offset) * inner;
                    data[at..at + chunk.len()].copy_from_slice(chunk);
                }
                Array::new(out_shape, data)
            }
            ViewOp::Dim { axis } => Array::scalar(ViewOp::dim_value(axis, &x.shape).unwrap_or(0.0)),
            ViewOp::Cat { axis, .. } => {
                let i = normalize_axis(axis as i64, x.shape.len()).unwrap_or(0);
                let outer: usize = x.shape[..i].iter().product();
                let mut data = Vec::with_capacity(out_shape.iter().product());
                for o in 0..outer {
                    for part in args {
                        let chunk: usize = part.shape[i..].iter().product();
                        data.extend_from_slice(&part.data[o * chunk..(o + 1) * chunk]);
                    }
                }
                Array::new(out_shape, data)
            }
            _ => {
                let sizes: Vec<Option<f64>> = args.iter().map(|a| a.data.first().copied()).collect();
                let layout = self
                    .layout(&Layout::dense(&x.shape), &out_shape, &sizes)
                    .expect("a view of a dense array always has a layout");
                let mut data = Vec::with_capacity(out_shape.iter().product());
                for_each_offset(&layout, |i| data.push(x.data[i]));
                Array::new(out_shape, data)
            }
        })
    }
}

/// A `slice_set` offset (a size argument's value, or the value read from its tensor) as a position: a whole
/// number from which the source's rows along `axis` fit in the destination's.
pub fn check_slice_set_offset(
    value: Option<f64>,
    axis: usize,
    src: &[usize],
    dest: &[usize],
) -> Result<usize, InferError> {
    let offset = size_value("slice_set: offset", value)?;
    if offset.checked_add(src[axis]).is_none_or(|end| end > dest[axis]) {
        return Err(error(format!(
            "slice_set: offset {offset} + {} rows is past the end of axis {axis} (size {}) of the destination {dest:?}",
            src[axis], dest[axis]
        )));
    }
    Ok(offset)
}

/// A size argument's value as a count: a non-negative integer.
fn size_value(what: &str, v: Option<f64>) -> Result<usize, InferError> {
    match v {
        Some(v) if v >= 0.0 && v.fract() == 0.0 && v <= u32::MAX as f64 => Ok(v as usize),
        Some(v) => Err(error(format!("{what} must be a non-negative integer, got {v}"))),
        None => Err(error(format!("{what} must be a literal, a `usize` argument or `x.dim(i)`"))),
    }
}

/// `reshape`'s result shape: the entries' values, one of them possibly -1 (the rest of the elements).
fn reshape_shape(x: &[usize], entries: &[Option<f64>]) -> Result<Vec<usize>, InferError> {
    let numel: usize = x.iter().product();
    let inferred: Vec<usize> = (0..entries.len()).filter(|&i| entries[i] == Some(-1.0)).collect();
    if inferred.len() > 1 {
        return Err(error(format!("reshape of {x:?}: at most one entry may be -1")));
    }
    let mut shape = Vec::with_capacity(entries.len());
    for (i, &e) in entries.iter().enumerate() {
        shape.push(if inferred.contains(&i) { 1 } else { size_value("reshape: an entry", e)? });
    }
    let known: usize = shape.iter().product();
    if let Some(&i) = inferred.first() {
        if known == 0 || numel % known != 0 {
            return Err(error(format!("reshape of {x:?} ({numel} elements): no size for -1 fits the other entries")));
        }
        shape[i] = numel / known;
    }
    if shape.iter().product::<usize>() != numel {
        return Err(error(format!(
            "cannot reshape {x:?} ({numel} elements) into {shape:?} ({} elements)",
            shape.iter().product::<usize>()
        )));
    }
    Ok(shape)
}

/// Strides that read a tensor of `shape`/`strides` as `new_shape` in the same row-major order, or `None` when
/// its elements are not evenly spaced within some run of axes that `new_shape` merges or splits.
pub fn reshape_strides(shape: &[usize], strides: &[usize], new_shape: &[usize]) -> Option<Vec<usize>> {
    let mut out = dense_strides(new_shape);
    if shape.iter().product::<usize>() == 0 {
        return Some(out);
    }
    // Axes of size 1 take no part: their strides are arbitrary.
    let old: Vec<(usize, usize)> = shape.iter().zip(strides).filter(|(&d, _)| d != 1).map(|(&d, &s)| (d, s)).collect();
    let new: Vec<usize> = (0..new_shape.len()).filter(|&i| new_shape[i] != 1).collect();
    let (mut o, mut n) = (0, 0);
    while o < old.len() && n < new.len() {
        // The smallest runs old[o0..=o] and new[n0..=n] holding the same number of elements.
        let (o0, n0) = (o, n);
        let (mut old_size, mut new_size) = (old[o].0, new_shape[new[n]]);
        while old_size != new_size {
            if old_size < new_size {
                o += 1;
                old_size *= old.get(o)?.0;
            } else {
                n += 1;
                new_size *= new_shape[*new.get(n)?];
            }
        }
        if (o0..o).any(|k| old[k].1 != old[k + 1].1 * old[k + 1].0) {
            return None;
        }
        let mut stride = old[o].1;
        for k in (n0..=n).rev() {
            out[new[k]] = stride;
            stride *= new_shape[new[k]];
        }
        o += 1;
        n += 1;
    }
    Some(out)
}

/// Calls `f` with the offset of every element of `layout`, in row-major order.
pub fn for_each_offset(layout: &Layout, mut f: impl FnMut(usize)) {
    let total: usize = layout.shape.iter().product();
    let mut index = vec![0usize; layout.shape.len()];
    let mut at = layout.offset;
    for _ in 0..total {
        f(at);
        for axis in (0..index.len()).rev() {
            index[axis] += 1;
            at += layout.strides[axis];
            if index[axis] < layout.shape[axis] {
                break;
            }
            at -= layout.strides[axis] * layout.shape[axis];
            index[axis] = 0;
        }
    }
}
