//! Chat prompts: the Jinja template stored in the GGUF file (`tokenizer.chat_template`), rendered with
//! minijinja in the settings transformers uses (`trim_blocks`, `lstrip_blocks`), so the prompt is the one the
//! model was tuned on. For SmolLM2 that is ChatML: `<|im_start|>role\n...<|im_end|>\n` per message, a default
//! system message when the conversation has none, and `<|im_start|>assistant\n` as the generation prompt.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `"system"`, `"user"` or `"assistant"`.
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role: role.into(), content: content.into() }
    }
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("system", content)
    }
}

impl Tokenizer {
    /// The prompt text for `messages`, ending with the generation prompt (the assistant's turn). Encode it
    /// with [`Tokenizer::encode`]: its special tokens are matched whole.
    pub fn apply_chat_template(&self, messages: &[ChatMessage]) -> Result<String> {
        let source = self
            .chat_template()
            .ok_or_else(|| Error::ChatTemplate { what: "the file has no tokenizer.chat_template".into() })?;
        render(source, messages, self)
    }
}

fn render(source: &str, messages: &[ChatMessage], tokenizer: &Tokenizer) -> Result<String> {
    let error = |e: minijinja::Error| Error::ChatTemplate { what: format!("{e:#}") };
    let mut env = minijinja::Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    // Templates call this to reject a conversation they cannot format.
    env.add_function("raise_exception", |message: String| -> std::result::Result<String, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message))
    });
    let template = env.template_from_str(source).map_err(error)?;
    let bos = tokenizer.decode(&[tokenizer.bos_id()])?;
    let eos = tokenizer.decode(&[tokenizer.eos_id()])?;
    template
        .render(minijinja::context! {
            messages => messages,
            add_generation_prompt => true,
            bos_token => bos,
            eos_token => eos,
        })
        .map_err(error)
}
