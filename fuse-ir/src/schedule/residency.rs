//! Where a persistent step's weights live (issue 33, point 2), decided from what each block reads and the
//! device's shared memory: all of them held for good when they fit; else each block holds its share of one
//! phase (a layer, on the cluster that runs it) and loads its next phase's while the other clusters run, as
//! the hand-written step does; else they stream through a ring of chunks.

use super::{DeviceLimits, Schedule};

/// Ring slots of a streamed block: one computed on while the others load.
pub const RING_SLOTS: usize = 4;
/// The smallest ring chunk worth a bulk copy.
pub const MIN_CHUNK_BYTES: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// Every block's weights, all phases, fit beside its other shared memory: loaded once.
    AllResident,
    /// A block holds one phase's share at a time (`bytes`, the largest), loaded before the phase starts.
    OnePhase { bytes: usize },
    /// The weights stream through [`RING_SLOTS`] chunks of `chunk_bytes` a block.
    Streamed { chunk_bytes: usize },
}

/// The residency of `s`'s weights on a device with `limits`, beside `other_bytes` of shared memory a block
/// uses for everything else, and the shared memory a block then needs in all; `phase_of(task)` says which
/// phase (layer) a task belongs to. `None` when not even a ring of the smallest chunks fits.
pub fn residency(
    s: &Schedule,
    limits: &DeviceLimits,
    other_bytes: usize,
    phase_of: impl Fn(usize) -> usize,
) -> Option<(Residency, usize)> {
    let room = limits.shared_bytes.checked_sub(other_bytes)?;
    let mut total = vec![0usize; s.blocks];
    let mut per_phase: std::collections::BTreeMap<(usize, usize), usize> = Default::default();
    for (i, t) in s.tasks.iter().enumerate() {
        total[t.block] += t.weight_bytes;
        *per_phase.entry((t.block, phase_of(i))).or_default() += t.weight_bytes;
    }
    let all = total.iter().copied().max().unwrap_or(0);
    if all <= room {
        return Some((Residency::AllResident, other_bytes + all));
    }
    let phase = per_phase.values().copied().max().unwrap_or(0);
    if phase <= room {
        return Some((Residency::OnePhase { bytes: phase }, other_bytes + phase));
    }
    let chunk = room / RING_SLOTS / 16 * 16;
    (chunk >= MIN_CHUNK_BYTES).then_some((Residency::Streamed { chunk_bytes: chunk }, other_bytes + RING_SLOTS * chunk))
}
