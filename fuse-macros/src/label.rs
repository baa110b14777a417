//! The user's text of an expression, for node labels (run-time errors and reports quote it) and messages.
//!
//! `Span::source_text()` of a whole expression needs `Span::join`, which is unstable: on stable it yields
//! only the first token. So the text is rebuilt token by token (each token's own source text), with the
//! gaps between tokens restored from their line/column positions: exact on one line; across a line break,
//! the spacing Rust code is usually written with. Where positions are unknown (tokens made by another
//! macro, or a toolchain older than 1.88) every gap gets that usual spacing: `x.mean(-1)`, `&self.norm`.
//!
//! A delimiter's position is taken from its group's whole span: syn re-creates the groups of the
//! expressions it prints with one span for the whole group, so `span_open()` would cover all of `(..)`.

use proc_macro2::{Delimiter, LineColumn, Spacing, TokenStream, TokenTree};
use quote::ToTokens;

/// A node's label: the user's text of `node` and, where the compiler says, the file and line of its first
/// token (`x.matmul(w) at src/model.rs:12`), so that run-time errors quoting it say where it is.
pub fn node_label(node: &impl ToTokens) -> String {
    let tokens = node.to_token_stream();
    let text = source_text(&tokens);
    match location(&tokens) {
        Some(at) => format!("{text} at {at}"),
        None => text,
    }
}

/// `src/model.rs:12`, or `None` where the span has no real file (unit tests, tokens made by a macro).
fn location(tokens: &TokenStream) -> Option<String> {
    let span = tokens.clone().into_iter().next()?.span();
    let (file, line) = (span.file(), span.start().line);
    (line > 0 && !file.is_empty() && !file.starts_with('<')).then(|| format!("{file}:{line}"))
}

/// The user's source text of `node`, on one line.
pub fn source_text(node: &impl ToTokens) -> String {
    let mut pieces = Vec::new();
    flatten(node.to_token_stream(), &mut pieces);
    rebuild(&pieces).unwrap_or_else(|| normalised(&pieces))
}

/// The tokens as printed by `proc_macro2` (spacing normalised), for messages about types and paths.
pub fn tokens_text(node: &impl ToTokens) -> String {
    node.to_token_stream().to_string()
}

#[derive(Clone, Copy, PartialEq)]
enum Class {
    Open,
    Close,
    Word,
    Punct(char, Spacing),
}

struct Piece {
    text: String,
    class: Class,
    start: LineColumn,
    end: LineColumn,
}

fn flatten(tokens: TokenStream, out: &mut Vec<Piece>) {
    for tree in tokens {
        match tree {
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Brace => ("{", "}"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::None => {
                        flatten(group.stream(), out);
                        continue;
                    }
                };
                let (start, end) = (group.span().start(), group.span().end());
                let after_open = LineColumn { line: start.line, column: start.column + 1 };
                out.push(Piece { text: open.into(), class: Class::Open, start, end: after_open });
                flatten(group.stream(), out);
                let before_close = LineColumn { line: end.line, column: end.column.saturating_sub(1) };
                out.push(Piece { text: close.into(), class: Class::Close, start: before_close, end });
            }
            other => {
                let span = other.span();
                let class = match &other {
                    TokenTree::Punct(p) => Class::Punct(p.as_char(), p.spacing()),
                    _ => Class::Word,
                };
                // A literal as the user spelled it (`1e-5`, not `0.00001`).
                let printed = other.to_string();
                let text = span.source_text().filter(|t| *t == printed).unwrap_or(printed);
                out.push(Piece { text, class, start: span.start(), end: span.end() });
            }
        }
    }
}

fn position(p: LineColumn) -> (usize, usize) {
    (p.line, p.column)
}

