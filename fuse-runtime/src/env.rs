//! Every environment variable fuse reads, read here and nowhere else in the library. Most are read once per
//! process (the first time they matter) and kept; the others say so.
//!
//! | variable         | values                              | default            | what it does |
//! |------------------|-------------------------------------|--------------------|--------------|
//! | `FUSE_DEBUG`     | `0`..`5`                            | `0`                | reports on stderr, each level adding to those below: 1 plan summary, 2 per-group times, 3 matmul paths and tuning decisions, 4 kernel sources, 5 the graph (see [`debug_level`]) |
//! | `FUSE_FUSION`    | `off`, `0`, `false`; anything else  | on                 | `off` runs every fused function unfused, one pass per op |
//! | `FUSE_GRAPHS`    | `off`, `0`, `false`; anything else  | on                 | `off` makes `CudaGraph::capture` record nothing: `replay` calls the step's closure |
//! | `FUSE_ROPE_APPEND` | `off`, `0`, `false`; anything else | on               | `off` runs a decode step's rope, cache appends and attention as separate launches instead of one (for comparison) |
//! | `FUSE_PDL`       | `off`, `0`, `false`; anything else  | on                 | `off` launches each kernel after the one before it has finished (no programmatic dependent launch); sm_90 and later only |
//! | `FUSE_AUTOTUNE`  | `off`, `fast`, `full` (and synonyms, see `tune::AutotuneMode`) | `fast` | how much the autotuner times: `off` uses the results file, else a fixed rule; `fast` a short list; `full` every candidate |
//! | `FUSE_TUNE_FILE` | a path (empty: unset)               | `tune.tsv` in the cache directory | the autotuner's results file |
//! | `FUSE_CACHE_DIR` | a directory (empty: unset)          | `$XDG_CACHE_HOME/fuse`, else `$HOME/.cache/fuse`, else none | where compiled CUDA kernels (and the default results file) are kept between processes |
//! | `FUSE_DUAL_GEMM` | `split`; anything else              | batched            | `split` makes a DualGemm's two products two cuBLAS calls instead of one batched call |
//! | `FUSE_HOST_PROFILE` | `1`; anything else               | unset              | `1` sums each fused call's host time by phase for `fuse::host_profile::take` (bench_decode prints it); unset, each hook is one cached load |
//! | `FUSE_CPU_AMX`   | `off`, `0`, `false`; anything else  | on                 | `off` keeps the CPU's 8-bit products at prefill (Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q8_0) off Intel AMX tiles on CPUs that have them (AVX-512 instead; the 32-value types then keep f32 activations) |
//! | `FUSE_CPU_QUANT` | `q8`; anything else                 | `f32`              | how the CPU multiplies by block-quantized weights: `f32` decodes the blocks to f32 in registers (exact up to summation order: SmolLM2's logits within 2e-6 of transformers'), `q8` quantizes each activation row to 8 bits and uses integer dot products as llama.cpp does (~4e-3 relative error a product, 2.6e-2 on SmolLM2's logits; up to 3x faster for the K types on one core) |
//! | `FUSE_TEST_GPU`  | `1`; anything else                  | unset              | `fuse::testing::gpu_or_skip` panics instead of skipping when there is no GPU (read on each call) |
//! | `FUSE_STEP_TRACE` | a path (empty: unset)              | unset              | one-launch step kernels stamp each task and write the times there when dropped |
//! | `FUSE_STEP_PREFETCH`     | `on`, `1`, `true`; anything else    | off                | one-launch step kernels fetch the next task's weights into L2 (dense and quantized skinny bodies; for an A/B: slower on SmolLM2's bf16 shape, +15% on the llama-3.2-1b Q8_0 file) |
//! | `FUSE_STEP_INLINE`       | `on`, `1`, `true`; anything else    | off                | one-launch step kernels inline their task bodies rather than call them (an A/B: fewer spills in a step of many kernels) |
//! | `FUSE_STEP_PRELOAD`      | `on`, `1`, `true`; anything else    | off                | with `FUSE_QUANT_BULK`, one-launch step kernels issue the next task's first weight stages into shared memory during the current task (an A/B: slower on the llama-3.2-1b Q8_0 file) |
//! | `FUSE_STEP_SHARED_PARAMS` | `off`, `0`, `false`; anything else | on                 | `off` leaves each one-launch step task's arguments in global memory rather than shared (for an A/B) |
//! | `FUSE_STEP_SPLIT_KEYS`, `FUSE_STEP_ONE_SPLIT_KEYS` | a number          | 64, 192            | in a step recorded for one launch, the decode attention's split floor, and the keys up to which a sequence takes one split (0: none) |
//! | `FUSE_STEP_BLOCKS_PER_SM` | 1 to 8                     | 1                  | one-launch step kernels built for so many resident blocks a multiprocessor |
//! | `FUSE_STEP_ROW_BLOCKS` | `off`, `0`, `false`; anything else | on             | in a step recorded for one launch, the decode attention cuts a kv head's rows into blocks of one pass (the llama-3.2-1b Q8_0 file's step -12% on an H100); `off` for the A/B |
//! | `FUSE_TUNE_TASKS` | `on`, `1`, `true`; anything else  | off                | products at decode rows are also timed as a one-launch step's tasks, which take the winner (off until `quantized::cuda` runs to the end with it: its greedy tokens parted from the graph path's before configs that sum alike came first) |
//! | `FUSE_QUANT_ROW_PREFETCH` | `off`, `0`, `false`; anything else | on           | `off`: the quantized skinny bodies send each lane's first weight piece toward L2 before their wait, not whole rows |
//! | `FUSE_QUANT_SCALED` | `on`, `1`, `true`; anything else | off               | the quantized 8-bit bodies take the in-kernel prologue's scaled form (X staged as h, s applied before the epilogue) |
//! | `FUSE_QUANT_BULK` | `on`, `1`, `true`; anything else      | off               | on sm_90, the quantized streaming body copies its weights as bulk copies completing on mbarriers (an A/B: the same time as cp.async units on an H100) |
//!
//! fuse's own test suites read a few more, there and not here (they configure the tests, not the
//! library): `FUSE_TEST_NVRTC=1` (a missing NVRTC or ptxas fails `tests/kernels_compile.rs`), `FUSE_PTXAS`
//! (the ptxas it runs; `scripts/cuda-tools.sh` sets both), and `FUSE_DEBUG_LADDER_CHILD`,
//! `FUSE_PROLOGUE_CHILD` (set by a test for the child process it starts). `tests/gpu/skinny.rs` reads
//! `FUSE_PDL` as this module does, to know what the library did.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// `FUSE_DEBUG` as an integer (0 when unset or not a number). Each level adds to the ones below it; all of
/// it goes to stderr, prefixed `fuse:`.
///
/// | level | what                                                                                   | when |
/// |-------|----------------------------------------------------------------------------------------|------|
/// | 1     | plan summary: groups, their kinds, nodes and shapes for this call; groups that ran unfused (fuse-models' decoder also lists its recorded step's kernels) | first call of each function |
/// | 2     | wall time of each group (the GPU is synchronised after each group to measure it)         | every call |
/// | 3     | which matmul path each Gemm/DualGemm group took and why (forced, from the tune results, tuned: each candidate's time, or the fixed rule): the cuBLAS call form (below), the skinny template's config and grid, or the CPU's `gemm::gemm` calls | every call |
/// | 4     | each kernel's `extern "C"` name and CUDA source (the ones `#[fuse]` emitted, else generated) | first call |
/// | 5     | the traced graph as text                                                                 | first call |
///
/// Level 3 on the GPU reports each library call in cuBLAS's column-major terms: the operands swap, so A is
/// the weight (the row-major right operand) and B the left operand; `op(A)=T` reads a `.t()` weight in
/// place. A DualGemm on the `cublas` path is one batched call when its two weights lie a whole number of
/// elements apart (the line says so, or why it made two calls).
///
/// Level 2 and above change timing (a synchronisation per group and no replay of recorded launches): use
/// them to look, not to benchmark.
pub fn debug_level() -> u32 {
    static LEVEL: OnceLock<u32> = OnceLock::new();
    *LEVEL.get_or_init(|| number("FUSE_DEBUG").unwrap_or(0))
}

