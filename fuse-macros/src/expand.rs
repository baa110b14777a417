//! The generated code: the user's function, now calling its fused plan, and `<name>_fused()`, the static
//! plan behind it: the graph text, the fused plan's text (the planner runs here, at build time) and each
//! kernel of that plan, its description and CUDA source, as `&'static str`s. On error: the errors, and the
//! user's signature with a body that cannot add noise.

use crate::diag::Diagnostics;
use crate::paths;
use crate::signature::{check_signature, FnSpec};
use crate::trace::{trace_fn, Traced};
use fuse_ir::codegen::plan_kernels;
use fuse_ir::{Graph, InputKind, Plan};
use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{Attribute, ItemFn, Visibility};

/// Expands `#[fuse(attr)] func` on a free function or on a method whose impl block the macro cannot see (its
/// companion is emitted next to it, so the block must be inherent).
pub fn fuse_fn(attr: TokenStream, func: &ItemFn) -> TokenStream {
    let mut diag = Diagnostics::new();
    let alone = trait_impl_argument(&attr, func, &mut diag);
    let place = Place {
        in_impl: func.sig.receiver().is_some(),
        owner: None,
        companion_vis: func.vis.clone(),
        alone,
        callees: Default::default(),
    };
    let Expansion { item, companion } = expand_fn(func, &place, &mut diag);
    let errors = diag.combined().map(|e| e.to_compile_error());
    quote!(#errors #item #companion)
}

/// `#[fuse(trait_impl)]` on one method of a trait impl, which can hold no companion: whether it was given
/// (on a method taking `&self`); any other argument is an error.
fn trait_impl_argument(attr: &TokenStream, func: &ItemFn, diag: &mut Diagnostics) -> bool {
    let given = syn::parse2::<syn::Ident>(attr.clone()).is_ok_and(|i| i == "trait_impl");
    if given && func.sig.receiver().is_none() {
        diag.error_at(attr, "`#[fuse(trait_impl)]` is for a method taking `&self` inside a trait impl");
    } else if !given && !attr.is_empty() {
        diag.error_at(
            attr,
            "#[fuse] takes no arguments (write `#[fuse]`), or `trait_impl` on one method of a trait impl \
             (`#[fuse(trait_impl)]`: fused without the `*_fused()` companion a trait impl cannot hold)",
        );
    }
    given
}

pub fn check_no_arguments(attr: &TokenStream, diag: &mut Diagnostics) {
    if !attr.is_empty() {
        diag.error_at(attr, "#[fuse] takes no arguments: write `#[fuse]`");
    }
}

/// Where a fused function is defined, which decides how its companion is named and called.
pub struct Place {
    /// Inside an impl block: the companion is an associated function, called as `Self::name_fused()`.
    pub in_impl: bool,
    /// The type whose impl block holds the function, when known: the graph is named `Type::name`.
    pub owner: Option<String>,
    pub companion_vis: Visibility,
    /// `#[fuse(trait_impl)]`: no companion; the plan is kept in the method's body.
    pub alone: bool,
    /// The functions of the impl block the body may call (`self.f(..)`, `Self::f(..)`), inlined.
    pub callees: std::rc::Rc<Vec<crate::trace::Callee>>,
}

/// A fused function's generated code: the function itself and its companion `<name>_fused()`.
pub struct Expansion {
    pub item: TokenStream,
    pub companion: TokenStream,
}

/// Checks and traces `func`, adding its errors to `diag`; with errors, both items get bodies that add no
/// errors of their own.
pub fn expand_fn(func: &ItemFn, place: &Place, diag: &mut Diagnostics) -> Expansion {
    let errors_before = diag.len();
    let spec = check_signature(&func.sig, diag);
    let name = match &place.owner {
        Some(owner) => format!("{owner}::{}", func.sig.ident),
        None => func.sig.ident.to_string(),
    };
    let flags: Vec<syn::Ident> = spec.params.iter().filter(|p| p.flag).map(|p| p.ident.clone()).collect();
    if flags.len() > MAX_FLAGS || (!flags.is_empty() && place.alone) {
        let why = if place.alone { "with `#[fuse(trait_impl)]`, which keeps one plan" } else { "more than 3" };
        diag.error_at(
            &func.sig,
            format!("`bool` parameters choose between graphs, one per combination of their values: not {why}"),
        );
        return stubs(func, place, &flags);
    }
    // One graph per combination of the `bool` parameters' values (one graph when there are none).
    let mut variants: Vec<(String, Traced)> = Vec::new();
    for bits in 0..1usize << flags.len() {
        let values: Vec<bool> = (0..flags.len()).map(|i| bits >> i & 1 == 1).collect();
        let variant = if flags.is_empty() {
            name.clone()
        } else {
            let pairs: Vec<String> = flags.iter().zip(&values).map(|(f, v)| format!("{f}={v}")).collect();
            // `act[gated=true,tanh=false]`: no `(` or `, `, which the graph's text form uses.
            format!("{name}[{}]", pairs.join(","))
        };
        let traced = trace_fn(&spec, &variant, &func.block, diag, &place.callees[..], &values);
        if diag.len() > errors_before {
            return stubs(func, place, &flags);
        }
        variants.push((variant, traced));
    }
    let field_names = |t: &Traced| t.fields.iter().map(|f| f.expr.to_token_stream().to_string()).collect::<Vec<_>>();
    if variants.iter().any(|(_, t)| field_names(t) != field_names(&variants[0].1)) {
        diag.error_at(
            &func.sig,
            "each value of the `bool` parameters must read the same fields of `self`, in the same order: read them \
             before the `if`",
        );
        return stubs(func, place, &flags);
    }
    generate(func, place, &spec, &variants, &flags)
}

/// At most this many `bool` parameters: each doubles the graphs a function is built into.
const MAX_FLAGS: usize = 3;

/// `mlp` -> `mlp_fused`, pointing at the user's name (so "go to definition" lands there).
fn fused_name(func: &ItemFn) -> syn::Ident {
    format_ident!("{}_fused", func.sig.ident, span = func.sig.ident.span())
}

/// `#[cfg(..)]` attributes, which the generated companion must share with the user's function.
pub fn cfg_attrs(attrs: &[Attribute]) -> Vec<&Attribute> {
    attrs.iter().filter(|a| a.path().is_ident("cfg")).collect()
}

fn generate(
    func: &ItemFn,
    place: &Place,
    spec: &FnSpec,
    variants: &[(String, Traced)],
    flags: &[syn::Ident],
) -> Expansion {
    let ItemFn { attrs, vis, sig, .. } = func;
    let fused_name = fused_name(func);
    let fused_fn = paths::fused_fn();
    let prepare = paths::prepare();
    let get_fused =
        if place.in_impl { quote!(Self::#fused_name(#(#flags),*)) } else { quote!(#fused_name(#(#flags),*)) };
    let traced = &variants[0].1;
    let params: Vec<TokenStream> = spec
        .params
        .iter()
        .filter(|p| !p.flag)
        .map(|p| {
            let ident = &p.ident;
            // Spanned at the parameter, so a type that is not an argument type is reported there.
            match p.kind {
                Some(InputKind::Tensor) => quote_spanned!(ident.span()=> #prepare(#ident)?),
                _ => quote_spanned!(ident.span()=> #prepare(&#ident)?),
            }
        })
        .collect();
    let fields: Vec<TokenStream> = traced
        .fields
        .iter()
        .map(|field| {
            let expr = &field.expr;
            quote_spanned!(expr.span()=> #prepare(&#expr)?)
        })
        .collect();
    let args = Args::new(params, fields);
    let outputs = format_ident!("__fuse_outputs", span = Span::mixed_site());
    let ok = paths::ok();
    let from_outputs = paths::from_outputs();
    let emitted: Vec<TokenStream> = variants
        .iter()
        .map(|(name, traced)| {
            let name = Literal::string(name);
            let text = Literal::string(&traced.graph.to_text());
            let plan = Plan::fused(&traced.graph);
            let plan_text = Literal::string(&plan.to_text());
            let kernels = static_kernels(&traced.graph, &plan);
            quote!(#fused_fn::emitted(#name, #text, #plan_text, &[#(#kernels,)*]))
        })
        .collect();
    // One plan, or one per combination of the `bool` parameters, picked by their values as bits.
    let (fused_static, fused_ref) = match &emitted[..] {
        [one] => (quote!(static FUSED: #fused_fn = #one;), quote!(&FUSED)),
        many => {
            let n = Literal::usize_unsuffixed(many.len());
            let bits = flags.iter().enumerate().map(|(i, f)| {
                let i = Literal::usize_unsuffixed(i);
                quote!(((#f as usize) << #i))
            });
            (quote!(static FUSED: [#fused_fn; #n] = [#(#many,)*];), quote!(&FUSED[0 #(| #bits)*]))
        }
    };
    let doc = format!(
        "The fused plan behind [`{}{}`]: its graph, plan and a way to run it unfused.",
        if place.in_impl { "Self::" } else { "" },
        func.sig.ident
    );
    let cfgs = cfg_attrs(attrs);
    let companion_vis = &place.companion_vis;
    // A method whose impl block the macro cannot see learns its type's name at run time, for errors.
    let owner =
        (place.in_impl && place.owner.is_none()).then(|| quote!(.declare_owner(::core::any::type_name::<Self>())));
    let declared = declare_fields(traced);
    let args_ref = args.reference();
    if place.alone {
        // The plan in the method's body: a static there cannot name `Self`, the declarations after it can.
        return Expansion {
            item: quote! {
                #(#attrs)*
                #vis #sig {
                    #args
                    #fused_static
                    let #outputs = (#fused_ref #owner #declared).call(#args_ref)?;
                    #ok(#from_outputs(#outputs)?)
                }
            },
            companion: TokenStream::new(),
        };
    }
    let typed = typed_companions(func, place, &get_fused, &args);
    Expansion {
        item: quote! {
            #(#attrs)*
            #vis #sig {
                #args
                let #outputs = #get_fused.call(#args_ref)?;
                #ok(#from_outputs(#outputs)?)
            }
        },
        companion: quote! {
            #(#cfgs)*
            #[doc = #doc]
            #companion_vis fn #fused_name(#(#flags: bool),*) -> &'static #fused_fn {
                #fused_static
                #fused_ref #owner #declared
            }
            #typed
        },
    }
}

/// The call's arguments: a statement that prepares each (parameters, then the fields the body reads) into a
/// local array, and `&[Arg]` over it. A candle tensor is converted there, once, and lives until the body ends.
struct Args {
    values: Vec<TokenStream>,
}

impl Args {
    fn new(params: Vec<TokenStream>, fields: Vec<TokenStream>) -> Args {
        Args { values: params.into_iter().chain(fields).collect() }
    }

    fn local() -> syn::Ident {
        format_ident!("__fuse_args", span = Span::mixed_site())
    }

    /// `&__fuse_args.each_ref().map(Prepared::arg)`: the `&[Arg]` a `FusedFn` call takes.
    fn reference(&self) -> TokenStream {
        let (local, prepared) = (Args::local(), paths::prepared());
        quote!(&#local.each_ref().map(#prepared::arg))
    }
}

impl ToTokens for Args {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let (local, prepared, values) = (Args::local(), paths::prepared(), &self.values);
        let n = Literal::usize_unsuffixed(values.len());
        tokens.extend(quote!(let #local: [#prepared<'_>; #n] = [#(#values,)*];));
    }
}

/// For a method reading fields: `.declare_fields(|| vec![field_is_tensor::<Self, _>(|s| &s.norm), ..])`,
/// each field's kind from its Rust type, so that fields passed by hand in another order are an error.
fn declare_fields(traced: &Traced) -> TokenStream {
    if traced.fields.is_empty() {
        return TokenStream::new();
    }
    let is_tensor = paths::field_is_tensor();
    let receiver = format_ident!("__fuse_self", span = Span::mixed_site());
    let kinds = traced.fields.iter().map(|field| {
        // `self.mlp.gate` read from the closure's parameter instead of `self`.
        let path: TokenStream = field
            .expr
            .to_token_stream()
            .into_iter()
            .map(|t| match &t {
                proc_macro2::TokenTree::Ident(i) if i == "self" => {
                    receiver.to_token_stream().into_iter().next().unwrap_or(t)
                }
                _ => t,
            })
            .collect();
        // Spanned at the field: a field of a type that is no argument is reported at the user's expression.
        quote_spanned!(field.expr.span()=> #is_tensor::<Self, _>(|#receiver| &#path))
    });
    quote!(.declare_fields(|| ::std::vec![#(#kinds),*]))
}

/// `<name>_with(.., fusion)` (the function with fusion chosen for the call) and `<name>_explain(..)` (its plan
/// for these arguments), typed like the function itself: a method's fields are passed for the caller.
fn typed_companions(func: &ItemFn, place: &Place, get_fused: &TokenStream, args: &Args) -> TokenStream {
    let ItemFn { attrs, sig, .. } = func;
    let (fusion, explain_result, ok, from_outputs) =
        (paths::fusion(), paths::explain_result(), paths::ok(), paths::from_outputs());
    let fusion_param = format_ident!("fusion", span = Span::mixed_site());
    let mut with_sig = sig.clone();
    with_sig.ident = format_ident!("{}_with", sig.ident, span = sig.ident.span());
    with_sig.inputs.push(syn::parse_quote!(#fusion_param: #fusion));
    let mut explain_sig = sig.clone();
    explain_sig.ident = format_ident!("{}_explain", sig.ident, span = sig.ident.span());
    explain_sig.output = syn::parse_quote!(-> #explain_result);
    let with_doc = format!("[`{}`] with fusion chosen for this call (`Fusion::Off`: one op at a time).", sig.ident);
    let explain_doc =
        format!("What [`{}`] fuses and saves for these arguments' shapes, in the words of their device.", sig.ident);
    let cfgs = cfg_attrs(attrs);
    let vis = &place.companion_vis;
    let outputs = format_ident!("__fuse_outputs", span = Span::mixed_site());
    let args_ref = args.reference();
    quote! {
        #(#cfgs)*
        #[doc = #with_doc]
        #[allow(dead_code)]
        #vis #with_sig {
            #args
            let #outputs = #get_fused.call_with(#args_ref, #fusion_param)?;
            #ok(#from_outputs(#outputs)?)
        }
        #(#cfgs)*
        #[doc = #explain_doc]
        #[allow(dead_code)]
        #vis #explain_sig {
            #args
            #get_fused.explain(#args_ref)
        }
    }
}

/// `FusedFn::kernel("name", "description", "source")` for each kernel of the fused plan, in plan order: the
/// runtime launches these strings; it does not run the code generator for a `#[fuse]` function.
fn static_kernels(graph: &Graph, plan: &Plan) -> Vec<TokenStream> {
    let kernel = paths::static_kernel();
    plan_kernels(graph, plan)
        .into_iter()
        .map(|k| {
            let (name, meta, source) =
                (Literal::string(&k.name), Literal::string(&k.meta()), Literal::string(&k.source));
            quote!(#kernel(#name, #meta, #source))
        })
        .collect()
}

/// The user's items with bodies that type-check whatever the signature, so rustc adds no errors of its own to
/// the macro's and rust-analyzer still knows the function.
fn stubs(func: &ItemFn, place: &Place, flags: &[syn::Ident]) -> Expansion {
    let ItemFn { attrs, vis, sig, .. } = func;
    let fused_name = fused_name(func);
    let fused_fn = paths::fused_fn();
    let unimplemented = paths::unimplemented();
    let cfgs = cfg_attrs(attrs);
    let companion_vis = &place.companion_vis;
    let item = quote! {
        #(#attrs)*
        #[allow(unused_variables)]
        #vis #sig { #unimplemented }
    };
    if place.alone {
        return Expansion { item, companion: TokenStream::new() };
    }
    Expansion {
        item,
        companion: quote! {
            #(#cfgs)*
            #[allow(dead_code, unused_variables)]
            #companion_vis fn #fused_name(#(#flags: bool),*) -> &'static #fused_fn { #unimplemented }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(src: &str) -> String {
        let func: ItemFn = syn::parse_str(src).unwrap();
        fuse_fn(TokenStream::new(), &func).to_string()
    }

    #[test]
    fn free_function_calls_its_static_plan() {
        let out = expand("pub fn mlp(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> { Ok(x.matmul(w) + eps) }");
        assert!(out.contains("pub fn mlp (x : & Tensor , w : & Tensor , eps : f32) -> Result < Tensor >"), "{out}");
        assert!(out.contains("let __fuse_args : [:: fuse :: __private :: Prepared < '_ > ; 3] = [:: fuse :: __private :: prepare (x) ? , :: fuse :: __private :: prepare (w) ? , :: fuse :: __private :: prepare (& eps) ? ,] ;"), "{out}");
        assert!(
            out.contains(
                "mlp_fused () . call (& __fuse_args . each_ref () . map (:: fuse :: __private :: Prepared :: arg)) ?"
            ),
            "{out}"
        );
        assert!(out.contains("pub fn mlp_fused () -> & 'static :: fuse :: __private :: FusedFn"), "{out}");
        assert!(out.contains("FusedFn :: emitted (\"mlp\" , \"fn mlp(x: tensor, w: tensor, eps: scalar)\\n"), "{out}");
        assert!(out.contains("\"gemm nodes %3 %4 matmuls %3 prologue inputs %0 %1 %2 outputs %4\\n\""), "{out}");
        // One Gemm group with an epilogue (`+ eps`): its epilogue kernel and its skinny, wgmma and mma kernels
        // (the matmul and the epilogue in one), each source a string literal.
        assert_eq!(out.matches(":: fuse :: __private :: FusedFn :: kernel (\"mlp_k0_").count(), 4, "{out}");
        assert!(out.contains("_epilogue\" , \"mlp_k0_gemm_add_epilogue pointwise group 0 epilogue inputs"), "{out}");
        assert!(out.contains("_skinny\" , \""), "{out}");
        assert!(out.contains("_wgmma\" , \""), "{out}");
        assert!(out.contains("_mma\" , \""), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn method_passes_fields_after_parameters() {
        let out = expand("fn forward(&self, x: &Tensor) -> Result<Tensor> { Ok(rms_norm(x, &self.norm, self.eps)) }");
        assert!(out.contains("[:: fuse :: __private :: prepare (x) ? , :: fuse :: __private :: prepare (& self . norm) ? , :: fuse :: __private :: prepare (& self . eps) ? ,] ;"), "{out}");
        assert!(out.contains("Self :: forward_fused () . call (& __fuse_args . each_ref () . map (:: fuse :: __private :: Prepared :: arg))"), "{out}");
        assert!(out.contains("fn forward_fused ()"), "{out}");
        assert!(out.contains("fn forward(x: tensor, self.norm: field, self.eps: field)"), "{out}");
    }

    #[test]
    fn errors_keep_the_signature_and_stub_the_body() {
        let out = expand("#[inline] pub fn f(x: &Tensor) -> Result<Tensor> { for i in 0..3 {} Ok(x.frob()) }");
        assert_eq!(out.matches("compile_error").count(), 2, "{out}");
        assert!(out.contains("# [inline] # [allow (unused_variables)] pub fn f (x : & Tensor) -> Result < Tensor > { :: core :: unimplemented ! () }"), "{out}");
        assert!(
            out.contains(
                "fn f_fused () -> & 'static :: fuse :: __private :: FusedFn { :: core :: unimplemented ! () }"
            ),
            "{out}"
        );
    }

    #[test]
    fn attribute_arguments_are_an_error() {
        let func: ItemFn = syn::parse_str("fn f(x: &Tensor) -> Result<Tensor> { Ok(x.exp()) }").unwrap();
        let out = fuse_fn(quote!(fast), &func).to_string();
        assert!(out.contains("takes no arguments"), "{out}");
    }

    #[test]
    fn output_is_deterministic() {
        let src = "fn f(a: &Tensor, b: &Tensor, s: f64) -> Result<(Tensor, Tensor)> {
            let h = silu(a.matmul(b)) * a.matmul(b.t());
            let y = softmax(h * s);
            Ok((y, rms_norm(h, b, 1e-6)))
        }";
        let first = expand(src);
        for _ in 0..5 {
            assert_eq!(expand(src), first);
        }
    }
}
