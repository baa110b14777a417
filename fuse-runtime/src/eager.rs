//! Eager ops: each builds a one-op graph (composites expand through the graph builder) and runs it through
//! the same executor as fused functions, so every op has exactly one implementation.
//!
//! On the GPU, the graph's plan and generated kernels (and so its launch plans) are kept per graph text in a
//! small process-wide cache, as a `FusedFn` keeps its own: a repeated eager op neither regenerates its CUDA
//! source nor re-records its launches. The graph text names the op and each operand's kind (tensor or
//! scalar); dtypes, shapes and strides are the launch plans' signature. The CPU path plans on every call
//! (it is cheap there) and never touches the cache.

use crate::cuda::driver::lock;
use crate::cuda::KernelCache;
use crate::error::EAGER;
use crate::exec::{execute, execute_cached};
use crate::{Arg, Device, Error, Result, Tensor};
use fuse_ir::{BinaryOp, DType, Graph, InputKind, NodeId, Plan, ReduceOp, UnaryOp};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

/// An operand of an eager op.
#[derive(Clone, Copy)]
pub(crate) enum Operand<'a> {
    Tensor(&'a Tensor),
    Scalar(f64),
}

/// Builds `build(graph, inputs)` over `operands` (named by `names`) and runs it.
pub(crate) fn run(
    operands: &[(&str, Operand<'_>)],
    build: impl FnOnce(&mut Graph, &[NodeId]) -> NodeId,
) -> Result<Tensor> {
    let mut g = Graph::new(EAGER);
    let mut inputs = Vec::with_capacity(operands.len());
    let mut args = Vec::with_capacity(operands.len());
    for (name, operand) in operands {
        match operand {
            Operand::Tensor(t) => {
                inputs.push(g.input(name, InputKind::Tensor));
                args.push(Arg::Tensor(t));
            }
            Operand::Scalar(v) => {
                inputs.push(g.input(name, InputKind::Scalar));
                args.push(Arg::Scalar(*v));
            }
        }
    }
    let out = build(&mut g, &inputs);
    g.outputs = vec![out];
    let on_gpu = args.iter().filter_map(Arg::tensor).any(|t| matches!(t.device(), Device::Cuda(_)));
    let (mut outputs, _) = if on_gpu {
        let op = lock(gpu_ops()).get_or_insert(g, MAX_GPU_OPS)?;
        execute_cached(EAGER, &op.graph, &op.plan, &args, false, true, Some(&op.kernels), None)?
    } else {
        let plan = verified_plan(&g)?;
        execute(EAGER, &g, &plan, &args, false)?
    };
    outputs.pop().ok_or_else(|| Error::internal(EAGER, "an eager op returned nothing"))
}

fn verified_plan(g: &Graph) -> Result<Plan> {
    let plan = Plan::fused(g);
    plan.verify(g).map_err(|e| Error::internal(EAGER, format!("the plan of an eager op does not verify: {e}")))?;
    Ok(plan)
}

/// One eager op's graph as the GPU runs it: its fused plan and the plan's kernels and launch plans.
struct GpuOp {
    graph: Graph,
    plan: Plan,
    kernels: KernelCache,
}

/// Distinct eager graphs kept (there are about a hundred: op x operand kinds x target dtype); past this
/// many, the oldest entry goes (a caller still running it keeps its `Arc`).
const MAX_GPU_OPS: usize = 256;

/// Eager graphs by text, oldest first in `order`.
#[derive(Default)]
struct GpuOps {
    ops: HashMap<String, Arc<GpuOp>>,
    order: VecDeque<String>,
}

fn gpu_ops() -> &'static Mutex<GpuOps> {
    static OPS: OnceLock<Mutex<GpuOps>> = OnceLock::new();
    OPS.get_or_init(Mutex::default)
}

impl GpuOps {
    /// The kept entry for `g`'s text, or a new one (planned and verified once), evicting the oldest past
    /// `capacity`. Planning a one-op graph is short, so it happens under the lock: two threads never plan
    /// the same graph twice.
    fn get_or_insert(&mut self, g: Graph, capacity: usize) -> Result<Arc<GpuOp>> {
        let text = g.to_text();
        if let Some(op) = self.ops.get(&text) {
            return Ok(Arc::clone(op));
        }
        let plan = verified_plan(&g)?;
        let op = Arc::new(GpuOp { graph: g, plan, kernels: KernelCache::new() });
        while self.ops.len() >= capacity.max(1) {
            let Some(oldest) = self.order.pop_front() else { break };
            self.ops.remove(&oldest);
        }
        self.order.push_back(text.clone());
        self.ops.insert(text, Arc::clone(&op));
        Ok(op)
    }
}

pub(crate) fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let label = format!("{}(x)", op.name());
    run(&[("x", Operand::Tensor(x))], |g, i| g.unary(op, i[0], &label))
}