/// `FUSE_STEP_TRACE=FILE`: one-launch step kernels are built to time each task (`ONE_LAUNCH_TRACE_STAMPS`
/// global-timer stamps), and each writes its last replay's times to FILE (tab-separated, one task a line,
/// appended) when it is dropped. For looking, not benchmarking.
pub(crate) fn step_trace_file() -> Option<&'static str> {
    static FILE: OnceLock<Option<String>> = OnceLock::new();
    FILE.get_or_init(|| std::env::var("FUSE_STEP_TRACE").ok().filter(|v| !v.trim().is_empty())).as_deref()
}

/// `FUSE_STEP_PREFETCH=on` (or `1`): one-launch step kernels fetch into L2 what each block's next task will read
/// (the skinny template's weights) while the block sets up its current task. Off by default: measured slower
/// (an H100, 2026-12-06: 976 against 941 us a token at batch 1, the same at 16; BENCHMARKS.md); for the A/B.
pub(crate) fn step_prefetch() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("FUSE_STEP_PREFETCH").is_ok_and(|v| is_on(&v)))
}

/// One-launch step kernels copy each task's arguments into shared memory as its block sets it up
/// (`-DFUSE_STEP_PARAM_WORDS`), where its index arithmetic reads them; `FUSE_STEP_SHARED_PARAMS=off` (or `0`)
/// leaves them in global memory (an H100, 2026-12-06: 850 against 959 us a token at batch 1, 1,287 against
/// 1,403 at 16; BENCHMARKS.md). For the A/B.
pub(crate) fn step_shared_params() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !std::env::var("FUSE_STEP_SHARED_PARAMS").is_ok_and(|v| is_off(&v)))
}

