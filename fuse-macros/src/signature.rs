//! Checks the signature of a `#[fuse]` function: what its parameters are (tensors or scalars, each a graph
//! input) and what it returns (one tensor or a tuple of them).

use crate::diag::Diagnostics;
use fuse_ir::InputKind;
use syn::{FnArg, GenericParam, Pat, PathArguments, ReturnType, Signature, Type};

/// The largest tuple the runtime's `FromOutputs` converts to.
pub const MAX_TUPLE: usize = 8;

/// A parameter the body may name.
pub struct Param {
    pub ident: syn::Ident,
    /// `None` when the parameter's type or pattern is wrong (already reported): the body may still use the
    /// name without causing a second error.
    pub kind: Option<InputKind>,
    /// A `usize` or `i64` scalar: an integer, so `a / b` of two of them divides as Rust's integers do.
    pub integer: bool,
    /// A `bool`: not a graph input; it chooses between graphs (one per value, see `expand.rs`).
    pub flag: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returns {
    Tensor,
    Tuple(usize),
}

impl Param {
    /// A parameter whose type or pattern was wrong (already reported): a name the body may still use.
    fn unusable(ident: syn::Ident) -> Param {
        Param { ident, kind: None, integer: false, flag: false }
    }
}

pub struct FnSpec {
    /// Takes `&self`: fields of `self` may be read, and the generated code lives in an impl block.
    pub is_method: bool,
    pub params: Vec<Param>,
    /// `None` when the return type is wrong (already reported).
    pub returns: Option<Returns>,
}

const SCALAR_TYPES: [&str; 4] = ["f32", "f64", "usize", "i64"];

pub fn check_signature(sig: &Signature, diag: &mut Diagnostics) -> FnSpec {
    check_qualifiers(sig, diag);
    let mut is_method = false;
    let mut params = Vec::new();
    for arg in &sig.inputs {
        match arg {
            FnArg::Receiver(receiver) => {
                is_method = true;
                check_receiver(receiver, diag);
            }
            FnArg::Typed(typed) => {
                if mentions_type_parameter(&typed.ty, &sig.generics) {
                    // Already reported as a generic parameter: say nothing more about this one.
                    let mut names = Vec::new();
                    bound_names(&typed.pat, &mut names);
                    params.extend(names.into_iter().map(Param::unusable));
                } else {
                    param(&typed.pat, &typed.ty, diag, &mut params);
                }
            }
        }
    }
    if let Some(variadic) = &sig.variadic {
        diag.error_at(variadic, "variadic parameters are not supported: pass each tensor as `name: &Tensor`");
    }
    FnSpec { is_method, params, returns: check_return(sig, diag) }
}

fn check_qualifiers(sig: &Signature, diag: &mut Diagnostics) {
    if let Some(t) = &sig.constness {
        diag.error_at(t, "a #[fuse] function cannot be `const fn`: remove `const` (it runs kernels at run time)");
    }
    if let Some(t) = &sig.asyncness {
        diag.error_at(t, "a #[fuse] function cannot be `async`: remove `async` (kernels are launched synchronously)");
    }
    if let Some(t) = &sig.unsafety {
        diag.error_at(t, "a #[fuse] function cannot be `unsafe`: remove `unsafe` (the traced ops are all safe)");
    }
    if let Some(abi) = &sig.abi {
        diag.error_at(abi, "a #[fuse] function cannot have an `extern` ABI: remove it and wrap the function if needed");
    }
    for p in &sig.generics.params {
        match p {
            GenericParam::Lifetime(_) => {}
            GenericParam::Type(_) | GenericParam::Const(_) => diag.error_at(
                p,
                "a #[fuse] function cannot be generic: the graph is fixed at build time; take `&Tensor` \
                 (its dtype is chosen at run time) instead of a type parameter",
            ),
        }
    }
    if let Some(w) = &sig.generics.where_clause {
        diag.error_at(w, "a #[fuse] function cannot have a `where` clause: remove it (the function takes no generics)");
    }
}

/// `T` or `&T` for a type parameter `T` of the function.
fn mentions_type_parameter(ty: &Type, generics: &syn::Generics) -> bool {
    let ty = match ty {
        Type::Reference(r) => &*r.elem,
        other => other,
    };
    matches!(ty, Type::Path(p) if p.qself.is_none() && generics.type_params().any(|t| p.path.is_ident(&t.ident)))
}

/// `&self` or `self: &Self`; anything else moves or mutates `self`.
pub fn takes_shared_self(receiver: &syn::Receiver) -> bool {
    match (&receiver.reference, &receiver.colon_token) {
        (Some(_), _) => receiver.mutability.is_none(),
        (None, Some(_)) => {
            matches!(&*receiver.ty, Type::Reference(r) if r.mutability.is_none() && is_self_type(&r.elem))
        }
        (None, None) => false,
    }
}

fn check_receiver(receiver: &syn::Receiver, diag: &mut Diagnostics) {
    if !takes_shared_self(receiver) {
        diag.error_at(
            receiver,
            "a #[fuse] method takes `&self`: write `&self` (fields are read, never moved or changed)",
        );
    }
}

fn is_self_type(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident("Self"))
}

