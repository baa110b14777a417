//! The one error type of the runtime. Every variant carries the facts a user needs to find the mistake in
//! their own code: the function (`eager` for eager ops), the op, the source text it came from, the shapes.

use fuse_ir::infer::InferError;
use fuse_ir::DType;

/// `Result<T>` is `Result<T, fuse::Error>`; a second parameter still works (`Result<usize, String>`), so the
/// prelude's glob import does not break the user's own results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The function name errors of eager ops carry.
pub const EAGER: &str = "eager";

#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// Shapes or dtypes that do not fit an op (e.g. a matmul's inner dimensions differ).
    #[error("in `{function}`: {op}{}: {error}", quoted(label))]
    Shape { function: String, op: &'static str, label: String, error: InferError },

    /// A fused function called with the wrong number of arguments.
    #[error("in `{function}`: expected {expected} arguments, got {got}")]
    ArgumentCount { function: String, expected: usize, got: usize },

    /// A tensor passed where a scalar is expected, or the reverse.
    #[error("in `{function}`: parameter `{parameter}` expects a {expected}, got a {got}")]
    ArgumentKind { function: String, parameter: String, expected: &'static str, got: &'static str },

    /// Tensors on different devices meet in one call; the devices as they display (`cpu`, `cuda:0`). Not
    /// `Device` values: the GPU handle's methods return this error, so holding one would make error.rs and
    /// device.rs import each other.
    #[error("in `{function}`: tensors on different devices ({first} and {second}); move one with `.to_device(..)`")]
    DeviceMismatch { function: String, first: String, second: String },

    #[error("cuda is unavailable: {reason}")]
    CudaUnavailable { reason: String },

    /// A CUDA driver or cuBLAS call failed (out of memory, a launch failure, ...).
    #[error("cuda: {op}: {message}")]
    Cuda { op: String, message: String },

    /// A check that a kernel made on data only the GPU holds (an id in device memory, a position written
    /// by an earlier kernel) failed; the kernel skipped the access. Reported at the first synchronisation
    /// after the launch (`to_vec`, `synchronize`), since asking sooner would make the GPU wait for the host.
    #[error("`{op}` on the GPU: {message} (found by the kernel; reported at the first synchronisation after it)")]
    DeviceCheck { op: &'static str, message: String },

    /// Something a CUDA graph cannot hold was attempted while capturing one (see `CudaGraph::capture`).
    #[error("CUDA graph capture: {what}")]
    Capture { what: String },

    /// NVRTC rejected a generated kernel (a bug in fuse's code generator, please report it): the log says why.
    #[error("in `{function}`: kernel `{kernel}` does not compile: {log}")]
    KernelCompile { function: String, kernel: String, log: String },

    /// `Tensor::from_vec` with a vector that does not fill the shape.
    #[error("from_vec: {len} values do not fill shape {shape:?} ({expected} elements)")]
    DataLength { shape: Vec<usize>, len: usize, expected: usize },

    /// An argument no tensor can be made from (a zero step, bounds out of order, a shape too large).
    #[error("{op}: {reason}")]
    InvalidArgument { op: &'static str, reason: String },

    /// Memory the system would not give for a tensor (a size that fits the address space but not the
    /// machine).
    #[error("{op}: {bytes} bytes cannot be allocated on {device}")]
    OutOfMemory { op: &'static str, bytes: u128, device: String },

    /// A function returned a different number of tensors than its Rust signature expects.
    #[error("in `{function}`: the graph returns {got} tensors, the caller expects {expected}")]
    OutputCount { function: String, expected: usize, got: usize },

    /// Something valid in general that this version does not do (e.g. reducing an axis other than the last).
    #[error("in `{function}`: {op}: {reason}")]
    Unsupported { function: String, op: &'static str, reason: String },

    /// A tensor of one dtype where another is required (e.g. `to_vec` on a dtype the element cannot hold).
    #[error("in `{function}`: {op}: expected dtype {expected}, got {got}")]
    DType { function: String, op: &'static str, expected: DType, got: DType },

    /// A bug in fuse (a graph text that does not parse, a plan that does not verify): please report it.
    #[error("in `{function}`: internal error (a bug in fuse, please report it): {message}")]
    Internal { function: String, message: String },
}

fn quoted(label: &str) -> String {
    if label.is_empty() {
        String::new()
    } else {
        format!(" `{label}`")
    }
}

impl Error {
    pub(crate) fn internal(function: &str, message: impl Into<String>) -> Error {
        Error::Internal { function: function.to_string(), message: message.into() }
    }

    pub(crate) fn unsupported(function: &str, op: &'static str, reason: impl Into<String>) -> Error {
        Error::Unsupported { function: function.to_string(), op, reason: reason.into() }
    }
}
