//! Traces the body of a `#[fuse]` function into a [`Graph`]: statements, scopes and the result.
//!
//! Tracing never stops at the first mistake: an expression that cannot be traced reports its error and
//! yields a placeholder (`None`) that every later use accepts silently, so one build lists every mistake
//! once. Expressions live in `trace/expr.rs`, the names the language accepts in `trace/ops.rs`, and the
//! messages for syntax it does not accept in `trace/unsupported.rs`.

mod calls;
mod expr;
mod inline;
mod ops;
mod scalars;
mod sorts;
mod unsupported;
mod views;

use crate::diag::Diagnostics;
use crate::signature::{FnSpec, Returns};
use fuse_ir::graph::WriteConflict;
use fuse_ir::{Graph, InputKind, NodeId, Op};
pub use inline::Callee;
use syn::{Block, Expr, Local, Pat, Stmt, Type};

/// The traced function: its graph (inputs: the parameters in order, then each field of `self` in order of
/// first use) and the field expressions, which the generated code passes as arguments.
pub struct Traced {
    pub graph: Graph,
    pub fields: Vec<FieldUse>,
}

pub struct FieldUse {
    /// The user's expression at its first use, so a type error on the field points there.
    pub expr: syn::ExprField,
}

/// A traced value, or `None` for one whose error was already reported.
type Value = Option<NodeId>;

/// What the macro knows about a value's type, for errors it can give at build time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Tensor,
    Scalar,
    /// A field of `self`: a tensor or a scalar, known only at run time.
    Unknown,
}

#[derive(Clone, Copy)]
enum Binding {
    Value(NodeId),
    /// A `bool` parameter, with the value of the graph being traced.
    Flag(bool),
    /// A name whose definition failed: using it reports nothing more.
    Poisoned,
}

struct Tracer<'d> {
    graph: Graph,
    /// The kind of each node, indexed like `graph.nodes`.
    kinds: Vec<Kind>,
    /// Innermost scope last; each scope in binding order (a later binding shadows an earlier one).
    scopes: Vec<Vec<(String, Binding)>>,
    fields: Vec<FieldUse>,
    is_method: bool,
    /// `let mut` bindings, reported after the rest of the body: a loop or an assignment that needs the `mut`
    /// is the cause to fix first.
    needless_mut: Vec<(syn::token::Mut, syn::Ident)>,
    /// Each `slice_set` node and where it was written: its destination may have no other reader.
    writes: Vec<(NodeId, proc_macro2::Span)>,
    /// Scalar nodes that hold integers (`usize`/`i64` parameters, `x.dim(i)` and their `+ - * /`): `/` of two
    /// of them truncates, as Rust's integer division does. Literals are told apart by how they are written.
    integers: std::collections::HashSet<NodeId>,
    /// The functions of the `#[fuse]` impl block this one may call (inlined), and how deep such calls are.
    callees: &'d [Callee],
    depth: usize,
    diag: &'d mut Diagnostics,
}

/// Traces `body` of the function described by `spec` into a graph called `name` (`mlp`, `Block::forward`);
/// errors go to `diag`.
pub fn trace_fn<'d>(
    spec: &FnSpec,
    name: &str,
    body: &Block,
    diag: &'d mut Diagnostics,
    callees: &'d [Callee],
    flags: &[bool],
) -> Traced {
    let mut tracer = Tracer {
        graph: Graph::new(name),
        kinds: Vec::new(),
        scopes: vec![Vec::new()],
        fields: Vec::new(),
        is_method: spec.is_method,
        needless_mut: Vec::new(),
        writes: Vec::new(),
        integers: Default::default(),
        callees,
        depth: 0,
        diag,
    };
    let mut flags = flags.iter();
    for param in &spec.params {
        if param.flag {
            let value = flags.next().copied().unwrap_or(false);
            tracer.bind(param.ident.to_string(), Binding::Flag(value));
            continue;
        }
        let binding = match param.kind {
            Some(kind) => {
                let id = tracer.graph.input(&param.ident.to_string(), kind);
                tracer.record_kind(if kind == InputKind::Tensor { Kind::Tensor } else { Kind::Scalar });
                if param.integer && kind == InputKind::Scalar {
                    tracer.integers.insert(id);
                }
                Binding::Value(id)
            }
            None => Binding::Poisoned,
        };
        tracer.bind(param.ident.to_string(), binding);
    }
    tracer.function_body(body, spec.returns);
    for (mutability, ident) in std::mem::take(&mut tracer.needless_mut) {
        tracer.diag.error_at(
            mutability,
            format!("`let mut` is not needed: values are never changed in place; rebind with `let {ident} = ...;`"),
        );
    }
    tracer.check_writes();
    // A `let` never used leaves nodes no output needs; every parameter stays an input.
    let graph = tracer.graph.without_dead_nodes();
    Traced { graph, fields: tracer.fields }
}

