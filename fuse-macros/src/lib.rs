//! The `#[fuse]` attribute: traces an ordinary tensor function into a graph at build time and replaces its
//! body with a call to the fused plan. Use it through the `fuse` crate (`use fuse::prelude::*;`).
//!
//! One file per phase: `signature.rs` checks the signature, `trace.rs` turns the body into a
//! `fuse_ir::Graph`, `expand.rs` writes the generated code (every path it names is in `paths.rs`), and
//! `diag.rs` collects every error so one build reports them all. This file only parses and delegates.
//! The macro reads no environment variables and never panics on user input.

mod diag;
mod expand;
mod label;
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
#[proc_macro_attribute]
pub fn fuse(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(func) => expand::fuse_fn(attr.into(), &func).into(),
        Err(parse_error) => {
            let error = syn::Error::new(
                parse_error.span(),
                format!(
                    "#[fuse] goes on a function (a free `fn` or a method taking `&self`) returning \
                     `Result<Tensor>`: {parse_error}"
                ),
            )
            .to_compile_error();
            quote::quote!(#error #item).into()
        }
    }
}
