//! The tasks of a recorded chain of kernel launches run as one persistent kernel (the one-launch step,
//! `codegen::one_launch_source`): launch j's blocks become tasks dealt round the resident blocks, starting
//! where launch j - 1's ended, so that blocks idle during one launch take the next launch's first tasks, and
//! each block's list follows the chain's order (the no-deadlock argument of `cuda/one_launch.cuh`). The
//! schedule returned is what the checker reads before anything launches: one counter a launch, each task
//! waiting for every block of the launch before it and of the one before that (what programmatic launch lets
//! a kernel's early code rely on) and signalling its own launch's counter. Which bytes each launch reads and
//! writes is not known at this level: the chain's order, not the checker's race analysis, keeps them apart.

use super::{HandoffKind, Schedule, Task};

/// One launch of the chain: its name (for the checker's messages) and its blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainLaunch {
    pub name: String,
    pub grid: u32,
}

/// The chain's tasks on `blocks` resident blocks of `shared_bytes` each: per block, its (launch, block of the
/// launch) list in order, and the [`Schedule`] of the same tasks.
pub fn launch_chain(launches: &[ChainLaunch], blocks: usize, shared_bytes: usize) -> (Vec<Vec<(u32, u32)>>, Schedule) {
    let blocks = blocks.max(1);
    let mut lists: Vec<Vec<(u32, u32)>> = vec![Vec::new(); blocks];
    let mut s = Schedule { blocks, cluster: 1, shared_bytes, ..Schedule::default() };
    let counters: Vec<usize> = launches
        .iter()
        .enumerate()
        .map(|(j, l)| s.handoff(&format!("launch {j} ({})", l.name), HandoffKind::Global))
        .collect();
    let mut start = 0usize;
    for (j, launch) in launches.iter().enumerate() {
        let mut waits = Vec::new();
        for back in [2, 1] {
            if let Some(before) = j.checked_sub(back) {
                waits.push((counters[before], u64::from(launches[before].grid)));
            }
        }
        for b in 0..launch.grid {
            let block = (start + b as usize) % blocks;
            lists[block].push((j as u32, b));
            s.task(Task {
                name: format!("{} block {b}", launch.name),
                block,
                waits: waits.clone(),
                signals: vec![(counters[j], 1)],
                ..Task::default()
            });
        }
        start = (start + launch.grid as usize) % blocks;
    }
    (lists, s)
}
