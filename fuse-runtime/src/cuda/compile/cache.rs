//! The on-disk cubin cache: NVRTC output kept between processes, so a warm start compiles nothing.
//!
//! - Where: `FUSE_CACHE_DIR`, else `$XDG_CACHE_HOME/fuse`, else `$HOME/.cache/fuse` (`crate::env`); with none
//!   of them set, no disk cache (every process compiles).
//! - Key: a 128-bit FNV-1a hash of everything that changes the cubin: kernel name, source, defines, arch,
//!   NVRTC version and fuse version. One file per key, `<key as 32 hex digits>.cubin`.
//! - Entry: a header (magic, key, payload length, payload checksum) then the payload. A reader checks all four,
//!   so a truncated, corrupt or misplaced entry is removed with a one-line warning and the caller recompiles.
//! - Writes go to a temporary file in the same directory, then `rename` over the entry: readers see the old
//!   entry, the new one or none, never half of one, even with several processes writing at once.
//! - The cache is an optimisation: a directory that cannot be created or written is a warning (once per
//!   process), never an error.
//!
//! Nothing here knows about NVRTC: [`DiskCache`] stores bytes under a [`CacheKey`], so it is tested without
//! a GPU or a CUDA library.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Identifies an entry; made by [`CacheKey::of`] from length-prefixed parts, so ("ab", "c") != ("a", "bc").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CacheKey(pub u128);

impl CacheKey {
    pub(crate) fn of(parts: &[&[u8]]) -> CacheKey {
        let mut h = Fnv128::new();
        for part in parts {
            h.write(&(part.len() as u64).to_le_bytes());
            h.write(part);
        }
        CacheKey(h.finish())
    }

    fn file_name(self) -> String {
        format!("{:032x}.cubin", self.0)
    }
}

/// 128-bit FNV-1a: simple, stable across platforms and Rust versions (std's hashers promise neither), and fast
/// enough for kernel sources of a few kilobytes. Not collision-resistant against an adversary; the cache dir
/// is the user's own.
struct Fnv128(u128);

impl Fnv128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;

    fn new() -> Fnv128 {
        Fnv128(Self::OFFSET)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u128).wrapping_mul(Self::PRIME);
        }
    }

    fn finish(&self) -> u128 {
        self.0
    }
}

fn checksum(payload: &[u8]) -> u64 {
    let mut h = Fnv128::new();
    h.write(payload);
    let full = h.finish();
    (full as u64) ^ ((full >> 64) as u64)
}

/// "FUSECUB" and a format version: a changed layout must not be read as the old one.
const MAGIC: [u8; 8] = *b"FUSECUB1";
/// magic (8) + key (16) + payload length (8) + payload checksum (8).
const HEADER_LEN: usize = 40;

fn encode(key: CacheKey, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&key.0.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&checksum(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// Why an entry on disk was not used.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BadEntry {
    Truncated { have: usize, expected: usize },
    BadMagic,
    WrongKey,
    BadChecksum,
}

impl std::fmt::Display for BadEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadEntry::Truncated { have, expected } => write!(f, "truncated ({have} of {expected} bytes)"),
            BadEntry::BadMagic => write!(f, "not a fuse cubin entry (bad magic)"),
            BadEntry::WrongKey => write!(f, "stored under another key"),
            BadEntry::BadChecksum => write!(f, "checksum mismatch"),
        }
    }
}

fn decode(key: CacheKey, bytes: &[u8]) -> Result<Vec<u8>, BadEntry> {
    let truncated = |expected| BadEntry::Truncated { have: bytes.len(), expected };
    if bytes.len() < HEADER_LEN {
        return Err(truncated(HEADER_LEN));
    }
    let (header, payload) = bytes.split_at(HEADER_LEN);
    let u64_at = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or([0; 8]));
    if header[..8] != MAGIC {
        return Err(BadEntry::BadMagic);
    }
    if u128::from_le_bytes(header[8..24].try_into().unwrap_or([0; 16])) != key.0 {
        return Err(BadEntry::WrongKey);
    }
    let length = u64_at(24);
    if payload.len() as u64 != length {
        return Err(truncated(HEADER_LEN.saturating_add(usize::try_from(length).unwrap_or(usize::MAX))));
    }
    if checksum(payload) != u64_at(32) {
        return Err(BadEntry::BadChecksum);
    }
    Ok(payload.to_vec())
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    Hit(Vec<u8>),
    Miss,
    /// The entry was unusable and has been removed (and a warning printed).
    Discarded(BadEntry),
}

