//! Element types a tensor can hold.

use std::fmt;

/// The element type of a tensor. Arithmetic inside a fused group runs in f32 whatever the storage type.
///
/// `U32` holds token ids: it is what `embedding` reads and `argmax` returns, and it takes no arithmetic (an
/// op that computes on it is an error naming the op; convert with `.to_dtype(DType::F32)` first, exact up to
/// 2^24). Floats do not convert to `U32`: ids come from `Tensor::from_vec(Vec<u32>, ..)` or `argmax`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    U32,
}

impl DType {
    /// The float types, which every arithmetic op takes.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// Lower-case name, as printed in graphs and errors (`f32`, `f16`, `bf16`, `u32`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::U32 => "u32",
        }
    }

    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Whether arithmetic takes it (every dtype but `U32`).
    pub fn is_float(self) -> bool {
        self != DType::U32
    }

    /// Parses `f32`/`F32`, `f16`/`F16`, `bf16`/`BF16`, `u32`/`U32`.
    pub fn parse(s: &str) -> Option<DType> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Some(DType::F32),
            "f16" => Some(DType::F16),
            "bf16" => Some(DType::BF16),
            "u32" => Some(DType::U32),
            _ => None,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
