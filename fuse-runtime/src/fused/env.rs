//! The environment variables the runtime reads, each read once per process.

use super::args::Fusion;
use std::sync::OnceLock;

/// `FUSE_DEBUG` as an integer (0 when unset or not a number): 1 plan summary on the first call of each
/// fused function, 2 per-group times on every call, 5 the graph text.
pub(crate) fn debug_level() -> u32 {
    static LEVEL: OnceLock<u32> = OnceLock::new();
    *LEVEL.get_or_init(|| std::env::var("FUSE_DEBUG").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0))
}

/// `FUSE_FUSION`: `off`, `0` or `false` run every fused function unfused.
pub(crate) fn default_fusion() -> Fusion {
    static FUSION: OnceLock<Fusion> = OnceLock::new();
    *FUSION.get_or_init(|| match std::env::var("FUSE_FUSION") {
        Ok(v) if matches!(v.trim().to_ascii_lowercase().as_str(), "off" | "0" | "false") => Fusion::Off,
        _ => Fusion::On,
    })
}
