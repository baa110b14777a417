//! The user's text of an expression, for node labels (run-time errors and reports quote it).
//!
//! `Span::source_text()` of a whole expression needs `Span::join`, which is unstable: on stable it yields
//! only the first token. So the text is rebuilt token by token (each token's own source text) and the gaps
//! between tokens are restored from their line/column positions: exact for an expression on one line, a
//! single space at each line break. Where positions are unknown (tokens made by another macro), it falls
//! back to the tokens' printed text.

use proc_macro2::{Delimiter, LineColumn, Span, TokenStream, TokenTree};
use quote::ToTokens;

/// The user's source text of `node`.
pub fn source_text(node: &impl ToTokens) -> String {
    let tokens = node.to_token_stream();
    let mut pieces = Vec::new();
    flatten(tokens.clone(), &mut pieces);
    rebuild(&pieces).unwrap_or_else(|| tokens_text(&tokens))
}

/// The tokens as printed by `proc_macro2` (spacing normalised), for messages about types and paths.
pub fn tokens_text(node: &impl ToTokens) -> String {
    node.to_token_stream().to_string()
}

struct Piece {
    text: String,
    start: LineColumn,
    end: LineColumn,
}

impl Piece {
    fn new(text: String, span: Span) -> Self {
        Piece { text, start: span.start(), end: span.end() }
    }
}

fn flatten(tokens: TokenStream, out: &mut Vec<Piece>) {
    for tree in tokens {
        match tree {
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Brace => ("{", "}"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::None => ("", ""),
                };
                if !open.is_empty() {
                    out.push(Piece::new(open.to_string(), group.span_open()));
                }
                flatten(group.stream(), out);
                if !close.is_empty() {
                    out.push(Piece::new(close.to_string(), group.span_close()));
                }
            }
            other => {
                let span = other.span();
                let text = span.source_text().filter(|t| *t == other.to_string()).unwrap_or_else(|| other.to_string());
                out.push(Piece::new(text, span));
            }
        }
    }
}

/// Joins the pieces with the gaps the source had, or `None` if the positions cannot be trusted.
fn rebuild(pieces: &[Piece]) -> Option<String> {
    let mut text = String::new();
    let mut previous_end: Option<LineColumn> = None;
    for piece in pieces {
        // Line 0 or a zero-width token: made by a macro, not read from a file.
        if piece.start.line == 0 || (piece.start.line, piece.start.column) == (piece.end.line, piece.end.column) {
            return None;
        }
        if let Some(prev) = previous_end {
            if (piece.start.line, piece.start.column) < (prev.line, prev.column) {
                return None;
            }
            if piece.start.line == prev.line {
                text.push_str(&" ".repeat(piece.start.column - prev.column));
            } else {
                text.push(' ');
            }
        }
        text.push_str(&piece.text);
        previous_end = Some(piece.end);
    }
    Some(text)
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
    fn joins_lines_with_one_space() {
        let e: syn::Expr = syn::parse_str("a\n    .matmul(b)\n    .exp()").unwrap();
        assert_eq!(source_text(&e), "a .matmul(b) .exp()");
    }

    #[test]
    fn falls_back_to_token_text_without_positions() {
        let e: syn::Expr = syn::parse_quote!(a + b);
        assert_eq!(source_text(&e), "a + b");
    }
}
