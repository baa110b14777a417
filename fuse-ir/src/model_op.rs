//! The ops a whole model needs beyond pointwise work, reductions and matmul: `embedding`, `argmax`,
//! `cumsum`, `arg_sort_last_dim`, `gather`, `unfold` (convolutions), `rope`, `attention` (with
//! `attention_len`) and the tensor-parallel `all_reduce_sum`. Each is one node (`Op::Model`), planned as a group of its own;
//! this file defines each once: its name and text form, its shapes and dtypes, and (in
//! `model_op/reference.rs`) its f64 meaning.

mod reference;
pub mod unfold;

use crate::error::InferError;
use crate::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelOp {
    /// `embedding(&ids, &table)`: the rows of `table` [vocab, hidden] picked by the u32 `ids` (any shape
    /// [..]), giving [.., hidden]. An id >= vocab is an error naming it.
    Embedding,
    /// `x.argmax(-1)`: the u32 index of the largest value along the last axis, which is kept with size 1 (as
    /// `sum`/`max` keep it). Ties give the first index; a NaN counts as the largest (as torch).
    Argmax,
    /// `rope(&x, &cos, &sin)`: rotary embedding in the half-split layout of Hugging Face's Llama: x [.., seq,
    /// d], cos and sin [seq, d/2]; `out[i] = x[i] cos[i] - x[i + d/2] sin[i]` and `out[i + d/2] = x[i + d/2]
    /// cos[i] + x[i] sin[i]` for i < d/2.
    Rope,
    /// `attention(&q, &k, &v, scale, causal)`: `softmax(q k^T * scale) v` with q [b, hq, sq, d], k and v [b,
    /// hkv, skv, d], hq a multiple of hkv (query head h reads key/value head h / (hq / hkv)). `causal` aligns
    /// the queries with the last sq keys: query i sees keys 0 ..= skv - sq + i. Arguments: q, k, v, scale.
    ///
    /// `with_lens` is the user's `attention_len(&q, &k, &v, &lens, scale, causal)`: a fifth argument, `lens`
    /// (u32 `[b]`), says how many keys batch b has, so that k and v can be a whole preallocated cache whose
    /// length is device data rather than a shape (a step replays without host values). Batch b attends over
    /// keys `0 .. lens[b]` only, as if skv were `lens[b]`; keys past it are never read. `lens[b] > skv`, or
    /// `lens[b] < sq` under `causal`, is an error ([`InferError::KeyCount`]).
    Attention { causal: bool, with_lens: bool },
    /// `x.cumsum(-1)` (candle's name): running sums along the last axis, `out[.., i] = x[.., 0] + .. + x[.., i]`,
    /// the shape and dtype of x (summed in f32 on the devices, in order; a NaN carries on from where it is).
    Cumsum,
    /// `x.arg_sort_last_dim(ascending)` (candle's name): each row's column indices (u32, the shape of x)
    /// ordered by value, smallest first when `ascending`, largest first otherwise. As torch's stable sort:
    /// equal values keep the order of their indices, and a NaN counts as larger than every number (last
    /// ascending, first descending).
    ArgSort { ascending: bool },
    /// `arg_topk(x, k)`, what `x.topk(k)` (torch's) is made of with a `gather`: the first k indices of
    /// `arg_sort_last_dim(false)` along the last axis (the k largest, largest first), [.., k]; `k` a size
    /// argument of at most the axis' length.
    ArgTopK,
    /// `x.gather(&indexes, -1)` (candle's name): `out[.., j] = x[.., indexes[.., j]]` with x [.., n] and the
    /// u32 indexes [.., m] (the same leading axes), giving [.., m] in x's dtype. An index >= n is an error
    /// naming it ([`InferError::IndexOutOfRange`]).
    Gather,
    /// `unfold(x, w, padding, stride, dilation, groups)`: a convolution's columns (im2col), what `conv1d` and
    /// `conv2d` are made of (`Graph::conv`): x [b, c, l] or [b, c, h, w] and the weights [co, c / groups, k]
    /// or [co, c / groups, kh, kw] (read for their shape only) give [groups, b, ol, kc] or [groups, b, oh, ow,
    /// kc]; the four sizes are arguments (see [`unfold::Unfold`]). `spatial`: 1 or 2, which of the two.
    Unfold { spatial: u8 },
    /// `all_reduce_sum(&x)`: x summed over the ranks of the tensor-parallel group the call runs in
    /// (`fuse::parallel`), every rank getting the same sum, in x's shape and dtype. Each rank holds a part of a
    /// sum (the output of a GEMM whose K axis was split across the ranks); the sum is what one device holding
    /// the whole weight computes. Its meaning on one rank (the reference interpreter's) is x itself.
    AllReduceSum,
}

