//! `#[fuse]` on an `impl` block, the only place it can go for a trait impl (`impl Module for Lin`): a trait
//! impl may hold only the trait's methods, so each method's companion `<name>_fused()` goes into an inherent
//! `impl` of the same type, emitted after the block with its generics and `where` clause.
//!
//! Which methods are fused: every method marked `#[fuse]`, and every method taking `&self` that returns
//! `Result<Tensor>` or `Result<(Tensor, ..)>`. The others are left as they are.

use crate::diag::Diagnostics;
use crate::expand::{cfg_attrs, check_no_arguments, expand_fn, Place};
use crate::signature::{check_return, takes_shared_self};
use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::{Attribute, ImplItem, ImplItemFn, ItemFn, ItemImpl, Type};

pub fn fuse_impl(attr: TokenStream, block: &ItemImpl) -> TokenStream {
    let mut diag = Diagnostics::new();
    check_no_arguments(&attr, &mut diag);
    let owner = type_name(&block.self_ty);
    // A trait's methods are as public as the trait; give their companions the same reach.
    let is_trait_impl = block.trait_.is_some();
    let mut rewritten = block.clone();
    let mut companions = Vec::new();
    // Every function of the block, as written: the fused ones may call each other (inlined).
    let functions: Vec<ItemFn> = block
        .items
        .iter()
        .filter_map(|item| match item {
            ImplItem::Fn(f) => Some(as_item_fn(f)),
            _ => None,
        })
        .collect();
    let callees = std::rc::Rc::new(crate::trace::Callee::of_block(&functions));
    for item in &mut rewritten.items {
        let ImplItem::Fn(method) = item else { continue };
        let marked = take_fuse_attributes(method, &mut diag);
        if !marked && !fused_by_default(method) {
            continue;
        }
        let companion_vis = if is_trait_impl { syn::parse_quote!(pub) } else { method.vis.clone() };
        let place =
            Place { in_impl: true, owner: Some(owner.clone()), companion_vis, alone: false, callees: callees.clone() };
        let expansion = expand_fn(&as_item_fn(method), &place, &mut diag);
        *item = ImplItem::Verbatim(expansion.item);
        companions.push(expansion.companion);
    }
    if companions.is_empty() {
        let (impl_token, self_ty) = (&block.impl_token, &block.self_ty);
        let trait_part = block.trait_.as_ref().map(|(bang, path, for_token)| quote!(#bang #path #for_token));
        diag.error_at(
            quote!(#impl_token #trait_part #self_ty),
            "#[fuse] on an impl block fuses its methods that take `&self` and return `Result<Tensor>` (or \
             `Result<(Tensor, ..)>`), and this block has none: put #[fuse] on the block that holds such a method, \
             or remove it",
        );
    }
    let errors = diag.combined().map(|e| e.to_compile_error());
    let cfgs = cfg_attrs(&block.attrs);
    let (impl_generics, _, where_clause) = block.generics.split_for_impl();
    let self_ty = &block.self_ty;
    let companion_block = (!companions.is_empty()).then(|| {
        quote! {
            #(#cfgs)*
            impl #impl_generics #self_ty #where_clause {
                #(#companions)*
            }
        }
    });
    quote!(#errors #rewritten #companion_block)
}

/// `#[fuse]` (or `#[fuse::fuse]`) on a method of the block: removed, since the block's macro expands the
/// method; says whether there was one.
fn take_fuse_attributes(method: &mut ImplItemFn, diag: &mut Diagnostics) -> bool {
    let (fuse, others): (Vec<Attribute>, Vec<Attribute>) = method.attrs.drain(..).partition(is_fuse_attribute);
    method.attrs = others;
    for attr in &fuse {
        if let syn::Meta::List(list) = &attr.meta {
            check_no_arguments(&list.tokens, diag);
        }
    }
    !fuse.is_empty()
}

/// `#[fuse]` or `#[fuse::fuse]`.
pub(crate) fn is_fuse_attribute(attr: &Attribute) -> bool {
    attr.path().segments.last().is_some_and(|s| s.ident == "fuse")
}

/// The rule for unmarked methods: `&self` in, tensors out.
fn fused_by_default(method: &ImplItemFn) -> bool {
    let takes_self = method.sig.receiver().is_some_and(takes_shared_self);
    takes_self && check_return(&method.sig, &mut Diagnostics::new()).is_some()
}

fn as_item_fn(method: &ImplItemFn) -> ItemFn {
    ItemFn {
        attrs: method.attrs.clone(),
        vis: method.vis.clone(),
        sig: method.sig.clone(),
        block: Box::new(method.block.clone()),
    }
}

/// `Lin` for `Lin<B>` or `crate::nn::Lin`: the name the graph (and run-time errors) give the type.
fn type_name(ty: &Type) -> String {
    match ty {
        Type::Path(p) if p.qself.is_none() => {
            p.path.segments.last().map_or_else(|| crate::label::tokens_text(ty), |s| s.ident.to_string())
        }
        other => crate::label::tokens_text(&other.to_token_stream()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(src: &str) -> String {
        let block: ItemImpl = syn::parse_str(src).unwrap();
        fuse_impl(TokenStream::new(), &block).to_string()
    }

    #[test]
    fn trait_impl_gets_its_companions_in_an_inherent_impl() {
        let out = expand(
            "impl<B: Backend> Module for Lin<B> where B: Clone {
                fn forward(&self, xs: &Tensor) -> Result<Tensor> { Ok(xs.matmul(&self.w.t())) }
                fn name(&self) -> String { String::new() }
            }",
        );
        assert!(out.starts_with("impl < B : Backend > Module for Lin < B > where B : Clone { fn forward"), "{out}");
        assert!(out.contains("Self :: forward_fused () . call"), "{out}");
        assert!(out.contains("fn name (& self) -> String { String :: new () }"), "{out}");
        assert!(out.contains("} impl < B : Backend > Lin < B > where B : Clone { # [doc ="), "{out}");
        assert!(out.contains("pub fn forward_fused () -> & 'static :: fuse :: __private :: FusedFn"), "{out}");
        assert!(
            out.contains("FusedFn :: emitted (\"Lin::forward\" , \"fn Lin::forward(xs: tensor, self.w: field)"),
            "{out}"
        );
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn marked_methods_are_fused_and_unmarked_others_left_alone() {
        let out = expand(
            "impl Block {
                #[fuse] pub fn scale(x: &Tensor, s: f32) -> Result<Tensor> { Ok(x * s) }
                pub fn eps(&self) -> f32 { self.eps }
                pub fn exp(&self, x: &Tensor) -> Result<Tensor> { Ok(x.exp()) }
            }",
        );
        assert!(!out.contains("# [fuse]"), "{out}");
        assert!(out.contains("Self :: scale_fused ()"), "{out}");
        assert!(out.contains("Self :: exp_fused ()"), "{out}");
        assert!(out.contains("pub fn eps (& self) -> f32 { self . eps }"), "{out}");
        assert!(out.contains("pub fn scale_fused ()") && out.contains("pub fn exp_fused ()"), "{out}");
    }

    #[test]
    fn a_block_with_nothing_to_fuse_is_an_error_and_kept() {
        let out = expand("impl Block { fn eps(&self) -> f32 { self.eps } }");
        assert!(out.contains("compile_error"), "{out}");
        assert!(out.contains("and this block has none"), "{out}");
        assert!(out.contains("impl Block { fn eps (& self) -> f32 { self . eps } }"), "{out}");
    }

    #[test]
    fn errors_stub_only_the_faulty_method() {
        let out = expand(
            "impl Module for Lin {
                fn forward(&self, xs: &Tensor) -> Result<Tensor> { for _ in 0..2 {} Ok(xs.exp()) }
            }",
        );
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(
            out.contains("fn forward (& self , xs : & Tensor) -> Result < Tensor > { :: core :: unimplemented ! () }"),
            "{out}"
        );
        assert!(out.contains("impl Lin { # [allow (dead_code , unused_variables)] pub fn forward_fused ()"), "{out}");
    }
}
