//! A pool of spinning threads for the CPU backend's small parallel loops (a decode step's matrix-vector
//! products: tens of microseconds each, a few hundred a token).
//!
//! rayon's workers fall asleep on a futex after a few dozen idle rounds, and waking one (and then the caller
//! sleeping on its latch) costs tens of microseconds on a virtual machine: as much as a small product itself.
//! Here the helpers spin on one atomic word for [`spin`] after their last task, so a loop that follows another
//! within that time starts at once; then they park on a condition variable and the next loop wakes them.
//!
//! One word, `state`, holds the loop's epoch, its task count and the next task to claim: a task is claimed with
//! one compare-and-swap that also checks the loop is still the current one, so a helper that saw an old loop can
//! never run a task of a new one. The loop's closure is read only after a successful claim, and the caller
//! returns only when every claimed task has finished, so the closure outlives every use.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a helper spins after its last task before it parks: 1.5 ms, or `FUSE_CPU_SPIN_US`.
fn spin() -> Duration {
    Duration::from_micros(crate::env::cpu_spin_us().unwrap_or(1500))
}
const TASK_BITS: u32 = 20;
const TASK_MASK: u64 = (1 << TASK_BITS) - 1;
/// The most tasks one loop may have.
pub(crate) const MAX_TASKS: usize = TASK_MASK as usize;

type Task = dyn Fn(usize) + Sync;

/// A value on cache lines of its own: the word every thread claims tasks from and the count every finished
/// task bumps would otherwise share a line, and each finish would take it from the claimers and the spinners.
#[repr(align(128))]
struct OwnLines<T>(T);

impl<T> std::ops::Deref for OwnLines<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

struct Pool {
    /// epoch (24 bits) | tasks (20) | next task (20).
    state: OwnLines<AtomicU64>,
    /// The current loop's closure: written by the caller before `state` publishes the loop, read by helpers
    /// only after claiming one of its tasks.
    task: UnsafeCell<Option<*const Task>>,
    done: OwnLines<AtomicUsize>,
    /// A panic of a helper's task, re-raised in the caller.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// One caller at a time; a second one (another thread, or a task's own loop) runs its loop inline.
    caller: Mutex<()>,
    sleepers: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
    helpers: usize,
    /// Set by [`park_helpers`]: spinning helpers park at once (work is about to run on rayon's threads,
    /// whose cores they would share); the next loop clears it.
    quiet: AtomicBool,
}

// Safety: `task` is written only by the thread holding `caller`, while no task of the previous loop can be
// claimed and every claimed one has finished; it is read only after a successful claim (see the module doc).
unsafe impl Sync for Pool {}
unsafe impl Send for Pool {}

fn pack(epoch: u64, tasks: u64, next: u64) -> u64 {
    (epoch << (2 * TASK_BITS)) | (tasks << TASK_BITS) | next
}

fn tasks_of(s: u64) -> u64 {
    (s >> TASK_BITS) & TASK_MASK
}

static POOL: OnceLock<&'static Pool> = OnceLock::new();

