//! A recorded step's launches as one persistent kernel (issue 33, `CudaGraph::capture_one_launch`): the
//! launches of fuse's own kernels that can be tasks (no clusters, whole warps up to 256 threads, a source
//! from the module cache written with `FUSE_KERNEL`) run, in runs of consecutive ones, as the tasks of a
//! kernel generated from their sources (`fuse_ir::codegen::one_launch_source`), on as many blocks as the GPU
//! holds at once, in the order the checker passed (`fuse_ir::schedule::launch_chain`); any other launch
//! stays a launch of its own, in its place, and the report says why.
//!
//! The tasks read each launch's argument words from a table on the device, so the step touches the same
//! memory the recorded launches did: like a CUDA graph, it is replayed, not called with new arguments.

mod tables;

use super::capture::function_name;
use super::compile::KernelOrigin;
use super::custom_kernel::{CustomKernel, KernelSource, LaunchDims};
use super::device::CudaDevice;
use super::exec::launch::launch_kernel;
use super::recorder::RecordedOp;
use crate::graph::OneLaunchReport;
use crate::{Device, Result};
use fuse_ir::codegen::{
    one_launch_source, task_refusal, TaskKernel, ONE_LAUNCH_COPY, ONE_LAUNCH_ENTRY, ONE_LAUNCH_FILL,
    ONE_LAUNCH_MAX_PARAM_WORDS, ONE_LAUNCH_MAX_TASK_THREADS, ONE_LAUNCH_SHARED_LAUNCHES,
};
use std::collections::HashMap;
use tables::StepTables;

/// Waves (blocks over the GPU's multiprocessors) of a launch run as tasks, at most.
pub(crate) const ONE_LAUNCH_MAX_WAVES: usize = 4;
/// Blocks a recorded memset or copy is spread over as tasks, at most.
const MAX_COPY_BLOCKS: usize = 64;
/// The step kernel's defines (with their value after) that put the launch table and the task arguments in
/// shared memory: dropped together where the task kernels leave them no room.
const SHARED_LAUNCHES_DEFINE: &str = "-DFUSE_STEP_LAUNCHES=";
const SHARED_PARAMS_DEFINE: &str = "-DFUSE_STEP_PARAM_WORDS=";

/// One launch of the rebuilt step, in order.
pub(crate) enum Item {
    /// A persistent kernel running a run of recorded work as tasks, with the tables its argument points to.
    Step { kernel: CustomKernel, tables: StepTables },
    /// A recorded launch, memset or copy that could not be a task, queued as it was.
    Plain(RecordedOp),
}

impl Item {
    /// Queues it on the device's stream.
    pub(crate) fn launch(&self, device: &CudaDevice) -> Result<()> {
        use cudarc::driver::result::{memcpy_dtod_async, memset_d8_async};
        let stream = device.stream().cu_stream();
        let driver = |what: &'static str| move |e| super::driver::driver_error(what, e);
        match self {
            Item::Step { kernel, tables } => {
                let mut words = tables.argument_words();
                // SAFETY: the words are `FuseStepArgs` over tables this item owns; the tasks' own words are the
                // recorded work's, whose memory the caller keeps (the recorded graph and its arena).
                unsafe { kernel.launch(&mut words) }
            }
            Item::Plain(RecordedOp::Kernel(l)) => {
                launch_kernel(device, &l.name, &l.function, l.dims, &mut l.words.clone())
            }
            // SAFETY: the ranges were live allocations when recorded and stay so (the recorded graph keeps them).
            Item::Plain(RecordedOp::Fill { address, bytes, value }) => {
                unsafe { memset_d8_async(*address, *value, *bytes, stream) }.map_err(driver("memset"))
            }
            Item::Plain(RecordedOp::Copy { from, to, bytes }) => {
                unsafe { memcpy_dtod_async(*to, *from, *bytes, stream) }.map_err(driver("device copy"))
            }
        }
    }
}

/// A piece of recorded work as the tasks of a persistent kernel: its dispatch case, blocks, threads a block,
/// whether it waits for the work before inside (`fuse_grid_wait`), and its argument words.
pub(crate) struct TaskOp {
    pub name: String,
    pub kernel: u32,
    pub grid: u32,
    pub threads: u32,
    pub overlap: bool,
    pub words: Vec<u64>,
    /// Its bytes of dynamic shared memory (0 for memsets and copies).
    pub shared: u32,
}

