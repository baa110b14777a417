//! The graph's text form: what `FUSE_DEBUG=5` prints and what the macro embeds in the user's binary.
//!
//! ```text
//! fn mlp(x: tensor, w: tensor, eps: scalar)
//! %0 = input 0 ; "x"
//! %3 = matmul %0 %1 ; "x.matmul(w)"
//! %4 = to_dtype f32 %3
//! return %4
//! ```

use crate::graph::{Graph, InputKind, NodeId};
use crate::model_op::ModelOp;
use crate::op::{BinaryOp, Op, ReduceOp, UnaryOp};
use crate::view::ViewOp;
use crate::DType;
use std::fmt::Write;

impl Graph {
    /// Prints the graph; [`Graph::parse`] reads it back to an equal graph.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let params: Vec<String> = self.inputs.iter().map(|i| format!("{}: {}", i.name, i.kind.name())).collect();
        let _ = writeln!(s, "fn {}({})", self.name, params.join(", "));
        for id in self.ids() {
            let n = self.node(id);
            let _ = write!(s, "%{} = ", id.0);
            match n.op {
                Op::Input(k) => {
                    let _ = write!(s, "input {k}");
                }
                Op::Const(c) => {
                    let _ = write!(s, "const {c:?}");
                }
                Op::Cast(d) => {
                    let _ = write!(s, "to_dtype {d}");
                }
                Op::Model(m) => s.push_str(&m.to_text()),
                Op::View(v) => {
                    s.push_str(v.name());
                    for p in v.params() {
                        let _ = write!(s, " {p}");
                    }
                }
                op => s.push_str(op.name()),
            }
            for a in &n.args {
                let _ = write!(s, " %{}", a.0);
            }
            let label = &self.labels[n.label as usize];
            if !label.is_empty() {
                let _ = write!(s, " ; {label:?}");
            }
            s.push('\n');
        }
        let outs: Vec<String> = self.outputs.iter().map(|o| format!("%{}", o.0)).collect();
        let _ = writeln!(s, "return {}", outs.join(", "));
        s
    }

    /// Reads the text form back. Errors name the line.
    pub fn parse(text: &str) -> Result<Graph, String> {
        let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
        let (_, header) = lines.next().ok_or("empty graph text")?;
        let header = header.trim().strip_prefix("fn ").ok_or("graph text must start with `fn NAME(...)`")?;
        let open = header.find('(').ok_or("missing `(` in the header")?;
        let close = header.rfind(')').ok_or("missing `)` in the header")?;
        let mut g = Graph::new(&header[..open]);
        let params = header[open + 1..close].trim();
        let mut declared = Vec::new();
        if !params.is_empty() {
            for p in params.split(", ") {
                let (name, kind) = p.rsplit_once(": ").ok_or_else(|| format!("bad parameter `{p}`"))?;
                let kind = match kind {
                    "tensor" => InputKind::Tensor,
                    "scalar" => InputKind::Scalar,
                    "field" => InputKind::Field,
                    "scalar_field" => InputKind::ScalarField,
                    _ => return Err(format!("bad parameter kind `{kind}`")),
                };
                declared.push((name.to_string(), kind));
            }
        }
        g.inputs =
            declared.iter().map(|(name, kind)| crate::graph::Input { name: name.clone(), kind: *kind }).collect();
        for (lineno, line) in lines {
            let err = |m: &str| format!("line {}: {m}: `{line}`", lineno + 1);
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("return") {
                g.outputs = rest
                    .split(',')
                    .map(|t| parse_ref(t.trim(), g.nodes.len()))
                    .collect::<Option<_>>()
                    .ok_or_else(|| err("bad output"))?;
                g.verify()?;
                return Ok(g);
            }
            let (body, label) = match line.split_once(" ; ") {
                Some((b, l)) => (b, unquote(l).ok_or_else(|| err("bad label"))?),
                None => (line, String::new()),
            };
            let (lhs, rhs) = body.split_once(" = ").ok_or_else(|| err("expected `%N = op`"))?;
            if parse_ref(lhs, g.nodes.len() + 1) != Some(NodeId(g.nodes.len() as u32)) {
                return Err(err("nodes must be numbered in order"));
            }
            let mut words = rhs.split_whitespace();
            let name = words.next().ok_or_else(|| err("missing op"))?;
            // Parameters (axes, a dtype, ..) come before the `%N` arguments.
            let rest: Vec<&str> = words.collect();
            let split = rest.iter().position(|w| w.starts_with('%')).unwrap_or(rest.len());
            let (params, refs) = rest.split_at(split);
            let mut words = params.iter().copied();
            let op = match name {
                "input" => Op::Input(words.next().and_then(|w| w.parse().ok()).ok_or_else(|| err("bad input index"))?),
                "const" => Op::Const(words.next().and_then(|w| w.parse().ok()).ok_or_else(|| err("bad constant"))?),
                "to_dtype" => Op::Cast(words.next().and_then(DType::parse).ok_or_else(|| err("bad dtype"))?),
                "matmul" => Op::MatMul,
                "t" => Op::Transpose,
                "where_cond" => Op::Where,
                _ if ViewOp::parse(name, params, refs.len()).is_some() => {
                    Op::View(ViewOp::parse(name, params, refs.len()).ok_or_else(|| err("bad view"))?)
                }
                _ => {
                    if let Some(u) = UnaryOp::from_name(name) {
                        Op::Unary(u)
                    } else if let Some(b) = BinaryOp::from_name(name) {
                        Op::Binary(b)
                    } else if let Some(r) = ReduceOp::from_name(name) {
                        Op::Reduce(r)
                    } else if let Some(m) = ModelOp::parse(name, &mut words) {
                        Op::Model(m)
                    } else {
                        return Err(err("unknown op"));
                    }
                }
            };
            // A view's parameters were read by `ViewOp::parse`.
            if !matches!(op, Op::View(_)) && words.next().is_some() {
                return Err(err("unexpected parameter"));
            }
            let args: Vec<NodeId> = refs
                .iter()
                .map(|w| parse_ref(w, g.nodes.len()))
                .collect::<Option<_>>()
                .ok_or_else(|| err("bad argument"))?;
            if args.len() != op.arity() {
                return Err(err("wrong number of arguments"));
            }
            if let Op::Input(k) = op {
                if k as usize >= g.inputs.len() {
                    return Err(err("input index out of range"));
                }
            }
            let before = g.nodes.len();
            g.push(op, &args, &label);
            if g.nodes.len() == before {
                return Err(err("duplicate node"));
            }
        }
        Err("graph text has no `return` line".into())
    }
}

