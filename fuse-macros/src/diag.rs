//! Errors found while reading a `#[fuse]` function, collected so that one build reports all of them.
//!
//! Every check records its error here and carries on, so a function with three mistakes shows three errors
//! at once instead of one per build.

use proc_macro2::Span;
use quote::ToTokens;
use std::fmt::Display;

#[derive(Default)]
pub struct Diagnostics {
    errors: Vec<syn::Error>,
}

impl Diagnostics {
    pub fn new() -> Self {
        Self::default()
    }

    /// An error covering exactly the tokens of `node` (the most precise syntax node at fault).
    pub fn error_at(&mut self, node: impl ToTokens, message: impl Display) {
        self.errors.push(syn::Error::new_spanned(node, message));
    }

    /// An error at one span (a keyword, a delimiter, a missing token's place).
    pub fn error_span(&mut self, span: Span, message: impl Display) {
        self.errors.push(syn::Error::new(span, message));
    }

    /// How many errors so far: a caller compares counts to learn whether its own step found any.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    #[cfg(test)]
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// The messages, in the order they were found (for tests).
    #[cfg(test)]
    pub fn messages(&self) -> Vec<String> {
        self.errors.iter().map(|e| e.to_string()).collect()
    }

    /// All errors as one `syn::Error` (rendered as one `compile_error!` each), or `None` if there are none.
    pub fn combined(self) -> Option<syn::Error> {
        let mut errors = self.errors.into_iter();
        let mut first = errors.next()?;
        for e in errors {
            first.combine(e);
        }
        Some(first)
    }
}
