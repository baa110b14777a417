//! The tokenizer built from the real file against the reference ids (scripts/smollm2_reference.py).

mod common;

use fuse_models::chat::ChatMessage;
use fuse_models::tokenizer::Tokenizer;
use fuse_models::Error;

fn tokenizer() -> Option<Tokenizer> {
    common::model().map(|file| Tokenizer::from_gguf(file).expect("building the tokenizer"))
}

#[test]
fn special_ids_and_vocabulary() {
    let Some(tok) = tokenizer() else { return };
    assert_eq!((tok.vocab_size(), tok.bos_id(), tok.eos_id()), (49152, 1, 2));
    assert!(!tok.adds_bos());
    assert_eq!(tok.token_id("<|im_start|>"), Some(1));
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
    assert!(tok.chat_template().unwrap().contains("<|im_start|>"));
}

#[test]
fn encode_matches_reference_ids_and_decode_round_trips() {
    let Some(tok) = tokenizer() else { return };
    let reference = common::reference();
    let mut matched = 0;
    for prompt in reference["prompts"].as_array().unwrap() {
        let name = prompt["name"].as_str().unwrap();
        let text = prompt["text"].as_str().unwrap();
        let expected = common::ids(&prompt["prompt_ids"]);
        let ids = tok.encode(text).unwrap();
        assert_eq!(ids, expected, "prompt `{name}`");
        matched += ids.len();
        assert_eq!(tok.decode(&ids).unwrap(), text, "round trip of `{name}`");
        assert_eq!(tok.decode(&ids).unwrap(), prompt["decoded"].as_str().unwrap());
        if let Some(greedy) = prompt.get("greedy_ids") {
            let text = tok.decode(&common::ids(greedy)).unwrap();
            assert_eq!(text, prompt["greedy_text"].as_str().unwrap(), "greedy text of `{name}`");
        }
    }
    assert!(matched > 100, "only {matched} tokens compared");
    eprintln!("tokenizer: {matched} reference prompt tokens matched");
}

#[test]
fn digits_are_split_as_the_models_own_tokenizer_does() {
    let Some(tok) = tokenizer() else { return };
    // Each digit alone; two spaces before a digit stay one "ĠĠ" token (transformers' GGUF loader, which
    // ignores tokenizer.ggml.pre, gives two "Ġ" tokens here).
    let ids = tok.encode("x  12").unwrap();
    let pieces: Vec<String> = ids.iter().map(|&id| tok.decode(&[id]).unwrap()).collect();
    assert_eq!(pieces, ["x", "  ", "1", "2"]);
}

#[test]
fn chat_template_matches_reference() {
    let Some(tok) = tokenizer() else { return };
    let reference = common::reference();
    let prompt = reference["prompts"].as_array().unwrap().iter().find(|p| p["name"] == "chat").unwrap();
    let messages: Vec<ChatMessage> = prompt["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    let text = tok.apply_chat_template(&messages).unwrap();
    assert_eq!(text, prompt["text"].as_str().unwrap());
    assert!(text.ends_with("<|im_start|>assistant\n"));
    assert_eq!(tok.encode(&text).unwrap(), common::ids(&prompt["prompt_ids"]));

    // With a system message of one's own, the default one is not added.
    let own = tok.apply_chat_template(&[ChatMessage::system("Be brief."), ChatMessage::user("Hi")]).unwrap();
    assert_eq!(own, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

#[test]
fn streaming_holds_back_split_characters() {
    let Some(tok) = tokenizer() else { return };
    let text = "Emoji: 🦀🚀👍🏽 東京 done";
    let ids = tok.encode(text).unwrap();
    let mut stream = tok.stream();
    let (mut out, mut held) = (String::new(), 0);
    for &id in &ids {
        match stream.step(id).unwrap() {
            Some(piece) => {
                assert!(!piece.contains('\u{fffd}'), "emitted a broken character: {piece:?}");
                out.push_str(&piece);
            }
            None => held += 1,
        }
    }
    assert_eq!(out, text);
    assert!(held > 0, "no token held back: the emoji were expected to span several byte tokens");
}

#[test]
fn unknown_ids_are_errors() {
    let Some(tok) = tokenizer() else { return };
    assert!(matches!(tok.decode(&[5, 49152]), Err(Error::UnknownTokenId { id: 49152, vocab_size: 49152 })));
    assert!(tok.stream().step(u32::MAX).is_err());
}
