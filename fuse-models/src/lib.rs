//! placeholder
pub mod error;
pub mod ggml_type;
pub mod gguf;
pub mod quant;
pub mod rotary;

pub use error::{Error, Result};