/// A cache directory, or none (caching off).
pub(crate) struct DiskCache {
    dir: Option<PathBuf>,
    /// Whether the "cannot write" warning was printed: once per cache, not once per kernel.
    warned_unwritable: AtomicBool,
}

impl DiskCache {
    pub(crate) fn at(dir: Option<PathBuf>) -> DiskCache {
        DiskCache { dir, warned_unwritable: AtomicBool::new(false) }
    }

    /// The process-wide cache, its directory read from the environment once.
    pub(crate) fn global() -> &'static DiskCache {
        static CACHE: std::sync::OnceLock<DiskCache> = std::sync::OnceLock::new();
        CACHE.get_or_init(|| DiskCache::at(crate::env::kernel_cache_dir()))
    }

    fn path(&self, key: CacheKey) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(key.file_name()))
    }

    /// The entry for `key`. A bad entry is removed, with a one-line warning, and reads as a miss to the caller.
    pub(crate) fn load(&self, key: CacheKey) -> Lookup {
        let Some(path) = self.path(key) else { return Lookup::Miss };
        let Ok(bytes) = fs::read(&path) else { return Lookup::Miss };
        match decode(key, &bytes) {
            Ok(payload) => Lookup::Hit(payload),
            Err(bad) => {
                let removed = match fs::remove_file(&path) {
                    Ok(()) => "removed it".to_string(),
                    Err(e) => format!("could not remove it: {e}"),
                };
                eprintln!("fuse: warning: bad cubin cache entry {} ({bad}); {removed}, recompiling", path.display());
                Lookup::Discarded(bad)
            }
        }
    }

    /// Stores `payload` under `key`; a failure is a warning (printed once per cache) and `false`.
    pub(crate) fn store(&self, key: CacheKey, payload: &[u8]) -> bool {
        let Some(dir) = &self.dir else { return false };
        match write_entry(dir, key, payload) {
            Ok(()) => true,
            Err(e) => {
                if !self.warned_unwritable.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "fuse: warning: cannot write the cubin cache in {} ({e}); kernels will be recompiled in each \
                         process (set FUSE_CACHE_DIR to a writable directory)",
                        dir.display()
                    );
                }
                false
            }
        }
    }
}

