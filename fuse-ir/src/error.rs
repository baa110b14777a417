//! Why a shape, a dtype or a value does not fit an op: the error every rule of the IR returns (shape and dtype
//! inference, the views, the model ops, the reference interpreter). The node it happened at is added by
//! `infer::NodeError`.

use crate::DType;
use std::fmt;

/// Why a node's shape or dtype cannot be computed. Shapes are as the user's tensors have them.
#[derive(Clone, Debug, PartialEq)]
pub enum InferError {
    /// The operands of a pointwise op do not broadcast.
    Broadcast { lhs: Vec<usize>, rhs: Vec<usize> },
    /// `a.matmul(b)` with mismatched inner dimensions or unsupported ranks.
    MatMul { lhs: Vec<usize>, rhs: Vec<usize> },
    /// The op needs more axes than the operand has.
    Rank { needs: &'static str, shape: Vec<usize> },
    /// `max` or `min` over an axis of no elements, which has no value (torch refuses it too; `sum` gives 0).
    EmptyReduce { op: &'static str, shape: Vec<usize> },
    /// Two tensors of different dtypes meet (cast one with `.to_dtype(..)`).
    DType { lhs: DType, rhs: DType },
    /// The graph read an argument that was not passed.
    MissingInput { index: usize },
    /// Arithmetic on token ids (`u32`), which take none.
    Integer { dtype: DType },
    /// A float converted to `u32`: ids come from `argmax` or `Tensor::from_vec(Vec<u32>, ..)`.
    ToInteger { from: DType },
    /// Block-quantized weights where an op computes on its operand (only a matmul's right operand, an
    /// embedding table, `to_dtype` and views read them); `op` names the op.
    Blocks { dtype: DType, op: &'static str },
    /// A conversion to a block-quantized type: fuse reads quantized files, it does not quantize.
    ToBlocks { to: DType },
    /// An operand of the wrong dtype: `operand` names it (`ids`), `expected` says what it takes (`u32`).
    OperandDType { operand: &'static str, expected: &'static str, got: Option<DType> },
    /// Operand shapes that do not fit a model op; `expected` says what it takes.
    Operands { expected: &'static str, shapes: Vec<Vec<usize>> },
    /// A token id outside the embedding table.
    IdOutOfRange { id: u64, vocab: usize },
    /// A `gather` index past the axis it picks from (`size` entries).
    IndexOutOfRange { index: u64, size: usize },
    /// `attention_len`'s key count of batch `batch` outside `least ..= keys`: more keys than k and v hold,
    /// or (causal, `least` = sq) fewer than the queries.
    KeyCount { batch: usize, len: u64, least: usize, keys: usize },
    /// A view or layout op that does not fit its operand (bad axes, sizes, element counts); the message
    /// says what and why (see `view.rs`).
    View(String),
}

impl fmt::Display for InferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InferError::Broadcast { lhs, rhs } => write!(f, "shapes {lhs:?} and {rhs:?} do not broadcast"),
            InferError::MatMul { lhs, rhs } => write!(
                f,
                "cannot multiply {lhs:?} by {rhs:?}: matmul takes [.., m, k] x [.., k, n] (at least two axes each, \
                 leading batch axes broadcast)"
            ),
            InferError::Rank { needs, shape } => write!(f, "needs {needs}, got shape {shape:?}"),
            InferError::EmptyReduce { op, shape } => {
                write!(f, "`{op}` over the last axis of {shape:?}, which holds no elements: there is no {op} to take")
            }
            InferError::DType { lhs, rhs } => {
                write!(f, "dtypes {lhs} and {rhs} differ (convert one with `.to_dtype(DType::..)`)")
            }
            InferError::MissingInput { index } => write!(f, "argument {index} was not passed"),
            InferError::Integer { dtype } => write!(
                f,
                "{dtype} values (token ids) take no arithmetic: convert them with `.to_dtype(DType::F32)` first"
            ),
            InferError::ToInteger { from } => write!(
                f,
                "{from} values do not convert to u32: token ids come from `argmax` or `Tensor::from_vec(Vec<u32>, ..)`"
            ),
            InferError::Blocks { dtype, op } => write!(
                f,
                "{op} does not take {dtype} blocks: quantized weights are read by a matmul as its right operand \
                 (`x.matmul(&w.t())`), by `embedding` as its table, and by `.to_dtype(..)`, which dequantizes them"
            ),
            InferError::ToBlocks { to } => write!(
                f,
                "to_dtype({to}): fuse does not quantize; {to} tensors come from a file's bytes (`Tensor::from_blocks`)"
            ),
            InferError::OperandDType { operand, expected, got: Some(got) } => {
                write!(f, "`{operand}` must be {expected}, got {got}")
            }
            InferError::OperandDType { operand, expected, got: None } => {
                write!(f, "`{operand}` must be a {expected} tensor, got a scalar")
            }
            InferError::Operands { expected, shapes } => {
                let shapes: Vec<String> = shapes.iter().map(|s| format!("{s:?}")).collect();
                write!(f, "takes {expected}, got shapes {}", shapes.join(", "))
            }
            InferError::IdOutOfRange { id, vocab } => {
                write!(f, "token id {id} is out of range for a vocabulary of {vocab} (ids are 0..{vocab})")
            }
            InferError::IndexOutOfRange { index, size } => {
                write!(f, "gather index {index} is out of range for an axis of {size} (indexes are 0..{size})")
            }
            InferError::KeyCount { batch, len, least, keys } => {
                let causal =
                    if *least > 0 { format!("under causal at least the {least} queries, ") } else { String::new() };
                write!(f, "key count lens[{batch}] = {len} is outside {least}..={keys} ({causal}at most the {keys} keys k and v hold)")
            }
            InferError::View(message) => f.write_str(message),
        }
    }
}