/// Why a recorded op cannot be a task (`Err`), or the origin of its kernel (`Ok(None)` for memsets and copies).
fn can_be_task(device: &CudaDevice, op: &RecordedOp) -> std::result::Result<Option<KernelOrigin>, String> {
    let RecordedOp::Kernel(l) = op else { return Ok(None) };
    if l.dims.cluster > 1 {
        return Err(format!("{}: runs in clusters of {}", l.name, l.dims.cluster));
    }
    if l.dims.block > ONE_LAUNCH_MAX_TASK_THREADS || l.dims.block % 32 != 0 {
        return Err(format!(
            "{}: {} threads a block (tasks take whole warps, at most {ONE_LAUNCH_MAX_TASK_THREADS})",
            l.name, l.dims.block
        ));
    }
    // A step kernel holds about a block a multiprocessor, running its tasks one after another; a launch of
    // many waves (a wide product's thousands of column tiles) runs them several a multiprocessor at once as a
    // launch of its own (measured on an H100: 3,072 tiles took 117 us as tasks, 23 deep a block).
    let waves = (l.dims.grid as usize).div_ceil(device.sm_count().max(1));
    if waves > ONE_LAUNCH_MAX_WAVES {
        return Err(format!(
            "{}: {} blocks, {waves} waves of the GPU's multiprocessors (tasks: at most {ONE_LAUNCH_MAX_WAVES})",
            l.name, l.dims.grid
        ));
    }
    let origin = device.kernel_origin(&l.function).ok_or_else(|| format!("{}: not a kernel fuse compiled", l.name))?;
    let task = TaskKernel { name: &origin.name, source: &origin.source, defines: &origin.defines };
    match task_refusal(&task) {
        Some(why) => Err(why),
        None => Ok(Some(origin)),
    }
}

/// The recorded work as the items of a rebuilt step, and its report.
pub(crate) fn build(device: &CudaDevice, ops: Vec<RecordedOp>) -> Result<(Vec<Item>, OneLaunchReport)> {
    let kernels = ops.iter().filter(|op| op.is_kernel()).count();
    let mut report = OneLaunchReport { launches: kernels, ..OneLaunchReport::default() };
    let mut items = Vec::new();
    let mut run: Vec<(RecordedOp, Option<KernelOrigin>)> = Vec::new();
    for op in ops {
        match can_be_task(device, &op) {
            Ok(origin) => run.push((op, origin)),
            Err(why) => {
                flush(device, &mut run, &mut items, &mut report)?;
                report.kept.push(why);
                items.push(Item::Plain(op));
            }
        }
    }
    flush(device, &mut run, &mut items, &mut report)?;
    Ok((items, report))
}

/// Ends a run of work that can be tasks: one persistent kernel for two or more, the work itself for one.
fn flush(
    device: &CudaDevice,
    run: &mut Vec<(RecordedOp, Option<KernelOrigin>)>,
    items: &mut Vec<Item>,
    report: &mut OneLaunchReport,
) -> Result<()> {
    match run.len() {
        0 => {}
        1 => {
            let (op, _) = run.pop().expect("one");
            if let RecordedOp::Kernel(l) = &op {
                report.kept.push(format!("{}: alone between launches that cannot be tasks", l.name));
            }
            items.push(Item::Plain(op));
        }
        _ => match persistent_kernel(device, run)? {
            Ok((kernel, tables)) => {
                report.as_tasks += run.iter().filter(|(op, _)| op.is_kernel()).count();
                report.step_kernels += 1;
                report.blocks.push(tables.blocks());
                report.task_kernels.push(tables.task_kernels());
                report.local_bytes.push(kernel.local_bytes()?);
                items.push(Item::Step { kernel, tables });
                run.clear();
            }
            Err(room) => {
                // The launches that need more dynamic shared memory than the step kernel leaves beside its own
                // static shared memory (every task kernel's `__shared__` variables, each its own) stay launches,
                // and the work between them runs as steps of fewer kernels (less static memory: they fit).
                for (op, origin) in std::mem::take(run) {
                    let needs = match &op {
                        RecordedOp::Kernel(l) if l.dims.shared_bytes as usize > room => Some(format!(
                            "{}: {} bytes of dynamic shared memory, past the {room} the step kernel leaves beside its tasks' static shared memory",
                            l.name, l.dims.shared_bytes
                        )),
                        _ => None,
                    };
                    match needs {
                        Some(why) => {
                            flush(device, run, items, report)?;
                            report.kept.push(why);
                            items.push(Item::Plain(op));
                        }
                        None => run.push((op, origin)),
                    }
                }
                flush(device, run, items, report)?;
            }
        },
    }
    Ok(())
}

