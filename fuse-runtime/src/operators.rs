//! `+ - * /` and unary `-` on tensors, returning `Result<Tensor>`: between tensors (owned or borrowed),
//! with `f32`/`f64`/`i32` on either side, and with a `Result<Tensor>` on either side so that
//! `(&a + &b)? * &c`, `(&a + &b) * &c` and `(&a + &b)? * 2` all work, as they do inside `#[fuse]`
//! (Rust's orphan rule allows no operator between a `Result` and a number: there, `?` first).

use crate::eager::{binary, unary, Operand};
use crate::{Result, Tensor};
use fuse_ir::{BinaryOp, UnaryOp};
use std::ops::{Add, Div, Mul, Neg, Sub};

macro_rules! tensor_op {
    ($trait:ident, $method:ident, $op:expr) => {
        tensor_op!(@pair $trait, $method, $op, &Tensor, &Tensor, |a: &Tensor, b: &Tensor| binary($op, Operand::Tensor(a), Operand::Tensor(b)));
        tensor_op!(@pair $trait, $method, $op, &Tensor, Tensor, |a: &Tensor, b: Tensor| binary($op, Operand::Tensor(a), Operand::Tensor(&b)));
        tensor_op!(@pair $trait, $method, $op, Tensor, &Tensor, |a: Tensor, b: &Tensor| binary($op, Operand::Tensor(&a), Operand::Tensor(b)));
        tensor_op!(@pair $trait, $method, $op, Tensor, Tensor, |a: Tensor, b: Tensor| binary($op, Operand::Tensor(&a), Operand::Tensor(&b)));
        tensor_op!(@scalar $trait, $method, $op, f32);
        tensor_op!(@scalar $trait, $method, $op, f64);
        // Integer literals, as `#[fuse]` bodies take them: `&x + 1` (an unsuffixed literal is an i32).
        tensor_op!(@scalar $trait, $method, $op, i32);
        tensor_op!(@pair $trait, $method, $op, Result<Tensor>, &Tensor, |a: Result<Tensor>, b: &Tensor| binary($op, Operand::Tensor(&a?), Operand::Tensor(b)));
        tensor_op!(@pair $trait, $method, $op, Result<Tensor>, Tensor, |a: Result<Tensor>, b: Tensor| binary($op, Operand::Tensor(&a?), Operand::Tensor(&b)));
        tensor_op!(@pair $trait, $method, $op, &Tensor, Result<Tensor>, |a: &Tensor, b: Result<Tensor>| binary($op, Operand::Tensor(a), Operand::Tensor(&b?)));
        tensor_op!(@pair $trait, $method, $op, Tensor, Result<Tensor>, |a: Tensor, b: Result<Tensor>| binary($op, Operand::Tensor(&a), Operand::Tensor(&b?)));
    };
    (@scalar $trait:ident, $method:ident, $op:expr, $s:ty) => {
        tensor_op!(@pair $trait, $method, $op, &Tensor, $s, |a: &Tensor, b: $s| binary($op, Operand::Tensor(a), Operand::Scalar(b as f64)));
        tensor_op!(@pair $trait, $method, $op, Tensor, $s, |a: Tensor, b: $s| binary($op, Operand::Tensor(&a), Operand::Scalar(b as f64)));
        tensor_op!(@pair $trait, $method, $op, $s, &Tensor, |a: $s, b: &Tensor| binary($op, Operand::Scalar(a as f64), Operand::Tensor(b)));
        tensor_op!(@pair $trait, $method, $op, $s, Tensor, |a: $s, b: Tensor| binary($op, Operand::Scalar(a as f64), Operand::Tensor(&b)));
    };
    (@pair $trait:ident, $method:ident, $op:expr, $lhs:ty, $rhs:ty, $body:expr) => {
        impl $trait<$rhs> for $lhs {
            type Output = Result<Tensor>;
            fn $method(self, rhs: $rhs) -> Result<Tensor> {
                ($body)(self, rhs)
            }
        }
    };
}

tensor_op!(Add, add, BinaryOp::Add);
tensor_op!(Sub, sub, BinaryOp::Sub);
tensor_op!(Mul, mul, BinaryOp::Mul);
tensor_op!(Div, div, BinaryOp::Div);

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        unary(UnaryOp::Neg, self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        unary(UnaryOp::Neg, &self)
    }
}
