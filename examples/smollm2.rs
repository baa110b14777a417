//! Generates text with SmolLM2-135M-Instruct from its GGUF file, the decoder written with `#[fuse]`
//! (fuse-models' `llama`). The command line is the project's contract (DESIGN.md):
//!
//! ```text
//! cargo run --release --example smollm2 -- --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P]
//!       [--seed S] [--device cpu|cuda] [--dtype stored|stored-bf16|f32|bf16] [--model FILE.gguf] [--json FILE]
//!       [--chat]
//! ```
//! Without `--model` it reads the file `scripts/fetch-smollm2.sh` fetched. It prints the text as it is
//! generated, then the prefill and decode speed; `--json FILE` writes the ids, the text and the speeds;
//! `--compare-unfused` times one decode step fused and unfused. The device defaults to the GPU when there is
//! one (`--device cpu` or `cuda` to choose). `--dtype stored` (the default) keeps the weights as the file
//! stores them (its Q4_1 and Q8_0 blocks, read in place from the mapped file on the CPU, uploaded once to a
//! GPU; activations in f32, in bf16 with `stored-bf16`); `f32` and `bf16` dequantize them at load.
//! `--one-launch` decodes greedily with the one-launch decode step (an sm_90 GPU; the prompt prefilled in
//! bf16) and also times its kernel alone.

use fuse::prelude::*;
use fuse_models::chat::ChatMessage;
use fuse_models::gguf::GgufFile;
use fuse_models::llama::{generate, Llama, OneLaunchDecoder, Sampling};
use fuse_models::tokenizer::Tokenizer;
use std::io::Write;
use std::path::PathBuf;

struct Options {
    prompt: String,
    max_tokens: usize,
    temperature: f32,
    top_p: f32,
    seed: u64,
    device: String,
    /// `None`: the weights as stored.
    dtype: Option<DType>,
    /// The activations' dtype with the weights as stored (`--dtype stored` f32, `stored-bf16`).
    activations: DType,
    model: Option<PathBuf>,
    json: Option<PathBuf>,
    chat: bool,
    compare_unfused: bool,
    one_launch: bool,
}

fn parse() -> std::result::Result<Options, String> {
    let mut o = Options {
        prompt: String::new(),
        max_tokens: 64,
        temperature: 0.0,
        top_p: 0.9,
        seed: 0,
        device: "best".into(),
        dtype: None,
        activations: DType::F32,
        model: None,
        json: None,
        chat: false,
        compare_unfused: false,
        one_launch: false,
    };
    let mut args = std::env::args().skip(1);
    let mut prompt = None;
    while let Some(flag) = args.next() {
        if flag == "--chat" || flag == "--compare-unfused" || flag == "--one-launch" {
            o.chat |= flag == "--chat";
            o.compare_unfused |= flag == "--compare-unfused";
            o.one_launch |= flag == "--one-launch";
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|_| format!("{flag}: `{v}` is not a number"));
        match flag.as_str() {
            "--prompt" => prompt = Some(value),
            "--max-tokens" => o.max_tokens = number(&value)? as usize,
            "--temperature" => o.temperature = number(&value)? as f32,
            "--top-p" => o.top_p = number(&value)? as f32,
            "--seed" => o.seed = number(&value)? as u64,
            "--device" => o.device = value,
            "--dtype" => {
                o.dtype = match value.as_str() {
                    "stored" => None,
                    "stored-bf16" => {
                        o.activations = DType::BF16;
                        None
                    }
                    "f32" => Some(DType::F32),
                    "bf16" => Some(DType::BF16),
                    _ => return Err(format!("--dtype: `{value}` is not stored, stored-bf16, f32 or bf16")),
                }
            }
            "--model" => o.model = Some(value.into()),
            "--json" => o.json = Some(value.into()),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    o.prompt = prompt.ok_or("--prompt TEXT is required")?;
    Ok(o)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("smollm2: {e}");
        std::process::exit(1);
    }
}

fn run() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let o = parse()?;
    let path = o.model.clone().unwrap_or_else(fuse_models::smollm2_path);
    if !path.exists() {
        return Err(
            format!("{} not found: run scripts/fetch-smollm2.sh (or pass --model FILE.gguf)", path.display()).into()
        );
    }
    let device = match o.device.as_str() {
        "best" => Device::cuda_if_available(0),
        "cpu" => Device::Cpu,
        "cuda" => Device::cuda(0)?,
        other => return Err(format!("--device: `{other}` is not cpu or cuda").into()),
    };
    let file = GgufFile::open_for(&path, &device)?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    if o.one_launch {
        return one_launch(&o, &file, &tokenizer, &device);
    }
    let model = match o.dtype {
        Some(dtype) => Llama::load(&file, &device, dtype)?,
        None => Llama::load_stored_as(&file, &device, o.activations)?,
    };
    let weights = match o.dtype {
        None => format!("stored, activations in {}", model.dtype()),
        Some(dtype) => dtype.to_string(),
    };
    let text = if o.chat { tokenizer.apply_chat_template(&[ChatMessage::user(&o.prompt)])? } else { o.prompt.clone() };
    let prompt_ids = tokenizer.encode(&text)?;
    let sampling = if o.temperature > 0.0 {
        Sampling::TopP { temperature: o.temperature, top_p: o.top_p, seed: o.seed }
    } else {
        Sampling::Greedy
    };
    // The first calls compile the kernels and tune the GEMM paths for these shapes: done here, before the
    // timed generation, on a cache of their own, so that the speeds printed are those of every later call.
    let start = std::time::Instant::now();
    // A cache of the size generation's will have (its shapes pick the attention kernels' variants).
    let capacity = (prompt_ids.len() + o.max_tokens.saturating_sub(1).max(1)).min(model.config.context).max(1);
    let mut cache = model.new_cache(capacity)?;
    model.forward(&prompt_ids, &mut cache)?;
    model.forward(&prompt_ids[..1], &mut cache)?;
    eprintln!("warm-up (kernels compiled, GEMM paths tuned): {:.0} ms", start.elapsed().as_secs_f64() * 1e3);
    print!("{text}");
    let mut stream = tokenizer.stream();
    let out = generate(&model, &prompt_ids, o.max_tokens, sampling, tokenizer.eos_id(), |id| {
        if let Some(piece) = stream.step(id)? {
            print!("{piece}");
            let _ = std::io::stdout().flush();
        }
        Ok(())
    })?;
    println!();
    let prefill_tps = prompt_ids.len() as f64 / out.prefill.as_secs_f64();
    let decoded = out.ids.len().saturating_sub(1).max(1);
    let decode_us = out.decode.as_secs_f64() * 1e6 / decoded as f64;
    eprintln!(
        "{} prompt tokens in {:.1} ms ({prefill_tps:.0} tokens/s); {} tokens generated, {decode_us:.0} us per decoded token ({:.1} tokens/s) on {device} in {}",
        prompt_ids.len(),
        out.prefill.as_secs_f64() * 1e3,
        out.ids.len(),
        1e6 / decode_us,
        weights
    );
    if let Some(json) = &o.json {
        let generated = tokenizer.decode(&out.ids)?;
        let list = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        let body = format!(
            "{{\"prompt_ids\": [{}], \"generated_ids\": [{}], \"text\": {}, \"prefill_tokens_per_s\": {prefill_tps:.3}, \"decode_tokens_per_s\": {:.3}, \"decode_us_per_token\": {decode_us:.3}, \"device\": \"{device}\", \"dtype\": \"{}\"}}\n",
            list(&prompt_ids),
            list(&out.ids),
            json_string(&generated),
            1e6 / decode_us,
            weights
        );
        std::fs::write(json, body)?;
    }
    if o.compare_unfused {
        compare_one_step(&model, &prompt_ids)?;
    }
    Ok(())
}