/// The persistent kernel of a run of recorded work, compiled, sized to the blocks the GPU holds at once, and
/// its tables after the checker passed the schedule; or (`Err`) the dynamic shared memory it leaves its
/// tasks where one of them needs more.
fn persistent_kernel(
    device: &CudaDevice,
    run: &[(RecordedOp, Option<KernelOrigin>)],
) -> Result<std::result::Result<(CustomKernel, StepTables), usize>> {
    let threads = run
        .iter()
        .filter_map(|(op, _)| match op {
            RecordedOp::Kernel(l) => Some(l.dims.block),
            _ => None,
        })
        .max()
        .unwrap_or(ONE_LAUNCH_MAX_TASK_THREADS);
    // The distinct kernels in order of first use: task kernel k is case k of the dispatch.
    let mut distinct: Vec<&KernelOrigin> = Vec::new();
    let mut ops = Vec::with_capacity(run.len());
    let mut shared_bytes = 0;
    let spread = |bytes: usize| bytes.div_ceil(threads as usize * 16).clamp(1, MAX_COPY_BLOCKS) as u32;
    for (op, origin) in run {
        ops.push(match (op, origin) {
            (RecordedOp::Kernel(l), Some(origin)) => {
                let same = |o: &&KernelOrigin| {
                    o.name == origin.name && o.defines == origin.defines && o.source == origin.source
                };
                let k = distinct.iter().position(same).unwrap_or_else(|| {
                    distinct.push(origin);
                    distinct.len() - 1
                });
                shared_bytes = shared_bytes.max(l.dims.shared_bytes);
                TaskOp {
                    name: l.name.clone(),
                    kernel: k as u32,
                    grid: l.dims.grid,
                    threads: l.dims.block,
                    overlap: l.dims.overlap,
                    words: l.words.clone(),
                    shared: l.dims.shared_bytes,
                }
            }
            (RecordedOp::Fill { address, bytes, value }, _) => TaskOp {
                name: format!("fill {bytes} bytes"),
                kernel: ONE_LAUNCH_FILL,
                grid: spread(*bytes),
                threads,
                overlap: false,
                words: vec![*address, *bytes as u64, u64::from(*value)],
                shared: 0,
            },
            (RecordedOp::Copy { from, to, bytes }, _) => TaskOp {
                name: format!("copy {bytes} bytes"),
                kernel: ONE_LAUNCH_COPY,
                grid: spread(*bytes),
                threads,
                overlap: false,
                words: vec![*from, *to, *bytes as u64],
                shared: 0,
            },
            (RecordedOp::Kernel(l), None) => {
                return Err(crate::Error::internal("one-launch step", format!("{}: no origin", l.name)))
            }
        });
    }
    let tasks: Vec<TaskKernel<'_>> =
        distinct.iter().map(|o| TaskKernel { name: &o.name, source: &o.source, defines: &o.defines }).collect();
    let source = one_launch_source(&tasks, threads)
        .map_err(|why| crate::Error::internal("one-launch step", format!("a checked kernel was refused: {why}")))?;
    // The most specific arch any task was built for (sm_90a over sm_90); the device's with none.
    let arch = distinct
        .iter()
        .map(|o| o.arch.clone())
        .max_by_key(|a| (a.ends_with('a'), a.clone()))
        .unwrap_or_else(|| device.arch().to_string());
    let trace = crate::env::step_trace_file();
    let mut kernel_source = KernelSource {
        entry: ONE_LAUNCH_ENTRY.to_string(),
        source,
        defines: match ops.len() {
            n if n <= ONE_LAUNCH_SHARED_LAUNCHES => vec![format!("{SHARED_LAUNCHES_DEFINE}{n}")],
            _ => Vec::new(),
        },
        arch,
        argument_words: tables::ARGUMENT_WORDS,
    };
    let param_words = ops.iter().map(|op| op.words.len()).max().unwrap_or(0);
    if crate::env::step_shared_params() && (1..=ONE_LAUNCH_MAX_PARAM_WORDS).contains(&param_words) {
        kernel_source.defines.push(format!("{SHARED_PARAMS_DEFINE}{param_words}"));
    }
    if trace.is_some() {
        kernel_source.defines.push("-DFUSE_STEP_TRACE".to_string());
    }
    if crate::env::step_prefetch() {
        kernel_source.defines.push("-DFUSE_STEP_PREFETCH".to_string());
    }
    if crate::env::step_inline_tasks() {
        kernel_source.defines.push("-DFUSE_STEP_INLINE_TASKS".to_string());
    }
    if crate::env::step_preload() {
        kernel_source.defines.push("-DFUSE_STEP_PRELOAD".to_string());
    }
    match crate::env::step_blocks_per_sm() {
        1 => {}
        n => kernel_source.defines.push(format!("-DFUSE_STEP_MIN_BLOCKS={n}")),
    }
    if crate::env::debug_level() >= 4 {
        eprintln!("fuse: one-launch step kernel ({} launches as tasks):\n{}", ops.len(), kernel_source.source);
    }
    let gpu = Device::Cuda(device.clone());
    let one_block = LaunchDims { grid: 1, block: threads, cluster: 1, shared_bytes: 0 };
    // The launch table and the task arguments in shared memory sit beside every task kernel's own static
    // shared memory, which may leave them no room (past the static limit, or beside the largest task's
    // dynamic shared memory): then the tasks read them from global memory.
    let shared_table = |d: &String| d.starts_with(SHARED_LAUNCHES_DEFINE) || d.starts_with(SHARED_PARAMS_DEFINE);
    let most = device.max_shared_bytes_per_block()?;
    let room_beside = |k: &CustomKernel| -> Result<usize> { Ok(most.saturating_sub(k.static_shared_bytes()?)) };
    // Compiled once: sized to one block to ask how many the GPU holds at once, then to those.
    let mut probe = CustomKernel::new(&gpu, &kernel_source, one_block);
    let crowded = match &probe {
        Ok(k) => (shared_bytes as usize) > room_beside(k)?,
        Err(_) => true,
    };
    if crowded && kernel_source.defines.iter().any(shared_table) {
        kernel_source.defines.retain(|d| !shared_table(d));
        probe = CustomKernel::new(&gpu, &kernel_source, one_block);
    }
    let probe = probe?;
    let room = room_beside(&probe)?;
    if shared_bytes as usize > room {
        return Ok(Err(room));
    }
    // Preloading: a block's next task's first copies go past what its current task uses, so a step of one
    // block a multiprocessor takes all the shared memory a block may have (with more, what its largest task
    // needs, so that as many stay resident).
    let shared_bytes = match crate::env::step_preload() && crate::env::step_blocks_per_sm() == 1 {
        true => shared_bytes.max(u32::try_from(room).unwrap_or(u32::MAX)),
        false => shared_bytes,
    };
    let probe = probe.with_shared_bytes(shared_bytes)?;
    let total: usize = ops.iter().map(|op| op.grid as usize).sum();
    let resident = probe.max_resident_clusters()? as usize;
    let blocks = resident.min(total).max(1);
    let grid = u32::try_from(blocks).map_err(|_| crate::Error::internal("one-launch step", "grid size"))?;
    let kernel = probe.with_grid(grid)?;
    kernel.require_co_resident()?;
    let tables = StepTables::build(device, &ops, distinct.len(), blocks, resident, shared_bytes, trace)?;
    Ok(Ok((kernel, tables)))
}

