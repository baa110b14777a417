//! The inner loops of row programs: one op over a tile of a row, in f32. Each op's loop is written out
//! (no per-element `match`) so the compiler can vectorise the cheap ones.

use super::math;
use crate::host::CpuData;
use fuse_ir::op::{nan_max, nan_min};
use fuse_ir::DType;
use fuse_ir::{BinaryOp, ReduceOp, UnaryOp};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// An operand of a binary op: a row tile, or one value broadcast along it.
#[derive(Clone, Copy)]
pub(crate) enum Lane<'a> {
    Row(&'a [f32]),
    Splat(f32),
}

#[inline(always)]
fn map1(src: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    for (o, &x) in out.iter_mut().zip(src) {
        *o = f(x);
    }
}

pub(crate) fn unary(op: UnaryOp, src: &[f32], out: &mut [f32]) {
    match op {
        UnaryOp::Neg => map1(src, out, |x| -x),
        UnaryOp::Exp => map1(src, out, math::exp),
        UnaryOp::Log => map1(src, out, f32::ln),
        UnaryOp::Sqrt => map1(src, out, f32::sqrt),
        UnaryOp::Rsqrt => map1(src, out, |x| 1.0 / x.sqrt()),
        UnaryOp::Tanh => map1(src, out, math::tanh),
        UnaryOp::Sigmoid => map1(src, out, |x| 1.0 / (1.0 + math::exp(-x))),
        UnaryOp::Silu => map1(src, out, |x| x / (1.0 + math::exp(-x))),
        UnaryOp::Relu => map1(src, out, |x| nan_max(x, 0.0)),
        UnaryOp::Abs => map1(src, out, f32::abs),
        UnaryOp::Square => map1(src, out, |x| x * x),
        UnaryOp::Recip => map1(src, out, |x| 1.0 / x),
        UnaryOp::Sin => map1(src, out, f32::sin),
        UnaryOp::Cos => map1(src, out, f32::cos),
        UnaryOp::Trunc => map1(src, out, f32::trunc),
        UnaryOp::Gelu => map1(src, out, math::gelu),
        UnaryOp::GeluTanh => map1(src, out, math::gelu_tanh),
    }
}

#[inline(always)]
fn map2(a: Lane<'_>, b: Lane<'_>, out: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    match (a, b) {
        (Lane::Row(a), Lane::Row(b)) => {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = f(x, y);
            }
        }
        (Lane::Row(a), Lane::Splat(y)) => {
            for (o, &x) in out.iter_mut().zip(a) {
                *o = f(x, y);
            }
        }
        (Lane::Splat(x), Lane::Row(b)) => {
            for (o, &y) in out.iter_mut().zip(b) {
                *o = f(x, y);
            }
        }
        (Lane::Splat(x), Lane::Splat(y)) => out.fill(f(x, y)),
    }
}

/// `out = a op b`; `out` has the tile's length when either operand is a row, else length 1.
pub(crate) fn binary(op: BinaryOp, a: Lane<'_>, b: Lane<'_>, out: &mut [f32]) {
    match op {
        BinaryOp::Add => map2(a, b, out, |x, y| x + y),
        BinaryOp::Sub => map2(a, b, out, |x, y| x - y),
        BinaryOp::Mul => map2(a, b, out, |x, y| x * y),
        BinaryOp::Div => map2(a, b, out, |x, y| x / y),
        BinaryOp::Maximum => map2(a, b, out, nan_max),
        BinaryOp::Minimum => map2(a, b, out, nan_min),
        BinaryOp::Pow => map2(a, b, out, f32::powf),
        c => map2(a, b, out, |x, y| c.holds(x, y) as u8 as f32),
    }
}

/// `where_cond`: the second lane where the first is not 0, else the third.
pub(crate) fn select([cond, on_true, on_false]: [Lane<'_>; 3], out: &mut [f32]) {
    let at = |l: &Lane<'_>, i: usize| match l {
        Lane::Row(r) => r[i],
        Lane::Splat(v) => *v,
    };
    for (i, o) in out.iter_mut().enumerate() {
        *o = if at(&cond, i) != 0.0 { at(&on_true, i) } else { at(&on_false, i) };
    }
}

/// Reduces a whole row; sums accumulate in f32 over eight lanes (vectorisable, and more accurate than
/// one running sum on long rows).
pub(crate) fn reduce(op: ReduceOp, row: &[f32]) -> f32 {
    match op {
        ReduceOp::Sum => sum(row),
        ReduceOp::Mean => sum(row) / row.len() as f32,
        ReduceOp::Max => row.iter().copied().fold(f32::NEG_INFINITY, nan_max),
        ReduceOp::Min => row.iter().copied().fold(f32::INFINITY, nan_min),
    }
}

