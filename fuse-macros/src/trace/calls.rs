//! Method calls (`x.matmul(w)`, `x.sum(-1)`, `x.exp()`) and function calls (`silu(x)`, `rms_norm(x, w, eps)`):
//! the names the language accepts, checked for arity and operand kinds, turned into graph nodes.

use super::expr::{is_last_axis, is_self, plural, strip_parens};
use super::ops::{self, Function, Method};
use super::{Binding, Kind, Tracer, Value};
use crate::label::{node_label, source_text};
use fuse_ir::{DType, ModelOp, Op};
use syn::{Expr, ExprCall, ExprMethodCall};

impl Tracer<'_> {
    pub(super) fn method_call(&mut self, call: &ExprMethodCall) -> Value {
        let name = call.method.to_string();
        if is_self(&call.receiver) && self.callee(&name, true).is_some() {
            let args: Vec<&Expr> = call.args.iter().collect();
            return self.inline(&name, true, &args, call);
        }
        if is_self(&call.receiver) {
            let (receiver, dot, method) = (&call.receiver, &call.dot_token, &call.method);
            self.diag.error_at(
                quote::quote!(#receiver #dot #method),
                format!(
                    "methods of `self` cannot be traced (`self.{name}(..)`) unless they are in the same `#[fuse]` \
                     impl block (then they are inlined); inline what `{name}` computes, or call it outside the fused \
                     function and pass its result in"
                ),
            );
            self.trace_all(call.args.iter());
            return None;
        }
        if let Some(turbofish) = &call.turbofish {
            self.diag.error_at(turbofish, "generic arguments (`::<..>`) are not supported here: remove them");
        }
        let receiver = self.expr(&call.receiver);
        let Some(method) = Method::from_name(&name) else {
            let hint = match (ops::suggestion(&name), Function::from_name(&name)) {
                (Some(s), _) => format!("{s}; "),
                (None, Some(f)) => format!("`{name}` is a function here: write {}; ", f.usage()),
                (None, None) => String::new(),
            };
            self.diag.error_at(
                &call.method,
                format!(
                    "unknown method `{name}` in #[fuse]: {hint}the supported methods are {}",
                    ops::supported_methods()
                ),
            );
            self.trace_arguments_of_unknown_call(call.args.iter());
            return None;
        };
        if call.args.len() != method.arity() {
            self.diag.error_span(
                call.paren_token.span.join(),
                format!(
                    "`{name}` takes {} argument{}, found {}: write {}",
                    method.arity(),
                    plural(method.arity()),
                    call.args.len(),
                    method.usage()
                ),
            );
            // An array literal belongs to the call (`x.reshape(&[..])`): not traced on its own.
            self.trace_arguments_of_unknown_call(call.args.iter());
            return None;
        }
        let arg = call.args.first();
        match method {
            Method::Reduce(r) => {
                let axis = arg?;
                if !is_last_axis(axis) {
                    self.diag.error_at(
                        axis,
                        format!(
                            "`{name}` reduces the last axis only (and keeps it, with size 1): write `x.{name}(-1)`; \
                             for another axis write `x.{name}_keepdim(axis)`"
                        ),
                    );
                    return None;
                }
                let a = self.tensor_operand(receiver?, &call.receiver, &name)?;
                Some(self.push(Op::Reduce(r), &[a], call, Kind::Tensor))
            }
            Method::ReduceKeepdim(r) => {
                let axis = self.axis_literal(arg?, &name);
                let a = self.tensor_operand(receiver?, &call.receiver, &name)?;
                let axis = axis?;
                if axis == -1 {
                    return Some(self.push(Op::Reduce(r), &[a], call, Kind::Tensor));
                }
                // Swapped with the last axis (a view), reduced there, swapped back: the kept axis of size 1
                // lands where `axis` was.
                let swap = Op::View(fuse_ir::view::ViewOp::Transpose { a: axis, b: -1 });
                let t = self.push(swap, &[a], call, Kind::Tensor);
                let reduced = self.push(Op::Reduce(r), &[t], call, Kind::Tensor);
                Some(self.push(swap, &[reduced], call, Kind::Tensor))
            }
            Method::Cumsum => {
                let axis = self.axis_literal(arg?, &name);
                let a = self.tensor_operand(receiver?, &call.receiver, &name)?;
                let axis = axis?;
                let cumsum = Op::Model(ModelOp::Cumsum);
                if axis == -1 {
                    return Some(self.push(cumsum, &[a], call, Kind::Tensor));
                }
                // Swapped with the last axis (a view), summed along it, swapped back.
                let swap = Op::View(fuse_ir::view::ViewOp::Transpose { a: axis, b: -1 });
                let t = self.push(swap, &[a], call, Kind::Tensor);
                let sums = self.push(cumsum, &[t], call, Kind::Tensor);
                Some(self.push(swap, &[sums], call, Kind::Tensor))
            }
            Method::ArgSort => self.arg_sort(call, receiver),
            Method::Gather => self.gather(call, receiver),
            Method::Conv(spatial) => self.conv(call, receiver, spatial),
            Method::Argmax => {
                let axis = arg?;
                if !is_last_axis(axis) {
                    self.diag.error_at(
                        axis,
                        "`argmax` runs along the last axis only (and keeps it, with size 1): write `x.argmax(-1)`; for \
                         the other axis of a matrix, transpose it first: `x.t().argmax(-1)`",
                    );
                    return None;
                }
                let a = self.tensor_operand(receiver?, &call.receiver, &name)?;
                Some(self.push(Op::Model(ModelOp::Argmax), &[a], call, Kind::Tensor))
            }
            Method::ToDType => {
                let dtype = self.dtype_argument(arg?);
                let a = self.tensor_operand(receiver?, &call.receiver, &name)?;
                Some(self.push(Op::Cast(dtype?), &[a], call, Kind::Tensor))
            }
            Method::Transpose => {
                let a = self.tensor_operand(receiver?, &call.receiver, &name)?;
                Some(self.push(Op::Transpose, &[a], call, Kind::Tensor))
            }
            Method::View(v) => self.view_method(v, call, receiver),
            Method::Unary(u) => {
                let a = receiver?;
                let kind = self.kind(a);
                Some(self.push(Op::Unary(u), &[a], call, kind))
            }
            Method::MatMul => {
                let rhs_expr = arg?;
                let rhs = self.expr(rhs_expr);
                let a = self.tensor_operand(receiver?, &call.receiver, &name);
                let b = self.tensor_operand(rhs?, rhs_expr, &name);
                Some(self.push(Op::MatMul, &[a?, b?], call, Kind::Tensor))
            }
            Method::Powf => {
                let exponent_expr = arg?;
                let exponent = self.expr(exponent_expr)?;
                if self.kind(exponent) == Kind::Tensor {
                    self.diag.error_at(
                        exponent_expr,
                        format!(
                            "the exponent of `powf` is a literal, a scalar parameter or a field of `self`, but `{}` is a \
                             tensor: for a tensor exponent write `exp(log(x) * y)`",
                            source_text(exponent_expr)
                        ),
                    );
                    return None;
                }
                let a = receiver?;
                let kind = self.pointwise_kind(&[a, exponent]);
                Some(self.push(Op::Binary(fuse_ir::BinaryOp::Pow), &[a, exponent], call, kind))
            }
            Method::Clamp => {
                let (lo, hi) = (self.expr(&call.args[0]), self.expr(&call.args[1]));
                let (x, lo, hi) = (receiver?, lo?, hi?);
                let kind = self.pointwise_kind(&[x, lo]);
                let low = self.push(Op::Binary(fuse_ir::BinaryOp::Maximum), &[x, lo], call, kind);
                let kind = self.pointwise_kind(&[low, hi]);
                Some(self.push(Op::Binary(fuse_ir::BinaryOp::Minimum), &[low, hi], call, kind))
            }
            Method::WhereCond => {
                let (on_true, on_false) = (self.expr(&call.args[0]), self.expr(&call.args[1]));
                let args = [receiver?, on_true?, on_false?];
                let kind = self.pointwise_kind(&args);
                Some(self.push(Op::Where, &args, call, kind))
            }
            Method::Binary(op) => {
                let rhs = self.expr(arg?);
                let (a, b) = (receiver?, rhs?);
                let kind = self.pointwise_kind(&[a, b]);
                Some(self.push(Op::Binary(op), &[a, b], call, kind))
            }
        }
    }

    /// `DType::F32` (any path ending in `F32`, `F16` or `BF16`).
    fn dtype_argument(&mut self, e: &Expr) -> Option<DType> {
        let dtype = match strip_parens(e) {
            Expr::Path(p) if p.qself.is_none() => {
                p.path.segments.last().filter(|s| s.arguments.is_none()).and_then(|s| {
                    match s.ident.to_string().as_str() {
                        "F32" => Some(DType::F32),
                        "F16" => Some(DType::F16),
                        "BF16" => Some(DType::BF16),
                        _ => None,
                    }
                })
            }
            _ => None,
        };
        if dtype.is_none() {
            self.diag.error_at(
                e,
                format!(
                    "`to_dtype` takes `DType::F32`, `DType::F16` or `DType::BF16` written out, not `{}`",
                    source_text(e)
                ),
            );
        }
        dtype
    }

    pub(super) fn call(&mut self, call: &ExprCall) -> Value {
        let func = strip_parens(&call.func);
        let Expr::Path(path) = func else {
            self.diag.error_at(func, "only the named functions of #[fuse] can be called here, e.g. `silu(x)`");
            self.trace_all(call.args.iter());
            return None;
        };
        let Some(last) = path.path.segments.last().filter(|_| path.qself.is_none()) else {
            self.diag.error_at(path, "only the named functions of #[fuse] can be called here, e.g. `silu(x)`");
            return None;
        };
        let name = last.ident.to_string();
        // `Self::f(..)` in an impl block, `f(..)` in a module (unless a local name shadows it).
        let via_self = path.path.segments.len() == 2 && path.path.segments[0].ident == "Self";
        let bare = path.path.segments.len() == 1 && self.lookup(&name).is_none();
        if (via_self || bare) && self.callee(&name, false).is_some() {
            let args: Vec<&Expr> = call.args.iter().collect();
            return self.inline(&name, false, &args, call);
        }
        if name == "Ok" {
            self.diag.error_at(
                call,
                "`Ok(..)` wraps the function's result: it is only allowed at the end of the body (or in \
                 `return Ok(..);` as the last statement)",
            );
            self.trace_all(call.args.iter());
            return None;
        }
        if !last.arguments.is_none() {
            self.diag.error_at(&last.arguments, "generic arguments are not supported here: remove them");
        }
        if let Some(binding) = path.path.get_ident().and_then(|ident| self.lookup(&ident.to_string())) {
            // A local name: a failed binding (already reported) or a value, which cannot be called.
            if let Binding::Value(_) = binding {
                self.diag.error_at(
                    path,
                    format!("`{name}` is a value, not a function: ops are called as `silu({name})` or `{name}.exp()`"),
                );
            }
            self.trace_all(call.args.iter());
            return None;
        }
        let Some(function) = Function::from_name(&name) else {
            let hint = match (ops::suggestion(&name), Method::from_name(&name)) {
                (Some(s), _) => format!("{s}; "),
                (None, Some(m)) => format!("`{name}` is a method here: write {}; ", m.usage()),
                (None, None) => format!(
                    "#[fuse] sees only this body, not the functions it calls: inline what `{name}` computes here, \
                     or make both functions of one `#[fuse]` impl block and call it as `Self::{name}(..)` (inlined); "
                ),
            };
            self.diag.error_at(
                path,
                format!(
                    "unknown function `{}` in #[fuse]: {hint}the supported functions are {}",
                    source_text(path),
                    ops::supported_functions()
                ),
            );
            self.trace_arguments_of_unknown_call(call.args.iter());
            return None;
        };
        if call.args.len() != function.arity() {
            self.diag.error_span(
                call.paren_token.span.join(),
                format!(
                    "`{name}` takes {} argument{}, found {}: write {}",
                    function.arity(),
                    plural(function.arity()),
                    call.args.len(),
                    function.usage()
                ),
            );
            self.trace_arguments_of_unknown_call(call.args.iter());
            return None;
        }
        if let Function::Attention { with_lens } = function {
            return self.attention(call, with_lens);
        }
        if function == Function::Cat {
            return self.cat(call);
        }
        let args: Vec<Value> = call.args.iter().map(|a| self.expr(a)).collect();
        match function {
            Function::Unary(u) => {
                let a = args[0]?;
                let kind = self.kind(a);
                Some(self.push(Op::Unary(u), &[a], call, kind))
            }
            Function::Binary(op) => {
                let (a, b) = (args[0]?, args[1]?);
                let kind = self.pointwise_kind(&[a, b]);
                Some(self.push(Op::Binary(op), &[a, b], call, kind))
            }
            Function::Softmax => {
                let x = self.tensor_operand(args[0]?, &call.args[0], &name)?;
                let id = self.graph.softmax(x, &node_label(call));
                self.record_kind(Kind::Tensor);
                Some(id)
            }
            Function::Cat => None,
            Function::RmsNorm => {
                let x = self.tensor_operand(args[0]?, &call.args[0], &name);
                let (weight, eps) = (args[1]?, args[2]?);
                let id = self.graph.rms_norm(x?, weight, eps, &node_label(call));
                self.record_kind(Kind::Tensor);
                Some(id)
            }
            Function::Embedding | Function::Rope | Function::AllReduceSum => {
                let op = match function {
                    Function::Embedding => ModelOp::Embedding,
                    Function::Rope => ModelOp::Rope,
                    _ => ModelOp::AllReduceSum,
                };
                let tensors = self.tensor_operands(&args, call, &name)?;
                Some(self.push(Op::Model(op), &tensors, call, Kind::Tensor))
            }
            Function::Attention { .. } => unreachable!("traced by `attention` above"),
        }
    }

    /// Every argument of `call` as a tensor operand, each misuse reported; `None` if any is missing.
    fn tensor_operands(&mut self, args: &[Value], call: &ExprCall, name: &str) -> Option<Vec<fuse_ir::NodeId>> {
        let checked: Vec<Value> =
            args.iter().zip(&call.args).map(|(a, e)| a.and_then(|id| self.tensor_operand(id, e, name))).collect();
        checked.into_iter().collect()
    }

    /// `attention(q, k, v, scale, causal)` or `attention_len(q, k, v, lens, scale, causal)`: three tensors (four
    /// with `lens`, the u32 key count of each batch), a scalar scale, and `causal` written `true` or `false`
    /// (the mask is part of the graph, so it must be known when the graph is built).
    fn attention(&mut self, call: &ExprCall, with_lens: bool) -> Value {
        let name = if with_lens { "attention_len" } else { "attention" };
        let tensors = if with_lens { 4 } else { 3 };
        let args: Vec<Value> = call.args.iter().take(tensors + 1).map(|a| self.expr(a)).collect();
        let causal_expr = &call.args[tensors + 1];
        let causal = self.flag_value(causal_expr);
        if causal.is_none() {
            self.diag.error_at(
                causal_expr,
                format!(
                    "`causal` is `true`, `false` or a `bool` parameter here, not `{}`: the mask is part of the fused \
                     graph (a `bool` parameter gives one graph per value)",
                    source_text(causal_expr)
                ),
            );
        }
        let scale_expr = &call.args[tensors];
        if let Some(scale) = args[tensors] {
            if self.kind(scale) == Kind::Tensor {
                self.diag.error_at(
                    scale_expr,
                    format!(
                        "the scale of `{name}` is a literal, a scalar parameter or a field of `self`, but `{}` is a \
                         tensor: pass it as an `f32` parameter",
                        source_text(scale_expr)
                    ),
                );
                return None;
            }
        }
        let mut operands = self.tensor_operands(&args[..tensors], call, name)?;
        // The node's operands are q, k, v, scale, then lens: `attention`'s, with one more.
        operands.insert(3, args[tensors]?);
        Some(self.push(Op::Model(ModelOp::Attention { causal: causal?, with_lens }), &operands, call, Kind::Tensor))
    }
}
