//! The tokenizer described by a GGUF file's metadata (byte-level BPE, as `tokenizer.ggml.model = "gpt2"`),
//! built with Hugging Face's `tokenizers` crate the way the model's own `tokenizer.json` is:
//!
//! - model: BPE over `tokenizer.ggml.tokens` (ids in file order) and `tokenizer.ggml.merges` (by rank);
//! - pre-tokenizer: for `tokenizer.ggml.pre` = `smollm` (and the StarCoder family it shares a regex with),
//!   every numeric character is split off on its own, then GPT-2's byte-level split; `gpt2` / `default` use the
//!   byte-level split alone. This is what llama.cpp does for these names and what SmolLM2's `tokenizer.json`
//!   says (`Digits(individual_digits)` then `ByteLevel`). transformers' GGUF loader (5.24) ignores
//!   `tokenizer.ggml.pre` for this file and differs on a few inputs (e.g. two spaces before a digit);
//! - tokens typed CONTROL (3) are special added tokens, USER_DEFINED (4) plain added tokens, so that
//!   `<|im_start|>` in a prompt stays one token;
//! - no BOS unless `tokenizer.ggml.add_bos_token` is true (SmolLM2's is false).

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper};

use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// Pre-tokenizer names whose regex splits each `\p{N}` before GPT-2's split (llama.cpp groups them).
const DIGIT_SPLITTING_PRE: &[&str] = &["smollm", "starcoder", "refact", "codeshell"];
const BYTE_LEVEL_ONLY_PRE: &[&str] = &["gpt2", "default"];

/// A byte-level BPE tokenizer with its special ids and chat template.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    vocab_size: usize,
    bos_id: u32,
    eos_id: u32,
    add_bos: bool,
    chat_template: Option<String>,
}

impl Tokenizer {
    /// Builds the tokenizer from `file`'s `tokenizer.*` metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer> {
        let model = file.str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(tokenizer_error(format!(
                "tokenizer.ggml.model is `{model}`; only byte-level BPE (`gpt2`) is supported"
            )));
        }
        let pre = match file.get("tokenizer.ggml.pre") {
            Some(_) => file.str("tokenizer.ggml.pre")?,
            None => "default",
        };
        let tokens = file.strings("tokenizer.ggml.tokens")?;
        let merges = parse_merges(&file.strings("tokenizer.ggml.merges")?)?;
        let token_types = match file.get("tokenizer.ggml.token_type") {
            Some(_) => file.i32s("tokenizer.ggml.token_type")?,
            None => vec![],
        };
        if !token_types.is_empty() && token_types.len() != tokens.len() {
            return Err(tokenizer_error(format!("{} token types for {} tokens", token_types.len(), tokens.len())));
        }
        let bos_id = file.u32("tokenizer.ggml.bos_token_id")?;
        let eos_id = file.u32("tokenizer.ggml.eos_token_id")?;
        for (name, id) in [("bos", bos_id), ("eos", eos_id)] {
            if id as usize >= tokens.len() {
                return Err(tokenizer_error(format!("{name} id {id} is outside the {} tokens", tokens.len())));
            }
        }
        let add_bos = match file.get("tokenizer.ggml.add_bos_token") {
            Some(_) => file.bool("tokenizer.ggml.add_bos_token")?,
            None => false,
        };
        let chat_template = match file.get("tokenizer.chat_template") {
            Some(_) => Some(file.str("tokenizer.chat_template")?.to_string()),
            None => None,
        };

        let mut inner = tokenizers::Tokenizer::new(build_bpe(&tokens, merges)?);
        inner.with_pre_tokenizer(Some(pre_tokenizer(pre)?));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let added = |wanted: i32, special: bool| -> Vec<AddedToken> {
            tokens
                .iter()
                .zip(&token_types)
                .filter(|&(_, &t)| t == wanted)
                .map(|(&token, _)| AddedToken::from(token.to_string(), special).normalized(false))
                .collect()
        };
        inner.add_special_tokens(&added(TOKEN_TYPE_CONTROL, true));
        inner.add_tokens(&added(TOKEN_TYPE_USER_DEFINED, false));
        let vocab_size = inner.get_vocab_size(true);
        if vocab_size != tokens.len() {
            return Err(tokenizer_error(format!(
                "{} tokens in the file but {vocab_size} in the vocabulary (duplicate tokens?)",
                tokens.len()
            )));
        }
        Ok(Tokenizer { inner, vocab_size, bos_id, eos_id, add_bos, chat_template })
    }

    /// Token ids of `text`. Special tokens written in the text (`<|im_start|>`) become their ids; BOS is
    /// prepended only when the file asks for it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self.inner.encode(text, false).map_err(|e| tokenizer_error(e.to_string()))?;
        let mut ids = Vec::with_capacity(encoding.len() + 1);
        if self.add_bos {
            ids.push(self.bos_id);
        }
        ids.extend_from_slice(encoding.get_ids());
        Ok(ids)
    }

    /// The text of `ids`, special tokens included (as transformers' `decode` does by default).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.check_ids(ids)?;
        self.inner.decode(ids, false).map_err(|e| tokenizer_error(e.to_string()))
    }

    /// A decoder for printing tokens as they are generated: each step returns the text that became complete,
    /// holding back bytes of a character split across tokens.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream { tokenizer: self, inner: self.inner.decode_stream(false) }
    }

    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            Some(&id) => Err(Error::UnknownTokenId { id, vocab_size: self.vocab_size }),
            None => Ok(()),
        }
    }

    /// Number of tokens, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    pub fn bos_id(&self) -> u32 {
        self.bos_id
    }
    pub fn eos_id(&self) -> u32 {
        self.eos_id
    }
    /// Whether [`Tokenizer::encode`] prepends BOS (`tokenizer.ggml.add_bos_token`).
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }
    /// The Jinja chat template stored in the file, if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
    /// The token id of `token` (e.g. `"<|im_end|>"`), if it is in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

