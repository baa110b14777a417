//! The Rust types a tensor can be built from and read back into.

use fuse_ir::DType;
use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for u32 {}
}

/// An element type: `f32`, `half::f16`, `half::bf16`, or `u32` for token ids. Sealed: the backends know
/// exactly these four.
pub trait Element: sealed::Sealed + Copy + Send + Sync + std::fmt::Debug + 'static {
    const DTYPE: DType;
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    #[inline]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    #[inline]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// Token ids. `to_f32` is exact below 2^24; `from_f32` truncates (saturating) and is never used to read a
/// float tensor as ids: `to_vec::<u32>()` of a float tensor is an error.
impl Element for u32 {
    const DTYPE: DType = DType::U32;
    #[inline]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        v as u32
    }
}

/// Rounds an f32 to the nearest value `dtype` can hold (what storing and reloading would do).
#[inline]
pub(crate) fn round_to(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::F32 => v,
        DType::F16 => f16::from_f32(v).to_f32(),
        DType::BF16 => bf16::from_f32(v).to_f32(),
        DType::U32 => (v as u32) as f32,
        // No result is block-quantized (inference refuses every op that would write blocks).
        _ => v,
    }
}
