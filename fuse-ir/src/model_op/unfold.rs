//! `unfold`, the gather that turns a convolution into a matmul (im2col): x [b, c, l] or [b, c, h, w] and the
//! kernel's weights [co, c / groups, k] or [co, c / groups, kh, kw] give the columns [groups, b, ol, kc] or
//! [groups, b, oh, ow, kc], kc = (c / groups) k (or kh kw): each output position's receptive field, channels
//! of its group first, then the kernel's rows and columns (the order of the weights' own axes, so that
//! `w.reshape(&[groups, -1, kc])` lines up). Positions outside x (the padding) read 0. `conv1d`/`conv2d`
//! (`Graph::conv`) are this, a batched matmul over the groups and views back to [b, co, ..].

use crate::error::InferError;

/// A convolution's geometry, checked: what `unfold` reads and writes. A 1-D convolution is a 2-D one of one
/// row (`h = kh = 1`, no padding and a stride of 1 along it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unfold {
    pub batch: usize,
    pub channels: usize,
    pub groups: usize,
    /// Spatial axes of x: 1 or 2.
    pub spatial: usize,
    /// Rows and columns of x, of the kernel and of the output; the padding and the stride along each.
    pub input: [usize; 2],
    pub kernel: [usize; 2],
    pub output: [usize; 2],
    pub padding: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: usize,
}

fn error(message: String) -> InferError {
    InferError::View(message)
}

/// A size argument's value: a whole number, at least `least`.
fn size(what: &str, v: Option<f64>, least: usize) -> Result<usize, InferError> {
    match v {
        Some(v) if v >= least as f64 && v.fract() == 0.0 && v <= u32::MAX as f64 => Ok(v as usize),
        Some(v) => Err(error(format!("conv: {what} must be an integer of at least {least}, got {v}"))),
        None => Err(error(format!("conv: {what} must be a literal, a `usize` argument or `x.dim(i)`"))),
    }
}

impl Unfold {
    /// The geometry of a convolution of `spatial` axes (1 or 2) of x (`[b, c, l]` or `[b, c, h, w]`), the
    /// weights w and the sizes padding, stride, dilation and groups (`sizes[2..6]`, as `unfold`'s arguments
    /// come).
    pub fn of(spatial: u8, x: &[usize], w: &[usize], sizes: &[Option<f64>]) -> Result<Unfold, InferError> {
        let at = |i: usize| sizes.get(i).copied().flatten();
        let (padding, stride) = (size("padding", at(2), 0)?, size("stride", at(3), 1)?);
        let (dilation, groups) = (size("dilation", at(4), 1)?, size("groups", at(5), 1)?);
        let spatial = spatial as usize;
        if x.len() != spatial + 2 || w.len() != x.len() {
            return Err(error(match spatial {
                1 => format!("conv1d takes x [b, c, l] and weights [co, c / groups, k], got {x:?} and {w:?}"),
                _ => format!("conv2d takes x [b, c, h, w] and weights [co, c / groups, kh, kw], got {x:?} and {w:?}"),
            }));
        }
        let (channels, out_channels) = (x[1], w[0]);
        if channels % groups != 0 || out_channels % groups != 0 || w[1] * groups != channels {
            return Err(error(format!(
                "conv: {groups} groups of x {x:?} and weights {w:?}: the channels ({channels}) and the weights' \
                 outputs ({out_channels}) must divide into the groups, and the weights' axis 1 hold channels / groups"
            )));
        }
        // A 1-D convolution: one row, kernel of one row, neither padded nor strided along it.
        let (input, kernel) = if spatial == 1 { ([1, x[2]], [1, w[2]]) } else { ([x[2], x[3]], [w[2], w[3]]) };
        let (padding, stride) = if spatial == 1 { ([0, padding], [1, stride]) } else { ([padding; 2], [stride; 2]) };
        let mut output = [0; 2];
        for a in 0..2 {
            let reach = dilation * kernel[a].saturating_sub(1) + 1;
            let padded = input[a] + 2 * padding[a];
            if kernel[a] == 0 || padded < reach {
                return Err(error(format!(
                    "conv: a kernel of {kernel:?} (dilation {dilation}) does not fit x {x:?} with padding {}",
                    padding[a]
                )));
            }
            output[a] = (padded - reach) / stride[a] + 1;
        }
        Ok(Unfold { batch: x[0], channels, groups, spatial, input, kernel, output, padding, stride, dilation })
    }

    /// Channels of a group times the kernel's positions: the columns' last axis.
    pub fn columns(&self) -> usize {
        self.channels / self.groups * self.kernel[0] * self.kernel[1]
    }

    /// The columns' shape: [groups, b, ol, kc] or [groups, b, oh, ow, kc].
    pub fn shape(&self) -> Vec<usize> {
        let spatial = &self.output[2 - self.spatial..];
        [&[self.groups, self.batch][..], spatial, &[self.columns()]].concat()
    }

    /// Where element `i` of the columns (row-major in [`Unfold::shape`]) reads x (dense [b, c, h, w], as
    /// an index), or `None` for the padding.
    pub fn source(&self, i: usize) -> Option<usize> {
        let kc = self.columns();
        let (k, position) = (i % kc, i / kc);
        let [oh, ow] = self.output;
        let (ox, oy, bi, gi) =
            (position % ow, position / ow % oh, position / (ow * oh) % self.batch, position / (ow * oh * self.batch));
        let [kh, kw] = self.kernel;
        let (kx, ky, channel) = (k % kw, k / kw % kh, gi * (self.channels / self.groups) + k / (kh * kw));
        let y =
            (oy * self.stride[0] + ky * self.dilation).checked_sub(self.padding[0]).filter(|&y| y < self.input[0])?;
        let x =
            (ox * self.stride[1] + kx * self.dilation).checked_sub(self.padding[1]).filter(|&x| x < self.input[1])?;
        Some(((bi * self.channels + channel) * self.input[0] + y) * self.input[1] + x)
    }
}