impl ModelOp {
    pub const ALL: [ModelOp; 15] = [
        ModelOp::Embedding,
        ModelOp::Argmax,
        ModelOp::Cumsum,
        ModelOp::ArgSort { ascending: true },
        ModelOp::ArgSort { ascending: false },
        ModelOp::ArgTopK,
        ModelOp::Gather,
        ModelOp::Unfold { spatial: 1 },
        ModelOp::Unfold { spatial: 2 },
        ModelOp::Rope,
        ModelOp::Attention { causal: false, with_lens: false },
        ModelOp::Attention { causal: true, with_lens: false },
        ModelOp::Attention { causal: false, with_lens: true },
        ModelOp::Attention { causal: true, with_lens: true },
        ModelOp::AllReduceSum,
    ];

    pub fn arity(self) -> usize {
        match self {
            ModelOp::Argmax | ModelOp::Cumsum | ModelOp::ArgSort { .. } | ModelOp::AllReduceSum => 1,
            ModelOp::Embedding | ModelOp::Gather | ModelOp::ArgTopK => 2,
            ModelOp::Rope => 3,
            ModelOp::Attention { with_lens, .. } => 4 + with_lens as usize,
            ModelOp::Unfold { .. } => 6,
        }
    }

    /// Name as written by users and printed in graphs and errors (`attention` for `attention_len` too: the
    /// label shows which was written, the text form adds `lens`).
    pub fn name(self) -> &'static str {
        match self {
            ModelOp::Embedding => "embedding",
            ModelOp::Argmax => "argmax",
            ModelOp::Cumsum => "cumsum",
            ModelOp::ArgSort { .. } => "arg_sort_last_dim",
            ModelOp::ArgTopK => "arg_topk",
            ModelOp::Gather => "gather",
            ModelOp::Unfold { .. } => "unfold",
            ModelOp::Rope => "rope",
            ModelOp::Attention { .. } => "attention",
            ModelOp::AllReduceSum => "all_reduce_sum",
        }
    }

    /// The op in a graph's text form: its name, then `causal=true|false` for attention and `lens` when it
    /// takes them, `ascending=true|false` for a sort, `spatial=1|2` for unfold.
    pub fn to_text(self) -> String {
        match self {
            ModelOp::ArgSort { ascending } => format!("arg_sort_last_dim ascending={ascending}"),
            ModelOp::Unfold { spatial } => format!("unfold spatial={spatial}"),
            ModelOp::Attention { causal, with_lens: false } => format!("attention causal={causal}"),
            ModelOp::Attention { causal, with_lens: true } => format!("attention causal={causal} lens"),
            op => op.name().to_string(),
        }
    }

    /// Reads [`ModelOp::to_text`] back: `name` is the op's word, `words` what follows it (the flags are taken
    /// from there). `None` if `name` is no model op, its flag is missing or an unknown word follows it.
    pub fn parse<'a>(name: &str, words: &mut impl Iterator<Item = &'a str>) -> Option<ModelOp> {
        match name {
            "embedding" => Some(ModelOp::Embedding),
            "argmax" => Some(ModelOp::Argmax),
            "cumsum" => Some(ModelOp::Cumsum),
            "gather" => Some(ModelOp::Gather),
            "arg_topk" => Some(ModelOp::ArgTopK),
            "unfold" => match words.next()? {
                "spatial=1" => Some(ModelOp::Unfold { spatial: 1 }),
                "spatial=2" => Some(ModelOp::Unfold { spatial: 2 }),
                _ => None,
            },
            "arg_sort_last_dim" => match words.next()? {
                "ascending=true" => Some(ModelOp::ArgSort { ascending: true }),
                "ascending=false" => Some(ModelOp::ArgSort { ascending: false }),
                _ => None,
            },
            "rope" => Some(ModelOp::Rope),
            "all_reduce_sum" => Some(ModelOp::AllReduceSum),
            "attention" => {
                let causal = match words.next()? {
                    "causal=true" => true,
                    "causal=false" => false,
                    _ => return None,
                };
                let with_lens = match words.next() {
                    None => false,
                    Some("lens") => true,
                    Some(_) => return None,
                };
                Some(ModelOp::Attention { causal, with_lens })
            }
            _ => None,
        }
    }

    /// The result's shape from the arguments' shapes (a scalar has shape `[]`) and the values of those that
    /// are sizes (`None` where unknown or a tensor; only `unfold` reads them).
    pub fn infer_shape(self, args: &[&[usize]], sizes: &[Option<f64>]) -> Result<Vec<usize>, InferError> {
        let mismatch = |expected| InferError::Operands { expected, shapes: args.iter().map(|s| s.to_vec()).collect() };
        match self {
            ModelOp::Embedding => {
                let (ids, table) = (args[0], args[1]);
                if table.len() != 2 {
                    return Err(InferError::Rank { needs: "a [vocab, hidden] table", shape: table.to_vec() });
                }
                Ok(ids.iter().copied().chain([table[1]]).collect())
            }
            ModelOp::Argmax => match args[0].split_last() {
                Some((&n, rest)) if n > 0 => Ok(rest.iter().copied().chain([1]).collect()),
                _ => Err(InferError::Rank { needs: "a last axis of at least one element", shape: args[0].to_vec() }),
            },
            ModelOp::AllReduceSum => Ok(args[0].to_vec()),
            ModelOp::Cumsum => match args[0].last() {
                Some(_) => Ok(args[0].to_vec()),
                None => Err(InferError::Rank { needs: "a tensor of at least one axis", shape: args[0].to_vec() }),
            },
            ModelOp::ArgSort { .. } => match args[0].last() {
                Some(&n) if u32::try_from(n).is_ok() => Ok(args[0].to_vec()),
                _ => Err(InferError::Rank {
                    needs: "a tensor of at least one axis, the last at most 2^32 - 1 long (u32 indices)",
                    shape: args[0].to_vec(),
                }),
            },
            ModelOp::ArgTopK => {
                let (x, k) = (args[0], sizes.get(1).copied().flatten());
                match (x.split_last(), k) {
                    (Some((&n, rest)), Some(k)) if k >= 0.0 && k.fract() == 0.0 && k <= n as f64 => {
                        Ok(rest.iter().copied().chain([k as usize]).collect())
                    }
                    _ => Err(InferError::View(format!(
                        "topk: k must be a whole number of at most the last axis' length, got {k:?} for a tensor of \
                         shape {x:?}"
                    ))),
                }
            }
            ModelOp::Unfold { spatial } => Ok(unfold::Unfold::of(spatial, args[0], args[1], sizes)?.shape()),
            ModelOp::Gather => {
                let (x, indexes) = (args[0], args[1]);
                let fits = !x.is_empty() && x.len() == indexes.len() && x[..x.len() - 1] == indexes[..x.len() - 1];
                if !fits {
                    return Err(mismatch(
                        "x [.., n] and u32 indexes [.., m] of the same rank and the same sizes but the last",
                    ));
                }
                Ok(indexes.to_vec())
            }
            ModelOp::Rope => {
                const EXPECTED: &str =
                    "x [b, .., seq, d] with d even, and cos and sin [seq, d/2] (the same positions for \
                     every batch) or [b, seq, d/2] (each batch its own)";
                let (x, cos, sin) = (args[0], args[1], args[2]);
                let r = x.len();
                let table = |c: &[usize]| match c {
                    [seq, half] => r >= 2 && [*seq, *half] == [x[r - 2], x[r - 1] / 2],
                    [b, seq, half] => r >= 3 && [*b, *seq, *half] == [x[0], x[r - 2], x[r - 1] / 2],
                    _ => false,
                };
                if r < 2 || x[r - 1] % 2 != 0 || !table(cos) || sin != cos {
                    return Err(mismatch(EXPECTED));
                }
                Ok(x.to_vec())
            }
            ModelOp::Attention { causal, with_lens } => {
                let (q, k, v, scale) = (args[0], args[1], args[2], args[3]);
                let fits = q.len() == 4
                    && k.len() == 4
                    && k == v
                    && scale.is_empty()
                    && q[0] == k[0]
                    && q[3] == k[3]
                    && k[1] > 0
                    && q[1] % k[1] == 0
                    && k[2] > 0;
                if !fits {
                    return Err(mismatch(
                        "q [b, hq, sq, d], k and v [b, hkv, skv, d] with skv > 0 and hq a multiple of hkv, and a \
                         scalar scale",
                    ));
                }
                if causal && q[2] > k[2] {
                    return Err(mismatch("causal: no more queries than keys (query i sees keys 0 ..= skv - sq + i)"));
                }
                if with_lens && args[4] != [q[0]] {
                    return Err(mismatch("lens [b]: one key count for each batch of q [b, hq, sq, d]"));
                }
                Ok(q.to_vec())
            }
        }
    }

    /// The result's dtype from the arguments' (`None` for scalars).
    pub fn infer_dtype(self, args: &[Option<DType>]) -> Result<Option<DType>, InferError> {
        const FLOAT: &str = "a float (f32, f16, bf16)";
        let float = |operand: &'static str, d: Option<DType>| match d {
            Some(d) if d.is_float() => Ok(d),
            got => Err(InferError::OperandDType { operand, expected: FLOAT, got }),
        };
        let same = |first: DType, others: &[(&'static str, Option<DType>)]| -> Result<DType, InferError> {
            for &(operand, d) in others {
                let d = float(operand, d)?;
                if d != first {
                    return Err(InferError::DType { lhs: first, rhs: d });
                }
            }
            Ok(first)
        };
        match self {
            ModelOp::Embedding => match args[0] {
                // A block-quantized table's rows come out dequantized, in f32.
                Some(DType::U32) if args[1].is_some_and(DType::is_quantized) => Ok(Some(DType::F32)),
                Some(DType::U32) => Ok(Some(float("table", args[1])?)),
                got => Err(InferError::OperandDType { operand: "ids", expected: "u32", got }),
            },
            ModelOp::Argmax => float("x", args[0]).map(|_| Some(DType::U32)),
            ModelOp::Cumsum | ModelOp::Unfold { .. } | ModelOp::AllReduceSum => float("x", args[0]).map(Some),
            ModelOp::ArgSort { .. } | ModelOp::ArgTopK => float("x", args[0]).map(|_| Some(DType::U32)),
            ModelOp::Gather => {
                if args[1] != Some(DType::U32) {
                    return Err(InferError::OperandDType { operand: "indexes", expected: "u32", got: args[1] });
                }
                match args[0] {
                    Some(d) if d == DType::U32 || d.is_float() => Ok(Some(d)),
                    got => Err(InferError::OperandDType { operand: "x", expected: "a float or u32 tensor", got }),
                }
            }
            ModelOp::Rope => {
                let x = float("x", args[0])?;
                same(x, &[("cos", args[1]), ("sin", args[2])]).map(Some)
            }
            ModelOp::Attention { with_lens, .. } => {
                let q = float("q", args[0])?;
                if let Some(d) = args[3].filter(|d| !d.is_float()) {
                    return Err(InferError::OperandDType { operand: "scale", expected: FLOAT, got: Some(d) });
                }
                if with_lens && args[4] != Some(DType::U32) {
                    return Err(InferError::OperandDType { operand: "lens", expected: "u32", got: args[4] });
                }
                same(q, &[("k", args[1]), ("v", args[2])]).map(Some)
            }
        }
    }
}

