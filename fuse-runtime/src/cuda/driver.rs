//! Two helpers every module of the CUDA backend uses, kept apart so that they import nothing of it: driver
//! errors as the runtime's error, and locking that survives a panicked holder.

use crate::Error;
use cudarc::driver::DriverError;
use std::sync::{Mutex, MutexGuard};

/// A driver error as the runtime's error, naming what was being done.
pub(crate) fn driver_error(op: &str, e: DriverError) -> Error {
    Error::Cuda { op: op.to_string(), message: format!("{e}") }
}

/// Locks a mutex, recovering the data if another thread panicked while holding it (the data are caches
/// and handles that a panic cannot leave half-written).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
