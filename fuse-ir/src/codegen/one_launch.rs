//! The source of a one-launch step (issue 33): the kernels a recorded step launches, each compiled as a
//! device function (`FUSE_TASK`, see the prelude's `FUSE_KERNEL`), in one persistent kernel whose blocks run
//! the launches' blocks as tasks (`cuda/one_launch.cuh`: the machinery, its dependency and memory rules).
//!
//! Each kernel's source is self-contained and defines its own helpers and macros, so each goes into a
//! namespace of its own with its `-D` defines as `#define`s before it, and every macro it defines is undefined
//! after it: the next kernel starts from the same state, its guards (`FUSE_PRELUDE_ONCE` ...) included. The
//! text depends only on the kernels in order and the block size: the same step gives the same source.

use std::collections::BTreeSet;
use std::fmt::Write;

/// The machinery around the kernels (included twice: before them, its head; after them, the entry).
pub const ONE_LAUNCH_MACHINERY: &str = include_str!("cuda/one_launch.cuh");

/// Launch records a step kernel copies into shared memory at most (`-DFUSE_STEP_LAUNCHES`, 32 bytes each: 12 KB
/// beside the task kernels' own static shared memory, under the 48 KB a kernel may have); a step of more reads
/// them from global memory.
pub const ONE_LAUNCH_SHARED_LAUNCHES: usize = 384;

/// Argument words a step kernel copies into shared memory for each task at most (`-DFUSE_STEP_PARAM_WORDS`, the
/// step's largest launch's): a task's body then reads its arguments (sizes, strides, pointers: a chain of
/// dependent reads in every kernel's index arithmetic) there, not from global memory at L2's latency, as a
/// launch reads its parameters from the constant bank. A step with larger arguments reads them in place.
pub const ONE_LAUNCH_MAX_PARAM_WORDS: usize = 512;

/// Threads a block of a persistent step at most: a launch of larger blocks stays a launch of its own, so
/// kernels recorded for one launch take a form within it where they have one.
pub const ONE_LAUNCH_MAX_TASK_THREADS: u32 = 256;

/// The entry symbol of every one-launch step kernel.
pub const ONE_LAUNCH_ENTRY: &str = "fuse_one_launch_step";

/// The dispatch's kernel id of a recorded memset (words: address, bytes, value) run as tasks.
pub const ONE_LAUNCH_FILL: u32 = 0xffff_fff0;
/// The dispatch's kernel id of a recorded device copy (words: from, to, bytes) run as tasks.
pub const ONE_LAUNCH_COPY: u32 = 0xffff_fff1;

/// One recorded launch as the step kernel reads it (`FuseStepLaunch` in `cuda/one_launch.cuh`): the address of
/// its argument words, its dispatch case, blocks, threads a block, whether it waits for the launch before
/// inside (`fuse_grid_wait`) rather than before it starts, its argument words' count and its bytes of dynamic
/// shared memory. Packed here only, for the runtime's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepLaunchRecord {
    pub params: u64,
    pub kernel: u32,
    pub grid: u32,
    pub threads: u32,
    pub overlap: bool,
    pub param_words: u32,
    pub shared_bytes: u32,
}

impl StepLaunchRecord {
    /// Its four 64-bit words, as the struct lies in memory (little-endian).
    pub fn words(&self) -> [u64; 4] {
        [
            self.params,
            u64::from(self.kernel) | u64::from(self.grid) << 32,
            u64::from(self.threads) | u64::from(self.overlap) << 32,
            u64::from(self.param_words) | u64::from(self.shared_bytes) << 32,
        ]
    }
}

/// The step kernel's argument (`FuseStepArgs`): the launch records, every block's tasks (`launch << 32 |
/// block`), where each block's tasks start (`first[b] .. first[b + 1]`, u32), the counters (`launch_count +
/// 1` u64, zero at first), the launch count, and where a `-DFUSE_STEP_TRACE` build writes
/// [`ONE_LAUNCH_TRACE_STAMPS`] times a task (0 otherwise).
pub fn step_argument_words(
    launches: u64,
    tasks: u64,
    first: u64,
    counters: u64,
    launch_count: usize,
    trace: u64,
) -> [u64; 6] {
    [launches, tasks, first, counters, launch_count as u64, trace]
}

/// Times a `-DFUSE_STEP_TRACE` build writes for each task, in ns of the GPU's global timer, at its index in the
/// task lists: its set-up begins (before its waits for the launches before), its body begins, its
/// `fuse_grid_wait` returns, its body ends, its launch's counter is signalled, then the kernel's own marks 0
/// .. 2 (the prelude's `FUSE_TASK_MARK`); 0 where a task passed none.
pub const ONE_LAUNCH_TRACE_STAMPS: usize = 8;

/// One kernel the step runs tasks of: its `extern "C"` name, its source and its `-D` defines.
#[derive(Clone, Copy, Debug)]
pub struct TaskKernel<'a> {
    pub name: &'a str,
    pub source: &'a str,
    pub defines: &'a [String],
}

