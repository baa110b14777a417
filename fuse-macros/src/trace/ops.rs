//! What the tracer accepts by name: the methods and functions of the `#[fuse]` language, their arity, and
//! what to suggest for the names users bring from eager tensor libraries.

use fuse_ir::{BinaryOp, ReduceOp, UnaryOp};

/// The unary ops callable as `exp(x)` and `x.exp()`: all of them but `neg`, which is written `-x`.
fn callable_unary() -> impl Iterator<Item = UnaryOp> {
    UnaryOp::ALL.into_iter().filter(|&u| u != UnaryOp::Neg)
}

/// candle's names for ops fuse names otherwise: `sqr` is `square`, `gelu_erf` is `gelu` (the erf GELU).
const UNARY_ALIASES: [(&str, UnaryOp); 2] = [("sqr", UnaryOp::Square), ("gelu_erf", UnaryOp::Gelu)];

fn unary(name: &str) -> Option<UnaryOp> {
    callable_unary().find(|u| u.name() == name).or_else(|| UNARY_ALIASES.iter().find(|a| a.0 == name).map(|a| a.1))
}

fn elementwise_binary(name: &str) -> Option<BinaryOp> {
    match name {
        "maximum" => Some(BinaryOp::Maximum),
        "minimum" => Some(BinaryOp::Minimum),
        _ => None,
    }
}

/// The comparisons, methods only as in candle (`a.ge(b)`): 1 where true, 0 where false.
fn comparison(name: &str) -> Option<BinaryOp> {
    BinaryOp::ALL.into_iter().filter(|b| b.is_comparison()).find(|b| b.name() == name)
}

/// The view and layout methods (`views.rs` traces them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ViewMethod {
    Reshape,
    Transpose,
    Permute,
    Narrow,
    Unsqueeze,
    Squeeze,
    BroadcastAs,
    Contiguous,
    Dim,
    SliceSet,
}

impl ViewMethod {
    const ALL: [(&'static str, ViewMethod, usize, &'static str); 10] = [
        ("reshape", ViewMethod::Reshape, 1, "`x.reshape(&[d0, d1, ..])`"),
        ("transpose", ViewMethod::Transpose, 2, "`x.transpose(1, 2)`"),
        ("permute", ViewMethod::Permute, 1, "`x.permute(&[0, 2, 1, 3])`"),
        ("narrow", ViewMethod::Narrow, 3, "`x.narrow(axis, start, len)`"),
        ("unsqueeze", ViewMethod::Unsqueeze, 1, "`x.unsqueeze(1)`"),
        ("squeeze", ViewMethod::Squeeze, 1, "`x.squeeze(1)`"),
        ("broadcast_as", ViewMethod::BroadcastAs, 1, "`x.broadcast_as(&[d0, d1, ..])`"),
        ("contiguous", ViewMethod::Contiguous, 0, "`x.contiguous()`"),
        ("dim", ViewMethod::Dim, 1, "`x.dim(0)`"),
        ("slice_set", ViewMethod::SliceSet, 3, "`let cache = cache.slice_set(&rows, axis, offset)`"),
    ];

