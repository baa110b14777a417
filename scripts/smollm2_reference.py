#!/usr/bin/env python3
"""Reference outputs of SmolLM2-135M-Instruct (Q4_1 GGUF) from transformers, for fuse-models' tests.

Writes fuse-models/tests/data/smollm2_reference.json: for each prompt, its token ids, the first-step logits
(f32; a sample, see "logits" in the file) and 32 greedy tokens, computed by transformers' LlamaForCausalLM
loaded from the same GGUF file in float32 on the CPU.

    scripts/fetch-smollm2.sh                      # the model, into ~/.cache/fuse/models
    python3 scripts/smollm2_reference.py          # needs transformers, tokenizers, gguf, torch
    python3 scripts/smollm2_reference.py --tokenizer-only   # without torch: prompt ids and text only

Where the `gguf` package is not installed (the GPU machine), install its wheel into a folder and put that
folder on PYTHONPATH:  pip install --no-index --no-deps --target DIR gguf-*.whl; PYTHONPATH=DIR python3 ...

Tokenizer: transformers' GGUF loader builds GPT-2's byte-level pre-tokenizer and ignores
`tokenizer.ggml.pre = smollm`, which (in llama.cpp and in SmolLM2's own tokenizer.json) first splits every
numeric character off on its own. The two differ on a few inputs (e.g. two spaces before a digit). The ids
fed to the model here are those of the model's own tokenizer (transformers' tokenizer with that pre-tokenizer
put back); the loader's ids are kept as `transformers_gguf_ids` where they differ.
"""

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TOP_K = 64
STRIDE = 48
GREEDY_TOKENS = 32
DIGIT_SPLITTING_PRE = ("smollm", "starcoder", "refact", "codeshell")

PROMPTS = [
    {"name": "prose", "text": "The quick brown fox jumps over the lazy dog. Once upon a time, in a quiet village by the sea, there lived"},
    {"name": "digits_punctuation", "text": "In 1969, 3 astronauts flew 384,400 km; Apollo 11 landed at 20:17 UTC (that's  4:17 p.m. EDT) -- 100% a success! Next: 2+2="},
    {"name": "unicode_emoji", "text": "Café, naïve, façade — 東京は日本の首都です。 Emoji: 🦀🚀👍🏽 ½ ² Ω≈3.14. Translate to French: \"good morning\" ->"},
    {"name": "chat", "messages": [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]},
]


