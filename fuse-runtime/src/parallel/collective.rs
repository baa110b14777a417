//! The CPU group's sums: each rank's part, the meeting point where the last rank to arrive adds them in rank
//! order, and what tells waiting ranks that a peer has left.

use crate::{Error, Result};
use fuse_ir::DType;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

pub(super) const OP: &str = "all_reduce_sum";

/// One rank's contribution to a sum.
pub(super) struct Part {
    pub(super) shape: Vec<usize>,
    pub(super) dtype: DType,
    pub(super) values: Vec<f32>,
}

/// The CPU group's meeting point: each sum is a round; the last rank to arrive adds the parts in rank
/// order and every rank takes the result; a round starts only after every rank took the last one's.
pub(super) struct Collective {
    world: usize,
    state: Mutex<Round>,
    changed: Condvar,
}

#[derive(Default)]
struct Round {
    parts: Vec<Option<Part>>,
    /// The finished round's sum (or why it failed), until every rank has taken it.
    result: Option<std::result::Result<Arc<Vec<f32>>, String>>,
    takers_left: usize,
    /// Rounds finished so far.
    finished: u64,
    /// Ranks whose closures have ended, in the order they did (the first is the one to name: its peers
    /// that fail because of it leave after it).
    left: Vec<usize>,
}

impl Collective {
    pub(super) fn new(world: usize) -> Collective {
        let round = Round { parts: (0..world).map(|_| None).collect(), ..Round::default() };
        Collective { world, state: Mutex::new(round), changed: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, Round> {
        // A rank that panicked inside a sum leaves the state consistent (it only ever pushes its part).
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, Round>) -> MutexGuard<'a, Round> {
        self.changed.wait(guard).unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn all_reduce(&self, index: usize, part: Part) -> Result<Vec<f32>> {
        let failed = |reason: String| Error::InvalidArgument { op: OP, reason };
        let mut round = self.lock();
        // The previous round's result still being taken: wait for it to clear.
        while round.result.is_some() {
            round = self.wait(round);
        }
        round.parts[index] = Some(part);
        let arrived = round.parts.iter().filter(|p| p.is_some()).count();
        let started = round.finished;
        if arrived == self.world {
            let parts: Vec<Part> = round.parts.iter_mut().map(|p| p.take().expect("every part")).collect();
            round.result = Some(sum_in_rank_order(&parts).map(Arc::new));
            round.takers_left = self.world;
            round.finished += 1;
            self.changed.notify_all();
        } else {
            while round.finished == started {
                if let Some(&gone) = round.left.first() {
                    round.parts[index] = None;
                    return Err(failed(format!(
                        "rank {index} waits for rank {gone}, which left the group (its closure ended) without \
                         joining this sum: every rank must make the same collective calls"
                    )));
                }
                round = self.wait(round);
            }
        }
        let result = round.result.clone().expect("a finished round's result");
        round.takers_left -= 1;
        if round.takers_left == 0 {
            round.result = None;
            self.changed.notify_all();
        }
        result.map(|sum| sum.to_vec()).map_err(failed)
    }

    /// Rank `index`'s closure ended: ranks waiting for it in a round it never joined fail.
    fn leave(&self, index: usize) {
        self.lock().left.push(index);
        self.changed.notify_all();
    }
}

/// Marks its rank as gone when its thread's closure ends, however it ends.
pub(super) struct Leaves(pub(super) Arc<Collective>, pub(super) usize);

impl Drop for Leaves {
    fn drop(&mut self) {
        self.0.leave(self.1);
    }
}

/// The parts added in rank order (the same bits on every rank), or why they cannot be added.
fn sum_in_rank_order(parts: &[Part]) -> std::result::Result<Vec<f32>, String> {
    let first = &parts[0];
    if let Some((r, p)) = parts.iter().enumerate().find(|(_, p)| p.shape != first.shape || p.dtype != first.dtype) {
        return Err(format!(
            "the ranks' parts differ: rank 0 has {:?} {:?}, rank {r} {:?} {:?}",
            first.dtype, first.shape, p.dtype, p.shape
        ));
    }
    let mut sum = first.values.clone();
    for p in &parts[1..] {
        sum.iter_mut().zip(&p.values).for_each(|(s, v)| *s += v);
    }
    Ok(sum)
}