impl CudaDevice {
    /// Captures `step` as `capture_graph` does, recording its launches, then rebuilds it as one persistent
    /// kernel a run of launches that can be tasks (`build`). The recorded graph stays (unchanged, with the
    /// report's reason) where the step holds work that was not recorded (copies, memsets, library calls)
    /// or the persistent kernel cannot be built.
    /// `persistent` false keeps the recorded graph in every case (its report says so).
    pub(crate) fn capture_one_launch(
        &self,
        step: &mut dyn FnMut() -> Result<()>,
        persistent: bool,
    ) -> Result<(super::capture::CapturedGraph, OneLaunchReport)> {
        // Made before the capture: the decode attention's splits merge through these counters when the
        // step is recorded without clusters (the warm-up may have used clusters, which need none).
        self.zeroed_counters(0)?;
        self.recorder().start();
        let recorded = self.capture_graph(step);
        let ops = self.recorder().finish();
        let recorded = recorded?;
        let (kernels, others) = recorded.kernels_and_others()?;
        let recorded_kernels = ops.iter().filter(|op| op.is_kernel()).count();
        let stays =
            |why: String| OneLaunchReport { launches: kernels.len(), kept: vec![why], ..OneLaunchReport::default() };
        let recorded_names: Vec<String> = ops
            .iter()
            .filter_map(|op| match op {
                RecordedOp::Kernel(l) => Some(function_name(l.function.cu_function()).unwrap_or_else(|| "?".into())),
                _ => None,
            })
            .collect();
        let unrecorded = unrecorded_kernels(&kernels, &recorded_names);
        if others != ops.len() - recorded_kernels || !unrecorded.is_empty() {
            let why = format!(
                "the step stays the recorded graph: it holds {} kernels fuse did not generate (library calls: {}) and {} other nodes than its memsets and copies",
                kernels.len().saturating_sub(recorded_kernels),
                unrecorded.join(", "),
                others.saturating_sub(ops.len() - recorded_kernels)
            );
            return Ok((recorded, stays(why)));
        }
        if !persistent {
            return Ok((recorded, stays("the step stays the recorded graph, as asked".to_string())));
        }
        let (items, report) = match build(self, ops) {
            Ok(built) => built,
            Err(e) => return Ok((recorded, stays(format!("the step stays the recorded graph: {e}")))),
        };
        let rebuilt = self.capture_graph(&mut || items.iter().try_for_each(|item| item.launch(self)))?;
        Ok((rebuilt.keeping(Box::new((recorded, items))), report))
    }
}