/// One decode step after the prompt, fused and unfused (one op at a time): time and largest logit gap.
fn compare_one_step(model: &Llama, prompt: &[u32]) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let next = *prompt.last().ok_or("an empty prompt")?;
    let step = |fusion: Fusion| -> std::result::Result<(f64, Vec<f32>), Box<dyn std::error::Error>> {
        let mut cache = model.new_cache(prompt.len())?;
        model.forward_with(&prompt[..prompt.len() - 1], &mut cache, fusion)?;
        model.forward_with(&[next], &mut cache, fusion)?; // warm: the step's first call compiles or plans
        let mut cache = model.new_cache(prompt.len())?;
        model.forward_with(&prompt[..prompt.len() - 1], &mut cache, fusion)?;
        let start = std::time::Instant::now();
        let logits = model.forward_with(&[next], &mut cache, fusion)?;
        Ok((start.elapsed().as_secs_f64() * 1e3, logits))
    };
    let (fused_ms, fused) = step(Fusion::On)?;
    let (unfused_ms, unfused) = step(Fusion::Off)?;
    let gap = fused.iter().zip(&unfused).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    eprintln!("one decode step: fused {fused_ms:.1} ms, unfused {unfused_ms:.1} ms ({:.2}x); largest logit difference {gap:.2e}", unfused_ms / fused_ms);
    Ok(())
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `--one-launch`: greedy decoding with the one-launch decode step (the prefill by the bf16 decoder, the rest as
/// one run of launches, its tokens read back at its end), its speed, and its kernel alone (100 steps queued
/// back to back).
fn one_launch(
    o: &Options,
    file: &GgufFile,
    tokenizer: &Tokenizer,
    device: &Device,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    if o.temperature > 0.0 {
        return Err("--one-launch decodes greedily: drop --temperature".into());
    }
    let model = Llama::load(file, device, DType::BF16)?;
    let mut decoder = OneLaunchDecoder::new(file, device)?;
    let text = if o.chat { tokenizer.apply_chat_template(&[ChatMessage::user(&o.prompt)])? } else { o.prompt.clone() };
    let prompt_ids = tokenizer.encode(&text)?;
    let capacity = (prompt_ids.len() + o.max_tokens + 1).min(fuse_models::llama::STEP_MAX_POSITIONS);
    // Warm-up on a cache of its own: the kernels compile, the prefill's GEMM paths are tuned.
    decoder.generate(&model, &mut model.new_cache(capacity)?, &prompt_ids, 2, tokenizer.eos_id())?;
    let mut cache = model.new_cache(capacity)?;
    let start = std::time::Instant::now();
    let ids = decoder.generate(&model, &mut cache, &prompt_ids, o.max_tokens, tokenizer.eos_id())?;
    let total = start.elapsed().as_secs_f64();
    println!("{text}{}", tokenizer.decode(&ids)?);
    let kernel_us = decoder.time_steps(&cache, 100)?;
    eprintln!(
        "one-launch decode step on {device}: {} tokens in {:.1} ms with the prefill ({:.0} us a token, one run read back at its end); the kernel alone {kernel_us:.1} us a step (100 queued back to back at position {}); 1 kernel a step for {} layers",
        ids.len(),
        total * 1e3,
        total * 1e6 / ids.len().max(1) as f64,
        cache.len(),
        model.config.layers
    );
    Ok(())
}
