//! View and layout calls: `x.reshape(&[..])`, `x.transpose(a, b)`, `x.permute(&[..])`, `x.narrow(axis, start,
//! len)`, `x.contiguous()`, `x.dim(i)` and `cat(&[&a, &b, ..], axis)`. What fixes the graph's structure must
//! be written out (axes, a permutation, the list of tensors to join, how many entries a shape has); sizes
//! may vary per call (literals, scalar parameters, `x.dim(i)`) and become graph arguments of the view node.

use super::expr::strip_parens;
use super::ops::ViewMethod;
use super::{Kind, Tracer, Value};
use crate::label::source_text;
use fuse_ir::view::{Axes, ViewOp, MAX_AXES};
use fuse_ir::{BinaryOp, NodeId, Op, UnaryOp};
use syn::punctuated::Punctuated;
use syn::token::Comma;
use syn::{Expr, ExprCall, ExprMethodCall, Lit, UnOp};

/// An integer literal, possibly negated: `1`, `-1`.
fn integer(e: &Expr) -> Option<i64> {
    match strip_parens(e) {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => i.base10_parse().ok(),
            _ => None,
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => integer(&u.expr).map(|v| -v),
        _ => None,
    }
}

/// The entries of `&[a, b, ..]` or `[a, b, ..]`.
fn array_entries(e: &Expr) -> Option<&Punctuated<Expr, Comma>> {
    match strip_parens(e) {
        Expr::Reference(r) if r.mutability.is_none() => array_entries(&r.expr),
        Expr::Array(a) => Some(&a.elems),
        _ => None,
    }
}