impl Pool {
    fn get() -> &'static Pool {
        POOL.get_or_init(|| {
            let helpers = rayon::current_num_threads().saturating_sub(1);
            let pool: &'static Pool = Box::leak(Box::new(Pool {
                state: OwnLines(AtomicU64::new(0)),
                task: UnsafeCell::new(None),
                done: OwnLines(AtomicUsize::new(0)),
                panic: Mutex::new(None),
                caller: Mutex::new(()),
                sleepers: AtomicUsize::new(0),
                park: Mutex::new(()),
                wake: Condvar::new(),
                helpers,
                quiet: AtomicBool::new(false),
            }));
            for i in 0..helpers {
                // A pool without its helpers still runs every loop (the caller claims every task).
                let _ = std::thread::Builder::new().name(format!("fuse-cpu-{i}")).spawn(move || pool.help());
            }
            pool
        })
    }

    /// Claims the next task of the current loop: its index, or `None` when none is left.
    fn claim(&self) -> Option<usize> {
        let mut s = self.state.load(Acquire);
        loop {
            if s & TASK_MASK >= tasks_of(s) {
                return None;
            }
            match self.state.compare_exchange_weak(s, s + 1, AcqRel, Acquire) {
                Ok(_) => return Some((s & TASK_MASK) as usize),
                Err(now) => s = now,
            }
        }
    }

    /// Runs claimed tasks until none is left.
    fn work(&self) {
        while let Some(i) = self.claim() {
            // Safety: a claimed task's loop is current until its `done` count is reached (module doc).
            let task = unsafe { (*self.task.get()).expect("a published loop") };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| unsafe { (*task)(i) })) {
                *self.panic.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
            }
            self.done.fetch_add(1, Release);
        }
    }

    fn help(&self) {
        loop {
            let idle = Instant::now();
            let mut spins = 0u32;
            loop {
                let s = self.state.load(Acquire);
                if s & TASK_MASK < tasks_of(s) {
                    break;
                }
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                if spins % 256 == 0 && (self.quiet.load(Relaxed) || idle.elapsed() > spin()) {
                    self.sleep();
                    break;
                }
            }
            self.work();
        }
    }

    /// Parks until a loop is published (or a second passes: a missed wake-up costs that much, no more).
    fn sleep(&self) {
        let guard = self.park.lock().unwrap_or_else(|e| e.into_inner());
        self.sleepers.fetch_add(1, SeqCst);
        let s = self.state.load(SeqCst);
        if s & TASK_MASK >= tasks_of(s) {
            let _ = self.wake.wait_timeout(guard, Duration::from_secs(1));
        }
        self.sleepers.fetch_sub(1, SeqCst);
    }

    fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        let Ok(_caller) = self.caller.try_lock() else {
            return (0..tasks).for_each(f);
        };
        // Safety: no task of the previous loop is claimable nor running (its caller waited for all of them).
        // The closure outlives the loop: this function returns only after every claimed task finished.
        unsafe {
            let f: *const (dyn Fn(usize) + Sync + '_) = f;
            *self.task.get() = Some(std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const Task>(f));
        }
        self.done.store(0, Relaxed);
        self.quiet.store(false, Relaxed);
        let epoch = (self.state.load(Relaxed) >> (2 * TASK_BITS)).wrapping_add(1) & 0xff_ffff;
        self.state.store(pack(epoch, tasks as u64, 0), SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            let _guard = self.park.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
        self.work();
        while self.done.load(Acquire) < tasks {
            std::hint::spin_loop();
        }
        if let Some(p) = self.panic.lock().unwrap_or_else(|e| e.into_inner()).take() {
            resume_unwind(p);
        }
    }
}

/// Runs `f(0) .. f(tasks - 1)`, spread over the pool's threads and the caller's. Inline (in order) where rayon's
/// current pool has one thread, where the pool is busy with another caller's loop, and for a single task.
pub(crate) fn for_each_task(tasks: usize, f: &(dyn Fn(usize) + Sync)) {
    if tasks <= 1 || tasks > MAX_TASKS || rayon::current_num_threads() <= 1 {
        return (0..tasks).for_each(f);
    }
    let pool = Pool::get();
    if pool.helpers == 0 {
        return (0..tasks).for_each(f);
    }
    pool.run(tasks, f);
}

/// Sends the helpers that spin waiting for a loop to sleep now, before work that runs on rayon's threads (a
/// multithreaded GEMM of the `gemm` crate): a helper spinning on a core halves what a rayon worker there gets
/// (measured: prefill 20% slower on 2 cores). The next loop wakes them.
pub(crate) fn park_helpers() {
    if let Some(pool) = POOL.get() {
        pool.quiet.store(true, Relaxed);
    }
}

/// Runs `f(i, item i)` for each of `items`, moved into its task, as [`for_each_task`] does.
pub(crate) fn for_each_item<T: Send>(items: Vec<T>, f: &(dyn Fn(usize, T) + Sync)) {
    for_each_item_grouped(items, 1, f)
}

/// [`for_each_item`] with `per_task` consecutive items a task (in order within it): for items too small to be
/// worth a claim each.
pub(crate) fn for_each_item_grouped<T: Send>(items: Vec<T>, per_task: usize, f: &(dyn Fn(usize, T) + Sync)) {
    let per_task = per_task.max(1);
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    for_each_chunk_mut(&mut slots, per_task, &|t, chunk| {
        for (j, slot) in chunk.iter_mut().enumerate() {
            if let Some(item) = slot.take() {
                f(t * per_task + j, item)
            }
        }
    });
}

