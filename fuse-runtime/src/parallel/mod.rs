//! Tensor parallelism (Megatron-style) over the ranks of a group: each rank holds a shard of every weight
//! (column-parallel products split along N, row-parallel ones along K), runs the same `#[fuse]` code on it,
//! and joins the row-parallel products' partial sums with [`all_reduce_sum`](crate::all_reduce_sum), a
//! planned step of the fused call like any other model op.
//!
//! One thread a rank ([`Group::run`]): the rank a thread belongs to is bound to the thread while its closure
//! runs, so the model's code names no communicator (a `#[fuse]` function takes tensors and scalars) and the
//! same function runs on every rank. This form of the group is the CPU's: its ranks are threads of this
//! process that sum through shared memory, in rank order, so every rank gets the same bits and the result
//! does not depend on which rank arrives first: the reference for the GPU form ([`Group::cuda`]: one GPU a
//! rank, each thread driving its GPU's stream, the sums NCCL's through cudarc on that stream, captured by CUDA
//! graphs like the kernels around them). One process and a thread a GPU rather than a process a GPU: the
//! model crate loads and shards its weights once, in one address space, and NCCL's `ncclCommInitAll` makes
//! every rank's communicator at once, with no rendezvous to set up.
//!
//! ```
//! # use fuse_runtime as fuse; // the facade crate `fuse` re-exports this one
//! use fuse::parallel::Group;
//! use fuse::{all_reduce_sum, silu, Device, Tensor};
//!
//! // The Llama MLP on one rank's shards (inside `#[fuse]` the same ops fuse as usual, the sum a step of
//! // its own): [out, in] weights, gate and up split along their outputs (this rank's columns of the
//! // hidden layer), down along its inputs (this rank's part of every output, summed over the ranks).
//! fn mlp(x: &Tensor, gate: &Tensor, up: &Tensor, down: &Tensor) -> fuse::Result<Tensor> {
//!     let h = (silu(&x.matmul(&gate.t()?)?)? * x.matmul(&up.t()?)?)?;
//!     all_reduce_sum(&h.matmul(&down.t()?)?)
//! }
//!
//! # fn main() -> fuse::Result<()> {
//! let dev = Device::Cpu;
//! let w = |rows: usize, cols: usize, seed: u64| Tensor::randn_seeded(0.0, 0.1, &[rows, cols], seed, &dev);
//! let (x, gate, up, down) = (w(3, 8, 1)?, w(16, 8, 2)?, w(16, 8, 3)?, w(8, 16, 4)?);
//! let whole = Group::cpu(1)?.run(|_| mlp(&x, &gate, &up, &down))?.remove(0);
//! let parts = Group::cpu(2)?.run(|rank| {
//!     let (gate, up) = (rank.column_parallel(&gate)?, rank.column_parallel(&up)?);
//!     mlp(&x, &gate, &up, &rank.row_parallel(&down)?)
//! })?;
//! for y in parts {
//!     assert!(fuse::rel_l2_error(&y.to_vec::<f32>()?, &whole.to_vec::<f32>()?) < 1e-5);
//! }
//! # Ok(())
//! # }
//! ```

use crate::{Device, Error, Result};
use fuse_ir::DType;
use std::cell::RefCell;
use std::sync::Arc;

mod collective;
mod shard;

use collective::{Collective, Leaves, Part, OP};

/// The ranks of a tensor-parallel group. [`Group::run`] runs a closure once a rank, each on its own thread.
#[derive(Clone, Debug)]
pub struct Group {
    world: usize,
    ranks: Ranks,
}

#[derive(Clone, Debug)]
enum Ranks {
    Cpu,
    /// A GPU a rank, by ordinal.
    Cuda(Vec<usize>),
}

/// What a GPU rank sums through (never made in a build without the `cuda` feature).
#[cfg(feature = "cuda")]
use crate::cuda::nccl::NcclComm;
#[cfg(not(feature = "cuda"))]
enum NcclComm {}

impl Group {
    /// A group of `world` ranks on the CPU: threads of this process (each rank's work may itself use every
    /// core: the ranks are for tensor-parallel code and its checks, not for speed on one machine's CPU).
    pub fn cpu(world: usize) -> Result<Group> {
        if world == 0 {
            return Err(Error::InvalidArgument { op: "Group::cpu", reason: "a group needs at least one rank".into() });
        }
        Ok(Group { world, ranks: Ranks::Cpu })
    }

    /// A group of one rank a GPU, rank i on GPU `ordinals[i]`, summing through NCCL (loaded when the group
    /// runs: a machine without `libnccl.so.2` gets `Error::CudaUnavailable` from [`Group::run`]). Keep NVLink
    /// multicast off where NCCL would use it (`NCCL_NVLS_ENABLE=0`) if its start fails.
    pub fn cuda(ordinals: &[usize]) -> Result<Group> {
        let bad = |reason: String| Err(Error::InvalidArgument { op: "Group::cuda", reason });
        if ordinals.is_empty() {
            return bad("a group needs at least one GPU".into());
        }
        let twice =
            ordinals.iter().enumerate().find_map(|(i, o)| Some((ordinals[..i].iter().position(|x| x == o)?, i)));
        if let Some((first, again)) = twice {
            return bad(format!("GPU {} is rank {first} and rank {again}: one rank a GPU", ordinals[again]));
        }
        if cfg!(not(feature = "cuda")) {
            return Err(Error::CudaUnavailable {
                reason: "this build has no `cuda` feature (NCCL comes with it)".into(),
            });
        }
        Ok(Group { world: ordinals.len(), ranks: Ranks::Cuda(ordinals.to_vec()) })
    }

    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// Each rank's device, and its NCCL communicator on a GPU group.
    fn devices(&self) -> Result<(Vec<Device>, Vec<Option<NcclComm>>)> {
        match &self.ranks {
            Ranks::Cpu => Ok((vec![Device::Cpu; self.world], (0..self.world).map(|_| None).collect())),
            #[cfg(feature = "cuda")]
            Ranks::Cuda(ordinals) => {
                // Every device first: a GPU that cannot start fails the group before any rank waits for it.
                let devices = ordinals.iter().map(|&o| Device::cuda(o)).collect::<Result<Vec<_>>>()?;
                let comms = NcclComm::for_devices(ordinals)?;
                Ok((devices, comms.into_iter().map(Some).collect()))
            }
            #[cfg(not(feature = "cuda"))]
            Ranks::Cuda(_) => Err(Error::CudaUnavailable { reason: "this build has no `cuda` feature".into() }),
        }
    }