fn sum(row: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut acc = [0.0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// A writable region of one output, in its dtype. Row programs write ids only by copying them (inference
/// refuses arithmetic on ids and float -> u32 casts), so a `U32` sink receives whole numbers.
pub(crate) enum Sink<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
    U32(&'a mut [u32]),
}

impl<'a> Sink<'a> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Sink::F32(s) => s.len(),
            Sink::F16(s) => s.len(),
            Sink::BF16(s) => s.len(),
            Sink::U32(s) => s.len(),
        }
    }

    /// Splits off the first `mid` elements (the rest stays in `self`).
    pub(crate) fn take_front(&mut self, mid: usize) -> Sink<'a> {
        fn split<'b, T>(s: &mut &'b mut [T], mid: usize) -> &'b mut [T] {
            let (front, back) = std::mem::take(s).split_at_mut(mid);
            *s = back;
            front
        }
        match self {
            Sink::F32(s) => Sink::F32(split(s, mid)),
            Sink::F16(s) => Sink::F16(split(s, mid)),
            Sink::BF16(s) => Sink::BF16(split(s, mid)),
            Sink::U32(s) => Sink::U32(split(s, mid)),
        }
    }

    /// Writes `src` at `at`, converting.
    #[inline]
    pub(crate) fn write(&mut self, at: usize, src: &[f32]) {
        let n = src.len();
        match self {
            Sink::F32(s) => s[at..at + n].copy_from_slice(src),
            Sink::F16(s) => s[at..at + n].convert_from_f32_slice(src),
            Sink::BF16(s) => s[at..at + n].convert_from_f32_slice(src),
            Sink::U32(s) => s[at..at + n].iter_mut().zip(src).for_each(|(o, &v)| *o = v as u32),
        }
    }

    /// Writes `len` copies of `v` at `at`.
    #[inline]
    pub(crate) fn fill(&mut self, at: usize, len: usize, v: f32) {
        match self {
            Sink::F32(s) => s[at..at + len].fill(v),
            Sink::F16(s) => s[at..at + len].fill(f16::from_f32(v)),
            Sink::BF16(s) => s[at..at + len].fill(bf16::from_f32(v)),
            Sink::U32(s) => s[at..at + len].fill(v as u32),
        }
    }
}

/// A zeroed buffer for an output of `shape`.
pub(crate) fn allocate(dtype: DType, shape: &[usize]) -> CpuData {
    CpuData::zeros(dtype, shape.iter().product())
}

/// [`allocate`] for a caller that writes every element before any is read (a GEMM group's outputs): no
/// zeros, and a large f32 vector is one kept from an earlier call (`recycle.rs`: no page faults).
pub(crate) fn allocate_for_overwrite(dtype: DType, shape: &[usize]) -> CpuData {
    CpuData::for_overwrite(dtype, shape.iter().product())
}

pub(crate) fn sink_of(data: &mut CpuData) -> Sink<'_> {
    match data.owned_mut() {
        CpuData::F32(v) => Sink::F32(v),
        CpuData::F16(v) => Sink::F16(v),
        CpuData::BF16(v) => Sink::BF16(v),
        CpuData::U32(v) => Sink::U32(v),
        CpuData::Borrowed(_) => unreachable!("owned_mut copies borrowed memory"),
        CpuData::Blocks(_) => unreachable!("no result is block-quantized (inference refuses every op writing one)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unary_matches_the_op_table() {
        let xs: Vec<f32> = (1..=37).map(|i| i as f32 * 0.173 - 2.9).collect();
        for op in UnaryOp::ALL {
            let mut out = vec![0.0; xs.len()];
            unary(op, &xs, &mut out);
            for (&x, &y) in xs.iter().zip(&out) {
                let want = op.eval(x as f64);
                let close = (y as f64 - want).abs() <= 5e-6 * want.abs() + 1e-12;
                assert!(close || (y.is_nan() && want.is_nan()), "{}({x}) = {y}, want {want}", op.name());
            }
        }
    }

    #[test]
    fn binary_broadcasts_either_side() {
        let a = [1.0, 2.0, 3.0];
        let mut out = [0.0; 3];
        binary(BinaryOp::Sub, Lane::Splat(10.0), Lane::Row(&a), &mut out);
        assert_eq!(out, [9.0, 8.0, 7.0]);
        binary(BinaryOp::Pow, Lane::Row(&a), Lane::Splat(2.0), &mut out);
        assert_eq!(out, [1.0, 4.0, 9.0]);
    }

    #[test]
    fn reductions_over_odd_lengths() {
        let row: Vec<f32> = (1..=17).map(|i| i as f32).collect();
        assert_eq!(reduce(ReduceOp::Sum, &row), 153.0);
        assert_eq!(reduce(ReduceOp::Mean, &row), 9.0);
        assert_eq!(reduce(ReduceOp::Max, &row), 17.0);
        assert_eq!(reduce(ReduceOp::Min, &row), 1.0);
        assert_eq!(reduce(ReduceOp::Sum, &[]), 0.0);
    }
}