impl Tracer<'_> {
    /// A `slice_set` destination that something else reads too would see old or new rows depending on the
    /// order the ops run in: an error at the write.
    fn check_writes(&mut self) {
        let users = self.graph.users();
        for (id, span) in std::mem::take(&mut self.writes) {
            let Some((argument, _)) = self.graph.written_argument(self.graph.node(id).args[0]) else { continue };
            let name = match self.graph.op(argument) {
                Op::Input(k) => self.graph.inputs[k as usize].name.clone(),
                _ => continue,
            };
            // A computed destination was reported where it was traced.
            let conflict = self.graph.write_conflict(id, &users);
            if matches!(conflict, Some(WriteConflict::IntoItself | WriteConflict::ReadBy(_))) {
                self.diag.error_span(
                    span,
                    format!(
                        "`{name}` is written in place by `slice_set` and read elsewhere in this function; read the \
                         result of `slice_set` instead (`let {name} = {name}.slice_set(..);`), so that every read comes after the write"
                    ),
                );
            }
        }
    }

    fn bind(&mut self, name: String, binding: Binding) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.push((name, binding));
        }
    }

    fn lookup(&self, name: &str) -> Option<Binding> {
        self.scopes.iter().rev().flat_map(|scope| scope.iter().rev()).find(|(n, _)| n == name).map(|(_, b)| *b)
    }

    /// Gives nodes created since the last call the kind `kind` (hash-consed nodes keep theirs).
    fn record_kind(&mut self, kind: Kind) {
        while self.kinds.len() < self.graph.nodes.len() {
            self.kinds.push(kind);
        }
    }

    fn kind(&self, id: NodeId) -> Kind {
        self.kinds.get(id.index()).copied().unwrap_or(Kind::Unknown)
    }

    /// The outermost block: statements, then the result (the tail, or `return ..;` as the last statement).
    fn function_body(&mut self, body: &Block, returns: Option<Returns>) {
        let Some((last, init)) = body.stmts.split_last() else {
            if returns.is_none() {
                return; // the signature's error already says what the function should return
            }
            self.diag.error_span(
                body.brace_token.span.join(),
                "a #[fuse] function needs a body that ends with its result, e.g. `Ok(x.exp())`",
            );
            return;
        };
        for stmt in init {
            self.stmt(stmt);
        }
        match last {
            Stmt::Expr(Expr::Return(ret), _) => match &ret.expr {
                Some(result) => self.result(result, returns),
                None => self.diag.error_at(ret, "`return;` returns nothing: return the result, e.g. `return Ok(h);`"),
            },
            Stmt::Expr(tail, None) => self.result(tail, returns),
            other => {
                self.stmt(other);
                if returns.is_none() {
                    return;
                }
                self.diag.error_span(
                    body.brace_token.span.close(),
                    "a #[fuse] function must end with its result: add a last line such as `Ok(h)` (no semicolon)",
                );
            }
        }
    }

    /// A block used as a statement or expression: its own scope; the value is its tail, if any.
    fn scoped_block(&mut self, block: &Block) -> Value {
        self.scopes.push(Vec::new());
        let value = match block.stmts.split_last() {
            Some((Stmt::Expr(tail, None), init)) => {
                init.iter().for_each(|s| self.stmt(s));
                self.expr(tail)
            }
            _ => {
                block.stmts.iter().for_each(|s| self.stmt(s));
                None
            }
        };
        self.scopes.pop();
        value
    }

    fn stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Local(local) => self.local(local),
            Stmt::Item(item) => self.diag.error_at(
                item,
                "items (fn, struct, use, ...) cannot be declared inside a #[fuse] function: move them outside it",
            ),
            Stmt::Macro(m) => unsupported::macro_call(&m.mac, self.diag),
            Stmt::Expr(Expr::Return(ret), _) => self.diag.error_span(
                ret.return_token.span,
                "`return` is only allowed as the last statement of a #[fuse] function: the whole body is one graph",
            ),
            Stmt::Expr(Expr::Block(block), _) if block.label.is_none() => {
                if let (Some(_), Some(Stmt::Expr(tail, None))) =
                    (self.scoped_block(&block.block), block.block.stmts.last())
                {
                    self.unused_value(tail);
                }
            }
            Stmt::Expr(expr, _) => {
                if self.expr(expr).is_some() {
                    self.unused_value(expr);
                }
            }
        }
    }

    fn unused_value(&mut self, expr: &Expr) {
        self.diag.error_at(
            expr,
            format!(
                "this value is computed and then dropped: bind it with `let name = {};` or remove it",
                crate::label::source_text(expr)
            ),
        );
    }

    fn local(&mut self, local: &Local) {
        if self.tuple_local(local) {
            return;
        }
        let value = match &local.init {
            Some(init) => {
                if let Some((else_token, _)) = &init.diverge {
                    self.diag
                        .error_at(else_token, "`let ... else` cannot be traced: bind the value with `let name = ...;`");
                }
                self.expr(&init.expr)
            }
            None => {
                self.diag.error_at(local, "a `let` needs a value here: write `let name = expression;`");
                None
            }
        };
        let (pat, annotation) = match &local.pat {
            Pat::Type(typed) => (&*typed.pat, Some(&*typed.ty)),
            pat => (pat, None),
        };
        let Some(name) = self
            .plain_name(pat, "patterns are not supported in #[fuse] `let`: bind one value to one name, `let h = ...;`")
        else {
            return;
        };
        if let (Some(ty), Some(id)) = (annotation, value) {
            self.check_annotation(&name, ty, id);
        }
        self.bind(name, value.map_or(Binding::Poisoned, Binding::Value));
    }

    /// `let (a, b) = (x, y);`: each name bound to its value, all values traced first (as Rust evaluates the
    /// tuple before binding). Returns whether `local` had that form.
    fn tuple_local(&mut self, local: &Local) -> bool {
        let (Pat::Tuple(names), Some(init)) = (&local.pat, &local.init) else { return false };
        if init.diverge.is_some() {
            return false;
        }
        let mut value = expr::strip_parens(&init.expr);
        if let Expr::Try(t) = value {
            value = expr::strip_parens(&t.expr);
        }
        let traced: Vec<Value> = match value {
            Expr::Tuple(values) if values.elems.len() == names.elems.len() => {
                values.elems.iter().map(|e| self.expr(e)).collect()
            }
            // `let (a, b) = x.chunk(2, -1);`: candle's chunks, as views.
            Expr::MethodCall(call) if call.method == "chunk" => self.chunk_parts(call, names.elems.len()),
            // `let (values, indices) = x.sort_last_dim(true);` and `= x.topk(k);`.
            Expr::MethodCall(call) if call.method == "sort_last_dim" || call.method == "topk" => {
                self.sorted_parts(call, names.elems.len())
            }
            _ => return false,
        };
        for (pat, value) in names.elems.iter().zip(traced) {
            let message = "in a tuple `let`, bind each value to a plain name: `let (a, b) = (x, y);`";
            if let Some(name) = self.plain_name(pat, message) {
                self.bind(name, value.map_or(Binding::Poisoned, Binding::Value));
            }
        }
        true
    }

    /// The name a `let` pattern binds, when it is a plain name (a needless `mut` is noted); otherwise reports
    /// `message` and binds the pattern's names as failed.
    fn plain_name(&mut self, pat: &Pat, message: &str) -> Option<String> {
        match pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                if let Some(m) = p.mutability {
                    self.needless_mut.push((m, p.ident.clone()));
                }
                Some(p.ident.to_string())
            }
            other => {
                self.diag.error_at(other, message);
                let mut names = Vec::new();
                crate::signature::bound_names(other, &mut names);
                names.into_iter().for_each(|n| self.bind(n.to_string(), Binding::Poisoned));
                None
            }
        }
    }

    /// `let h: Tensor = ...` / `let s: f32 = ...`: the annotation must fit what the macro knows.
    fn check_annotation(&mut self, name: &str, ty: &Type, id: NodeId) {
        let kind = self.kind(id);
        let claimed = if crate::signature::is_tensor_type(ty) {
            Kind::Tensor
        } else if crate::signature::is_scalar_type(ty) {
            Kind::Scalar
        } else {
            self.diag.error_at(
                ty,
                format!(
                    "unsupported type `{}` in #[fuse]: values are `Tensor` or scalars (`f32`, `f64`, `usize`, `i64`); \
                     write `let {name}: Tensor = ...` or drop the annotation",
                    crate::label::source_text(ty)
                ),
            );
            return;
        };
        if kind != Kind::Unknown && kind != claimed {
            let (is, says) = if kind == Kind::Tensor { ("a tensor", "Tensor") } else { ("a scalar", "f32") };
            self.diag.error_at(
                ty,
                format!("`{name}` is {is} here: write `let {name}: {says} = ...` or drop the annotation"),
            );
        }
    }

    /// The function's result: `Ok(h)`, `h`, `Ok((a, b))` or `(a, b)`, checked against the return type.
    fn result(&mut self, tail: &Expr, returns: Option<Returns>) {
        let inner = match expr::strip_ok(tail, self.diag) {
            Some(inner) => inner,
            None => return,
        };
        let elems: Vec<&Expr> = match (expr::strip_parens(inner), returns) {
            (Expr::Tuple(tuple), Some(Returns::Tuple(n))) => {
                if tuple.elems.len() != n {
                    self.diag.error_at(
                        tuple,
                        format!(
                            "the signature returns {n} tensors but this tuple has {}: return exactly {n}",
                            tuple.elems.len()
                        ),
                    );
                }
                tuple.elems.iter().collect()
            }
            (Expr::Tuple(tuple), Some(Returns::Tensor)) => {
                self.diag.error_at(
                    tuple,
                    format!(
                        "the signature returns one tensor but this is a tuple of {}: return one tensor, or change the \
                         return type to `Result<({})>`",
                        tuple.elems.len(),
                        vec!["Tensor"; tuple.elems.len()].join(", ")
                    ),
                );
                tuple.elems.iter().collect()
            }
            (Expr::Tuple(tuple), None) => tuple.elems.iter().collect(),
            (single, Some(Returns::Tuple(n))) => {
                self.diag.error_at(
                    single,
                    format!("the signature returns a tuple of {n} tensors: return them as a tuple, e.g. `Ok((a, b))`"),
                );
                vec![single]
            }
            (single, _) => vec![single],
        };
        let mut outputs = Vec::new();
        for elem in elems {
            let Some(id) = self.expr(elem) else { continue };
            if self.kind(id) == Kind::Scalar {
                self.diag.error_at(
                    elem,
                    format!(
                        "`{}` is a scalar, but a #[fuse] function returns tensors: compute a tensor from it, or return \
                         the scalar from ordinary code",
                        crate::label::source_text(elem)
                    ),
                );
            }
            outputs.push(id);
        }
        self.graph.outputs = outputs;
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod view_tests;
