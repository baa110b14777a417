//! placeholder
pub mod chat;
pub mod error;
pub mod ggml_type;
pub mod gguf;
mod model_file;
pub mod quant;
pub mod rotary;
pub mod tokenizer;

pub use error::{Error, Result};
pub use model_file::{model_dir, smollm2_path, SMOLLM2_FILE_NAME};