/// Joins the pieces with the gaps the source had, or `None` if the positions cannot be trusted.
fn rebuild(pieces: &[Piece]) -> Option<String> {
    let mut text = String::new();
    for (k, piece) in pieces.iter().enumerate() {
        // Line 0 or a zero-width token: made by a macro, not read from a file.
        if piece.start.line == 0 || position(piece.start) == position(piece.end) {
            return None;
        }
        if k > 0 {
            let prev = &pieces[k - 1];
            if position(piece.start) < position(prev.end) {
                return None;
            }
            if piece.start.line == prev.end.line {
                text.push_str(&" ".repeat(piece.start.column - prev.end.column));
            } else if spaced(pieces, k) {
                text.push(' ');
            }
        }
        text.push_str(&piece.text);
    }
    Some(text)
}

/// The pieces with the spacing Rust code is usually written with.
fn normalised(pieces: &[Piece]) -> String {
    let mut text = String::new();
    for (k, piece) in pieces.iter().enumerate() {
        if k > 0 && spaced(pieces, k) {
            text.push(' ');
        }
        text.push_str(&piece.text);
    }
    text
}

/// Whether the usual spacing puts a space before `pieces[k]` (k > 0): none inside delimiters, around `.`
/// and `::`, before `,` `;` `?`, before the parentheses of a call or the brackets of an index, after a
/// prefix operator (`-1`, `&x`), or inside a multi-character operator (`+=`); one space elsewhere.
fn spaced(pieces: &[Piece], k: usize) -> bool {
    let (prev, cur) = (&pieces[k - 1], &pieces[k]);
    let is_prefix_operator = |j: usize| {
        matches!(pieces[j].class, Class::Punct('-' | '&' | '!' | '*', _))
            && (j == 0 || matches!(pieces[j - 1].class, Class::Open | Class::Punct(..)))
    };
    match (prev.class, cur.class) {
        (Class::Open, _) | (_, Class::Close) => false,
        (_, Class::Punct(',' | ';' | '.' | '?' | ':', _)) | (Class::Punct('.' | ':', _), _) => false,
        (Class::Punct(_, Spacing::Joint), Class::Punct(..)) => false,
        (Class::Word | Class::Close, Class::Open) => cur.text == "{",
        _ => !is_prefix_operator(k - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_users_spacing_on_one_line() {
        let e: syn::Expr = syn::parse_str("silu(x.matmul(&w_gate))  *  x.matmul( w_up )").unwrap();
        assert_eq!(source_text(&e), "silu(x.matmul(&w_gate))  *  x.matmul( w_up )");
        let e: syn::Expr = syn::parse_str("x + 1e-5").unwrap();
        assert_eq!(source_text(&e), "x + 1e-5");
    }

    #[test]
    fn joins_lines_with_the_usual_spacing() {
        let e: syn::Expr = syn::parse_str("a\n    .matmul(b)\n    .exp()").unwrap();
        assert_eq!(source_text(&e), "a.matmul(b).exp()");
        let e: syn::Expr = syn::parse_str("silu(h)\n    * h.matmul(\n        &w,\n    )").unwrap();
        assert_eq!(source_text(&e), "silu(h) * h.matmul(&w,)");
    }

    #[test]
    fn without_positions_uses_the_usual_spacing() {
        let cases: [(syn::Expr, &str); 6] = [
            (syn::parse_quote!(a + b), "a + b"),
            (syn::parse_quote!(x.mean(-1)), "x.mean(-1)"),
            (syn::parse_quote!(rms_norm(x, &self.norm, self.eps)), "rms_norm(x, &self.norm, self.eps)"),
            (syn::parse_quote!(x.to_dtype(DType::F32) - -y), "x.to_dtype(DType::F32) - -y"),
            (syn::parse_quote!(x.shape()[1] * (a - 1e-5)), "x.shape()[1] * (a - 1e-5)"),
            (syn::parse_quote!(-x.exp()?), "-x.exp()?"),
        ];
        for (e, want) in cases {
            assert_eq!(source_text(&e), want);
        }
    }

    #[test]
    fn a_label_has_no_location_without_a_file() {
        let e: syn::Expr = syn::parse_str("x.exp()").unwrap();
        assert_eq!(node_label(&e), "x.exp()");
    }
}
