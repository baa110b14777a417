//! Real models for fuse, written as a user's model crate would be: reading GGUF files, dequantising their
//! tensors, and the tokenizer and chat template stored in them. The decoder that runs the model with
//! `#[fuse]` builds on this.
//!
//! - [`gguf::GgufFile`]: a memory-mapped GGUF (v2/v3) file: metadata with typed getters, tensor infos, each
//!   tensor's bytes by name, checked against the file on open (a bad file is an [`Error`], never a panic).
//! - [`quant`]: F32, F16, BF16, Q4_0, Q4_1 and Q8_0 to f32 or bf16 (other types are an error naming them).
//! - [`tokenizer::Tokenizer`]: byte-level BPE from the file's metadata (encode, decode, streaming decode) and
//!   [`chat`]: the file's chat template.
//! - [`rotary::unpermute_rotary_rows`]: undoes llama.cpp's row order of `attn_q` / `attn_k` for a decoder
//!   using Hugging Face's half-split rotary embedding.
//!
//! The model the project runs is SmolLM2-135M-Instruct; `scripts/fetch-smollm2.sh` puts it at
//! [`smollm2_path`]. With it:
//!
//! ```no_run
//! use fuse_models::{chat::ChatMessage, gguf::GgufFile, tokenizer::Tokenizer};
//!
//! # fn main() -> fuse_models::Result<()> {
//! let file = GgufFile::open(fuse_models::smollm2_path())?;
//! let hidden = file.u32("llama.embedding_length")?; // 576
//! let embedding = file.tensor_f32("token_embd.weight")?; // Q8_0 -> f32, [49152, 576] row-major
//! assert_eq!(embedding.len(), 49152 * hidden as usize);
//!
//! let tokenizer = Tokenizer::from_gguf(&file)?;
//! let prompt = tokenizer.apply_chat_template(&[ChatMessage::user("What is the capital of France?")])?;
//! let ids = tokenizer.encode(&prompt)?; // no BOS: the file says add_bos_token = false
//! let mut stream = tokenizer.stream();
//! for &id in &ids {
//!     if let Some(text) = stream.step(id)? {
//!         print!("{text}");
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Dequantisation works on any bytes in ggml's block layout, e.g. one Q4_1 block (scale, minimum, 16 bytes
//! of nibbles):
//!
//! ```
//! use fuse_models::{ggml_type::GgmlType, quant};
//! use half::f16;
//!
//! let mut block = [f16::from_f32(0.5).to_le_bytes(), f16::from_f32(-1.0).to_le_bytes()].concat();
//! block.extend([0x21u8; 16]); // element j: nibble 1, element j + 16: nibble 2
//! let values = quant::dequantize_f32(GgmlType::Q4_1, &block, 32)?;
//! assert_eq!((values[0], values[16]), (1.0 * 0.5 - 1.0, 2.0 * 0.5 - 1.0));
//! assert!(quant::dequantize_f32(GgmlType::Q4_1, &block, 31).is_err()); // not whole blocks
//! # Ok::<(), fuse_models::Error>(())
//! ```

pub mod chat;
pub mod error;
pub mod ggml_type;
pub mod gguf;
pub mod llama;
mod model_file;
pub mod quant;
pub mod rotary;
pub mod tokenizer;

pub use error::{Error, Result};
pub use model_file::{model_dir, smollm2_path, SMOLLM2_FILE_NAME};
