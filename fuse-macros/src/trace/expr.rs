//! Expressions: each supported form becomes graph nodes labelled with the user's text of it. Calls of
//! methods and functions are in `calls.rs`.

use super::{unsupported, Binding, FieldUse, Kind, Tracer, Value};
use crate::diag::Diagnostics;
use crate::label::{node_label, source_text};
use fuse_ir::{InputKind, NodeId, Op, UnaryOp};
use syn::{BinOp, Expr, ExprBinary, ExprField, ExprPath, ExprUnary, Lit, Member, UnOp};

/// `Ok(inner)` gives `inner`, anything else itself; `None` if `Ok` has the wrong number of arguments.
pub(super) fn strip_ok<'e>(e: &'e Expr, diag: &mut Diagnostics) -> Option<&'e Expr> {
    if let Expr::Call(call) = strip_parens(e) {
        if path_ends_in(&call.func, "Ok") {
            if call.args.len() == 1 {
                return Some(&call.args[0]);
            }
            diag.error_span(
                call.paren_token.span.join(),
                "`Ok` wraps exactly one result: write `Ok(h)` or `Ok((a, b))`",
            );
            return None;
        }
    }
    Some(e)
}

/// Parentheses and invisible groups (from `macro_rules!`) change nothing.
pub(super) fn strip_parens(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip_parens(&p.expr),
        Expr::Group(g) => strip_parens(&g.expr),
        other => other,
    }
}

fn path_ends_in(e: &Expr, name: &str) -> bool {
    matches!(strip_parens(e), Expr::Path(p) if p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == name))
}

pub(super) fn is_self(e: &Expr) -> bool {
    matches!(strip_parens(e), Expr::Path(p) if p.qself.is_none() && p.path.is_ident("self"))
}