fn param(pat: &Pat, ty: &Type, diag: &mut Diagnostics, params: &mut Vec<Param>) {
    let ident = match pat {
        Pat::Ident(p) if p.by_ref.is_none() && p.mutability.is_none() && p.subpat.is_none() => p.ident.clone(),
        Pat::Ident(p) if p.subpat.is_none() => {
            diag.error_at(
                pat,
                format!("patterns are not supported in #[fuse] parameters: write a plain name, `{}`", p.ident),
            );
            params.push(Param::unusable(p.ident.clone()));
            return;
        }
        _ => {
            diag.error_at(
                pat,
                "patterns are not supported in #[fuse] parameters: take each tensor as its own `name: &Tensor`",
            );
            let mut names = Vec::new();
            bound_names(pat, &mut names);
            params.extend(names.into_iter().map(Param::unusable));
            return;
        }
    };
    let flag = matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident("bool"));
    let kind = if flag { None } else { param_kind(&ident, ty, diag) };
    let integer = is_integer_type(ty);
    params.push(Param { ident, kind, integer, flag });
}

fn param_kind(ident: &syn::Ident, ty: &Type, diag: &mut Diagnostics) -> Option<InputKind> {
    match ty {
        Type::Reference(r) if is_tensor_type(&r.elem) => {
            if let Some(m) = &r.mutability {
                let and = &r.and_token;
                diag.error_at(
                    quote::quote!(#and #m),
                    format!(
                        "`&mut Tensor` is not supported: fused functions return new tensors; write `{ident}: &Tensor`"
                    ),
                );
                return None;
            }
            Some(InputKind::Tensor)
        }
        _ if is_tensor_type(ty) => {
            diag.error_at(ty, format!("take tensors by reference: write `{ident}: &Tensor`"));
            None
        }
        _ if is_scalar_type(ty) => Some(InputKind::Scalar),
        _ => {
            diag.error_at(
                ty,
                format!(
                    "unsupported parameter type `{}`: a #[fuse] parameter is `&Tensor`, a scalar (`f32`, `f64`, `usize`, `i64`) or a `bool`",
                    crate::label::source_text(ty)
                ),
            );
            None
        }
    }
}

/// Names a pattern binds, so the body can use them without a second error.
pub(crate) fn bound_names(pat: &Pat, out: &mut Vec<syn::Ident>) {
    match pat {
        Pat::Ident(p) => out.push(p.ident.clone()),
        Pat::Tuple(t) => t.elems.iter().for_each(|p| bound_names(p, out)),
        Pat::TupleStruct(t) => t.elems.iter().for_each(|p| bound_names(p, out)),
        Pat::Struct(s) => s.fields.iter().for_each(|f| bound_names(&f.pat, out)),
        Pat::Reference(r) => bound_names(&r.pat, out),
        Pat::Paren(p) => bound_names(&p.pat, out),
        Pat::Type(t) => bound_names(&t.pat, out),
        Pat::Slice(s) => s.elems.iter().for_each(|p| bound_names(p, out)),
        _ => {}
    }
}

/// `usize` or `i64`.
pub fn is_integer_type(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && (p.path.is_ident("usize") || p.path.is_ident("i64")))
}

/// `f32`, `f64`, `usize` or `i64`.
pub fn is_scalar_type(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && SCALAR_TYPES.iter().any(|s| p.path.is_ident(s)))
}

/// A path ending in `Tensor` with no generic arguments (`Tensor`, `fuse::Tensor`).
pub fn is_tensor_type(ty: &Type) -> bool {
    match ty {
        Type::Path(p) if p.qself.is_none() => {
            p.path.segments.last().is_some_and(|s| s.ident == "Tensor" && s.arguments.is_none())
        }
        Type::Paren(p) => is_tensor_type(&p.elem),
        Type::Group(g) => is_tensor_type(&g.elem),
        _ => false,
    }
}

pub fn check_return(sig: &Signature, diag: &mut Diagnostics) -> Option<Returns> {
    let ty = match &sig.output {
        ReturnType::Default => {
            diag.error_span(
                sig.paren_token.span.close(),
                "a #[fuse] function must return its result: add `-> Result<Tensor>` (or `-> Result<(Tensor, Tensor)>`)",
            );
            return None;
        }
        ReturnType::Type(_, ty) => ty,
    };
    let wrong = |diag: &mut Diagnostics| {
        diag.error_at(
            ty,
            format!(
                "a #[fuse] function returns `Result<Tensor>` or `Result<(Tensor, Tensor, ...)>`, not `{}`: \
                 running it can fail (shapes, devices), so write `-> Result<Tensor>` and end with `Ok(..)`",
                crate::label::source_text(ty)
            ),
        );
        None
    };
    let Type::Path(path) = &**ty else { return wrong(diag) };
    let Some(last) = path.path.segments.last() else { return wrong(diag) };
    if path.qself.is_some() || last.ident != "Result" {
        return wrong(diag);
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else { return wrong(diag) };
    let Some(syn::GenericArgument::Type(ok)) = args.args.first() else { return wrong(diag) };
    if args.args.len() > 2 {
        return wrong(diag);
    }
    if is_tensor_type(ok) {
        return Some(Returns::Tensor);
    }
    let Type::Tuple(tuple) = ok else { return wrong(diag) };
    if !tuple.elems.iter().all(is_tensor_type) {
        return wrong(diag);
    }
    let n = tuple.elems.len();
    if !(2..=MAX_TUPLE).contains(&n) {
        diag.error_at(
            ok,
            format!("a #[fuse] function returns one `Tensor` or a tuple of 2 to {MAX_TUPLE} tensors, not {n}"),
        );
        return None;
    }
    Some(Returns::Tuple(n))
}