type InnerStream<'a> = tokenizers::DecodeStream<
    'a,
    ModelWrapper,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// Incremental decoding for streamed output; see [`Tokenizer::stream`].
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    inner: InnerStream<'a>,
}

impl TextStream<'_> {
    /// Feeds one token; returns the text it completes (`None` while a character is still incomplete).
    pub fn step(&mut self, id: u32) -> Result<Option<String>> {
        self.tokenizer.check_ids(&[id])?;
        self.inner.step(id).map_err(|e| tokenizer_error(e.to_string()))
    }
}

fn tokenizer_error(what: String) -> Error {
    Error::Tokenizer { what }
}

fn pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper> {
    // GPT-2's regex, no prefix space; trim_offsets only affects offsets, which are not used.
    let byte_level = ByteLevel::new(false, true, true);
    if DIGIT_SPLITTING_PRE.contains(&pre) {
        Ok(Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into())
    } else if BYTE_LEVEL_ONLY_PRE.contains(&pre) {
        Ok(byte_level.into())
    } else {
        Err(tokenizer_error(format!(
            "tokenizer.ggml.pre `{pre}` is not supported (known: {})",
            [DIGIT_SPLITTING_PRE, BYTE_LEVEL_ONLY_PRE].concat().join(", ")
        )))
    }
}

/// Merges are stored as "left right"; byte-level tokens never contain a plain space.
fn parse_merges(merges: &[&str]) -> Result<Vec<(String, String)>> {
    merges
        .iter()
        .enumerate()
        .map(|(rank, merge)| match merge.split_once(' ') {
            Some((l, r)) if !l.is_empty() && !r.is_empty() && !r.contains(' ') => Ok((l.to_string(), r.to_string())),
            _ => Err(tokenizer_error(format!("merge {rank} `{merge}` is not two tokens separated by a space"))),
        })
        .collect()
}

fn build_bpe(tokens: &[&str], merges: Vec<(String, String)>) -> Result<BPE> {
    let alphabet = byte_level_alphabet();
    let vocab: tokenizers::models::bpe::Vocab =
        tokens.iter().enumerate().map(|(id, &token)| (respell(token, &alphabet), id as u32)).collect();
    BPE::builder().vocab_and_merges(vocab, merges).build().map_err(|e| tokenizer_error(format!("BPE: {e}")))
}

/// A token with a character outside the byte-level alphabet (a converter that wrote raw text) is respelled
/// through the alphabet, as transformers does, so BPE can produce it.
fn respell(token: &str, alphabet: &[char; 256]) -> String {
    if token.chars().all(|c| alphabet.contains(&c)) {
        token.to_string()
    } else {
        token.bytes().map(|b| alphabet[b as usize]).collect()
    }
}

/// GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the others are shifted to
/// code points from U+0100 on, so that every byte is a visible character.
fn byte_level_alphabet() -> [char; 256] {
    let mut alphabet = ['\0'; 256];
    let mut next_shifted = 256u32;
    for byte in 0..=255u8 {
        let printable = matches!(byte, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        alphabet[byte as usize] = if printable {
            byte as char
        } else {
            next_shifted += 1;
            char::from_u32(next_shifted - 1).expect("U+0100..U+0143 are chars")
        };
    }
    alphabet
}

#[cfg(test)]
mod tests;