/// `FUSE_STEP_SPLIT_KEYS=N`: the fewest keys a decode attention split covers (but the last) in a step recorded
/// for one launch, whose splits merge through global memory and a last block (no clusters there); the
/// library's default otherwise (`fuse_ir::codegen::ATTENTION_DECODE_SPLIT_KEYS`). For the A/B.
pub(crate) fn step_split_keys() -> usize {
    static KEYS: OnceLock<usize> = OnceLock::new();
    *KEYS.get_or_init(|| {
        number("FUSE_STEP_SPLIT_KEYS").filter(|&n| n > 0).unwrap_or(fuse_ir::codegen::ATTENTION_DECODE_SPLIT_KEYS)
    })
}

/// `FUSE_STEP_BLOCKS_PER_SM=N`: one-launch step kernels are built for N resident blocks a multiprocessor (their
/// registers capped to fit), each running a task list of its own; 1 by default. For the A/B.
pub(crate) fn step_blocks_per_sm() -> u32 {
    static BLOCKS: OnceLock<u32> = OnceLock::new();
    *BLOCKS.get_or_init(|| number("FUSE_STEP_BLOCKS_PER_SM").filter(|n| (1..=8).contains(n)).unwrap_or(1))
}

/// `FUSE_STEP_ONE_SPLIT_KEYS=N`: in a step recorded for one launch, a sequence whose decode attention sees at most
/// N keys takes one split (no merge); 0: the split floor alone decides. 192 by default: on an H100 (2026-12-07)
/// one split took a step of 128 cached keys from 865 to 787 us at batch 1 (1,270 to 1,207 at 16), and 1,024 as
/// the bound cost 88 us at 512 cached, where 192 changed nothing.
pub(crate) fn step_one_split_keys() -> usize {
    static KEYS: OnceLock<usize> = OnceLock::new();
    *KEYS.get_or_init(|| number("FUSE_STEP_ONE_SPLIT_KEYS").unwrap_or(192))
}

