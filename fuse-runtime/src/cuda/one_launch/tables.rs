//! The tables a persistent step kernel reads (`FuseStepArgs` in fuse-ir's `cuda/one_launch.cuh`): each
//! recorded launch's argument words, one record a launch (`FuseStepLaunch`, packed by fuse-ir beside the
//! struct it declares), every block's task list, and the launches' counters.

use super::super::custom_kernel::DeviceBuffer;
use super::super::device::CudaDevice;
use super::TaskOp;
use crate::{Error, Result};
use fuse_ir::codegen::{step_argument_words, StepLaunchRecord, ONE_LAUNCH_TRACE_STAMPS};
use fuse_ir::schedule::{launch_chain, ChainLaunch, DeviceLimits};

/// Words of `FuseStepArgs` (`fuse_ir::codegen::step_argument_words`).
pub(super) const ARGUMENT_WORDS: usize = 6;

pub(crate) struct StepTables {
    /// Every launch's argument words, each at a 16-byte boundary.
    _params: DeviceBuffer<u64>,
    launches: DeviceBuffer<u64>,
    tasks: DeviceBuffer<u64>,
    first: DeviceBuffer<u32>,
    counters: DeviceBuffer<u64>,
    launch_count: usize,
    blocks: usize,
    task_kernels: usize,
    /// `FUSE_STEP_TRACE`: the tasks' times, the file they go to, and each task's launch, block and name.
    trace: Option<StepTrace>,
}

struct StepTrace {
    stamps: DeviceBuffer<u64>,
    file: String,
    tasks: Vec<(u32, u32, String)>,
}

impl StepTables {
    /// The tables of `run` (of `task_kernels` distinct kernels) on `blocks` blocks, after `fuse_ir`'s checker
    /// passed their schedule for `resident` blocks of `shared_bytes`.
    pub(super) fn build(
        device: &CudaDevice,
        run: &[TaskOp],
        task_kernels: usize,
        blocks: usize,
        resident: usize,
        shared_bytes: u32,
        trace_file: Option<&str>,
    ) -> Result<StepTables> {
        let chain: Vec<ChainLaunch> =
            run.iter().map(|op| ChainLaunch { name: op.name.clone(), grid: op.grid }).collect();
        let (lists, schedule) = launch_chain(&chain, blocks, shared_bytes as usize);
        let limits = DeviceLimits { resident_blocks: resident, shared_bytes: shared_bytes as usize, max_cluster: 1 };
        schedule
            .check(&limits)
            .map_err(|e| Error::internal("one-launch step", format!("the checker refused the schedule: {e}")))?;
        let mut words: Vec<u64> = Vec::new();
        let mut offsets = Vec::with_capacity(run.len());
        for op in run {
            words.resize(words.len().next_multiple_of(2), 0);
            offsets.push(words.len());
            words.extend_from_slice(&op.words);
        }
        let params = DeviceBuffer::upload(device, &words)?;
        let records: Vec<u64> = run
            .iter()
            .zip(&offsets)
            .flat_map(|(op, offset)| {
                let params = params.address() + 8 * *offset as u64;
                StepLaunchRecord {
                    params,
                    kernel: op.kernel,
                    grid: op.grid,
                    threads: op.threads,
                    overlap: op.overlap,
                    param_words: op.words.len() as u32,
                    shared_bytes: op.shared,
                }
                .words()
            })
            .collect();
        let tasks: Vec<u64> = lists.iter().flatten().map(|&(j, b)| u64::from(j) << 32 | u64::from(b)).collect();
        let mut first = vec![0u32];
        for list in &lists {
            let next = first.last().copied().unwrap_or(0) as usize + list.len();
            first.push(u32::try_from(next).map_err(|_| Error::internal("one-launch step", "task count"))?);
        }
        let trace = match trace_file {
            Some(file) => Some(StepTrace {
                stamps: DeviceBuffer::zeros(device, tasks.len() * ONE_LAUNCH_TRACE_STAMPS)?,
                file: file.to_string(),
                tasks: lists.iter().flatten().map(|&(j, b)| (j, b, run[j as usize].name.clone())).collect(),
            }),
            None => None,
        };
        Ok(StepTables {
            trace,
            launches: DeviceBuffer::upload(device, &records)?,
            tasks: DeviceBuffer::upload(device, &tasks)?,
            first: DeviceBuffer::upload(device, &first)?,
            counters: DeviceBuffer::zeros(device, run.len() + 1)?,
            _params: params,
            launch_count: run.len(),
            blocks,
            task_kernels,
        })
    }

    /// The kernel's argument, `FuseStepArgs`.
    pub(super) fn argument_words(&self) -> [u64; ARGUMENT_WORDS] {
        step_argument_words(
            self.launches.address(),
            self.tasks.address(),
            self.first.address(),
            self.counters.address(),
            self.launch_count,
            self.trace.as_ref().map_or(0, |t| t.stamps.address()),
        )
    }

    pub(super) fn blocks(&self) -> usize {
        self.blocks
    }

    pub(super) fn task_kernels(&self) -> usize {
        self.task_kernels
    }
}

impl Drop for StepTables {
    /// `FUSE_STEP_TRACE`: the last replay's task times, appended to the file (a failure is said on stderr: a
    /// look at timing must not fail the program).
    fn drop(&mut self) {
        let Some(trace) = &self.trace else { return };
        let written = trace.stamps.read().map_err(|e| e.to_string()).and_then(|stamps| {
            use std::io::Write;
            let origin = stamps.iter().copied().filter(|&t| t != 0).min().unwrap_or(0);
            let mut text =
                String::from("launch\tblock\tname\tsetup\tbody\tgrid_wait\tbody_end\tsignalled\tmark0\tmark1\tmark2\n");
            for ((j, b, name), times) in trace.tasks.iter().zip(stamps.chunks(ONE_LAUNCH_TRACE_STAMPS)) {
                let times: Vec<String> =
                    times.iter().map(|&t| if t == 0 { "-".into() } else { (t - origin).to_string() }).collect();
                text.push_str(&format!("{j}\t{b}\t{name}\t{}\n", times.join("\t")));
            }
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&trace.file);
            file.as_mut().map_err(|e| e.to_string())?.write_all(text.as_bytes()).map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            eprintln!("fuse: FUSE_STEP_TRACE={}: {e}", trace.file);
        }
    }
}
