//! The `#[fuse]` attribute: traces an ordinary tensor function into a graph at build time and replaces its
//! body with a call to the fused plan. Use it through the `fuse` crate (`use fuse::prelude::*;`).
//!
//! One file per phase: `signature.rs` checks the signature, `trace.rs` turns the body into a
//! `fuse_ir::Graph`, `expand.rs` writes the generated code (every path it names is in `paths.rs`),
//! `impl_block.rs` applies all that to the methods of an `impl` block, and `diag.rs` collects every error so
//! one build reports them all. This file only parses and delegates. The macro reads no environment variables
//! and never panics on user input.

mod diag;
mod expand;
mod impl_block;
mod label;
mod module_block;
mod paths;
mod signature;
mod trace;

use proc_macro::TokenStream;

/// Traces the function (a free `fn`, or a method taking `&self`) into a fused plan.
///
/// ```ignore
/// #[fuse]
/// pub fn mlp(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
///     let h = silu(x.matmul(w_gate)) * x.matmul(w_up);
///     Ok(h.matmul(w_down))
/// }
/// ```
///
/// Also generates `mlp_fused() -> &'static FusedFn` (for a method, the associated `forward_fused()`),
/// which gives the graph and the plan. Anything the macro cannot trace is a compile error at that token.
///
/// On an `impl` block (the only place it works for a trait impl such as `impl Module for Lin`), it fuses
/// every method marked `#[fuse]` and every method taking `&self` that returns `Result<Tensor>` or a tuple of
/// tensors, and puts their `*_fused()` companions in an inherent `impl` of the type. On an inline module it
/// fuses every function returning tensors. In a block or a module the fused functions may call each other
/// (`self.f(..)`, `Self::f(..)`, or `f(..)` in a module): the callee's body is inlined.
#[proc_macro_attribute]
pub fn fuse(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    let fn_error = match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(func) => return expand::fuse_fn(attr.into(), &func).into(),
        Err(e) => e,
    };
    if let Ok(block) = syn::parse2::<syn::ItemImpl>(item.clone()) {
        return impl_block::fuse_impl(attr.into(), &block).into();
    }
    if let Ok(module) = syn::parse2::<syn::ItemMod>(item.clone()) {
        return module_block::fuse_mod(attr.into(), &module).into();
    }
    let error = syn::Error::new(
        fn_error.span(),
        format!(
            "#[fuse] goes on a function (a free `fn` or a method taking `&self`) returning `Result<Tensor>`, or \
             on an `impl` block of such methods: {fn_error}"
        ),
    )
    .to_compile_error();
    quote::quote!(#error #item).into()
}