    fn entry(self) -> (&'static str, ViewMethod, usize, &'static str) {
        ViewMethod::ALL.into_iter().find(|e| e.1 == self).unwrap_or(ViewMethod::ALL[0])
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    MatMul,
    Transpose,
    View(ViewMethod),
    Reduce(ReduceOp),
    /// `x.sum_keepdim(axis)` and the others over any axis (candle's names).
    ReduceKeepdim(ReduceOp),
    Powf,
    /// `x.clamp(min, max)`: `minimum(maximum(x, min), max)` (candle's name).
    Clamp,
    /// `mask.where_cond(on_true, on_false)` (candle's name and order).
    WhereCond,
    ToDType,
    Argmax,
    /// `x.cumsum(axis)` (candle's name): running sums along any axis (the last one as is, another swapped
    /// there and back).
    Cumsum,
    /// `x.arg_sort_last_dim(ascending)` (candle's name).
    ArgSort,
    /// `x.gather(&indexes, axis)` (candle's name).
    Gather,
    /// `x.conv1d(&kernel, padding, stride, dilation, groups)` and `conv2d` (candle's), by spatial axes.
    Conv(usize),
    Unary(UnaryOp),
    Binary(BinaryOp),
}

impl Method {
    pub fn from_name(name: &str) -> Option<Method> {
        match name {
            "matmul" => Some(Method::MatMul),
            "t" => Some(Method::Transpose),
            "powf" => Some(Method::Powf),
            "clamp" => Some(Method::Clamp),
            "where_cond" => Some(Method::WhereCond),
            "to_dtype" => Some(Method::ToDType),
            "argmax" => Some(Method::Argmax),
            "cumsum" => Some(Method::Cumsum),
            "arg_sort_last_dim" => Some(Method::ArgSort),
            "gather" => Some(Method::Gather),
            "conv1d" => Some(Method::Conv(1)),
            "conv2d" => Some(Method::Conv(2)),
            _ if ViewMethod::ALL.iter().any(|e| e.0 == name) => {
                ViewMethod::ALL.into_iter().find(|e| e.0 == name).map(|e| Method::View(e.1))
            }
            _ if name.ends_with("_keepdim") => {
                ReduceOp::from_name(name.trim_end_matches("_keepdim")).map(Method::ReduceKeepdim)
            }
            _ => ReduceOp::from_name(name)
                .map(Method::Reduce)
                .or_else(|| unary(name).map(Method::Unary))
                .or_else(|| elementwise_binary(name).or_else(|| comparison(name)).map(Method::Binary)),
        }
    }

    /// Arguments besides the receiver.
    pub fn arity(self) -> usize {
        match self {
            Method::Transpose | Method::Unary(_) => 0,
            Method::Clamp | Method::WhereCond | Method::Gather => 2,
            Method::Conv(_) => 5,
            Method::View(v) => v.entry().2,
            Method::MatMul
            | Method::Reduce(_)
            | Method::ReduceKeepdim(_)
            | Method::Powf
            | Method::ToDType
            | Method::Argmax
            | Method::Cumsum
            | Method::ArgSort
            | Method::Binary(_) => 1,
        }
    }

