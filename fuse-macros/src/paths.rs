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

/// `::fuse::__private::arg`: wraps `&Tensor` or `&f32`/`&f64`/`&usize`/`&i64` as one argument of the call.
pub fn arg() -> TokenStream {
    quote!(::fuse::__private::arg)
}

/// `::fuse::__private::FromOutputs`: turns the returned tensors into `Tensor` or a tuple of them.
pub fn from_outputs() -> TokenStream {
    quote!(::fuse::__private::FromOutputs::from_outputs)
}

pub fn ok() -> TokenStream {
    quote!(::core::result::Result::Ok)
}

pub fn unimplemented() -> TokenStream {
    quote!(::core::unimplemented!())
}