/// The graph's kernels that were not recorded (library calls), each distinct name once with its count, in
/// the order they first come.
fn unrecorded_kernels(graph_kernels: &[String], recorded_kernels: &[String]) -> Vec<String> {
    let mut recorded: HashMap<&str, usize> = HashMap::new();
    for name in recorded_kernels {
        *recorded.entry(name).or_default() += 1;
    }
    let mut unrecorded: Vec<(&str, usize)> = Vec::new();
    for name in graph_kernels {
        match recorded.get_mut(name.as_str()) {
            Some(left) if *left > 0 => *left -= 1,
            _ => match unrecorded.iter_mut().find(|(n, _)| *n == name) {
                Some((_, count)) => *count += 1,
                None => unrecorded.push((name, 1)),
            },
        }
    }
    unrecorded.into_iter().map(|(name, count)| format!("{count} x {name}")).collect()
}

#[cfg(test)]
mod tests {
    use super::unrecorded_kernels;

    #[test]
    fn a_graphs_library_kernels_are_named_with_their_counts() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let graph = names(&["k_norm", "gemv_lib", "k_attn", "gemv_lib", "k_norm", "nvjet"]);
        // Every recorded kernel accounts for one node of its name; what is left is the library's.
        let recorded = names(&["k_norm", "k_attn", "k_norm"]);
        assert_eq!(unrecorded_kernels(&graph, &recorded), ["2 x gemv_lib", "1 x nvjet"]);
        assert!(unrecorded_kernels(&names(&["a", "b", "a"]), &names(&["a", "a", "b"])).is_empty());
        // A third node of a kernel recorded twice is not one of fuse's launches.
        assert_eq!(unrecorded_kernels(&names(&["a", "a", "a"]), &names(&["a", "a"])), ["1 x a"]);
    }
}