/// `FUSE_TUNE_TASKS=on` (or `1`): while the graph path tunes a matmul group at decode rows, the candidates that
/// can be a one-launch step's tasks are timed again as tasks run (`exec/task_tuning.rs`), and a recorded step
/// takes the winner. Off by default: on an H100 (2026-12-07) it took the llama-3.2-1b Q4_K_M file's step from
/// 1,526 to 1,446-1,512 us at batch 1 and made its batch-16 step one kernel, but fuse-models' `quantized::cuda`
/// case then failed its greedy-token check against the graph path (not a near tie). Since candidates that sum
/// as the graph path's kernel does come first, that case ran bit for bit the graph's logits (H100, forty-third
/// session); the test's other mixes have not yet run to the end with it.
pub(crate) fn tune_tasks() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("FUSE_TUNE_TASKS").is_ok_and(|v| is_on(&v)))
}

/// The quantized skinny template's bodies send their whole weight rows toward L2 before their grid wait
/// (`fuse_ir::codegen::ROW_PREFETCH_DEFINE`); `FUSE_QUANT_ROW_PREFETCH=off` (or `0`): each lane's first piece
/// only. On by default (a hint: the results are the same bits); measured together with `FUSE_QUANT_SCALED`
/// (see there). For the A/B.
pub(crate) fn quant_row_prefetch() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !std::env::var("FUSE_QUANT_ROW_PREFETCH").is_ok_and(|v| is_off(&v)))
}

/// `FUSE_QUANT_SCALED=on` (or `1`): the quantized skinny template's 8-bit bodies take the in-kernel prologue's
/// scaled form where it has one (`fuse_ir::codegen::SCALED_PROLOGUE_DEFINE`: no row pass before X is staged).
/// Off by default: it rounds h rather than s * h, and the SmolLM2 file's tokens against transformers have not
/// run with it (with the whole-row prefetch it took the Q4_K_M file's graph from 836 to 757-779 us at batch 1,
/// H100, 2026-12-07: the two were measured together).
pub(crate) fn quant_scaled_prologue() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("FUSE_QUANT_SCALED").is_ok_and(|v| is_on(&v)))
}

/// `FUSE_QUANT_BULK=on` (or `1`): on sm_90 and later, the quantized skinny template's streaming body copies
/// each step's weight rows as bulk copies completing on a barrier a stage (`fuse_ir::codegen::BULK_STREAM_DEFINE`),
/// not as every lane's cp.async units: the same bytes, so the same bits. Off by default: the same time (an H100,
/// 2026-12-07: the llama-3.2-1b Q8_0 file's step 1,675 against 1,669 us; BENCHMARKS.md).
pub(crate) fn quant_bulk_stream() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("FUSE_QUANT_BULK").is_ok_and(|v| is_on(&v)))
}

/// `FUSE_STEP_INLINE=on` (or `1`): a one-launch step kernel's task bodies are inlined into its dispatch
/// (`-DFUSE_STEP_INLINE_TASKS`) rather than called: ptxas gives called bodies disjoint bands of registers, which
/// shrink as the step holds more kernels (the prelude's FUSE_KERNEL says what was measured). Off by default:
/// not timed yet (forty-fifth session).
pub(crate) fn step_inline_tasks() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("FUSE_STEP_INLINE").is_ok_and(|v| is_on(&v)))
}

/// `FUSE_STEP_PRELOAD=on` (or `1`): as a one-launch step's block sets up a task, it issues the first ring stages
/// of its next task's weights into dynamic shared memory the current task leaves alone (the step kernel takes
/// all its blocks may have), where that task is the quantized template's streaming body with bulk-copy stages
/// (`FUSE_QUANT_BULK`) on weights no kernel writes; `-DFUSE_STEP_PRELOAD`. Off by default: slower (an H100,
/// 2026-12-07: the llama-3.2-1b Q8_0 file's step 1,834 against 1,675 us with bulk stages alone; BENCHMARKS.md).
pub(crate) fn step_preload() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("FUSE_STEP_PRELOAD").is_ok_and(|v| is_on(&v)))
}

