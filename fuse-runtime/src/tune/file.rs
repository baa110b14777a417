//! The results file: one tab-separated line per result,
//!
//! ```text
//! # fuse autotune results v1
//! <environment>\t<group>\t<rows bucket>\t<choice>\t<microseconds (fastest timed run)>
//! ```
//!
//! The environment names the GPU, its arch, the driver, NVRTC and fuse versions; the group names the fused
//! function, the group and a hash of what it computes and how its operands are laid out. A result is used
//! only in its own environment, so one file can hold several machines' results and be shipped with a model.
//! Writing re-reads the file and merges (results another process wrote meanwhile are kept), then writes a
//! temporary file and renames it over the old one. A line that does not parse is skipped with a warning
//! naming the file and line; a file that cannot be read or written is a warning, never an error.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

const HEADER: &str = "# fuse autotune results v1: environment, group, rows bucket, choice, fastest us";

/// What a result is for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct TuneKey {
    pub env: String,
    pub group: String,
    pub bucket: usize,
}

impl TuneKey {
    /// The key of the same group and bucket run as the tasks of a one-launch step (one block a multiprocessor,
    /// several rounds where the grid is larger): its group's name with `@task` after it.
    pub fn for_tasks(&self) -> TuneKey {
        TuneKey { group: format!("{}@task", self.group), ..self.clone() }
    }
}

/// One result: the path chosen for a group and shape bucket in an environment, and its measured time.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneEntry {
    pub environment: String,
    pub group: String,
    pub rows_bucket: usize,
    pub choice: String,
    pub micros: f64,
}

pub(crate) struct TuneTable {
    path: Option<PathBuf>,
    map: BTreeMap<TuneKey, (String, f64)>,
    /// Results of timings other threads' GPU work may have disturbed: used by this process, never written.
    unsaved: BTreeMap<TuneKey, (String, f64)>,
    warned_write: bool,
}

/// Tabs and newlines would break the line format; names never contain them, but be safe.
fn clean(field: &str) -> String {
    field.chars().map(|c| if c == '\t' || c == '\n' || c == '\r' { ' ' } else { c }).collect()
}

fn parse(text: &str, path: &Path) -> BTreeMap<TuneKey, (String, f64)> {
    let mut map = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let parsed = match fields[..] {
            [env, group, bucket, choice, micros] => {
                bucket.parse::<usize>().ok().zip(micros.parse::<f64>().ok()).filter(|_| !choice.is_empty()).map(
                    |(bucket, micros)| {
                        (TuneKey { env: env.into(), group: group.into(), bucket }, (choice.into(), micros))
                    },
                )
            }
            _ => None,
        };
        match parsed {
            Some((key, value)) => {
                map.insert(key, value);
            }
            None => eprintln!("fuse: {}:{}: not an autotune result, skipped: {line:?}", path.display(), i + 1),
        }
    }
    map
}

fn read(path: &Path) -> BTreeMap<TuneKey, (String, f64)> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => {
            eprintln!("fuse: cannot read the autotune results {}: {e}; tuning afresh", path.display());
            BTreeMap::new()
        }
    }
}

fn render(map: &BTreeMap<TuneKey, (String, f64)>) -> String {
    let mut text = format!("{HEADER}\n");
    for (k, (choice, micros)) in map {
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\t{micros:.2}\n",
            clean(&k.env),
            clean(&k.group),
            k.bucket,
            clean(choice)
        ));
    }
    text
}

fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = std::fs::File::create(&temp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&temp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

impl TuneTable {
    pub(crate) fn load(path: Option<PathBuf>) -> TuneTable {
        let map = path.as_deref().map(read).unwrap_or_default();
        TuneTable { path, map, unsaved: BTreeMap::new(), warned_write: false }
    }

    /// Switches to another file: its results are added to (and win over) the ones held.
    pub(crate) fn reload(&mut self, path: Option<PathBuf>) {
        if let Some(p) = path.as_deref() {
            self.map.extend(read(p));
        }
        self.path = path;
    }

    pub(crate) fn lookup(&self, key: &TuneKey) -> Option<&str> {
        self.map.get(key).or_else(|| self.unsaved.get(key)).map(|(choice, _)| choice.as_str())
    }

    /// Keeps a result for this process only: its timing shared the GPU's stream with other threads' work
    /// (a test binary's concurrent tests, say), so it may name a slower path, which the file would hand on
    /// to every later process (seen on an H200: a benchmark run after the tests took their paths).
    pub(crate) fn record_unsaved(&mut self, key: TuneKey, choice: &str, micros: f64) {
        self.unsaved.insert(key, (choice.to_string(), micros));
    }

    /// Keeps a result and writes the file (merged with what is on disk now).
    pub(crate) fn record(&mut self, key: TuneKey, choice: &str, micros: f64) {
        self.map.insert(key, (choice.to_string(), micros));
        let Some(path) = self.path.clone() else { return };
        // What is on disk now (another process may have written since), with this process's results on top.
        let mut merged = read(&path);
        merged.extend(self.map.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Err(e) = write_atomically(&path, &render(&merged)) {
            if !self.warned_write {
                eprintln!(
                    "fuse: cannot write the autotune results {}: {e}; results stay in this process",
                    path.display()
                );
                self.warned_write = true;
            }
        }
    }

    /// Every result this process knows: the file's and its own, those kept unsaved included.
    pub(crate) fn entries(&self) -> Vec<TuneEntry> {
        let unsaved = self.unsaved.iter().filter(|(k, _)| !self.map.contains_key(*k));
        self.map
            .iter()
            .chain(unsaved)
            .map(|(k, (choice, micros))| TuneEntry {
                environment: k.env.clone(),
                group: k.group.clone(),
                rows_bucket: k.bucket,
                choice: choice.clone(),
                micros: *micros,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(env: &str, bucket: usize) -> TuneKey {
        TuneKey { env: env.into(), group: "mlp#0:abc".into(), bucket }
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fuse-tune-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn results_survive_a_round_trip_and_merge_with_another_writer() {
        let dir = temp_dir("merge");
        let path = dir.join("sub").join("tune.tsv");
        let mut a = TuneTable::load(Some(path.clone()));
        a.record(key("h200", 16), "skinny:x", 57.25);
        // Another process loaded the file before a's second result, and writes its own.
        let mut b = TuneTable::load(Some(path.clone()));
        a.record(key("h200", 256), "cublaslt:2", 140.0);
        b.record(key("a100", 16), "cublas", 99.0);
        let c = TuneTable::load(Some(path.clone()));
        assert_eq!(c.lookup(&key("h200", 16)), Some("skinny:x"));
        assert_eq!(c.lookup(&key("h200", 256)), Some("cublaslt:2"));
        assert_eq!(c.lookup(&key("a100", 16)), Some("cublas"));
        assert_eq!(c.lookup(&key("h200", 32)), None);
        assert_eq!(c.entries().len(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn results_timed_beside_other_work_stay_in_this_process() {
        let dir = temp_dir("unsaved");
        let path = dir.join("tune.tsv");
        let mut a = TuneTable::load(Some(path.clone()));
        a.record_unsaved(key("h200", 1), "cublas", 30.0);
        assert_eq!(a.lookup(&key("h200", 1)), Some("cublas"), "this process uses it");
        // A later result that is written does not carry the unsaved one with it.
        a.record(key("h200", 16), "skinny:x", 57.25);
        let b = TuneTable::load(Some(path.clone()));
        assert_eq!(b.lookup(&key("h200", 1)), None, "another process times it again");
        assert_eq!(b.lookup(&key("h200", 16)), Some("skinny:x"));
        assert_eq!((a.entries().len(), b.entries().len()), (2, 1), "this process lists both");
        // A written result wins over an unsaved one of the same key.
        a.record(key("h200", 1), "skinny:y", 20.0);
        assert_eq!(a.lookup(&key("h200", 1)), Some("skinny:y"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_lines_are_skipped_and_good_ones_kept() {
        let text = format!("{HEADER}\nenv\tg\t16\tcublas\t12.5\ngarbage line\nenv\tg\tx\tcublas\t1\nenv\tg\t4\t\t1\nenv\tg\t2\tskinny:a\t3\n");
        let map = parse(&text, Path::new("t.tsv"));
        let choices: Vec<(usize, &str)> = map.iter().map(|(k, (c, _))| (k.bucket, c.as_str())).collect();
        assert_eq!(choices, vec![(2, "skinny:a"), (16, "cublas")]);
    }

    #[test]
    fn an_unwritable_file_keeps_results_in_memory() {
        let dir = temp_dir("ro");
        std::fs::create_dir_all(&dir).unwrap();
        // A directory where the file should be: writing fails, the result is still known.
        let path = dir.join("taken");
        std::fs::create_dir_all(path.join("x")).unwrap();
        let mut t = TuneTable::load(Some(path));
        t.record(key("e", 1), "cublas", 1.0);
        assert_eq!(t.lookup(&key("e", 1)), Some("cublas"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