    /// How a correct call looks, for arity errors.
    pub fn usage(self) -> String {
        match self {
            Method::MatMul => "`a.matmul(b)`".into(),
            Method::Transpose => "`w.t()`".into(),
            Method::View(v) => v.entry().3.into(),
            Method::Reduce(r) => format!("`x.{}(-1)`", r.name()),
            Method::ReduceKeepdim(r) => format!("`x.{}_keepdim(0)`", r.name()),
            Method::Powf => "`x.powf(2.0)`".into(),
            Method::Clamp => "`x.clamp(min, max)`".into(),
            Method::WhereCond => "`mask.where_cond(on_true, on_false)`".into(),
            Method::ToDType => "`x.to_dtype(DType::F32)`".into(),
            Method::Argmax => "`x.argmax(-1)`".into(),
            Method::Cumsum => "`x.cumsum(-1)`".into(),
            Method::ArgSort => "`x.arg_sort_last_dim(true)`".into(),
            Method::Gather => "`x.gather(&indexes, -1)`".into(),
            Method::Conv(d) => format!("`x.conv{d}d(&kernel, padding, stride, dilation, groups)`"),
            Method::Unary(u) => format!("`x.{}()`", u.name()),
            Method::Binary(b) => format!("`a.{}(b)`", b.name()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Function {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Softmax,
    RmsNorm,
    Embedding,
    Rope,
    /// `attention(q, k, v, scale, causal)`, or with `with_lens` `attention_len(q, k, v, lens, scale, causal)`.
    Attention {
        with_lens: bool,
    },
    /// `cat(&[&a, &b, ..], axis)` (`views.rs`).
    Cat,
    /// `all_reduce_sum(x)`: the sum over a tensor-parallel group's ranks.
    AllReduceSum,
}

impl Function {
    pub fn from_name(name: &str) -> Option<Function> {
        match name {
            "softmax" => Some(Function::Softmax),
            "rms_norm" => Some(Function::RmsNorm),
            "embedding" => Some(Function::Embedding),
            "rope" => Some(Function::Rope),
            "attention" => Some(Function::Attention { with_lens: false }),
            "attention_len" => Some(Function::Attention { with_lens: true }),
            "cat" => Some(Function::Cat),
            "all_reduce_sum" => Some(Function::AllReduceSum),
            _ => unary(name).map(Function::Unary).or_else(|| elementwise_binary(name).map(Function::Binary)),
        }
    }

    pub fn arity(self) -> usize {
        match self {
            Function::Unary(_) | Function::Softmax | Function::AllReduceSum => 1,
            Function::Binary(_) | Function::Embedding | Function::Cat => 2,
            Function::RmsNorm | Function::Rope => 3,
            Function::Attention { with_lens } => 5 + with_lens as usize,
        }
    }

    pub fn usage(self) -> String {
        match self {
            Function::Unary(u) => format!("`{}(x)`", u.name()),
            Function::Binary(b) => format!("`{}(a, b)`", b.name()),
            Function::Softmax => "`softmax(x)`".into(),
            Function::RmsNorm => "`rms_norm(x, weight, eps)`".into(),
            Function::Embedding => "`embedding(ids, table)`".into(),
            Function::AllReduceSum => "`all_reduce_sum(x)`".into(),
            Function::Rope => "`rope(x, cos, sin)`".into(),
            Function::Attention { with_lens: false } => {
                "`attention(q, k, v, scale, causal)` (`causal`: `true` or `false`)".into()
            }
            Function::Attention { with_lens: true } => {
                "`attention_len(q, k, v, lens, scale, causal)` (`lens`: a u32 tensor [b]; `causal`: `true` or `false`)"
                    .into()
            }
            Function::Cat => "`cat(&[&a, &b], axis)`".into(),
        }
    }
}

/// For messages: every supported method.
pub fn supported_methods() -> String {
    let mut names: Vec<String> = [
        "matmul(b)",
        "t()",
        "sum(-1)",
        "mean(-1)",
        "max(-1)",
        "min(-1)",
        "argmax(-1)",
        "cumsum(axis)",
        "arg_sort_last_dim(ascending)",
        "gather(&indexes, axis)",
        "conv1d(&kernel, padding, stride, dilation, groups)",
        "conv2d(&kernel, padding, stride, dilation, groups)",
        "powf(s)",
        "to_dtype(DType::..)",
        "sum_keepdim(axis)",
        "mean_keepdim(axis)",
        "max_keepdim(axis)",
        "min_keepdim(axis)",
    ]
    .iter()
    .chain(&[
        "reshape(&[..])",
        "transpose(a, b)",
        "permute(&[..])",
        "narrow(axis, start, len)",
        "unsqueeze(axis)",
        "squeeze(axis)",
        "broadcast_as(&[..])",
        "contiguous()",
        "dim(i)",
    ])
    .map(|s| format!("`{s}`"))
    .collect();
    names.extend(callable_unary().map(|u| format!("`{}()`", u.name())));
    names.extend(
        ["maximum(b)", "minimum(b)", "clamp(min, max)", "where_cond(on_true, on_false)"].map(|s| format!("`{s}`")),
    );
    names.extend(BinaryOp::ALL.into_iter().filter(|b| b.is_comparison()).map(|b| format!("`{}(b)`", b.name())));
    names.join(", ")
}

/// The functions besides the unary ones, as messages name them.
const OTHER_FUNCTIONS: [&str; 10] = [
    "maximum",
    "minimum",
    "softmax",
    "rms_norm",
    "embedding",
    "rope",
    "attention",
    "attention_len",
    "cat",
    "all_reduce_sum",
];

/// For messages: every supported function.
pub fn supported_functions() -> String {
    let mut names: Vec<String> = callable_unary().map(|u| format!("`{}`", u.name())).collect();
    names.extend(OTHER_FUNCTIONS.iter().map(|s| format!("`{s}`")));
    names.join(", ")
}

/// Methods that read a tensor's sizes as numbers, which are not known when the graph is built (`x.dim(i)`
/// is a size the graph reads at run time: a method of the language).
pub fn is_size_method(name: &str) -> bool {
    matches!(name, "shape" | "dims" | "size" | "elem_count" | "rank")
}

/// What to write instead of a name from an eager library, if there is a close equivalent.
pub fn suggestion(name: &str) -> Option<&'static str> {
    Some(match name {
        "swapaxes" | "swap_dims" => "write `x.transpose(a, b)`",
        "view" | "flatten" => "write `x.reshape(&[d0, d1, ..])` (a view when the strides allow)",
        "chunk" => "bind the parts by name: `let (a, b) = x.chunk(2, axis);`",
        "sort_last_dim" => "bind both by name: `let (values, indices) = x.sort_last_dim(ascending);`",
        "topk" => "bind both by name: `let (values, indices) = x.topk(k);`",
        "sort" | "argsort" | "arg_sort" => {
            "write `x.arg_sort_last_dim(ascending)`, or bind both of \
                                          `let (values, indices) = x.sort_last_dim(ascending);`"
        }
        "expand" => "write `x.broadcast_as(&[d0, d1, ..])`",
        "concat" | "concatenate" | "stack" => "write `cat(&[&a, &b], axis)`",
        "slice" | "i" => "write `x.narrow(axis, start, len)`",
        "mm" | "dot" | "bmm" | "broadcast_matmul" => "write `a.matmul(b)`",
        "pow" | "powi" | "powf_scalar" => "write `x.powf(s)`",
        "broadcast_add" | "add" => "write `a + b` (it broadcasts)",
        "broadcast_sub" | "sub" => "write `a - b` (it broadcasts)",
        "broadcast_mul" | "mul" => "write `a * b` (it broadcasts)",
        "broadcast_div" | "div" => "write `a / b` (it broadcasts)",
        "neg" => "write `-x`",
        "ln" => "write `log(x)`",
        "broadcast_maximum" | "max_elementwise" => "write `maximum(a, b)`",
        "broadcast_minimum" | "min" => "write `minimum(a, b)`",
        "softmax_last_dim" => "write `softmax(x)` (it runs over the last axis)",
        "argmax_keepdim" => "write `x.argmax(-1)` (it keeps the axis)",
        "index_select" => "for an embedding lookup write `embedding(ids, table)`",
        "scaled_dot_product_attention" | "sdpa" | "flash_attn" => "write `attention(q, k, v, scale, causal)`",
        "clone" | "to_owned" => "values are never copied inside #[fuse]: use `x` itself",
        "to_device" => "move tensors to the device before calling the function",
        name if is_size_method(name) => {
            "sizes are not known when the graph is built: write `x.dim(i)` where a size is needed (in `reshape` or \
             `narrow`), or take it as a `usize` parameter and pass it from the caller"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_name_is_accepted() {
        for u in callable_unary() {
            assert_eq!(Method::from_name(u.name()), Some(Method::Unary(u)));
            assert_eq!(Function::from_name(u.name()), Some(Function::Unary(u)));
        }
        for (alias, u) in UNARY_ALIASES {
            assert_eq!(Method::from_name(alias), Some(Method::Unary(u)));
            assert_eq!(Function::from_name(alias), Some(Function::Unary(u)));
        }
        for name in [
            "matmul",
            "t",
            "sum",
            "mean",
            "max",
            "min",
            "argmax",
            "powf",
            "clamp",
            "ge",
            "gt",
            "le",
            "lt",
            "eq",
            "ne",
            "to_dtype",
            "maximum",
            "minimum",
            "reshape",
            "transpose",
            "permute",
            "narrow",
            "contiguous",
            "dim",
        ] {
            assert!(Method::from_name(name).is_some(), "{name}");
        }
        // Every function the messages name is one.
        for name in OTHER_FUNCTIONS {
            assert!(Function::from_name(name).is_some(), "{name}");
        }
        assert_eq!(Method::from_name("neg"), None);
        assert_eq!(Function::from_name("matmul"), None);
    }
}
