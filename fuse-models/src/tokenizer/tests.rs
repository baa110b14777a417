//! A tiny vocabulary in a GGUF image built by hand: the pieces of the tokenizer without the model file.

use super::*;
use crate::gguf::tests::Image;

fn string_array(items: &[&str]) -> Vec<u8> {
    let mut v = 8u32.to_le_bytes().to_vec();
    v.extend_from_slice(&(items.len() as u64).to_le_bytes());
    for s in items {
        v.extend_from_slice(&(s.len() as u64).to_le_bytes());
        v.extend_from_slice(s.as_bytes());
    }
    v
}

fn string(s: &str) -> Vec<u8> {
    [(s.len() as u64).to_le_bytes().to_vec(), s.as_bytes().to_vec()].concat()
}

/// tokens: a b ab Ġ <|x|> 1 2 (ids 0..=6), one merge "a b", <|x|> typed CONTROL.
fn tiny(model: &str, pre: &str, merges: &[&str], bos: u32) -> Result<Tokenizer> {
    let tokens = ["a", "b", "ab", "Ġ", "<|x|>", "1", "2"];
    let mut types = 5u32.to_le_bytes().to_vec();
    types.extend_from_slice(&(tokens.len() as u64).to_le_bytes());
    for t in [1i32, 1, 1, 1, 3, 1, 1] {
        types.extend_from_slice(&t.to_le_bytes());
    }
    let mut image = Image::header(3, 0, 7);
    image
        .kv("tokenizer.ggml.model", 8, &string(model))
        .kv("tokenizer.ggml.pre", 8, &string(pre))
        .kv("tokenizer.ggml.tokens", 9, &string_array(&tokens))
        .kv("tokenizer.ggml.merges", 9, &string_array(merges))
        .kv("tokenizer.ggml.token_type", 9, &types)
        .kv("tokenizer.ggml.bos_token_id", 4, &bos.to_le_bytes())
        .kv("tokenizer.ggml.eos_token_id", 4, &4u32.to_le_bytes());
    Tokenizer::from_gguf(&GgufFile::from_bytes(image.finish(), "tiny.gguf")?)
}

#[test]
fn encodes_with_merges_special_tokens_and_digit_split() {
    let tok = tiny("gpt2", "smollm", &["a b"], 0).unwrap();
    assert_eq!(tok.encode("ab ab<|x|>12").unwrap(), [2, 3, 2, 4, 5, 6]);
    assert_eq!(tok.decode(&[2, 3, 2, 4, 5, 6]).unwrap(), "ab ab<|x|>12");
    assert!(!tok.adds_bos());
    assert!(tok.chat_template().is_none());
    assert!(matches!(tok.apply_chat_template(&[]), Err(Error::ChatTemplate { .. })));
}

#[test]
fn unsupported_or_broken_metadata_is_an_error() {
    let message = |r: Result<Tokenizer>| r.err().expect("should fail").to_string();
    assert!(message(tiny("llama", "smollm", &["a b"], 0)).contains("only byte-level BPE"));
    assert!(message(tiny("gpt2", "qwen2", &["a b"], 0)).contains("tokenizer.ggml.pre `qwen2` is not supported"));
    assert!(message(tiny("gpt2", "smollm", &["ab"], 0)).contains("merge 0 `ab`"));
    assert!(message(tiny("gpt2", "smollm", &["a b"], 7)).contains("bos id 7 is outside the 7 tokens"));
}

#[test]
fn byte_level_alphabet_is_gpt2s() {
    let alphabet = byte_level_alphabet();
    assert_eq!((alphabet[b'a' as usize], alphabet[b' ' as usize], alphabet[b'\n' as usize]), ('a', 'Ġ', 'Ċ'));
    assert_eq!(alphabet[0], '\u{100}');
    let distinct: std::collections::HashSet<char> = alphabet.iter().copied().collect();
    assert_eq!(distinct.len(), 256);
    assert_eq!(respell("a b", &alphabet), "aĠb");
    assert_eq!(respell("Ġx", &alphabet), "Ġx");
}
