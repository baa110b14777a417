//! The kernel's constants, written from a [`StepLayout`]: the C++ header its files include first. Every shape,
//! offset, size and the argument struct come from the layout and `args.rs`; the same layout always gives the
//! same bytes. The preamble (the header, then the PTX helpers) is what the kernel's own files build on: NVRTC
//! gets it prepended to them, the nvcc harness includes it as the file the `step_header` example writes.

use super::args::STEP_ARGS;
use super::layout::*;

/// The kernel's own helpers (f16x2 arithmetic, relaxed hand-off words, the timer), after fuse's shared headers.
const HELPERS: &str = include_str!("ptx.cuh");

/// The kernel's files after the preamble, in the order they build on each other.
const KERNEL_FILES: [&str; 4] =
    [include_str!("layout.cuh"), include_str!("stages.cuh"), include_str!("head.cuh"), include_str!("kernel.cu")];

/// The kernel's `extern "C"` symbol.
pub const STEP_ENTRY: &str = "fuse_decode_step";

/// A float literal that reads back as exactly `v` (the shortest that does, with an `f`).
fn float_literal(v: f32) -> String {
    format!("{v:e}f")
}

impl StepLayout {
    /// The generated header: the shapes and eps, each stage's rows a block, the share's and shared memory's
    /// offsets, the LM head's ring, the hand-offs' sizes and the argument struct.
    pub fn header(&self) -> String {
        let (s, sh, m, a, r) = (&self.shape, &self.share, &self.smem, &self.attention, &self.head);
        let mut h = String::new();
        let mut line = |text: String| {
            h.push_str(&text);
            h.push('\n');
        };
        line("// The one-launch decode step's layout, written by fuse_models::llama::StepLayout::header() from".into());
        line("// fuse-models/src/llama/step_kernel/layout.rs: do not edit (the library prepends it to the kernel's source).".into());
        line(format!(
            "constexpr int HID = {}, NQ = {}, NKV = {}, HD = {STEP_HEAD_DIM}, FF = {};",
            s.hidden, s.heads, s.kv_heads, s.intermediate
        ));
        line(format!("constexpr int QKV_ROWS = {}, LAYERS = {}, VOCAB = {};", s.qkv_rows(), s.layers, s.vocab));
        line(format!(
            "constexpr int CLUSTER = {STEP_SHARES}, CLUSTERS = {STEP_CLUSTERS}, THREADS = {STEP_THREADS}, WARPS = {WARPS}, MAXPOS = {};",
            s.max_positions
        ));
        line(format!("constexpr int KEY_GROUPS = {KEY_GROUPS};  // attention's P.V: 8 threads a key"));
        line(format!("constexpr float EPS = {};  // rms_norm's epsilon, the model file's", float_literal(s.eps)));
        line("// A block's rows of each stage (its 1/CLUSTER): QKV, output projection, gate and up, down.".into());
        line(format!(
            "constexpr int R_QKV = {}, R_O = {}, R_GU = {}, R_D = {};",
            sh.qkv.rows, sh.o.rows, sh.gate_up.rows, sh.down.rows
        ));
        line(format!("constexpr unsigned COPY = {COPY_BYTES};  // bytes a bulk copy"));
        line(format!(
            "constexpr int PRE_KEYS = {PRELOADED_KEYS};  // cached keys (and values) an attention block holds"
        ));
        line(format!(
            "constexpr int LOAD_DELAY_NS = {LOAD_DELAY_NS};  // the later clusters' wait before their first loads"
        ));
        line("// A block's share of a layer (byte offsets): each stage's nibbles [rows][blocks of 32][16 bytes], then its".into());
        line("// (d, m) [rows][blocks] as f16 pairs; then both norms' weights (f32).".into());
        line("struct Share {".into());
        for (name, stage) in [("qkv", sh.qkv), ("o", sh.o), ("gu", sh.gate_up), ("d", sh.down)] {
            line(format!(
                "    static constexpr unsigned long long {name}_q = {}, {name}_dm = {};",
                stage.nibbles.offset, stage.scales.offset
            ));
        }
        line(format!(
            "    static constexpr unsigned long long norm1 = {}, norm2 = {}, bytes = {};",
            sh.norm1.offset, sh.norm2.offset, sh.bytes
        ));
        line("};".into());
        line("// The LM head's ring: chunks of HEAD_CHUNK rows' values [rows][HID] then scales [rows][HID / 32] (f16), in".into());
        line("// the first HEAD_AREA bytes of shared memory; each chunk's partials HEAD_PARTIALS f32s.".into());
        line(format!(
            "constexpr int HEAD_KB = {}, HEAD_GROUPS = {}, HEAD_CHUNK = {};",
            r.row_blocks, r.groups, r.chunk_rows
        ));
        line(format!("constexpr unsigned HEAD_CHUNK_BYTES = {};", r.chunk_bytes));
        line(format!("constexpr unsigned long long HEAD_AREA = {};", r.area));
        line(format!("constexpr int HEAD_SLOTS = {}, HEAD_PARTIALS = {};", r.slots, r.partials));
        line("// The in-cluster hand-offs and the bytes each consumer receives in one.".into());
        let names: Vec<String> = HANDOFF_NAMES.iter().map(|n| format!("H_{n}")).collect();
        line(format!("enum Handoff {{ {}, HANDOFFS }};", names.join(", ")));
        let bytes: Vec<String> =
            HANDOFF_NAMES.iter().zip(self.handoff_bytes).map(|(n, b)| format!("HANDOFF_{n}_BYTES = {b}")).collect();
        line(format!("constexpr unsigned {};", bytes.join(", ")));
        line(
            "// f32s of the partials (or attention's scratch), of the scores, and the scratch's parts in the partials."
                .into(),
        );
        line(format!(
            "constexpr int PART = {}, SCORES = {}, ATTENTION = {};",
            self.part_floats, a.score_slots, a.floats
        ));
        line(format!(
            "constexpr int ATT_Q = {}, ATT_K = {}, ATT_SCORES = {}, ATT_PV = {}, ATT_OUT = {}, ATT_SUMS = {}, ATT_MAX = {};",
            a.q, a.k, a.scores, a.pv, a.out, a.sums, a.max
        ));
        line("// The block's dynamic shared memory (byte offsets; the share is at 0).".into());
        line("struct SmemAt {".into());
        let offsets: Vec<String> =
            m.regions().iter().skip(1).map(|(name, region, _)| format!("{name} = {}", region.offset)).collect();
        for chunk in offsets.chunks(6) {
            line(format!("    static constexpr unsigned long long {};", chunk.join(", ")));
        }
        line(format!("    static constexpr unsigned long long bytes = {};", m.bytes));
        line("};".into());
        line(
            "// The kernel's argument: 8-byte words only, in this order (the launch's words follow the same list)."
                .into(),
        );
        line("struct FuseDecodeStepArgs {".into());
        for member in &STEP_ARGS {
            line(format!("    {} {};  // {}", member.c_type, member.name, member.doc));
        }
        line("};".into());
        h
    }