impl Tracer<'_> {
    /// `name`'s axis argument: an integer literal that fits the op (`i8`).
    pub(super) fn axis_literal(&mut self, e: &Expr, name: &str) -> Option<i8> {
        let axis = integer(e).and_then(|v| i8::try_from(v).ok());
        if axis.is_none() {
            self.diag.error_at(
                e,
                format!(
                    "the axis of `{name}` must be an integer literal such as `1` or `-1` (axes are fixed when the \
                     graph is built), not `{}`",
                    source_text(e)
                ),
            );
        }
        axis
    }

    /// A size: a non-negative integer literal (or `-1` where `allow_inferred`), a scalar parameter or
    /// `x.dim(i)`, possibly through a `let` name.
    pub(super) fn size(&mut self, e: &Expr, name: &str, allow_inferred: bool) -> Value {
        let literal = integer(e);
        if let Some(v) = literal {
            if v >= 0 || (allow_inferred && v == -1) {
                return Some(self.constant(v as f64));
            }
        }
        let id = self.expr(e)?;
        // Sizes and scalar parameters (fields of `self` among them), and arithmetic of them alone: computed on the
        // host for each call.
        let is_size = literal.is_none()
            && self.promote_fields(id)
            && self.kind(id) == Kind::Scalar
            && fuse_ir::plan::host_scalars(&self.graph)[id.index()];
        if !is_size {
            let inferred = if allow_inferred { " (or `-1` for the rest)" } else { "" };
            self.diag.error_at(
                e,
                format!(
                    "a size in `{name}` is an integer literal{inferred}, a `usize` parameter, `x.dim(i)` or \
                     arithmetic of those (`n * 2`, `x.dim(0) * x.dim(1)`), not `{}`",
                    source_text(e)
                ),
            );
            return None;
        }
        Some(id)
    }

    /// The method calls of [`ViewMethod`]; the arity was checked.
    pub(super) fn view_method(&mut self, method: ViewMethod, call: &ExprMethodCall, receiver: Value) -> Value {
        let name = call.method.to_string();
        let args: Vec<&Expr> = call.args.iter().collect();
        let (op, sizes): (Option<ViewOp>, Vec<Value>) = match method {
            ViewMethod::BroadcastAs => {
                let Some(entries) = array_entries(args[0]) else {
                    self.diag.error_at(
                        args[0],
                        format!(
                            "`broadcast_as` takes the shape written out as an array, `x.broadcast_as(&[d0, d1, ..])`, \
                             not `{}`",
                            source_text(args[0])
                        ),
                    );
                    return None;
                };
                if entries.len() > MAX_AXES {
                    self.diag.error_at(args[0], format!("at most {MAX_AXES} axes, found {}", entries.len()));
                    return None;
                }
                let sizes = entries.iter().map(|e| self.size(e, "broadcast_as", false)).collect();
                (Some(ViewOp::BroadcastAs { rank: entries.len() as u8 }), sizes)
            }
            ViewMethod::Reshape => {
                let Some(entries) = array_entries(args[0]) else {
                    self.diag.error_at(
                        args[0],
                        format!(
                            "`reshape` takes the new shape written out as an array, `x.reshape(&[d0, d1, ..])`, not `{}`: \
                             each entry an integer literal, a `usize` parameter or `x.dim(i)`",
                            source_text(args[0])
                        ),
                    );
                    return None;
                };
                if entries.len() > MAX_AXES {
                    self.diag
                        .error_at(args[0], format!("`reshape` makes at most {MAX_AXES} axes, found {}", entries.len()));
                    return None;
                }
                let sizes = entries.iter().map(|e| self.size(e, "reshape", true)).collect();
                (Some(ViewOp::Reshape { rank: entries.len() as u8 }), sizes)
            }
            ViewMethod::Transpose => {
                let (a, b) = (self.axis_literal(args[0], &name), self.axis_literal(args[1], &name));
                (a.zip(b).map(|(a, b)| ViewOp::Transpose { a, b }), vec![])
            }
            ViewMethod::Permute => (self.permutation(args[0]).map(ViewOp::Permute), vec![]),
            ViewMethod::Narrow => {
                let axis = self.axis_literal(args[0], &name);
                let sizes = vec![self.size(args[1], "narrow", false), self.size(args[2], "narrow", false)];
                (axis.map(|axis| ViewOp::Narrow { axis }), sizes)
            }
            ViewMethod::Unsqueeze => (self.axis_literal(args[0], &name).map(|axis| ViewOp::Unsqueeze { axis }), vec![]),
            ViewMethod::Squeeze => (self.axis_literal(args[0], &name).map(|axis| ViewOp::Squeeze { axis }), vec![]),
            ViewMethod::Contiguous => (Some(ViewOp::Contiguous), vec![]),
            ViewMethod::Dim => (self.axis_literal(args[0], &name).map(|axis| ViewOp::Dim { axis }), vec![]),
            ViewMethod::SliceSet => return self.slice_set(call, receiver),
        };
        let x = self.tensor_operand(receiver?, &call.receiver, &name);
        let mut operands = vec![x?];
        for s in sizes {
            operands.push(s?);
        }
        let kind = if method == ViewMethod::Dim { Kind::Scalar } else { Kind::Tensor };
        let id = self.push(Op::View(op?), &operands, call, kind);
        if method == ViewMethod::Dim {
            self.integers.insert(id);
        }
        Some(id)
    }

    /// `let (a, b, ..) = x.chunk(n, axis);` with `n` the names bound: candle's chunks, each a `narrow` of
    /// `x.dim(axis) / n` entries (the first `x.dim(axis) % n` one more), their sizes computed on the host.
    pub(super) fn chunk_parts(&mut self, call: &ExprMethodCall, n: usize) -> Vec<Value> {
        let args: Vec<&Expr> = call.args.iter().collect();
        let x = self.expr(&call.receiver);
        if args.len() != 2 || integer(args[0]) != Some(n as i64) {
            self.diag.error_at(
                call,
                format!(
                    "bind `x.chunk({n}, axis)` to {n} names, `let (a, b) = x.chunk(2, -1);`: the count is written out"
                ),
            );
            return vec![None; n];
        }
        let axis = self.axis_literal(args[1], "chunk");
        let (Some(x), Some(axis)) = (x.and_then(|x| self.tensor_operand(x, &call.receiver, "chunk")), axis) else {
            return vec![None; n];
        };
        let scalar = |t: &mut Self, op: Op, args: &[NodeId]| t.push(op, args, call, Kind::Scalar);
        let dim = scalar(self, Op::View(ViewOp::Dim { axis }), &[x]);
        let count = self.constant(n as f64);
        let quotient = scalar(self, Op::Binary(BinaryOp::Div), &[dim, count]);
        let base = scalar(self, Op::Unary(UnaryOp::Trunc), &[quotient]);
        let whole = scalar(self, Op::Binary(BinaryOp::Mul), &[base, count]);
        let extra = scalar(self, Op::Binary(BinaryOp::Sub), &[dim, whole]);
        (0..n)
            .map(|i| {
                let i = self.constant(i as f64);
                let longer = scalar(self, Op::Binary(BinaryOp::Gt), &[extra, i]);
                let len = scalar(self, Op::Binary(BinaryOp::Add), &[base, longer]);
                let before = scalar(self, Op::Binary(BinaryOp::Mul), &[base, i]);
                let shift = scalar(self, Op::Binary(BinaryOp::Minimum), &[extra, i]);
                let start = scalar(self, Op::Binary(BinaryOp::Add), &[before, shift]);
                Some(self.push(Op::View(ViewOp::Narrow { axis }), &[x, start, len], call, Kind::Tensor))
            })
            .collect()
    }

    /// `dest.slice_set(&src, axis, offset)`: writes into `dest` in place, so `dest` must be an argument (or a
    /// field) of the function, or a view of one that is always strides over it (`cache.narrow(0, b, 1)`:
    /// `Graph::written_argument`); that nothing else reads it is checked once the body is traced.
    fn slice_set(&mut self, call: &ExprMethodCall, receiver: Value) -> Value {
        let args: Vec<&Expr> = call.args.iter().collect();
        let axis = self.axis_literal(args[1], "slice_set");
        // The offset: a size, or a u32 tensor holding the position (read where the write runs).
        let (offset, at_tensor) = match self.tensor_valued(args[2]) {
            Some(id) => (Some(id), true),
            None => (self.size(args[2], "slice_set", false), false),
        };
        let src = self.expr(args[0]).and_then(|id| self.tensor_operand(id, args[0], "slice_set"));
        let dest = self.tensor_operand(receiver?, &call.receiver, "slice_set")?;
        if self.graph.written_argument(dest).is_none() {
            self.diag.error_at(
                &call.receiver,
                format!(
                    "`slice_set` writes into `{}` in place, so it must be an argument or a field of the function (memory \
                     the caller owns), or a narrow, transpose, permute, unsqueeze or squeeze of one, not a value computed here",
                    source_text(&call.receiver)
                ),
            );
            return None;
        }
        let id = self.push(
            Op::View(ViewOp::SliceSet { axis: axis?, at_tensor }),
            &[dest, src?, offset?],
            call,
            Kind::Tensor,
        );
        self.writes.push((id, syn::spanned::Spanned::span(call)));
        Some(id)
    }

    /// The node of `e` when it is a tensor (a parameter or a value computed here), without reporting anything
    /// for other expressions (literals, scalar parameters, `x.dim(i)`), which their own rules trace.
    fn tensor_valued(&mut self, e: &Expr) -> Option<NodeId> {
        let name = match strip_parens(e) {
            Expr::Reference(r) => match strip_parens(&r.expr) {
                Expr::Path(p) => p.path.get_ident()?.to_string(),
                _ => return None,
            },
            Expr::Path(p) => p.path.get_ident()?.to_string(),
            _ => return None,
        };
        match self.lookup(&name)? {
            super::Binding::Value(id) if self.kind(id) == Kind::Tensor => Some(id),
            _ => None,
        }
    }

    /// `&[2, 0, 1]`: every axis once, as integer literals.
    fn permutation(&mut self, e: &Expr) -> Option<Axes> {
        let usage = "write the new order of the axes as integer literals, e.g. `x.permute(&[0, 2, 1, 3])`";
        let Some(entries) = array_entries(e) else {
            self.diag.error_at(e, format!("`permute` takes an array written out, not `{}`: {usage}", source_text(e)));
            return None;
        };
        let axes: Option<Vec<usize>> =
            entries.iter().map(|a| integer(a).and_then(|v| usize::try_from(v).ok())).collect();
        let Some(axes) = axes else {
            self.diag.error_at(e, format!("`permute` takes non-negative integer literals: {usage}"));
            return None;
        };
        let mut sorted = axes.clone();
        sorted.sort_unstable();
        if sorted != (0..axes.len()).collect::<Vec<_>>() {
            self.diag
                .error_at(e, format!("`{}` is not a permutation: each axis 0..{} once", source_text(e), axes.len()));
            return None;
        }
        let stored = Axes::new(&axes);
        if stored.is_none() {
            self.diag.error_at(e, format!("`permute` takes at most {MAX_AXES} axes, found {}", axes.len()));
        }
        stored
    }

    /// `cat(&[&a, &b, ..], axis)`; the arity was checked.
    pub(super) fn cat(&mut self, call: &ExprCall) -> Value {
        let (list, axis) = (&call.args[0], &call.args[1]);
        let Some(entries) = array_entries(list) else {
            self.diag.error_at(
                list,
                format!(
                    "`cat` takes the tensors written out as an array, `cat(&[&a, &b], axis)`, not `{}`",
                    source_text(list)
                ),
            );
            self.expr(list);
            return None;
        };
        let axis = self.axis_literal(axis, "cat");
        if entries.is_empty() || entries.len() > u8::MAX as usize {
            self.diag.error_at(list, format!("`cat` joins 1 to 255 tensors, found {}", entries.len()));
            return None;
        }
        let parts: Vec<Value> = entries
            .iter()
            .map(|e| {
                let id = self.expr(e)?;
                self.tensor_operand(id, e, "cat")
            })
            .collect();
        let parts: Vec<NodeId> = parts.into_iter().collect::<Option<_>>()?;
        let op = ViewOp::Cat { axis: axis?, parts: parts.len() as u8 };
        Some(self.push(Op::View(op), &parts, call, Kind::Tensor))
    }
}