/// `%N` with N < `limit`.
fn parse_ref(s: &str, limit: usize) -> Option<NodeId> {
    let n: u32 = s.strip_prefix('%')?.parse().ok()?;
    ((n as usize) < limit).then_some(NodeId(n))
}

/// Reads a string printed with `{:?}` (quotes, `\"`, `\\`, `\n`, `\t`, `\'`, `\u{..}`).
fn unquote(s: &str) -> Option<String> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '0' => out.push('\0'),
            c @ ('"' | '\\' | '\'') => out.push(c),
            'u' => {
                let rest: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let hex = rest.strip_prefix('{')?;
                out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Graph {
        let mut g = Graph::new("Block::forward");
        let x = g.input("x", InputKind::Tensor);
        let w = g.input("self.norm", InputKind::Field);
        let eps = g.input("eps", InputKind::Scalar);
        let wg = g.input("wg", InputKind::Tensor);
        let h = g.rms_norm(x, w, eps, "rms_norm(x, &self.norm, eps)");
        let wt = g.transpose(wg, "wg.t()");
        let m = g.matmul(h, wt, "h.matmul(&wg.t()) at src/model.rs:12");
        let c = g.constant(-1.5e-7);
        let y = g.binary(BinaryOp::Mul, m, c, "m * \"quoted\"\n\\");
        let y = g.cast(y, DType::F32, "y.to_dtype(DType::F32)");
        let s = g.softmax(y, "softmax(y)");
        g.outputs = vec![s, m];
        g
    }

    #[test]
    fn text_round_trips() {
        let g = sample();
        let text = g.to_text();
        let back = Graph::parse(&text).unwrap();
        assert_eq!(back.to_text(), text);
        assert_eq!(back.nodes, g.nodes);
        assert_eq!(back.inputs, g.inputs);
        assert_eq!(back.outputs, g.outputs);
        assert_eq!(back.name, "Block::forward");
        assert_eq!(back.labels, g.labels);
        assert!(text.contains("%11 = matmul %9 %10 ; \"h.matmul(&wg.t()) at src/model.rs:12\"\n"), "{text}");
    }

    #[test]
    fn parse_rejects_bad_text() {
        for bad in [
            "",
            "fn f(x: tensor)\n%0 = input 0\n",
            "fn f(x: tensor)\n%0 = input 3\nreturn %0",
            "fn f(x: tensor)\n%0 = input 0\n%1 = exp %5\nreturn %1",
            "fn f(x: tensor)\n%0 = input 0\n%1 = frob %0\nreturn %1",
        ] {
            assert!(Graph::parse(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn dead_nodes_are_dropped_and_arguments_kept() {
        let mut g = Graph::new("f");
        let x = g.input("x", InputKind::Tensor);
        let unused = g.input("unused", InputKind::Scalar);
        let dead = g.unary(UnaryOp::Exp, x, "exp(x)");
        let _dead2 = g.binary(BinaryOp::Mul, dead, unused, "dead * unused");
        let live = g.unary(UnaryOp::Tanh, x, "tanh(x)");
        g.outputs = vec![live];
        let p = g.without_dead_nodes();
        assert_eq!(p.to_text(), "fn f(x: tensor, unused: scalar)\n%0 = input 0 ; \"x\"\n%1 = input 1 ; \"unused\"\n%2 = tanh %0 ; \"tanh(x)\"\nreturn %2\n");
        p.verify().unwrap();
    }

    #[test]
    fn hash_consing_merges_identical_nodes() {
        let mut g = Graph::new("f");
        let x = g.input("x", InputKind::Tensor);
        let a = g.unary(UnaryOp::Exp, x, "exp(x)");
        let b = g.unary(UnaryOp::Exp, x, "exp(x) again");
        assert_eq!(a, b);
        assert_eq!(g.nodes.len(), 2);
    }
}
