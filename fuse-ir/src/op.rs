//! The op table: every operation once, with its name, arity, definition (f64, the reference) and cost.
//!
//! The ops a whole model adds (embedding, argmax, rope, attention) are defined in `model_op.rs`.
//!
//! Composites (`softmax`, `rms_norm`) are not ops: the graph builder expands them into these, so the planner
//! sees the reductions and pointwise work they are made of.

use crate::model_op::ModelOp;
use crate::view::ViewOp;
use crate::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Silu,
    Gelu,
    GeluTanh,
    Relu,
    Abs,
    Square,
    Recip,
    Sin,
    Cos,
    /// Rounds toward zero (torch's `trunc`); what `a / b` of two integer sizes is in a `#[fuse]` body.
    Trunc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    /// `a.powf(b)`
    Pow,
    /// Comparisons: 1 where true, 0 where false, in the operands' dtype (candle's `ge gt le lt eq ne`, whose
    /// results are u8).
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
    Ne,
}

/// Reductions over the last axis; the axis is kept with size 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
}

/// What a node computes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// The k-th argument of the fused function: a tensor, or a scalar (a 0-d operand that broadcasts).
    Input(u32),
    /// A number literal, integer or float (0-d, takes the dtype of what it meets).
    Const(f64),
    Unary(UnaryOp),
    Binary(BinaryOp),
    Reduce(ReduceOp),
    /// `a.matmul(b)`: [.., m, k] x [.., k, n], the leading (batch) axes broadcast.
    MatMul,
    /// `a.t()`: swap the last two axes. A view: nothing is copied.
    Transpose,
    /// `a.to_dtype(d)`.
    Cast(DType),
    /// `c.where_cond(t, f)` (candle's name and order): `t` where `c` is not 0 (a comparison's 1, or any
    /// non-zero number, NaN included), else `f`; the three broadcast, the result takes `t`'s dtype.
    Where,
    /// An op of a whole model (`embedding`, `argmax`, `rope`, `attention`): a group of its own.
    Model(ModelOp),
    /// Views and layout (`reshape`, `transpose(a, b)`, `permute`, `narrow`, `cat`, `contiguous`, `dim`): see
    /// `view.rs`.
    View(ViewOp),
}

impl Op {
    pub fn arity(&self) -> usize {
        match self {
            Op::Input(_) | Op::Const(_) => 0,
            Op::Unary(_) | Op::Reduce(_) | Op::Transpose | Op::Cast(_) => 1,
            Op::Binary(_) | Op::MatMul => 2,
            Op::Where => 3,
            Op::Model(m) => m.arity(),
            Op::View(v) => v.arity(),
        }
    }