/// In a step recorded for one launch, the decode attention cuts a kv head's rows into blocks of one pass, a row
/// group a row (`AttentionLaunch::in_row_blocks`), rather than giving each of a 256-thread task's row groups
/// several rows a pass; `FUSE_STEP_ROW_BLOCKS=off` (or `0`) for the A/B. On by default since the forty-fourth
/// session: H100, 2026-12-07, the llama-3.2-1b Q8_0 file's step 1,875 -> 1,658 us at batch 1, the one-launch
/// tests passing, and memcheck, synccheck, initcheck and racecheck clean over a step whose attention runs in
/// row blocks (racecheck's hazards all in cuBLAS's kernels).
pub(crate) fn step_row_blocks() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !std::env::var("FUSE_STEP_ROW_BLOCKS").is_ok_and(|v| is_off(&v)))
}

/// `FUSE_CPU_AMX`: `off` (or `0`, `false`) keeps the CPU's quantized products off Intel AMX tiles where the CPU
/// has them (for comparison); anything else or unset lets the library use them.
pub(crate) fn cpu_amx() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !std::env::var("FUSE_CPU_AMX").is_ok_and(|v| is_off(v.trim())))
}

/// `FUSE_CPU_QUANT`: how the CPU's quantized products meet the activations: `f32` (kept in f32), `q8` (each
/// row rounded to 8 bits, llama.cpp's way) or `q8r` (two 8-bit terms, the second the first's rounding error),
/// lower-cased; unset: `None`, the library's choice. Another value is said once on stderr and the library chooses.
pub(crate) fn cpu_quant() -> Option<&'static str> {
    static CHOICE: OnceLock<Option<String>> = OnceLock::new();
    CHOICE
        .get_or_init(|| {
            let v = std::env::var("FUSE_CPU_QUANT").ok()?.trim().to_ascii_lowercase();
            if ["f32", "q8", "q8r"].contains(&v.as_str()) {
                return Some(v);
            }
            eprintln!("fuse: FUSE_CPU_QUANT={v} is not f32, q8 or q8r; the library chooses per block type");
            None
        })
        .as_deref()
}

/// `FUSE_CPU_SPIN_US`: how long the CPU backend's spinning helpers wait for the next loop before they park, in
/// microseconds (0: park at once; for measuring what spinning costs threads that share a core with them).
pub(crate) fn cpu_spin_us() -> Option<u64> {
    static US: OnceLock<Option<u64>> = OnceLock::new();
    *US.get_or_init(|| number("FUSE_CPU_SPIN_US"))
}

/// `FUSE_CPU_TASK_KB`: the least weight bytes (KiB) a task of a CPU quantized product takes (default 0: the
/// rows split over twice the threads). For measuring, on many cores, whether small products (a few hundred KB)
/// lose more to sixteen threads' start and join than they gain in bandwidth.
pub(crate) fn cpu_task_kb() -> usize {
    static KB: OnceLock<usize> = OnceLock::new();
    *KB.get_or_init(|| number("FUSE_CPU_TASK_KB").unwrap_or(0))
}

/// `FUSE_FUSION`: `off`, `0` or `false` run every fused function unfused.
pub(crate) fn fusion_off() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| std::env::var("FUSE_FUSION").is_ok_and(|v| is_off(&v)))
}

/// `FUSE_PDL`: `off`, `0` or `false` launch every kernel after the one before it has finished, without
/// programmatic dependent launch (for comparison, or a driver that mishandles it).
pub(crate) fn launch_overlap() -> bool {
    static OVERLAP: OnceLock<bool> = OnceLock::new();
    *OVERLAP.get_or_init(|| !std::env::var("FUSE_PDL").is_ok_and(|v| is_off(&v)))
}

