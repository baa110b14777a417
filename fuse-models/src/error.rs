//! One error type for the crate: every failure says what went wrong and where (file, byte offset, key,
//! tensor), so that a bad or unexpected model file is reported, never a panic.

use std::path::PathBuf;

/// Errors from reading GGUF files, dequantising tensors and tokenizing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or mapped.
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },

    /// The file is not a well-formed GGUF file (truncated, bad magic, unknown version, bad length ...).
    #[error("{path}: at byte {offset}: {what}")]
    Malformed { path: PathBuf, offset: u64, what: String },

    /// A metadata key the caller needs is absent.
    #[error("{path}: no metadata key `{key}`")]
    MissingKey { path: PathBuf, key: String },

    /// A metadata value has another type than the one asked for (or does not fit it).
    #[error("{path}: metadata `{key}` is {found}, expected {expected}")]
    WrongType { path: PathBuf, key: String, found: String, expected: &'static str },

    /// The file's `general.architecture` is not a decoder this crate runs.
    #[error("{path}: architecture `{architecture}` is not one fuse-models runs (it reads `llama` and `qwen2`)")]
    UnsupportedArchitecture { path: PathBuf, architecture: String },

    /// No tensor of that name in the file.
    #[error("{path}: no tensor named `{name}`")]
    MissingTensor { path: PathBuf, name: String },

    /// The tensor's element type has no dequantisation here (or, for `size unknown`, no known block size).
    #[error("tensor type {type_name} is not supported: {what}")]
    UnsupportedType { type_name: String, what: &'static str },

    /// A buffer handed to the dequantiser does not match the element count and block layout.
    #[error("{type_name}: {what}")]
    BadLength { type_name: String, what: String },

    /// A reshaping helper was given dimensions that do not fit the data.
    #[error("{what}")]
    BadShape { what: String },

    /// The tokenizer could not be built or used.
    #[error("tokenizer: {what}")]
    Tokenizer { what: String },

    /// More positions than the key/value cache holds.
    #[error("the key/value cache holds {capacity} positions; {used} are used and {asked} more were asked for")]
    CacheFull { capacity: usize, used: usize, asked: usize },

    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    UnknownTokenId { id: u32, vocab_size: usize },

    /// A tensor operation failed (shapes, dtypes, devices, a GPU error): fuse's error, unchanged.
    #[error(transparent)]
    Fuse(#[from] fuse::Error),

    /// The chat template could not be rendered.
    #[error("chat template: {what}")]
    ChatTemplate { what: String },

    /// An argument out of its range (a sampling temperature of NaN, a top-p above 1, ..).
    #[error("{what}")]
    InvalidArgument { what: String },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