    /// Name as printed in graphs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input(_) => "input",
            Op::Const(_) => "const",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Reduce(r) => r.name(),
            Op::MatMul => "matmul",
            Op::Transpose => "t",
            Op::Cast(_) => "to_dtype",
            Op::Where => "where_cond",
            Op::Model(m) => m.name(),
            Op::View(v) => v.name(),
        }
    }

    /// Elementwise ops: computed per element with broadcasting; fusable into any group.
    pub fn is_pointwise(&self) -> bool {
        matches!(self, Op::Unary(_) | Op::Binary(_) | Op::Cast(_) | Op::Where)
    }

    /// `where_cond`'s definition: `t` where `c` is not 0, else `f`.
    pub fn select(c: f64, t: f64, f: f64) -> f64 {
        if c != 0.0 {
            t
        } else {
            f
        }
    }

    /// A unary, binary or `where_cond` op's value on numbers, in f64 as the reference computes it: how sizes
    /// and the other host scalars are computed. `None` for other ops or a wrong count of operands.
    pub fn eval_number(&self, args: &[f64]) -> Option<f64> {
        match (*self, args) {
            (Op::Unary(u), &[x]) => Some(u.eval(x)),
            (Op::Binary(b), &[x, y]) => Some(b.eval(x, y)),
            (Op::Where, &[c, t, f]) => Some(Op::select(c, t, f)),
            _ => None,
        }
    }

    /// Leaves: values nobody computes (arguments and literals).
    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Input(_) | Op::Const(_))
    }

    /// `slice_set`: the one op that writes into an operand (its first) instead of a new value.
    pub fn writes_in_place(&self) -> bool {
        matches!(self, Op::View(crate::view::ViewOp::SliceSet { .. }))
    }
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 17] = [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Relu,
        UnaryOp::Abs,
        UnaryOp::Square,
        UnaryOp::Recip,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Trunc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Silu => "silu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Relu => "relu",
            UnaryOp::Abs => "abs",
            UnaryOp::Square => "square",
            UnaryOp::Recip => "recip",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Trunc => "trunc",
        }
    }

    pub fn from_name(name: &str) -> Option<UnaryOp> {
        UnaryOp::ALL.into_iter().find(|u| u.name() == name)
    }

    /// The definition of the op (the reference interpreter's arithmetic).
    pub fn eval(self, x: f64) -> f64 {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Silu => x / (1.0 + (-x).exp()),
            UnaryOp::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
            UnaryOp::GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            }
            UnaryOp::Relu => nan_max(x, 0.0),
            UnaryOp::Abs => x.abs(),
            UnaryOp::Square => x * x,
            UnaryOp::Recip => 1.0 / x,
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Trunc => x.trunc(),
        }
    }

    /// The same op in f32, as the CPU backend runs it.
    #[inline]
    pub fn eval_f32(self, x: f32) -> f32 {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Silu => x / (1.0 + (-x).exp()),
            UnaryOp::Gelu => 0.5 * x * (1.0 + erf(x as f64 / std::f64::consts::SQRT_2) as f32),
            UnaryOp::GeluTanh => {
                let c = 0.797_884_6_f32;
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            }
            UnaryOp::Relu => nan_max(x, 0.0),
            UnaryOp::Abs => x.abs(),
            UnaryOp::Square => x * x,
            UnaryOp::Recip => 1.0 / x,
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Trunc => x.trunc(),
        }
    }

    /// The op as a CUDA C expression in f32 over `x`, a variable name (it may appear more than once).
    /// Accurate functions only (`expf`, not `__expf`): results are checked against the f64 reference.
    pub fn cuda(self, x: &str) -> String {
        match self {
            UnaryOp::Neg => format!("(-{x})"),
            UnaryOp::Exp => format!("expf({x})"),
            UnaryOp::Log => format!("logf({x})"),
            UnaryOp::Sqrt => format!("sqrtf({x})"),
            UnaryOp::Rsqrt => format!("rsqrtf({x})"),
            UnaryOp::Tanh => format!("tanhf({x})"),
            UnaryOp::Sigmoid => format!("fuse_sigmoid({x})"),
            UnaryOp::Silu => format!("({x} * fuse_sigmoid({x}))"),
            UnaryOp::Gelu => format!("(0.5f * {x} * (1.0f + erff({x} * 0.70710677f)))"),
            UnaryOp::GeluTanh => {
                format!("(0.5f * {x} * (1.0f + tanhf(0.7978846f * ({x} + 0.044715f * {x} * {x} * {x}))))")
            }
            UnaryOp::Relu => format!("fuse_max({x}, 0.0f)"),
            UnaryOp::Abs => format!("fabsf({x})"),
            UnaryOp::Square => format!("({x} * {x})"),
            UnaryOp::Recip => format!("(1.0f / {x})"),
            UnaryOp::Sin => format!("sinf({x})"),
            UnaryOp::Cos => format!("cosf({x})"),
            UnaryOp::Trunc => format!("truncf({x})"),
        }
    }

    /// Rough floating-point operations per element (for reports).
    pub fn flops(self) -> u64 {
        match self {
            UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Abs | UnaryOp::Square | UnaryOp::Recip | UnaryOp::Trunc => 1,
            UnaryOp::Exp | UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Tanh => 4,
            UnaryOp::Sin | UnaryOp::Cos => 8,
            UnaryOp::Sigmoid | UnaryOp::Silu => 6,
            UnaryOp::Gelu | UnaryOp::GeluTanh => 10,
        }
    }
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 13] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Pow,
        BinaryOp::Ge,
        BinaryOp::Gt,
        BinaryOp::Le,
        BinaryOp::Lt,
        BinaryOp::Eq,
        BinaryOp::Ne,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Pow => "powf",
            BinaryOp::Ge => "ge",
            BinaryOp::Gt => "gt",
            BinaryOp::Le => "le",
            BinaryOp::Lt => "lt",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
        }
    }

    pub fn from_name(name: &str) -> Option<BinaryOp> {
        BinaryOp::ALL.into_iter().find(|b| b.name() == name)
    }

    pub fn eval(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Maximum => nan_max(a, b),
            BinaryOp::Minimum => nan_min(a, b),
            BinaryOp::Pow => a.powf(b),
            c => c.holds(a, b) as u8 as f64,
        }
    }

    /// Whether the op compares (its result is 1 or 0).
    pub fn is_comparison(self) -> bool {
        self.comparison_operator().is_some()
    }

    /// A comparison's operator in C and Rust (`>=`, ..); `None` for the other ops.
    pub fn comparison_operator(self) -> Option<&'static str> {
        match self {
            BinaryOp::Ge => Some(">="),
            BinaryOp::Gt => Some(">"),
            BinaryOp::Le => Some("<="),
            BinaryOp::Lt => Some("<"),
            BinaryOp::Eq => Some("=="),
            BinaryOp::Ne => Some("!="),
            _ => None,
        }
    }

    /// For a comparison, whether it holds of `(a, b)` (false for the other ops).
    #[inline]
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            BinaryOp::Ge => a >= b,
            BinaryOp::Gt => a > b,
            BinaryOp::Le => a <= b,
            BinaryOp::Lt => a < b,
            BinaryOp::Eq => a == b,
            BinaryOp::Ne => a != b,
            _ => false,
        }
    }

    #[inline]
    pub fn eval_f32(self, a: f32, b: f32) -> f32 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Maximum => nan_max(a, b),
            BinaryOp::Minimum => nan_min(a, b),
            BinaryOp::Pow => a.powf(b),
            c => c.holds(a, b) as u8 as f32,
        }
    }

    /// The op as a CUDA C expression in f32 over the variables `a` and `b`.
    pub fn cuda(self, a: &str, b: &str) -> String {
        match self {
            BinaryOp::Add => format!("({a} + {b})"),
            BinaryOp::Sub => format!("({a} - {b})"),
            BinaryOp::Mul => format!("({a} * {b})"),
            BinaryOp::Div => format!("({a} / {b})"),
            BinaryOp::Maximum => format!("fuse_max({a}, {b})"),
            BinaryOp::Minimum => format!("fuse_min({a}, {b})"),
            BinaryOp::Pow => format!("powf({a}, {b})"),
            c => {
                let op = c.comparison_operator().expect("the ops above are every one but the comparisons");
                format!("(({a}) {op} ({b}) ? 1.0f : 0.0f)")
            }
        }
    }

    pub fn flops(self) -> u64 {
        match self {
            BinaryOp::Pow => 8,
            _ => 1,
        }
    }
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    pub fn from_name(name: &str) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Reduces one row (the reference's arithmetic).
    pub fn eval(self, row: &[f64]) -> f64 {
        match self {
            ReduceOp::Sum => row.iter().sum(),
            ReduceOp::Mean => row.iter().sum::<f64>() / row.len() as f64,
            ReduceOp::Max => row.iter().copied().fold(f64::NEG_INFINITY, nan_max),
            ReduceOp::Min => row.iter().copied().fold(f64::INFINITY, nan_min),
        }
    }
}

