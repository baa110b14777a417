//! `FUSE_HOST_PROFILE=1`: where the host time of a fused call goes, phase by phase (issue 15's host-time
//! goal), for `bench_decode` to print. Each phase is the wall time from the end of the one before it, summed
//! over calls in process-wide counters; [`take`] reads and resets them. Off (the default), every hook is
//! one load of a cached bool.
//!
//! A call's phases run from [`FusedFn::call`](crate::FusedFn::call) entering to it returning; hooks outside
//! a call (eager ops) record nothing, and a fused call made inside another ends the outer one's phases.

use crate::env;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A phase of a call, in the order a replayed call passes them.
#[derive(Clone, Copy)]
pub(crate) enum Phase {
    /// `FusedFn`: the graph and plan cells, the arguments' number and kinds, FUSE_DEBUG checks.
    Args,
    /// The dispatcher and executor before the launch plan lookup: devices, the capture guard, the
    /// context, the kernel cell, in-place writes, whether the call may replay.
    Enter,
    /// The launch plans' lock and the signature comparison.
    Find,
    /// Filling the address table with the arguments' checked addresses.
    Inputs,
    /// Allocating the outputs (the buffer cache) and wrapping them as tensors.
    Outputs,
    /// Step `k` of a replay: its words patched and its launch (or cuBLAS call) queued; past the last
    /// counter, steps add to it.
    Step(usize),
    /// From the last step to the call's return: the outputs in order, guards and arguments dropped; on a
    /// call that does not replay, the whole general path.
    Exit,
}

const STEPS: usize = 6;
const PHASES: usize = 6 + STEPS;
/// Freeing a dropped tensor's buffer into the buffer cache (`CudaDevice::release`), wherever it happens.
const RELEASE: usize = PHASES;

static NANOS: [AtomicU64; PHASES + 1] = [const { AtomicU64::new(0) }; PHASES + 1];
static CALLS: AtomicU64 = AtomicU64::new(0);
static RELEASES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// When the current call's last phase ended (`None` outside a call).
    static MARK: Cell<Option<Instant>> = const { Cell::new(None) };
}

impl Phase {
    fn index(self) -> usize {
        match self {
            Phase::Args => 0,
            Phase::Enter => 1,
            Phase::Find => 2,
            Phase::Inputs => 3,
            Phase::Outputs => 4,
            Phase::Exit => 5,
            Phase::Step(k) => 6 + k.min(STEPS - 1),
        }
    }
}

fn add(index: usize, since: Instant, now: Instant) {
    NANOS[index].fetch_add((now - since).as_nanos() as u64, Ordering::Relaxed);
}

/// A fused call starts.
pub(crate) fn begin() {
    if env::host_profile() {
        MARK.with(|m| m.set(Some(Instant::now())));
    }
}

/// `phase` ends now (within a call).
pub(crate) fn lap(phase: Phase) {
    if !env::host_profile() {
        return;
    }
    MARK.with(|m| {
        if let Some(since) = m.get() {
            let now = Instant::now();
            add(phase.index(), since, now);
            m.set(Some(now));
        }
    });
}

/// The call returns (its last phase is [`Phase::Exit`]).
pub(crate) fn end() {
    if !env::host_profile() {
        return;
    }
    MARK.with(|m| {
        if let Some(since) = m.take() {
            add(Phase::Exit.index(), since, Instant::now());
            CALLS.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// When profiling, the time of `release` goes to the release counter.
pub(crate) fn time_release<T>(release: impl FnOnce() -> T) -> T {
    if !env::host_profile() {
        return release();
    }
    let start = Instant::now();
    let out = release();
    add(RELEASE, start, Instant::now());
    RELEASES.fetch_add(1, Ordering::Relaxed);
    out
}

/// The host time of the fused calls since the last [`take`], by phase.
#[derive(Clone, Debug)]
pub struct HostProfile {
    /// Fused calls counted.
    pub calls: u64,
    /// Per phase, its name and nanoseconds summed over the calls, in call order (steps without time left
    /// out), then `release`: freeing dropped tensors' buffers, in or out of a call.
    pub phases: Vec<(&'static str, u64)>,
    /// Buffers released.
    pub releases: u64,
}

impl HostProfile {
    /// Each phase in microseconds per call.
    pub fn us_per_call(&self) -> Vec<(&'static str, f64)> {
        let calls = self.calls.max(1) as f64;
        self.phases.iter().map(|&(name, ns)| (name, ns as f64 / 1e3 / calls)).collect()
    }
}

const NAMES: [&str; PHASES + 1] = [
    "args", "enter", "find", "inputs", "outputs", "exit", "step 1", "step 2", "step 3", "step 4", "step 5", "steps 6+",
    "release",
];

/// The counters since the last call (then zeroed), in call order; `None` unless `FUSE_HOST_PROFILE=1`.
pub fn take() -> Option<HostProfile> {
    if !env::host_profile() {
        return None;
    }
    let ns: Vec<u64> = NANOS.iter().map(|n| n.swap(0, Ordering::Relaxed)).collect();
    Some(report(&ns, CALLS.swap(0, Ordering::Relaxed), RELEASES.swap(0, Ordering::Relaxed)))
}

/// The counters `ns` (indexed as [`NAMES`]) in call order: the fixed phases, the steps that took time,
/// then exit and release.
fn report(ns: &[u64], calls: u64, releases: u64) -> HostProfile {
    let steps = (Phase::Step(0).index()..PHASES).filter(|&i| ns[i] > 0);
    let order = (0..Phase::Exit.index()).chain(steps).chain([Phase::Exit.index(), RELEASE]);
    HostProfile { calls, phases: order.map(|i| (NAMES[i], ns[i])).collect(), releases }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_name_their_counters_in_call_order() {
        assert_eq!(NAMES[Phase::Step(0).index()], "step 1");
        assert_eq!(NAMES[Phase::Step(99).index()], "steps 6+");
        assert_eq!(NAMES[Phase::Exit.index()], "exit");
        let mut ns = [0u64; PHASES + 1];
        for (i, n) in ns.iter_mut().enumerate() {
            *n = 1000 * i as u64;
        }
        ns[Phase::Step(1).index()] = 0;
        let profile = report(&ns, 4, 2);
        let names: Vec<&str> = profile.phases.iter().map(|p| p.0).collect();
        assert_eq!(
            names,
            [
                "args", "enter", "find", "inputs", "outputs", "step 1", "step 3", "step 4", "step 5", "steps 6+",
                "exit", "release"
            ]
        );
        assert_eq!(profile.us_per_call()[1], ("enter", 0.25));
    }
}
