//! The kernel's argument: one ordered list of named 8-byte members, from which `header.rs` writes the
//! kernel's `FuseDecodeStepArgs` struct and the launch builds its words ([`argument_words`]), so the two
//! cannot disagree on the order.

/// One member of the kernel's argument struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepArg {
    /// `[layers][STEP_SHARES][share bytes]`: every block's share of every layer.
    Shares,
    /// `[vocab][hidden]`: the token matrix's Q8_0 values + 128 (embedding and LM head).
    HeadValues,
    /// `[vocab][hidden / 32]`: their scales (f16).
    HeadScales,
    /// `[hidden]`: the final rms_norm's weights.
    OutNorm,
    /// The packed argmax: the previous step's token in, this step's out.
    Best,
    /// `[vocab]` logits, or null.
    Logits,
    /// `[hidden]` words, tag << 32 | f32 bits: the residual stream between layers.
    Words,
    /// `[layers]` addresses of each layer's key cache, `[kv_heads][capacity][64]` bf16.
    KeyLayers,
    /// `[layers]` addresses of its value cache, the same.
    ValueLayers,
    /// `[max_positions][64]`: cos of frequency i at i < 32, its sin at 32 + i.
    Rope,
    /// A trace buffer or null (the harness's clocks).
    Trace,
    /// The new token's position (cached: 0..pos-1).
    Pos,
    /// Positions a cache holds (its rows' stride).
    Capacity,
    /// This launch's step number (16 bits), above the previous launch's.
    Step,
    /// Layer l's input words carry tag0 + l.
    Tag0,
    /// `[pos, steps, blocks done]`, or null: read and advanced by the device.
    Control,
    /// The tokens a run picks, or null.
    Log,
    /// The log's length.
    LogLen,
}

/// A member: which argument, its C type and name in the struct, what it holds.
pub struct Member {
    pub arg: StepArg,
    pub c_type: &'static str,
    pub name: &'static str,
    pub doc: &'static str,
}

const fn member(arg: StepArg, c_type: &'static str, name: &'static str, doc: &'static str) -> Member {
    Member { arg, c_type, name, doc }
}

/// The struct's members in order: the kernel's parameter and the launch's words both follow it.
pub const STEP_ARGS: [Member; 18] = [
    member(StepArg::Shares, "const unsigned char*", "w", "[LAYERS][CLUSTER][Share::bytes]"),
    member(StepArg::HeadValues, "const unsigned char*", "head_q", "[VOCAB][HID]: the token matrix's Q8_0 values + 128"),
    member(StepArg::HeadScales, "const unsigned short*", "head_d", "[VOCAB][HID / 32]: their scales (f16)"),
    member(StepArg::OutNorm, "const float*", "out_norm", "[HID]: the final rms_norm's weights"),
    member(
        StepArg::Best,
        "unsigned long long*",
        "best",
        "the argmax (pack_best): the previous step's token in, this step's out",
    ),
    member(StepArg::Logits, "float*", "logits", "[VOCAB], or null"),
    member(
        StepArg::Words,
        "unsigned long long*",
        "words",
        "[HID]: tag << 32 | f32 bits, the residual stream between layers",
    ),
    member(
        StepArg::KeyLayers,
        "const unsigned long long*",
        "k_layers",
        "[LAYERS]: each layer's key cache, [NKV][capacity][HD] bf16",
    ),
    member(StepArg::ValueLayers, "const unsigned long long*", "v_layers", "[LAYERS]: its value cache, the same"),
    member(StepArg::Rope, "const float*", "rope", "[MAXPOS][HD]: cos of frequency i at i < 32, its sin at 32 + i"),
    member(StepArg::Trace, "unsigned long long*", "trace", "[LAYERS][NOTES] + TRACE_TAIL, or null"),
    member(StepArg::Pos, "long long", "pos", "the new token's position (cached: 0..pos-1), below capacity and MAXPOS"),
    member(StepArg::Capacity, "long long", "capacity", "positions a cache holds (its rows' stride)"),
    member(
        StepArg::Step,
        "unsigned long long",
        "step",
        "this launch's step number (16 bits), above the previous launch's",
    ),
    member(
        StepArg::Tag0,
        "unsigned long long",
        "tag0",
        "layer l's input words carry tag0 + l; the last layer's output tag0 + LAYERS",
    ),
    member(
        StepArg::Control,
        "unsigned long long*",
        "control",
        "[pos, steps, blocks done], or null: read and advanced by the device",
    ),
    member(StepArg::Log, "unsigned*", "log", "the tokens of a run, log[steps % log_len], or null"),
    member(StepArg::LogLen, "unsigned long long", "log_len", "the log's length"),
];

/// The launch's words: `value` of each member, in the struct's order.
pub fn argument_words(value: impl Fn(StepArg) -> u64) -> [u64; STEP_ARGS.len()] {
    std::array::from_fn(|i| value(STEP_ARGS[i].arg))
}
