//! Arithmetic on scalars and sizes: integers (`usize`/`i64` parameters, `x.dim(i)`, integer literals) divide
//! as Rust's integers do, and `as` converts between integers and floats (`(hidden as f32).sqrt()`,
//! `(x.dim(1) / 2) as f32`). The graph computes in real numbers; integer division is a division then `trunc`.

use super::expr::strip_parens;
use super::{Binding, Kind, Tracer, Value};
use crate::label::source_text;
use fuse_ir::view::ViewOp;
use fuse_ir::{BinaryOp, Graph, InputKind, NodeId, Op, UnaryOp};
use syn::{Expr, ExprCast, ExprIf, Lit, Type, UnOp};

const FLOAT_TYPES: [&str; 2] = ["f32", "f64"];
const INTEGER_TYPES: [&str; 8] = ["usize", "isize", "u64", "i64", "u32", "i32", "u16", "i16"];

fn type_name(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.get_ident().map(|i| i.to_string()),
        Type::Paren(p) => type_name(&p.elem),
        _ => None,
    }
}

impl Tracer<'_> {
    /// Whether `e` (traced as `id`) is an integer: an integer literal (a float literal is not, whatever its
    /// value), or a node recorded as one.
    pub(super) fn is_integer(&self, e: &Expr, id: NodeId) -> bool {
        match strip_parens(e) {
            Expr::Lit(l) => matches!(l.lit, Lit::Int(_)),
            Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) && matches!(strip_parens(&u.expr), Expr::Lit(_)) => {
                self.is_integer(&u.expr, id)
            }
            _ => self.integers.contains(&id),
        }
    }

    /// `id = a op b` of two integer scalars: an integer, truncated after a division.
    pub(super) fn integer_result(&mut self, op: BinaryOp, id: NodeId, node: &impl quote::ToTokens) -> NodeId {
        let id = if op == BinaryOp::Div { self.push(Op::Unary(UnaryOp::Trunc), &[id], node, Kind::Scalar) } else { id };
        self.integers.insert(id);
        id
    }

    /// `x as T` for a scalar `x`: to a float type, the same number read as a real (a node of its own, so that
    /// a later `/` does not truncate); to an integer type, truncated unless it is one already.
    pub(super) fn cast(&mut self, c: &ExprCast) -> Value {
        let x = self.expr(&c.expr)?;
        let target = type_name(&c.ty).unwrap_or_default();
        if self.kind(x) != Kind::Scalar {
            self.diag.error_at(
                c.as_token,
                format!(
                    "`as` converts numbers (sizes and scalar parameters), and `{}` is a tensor: to change a tensor's \
                     dtype write `x.to_dtype(DType::F32)`",
                    source_text(&c.expr)
                ),
            );
            return None;
        }
        let integer = self.is_integer(&c.expr, x);
        if FLOAT_TYPES.contains(&target.as_str()) {
            if !integer {
                return Some(x);
            }
            // x + (-0.0) is x for every number, and a node no integer arithmetic made.
            let zero = self.constant(-0.0);
            return Some(self.push(Op::Binary(BinaryOp::Add), &[x, zero], c, Kind::Scalar));
        }
        if INTEGER_TYPES.contains(&target.as_str()) {
            if integer {
                return Some(x);
            }
            let t = self.push(Op::Unary(UnaryOp::Trunc), &[x], c, Kind::Scalar);
            self.integers.insert(t);
            return Some(t);
        }
        self.diag.error_at(
            &c.ty,
            format!(
                "`as {}` cannot be traced: a #[fuse] body converts numbers to `f32`, `f64`, `usize` or `i64`",
                source_text(&c.ty)
            ),
        );
        None
    }

    /// The value of a `bool` known while tracing: `true`, `false`, a `bool` parameter, or `!` of one.
    pub(super) fn flag_value(&self, e: &Expr) -> Option<bool> {
        match strip_parens(e) {
            Expr::Lit(l) => match &l.lit {
                Lit::Bool(b) => Some(b.value),
                _ => None,
            },
            Expr::Path(p) => match p.path.get_ident().and_then(|i| self.lookup(&i.to_string())) {
                Some(Binding::Flag(v)) => Some(v),
                _ => None,
            },
            Expr::Unary(u) if matches!(u.op, UnOp::Not(_)) => self.flag_value(&u.expr).map(|v| !v),
            _ => None,
        }
    }

    /// `if flag { a } else { b }` on a `bool` parameter: the branch of the graph being traced, alone.
    pub(super) fn if_flag(&mut self, i: &ExprIf) -> Value {
        let Some(value) = self.flag_value(&i.cond) else {
            self.diag.error_at(
                &i.cond,
                format!(
                    "`if` is traced only on a `bool` parameter (each value gives a graph of its own), not on `{}`: \
                     for elementwise choices write `mask.where_cond(a, b)`",
                    source_text(&i.cond)
                ),
            );
            return None;
        };
        let Some((_, otherwise)) = &i.else_branch else {
            self.diag.error_at(i, "an `if` in a #[fuse] body needs an `else`: both branches give the value");
            return None;
        };
        if value {
            self.scoped_block(&i.then_branch)
        } else {
            self.expr(otherwise)
        }
    }

    /// A size written with fields of `self` (`x.dim(2) / self.heads`): when `id` is arithmetic of sizes,
    /// scalar parameters, literals and fields, the fields in it become numbers (`InputKind::ScalarField`,
    /// checked at run time against their Rust type) and the arithmetic scalar. Returns whether it was.
    pub(super) fn promote_fields(&mut self, id: NodeId) -> bool {
        fn qualifies(g: &Graph, id: NodeId) -> bool {
            match g.op(id) {
                Op::Const(_) | Op::View(ViewOp::Dim { .. }) => true,
                Op::Input(k) => g.inputs.get(k as usize).is_some_and(|i| i.kind != InputKind::Tensor),
                Op::Unary(_) | Op::Binary(_) | Op::Where => g.node(id).args.iter().all(|&a| qualifies(g, a)),
                _ => false,
            }
        }
        if !qualifies(&self.graph, id) {
            return false;
        }
        let mut stack = vec![id];
        while let Some(n) = stack.pop() {
            match self.graph.op(n) {
                Op::Input(k) => {
                    let input = &mut self.graph.inputs[k as usize];
                    if input.kind == InputKind::Field {
                        input.kind = InputKind::ScalarField;
                    }
                }
                Op::Unary(_) | Op::Binary(_) | Op::Where => stack.extend(self.graph.node(n).args.iter().copied()),
                _ => {}
            }
            self.kinds[n.index()] = Kind::Scalar;
        }
        true
    }
}