/// torch's maximum: NaN when either operand is NaN (`f32::max` and C's `fmaxf` return the other one).
#[inline]
#[allow(clippy::eq_op)] // `a != a`: whether `a` is NaN, for any float type
pub fn nan_max<T: PartialOrd + Copy>(a: T, b: T) -> T {
    if a != a || a > b {
        a
    } else {
        b
    }
}

/// torch's minimum: NaN when either operand is NaN.
#[inline]
#[allow(clippy::eq_op)]
pub fn nan_min<T: PartialOrd + Copy>(a: T, b: T) -> T {
    if a != a || a < b {
        a
    } else {
        b
    }
}

/// erf by Abramowitz-Stegun 7.1.26 refined with one Newton step: |error| < 1e-12 on the reals, enough for
/// a reference that bf16/f16/f32 results are compared against.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let s = x.signum();
    let a = x.abs();
    if a > 6.0 {
        return s;
    }
    // Series for small |x|, continued fraction via erfc for large.
    let v = if a < 2.5 {
        // Maclaurin series: erf(a) = 2/sqrt(pi) * sum (-1)^n a^(2n+1) / (n! (2n+1))
        let mut sum = 0.0;
        let mut term = a;
        let a2 = a * a;
        let mut n = 0.0;
        for _ in 0..200 {
            let t = term / (2.0 * n + 1.0);
            sum += t;
            if t.abs() <= 1e-17 * sum.abs() {
                break;
            }
            n += 1.0;
            term *= -a2 / n;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(a) = exp(-a^2)/sqrt(pi) * 1/(a + 1/2/(a + 1/(a + 3/2/(a + ...)))) (Lentz-free, fixed depth)
        let mut f = a;
        for k in (1..60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    };
    s * v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        let known = [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (-1.0, -0.842_700_792_949_714_9),
        ];
        for (x, want) in known {
            assert!((erf(x) - want).abs() < 1e-12, "erf({x}) = {} want {want}", erf(x));
        }
    }

    #[test]
    fn names_round_trip() {
        for u in UnaryOp::ALL {
            assert_eq!(UnaryOp::from_name(u.name()), Some(u));
        }
        for b in BinaryOp::ALL {
            assert_eq!(BinaryOp::from_name(b.name()), Some(b));
        }
        for r in ReduceOp::ALL {
            assert_eq!(ReduceOp::from_name(r.name()), Some(r));
        }
    }
}
