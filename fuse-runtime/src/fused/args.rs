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
pub fn field_is_tensor<S, T: IntoArg + ?Sized>(_field: for<'a> fn(&'a S) -> &'a T) -> bool {
    T::IS_TENSOR
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

fn count_error(expected: usize, got: usize) -> Error {
    Error::OutputCount { function: "a fused function".into(), expected, got }
}

impl FromOutputs for Tensor {
    fn from_outputs(outputs: Vec<Tensor>) -> Result<Self> {
        let got = outputs.len();
        let mut it = outputs.into_iter();
        match (it.next(), it.next()) {
            (Some(t), None) => Ok(t),
            _ => Err(count_error(1, got)),
        }
    }
}

/// `Tensor` whatever the identifier: lets a macro repeat the type once per tuple element.
macro_rules! tensor_type {
    ($v:ident) => {
        Tensor
    };
}

macro_rules! tuple_outputs {
    ($($n:literal => ($($v:ident),*);)*) => {$(
        impl FromOutputs for ($(tensor_type!($v),)*) {
            fn from_outputs(outputs: Vec<Tensor>) -> Result<Self> {
                let got = outputs.len();
                match <[Tensor; $n]>::try_from(outputs) {
                    Ok([$($v),*]) => Ok(($($v,)*)),
                    Err(_) => Err(count_error($n, got)),
                }
            }
        }
    )*};
}

tuple_outputs! {
    2 => (a, b);
    3 => (a, b, c);
    4 => (a, b, c, d);
    5 => (a, b, c, d, e);
    6 => (a, b, c, d, e, f);
    7 => (a, b, c, d, e, f, g);
    8 => (a, b, c, d, e, f, g, h);
}

/// Whether a fused function runs its fused plan or one op at a time (to bisect a wrong answer or
/// measure what fusion buys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fusion {
    On,
    Off,
}
