//! Where the project's fetch script (`scripts/fetch-smollm2.sh`) puts the model.

use std::path::PathBuf;

/// The file name of SmolLM2-135M-Instruct in the cache.
pub const SMOLLM2_FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The cache folder: `$FUSE_MODEL_DIR`, else `$HOME/.cache/fuse/models` (as the fetch script).
pub fn model_dir() -> PathBuf {
    match std::env::var_os("FUSE_MODEL_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE")).unwrap_or_default();
            PathBuf::from(home).join(".cache").join("fuse").join("models")
        }
    }
}

/// The path of SmolLM2-135M-Instruct in the cache (present once `scripts/fetch-smollm2.sh` has run).
pub fn smollm2_path() -> PathBuf {
    model_dir().join(SMOLLM2_FILE_NAME)
}