/// Writes to a temporary name unique to this process and call, then renames it over the entry.
fn write_entry(dir: &Path, key: CacheKey, payload: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    fs::create_dir_all(dir)?;
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(".{:032x}.{}.{unique}.tmp", key.0, std::process::id()));
    let written = fs::File::create(&temp).and_then(|mut f| f.write_all(&encode(key, payload)));
    let result = written.and_then(|()| fs::rename(&temp, dir.join(key.file_name())));
    if result.is_err() {
        let _ = fs::remove_file(&temp); // best effort: a failed write may have left nothing to remove
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::compile::nvrtc::cubin_key;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(test: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!("fuse-cache-{test}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn key(text: &str) -> CacheKey {
        cubin_key("k", text, &["-DFUSE_T0=float".into()], "sm_90", (13, 0))
    }

    fn entry_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn store_then_load_round_trips_and_leaves_no_temporaries() {
        let tmp = TempDir::new("round-trip");
        let cache = DiskCache::at(Some(tmp.0.join("nested")));
        let k = key("extern \"C\" __global__ void k() {}");
        assert_eq!(cache.load(k), Lookup::Miss);
        let payload: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        assert!(cache.store(k, &payload));
        assert_eq!(cache.load(k), Lookup::Hit(payload.clone()));
        assert_eq!(entry_files(&tmp.0.join("nested")), vec![k.file_name()]);
        // Overwriting an entry is allowed (two processes racing store the same bytes).
        assert!(cache.store(k, b"second"));
        assert_eq!(cache.load(k), Lookup::Hit(b"second".to_vec()));
        assert_eq!(cache.load(key("another source")), Lookup::Miss);
    }

    #[test]
    fn every_input_of_the_compilation_changes_the_key() {
        let base = cubin_key("k", "src", &["-DA=1".into()], "sm_90", (13, 0));
        assert_eq!(base, cubin_key("k", "src", &["-DA=1".into()], "sm_90", (13, 0)), "the key must be stable");
        let others = [
            cubin_key("k2", "src", &["-DA=1".into()], "sm_90", (13, 0)),
            cubin_key("k", "src ", &["-DA=1".into()], "sm_90", (13, 0)),
            cubin_key("k", "src", &["-DA=2".into()], "sm_90", (13, 0)),
            cubin_key("k", "src", &["-DA=1".into(), "-DB".into()], "sm_90", (13, 0)),
            cubin_key("k", "src", &["-DA=1".into()], "sm_90a", (13, 0)),
            cubin_key("k", "src", &["-DA=1".into()], "sm_90", (13, 1)),
        ];
        for other in others {
            assert_ne!(base, other);
        }
        assert_ne!(CacheKey::of(&[b"ab", b"c"]), CacheKey::of(&[b"a", b"bc"]), "parts are length-prefixed");
        // A known value pins the hash: a change to it would silently orphan every user's cache.
        assert_eq!(CacheKey::of(&[]).0, Fnv128::OFFSET);
        let mut h = Fnv128::new();
        h.write(b"a");
        assert_eq!(h.finish(), 0xd228cb696f1a8caf78912b704e4a8964, "FNV-1a 128 of \"a\"");
    }

    /// Writes an entry, damages it with `damage`, and checks that a load discards it as `expected` and removes
    /// the file, and that a store afterwards works again.
    fn check_damaged(test: &str, damage: impl Fn(&mut Vec<u8>), expected: impl Fn(&BadEntry) -> bool) {
        let tmp = TempDir::new(test);
        let cache = DiskCache::at(Some(tmp.0.clone()));
        let k = key(test);
        assert!(cache.store(k, b"a cubin of some length"));
        let path = tmp.0.join(k.file_name());
        let mut bytes = fs::read(&path).unwrap();
        damage(&mut bytes);
        fs::write(&path, &bytes).unwrap();
        match cache.load(k) {
            Lookup::Discarded(bad) => assert!(expected(&bad), "{test}: {bad:?}"),
            other => panic!("{test}: a damaged entry was not discarded: {other:?}"),
        }
        assert!(!path.exists(), "{test}: the bad entry must be removed");
        assert_eq!(cache.load(k), Lookup::Miss);
        assert!(cache.store(k, b"recompiled"));
        assert_eq!(cache.load(k), Lookup::Hit(b"recompiled".to_vec()));
    }

    #[test]
    fn a_corrupt_entry_is_discarded() {
        check_damaged("flipped", |b| *b.last_mut().unwrap() ^= 1, |e| *e == BadEntry::BadChecksum);
        check_damaged("magic", |b| b[0] = b'X', |e| *e == BadEntry::BadMagic);
        check_damaged("length", |b| b[24] ^= 4, |e| matches!(e, BadEntry::Truncated { .. }));
    }

    #[test]
    fn a_truncated_entry_is_discarded() {
        check_damaged("short-payload", |b| b.truncate(b.len() - 3), |e| matches!(e, BadEntry::Truncated { .. }));
        check_damaged("short-header", |b| b.truncate(HEADER_LEN - 1), |e| matches!(e, BadEntry::Truncated { .. }));
        check_damaged("empty", |b| b.clear(), |e| *e == BadEntry::Truncated { have: 0, expected: HEADER_LEN });
    }

    #[test]
    fn an_entry_under_the_wrong_key_is_discarded() {
        let tmp = TempDir::new("wrong-key");
        let cache = DiskCache::at(Some(tmp.0.clone()));
        let (a, b) = (key("a"), key("b"));
        assert!(cache.store(a, b"cubin of a"));
        fs::rename(tmp.0.join(a.file_name()), tmp.0.join(b.file_name())).unwrap();
        assert_eq!(cache.load(b), Lookup::Discarded(BadEntry::WrongKey));
        assert!(!tmp.0.join(b.file_name()).exists());
    }

    #[test]
    fn an_unwritable_directory_is_not_an_error() {
        // A path below a regular file cannot be created, whatever the user's permissions (even root's).
        let tmp = TempDir::new("unwritable");
        fs::create_dir_all(&tmp.0).unwrap();
        fs::write(tmp.0.join("a-file"), b"").unwrap();
        let cache = DiskCache::at(Some(tmp.0.join("a-file").join("cache")));
        let k = key("x");
        assert!(!cache.store(k, b"cubin"));
        assert!(!cache.store(k, b"cubin"), "still false, and the warning is not repeated");
        assert_eq!(cache.load(k), Lookup::Miss);
        assert!(DiskCache::at(None).load(k) == Lookup::Miss && !DiskCache::at(None).store(k, b"x"));
    }
}