/// `FUSE_ROPE_APPEND`: `off`, `0` or `false` keep a decode step's rope, cache appends and attention apart
/// (`cuda/exec/rope_append.rs` fuses them otherwise).
pub(crate) fn rope_append_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !std::env::var("FUSE_ROPE_APPEND").is_ok_and(|v| is_off(&v)))
}

/// `FUSE_GRAPHS`: `off`, `0` or `false` make `CudaGraph::capture` keep its closure and call it on each
/// replay instead of recording a CUDA graph (for debugging a step op by op).
pub(crate) fn graphs_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !std::env::var("FUSE_GRAPHS").is_ok_and(|v| is_off(&v)))
}

/// `FUSE_DUAL_GEMM`: whether DualGemm products may be one batched cuBLAS call (`split`: never).
pub(crate) fn batch_dual_gemms() -> bool {
    static BATCH: OnceLock<bool> = OnceLock::new();
    *BATCH.get_or_init(|| std::env::var("FUSE_DUAL_GEMM").map_or(true, |v| v != "split"))
}

/// `FUSE_AUTOTUNE` as set (`None` when unset or not unicode); `tune` parses it once, into its settings.
pub(crate) fn autotune() -> Option<String> {
    std::env::var("FUSE_AUTOTUNE").ok()
}

/// `FUSE_TUNE_FILE` when set and not empty; `tune` reads it once, falling back to the cache directory.
pub(crate) fn tune_file() -> Option<PathBuf> {
    std::env::var_os("FUSE_TUNE_FILE").filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// [`cache_dir`] of this process's environment. Its callers (the cubin cache, the tune settings) each
/// read it once.
pub(crate) fn kernel_cache_dir() -> Option<PathBuf> {
    cache_dir(|name| std::env::var_os(name))
}

/// `FUSE_CACHE_DIR`, else `$XDG_CACHE_HOME/fuse`, else `$HOME/.cache/fuse`; empty values count as unset.
/// `var` reads the environment (a parameter so tests need not change the process's environment).
pub(crate) fn cache_dir(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("FUSE_CACHE_DIR")
        .or_else(|| set("XDG_CACHE_HOME").map(|d| d.join("fuse")))
        .or_else(|| set("HOME").map(|d| d.join(".cache").join("fuse")))
}

/// `FUSE_HOST_PROFILE=1`: time each fused call's host phases (`host_profile.rs`).
pub(crate) fn host_profile() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("FUSE_HOST_PROFILE").is_ok_and(|v| v.trim() == "1"))
}

/// `FUSE_TEST_GPU=1`: a test suite's missing GPU is a failure, not a skip. Read on every call.
pub(crate) fn gpu_required() -> bool {
    std::env::var("FUSE_TEST_GPU").is_ok_and(|v| v.trim() == "1")
}

fn is_off(value: &str) -> bool {
    matches!(value.trim().to_ascii_lowercase().as_str(), "off" | "0" | "false")
}

/// `on`, `1` or `true`: a switch that is off unless set so.
fn is_on(value: &str) -> bool {
    matches!(value.trim(), "on" | "1" | "true")
}

/// The variable `name` as a number (`None` when unset or not one).
fn number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_comes_from_the_environment_in_order() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v))
        };
        const ALL: [(&str, &str); 3] = [("FUSE_CACHE_DIR", "/c/fuse"), ("XDG_CACHE_HOME", "/xdg"), ("HOME", "/home/u")];
        assert_eq!(cache_dir(env(&ALL)), Some(PathBuf::from("/c/fuse")));
        assert_eq!(
            cache_dir(env(&[("FUSE_CACHE_DIR", ""), ("XDG_CACHE_HOME", "/xdg")])),
            Some(PathBuf::from("/xdg/fuse"))
        );
        assert_eq!(cache_dir(env(&[("HOME", "/home/u")])), Some(PathBuf::from("/home/u/.cache/fuse")));
        assert_eq!(cache_dir(env(&[])), None);
    }
}
