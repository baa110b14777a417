//! [`Schedule::check`]: fit, references, placement of shared-memory hand-offs, waits that can be met, no
//! deadlock (the blocks run in order, taking any task whose waits are met), and no race on global memory
//! (happens-before from each block's order and from waits that need a signaller, as vector clocks: one
//! entry a block).

use super::{DeviceLimits, HandoffKind, Schedule};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleError {
    /// The schedule does not fit the device (blocks, clusters, shared memory).
    Fit(String),
    /// A task names a block, hand-off or buffer that does not exist, or bytes past a buffer's end.
    Malformed(String),
    /// A hand-off through a block's shared memory signalled from another cluster, or waited on by a block
    /// other than its owner.
    Placement(String),
    /// A wait for more than every signaller of its hand-off gives together.
    Unmet { task: String, handoff: String, waits: u64, given: u64 },
    /// Tasks that can never start: `task` (the first of them) waits for `waits` of `handoff`, which has
    /// received `given` when nothing else can run.
    Deadlock { task: String, handoff: String, waits: u64, given: u64 },
    /// Two tasks touch bytes `start..end` of `buffer`, `first` writing (or both), and neither happens
    /// before the other.
    Race { first: String, second: String, buffer: String, start: usize, end: usize, second_writes: bool },
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::Fit(m) | ScheduleError::Malformed(m) | ScheduleError::Placement(m) => f.write_str(m),
            ScheduleError::Unmet { task, handoff, waits, given } => write!(
                f,
                "task `{task}` waits for {waits} of hand-off `{handoff}`, but all its signallers give {given}"
            ),
            ScheduleError::Deadlock { task, handoff, waits, given } => write!(
                f,
                "deadlock: task `{task}` waits for {waits} of hand-off `{handoff}`, which has {given} when no other \
                 task can run (a signaller runs after a task that waits for it)"
            ),
            ScheduleError::Race { first, second, buffer, start, end, second_writes } => {
                let access = if *second_writes { "writes" } else { "reads" };
                write!(
                    f,
                    "race on bytes {start}..{end} of `{buffer}`: `{first}` writes them and `{second}` {access} them, \
                     and neither waits for the other"
                )
            }
        }
    }
}

impl std::error::Error for ScheduleError {}

pub(super) fn check(s: &Schedule, limits: &DeviceLimits) -> Result<(), ScheduleError> {
    fits(s, limits)?;
    references(s)?;
    placement(s)?;
    let given = given(s);
    for t in &s.tasks {
        for &(h, waits) in &t.waits {
            if waits > given[h] {
                let (task, handoff) = (t.name.clone(), s.handoffs[h].name.clone());
                return Err(ScheduleError::Unmet { task, handoff, waits, given: given[h] });
            }
        }
    }
    let order = run_order(s)?;
    races(s, &order, &given)
}

fn fits(s: &Schedule, limits: &DeviceLimits) -> Result<(), ScheduleError> {
    let fit = |m: String| Err(ScheduleError::Fit(m));
    if s.blocks == 0 || s.blocks > limits.resident_blocks {
        return fit(format!(
            "the schedule has {} blocks; the device holds {} at once with this kernel's resources (all must be \
             resident: they wait on each other)",
            s.blocks, limits.resident_blocks
        ));
    }
    if s.cluster == 0 || s.cluster > limits.max_cluster || s.blocks % s.cluster != 0 {
        return fit(format!(
            "clusters of {} blocks: a cluster must hold 1 to {} blocks and divide the {} blocks",
            s.cluster, limits.max_cluster, s.blocks
        ));
    }
    if s.shared_bytes > limits.shared_bytes {
        return fit(format!(
            "each block uses {} bytes of shared memory; the device allows {}",
            s.shared_bytes, limits.shared_bytes
        ));
    }
    Ok(())
}

fn references(s: &Schedule) -> Result<(), ScheduleError> {
    let bad = |m: String| Err(ScheduleError::Malformed(m));
    for t in &s.tasks {
        if t.block >= s.blocks {
            return bad(format!("task `{}` runs on block {} of {}", t.name, t.block, s.blocks));
        }
        if let Some(&(h, _)) = t.waits.iter().chain(&t.signals).find(|(h, _)| *h >= s.handoffs.len()) {
            return bad(format!("task `{}` names hand-off {h} of {}", t.name, s.handoffs.len()));
        }
        for a in t.reads.iter().chain(&t.writes) {
            match s.buffers.get(a.buffer) {
                Some((name, bytes)) if a.start <= a.end && a.end > *bytes => {
                    return bad(format!(
                        "task `{}` touches bytes {}..{} of `{name}`, which holds {bytes}",
                        t.name, a.start, a.end
                    ))
                }
                Some(_) if a.start <= a.end => {}
                _ => return bad(format!("task `{}` names buffer {} (or an empty range)", t.name, a.buffer)),
            }
        }
    }
    Ok(())
}

fn placement(s: &Schedule) -> Result<(), ScheduleError> {
    for t in &s.tasks {
        for &(h, _) in &t.signals {
            if let HandoffKind::Shared { owner } = s.handoffs[h].kind {
                if owner >= s.blocks || owner / s.cluster != t.block / s.cluster {
                    return Err(ScheduleError::Placement(format!(
                        "task `{}` (block {}, cluster {}) signals `{}` through the shared memory of block {owner} \
                         (cluster {}): distributed shared memory reaches only the blocks of one cluster",
                        t.name,
                        t.block,
                        t.block / s.cluster,
                        s.handoffs[h].name,
                        owner / s.cluster
                    )));
                }
            }
        }
        for &(h, _) in &t.waits {
            if let HandoffKind::Shared { owner } = s.handoffs[h].kind {
                if owner != t.block {
                    return Err(ScheduleError::Placement(format!(
                        "task `{}` (block {}) waits on `{}`, an mbarrier in the shared memory of block {owner}: only \
                         its owner waits on it",
                        t.name, t.block, s.handoffs[h].name
                    )));
                }
            }
        }
    }
    Ok(())
}

