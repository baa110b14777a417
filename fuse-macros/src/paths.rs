//! Every path the generated code names, in one place: the runtime is reached only through the facade's
//! hidden `fuse::__private` module, and std only through `::core`.

use proc_macro2::TokenStream;
use quote::quote;

/// `::fuse::__private::FusedFn`: the static behind each function (its graph text, plan, and runner).
pub fn fused_fn() -> TokenStream {
    quote!(::fuse::__private::FusedFn)
}

/// `::fuse::__private::FusedFn::kernel`: one emitted kernel (name, description, CUDA source) in the static's list;
/// a constructor on `FusedFn` so that the facade need export no other type for it.
pub fn static_kernel() -> TokenStream {
    quote!(::fuse::__private::FusedFn::kernel)
}

/// `::fuse::__private::prepare`: holds one argument for the call (`&Tensor`, a scalar, a field; a candle tensor
/// converted), returning a `Result` that the generated code's `?` turns into the function's error type.
pub fn prepare() -> TokenStream {
    quote!(::fuse::__private::prepare)
}

/// `::fuse::__private::Prepared`: the type of a prepared argument, and `Prepared::arg` to read it.
pub fn prepared() -> TokenStream {
    quote!(::fuse::__private::Prepared)
}

/// `::fuse::__private::FromOutputs`: turns the returned tensors into `Tensor` or a tuple of them.
pub fn from_outputs() -> TokenStream {
    quote!(::fuse::__private::FromOutputs::from_outputs)
}

/// `::fuse::__private::field_is_tensor`: a field's kind from its type, for the companion's declaration.
pub fn field_is_tensor() -> TokenStream {
    quote!(::fuse::__private::field_is_tensor)
}

/// `::fuse::__private::Fusion`: the extra parameter of the typed companion `<name>_with`.
pub fn fusion() -> TokenStream {
    quote!(::fuse::__private::Fusion)
}

/// `::fuse::__private::Result<::std::string::String>`: what `<name>_explain` returns.
pub fn explain_result() -> TokenStream {
    quote!(::fuse::__private::Result<::std::string::String>)
}

pub fn ok() -> TokenStream {
    quote!(::core::result::Result::Ok)
}

pub fn unimplemented() -> TokenStream {
    quote!(::core::unimplemented!())
}
