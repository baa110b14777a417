//! fuse-ir: the graph of a traced function, the planner that cuts it into kernels, the reference
//! interpreter that defines every op, and the CUDA code generator. No syn, no GPU: everything here
//! is unit-testable and shared by the macro, the runtime and tools.

// The test graphs shared with the integration tests (`samples.rs`) name this crate `fuse_ir`.
#[cfg(test)]
extern crate self as fuse_ir;

mod array;
pub mod codegen;
mod display;
mod dtype;
mod error;
pub mod graph;
pub mod infer;
pub mod interp;
pub mod model_op;
pub mod op;
pub mod plan;
pub mod quant;
mod random;
#[cfg(test)]
mod samples;
pub mod schedule;
mod text;
pub mod view;

pub use dtype::{BlockLayout, DType};
pub use graph::{Graph, Input, InputKind, Node, NodeId};
pub use model_op::ModelOp;
pub use op::{BinaryOp, Op, ReduceOp, UnaryOp};
pub use plan::{Group, GroupKind, Plan};
pub use random::SplitMix64;
pub use view::ViewOp;
