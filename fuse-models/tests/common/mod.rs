//! Shared by fuse-models' tests: the real model file and the reference JSON, and small helpers on logits.
#![allow(dead_code)] // each test binary uses a part

use std::io::Write;
use std::sync::OnceLock;

use fuse_models::gguf::GgufFile;

/// The model, opened once per test binary; `None` (with a visible notice) when the file is missing, unless
/// `FUSE_TEST_MODEL=1`, which makes a missing file a failure.
pub fn model() -> Option<&'static GgufFile> {
    static MODEL: OnceLock<Option<GgufFile>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = fuse_models::smollm2_path();
            if !path.exists() {
                let required = std::env::var("FUSE_TEST_MODEL").as_deref() == Ok("1");
                assert!(
                    !required,
                    "FUSE_TEST_MODEL=1 but {} is missing (run scripts/fetch-smollm2.sh)",
                    path.display()
                );
                // Straight to stderr: the test harness captures eprintln! of passing tests.
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: model file not found (run scripts/fetch-smollm2.sh): {}",
                    path.display()
                );
                return None;
            }
            Some(GgufFile::open(&path).unwrap_or_else(|e| panic!("opening the model: {e}")))
        })
        .as_ref()
}

/// fuse-models/tests/data/smollm2_reference.json, parsed.
pub fn reference() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/smollm2_reference.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn ids(value: &serde_json::Value) -> Vec<u32> {
    value.as_array().expect("an array of ids").iter().map(|v| v.as_u64().expect("an id") as u32).collect()
}

/// Relative L2 of `got` against `want`.
#[allow(dead_code)] // not every test file that mounts this module compares logits
pub fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    let diff: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    (diff / norm.max(1e-30)).sqrt()
}

/// The first largest value's index (ties: the lowest, as the device's argmax): a greedy step's token.
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}