/// Why a kernel cannot be a task (checked on its source): `None` when it can.
pub fn task_refusal(kernel: &TaskKernel<'_>) -> Option<String> {
    if !kernel.source.contains("\nFUSE_KERNEL(") {
        return Some(format!("kernel {} does not declare its entry with FUSE_KERNEL", kernel.name));
    }
    let mut code = kernel.source.lines().map(str::trim_start).filter(|l| !l.starts_with("//"));
    if code.any(|l| l.starts_with("extern \"C\"") || l.contains("__grid_constant__")) {
        return Some(format!("kernel {} has an entry of its own (extern \"C\", tensor maps)", kernel.name));
    }
    if kernel.defines.iter().any(|d| define_parts(d).is_none()) {
        return Some(format!("kernel {} has a define that is not -DNAME or -DNAME=VALUE", kernel.name));
    }
    None
}

/// `-DNAME=VALUE` as (NAME, VALUE); `-DNAME` as (NAME, "1"); `None` for anything else (NAME a C identifier).
pub fn define_parts(define: &str) -> Option<(&str, &str)> {
    let body = define.strip_prefix("-D")?;
    let (name, value) = body.split_once('=').unwrap_or((body, "1"));
    is_c_identifier(name).then_some((name, value))
}

/// Whether `s` is a C identifier (a letter or `_`, then letters, digits and `_`).
pub fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// The names a source `#define`s (whatever branch of its `#if`s they sit in).
fn defined_macros(source: &str) -> BTreeSet<&str> {
    source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .filter_map(|l| l.trim_start().strip_prefix("define"))
        .filter_map(|l| {
            let l = l.trim_start();
            let end = l.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(l.len());
            (end > 0).then(|| &l[..end])
        })
        .collect()
}

