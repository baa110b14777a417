//! A persistent kernel's schedule (issue 33): the tasks each resident block runs in order, the hand-offs
//! between them, and the global memory they read and write; checked before anything launches
//! ([`Schedule::check`]).
//!
//! The blocks of a persistent kernel wait on one another, so a schedule that waits for a signal nobody
//! gives, that overwrites a buffer while a reader may still need it, or that does not fit the device (its
//! blocks must all be resident at once) hangs or computes garbage with no error. The checker finds each of
//! these from the description alone and names the edge:
//! - every wait can be met: its hand-off's signallers add up to the amount it waits for;
//! - the schedule cannot deadlock: running each block's tasks in order, taking any task whose waits are met,
//!   finishes every task (this also catches a block that waits for a signal it gives itself later);
//! - no two tasks touch the same bytes of a buffer, one of them writing, unless one happens before the other
//!   (by a block's order, or a wait that needs every signaller of its hand-off): a read of data not yet
//!   written, an overwrite before a reader is done, and two unordered writes are all refused;
//! - it fits: at most the device's blocks, clusters that divide them, each block's shared memory within the
//!   limit, and hand-offs through shared memory only between blocks of one cluster.
//!
//! [`build`] makes a schedule and the memory layout it runs in from one description of a step's stages
//! (`build.rs`: tiles, tile-granular waits through L2 counters or a cluster's shared memory, the arena's
//! reuse), [`step_from_plan`] that description from a function's plan, and [`residency`] decides where the
//! weights live (all held, a layer at a time, or streamed through a ring) from the shapes and the device.
//! [`launch_chain`] is the schedule of a recorded chain of launches run as one persistent kernel (the
//! one-launch step that runs today; `launches.rs`). The hand-written one-launch step (`docs/persistent-step.md`) is the shape it must reach:
//! layers on clusters, hand-offs through distributed shared memory inside a cluster and through tagged words
//! in L2 between clusters.

mod build;
mod check;
mod from_plan;
mod launches;
mod residency;

pub use build::{build, build_placed, layout, Layout, Placement, Reads, Stage, Step};
pub use check::ScheduleError;
pub use from_plan::step_from_plan;
pub use launches::{launch_chain, ChainLaunch};
pub use residency::{residency, Residency};

/// How a hand-off's signal travels, which decides where its signallers and waiters may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandoffKind {
    /// A counter (or tagged words) in global memory, through L2: any block may signal and wait.
    Global,
    /// An mbarrier in the shared memory of block `owner`, completed by stores from blocks of its cluster
    /// (distributed shared memory); only `owner` waits on it.
    Shared { owner: usize },
}

/// One hand-off: signallers add their amounts (1 for a counter's increment, bytes for an mbarrier's
/// transaction count); a wait is met once the sum reaches its amount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handoff {
    pub name: String,
    pub kind: HandoffKind,
}

/// A byte range of a global buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub buffer: usize,
    pub start: usize,
    pub end: usize,
}

/// One task: a tile of a group, run by block `block` at its place in that block's list (tasks of a block
/// run in the order they are listed in [`Schedule::tasks`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Task {
    pub name: String,
    pub block: usize,
    /// (hand-off, amount): the task starts once each of these hand-offs has received at least the amount.
    pub waits: Vec<(usize, u64)>,
    /// (hand-off, amount) given when the task is done.
    pub signals: Vec<(usize, u64)>,
    pub reads: Vec<Access>,
    pub writes: Vec<Access>,
    /// Bytes of weights (read-only, the same every step) this task reads: where they live is
    /// [`residency`]'s decision.
    pub weight_bytes: usize,
}

/// What the device offers a persistent kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Blocks that can be resident at once with this kernel's resources (one a multiprocessor, say).
    pub resident_blocks: usize,
    /// Shared memory a block may use, in bytes.
    pub shared_bytes: usize,
    /// The largest thread-block cluster.
    pub max_cluster: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Blocks of the launch, all resident at once.
    pub blocks: usize,
    /// Blocks a cluster (1: none); block b is in cluster b / cluster.
    pub cluster: usize,
    /// Shared memory each block uses, in bytes.
    pub shared_bytes: usize,
    /// Global buffers by name and size in bytes.
    pub buffers: Vec<(String, usize)>,
    pub handoffs: Vec<Handoff>,
    pub tasks: Vec<Task>,
}

impl Schedule {
    /// Adds a buffer of `bytes` and returns its index.
    pub fn buffer(&mut self, name: &str, bytes: usize) -> usize {
        self.buffers.push((name.to_string(), bytes));
        self.buffers.len() - 1
    }

    /// Adds a hand-off and returns its index.
    pub fn handoff(&mut self, name: &str, kind: HandoffKind) -> usize {
        self.handoffs.push(Handoff { name: name.to_string(), kind });
        self.handoffs.len() - 1
    }

    /// Adds a task and returns its index.
    pub fn task(&mut self, task: Task) -> usize {
        self.tasks.push(task);
        self.tasks.len() - 1
    }

    /// Checks the schedule against `limits` (see the module's list); the first problem found, naming the
    /// tasks, hand-off or buffer involved.
    pub fn check(&self, limits: &DeviceLimits) -> Result<(), ScheduleError> {
        check::check(self, limits)
    }
}