pub(crate) fn binary(op: BinaryOp, a: Operand<'_>, b: Operand<'_>) -> Result<Tensor> {
    let label = match op {
        BinaryOp::Add => "a + b".to_string(),
        BinaryOp::Sub => "a - b".to_string(),
        BinaryOp::Mul => "a * b".to_string(),
        BinaryOp::Div => "a / b".to_string(),
        BinaryOp::Pow => "a.powf(b)".to_string(),
        c if c.is_comparison() => format!("a.{}(b)", c.name()),
        other => format!("{}(a, b)", other.name()),
    };
    run(&[("a", a), ("b", b)], |g, i| g.binary(op, i[0], i[1], &label))
}

/// Each unary op as a function, `exp(&x)`, and as a method, `x.exp()`: both forms trace under `#[fuse]` too.
macro_rules! unary_fns {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(x: &Tensor) -> Result<Tensor> {
                unary(UnaryOp::$op, x)
            }
        )*
        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Result<Tensor> {
                    unary(UnaryOp::$op, self)
                }
            )*
        }
    };
}

unary_fns! {
    /// `e^x`, elementwise.
    exp => Exp;
    /// Natural logarithm, elementwise.
    log => Log;
    sqrt => Sqrt;
    /// `1 / sqrt(x)`.
    rsqrt => Rsqrt;
    tanh => Tanh;
    /// `1 / (1 + e^-x)`.
    sigmoid => Sigmoid;
    /// `x * sigmoid(x)`.
    silu => Silu;
    /// The exact (erf) GELU.
    gelu => Gelu;
    /// The exact (erf) GELU under candle's name: [`gelu`].
    gelu_erf => Gelu;
    /// The tanh approximation of GELU.
    gelu_tanh => GeluTanh;
    /// `max(x, 0)`.
    relu => Relu;
    abs => Abs;
    /// `x * x`.
    square => Square;
    /// `x * x` under candle's name: [`square`].
    sqr => Square;
    /// `1 / x`.
    recip => Recip;
    /// Sine (radians).
    sin => Sin;
    /// Cosine (radians).
    cos => Cos;
    /// Rounds toward zero.
    trunc => Trunc;
}

/// The comparisons as methods, `a.ge(&b)` (candle's names): 1 where true, 0 where false, in the operands'
/// dtype (candle's results are u8), with broadcasting; they trace under `#[fuse]` too.
macro_rules! comparison_methods {
    ($($name:ident => $op:ident, $what:literal;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("`", $what, "` elementwise: 1 where true, 0 where false, in the operands' dtype.")]
                pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                    binary(BinaryOp::$op, Operand::Tensor(self), Operand::Tensor(other))
                }
            )*
        }
    };
}

comparison_methods! {
    ge => Ge, "self >= other";
    gt => Gt, "self > other";
    le => Le, "self <= other";
    lt => Lt, "self < other";
    eq => Eq, "self == other";
    ne => Ne, "self != other";
}

impl Tensor {
    /// `on_true` where `self` is not 0, else `on_false` (candle's `where_cond`), the three broadcast; the
    /// condition may be of any dtype (a comparison's 1/0, a mask of 0/1), the values share theirs. Traces
    /// under `#[fuse]` too, where either value may also be a number such as `f32::NEG_INFINITY`.
    ///
    /// ```
    /// use fuse_runtime::{DType, Device, Tensor};
    /// let dev = Device::Cpu;
    /// let scores = Tensor::from_vec(vec![0.5f32, 2.0, -1.0, 3.0], &[2, 2], &dev)?;
    /// let keep = Tensor::from_vec(vec![1.0f32, 0.0, 1.0, 1.0], &[2, 2], &dev)?;
    /// let masked = keep.where_cond(&scores, &Tensor::full(f32::NEG_INFINITY, &[2, 2], DType::F32, &dev)?)?;
    /// assert_eq!(masked.to_vec::<f32>()?, [0.5, f32::NEG_INFINITY, -1.0, 3.0]);
    /// # Ok::<(), fuse_runtime::Error>(())
    /// ```
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        let operands =
            [("c", Operand::Tensor(self)), ("t", Operand::Tensor(on_true)), ("f", Operand::Tensor(on_false))];
        run(&operands, |g, i| g.where_cond(i[0], i[1], i[2], "c.where_cond(t, f)"))
    }
}

/// Softmax over the last axis.
pub fn softmax(x: &Tensor) -> Result<Tensor> {
    run(&[("x", Operand::Tensor(x))], |g, i| g.softmax(i[0], "softmax(x)"))
}

/// Elementwise maximum, with broadcasting.
pub fn maximum(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Maximum, Operand::Tensor(a), Operand::Tensor(b))
}

/// Elementwise minimum, with broadcasting.
pub fn minimum(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Minimum, Operand::Tensor(a), Operand::Tensor(b))
}

/// `x * rsqrt(mean(x^2, -1) + eps) * w`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: impl Into<f64>) -> Result<Tensor> {
    let operands = [("x", Operand::Tensor(x)), ("w", Operand::Tensor(w)), ("eps", Operand::Scalar(eps.into()))];
    run(&operands, |g, i| g.rms_norm(i[0], i[1], i[2], "rms_norm(x, w, eps)"))
}