    /// The header, fuse's CUDA prelude and sm_90 header, then the kernel's own helpers: what the kernel's files
    /// include first.
    pub fn preamble(&self) -> String {
        use fuse::ir::codegen::{CUDA_PRELUDE, SM90_HEADER};
        [self.header().as_str(), CUDA_PRELUDE, SM90_HEADER, HELPERS].concat()
    }

    /// The kernel's whole source for NVRTC: the preamble, then its files.
    pub fn source(&self) -> String {
        let mut source = self.preamble();
        for file in KERNEL_FILES {
            source.push_str(file);
        }
        source
    }

    /// What `fuse::custom_kernel` compiles: the source (the header makes the cubin cache key on the layout),
    /// for sm_90a (clusters of 16, bulk copies, st.async).
    pub fn kernel_source(&self) -> fuse::custom_kernel::KernelSource {
        fuse::custom_kernel::KernelSource {
            entry: STEP_ENTRY.into(),
            source: self.source(),
            defines: Vec::new(),
            arch: "sm_90a".into(),
            argument_words: STEP_ARGS.len(),
        }
    }

    /// How the kernel launches: CLUSTERS clusters of CLUSTER blocks, the layout's shared memory a block.
    pub fn launch_dims(&self) -> fuse::custom_kernel::LaunchDims {
        fuse::custom_kernel::LaunchDims {
            grid: self.grid() as u32,
            block: STEP_THREADS as u32,
            cluster: STEP_SHARES as u32,
            shared_bytes: self.smem.bytes as u32,
        }
    }
}

/// Whether `header` writes `name = value` (tests).
#[cfg(test)]
pub(crate) fn has_constant(header: &str, name: &str, value: impl std::fmt::Display) -> bool {
    header.contains(&format!("{name} = {value}"))
}