/// A number literal's value, if `e` is one.
fn number(e: &Expr) -> Option<f64> {
    match strip_parens(e) {
        Expr::Lit(l) => match &l.lit {
            Lit::Float(f) => f.base10_parse().ok(),
            Lit::Int(i) => i.base10_parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

/// `-1`, the only axis a reduction takes.
pub(super) fn is_last_axis(e: &Expr) -> bool {
    matches!(strip_parens(e), Expr::Unary(u) if matches!(u.op, UnOp::Neg(_))
        && matches!(strip_parens(&u.expr), Expr::Lit(l) if matches!(&l.lit, Lit::Int(i) if i.base10_digits() == "1")))
}

fn member_name(member: &Member) -> String {
    match member {
        Member::Named(ident) => ident.to_string(),
        Member::Unnamed(index) => index.index.to_string(),
    }
}

/// `[6, 4]`, `&[0; 3]`.
fn is_array_literal(e: &Expr) -> bool {
    match strip_parens(e) {
        Expr::Reference(r) => is_array_literal(&r.expr),
        Expr::Array(_) | Expr::Repeat(_) => true,
        _ => false,
    }
}

/// `EPS`, `HIDDEN_2`: the naming convention of a `const` or `static`.
fn is_constant_name(name: &str) -> bool {
    name.chars().any(|c| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

pub(super) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

impl Tracer<'_> {
    pub(super) fn expr(&mut self, e: &Expr) -> Value {
        match e {
            Expr::Path(p) => self.path_value(p),
            Expr::Field(f) => self.field(f),
            Expr::Lit(l) => match number(e) {
                Some(v) => Some(self.constant(v)),
                None => {
                    unsupported::literal(&l.lit, self.diag);
                    None
                }
            },
            Expr::Paren(p) => self.expr(&p.expr),
            Expr::Group(g) => self.expr(&g.expr),
            Expr::Try(t) => self.expr(&t.expr),
            Expr::Reference(r) => {
                if let Some(m) = &r.mutability {
                    self.diag.error_at(m, "`&mut` cannot be traced: values are never changed in place; write `&x`");
                }
                self.expr(&r.expr)
            }
            Expr::Unary(u) => self.unary(u),
            Expr::Binary(b) => self.binary(b),
            Expr::If(i) => self.if_flag(i),
            Expr::Cast(c) => self.cast(c),
            Expr::MethodCall(m) => self.method_call(m),
            Expr::Call(c) => self.call(c),
            Expr::Block(b) => {
                if let Some(label) = &b.label {
                    self.diag.error_at(label, "labelled blocks cannot be traced: remove the label");
                }
                self.scoped_block(&b.block)
            }
            Expr::Tuple(t) => {
                self.diag.error_at(
                    t,
                    "a tuple is only allowed as the function's result (`Ok((a, b))`): bind each value with its own `let`",
                );
                self.trace_all(t.elems.iter());
                None
            }
            other => {
                unsupported::expression(other, self.diag);
                None
            }
        }
    }

    /// Traces expressions only for the errors inside them (their values are not used).
    pub(super) fn trace_all<'e>(&mut self, exprs: impl Iterator<Item = &'e Expr>) {
        for e in exprs {
            self.expr(e);
        }
    }

    /// The arguments of a call the macro does not know, traced for the errors inside them. Array literals
    /// are skipped: they belong to that call (`x.view(&[6, 4])`), and "array literals cannot be traced"
    /// would send the user the wrong way.
    pub(super) fn trace_arguments_of_unknown_call<'e>(&mut self, args: impl Iterator<Item = &'e Expr>) {
        self.trace_all(args.filter(|a| !is_array_literal(a)));
    }

    pub(super) fn push(&mut self, op: Op, args: &[NodeId], node: &impl quote::ToTokens, kind: Kind) -> NodeId {
        let id = self.graph.push(op, args, &node_label(node));
        self.record_kind(kind);
        id
    }

    pub(super) fn constant(&mut self, value: f64) -> NodeId {
        let id = self.graph.constant(value);
        self.record_kind(Kind::Scalar);
        id
    }

    /// The kind of an elementwise result: a tensor if any operand is one.
    pub(super) fn pointwise_kind(&self, args: &[NodeId]) -> Kind {
        let kinds: Vec<Kind> = args.iter().map(|&a| self.kind(a)).collect();
        if kinds.contains(&Kind::Tensor) {
            Kind::Tensor
        } else if kinds.contains(&Kind::Unknown) {
            Kind::Unknown
        } else {
            Kind::Scalar
        }
    }

    /// `None` (after an error) if `operand` is known to be a scalar.
    pub(super) fn tensor_operand(&mut self, id: NodeId, operand: &Expr, op: &str) -> Option<NodeId> {
        if self.kind(id) == Kind::Scalar {
            self.diag.error_at(
                operand,
                format!("`{op}` needs a tensor, but `{}` is a scalar: pass a `&Tensor` here", source_text(operand)),
            );
            return None;
        }
        Some(id)
    }

    fn path_value(&mut self, p: &ExprPath) -> Value {
        if let Some(value) = float_constant(p) {
            return Some(self.constant(value));
        }
        let Some(ident) = p.path.get_ident().filter(|_| p.qself.is_none()) else {
            self.diag.error_at(
                p,
                format!(
                    "`{}` is not a value of this function: a #[fuse] body reads its parameters, its `let` names and \
                     fields of `self`; write a constant as a literal (e.g. `0.5`) or pass it as a scalar parameter",
                    source_text(p)
                ),
            );
            return None;
        };
        if ident == "self" {
            self.diag.error_at(p, "`self` is not a tensor: read one of its fields, e.g. `self.weight`");
            return None;
        }
        match self.lookup(&ident.to_string()) {
            Some(Binding::Value(id)) => Some(id),
            Some(Binding::Flag(_)) => {
                self.diag.error_at(
                    p,
                    format!(
                        "`{ident}` is a `bool`: it chooses between graphs, in `if {ident} {{ .. }} else {{ .. }}` or as \
                         attention's `causal`; it is not a value"
                    ),
                );
                None
            }
            Some(Binding::Poisoned) => None,
            None if is_constant_name(&ident.to_string()) => {
                self.diag.error_at(
                    p,
                    format!(
                        "cannot find `{ident}` in this #[fuse] function: the graph is built from this body alone, so a \
                         `const` or `static` outside it cannot be read; write its value here as a literal (e.g. \
                         `1e-5`), or take it as a scalar parameter (`{}: f64`) and pass `{ident}` from the caller",
                        ident.to_string().to_lowercase()
                    ),
                );
                None
            }
            None => {
                self.diag.error_at(
                    p,
                    format!(
                        "cannot find `{ident}` in this #[fuse] function: it is neither a parameter nor bound by a \
                         `let` before this point"
                    ),
                );
                None
            }
        }
    }

    /// `self.a.b`: an input of the graph, declared at its first use.
    fn field(&mut self, f: &ExprField) -> Value {
        let mut parts = vec![member_name(&f.member)];
        let mut base = strip_parens(&f.base);
        while let Expr::Field(inner) = base {
            parts.push(member_name(&inner.member));
            base = strip_parens(&inner.base);
        }
        if !is_self(base) {
            let base_value = self.expr(base);
            if base_value.is_some() {
                self.diag.error_at(
                    f,
                    format!(
                        "`{}` reads a field of `{}`, which is not `self`: inside #[fuse] only fields of `self` are \
                         inputs; pass that tensor as a `&Tensor` parameter instead",
                        source_text(f),
                        source_text(base)
                    ),
                );
            }
            return None;
        }
        if !self.is_method {
            self.diag.error_at(
                base,
                "`self` exists only in methods: put #[fuse] on a method taking `&self`, or pass the tensor as a parameter",
            );
            return None;
        }
        parts.reverse();
        let name = format!("self.{}", parts.join("."));
        let existing =
            self.graph.inputs.iter().position(|input| {
                matches!(input.kind, InputKind::Field | InputKind::ScalarField) && input.name == name
            });
        let id = match existing {
            // Hash-consing returns the input's node.
            Some(k) => self.graph.push(Op::Input(k as u32), &[], &name),
            None => {
                self.fields.push(FieldUse { expr: f.clone() });
                self.graph.input(&name, InputKind::Field)
            }
        };
        self.record_kind(Kind::Unknown);
        Some(id)
    }

    fn unary(&mut self, u: &ExprUnary) -> Value {
        match u.op {
            UnOp::Neg(_) => {
                if let Some(v) = number(&u.expr) {
                    return Some(self.constant(-v));
                }
                let a = self.expr(&u.expr)?;
                let kind = self.kind(a);
                let id = self.push(Op::Unary(UnaryOp::Neg), &[a], u, kind);
                if kind == Kind::Scalar && self.is_integer(&u.expr, a) {
                    self.integers.insert(id);
                }
                Some(id)
            }
            UnOp::Not(t) => {
                self.diag.error_at(
                    t,
                    "`!` cannot be traced: a fused graph has no booleans; for elementwise choices use \
                     `maximum(a, b)`, `minimum(a, b)` or `relu(x)`",
                );
                self.expr(&u.expr);
                None
            }
            UnOp::Deref(t) => {
                self.diag.error_at(t, "`*` (dereference) is not needed inside #[fuse]: write the value itself");
                self.expr(&u.expr);
                None
            }
            _ => {
                unsupported::expression(&Expr::Unary(u.clone()), self.diag);
                None
            }
        }
    }

    fn binary(&mut self, b: &ExprBinary) -> Value {
        let lhs = self.expr(&b.left);
        let rhs = self.expr(&b.right);
        let op = match b.op {
            BinOp::Add(_) => fuse_ir::BinaryOp::Add,
            BinOp::Sub(_) => fuse_ir::BinaryOp::Sub,
            BinOp::Mul(_) => fuse_ir::BinaryOp::Mul,
            BinOp::Div(_) => fuse_ir::BinaryOp::Div,
            other => {
                unsupported::binary_operator(&other, self.diag);
                return None;
            }
        };
        let (l, r) = (lhs?, rhs?);
        let kind = self.pointwise_kind(&[l, r]);
        let id = self.push(Op::Binary(op), &[l, r], b, kind);
        if kind == Kind::Scalar && self.is_integer(&b.left, l) && self.is_integer(&b.right, r) {
            return Some(self.integer_result(op, id, b));
        }
        Some(id)
    }
}

/// The value of a float type's named constant: `f32::NEG_INFINITY`, `f64::NAN`, `f32::MAX`,
/// `std::f32::consts::PI` (the last segments decide), as a graph literal like `0.5`.
fn float_constant(p: &ExprPath) -> Option<f64> {
    if p.qself.is_some() {
        return None;
    }
    let names: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
    let [.., ty, name] = names.as_slice() else { return None };
    let (ty, in_consts) = match (ty.as_str(), names.len()) {
        ("f32" | "f64", _) => (ty.as_str(), false),
        ("consts", n) if n >= 3 && matches!(names[n - 3].as_str(), "f32" | "f64") => (names[n - 3].as_str(), true),
        _ => return None,
    };
    let wide = ty == "f64";
    let pick = |narrow: f32, w: f64| Some(if wide { w } else { f64::from(narrow) });
    use std::f32::consts as c32;
    use std::f64::consts as c64;
    match (in_consts, name.as_str()) {
        (false, "INFINITY") => Some(f64::INFINITY),
        (false, "NEG_INFINITY") => Some(f64::NEG_INFINITY),
        (false, "NAN") => Some(f64::NAN),
        (false, "MAX") => pick(f32::MAX, f64::MAX),
        (false, "MIN") => pick(f32::MIN, f64::MIN),
        (false, "MIN_POSITIVE") => pick(f32::MIN_POSITIVE, f64::MIN_POSITIVE),
        (false, "EPSILON") => pick(f32::EPSILON, f64::EPSILON),
        (true, "PI") => pick(c32::PI, c64::PI),
        (true, "TAU") => pick(c32::TAU, c64::TAU),
        (true, "E") => pick(c32::E, c64::E),
        (true, "SQRT_2") => pick(c32::SQRT_2, c64::SQRT_2),
        (true, "FRAC_1_SQRT_2") => pick(c32::FRAC_1_SQRT_2, c64::FRAC_1_SQRT_2),
        (true, "FRAC_2_SQRT_PI") => pick(c32::FRAC_2_SQRT_PI, c64::FRAC_2_SQRT_PI),
        (true, "FRAC_PI_2") => pick(c32::FRAC_PI_2, c64::FRAC_PI_2),
        (true, "LN_2") => pick(c32::LN_2, c64::LN_2),
        (true, "LN_10") => pick(c32::LN_10, c64::LN_10),
        _ => None,
    }
}
