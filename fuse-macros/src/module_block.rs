//! `#[fuse]` on an inline module (`#[fuse] mod layers { .. }`): every function in it that takes tensors and
//! returns them (`Result<Tensor>` or a tuple) is fused, each with its companion beside it, and they may call
//! each other by name (`layer_norm(x, w, b)`): the callee's body is inlined into the caller's graph, as between
//! the functions of a `#[fuse]` impl block. Everything else in the module is left as it is.

use crate::diag::Diagnostics;
use crate::expand::{check_no_arguments, expand_fn, Place};
use crate::signature::{check_signature, Returns};
use crate::trace::Callee;
use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::{Item, ItemFn, ItemMod};

pub fn fuse_mod(attr: TokenStream, module: &ItemMod) -> TokenStream {
    let mut diag = Diagnostics::new();
    check_no_arguments(&attr, &mut diag);
    let Some((_, items)) = &module.content else {
        diag.error_at(
            module,
            "#[fuse] on a module needs its body here (`mod layers { .. }`): the macro cannot read another file",
        );
        let errors = diag.combined().map(|e| e.to_compile_error());
        return quote!(#errors #module);
    };
    let functions: Vec<ItemFn> = items
        .iter()
        .filter_map(|item| match item {
            Item::Fn(f) => Some(without_fuse_attributes(f)),
            _ => None,
        })
        .collect();
    let callees = std::rc::Rc::new(Callee::of_block(&functions));
    let mut out = Vec::new();
    let mut fused = 0;
    for item in items {
        let Item::Fn(f) = item else {
            out.push(item.to_token_stream());
            continue;
        };
        let f = without_fuse_attributes(f);
        if !returns_tensors(&f) {
            out.push(f.to_token_stream());
            continue;
        }
        fused += 1;
        let place =
            Place { in_impl: false, owner: None, companion_vis: f.vis.clone(), alone: false, callees: callees.clone() };
        let expansion = expand_fn(&f, &place, &mut diag);
        out.push(expansion.item);
        out.push(expansion.companion);
    }
    if fused == 0 {
        diag.error_at(
            &module.ident,
            "#[fuse] on a module fuses its functions that return `Result<Tensor>` (or a tuple of tensors), and this \
             one has none",
        );
    }
    let errors = diag.combined().map(|e| e.to_compile_error());
    let (attrs, vis, mod_token, ident) = (&module.attrs, &module.vis, &module.mod_token, &module.ident);
    quote!(#errors #(#attrs)* #vis #mod_token #ident { #(#out)* })
}

/// A function whose signature `#[fuse]` accepts and that returns tensors: the ones a module fuses.
fn returns_tensors(f: &ItemFn) -> bool {
    let mut quiet = Diagnostics::new();
    let spec = check_signature(&f.sig, &mut quiet);
    quiet.len() == 0 && matches!(spec.returns, Some(Returns::Tensor | Returns::Tuple(_)))
}

/// `#[fuse]` written on a function of the module as well: the module's macro expands it once.
fn without_fuse_attributes(f: &ItemFn) -> ItemFn {
    let mut f = f.clone();
    f.attrs.retain(|a| !crate::impl_block::is_fuse_attribute(a));
    f
}
