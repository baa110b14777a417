//! Calls between the functions of one `#[fuse]` impl block: `self.norm(x)` (a method taking `&self`) or
//! `Self::norm(x, w)` (an associated function) is traced by inlining the callee's body into the caller's
//! graph, its parameters bound to the call's arguments. The planner then fuses across the call as if the
//! body had been written out in place.

use super::{Binding, Kind, Tracer, Value};
use crate::diag::Diagnostics;
use crate::signature::{check_signature, FnSpec, Returns};
use fuse_ir::InputKind;
use syn::{Block, Expr, ItemFn};

/// How deep inlined calls may nest: deeper is taken for recursion.
const MAX_DEPTH: usize = 8;

/// A function of the block that others may call: its signature as the macro checked it, and its body.
pub struct Callee {
    pub name: String,
    pub spec: FnSpec,
    pub body: Block,
}

impl Callee {
    /// Every function of the block whose signature `#[fuse]` accepts (others cannot be inlined).
    pub fn of_block(functions: &[ItemFn]) -> Vec<Callee> {
        functions
            .iter()
            .filter_map(|f| {
                let mut quiet = Diagnostics::new();
                let spec = check_signature(&f.sig, &mut quiet);
                (quiet.len() == 0).then(|| Callee { name: f.sig.ident.to_string(), spec, body: (*f.block).clone() })
            })
            .collect()
    }
}

impl<'d> Tracer<'d> {
    /// The block's function `name`, called as a method of `self` (`method`) or as `Self::name(..)`; borrowed
    /// from the block, not from the tracer, so tracing it may go on changing the tracer.
    pub(super) fn callee(&self, name: &str, method: bool) -> Option<&'d Callee> {
        self.callees.iter().find(|c| c.name == name && c.spec.is_method == method)
    }

    /// Traces a call of `callee` with `args` by tracing its body in a scope of its own; its result is the
    /// call's value (one tensor).
    pub(super) fn inline(
        &mut self,
        callee_name: &str,
        method: bool,
        args: &[&Expr],
        at: &impl quote::ToTokens,
    ) -> Value {
        let callee = self.callee(callee_name, method)?;
        // A `bool` parameter takes a `bool` known while tracing; the others are traced values.
        let is_flag = |i: usize| callee.spec.params.get(i).is_some_and(|p| p.flag);
        let values: Vec<Value> =
            args.iter().enumerate().map(|(i, a)| if is_flag(i) { None } else { self.expr(a) }).collect();
        if self.depth >= MAX_DEPTH {
            self.diag.error_at(
                at,
                format!(
                    "calls of the block's functions nest deeper than {MAX_DEPTH} here: is `{callee_name}` recursive?"
                ),
            );
            return None;
        }
        if values.len() != callee.spec.params.len() {
            self.diag.error_at(
                at,
                format!("`{callee_name}` takes {} arguments, found {}", callee.spec.params.len(), values.len()),
            );
            return None;
        }
        let returns = match callee.spec.returns {
            Some(Returns::Tensor) => Returns::Tensor,
            _ => {
                self.diag.error_at(
                    at,
                    format!(
                        "`{callee_name}` returns a tuple, and a call inside #[fuse] takes one tensor back: split it \
                         into functions of one result each"
                    ),
                );
                return None;
            }
        };
        let mut scope = Vec::new();
        for ((param, value), arg) in callee.spec.params.iter().zip(&values).zip(args) {
            if param.flag {
                let flag = self.flag_value(arg);
                if flag.is_none() {
                    self.diag.error_at(
                        arg,
                        format!(
                            "`{}` of `{callee_name}` is a `bool`: pass `true`, `false` or a `bool` parameter",
                            param.ident
                        ),
                    );
                }
                scope.push((param.ident.to_string(), flag.map_or(Binding::Poisoned, Binding::Flag)));
                continue;
            }
            let binding = match (*value, param.kind) {
                (Some(id), Some(kind)) => {
                    let want = if kind == InputKind::Tensor { Kind::Tensor } else { Kind::Scalar };
                    let got = self.kind(id);
                    if got != want && got != Kind::Unknown {
                        let what = if want == Kind::Tensor { "a tensor" } else { "a scalar" };
                        self.diag
                            .error_at(arg, format!("`{}` of `{callee_name}` is {what}: pass one here", param.ident));
                        Binding::Poisoned
                    } else {
                        if param.integer {
                            self.integers.insert(id);
                        }
                        Binding::Value(id)
                    }
                }
                _ => Binding::Poisoned,
            };
            scope.push((param.ident.to_string(), binding));
        }
        let caller_scopes = std::mem::replace(&mut self.scopes, vec![scope]);
        let caller_outputs = std::mem::take(&mut self.graph.outputs);
        self.depth += 1;
        self.function_body(&callee.body, Some(returns));
        self.depth -= 1;
        let result = std::mem::replace(&mut self.graph.outputs, caller_outputs);
        self.scopes = caller_scopes;
        result.first().copied()
    }
}