impl Tensor {
    /// `min` where the value is below it, `max` where above, else the value (candle's `clamp`): written
    /// `minimum(maximum(x, min), max)`, and traced so under `#[fuse]`.
    pub fn clamp(&self, min: impl Into<f64>, max: impl Into<f64>) -> Result<Tensor> {
        let low = binary(BinaryOp::Maximum, Operand::Tensor(self), Operand::Scalar(min.into()))?;
        binary(BinaryOp::Minimum, Operand::Tensor(&low), Operand::Scalar(max.into()))
    }

    /// Elementwise maximum with `other`, with broadcasting: `a.maximum(&b)`.
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        maximum(self, other)
    }

    /// Elementwise minimum with `other`, with broadcasting: `a.minimum(&b)`.
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        minimum(self, other)
    }

    /// `[m, k] x [k, n]`, `[b, m, k] x [k, n]` or `[b, m, k] x [b, k, n]`.
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        run(&[("a", Operand::Tensor(self)), ("b", Operand::Tensor(rhs))], |g, i| g.matmul(i[0], i[1], "a.matmul(b)"))
    }

    /// Sum over the last axis (`axis` must be -1, or the last axis' index), keeping it with size 1.
    pub fn sum(&self, axis: i64) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, axis)
    }

    /// Mean over the last axis, keeping it with size 1.
    pub fn mean(&self, axis: i64) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, axis)
    }

    /// Maximum over the last axis, keeping it with size 1.
    pub fn max(&self, axis: i64) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, axis)
    }

    /// Minimum over the last axis, keeping it with size 1.
    pub fn min(&self, axis: i64) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, axis)
    }

    pub(crate) fn reduce(&self, op: ReduceOp, axis: i64) -> Result<Tensor> {
        let last = self.rank() as i64 - 1;
        if axis != -1 && axis != last {
            return Err(Error::unsupported(
                EAGER,
                op.name(),
                format!(
                    "only the last axis (-1) can be reduced, got axis {axis} of a tensor of shape {:?}",
                    self.shape()
                ),
            ));
        }
        let label = format!("x.{}(-1)", op.name());
        run(&[("x", Operand::Tensor(self))], |g, i| g.reduce(op, i[0], &label))
    }

    /// Elementwise `self^e`; `e` any float or integer (`x.powf(2)`, `x.powf(0.5)`).
    pub fn powf(&self, e: impl Into<f64>) -> Result<Tensor> {
        binary(BinaryOp::Pow, Operand::Tensor(self), Operand::Scalar(e.into()))
    }

    /// The values converted to `dtype` (a cheap clone when already there).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let label = format!("x.to_dtype({dtype})");
        run(&[("x", Operand::Tensor(self))], |g, i| g.cast(i[0], dtype, &label))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cast_graph(dtype: DType) -> Graph {
        let mut g = Graph::new(EAGER);
        let x = g.input("x", InputKind::Tensor);
        let out = g.cast(x, dtype, &format!("x.to_dtype({dtype})"));
        g.outputs = vec![out];
        g
    }

    fn exp_graph(kind: InputKind) -> Graph {
        let mut g = Graph::new(EAGER);
        let x = g.input("x", kind);
        let out = g.unary(UnaryOp::Exp, x, "exp(x)");
        g.outputs = vec![out];
        g
    }

    #[test]
    fn the_gpu_op_cache_keeps_one_entry_per_graph_text_and_evicts_the_oldest() {
        let mut cache = GpuOps::default();
        let a = cache.get_or_insert(exp_graph(InputKind::Tensor), 2).unwrap();
        let again = cache.get_or_insert(exp_graph(InputKind::Tensor), 2).unwrap();
        assert!(Arc::ptr_eq(&a, &again), "the same graph text shares its kernels and launch plans");
        let scalar = cache.get_or_insert(exp_graph(InputKind::Scalar), 2).unwrap();
        assert!(!Arc::ptr_eq(&a, &scalar), "an operand of another kind is another entry");
        assert_eq!(cache.ops.len(), 2);
        // A third graph evicts the oldest (exp of a tensor); an evicted entry lives on in its holders.
        let bf16 = cache.get_or_insert(cast_graph(DType::BF16), 2).unwrap();
        assert_eq!(cache.ops.len(), 2);
        assert_eq!(cache.order.len(), 2);
        assert!(!cache.ops.contains_key(&exp_graph(InputKind::Tensor).to_text()));
        assert_eq!(a.graph.to_text(), exp_graph(InputKind::Tensor).to_text());
        let f16 = cache.get_or_insert(cast_graph(DType::F16), 2).unwrap();
        assert!(!Arc::ptr_eq(&bf16, &f16), "the target dtype is part of the graph");
        assert!(Arc::ptr_eq(&bf16, &cache.get_or_insert(cast_graph(DType::BF16), 2).unwrap()));
        // The kept plan is the one `run` makes on the CPU.
        assert_eq!(bf16.plan, verified_plan(&cast_graph(DType::BF16)).unwrap());
    }
}
