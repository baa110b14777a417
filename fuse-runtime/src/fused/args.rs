//! How generated code hands arguments to a fused function and takes its outputs back.

use crate::{Error, Result, Tensor};

/// One argument of a fused function.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    Tensor(&'a Tensor),
    Scalar(f64),
}

impl<'a> Arg<'a> {
    /// The tensor, if this is one.
    pub(crate) fn tensor(&self) -> Option<&'a Tensor> {
        match *self {
            Arg::Tensor(t) => Some(t),
            Arg::Scalar(_) => None,
        }
    }

    /// The number, if this is a scalar.
    pub(crate) fn scalar(&self) -> Option<f64> {
        match *self {
            Arg::Scalar(v) => Some(v),
            Arg::Tensor(_) => None,
        }
    }
}

/// What may be passed to a fused function: tensors and the scalar types `f32`, `f64`, `usize`, `i64`.
pub trait IntoArg {
    /// Whether the value is passed as a tensor (else as a scalar).
    const IS_TENSOR: bool;
    fn to_arg(&self) -> Arg<'_>;
}

/// Whether the field that `field` reads is passed as a tensor: what `#[fuse]` on a method declares for
/// each field it reads (`field_is_tensor::<Self, _>(|s| &s.norm)`), from the field's type.
#[doc(hidden)]
pub fn field_is_tensor<S, T: PrepareArg + ?Sized>(_field: for<'a> fn(&'a S) -> &'a T) -> bool {
    T::IS_TENSOR
}

/// One argument as a `#[fuse]` function holds it for the length of a call: borrowed as it is, or a tensor
/// converted from another library's (`candle_core::Tensor` with the `candle` feature).
#[doc(hidden)]
pub enum Prepared<'a> {
    Arg(Arg<'a>),
    /// A view of another library's memory and the read lock that keeps it unwritten while the call reads it
    /// (dropped in this order when the function returns, after its outputs were made its own).
    Held {
        tensor: Tensor,
        _lock: Box<dyn Hold + 'a>,
    },
}

/// Anything held for its drop (a lock guard).
#[doc(hidden)]
pub trait Hold {}
impl<T: ?Sized> Hold for T {}

impl Prepared<'_> {
    /// The argument the call reads.
    pub fn arg(&self) -> Arg<'_> {
        match self {
            Prepared::Arg(a) => *a,
            Prepared::Held { tensor, .. } => Arg::Tensor(tensor),
        }
    }
}

/// What a `#[fuse]` function's parameters and tensor fields may be: anything [`IntoArg`] (fuse's `Tensor`,
/// `f32`, `f64`, `usize`, `i64`), and with the `candle` feature `candle_core::Tensor`, converted per call.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed to a #[fuse] function",
    label = "not a tensor nor a scalar argument",
    note = "a #[fuse] parameter or field read by the body is `Tensor` (fuse's, or candle's with the `candle` feature) or a scalar `f32`, `f64`, `usize`, `i64`"
)]
pub trait PrepareArg {
    /// Whether the value is passed as a tensor (else as a scalar).
    const IS_TENSOR: bool;
    fn prepare(&self) -> Result<Prepared<'_>>;
}

impl<T: IntoArg + ?Sized> PrepareArg for T {
    const IS_TENSOR: bool = T::IS_TENSOR;
    fn prepare(&self) -> Result<Prepared<'_>> {
        Ok(Prepared::Arg(self.to_arg()))
    }
}

/// `prepare(x)` for `x: &Tensor`, `prepare(&eps)` for `eps: f32`, `prepare(&self.norm)` for a field: what
/// the generated code calls for each argument before the call.
#[doc(hidden)]
pub fn prepare<T: PrepareArg + ?Sized>(v: &T) -> Result<Prepared<'_>> {
    v.prepare()
}

/// `arg(x)` for `x: &Tensor`, `arg(&eps)` for `eps: f32`, `arg(&self.norm)` for a field.
pub fn arg<T: IntoArg + ?Sized>(v: &T) -> Arg<'_> {
    v.to_arg()
}

impl IntoArg for Tensor {
    const IS_TENSOR: bool = true;
    fn to_arg(&self) -> Arg<'_> {
        Arg::Tensor(self)
    }
}

impl<T: IntoArg + ?Sized> IntoArg for &T {
    const IS_TENSOR: bool = T::IS_TENSOR;
    fn to_arg(&self) -> Arg<'_> {
        (**self).to_arg()
    }
}

macro_rules! scalar_args {
    ($($t:ty),*) => {$(
        impl IntoArg for $t {
            const IS_TENSOR: bool = false;
            fn to_arg(&self) -> Arg<'_> {
                Arg::Scalar(*self as f64)
            }
        }
    )*};
}
scalar_args!(f32, f64, usize, i64);

/// The Rust return value of a fused function, from the graph's outputs in order.
pub trait FromOutputs: Sized {
    fn from_outputs(outputs: Vec<Tensor>) -> Result<Self>;
}

/// One returned tensor as the function's Rust type: fuse's `Tensor` as it is, or (with the `candle`
/// feature) a `candle_core::Tensor`.
pub trait FromOutput: Sized {
    fn from_output(output: Tensor) -> Result<Self>;
}

impl FromOutput for Tensor {
    /// The output itself; an output that is a view of another library's memory (a candle argument returned
    /// as it is, or reshaped) is copied, as that memory is read only while the call holds its lock.
    fn from_output(output: Tensor) -> Result<Self> {
        if output.is_borrowed() {
            return output.dense_copy();
        }
        Ok(output)
    }
}

fn count_error(expected: usize, got: usize) -> Error {
    Error::OutputCount { function: "a fused function".into(), expected, got }
}

impl<T: FromOutput> FromOutputs for T {
    fn from_outputs(outputs: Vec<Tensor>) -> Result<Self> {
        let got = outputs.len();
        let mut it = outputs.into_iter();
        match (it.next(), it.next()) {
            (Some(t), None) => T::from_output(t),
            _ => Err(count_error(1, got)),
        }
    }
}

macro_rules! tuple_outputs {
    ($($n:literal => ($($v:ident: $t:ident),*);)*) => {$(
        impl<$($t: FromOutput),*> FromOutputs for ($($t,)*) {
            fn from_outputs(outputs: Vec<Tensor>) -> Result<Self> {
                let got = outputs.len();
                match <[Tensor; $n]>::try_from(outputs) {
                    Ok([$($v),*]) => Ok(($($t::from_output($v)?,)*)),
                    Err(_) => Err(count_error($n, got)),
                }
            }
        }
    )*};
}

tuple_outputs! {
    2 => (a: A, b: B);
    3 => (a: A, b: B, c: C);
    4 => (a: A, b: B, c: C, d: D);
    5 => (a: A, b: B, c: C, d: D, e: E);
    6 => (a: A, b: B, c: C, d: D, e: E, f: F);
    7 => (a: A, b: B, c: C, d: D, e: E, f: F, g: G);
    8 => (a: A, b: B, c: C, d: D, e: E, f: F, g: G, h: H);
}

/// Whether a fused function runs its fused plan or one op at a time (to bisect a wrong answer or
/// measure what fusion buys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fusion {
    On,
    Off,
}
