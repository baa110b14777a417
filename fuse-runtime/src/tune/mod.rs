//! The autotuner's settings and memory. A Gemm/DualGemm group can run several ways (cuBLAS, a cuBLASLt
//! algorithm, the skinny or the wgmma template in one of its configs); which is fastest depends on the shape and the
//! GPU, so the first call of a shape bucket times the candidates and keeps the winner. The measuring is
//! in `cuda/exec/tuning.rs`; this module holds what does not need a GPU: the mode, the choices as text, the
//! buckets, and the results file (`file.rs`).
//!
//! - `FUSE_AUTOTUNE=off|fast|full` (default `fast`): `off` uses the results file and otherwise a fixed rule
//!   (no timing); `fast` times a short list of candidates with few repetitions; `full` times every
//!   candidate with more repetitions.
//! - `FUSE_TUNE_FILE=PATH`: the results file (default `tune.tsv` in the kernel cache directory). It is
//!   plain text, one result per line, each keyed by GPU, arch, driver, NVRTC and fuse versions, so it can
//!   be copied to another machine and used there as-is: lines for another environment are kept but unused.
//! - Shape buckets: the rows of the left operand (batch axes folded in) rounded up to a power of two.
//!
//! A tool that pre-tunes a model for shipping sets the file and the mode, runs the model once per row count
//! it will serve, and reads back what was chosen:
//!
//! ```
//! # use fuse_runtime as fuse; // the facade crate `fuse` re-exports this one
//! use fuse::tune::{self, AutotuneMode};
//! let file = std::env::temp_dir().join("fuse-doc-tune.tsv");
//! tune::set_tune_file(&file);
//! tune::set_mode(AutotuneMode::Full);
//! assert_eq!(tune::mode(), AutotuneMode::Full);
//! assert_eq!(tune::tune_file().as_deref(), Some(file.as_path()));
//! // ... call the fused functions at each row count on the GPU here ...
//! for result in tune::results() {
//!     println!("{} rows <= {}: {} ({:.1} us)", result.group, result.rows_bucket, result.choice, result.micros);
//! }
//! ```

mod file;

pub use file::TuneEntry;
pub(crate) use file::{TuneKey, TuneTable};

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// How much the autotuner measures (`FUSE_AUTOTUNE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutotuneMode {
    /// Never time: results from the file, else a fixed rule.
    Off,
    /// Time a short list of candidates, few repetitions (the default).
    Fast,
    /// Time every candidate, more repetitions.
    Full,
}

impl AutotuneMode {
    fn parse(text: &str) -> Option<AutotuneMode> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "0" | "false" | "no" => Some(AutotuneMode::Off),
            "fast" | "on" | "1" | "true" | "yes" | "" => Some(AutotuneMode::Fast),
            "full" | "2" => Some(AutotuneMode::Full),
            _ => None,
        }
    }
}

struct Settings {
    mode: AutotuneMode,
    file: Option<PathBuf>,
}

fn settings() -> &'static Mutex<Settings> {
    static SETTINGS: OnceLock<Mutex<Settings>> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let mode = match crate::env::autotune() {
            Some(v) => AutotuneMode::parse(&v).unwrap_or_else(|| {
                eprintln!("fuse: FUSE_AUTOTUNE={v:?} is not off, fast or full; using fast");
                AutotuneMode::Fast
            }),
            None => AutotuneMode::Fast,
        };
        let file = crate::env::tune_file().or_else(|| crate::env::kernel_cache_dir().map(|dir| dir.join("tune.tsv")));
        Mutex::new(Settings { mode, file })
    })
}

fn lock_settings() -> std::sync::MutexGuard<'static, Settings> {
    settings().lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The autotuning mode in force (`FUSE_AUTOTUNE`, or [`set_mode`]).
pub fn mode() -> AutotuneMode {
    lock_settings().mode
}

/// Overrides `FUSE_AUTOTUNE` for the rest of the process (a pre-tuning tool sets `Full`).
pub fn set_mode(mode: AutotuneMode) {
    lock_settings().mode = mode;
}

/// The results file in use (`FUSE_TUNE_FILE`, else `tune.tsv` in the cache directory; `None` when there is
/// no cache directory either).
pub fn tune_file() -> Option<PathBuf> {
    lock_settings().file.clone()
}

/// Overrides `FUSE_TUNE_FILE` for the rest of the process; the results already loaded are kept and
/// written to the new file with the next result.
pub fn set_tune_file(path: impl Into<PathBuf>) {
    let path = path.into();
    lock_settings().file = Some(path.clone());
    table().lock().unwrap_or_else(|p| p.into_inner()).reload(Some(path));
}

/// Every result known in this process (loaded from the file, or measured), for tools and tests.
pub fn results() -> Vec<TuneEntry> {
    table().lock().unwrap_or_else(|p| p.into_inner()).entries()
}

/// The process's results table, loaded from the results file on first use.
pub(crate) fn table() -> &'static Mutex<TuneTable> {
    static TABLE: OnceLock<Mutex<TuneTable>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(TuneTable::load(tune_file())))
}

/// The shape bucket of `rows` rows: the next power of two (0 stays 0).
pub(crate) fn bucket(rows: usize) -> usize {
    if rows == 0 {
        0
    } else {
        rows.next_power_of_two()
    }
}

thread_local! {
    static FORCED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f` with every Gemm/DualGemm group on this thread taking the path `choice` where it can (`cublas`,
/// `cublaslt:<i>`, `skinny:<config>`, `wgmma:<config>`; see `FUSE_DEBUG=3`), without tuning and without recorded launch
/// plans. For tests and benchmarks that check or time one path: a group the path cannot run is an error
/// saying why (the unfused plan and eager ops stay on cuBLAS regardless).
#[doc(hidden)]
pub fn with_gemm_choice<R>(choice: &str, f: impl FnOnce() -> R) -> R {
    let previous = FORCED.with(|c| c.replace(Some(choice.to_string())));
    let result = f();
    FORCED.with(|c| *c.borrow_mut() = previous);
    result
}

/// The path forced on this thread by [`with_gemm_choice`], if any.
pub(crate) fn forced_choice() -> Option<String> {
    FORCED.with(|c| c.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_buckets_round_up() {
        assert_eq!(AutotuneMode::parse("OFF"), Some(AutotuneMode::Off));
        assert_eq!(AutotuneMode::parse(" full "), Some(AutotuneMode::Full));
        assert_eq!(AutotuneMode::parse("fast"), Some(AutotuneMode::Fast));
        assert_eq!(AutotuneMode::parse("sometimes"), None);
        assert_eq!([0, 1, 3, 4, 17, 100, 4095].map(bucket), [0, 1, 4, 4, 32, 128, 4096]);
    }

    #[test]
    fn a_forced_choice_is_scoped_to_the_closure_and_thread() {
        assert_eq!(forced_choice(), None);
        let inner = with_gemm_choice("cublas", || {
            let other = std::thread::spawn(forced_choice).join().unwrap();
            (forced_choice(), other, with_gemm_choice("skinny:a", forced_choice))
        });
        assert_eq!(inner, (Some("cublas".to_string()), None, Some("skinny:a".to_string())));
        assert_eq!(forced_choice(), None);
    }
}