/// Which row of rope's cos and sin tables a row of x (`[b, .., seq, d]`, rows in order) reads: the row's
/// position (its index mod seq), in its batch's block of the tables where they are `[b, seq, d/2]` (each
/// sequence at its own positions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeTable {
    /// Rows of x a batch holds; all of them for `[seq, d/2]` tables (one block).
    pub rows_per_batch: usize,
}

impl RopeTable {
    /// The tables' rows for x of shape `x` and tables of shape `table` (as `infer_shape` accepts them).
    pub fn of(x: &[usize], table: &[usize]) -> RopeTable {
        let rows: usize = x[..x.len().saturating_sub(1)].iter().product();
        let per_batch = match (table.len(), x.first()) {
            (3, Some(&b)) if b > 0 => rows / b,
            _ => rows,
        };
        RopeTable { rows_per_batch: per_batch.max(1) }
    }

    /// The table row of x's row `row` (x's positions axis holds `seq`).
    pub fn row(self, row: usize, seq: usize) -> usize {
        (row / self.rows_per_batch) * seq + row % seq.max(1)
    }
}

/// `attention_len`'s key count `len` of batch `batch`, checked against the `keys` (skv) k and v hold and, under
/// `causal`, the `queries` (sq) that must fit among them. The reference interpreter and the CPU share this
/// rule; the GPU's kernels check the same (`fuse_model_check_lens`) and record a failure in its fault record.
pub fn check_key_count(batch: usize, len: u64, queries: usize, keys: usize, causal: bool) -> Result<usize, InferError> {
    let least = if causal { queries } else { 0 };
    match usize::try_from(len) {
        Ok(n) if (least..=keys).contains(&n) => Ok(n),
        _ => Err(InferError::KeyCount { batch, len, least, keys }),
    }
}

pub use reference::eval;

#[cfg(test)]
mod tests;
