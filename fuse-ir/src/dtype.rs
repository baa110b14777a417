//! Element types a tensor can hold.

use std::fmt;

/// The element type of a tensor. Arithmetic inside a fused group runs in f32 whatever the storage type.
///
/// `U32` holds token ids: it is what `embedding` reads and `argmax` returns, and it takes no arithmetic (an
/// op that computes on it is an error naming the op; convert with `.to_dtype(DType::F32)` first, exact up to
/// 2^24). Floats do not convert to `U32`: ids come from `Tensor::from_vec(Vec<u32>, ..)` or `argmax`.
///
/// The block-quantized types (`Q4_0` .. `Q6_K`, named as GGUF and ggml name them) hold weights as a model file
/// stores them: the last axis in blocks of [`BlockLayout::elements`] values, each block [`BlockLayout::bytes`]
/// bytes of scales and packed integers (see [`crate::quant`] for each layout and its dequantization). They
/// take no arithmetic: a matmul reads one as its right operand and dequantizes inside its loads, `embedding`
/// reads a quantized table, `to_dtype` dequantizes, and views keep whole blocks (`t()`, rows by `narrow`).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    U32,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K,
}

/// A block-quantized type's geometry: `elements` values of the last axis in `bytes` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockLayout {
    pub elements: usize,
    pub bytes: usize,
}

impl DType {
    /// The float types, which every arithmetic op takes.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// The block-quantized types.
    pub const QUANTIZED: [DType; 8] =
        [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K];

    /// The name printed in graphs and errors: lower case for element types (`f32`, `f16`, `bf16`, `u32`),
    /// GGUF's for block types (`Q4_0`, `Q4_K`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::U32 => "u32",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q8_0 => "Q8_0",
            DType::Q4_K => "Q4_K",
            DType::Q5_K => "Q5_K",
            DType::Q6_K => "Q6_K",
        }
    }

    /// The geometry of a block-quantized type; `None` for element types.
    pub fn block(self) -> Option<BlockLayout> {
        let (elements, bytes) = match self {
            DType::F32 | DType::F16 | DType::BF16 | DType::U32 => return None,
            DType::Q4_0 => (32, 18),
            DType::Q4_1 => (32, 20),
            DType::Q5_0 => (32, 22),
            DType::Q5_1 => (32, 24),
            DType::Q8_0 => (32, 34),
            DType::Q4_K => (256, 144),
            DType::Q5_K => (256, 176),
            DType::Q6_K => (256, 210),
        };
        Some(BlockLayout { elements, bytes })
    }

    pub fn is_quantized(self) -> bool {
        self.block().is_some()
    }

    /// Bytes of one element of an element type. A block type has no whole number of bytes an element: its
    /// tensors' sizes come from [`DType::storage_bytes`], and no path that takes `size_bytes` is open to them
    /// (shape inference refuses every op but the few that read blocks), so asking is a bug in fuse.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            q => panic!("internal: size_bytes of the block type {} (use storage_bytes)", q.name()),
        }
    }

    /// Bytes that `elements` values take, or `None` for a block type when they are not whole blocks.
    pub fn storage_bytes(self, elements: usize) -> Option<usize> {
        match self.block() {
            None => elements.checked_mul(self.size_bytes()),
            Some(b) if elements % b.elements == 0 => (elements / b.elements).checked_mul(b.bytes),
            Some(_) => None,
        }
    }

    /// Whether arithmetic takes it (F32, F16 and BF16).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Parses `f32`/`F32`, `f16`/`F16`, `bf16`/`BF16`, `u32`/`U32` and the block types' names in either case
    /// (`q4_k`, `Q4_K`).
    pub fn parse(s: &str) -> Option<DType> {
        let lower = s.to_ascii_lowercase();
        [DType::F32, DType::F16, DType::BF16, DType::U32]
            .into_iter()
            .chain(DType::QUANTIZED)
            .find(|d| d.name().eq_ignore_ascii_case(&lower))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
