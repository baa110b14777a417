//! Messages for syntax a fused graph cannot hold (the analogue of a graph break): each points at the
//! offending token and says what to write instead.

use crate::diag::Diagnostics;
use crate::label::{source_text, tokens_text};
use syn::{BinOp, Expr, Lit};

const LOOP: &str = "a fused function is one fixed graph; write the computation with whole-tensor ops (e.g. \
                    `x.sum(-1)`), or call the #[fuse] function from an ordinary loop";
const BRANCH: &str = "a fused function is one fixed graph; for elementwise choices use `maximum(a, b)`, \
                      `minimum(a, b)` or `relu(x)`; otherwise write one #[fuse] function per case and choose \
                      between them in ordinary code";

pub(super) fn expression(e: &Expr, diag: &mut Diagnostics) {
    match e {
        Expr::ForLoop(f) => diag.error_at(f.for_token, format!("`for` loops cannot be traced: {LOOP}")),
        Expr::While(w) => diag.error_at(w.while_token, format!("`while` loops cannot be traced: {LOOP}")),
        Expr::Loop(l) => diag.error_at(l.loop_token, format!("`loop` cannot be traced: {LOOP}")),
        Expr::If(i) => diag.error_at(i.if_token, format!("`if` cannot be traced: {BRANCH}")),
        Expr::Match(m) => diag.error_at(m.match_token, format!("`match` cannot be traced: {BRANCH}")),
        Expr::Closure(c) => diag
            .error_at(c, "closures cannot be traced: write the expression inline, or make it its own #[fuse] function"),
        Expr::Macro(m) => macro_call(&m.mac, diag),
        Expr::Index(i) if reads_a_size(&i.expr) => diag.error_at(
            i,
            format!(
                "`{0}` reads a size, which a #[fuse] body cannot: the graph is built once for every shape; take the \
                 size as a `usize` parameter (`n: usize`) and pass `{0}` from the caller",
                source_text(i)
            ),
        ),
        Expr::Index(i) => diag.error_span(
            i.bracket_token.span.join(),
            "indexing cannot be traced: fused ops work on whole tensors; select the part you need before calling \
             the function and pass it as a `&Tensor`",
        ),
        Expr::Assign(a) => diag.error_at(
            a.eq_token,
            "assignment cannot be traced: values are never changed in place; bind a new value with \
             `let name = ...;` (shadowing is fine)",
        ),
        Expr::Cast(c) => diag.error_at(
            c.as_token,
            "`as` casts cannot be traced: scalars take the dtype of the tensor they meet; to change a tensor's \
             dtype write `x.to_dtype(DType::F32)`",
        ),
        Expr::Struct(s) => diag.error_at(
            s,
            "struct literals cannot be traced: a #[fuse] body computes tensors; build the struct outside the \
             fused function",
        ),
        Expr::Array(a) => diag.error_at(
            a,
            "array literals cannot be traced: pass the data as a `&Tensor` parameter (`Tensor::from_vec(..)`)",
        ),
        Expr::Repeat(r) => diag.error_at(
            r,
            "array literals cannot be traced: pass the data as a `&Tensor` parameter (`Tensor::from_vec(..)`)",
        ),
        Expr::Await(a) => diag.error_at(
            a.await_token,
            "`.await` cannot be traced: a #[fuse] function is synchronous; await the value before calling it",
        ),
        Expr::Return(r) => diag.error_at(
            r.return_token,
            "`return` is only allowed as the last statement of a #[fuse] function: the whole body is one graph",
        ),
        Expr::Break(b) => diag.error_at(b.break_token, "`break` cannot be traced: a #[fuse] body has no loops"),
        Expr::Continue(c) => {
            diag.error_at(c.continue_token, "`continue` cannot be traced: a #[fuse] body has no loops")
        }
        Expr::Range(r) => diag.error_at(
            r,
            "ranges cannot be traced: fused ops work on whole tensors; select the part you need before calling \
             the function",
        ),
        Expr::Unsafe(u) => diag
            .error_at(u.unsafe_token, "`unsafe` blocks cannot be traced: the fused ops are all safe; remove `unsafe`"),
        Expr::Async(a) => {
            diag.error_at(a.async_token, "`async` blocks cannot be traced: a #[fuse] function is synchronous")
        }
        Expr::Let(l) => diag.error_at(l.let_token, format!("`let` in an expression cannot be traced: {BRANCH}")),
        other => diag.error_at(
            other,
            format!(
                "`{}` cannot be traced: a #[fuse] body is made of `let` bindings of tensor expressions (ops, \
                 `+ - * /`, literals, parameters and fields of `self`) and ends with its result",
                source_text(other)
            ),
        ),
    }
}

/// `x.shape()`, `x.dims()`: what a user indexes for one size.
fn reads_a_size(e: &Expr) -> bool {
    matches!(e, Expr::MethodCall(m) if super::ops::is_size_method(&m.method.to_string()))
}

/// `println!(..)` and friends: not part of any graph.
pub(super) fn macro_call(mac: &syn::Macro, diag: &mut Diagnostics) {
    let (path, bang) = (&mac.path, &mac.bang_token);
    let name = source_text(path);
    diag.error_at(
        quote::quote!(#path #bang),
        format!(
            "macros cannot be traced (`{name}!`): a #[fuse] body is compiled into kernels, not run; move `{name}!` \
             out of the fused function (to inspect values, call the eager ops outside it)"
        ),
    );
}

pub(super) fn binary_operator(op: &BinOp, diag: &mut Diagnostics) {
    let text = tokens_text(op);
    let instead = match op {
        BinOp::Lt(_) | BinOp::Le(_) | BinOp::Gt(_) | BinOp::Ge(_) | BinOp::Eq(_) | BinOp::Ne(_) => {
            "comparisons give booleans, which a fused graph does not have; for elementwise choices use \
             `maximum(a, b)`, `minimum(a, b)` or `relu(x)`"
        }
        BinOp::And(_) | BinOp::Or(_) => "a fused graph has no booleans; combine tensors with `+ - * /`",
        BinOp::Rem(_) => "there is no remainder op; supported operators are `+ - * /` and unary `-`",
        BinOp::BitAnd(_) | BinOp::BitOr(_) | BinOp::BitXor(_) | BinOp::Shl(_) | BinOp::Shr(_) => {
            "bit operations do not apply to float tensors; supported operators are `+ - * /` and unary `-`"
        }
        _ => "values are never changed in place: bind a new value instead, e.g. `let h = h + x;`",
    };
    diag.error_at(op, format!("`{text}` cannot be traced: {instead}"));
}

pub(super) fn literal(lit: &Lit, diag: &mut Diagnostics) {
    let what = match lit {
        Lit::Bool(_) => "booleans",
        Lit::Str(_) | Lit::ByteStr(_) | Lit::CStr(_) => "strings",
        Lit::Char(_) | Lit::Byte(_) => "characters",
        _ => "these literals",
    };
    diag.error_at(
        lit,
        format!("{what} cannot be traced: the only literals in a #[fuse] body are numbers, e.g. `2.0` or `1e-5`"),
    );
}