def default_model_path():
    cache = os.environ.get("FUSE_MODEL_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "fuse", "models")
    return os.path.join(cache, MODEL_NAME)


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_tokenizer(tokenizer, gguf_path):
    """A copy of transformers' backend tokenizer with the pre-tokenizer the file's `tokenizer.ggml.pre` names."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, pre_tokenizers

    field = GGUFReader(gguf_path).fields.get("tokenizer.ggml.pre")
    pre = field.contents() if field is not None else "default"
    fixed = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    if pre in DIGIT_SPLITTING_PRE:
        fixed.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
    return fixed, pre


def first_step_and_greedy(model, torch, ids, eos_id):
    """First-step logits (f32) and up to GREEDY_TOKENS greedy tokens, stopping after eos."""
    input_ids = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=input_ids, use_cache=True)
        first = out.logits[0, -1].to(torch.float32).clone()
        logits, past = first, out.past_key_values
        generated, margins = [], []
        for _ in range(GREEDY_TOKENS):
            top2 = torch.topk(logits, 2)
            token = int(top2.indices[0])
            generated.append(token)
            margins.append(float(top2.values[0] - top2.values[1]))
            if token == eos_id:
                break
            out = model(input_ids=torch.tensor([[token]]), past_key_values=past, use_cache=True)
            logits, past = out.logits[0, -1].to(torch.float32), out.past_key_values
    top = torch.topk(first, TOP_K)
    return {
        "top": [[int(i), float(v)] for i, v in zip(top.indices, top.values)],
        "strided": [float(v) for v in first[::STRIDE]],
        "argmax": int(torch.argmax(first)),
        "l2_norm": float(torch.linalg.vector_norm(first.double())),
        "mean": float(first.double().mean()),
    }, generated, margins


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=default_model_path(), help="the GGUF file (default: the fetch script's)")
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--out", default=str(here / "fuse-models" / "tests" / "data" / "smollm2_reference.json"))
    parser.add_argument("--tokenizer-only", action="store_true", help="prompt ids and text only (no torch needed)")
    args = parser.parse_args()

    if not os.path.isfile(args.model):
        sys.exit(f"smollm2_reference: {args.model} not found; run scripts/fetch-smollm2.sh first")
    digest = sha256_of(args.model)
    if digest != SHA256:
        sys.exit(f"smollm2_reference: {args.model} has sha256 {digest}, expected {SHA256}")
    try:
        import tokenizers
        import transformers
        from transformers import AutoTokenizer
        import gguf  # noqa: F401  (transformers needs it to read GGUF files)
    except ImportError as e:
        sys.exit(f"smollm2_reference: {e}; install transformers, tokenizers and gguf (see --help)")

    folder, name = os.path.split(os.path.abspath(args.model))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    fixed, pre = model_tokenizer(tokenizer, args.model)
    eos_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)

    torch = model = None
    if not args.tokenizer_only:
        try:
            import torch
            from transformers import AutoModelForCausalLM
        except ImportError as e:
            sys.exit(f"smollm2_reference: {e}; install torch, or pass --tokenizer-only")
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
        assert next(model.parameters()).dtype == torch.float32

    prompts = []
    for spec in PROMPTS:
        entry = {"name": spec["name"]}
        if "messages" in spec:
            entry["messages"] = spec["messages"]
            text = tokenizer.apply_chat_template(spec["messages"], tokenize=False, add_generation_prompt=True)
        else:
            text = spec["text"]
        ids = fixed.encode(text, add_special_tokens=False).ids
        loader_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        entry.update({"text": text, "prompt_ids": ids, "decoded": tokenizer.decode(ids)})
        if loader_ids != ids:
            entry["transformers_gguf_ids"] = loader_ids
        if model is not None:
            logits, generated, margins = first_step_and_greedy(model, torch, ids, eos_id)
            entry.update({
                "first_step_logits": logits,
                "greedy_ids": generated,
                "greedy_text": tokenizer.decode(generated),
                "greedy_top2_margins": margins,
            })
        prompts.append(entry)
        print(f"{spec['name']}: {len(ids)} prompt tokens" + (f", greedy: {entry['greedy_text']!r}" if model else ""))

    reference = {
        "model": name,
        "sha256": SHA256,
        "produced_by": "scripts/smollm2_reference.py",
        "versions": {
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "torch": torch.__version__ if torch else None,
        },
        "tokenizer": {
            "gguf_pre": pre,
            "note": "prompt_ids: transformers' GGUF tokenizer with the pre-tokenizer tokenizer.ggml.pre names "
            "(Digits(individual_digits) then ByteLevel, as llama.cpp and SmolLM2's tokenizer.json); "
            "transformers_gguf_ids, where present, is what transformers' GGUF loader alone gives.",
            "add_bos": False,
        },
        "has_logits": model is not None,
        "logits": {
            "dtype": "float32",
            "device": "cpu",
            "note": f"first-step logits (last prompt position) are sampled, not kept whole: 'top' is the top "
            f"{TOP_K} (id, logit) pairs, 'strided' is logits[0::{STRIDE}] (ids 0, {STRIDE}, {2 * STRIDE}, ...), "
            "'l2_norm' and 'mean' are over all 49152 logits",
            "top_k": TOP_K,
            "stride": STRIDE,
        } if model is not None else None,
        "greedy": {
            "max_new_tokens": GREEDY_TOKENS,
            "note": "argmax at each step, stopping after eos (id 2); greedy_top2_margins is logit[1st] - logit[2nd] per step",
        } if model is not None else None,
        "prompts": prompts,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