    /// Runs `f` once a rank, on one thread each, the thread bound to its rank (so that
    /// [`all_reduce_sum`](crate::all_reduce_sum) in anything `f` calls sums over the group), and returns
    /// each rank's result in rank order. Every rank must make the same collective calls in the same order:
    /// on the CPU, a rank whose closure ends (returns, fails or panics) while others wait in a collective it
    /// never entered makes theirs fail, saying which rank left, rather than wait forever (NCCL's sums on a
    /// GPU group have no such check: a rank that skips one leaves its peers' streams waiting). The first
    /// error in rank order is returned; a rank's panic is an error naming the rank.
    pub fn run<T: Send>(&self, f: impl Fn(&Rank) -> Result<T> + Sync) -> Result<Vec<T>> {
        if bound().is_some() {
            return Err(Error::InvalidArgument {
                op: "Group::run",
                reason: "called from a rank of a group: groups do not nest".into(),
            });
        }
        let (devices, links) = self.devices()?;
        let collective = Arc::new(Collective::new(self.world));
        let f = &f;
        let outcomes: Vec<Result<T>> = std::thread::scope(|scope| {
            let handles: Vec<_> = devices
                .into_iter()
                .zip(links)
                .enumerate()
                .map(|(index, (device, link))| {
                    let rank = Rank { index, world: self.world, device, collective: collective.clone() };
                    scope.spawn(move || {
                        let _leaves = Leaves(rank.collective.clone(), index);
                        BOUND.with(|b| *b.borrow_mut() = Some(Bound { rank: rank.clone(), link }));
                        let result = f(&rank);
                        // The communicator goes with the binding, on this thread.
                        BOUND.with(|b| *b.borrow_mut() = None);
                        result
                    })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(index, h)| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::Internal { function: format!("rank {index}"), message: "the rank panicked".into() })
                    })
                })
                .collect()
        });
        outcomes.into_iter().collect()
    }
}

/// One rank of a running [`Group`]: its index, the group's size, its device, and its shards of the weights.
#[derive(Clone)]
pub struct Rank {
    index: usize,
    world: usize,
    device: Device,
    collective: Arc<Collective>,
}

impl std::fmt::Debug for Rank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rank {} of {} on {:?}", self.index, self.world, self.device)
    }
}

impl Rank {
    /// This rank's index, 0 to `world() - 1`.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The group's number of ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The device this rank computes on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

/// What a rank's thread is bound to while its closure runs.
struct Bound {
    rank: Rank,
    link: Option<NcclComm>,
}

thread_local! {
    static BOUND: RefCell<Option<Bound>> = const { RefCell::new(None) };
}

/// The rank this thread runs as, inside [`Group::run`].
fn bound() -> Option<Rank> {
    BOUND.with(|b| b.borrow().as_ref().map(|b| b.rank.clone()))
}

fn outside_a_group() -> Error {
    Error::Unsupported {
        function: OP.to_string(),
        op: OP,
        reason: "called outside a tensor-parallel group: run it inside fuse::parallel::Group::run (a group of one \
                 rank sums one part)"
            .into(),
    }
}

/// Queues on `device`'s stream the sum over this thread's GPU group of the `count` elements of `dtype` at
/// device address `send` into `recv`. An error outside a group, in a CPU group, or on another GPU than the
/// rank's.
#[cfg(feature = "cuda")]
pub(crate) fn nccl_all_reduce_sum(
    send: u64,
    recv: u64,
    count: usize,
    dtype: DType,
    device: &crate::cuda::CudaDevice,
) -> Result<()> {
    BOUND.with(|b| {
        let b = b.borrow();
        let bound = b.as_ref().ok_or_else(outside_a_group)?;
        let Some(link) = &bound.link else {
            return Err(Error::Unsupported {
                function: OP.to_string(),
                op: OP,
                reason: "a GPU tensor in a CPU group's rank: make the group with fuse::parallel::Group::cuda".into(),
            });
        };
        let here = crate::Device::Cuda(device.clone());
        if bound.rank.device != here {
            return Err(Error::DeviceMismatch {
                function: OP.to_string(),
                first: format!("rank {} on {}", bound.rank.index, bound.rank.device),
                second: format!("a tensor on {here}"),
            });
        }
        link.all_reduce_sum(send, recv, count, dtype, device.stream())
    })
}

/// Sums `values` (this rank's part, of `shape` and `dtype`) over the ranks of the group this thread runs in:
/// every rank gets the sum of the parts in rank order, in f32. An error outside a group, or when the ranks'
/// parts differ in shape or dtype, or a rank left the group before joining this sum.
pub(crate) fn all_reduce_sum_f32(values: Vec<f32>, shape: &[usize], dtype: DType) -> Result<Vec<f32>> {
    let rank = bound().ok_or_else(outside_a_group)?;
    rank.collective.all_reduce(rank.index, Part { shape: shape.to_vec(), dtype, values })
}
