//! Sorting and picking by index: `x.arg_sort_last_dim(asc)`, `x.gather(&indexes, axis)` (candle's names),
//! and the two that give values and indices together, bound by name: `let (values, indices) =
//! x.sort_last_dim(asc);` (candle's) and `let (values, indices) = x.topk(k);` (torch's, the k largest,
//! largest first). Each is the model ops `arg_sort_last_dim` (`arg_topk` for topk) and `gather`.
//! Also the convolutions, `x.conv1d(&kernel, padding, stride, dilation, groups)` and `conv2d` (candle's):
//! `unfold` and a matmul (`Graph::conv`).

use super::{Kind, Tracer, Value};
use crate::label::source_text;
use fuse_ir::{ModelOp, Op};
use syn::{Expr, ExprMethodCall};

impl Tracer<'_> {
    /// The sort direction: `true`, `false` or a `bool` parameter (each value a graph of its own).
    fn ascending(&mut self, e: &Expr, name: &str) -> Option<bool> {
        let ascending = self.flag_value(e);
        if ascending.is_none() {
            self.diag.error_at(
                e,
                format!(
                    "`{name}`'s direction is `true` (ascending), `false` or a `bool` parameter here, not `{}`: the \
                     order is part of the fused kernel",
                    source_text(e)
                ),
            );
        }
        ascending
    }

    /// `x.arg_sort_last_dim(ascending)`: each row's indices in sorted order (u32).
    pub(super) fn arg_sort(&mut self, call: &ExprMethodCall, receiver: Value) -> Value {
        let ascending = self.ascending(&call.args[0], "arg_sort_last_dim");
        let x = self.tensor_operand(receiver?, &call.receiver, "arg_sort_last_dim")?;
        Some(self.push(Op::Model(ModelOp::ArgSort { ascending: ascending? }), &[x], call, Kind::Tensor))
    }

    /// `x.gather(&indexes, axis)`: along the last axis as is, along another swapped there and back (views).
    pub(super) fn gather(&mut self, call: &ExprMethodCall, receiver: Value) -> Value {
        let axis = self.axis_literal(&call.args[1], "gather");
        let indexes = self.expr(&call.args[0]).and_then(|id| self.tensor_operand(id, &call.args[0], "gather"));
        let x = self.tensor_operand(receiver?, &call.receiver, "gather")?;
        let id = self.graph.gather(x, indexes?, axis?, &crate::label::node_label(call));
        self.record_kind(Kind::Tensor);
        Some(id)
    }

    /// `x.conv1d(&kernel, padding, stride, dilation, groups)` (`spatial` 1) or `conv2d` (2): the sizes may be
    /// literals, `usize` parameters, fields or arithmetic of those.
    pub(super) fn conv(&mut self, call: &ExprMethodCall, receiver: Value, spatial: usize) -> Value {
        let name = format!("conv{spatial}d");
        let args: Vec<&Expr> = call.args.iter().collect();
        let kernel = self.expr(args[0]).and_then(|id| self.tensor_operand(id, args[0], &name));
        let sizes: Vec<Value> = args[1..].iter().map(|e| self.size(e, &name, false)).collect();
        let x = self.tensor_operand(receiver?, &call.receiver, &name)?;
        let sizes = [sizes[0]?, sizes[1]?, sizes[2]?, sizes[3]?];
        let id = self.graph.conv(x, kernel?, sizes, spatial, &crate::label::node_label(call));
        self.record_kind(Kind::Tensor);
        Some(id)
    }

    /// `let (values, indices) = x.sort_last_dim(ascending);` or `= x.topk(k);`: the indices of a sort (the
    /// first k of a descending one for topk) and the values they pick.
    pub(super) fn sorted_parts(&mut self, call: &ExprMethodCall, n: usize) -> Vec<Value> {
        let name = call.method.to_string();
        let usage = if name == "topk" { "x.topk(k)" } else { "x.sort_last_dim(ascending)" };
        if n != 2 || call.args.len() != 1 {
            self.diag.error_at(
                call,
                format!(
                    "bind `{usage}` to two names, its values and their indices: `let (values, indices) = {usage};`"
                ),
            );
            return vec![None; n];
        }
        let x = self.expr(&call.receiver).and_then(|x| self.tensor_operand(x, &call.receiver, &name));
        let (ascending, k) = if name == "topk" {
            (Some(false), Some(self.size(&call.args[0], "topk", false)))
        } else {
            (self.ascending(&call.args[0], &name), None)
        };
        let (Some(x), Some(ascending)) = (x, ascending) else { return vec![None, None] };
        let indices = match k {
            Some(Some(k)) => self.push(Op::Model(ModelOp::ArgTopK), &[x, k], call, Kind::Tensor),
            Some(None) => return vec![None, None],
            None => self.push(Op::Model(ModelOp::ArgSort { ascending }), &[x], call, Kind::Tensor),
        };
        let values = self.push(Op::Model(ModelOp::Gather), &[x, indices], call, Kind::Tensor);
        vec![Some(values), Some(indices)]
    }
}