/// What every signaller of each hand-off gives together.
fn given(s: &Schedule) -> Vec<u64> {
    let mut given = vec![0u64; s.handoffs.len()];
    for t in &s.tasks {
        for &(h, amount) in &t.signals {
            given[h] = given[h].saturating_add(amount);
        }
    }
    given
}

/// The tasks in an order the blocks can run them (each block's own order kept, a task taken once its waits
/// are met), or the deadlock.
fn run_order(s: &Schedule) -> Result<Vec<usize>, ScheduleError> {
    let mut queues: Vec<Vec<usize>> = vec![Vec::new(); s.blocks];
    for (i, t) in s.tasks.iter().enumerate() {
        queues[t.block].push(i);
    }
    let mut next = vec![0usize; s.blocks];
    let mut received = vec![0u64; s.handoffs.len()];
    let mut order = Vec::with_capacity(s.tasks.len());
    loop {
        let mut progress = false;
        for b in 0..s.blocks {
            while let Some(&i) = queues[b].get(next[b]) {
                if s.tasks[i].waits.iter().any(|&(h, amount)| received[h] < amount) {
                    break;
                }
                for &(h, amount) in &s.tasks[i].signals {
                    received[h] = received[h].saturating_add(amount);
                }
                order.push(i);
                next[b] += 1;
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    if order.len() == s.tasks.len() {
        return Ok(order);
    }
    // The first stuck task (in the schedule's own order) and the wait that holds it.
    let stuck = (0..s.blocks).filter_map(|b| queues[b].get(next[b]).copied()).min().expect("a block is stuck");
    let t = &s.tasks[stuck];
    let &(h, waits) = t.waits.iter().find(|&&(h, amount)| received[h] < amount).expect("a wait holds it");
    Err(ScheduleError::Deadlock {
        task: t.name.clone(),
        handoff: s.handoffs[h].name.clone(),
        waits,
        given: received[h],
    })
}

/// Vector clocks in run order: `clock[t][b]` = how many of block b's tasks happen before or at task t. A
/// task follows the task before it on its block, and every signaller its waits cannot do without (the others'
/// signals together fall short of the wait).
fn races(s: &Schedule, order: &[usize], given: &[u64]) -> Result<(), ScheduleError> {
    let mut position = vec![0usize; s.tasks.len()];
    let mut count = vec![0usize; s.blocks];
    for (i, t) in s.tasks.iter().enumerate() {
        count[t.block] += 1;
        position[i] = count[t.block];
    }
    let mut signallers: Vec<Vec<(usize, u64)>> = vec![Vec::new(); s.handoffs.len()];
    for (i, t) in s.tasks.iter().enumerate() {
        for &(h, amount) in &t.signals {
            signallers[h].push((i, amount));
        }
    }
    let mut clock: Vec<Vec<usize>> = vec![Vec::new(); s.tasks.len()];
    let mut last_on_block: Vec<Option<usize>> = vec![None; s.blocks];
    for &i in order {
        let t = &s.tasks[i];
        let mut c = match last_on_block[t.block] {
            Some(p) => clock[p].clone(),
            None => vec![0; s.blocks],
        };
        for &(h, waits) in &t.waits {
            for &(j, amount) in &signallers[h] {
                if given[h] - amount < waits {
                    for (mine, theirs) in c.iter_mut().zip(&clock[j]) {
                        *mine = (*mine).max(*theirs);
                    }
                }
            }
        }
        c[t.block] = position[i];
        clock[i] = c;
        last_on_block[t.block] = Some(i);
    }
    let before = |a: usize, b: usize| clock[b][s.tasks[a].block] >= position[a];
    // Every access by buffer and start; each compared with those that start before it ends.
    let mut accesses: Vec<(usize, usize, usize, usize, bool)> = Vec::new();
    for (i, t) in s.tasks.iter().enumerate() {
        accesses.extend(t.reads.iter().map(|a| (a.buffer, a.start, a.end, i, false)));
        accesses.extend(t.writes.iter().map(|a| (a.buffer, a.start, a.end, i, true)));
    }
    accesses.sort_unstable();
    for (k, &(buffer, start, end, i, writes)) in accesses.iter().enumerate() {
        if start == end {
            continue;
        }
        for &(other_buffer, other_start, other_end, j, other_writes) in &accesses[k + 1..] {
            if other_buffer != buffer || other_start >= end {
                break;
            }
            if i == j || !(writes || other_writes) || before(i, j) || before(j, i) || other_start == other_end {
                continue;
            }
            let (writer, other, second_writes) = if writes { (i, j, other_writes) } else { (j, i, false) };
            return Err(ScheduleError::Race {
                first: s.tasks[writer].name.clone(),
                second: s.tasks[other].name.clone(),
                buffer: s.buffers[buffer].0.clone(),
                start: start.max(other_start),
                end: end.min(other_end),
                second_writes,
            });
        }
    }
    Ok(())
}