/// The step kernel ([`ONE_LAUNCH_ENTRY`], `threads` a block) over `kernels` (task kernel k is case k of its
/// dispatch, [`ONE_LAUNCH_FILL`] and [`ONE_LAUNCH_COPY`] the recorded memsets and copies); an error names a kernel that cannot be a task ([`task_refusal`]).
pub fn one_launch_source(kernels: &[TaskKernel<'_>], threads: u32) -> Result<String, String> {
    if let Some(why) = kernels.iter().find_map(task_refusal) {
        return Err(why);
    }
    let mut s = String::new();
    let _ = writeln!(s, "// fuse one-launch step: {} kernels as tasks, {threads} threads a block", kernels.len());
    let _ = writeln!(s, "#define FUSE_STEP_THREADS {threads}");
    let _ = writeln!(s, "#define FUSE_STEP_NAME {ONE_LAUNCH_ENTRY}");
    s.push_str(ONE_LAUNCH_MACHINERY);
    for (k, kernel) in kernels.iter().enumerate() {
        let _ = writeln!(s, "\n// ---- task kernel {k}: {}", kernel.name);
        let mut undefine: BTreeSet<&str> = defined_macros(kernel.source);
        for define in kernel.defines {
            let (name, value) = define_parts(define).expect("checked by task_refusal");
            let _ = writeln!(s, "#define {name} {value}");
            undefine.insert(name);
        }
        let _ = writeln!(s, "namespace fuse_task_k{k} {{");
        s.push_str(kernel.source);
        let _ = writeln!(s, "\n}}  // namespace fuse_task_k{k}");
        for name in undefine {
            let _ = writeln!(s, "#undef {name}");
        }
    }
    s.push('\n');
    s.push_str(ONE_LAUNCH_MACHINERY);
    // The dispatches: a switch over the task kernels, a case each (`case(k, name)`), then the others.
    let mut dispatch = |head: &str, case: &dyn Fn(usize, &str) -> String, others: &str| {
        s.push_str(head);
        for (k, kernel) in kernels.iter().enumerate() {
            let _ = writeln!(s, "    case {k}: {}", case(k, kernel.name));
        }
        s.push_str(others);
    };
    dispatch(
        "\n__device__ __forceinline__ void fuse_step_run(unsigned kernel, const void* params) {\n  switch (kernel) {\n",
        &|k, name| format!("FUSE_TASK_CALL(fuse_task_k{k}, {name}, params); break;"),
        "    case FUSE_STEP_FILL: fuse_step_fill((const unsigned long long*)params); break;\n    case FUSE_STEP_COPY: fuse_step_copy((const unsigned long long*)params); break;\n    default: __trap();\n  }\n}\n",
    );
    dispatch(
        "__device__ __forceinline__ void fuse_step_prefetch(unsigned kernel, const void* params, unsigned block, unsigned blocks) {\n  switch (kernel) {\n",
        &|k, name| format!("FUSE_TASK_PREFETCH(fuse_task_k{k}, {name}, params, block, blocks); break;"),
        "    default: break;\n  }\n}\n",
    );
    dispatch(
        "__device__ __forceinline__ FuseStepPreload fuse_step_preload(unsigned kernel, const void* params, unsigned block,\n    unsigned blocks, unsigned from, unsigned limit) {\n  switch (kernel) {\n",
        &|k, name| format!("return FUSE_TASK_PRELOAD(fuse_task_k{k}, {name}, params, block, blocks, from, limit);"),
        "    default: return {0u, 0u};\n  }\n}\n",
    );
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kernel_sits_in_its_namespace_and_leaves_no_macro_behind() {
        let a = "// a\n#define FUSE_PRELUDE_ONCE\nFUSE_KERNEL(256) ka(FUSE_KERNEL_PARAM(FuseArgs) args) {}\n";
        let b = "  #  define FUSE_X(y) y\nFUSE_KERNEL(128) kb(FUSE_KERNEL_PARAM(FuseArgs) args) {}\n";
        let defines = vec!["-DFUSE_IN0=2".to_string(), "-DFUSE_VEC".to_string()];
        let kernels = [
            TaskKernel { name: "ka", source: a, defines: &defines },
            TaskKernel { name: "kb", source: b, defines: &[] },
        ];
        let s = one_launch_source(&kernels, 256).unwrap();
        assert_eq!(s, one_launch_source(&kernels, 256).unwrap(), "deterministic");
        let k0 = s.find("namespace fuse_task_k0 {").unwrap();
        assert!(s[..k0].ends_with("#define FUSE_IN0 2\n#define FUSE_VEC 1\n"), "{}", &s[..k0]);
        let after0 = &s[s.find("}  // namespace fuse_task_k0").unwrap()..];
        for name in ["FUSE_IN0", "FUSE_VEC", "FUSE_PRELUDE_ONCE"] {
            assert!(after0.contains(&format!("#undef {name}\n")), "{name}");
        }
        assert!(s[s.find("}  // namespace fuse_task_k1").unwrap()..].contains("#undef FUSE_X\n"));
        assert!(s.contains("case 1: FUSE_TASK_CALL(fuse_task_k1, kb, params); break;"));
        // The recorded memsets and copies, by the ids the runtime gives them.
        assert!(
            s.contains("case FUSE_STEP_FILL: fuse_step_fill(") && s.contains("case FUSE_STEP_COPY: fuse_step_copy(")
        );
        assert!(ONE_LAUNCH_MACHINERY.contains(&format!("#define FUSE_STEP_FILL {ONE_LAUNCH_FILL:#x}u")));
        assert!(ONE_LAUNCH_MACHINERY.contains(&format!("#define FUSE_STEP_COPY {ONE_LAUNCH_COPY:#x}u")));
        assert_eq!(s.matches(ONE_LAUNCH_MACHINERY).count(), 2);
    }

    #[test]
    fn the_packed_records_are_the_structs_the_kernel_declares() {
        // The field order the words assume, as the machinery declares it.
        let declared = |fields: &[&str]| {
            let at: Vec<usize> = fields.iter().map(|f| ONE_LAUNCH_MACHINERY.find(f).expect(f)).collect();
            assert!(at.windows(2).all(|w| w[0] < w[1]), "{fields:?} out of order");
        };
        declared(&[
            "struct FuseStepLaunch {",
            "unsigned long long params;",
            "unsigned kernel;",
            "unsigned grid;",
            "unsigned threads;",
            "unsigned overlap;",
            "unsigned param_words;",
            "unsigned shared;",
            "struct FuseStepArgs {",
        ]);
        declared(&[
            "struct FuseStepArgs {",
            "const FuseStepLaunch* launches;",
            "const unsigned long long* tasks;",
            "const unsigned* first;",
            "unsigned long long* counters;",
            "unsigned long long launch_count;",
            "unsigned long long* trace;",
        ]);
        let r = StepLaunchRecord {
            params: 0x1000,
            kernel: 3,
            grid: 7,
            threads: 128,
            overlap: true,
            param_words: 9,
            shared_bytes: 4096,
        };
        assert_eq!(r.words(), [0x1000, 3 | 7 << 32, 128 | 1 << 32, 9 | 4096 << 32]);
        assert_eq!(step_argument_words(1, 2, 3, 4, 5, 6), [1, 2, 3, 4, 5, 6]);
        assert!(ONE_LAUNCH_MACHINERY.contains(&format!("#define FUSE_STEP_TRACE_STAMPS {ONE_LAUNCH_TRACE_STAMPS}")));
    }

    #[test]
    fn a_kernel_with_an_entry_of_its_own_is_refused_by_name() {
        let own = "extern \"C\" __global__ void k() {}\nFUSE_KERNEL(256) k2(FUSE_KERNEL_PARAM(A) a) {}\n";
        let err = one_launch_source(&[TaskKernel { name: "k", source: own, defines: &[] }], 256).unwrap_err();
        assert!(err.contains("kernel k has an entry of its own"), "{err}");
        let plain = "__global__ void k() {}";
        let err = one_launch_source(&[TaskKernel { name: "k", source: plain, defines: &[] }], 256).unwrap_err();
        assert!(err.contains("FUSE_KERNEL"), "{err}");
        let bad = ["-DA B".to_string()];
        let ok = "\nFUSE_KERNEL(256) k(FUSE_KERNEL_PARAM(A) a) {}";
        let err = one_launch_source(&[TaskKernel { name: "k", source: ok, defines: &bad }], 256).unwrap_err();
        assert!(err.contains("define"), "{err}");
    }
}
