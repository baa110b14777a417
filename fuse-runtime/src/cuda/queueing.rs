//! Who queues work on a GPU's one stream, and the capture regime. The stream records everything queued on it
//! while a CUDA graph is captured, so a capture waits until no other thread is queueing (`enter`), other
//! threads wait in `enter` until it ends, allocations come from the capture's arena, and memory dropped
//! meanwhile is kept until the capture ends (a free during it would be recorded into the graph and
//! replayed). One `Queueing` per device (`device.rs`), which imports it; it knows nothing of the device.

use super::arena::Arena;
use super::driver::lock;
use crate::{Error, Result};
use std::any::Any;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;

/// The queueing state of one GPU.
#[derive(Default)]
pub(crate) struct Queueing {
    /// Whether a CUDA graph is being captured: `state.capture` is set, read without the lock on the paths
    /// every allocation and launch takes.
    is_capturing: AtomicBool,
    /// The capture, if any, and how many other threads are queueing now.
    state: Mutex<QueueState>,
    changed: Condvar,
}

#[derive(Default)]
struct QueueState {
    capture: Option<Capture>,
    /// Threads (other than the capturing one) between `enter` and the end of their guard.
    active: usize,
}

/// A capture under way: the thread capturing, its arena and the memory dropped meanwhile (pool buffers,
/// owners of other libraries' memory), freed when it ends.
struct Capture {
    owner: ThreadId,
    arena: Arc<Arena>,
    freed_after: Vec<Box<dyn Any + Send>>,
}

thread_local! {
    /// How many `enter` guards this thread holds (nested calls enter once).
    static ENTERED: Cell<usize> = const { Cell::new(0) };
}

/// Held while a thread queues work on a GPU (see [`Queueing::enter`]).
pub(crate) struct Entered<'a> {
    queueing: Option<&'a Queueing>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        ENTERED.with(|n| n.set(n.get() - 1));
        if let Some(queueing) = self.queueing {
            let mut q = lock(&queueing.state);
            q.active -= 1;
            // Only a capture waits for queueing threads to leave (`begin_capture`); with none, a notification
            // would be a futex system call on every call for no one.
            let capture_waits = q.capture.is_some() && q.active == 0;
            drop(q);
            if capture_waits {
                queueing.changed.notify_all();
            }
        }
    }
}

impl Queueing {
    /// Marks this thread as queueing work on this GPU until the guard drops: it waits while another thread
    /// captures, and a capture waits for it. Nested calls on one thread enter once.
    pub(crate) fn enter(&self) -> Entered<'_> {
        let outer = ENTERED.with(|n| {
            n.set(n.get() + 1);
            n.get() == 1
        });
        if !outer {
            return Entered { queueing: None };
        }
        let mut q = lock(&self.state);
        // The thread's id only while a capture runs (no `thread::current()` on every call).
        while q.capture.as_ref().is_some_and(|c| c.owner != std::thread::current().id()) {
            q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner());
        }
        if q.capture.is_some() {
            return Entered { queueing: None };
        }
        q.active += 1;
        Entered { queueing: Some(self) }
    }

    /// Threads queueing work now (between `enter` and the end of their guard), the caller included when it
    /// has entered.
    pub(crate) fn active(&self) -> usize {
        lock(&self.state).active
    }

    pub(crate) fn is_capturing(&self) -> bool {
        self.is_capturing.load(Ordering::Acquire)
    }

    /// The arena that allocations come from while a graph is captured.
    pub(crate) fn capture_arena(&self) -> Option<Arc<Arena>> {
        if !self.is_capturing() {
            return None;
        }
        lock(&self.state).capture.as_ref().map(|c| c.arena.clone())
    }

    /// An error naming `what` while this thread captures a graph (it would wait for the GPU or read host
    /// memory); waits for another thread's capture to end.
    pub(crate) fn refuse_while_capturing(&self, what: &str) -> Result<()> {
        // Another thread's capture: entering waits for it to end; this thread's: refuse.
        drop(self.enter());
        let me = std::thread::current().id();
        if self.is_capturing() && lock(&self.state).capture.as_ref().is_some_and(|c| c.owner == me) {
            return Err(Error::Capture { what: format!("{what} while capturing a CUDA graph") });
        }
        Ok(())
    }

    /// Starts a capture's allocation regime: waits for another thread's capture to end and for every other
    /// thread to stop queueing. A capture inside a capture on the same thread is an error.
    pub(crate) fn begin_capture(&self, arena: Arc<Arena>) -> Result<()> {
        let me = std::thread::current().id();
        let mut q = lock(&self.state);
        loop {
            match &q.capture {
                Some(c) if c.owner == me => {
                    return Err(Error::Capture { what: "a capture inside another on the same GPU".into() })
                }
                Some(_) => q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner()),
                None => break,
            }
        }
        q.capture = Some(Capture { owner: me, arena, freed_after: Vec::new() });
        while q.active > 0 {
            q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner());
        }
        self.is_capturing.store(true, Ordering::Release);
        Ok(())
    }

    /// Ends the capture's allocation regime, frees the memory dropped during it and lets other threads'
    /// work go on.
    pub(crate) fn end_capture(&self) {
        self.is_capturing.store(false, Ordering::Release);
        let ended = lock(&self.state).capture.take();
        self.changed.notify_all();
        drop(ended);
    }

    /// While a capture runs, keeps `value` (memory no one uses any more) until it ends and returns `None`;
    /// otherwise hands it back, to be freed or pooled now.
    pub(crate) fn keep_until_capture_ends<T: Any + Send>(&self, value: T) -> Option<T> {
        if self.is_capturing() {
            if let Some(capture) = lock(&self.state).capture.as_mut() {
                capture.freed_after.push(Box::new(value));
                return None;
            }
        }
        Some(value)
    }
}
