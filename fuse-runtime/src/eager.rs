//! Eager ops: each builds a one-op graph (composites expand through the graph builder) and runs it through
//! the same executor as fused functions, so every op has exactly one implementation.

use crate::cpu::exec::execute;
use crate::cpu::Value;
use crate::error::EAGER;
use crate::{Error, Result, Tensor};
use fuse_ir::{BinaryOp, DType, Graph, InputKind, NodeId, Plan, ReduceOp, UnaryOp};

/// An operand of an eager op.
pub(crate) enum Operand<'a> {
    Tensor(&'a Tensor),
    Scalar(f64),
}

/// Builds `build(graph, inputs)` over `operands` (named by `names`) and runs it.
pub(crate) fn run(operands: &[(&str, Operand<'_>)], build: impl FnOnce(&mut Graph, &[NodeId]) -> NodeId) -> Result<Tensor> {
    let mut g = Graph::new(EAGER);
    let mut inputs = Vec::with_capacity(operands.len());
    let mut args = Vec::with_capacity(operands.len());
    for (name, operand) in operands {
        match operand {
            Operand::Tensor(t) => {
                inputs.push(g.input(name, InputKind::Tensor));
                args.push(Value::Tensor((*t).clone()));
            }
            Operand::Scalar(v) => {
                inputs.push(g.input(name, InputKind::Scalar));
                args.push(Value::Scalar(*v));
            }
        }
    }
    let out = build(&mut g, &inputs);
    g.outputs = vec![out];
    let plan = Plan::fused(&g);
    plan.verify(&g).map_err(|e| Error::internal(EAGER, format!("the plan of an eager op does not verify: {e}")))?;
    let (mut outputs, _) = execute(EAGER, &g, &plan, args, false)?;
    outputs.pop().ok_or_else(|| Error::internal(EAGER, "an eager op returned nothing"))
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
        other => format!("{}(a, b)", other.name()),
    };
    run(&[("a", a), ("b", b)], |g, i| g.binary(op, i[0], i[1], &label))
}

macro_rules! unary_fns {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(x: &Tensor) -> Result<Tensor> {
            unary(UnaryOp::$op, x)
        }
    )*};
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
    /// The tanh approximation of GELU.
    gelu_tanh => GeluTanh;
    /// `max(x, 0)`.
    relu => Relu;
    abs => Abs;
    /// `x * x`.
    square => Square;
    /// `1 / x`.
    recip => Recip;
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

    fn reduce(&self, op: ReduceOp, axis: i64) -> Result<Tensor> {
        let last = self.rank() as i64 - 1;
        if axis != -1 && axis != last {
            return Err(Error::unsupported(
                EAGER,
                op.name(),
                format!("only the last axis (-1) can be reduced, got axis {axis} of a tensor of shape {:?}", self.shape()),
            ));
        }
        let label = format!("x.{}(-1)", op.name());
        run(&[("x", Operand::Tensor(self))], |g, i| g.reduce(op, i[0], &label))
    }

    /// Elementwise `self^e`.
    pub fn powf(&self, e: f64) -> Result<Tensor> {
        binary(BinaryOp::Pow, Operand::Tensor(self), Operand::Scalar(e))
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
