//! The row order of `attn_q` / `attn_k` in GGUF files.
//!
//! Hugging Face's Llama rotates the two halves of each head (`x[i]` with `x[i + d/2]`); llama.cpp rotates
//! adjacent pairs (`x[2i]` with `x[2i + 1]`). Its converter therefore permutes the rows of the query and key
//! projections within each head: Hugging Face row `j * d/2 + i` (half `j`, pair `i`) is stored as GGUF row
//! `2i + j`. A decoder that uses the half-split rotary embedding must undo this when it loads the weights, as
//! transformers does, or the model writes nonsense.

use crate::error::{Error, Result};

/// Reorders the rows of a GGUF `attn_q` / `attn_k` matrix (`rows` x `cols`, row-major, `n_heads` heads of
/// `rows / n_heads` rows) back to Hugging Face's half-split order. Use the query head count for `attn_q` and
/// the key/value head count for `attn_k`.
pub fn unpermute_rotary_rows<T: Copy>(weight: &[T], rows: usize, cols: usize, n_heads: usize) -> Result<Vec<T>> {
    reorder_rows(weight, rows, cols, n_heads, |half, pair, half_len| (pair * 2 + half, half * half_len + pair))
}

/// The converter's permutation (Hugging Face order to GGUF order): the inverse of [`unpermute_rotary_rows`].
pub fn permute_rotary_rows<T: Copy>(weight: &[T], rows: usize, cols: usize, n_heads: usize) -> Result<Vec<T>> {
    reorder_rows(weight, rows, cols, n_heads, |half, pair, half_len| (half * half_len + pair, pair * 2 + half))
}

/// Copies, within each head, row `from` to row `to` for every `(from, to) = map(half, pair, head_dim / 2)`.
fn reorder_rows<T: Copy>(
    weight: &[T],
    rows: usize,
    cols: usize,
    n_heads: usize,
    map: impl Fn(usize, usize, usize) -> (usize, usize),
) -> Result<Vec<T>> {
    if rows.checked_mul(cols) != Some(weight.len()) {
        return Err(Error::BadShape {
            what: format!("rotary rows: {} values are not a {rows} x {cols} matrix", weight.len()),
        });
    }
    if n_heads == 0 || !rows.is_multiple_of(n_heads) || !(rows / n_heads).is_multiple_of(2) {
        return Err(Error::BadShape {
            what: format!("rotary rows: {rows} rows do not split into {n_heads} heads of an even size"),
        });
    }
    let head_dim = rows / n_heads;
    let half_len = head_dim / 2;
    let mut out = weight.to_vec();
    for head in 0..n_heads {
        let base = head * head_dim;
        for half in 0..2 {
            for pair in 0..half_len {
                let (from, to) = map(half, pair, half_len);
                let src = (base + from) * cols;
                let dst = (base + to) * cols;
                out[dst..dst + cols].copy_from_slice(&weight[src..src + cols]);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_head_of_four_rows() {
        // GGUF stores the pairs interleaved: a0 b0 a1 b1 (a = first half, b = second half of the head).
        let gguf = ["a0", "b0", "a1", "b1"];
        assert_eq!(unpermute_rotary_rows(&gguf, 4, 1, 1).unwrap(), ["a0", "a1", "b0", "b1"]);
        assert_eq!(permute_rotary_rows(&["a0", "a1", "b0", "b1"], 4, 1, 1).unwrap(), gguf);
    }

    #[test]
    fn two_heads_with_columns() {
        // Rows r (2 columns each: 10r, 10r + 1), 2 heads of 4 rows: each head is reordered on its own.
        let gguf: Vec<u32> = (0..8).flat_map(|r| [10 * r, 10 * r + 1]).collect();
        let hf = unpermute_rotary_rows(&gguf, 8, 2, 2).unwrap();
        let rows: Vec<u32> = hf.chunks(2).map(|row| row[0] / 10).collect();
        assert_eq!(rows, [0, 2, 1, 3, 4, 6, 5, 7]);
        assert!(hf.chunks(2).all(|row| row[1] == row[0] + 1), "columns stay with their row");
    }

    #[test]
    fn inverse_of_the_converters_permutation() {
        // What llama.cpp's converter does (numpy: reshape(h, 2, d/2, cols).swapaxes(1, 2)), written directly.
        let (heads, head_dim, cols) = (3, 8, 5);
        let hf: Vec<usize> = (0..heads * head_dim * cols).collect();
        let mut gguf = vec![0; hf.len()];
        for h in 0..heads {
            for i in 0..head_dim / 2 {
                for j in 0..2 {
                    let to = (h * head_dim + 2 * i + j) * cols;
                    let from = (h * head_dim + j * head_dim / 2 + i) * cols;
                    gguf[to..to + cols].copy_from_slice(&hf[from..from + cols]);
                }
            }
        }
        assert_eq!(permute_rotary_rows(&hf, heads * head_dim, cols, heads).unwrap(), gguf);
        assert_eq!(unpermute_rotary_rows(&gguf, heads * head_dim, cols, heads).unwrap(), hf);
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(unpermute_rotary_rows(&[0; 12], 4, 2, 1).is_err());
        assert!(unpermute_rotary_rows(&[0; 6], 6, 1, 4).is_err());
        assert!(unpermute_rotary_rows(&[0; 6], 6, 1, 2).is_err(), "heads of 3 rows");
        assert!(unpermute_rotary_rows(&[0; 4], 4, 1, 0).is_err());
    }
}