/// [`for_each_item`] for fallible work: every item runs, and the error of the first failing one (by
/// index, so the same inputs give the same error) is returned.
pub(crate) fn try_for_each_item<T: Send, E: Send>(
    items: Vec<T>,
    f: &(dyn Fn(T) -> Result<(), E> + Sync),
) -> Result<(), E> {
    let mut slots: Vec<(Option<T>, Option<E>)> = items.into_iter().map(|t| (Some(t), None)).collect();
    for_each_chunk_mut(&mut slots, 1, &|_, slot| {
        if let Some(item) = slot[0].0.take() {
            slot[0].1 = f(item).err();
        }
    });
    slots.into_iter().find_map(|(_, e)| e).map_or(Ok(()), Err)
}

/// Runs `f(i, chunk i)` over the chunks of `chunk` elements of `data` (the last one shorter), as
/// [`for_each_task`] does.
pub(crate) fn for_each_chunk_mut<T: Send>(data: &mut [T], chunk: usize, f: &(dyn Fn(usize, &mut [T]) + Sync)) {
    struct Base<T>(*mut T);
    // Safety: each task gets its own chunk of the slice (below).
    unsafe impl<T: Send> Sync for Base<T> {}
    let (len, chunk) = (data.len(), chunk.max(1));
    let base = Base(data.as_mut_ptr());
    let base = &base;
    for_each_task(len.div_ceil(chunk), &|i| {
        let start = i * chunk;
        // Safety: task i runs once, and chunks of different tasks do not overlap; `data` is borrowed mutably
        // until every task has finished.
        let piece = unsafe { std::slice::from_raw_parts_mut(base.0.add(start), chunk.min(len - start)) };
        f(i, piece)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_also_nested_and_from_threads() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        pool.install(|| {
            for tasks in [2, 3, 17, 1000] {
                let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                for_each_task(tasks, &|i| {
                    // A loop inside a task runs inline and still covers every task.
                    let inner = AtomicUsize::new(0);
                    for_each_task(5, &|_| {
                        inner.fetch_add(1, Relaxed);
                    });
                    assert_eq!(inner.load(Relaxed), 5);
                    counts[i].fetch_add(1, Relaxed);
                });
                assert!(counts.iter().all(|c| c.load(Relaxed) == 1), "{tasks} tasks");
            }
            // Two threads' loops at once: one gets the pool, the other runs inline; both complete.
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        let mut data = vec![0u32; 1001];
                        for_each_chunk_mut(&mut data, 10, &|i, c| c.iter_mut().for_each(|v| *v = i as u32 + 1));
                        assert!(data.iter().enumerate().all(|(j, &v)| v == j as u32 / 10 + 1));
                    });
                }
            });
        });
    }

    #[test]
    fn items_move_into_their_tasks_and_the_first_error_by_index_is_returned() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        pool.install(|| {
            let seen: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
            let items: Vec<(usize, Vec<u8>)> = (0..100).map(|i| (i, vec![i as u8; i % 7])).collect();
            for_each_item(items, &|i, (j, bytes)| {
                assert_eq!((i, bytes.len()), (j, j % 7));
                seen[j].fetch_add(1, Relaxed);
            });
            assert!(seen.iter().all(|c| c.load(Relaxed) == 1));
            // Items 13, 40 and 77 fail: every item still runs, and 13's error is the one returned.
            let ran = AtomicUsize::new(0);
            let result = try_for_each_item((0..100).collect(), &|i: usize| {
                ran.fetch_add(1, Relaxed);
                if i % 27 == 13 {
                    Err(i)
                } else {
                    Ok(())
                }
            });
            assert_eq!((result, ran.load(Relaxed)), (Err(13), 100));
            // Helpers sent to sleep still take the next loop.
            park_helpers();
            std::thread::sleep(Duration::from_millis(5));
            let sum = AtomicUsize::new(0);
            for_each_task(64, &|i| {
                sum.fetch_add(i, Relaxed);
            });
            assert_eq!(sum.load(Relaxed), 64 * 63 / 2);
        });
    }

    #[test]
    fn a_panicking_task_panics_the_caller() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let result = pool.install(|| catch_unwind(|| for_each_task(64, &|i| assert!(i != 40, "task 40 fails"))));
        assert!(result.is_err());
        // The pool still works afterwards.
        let sum = AtomicUsize::new(0);
        pool.install(|| {
            for_each_task(64, &|i| {
                sum.fetch_add(i, Relaxed);
            })
        });
        assert_eq!(sum.load(Relaxed), 64 * 63 / 2);
    }
}
