//! The generated header and the kernel's source: the layout's numbers are what the header writes, the argument
//! struct follows the one list of members, eps is the model file's (and changes what the cubin cache keys
//! on), the same layout always gives the same bytes, and no build switch is left in the kernel.

use super::{small_config, small_model_of};
use crate::gguf::GgufFile;
use crate::llama::step_kernel::header::has_constant;
use crate::llama::step_kernel::*;
use crate::llama::Config;

fn smollm2() -> StepLayout {
    StepLayout::of(&Config::smollm2_135m()).unwrap()
}

#[test]
fn the_header_writes_the_layouts_numbers() {
    for layout in [smollm2(), StepLayout::of(&small_config()).unwrap()] {
        let (s, sh, m, h) = (layout.shape, layout.share, layout.smem, layout.head);
        let header = layout.header();
        for (name, value) in [
            ("HID", s.hidden),
            ("NQ", s.heads),
            ("NKV", s.kv_heads),
            ("FF", s.intermediate),
            ("QKV_ROWS", s.qkv_rows()),
            ("LAYERS", s.layers),
            ("VOCAB", s.vocab),
            ("MAXPOS", s.max_positions),
            ("CLUSTER", STEP_SHARES),
            ("CLUSTERS", STEP_CLUSTERS),
            ("THREADS", STEP_THREADS),
            ("R_QKV", sh.qkv.rows),
            ("R_GU", sh.gate_up.rows),
            ("gu_q", sh.gate_up.nibbles.offset),
            ("d_dm", sh.down.scales.offset),
            ("norm2", sh.norm2.offset),
            ("bytes", sh.bytes),
            ("HEAD_CHUNK", h.chunk_rows),
            ("HEAD_AREA", h.area),
            ("HEAD_SLOTS", h.slots),
            ("HANDOFF_XM_BYTES", layout.handoff_bytes[2]),
            ("PART", layout.part_floats),
            ("ATT_PV", layout.attention.pv),
            ("hs", m.hs.offset),
            ("ring", m.ring.offset),
            ("bytes", m.bytes),
        ] {
            assert!(has_constant(&header, name, value), "{name} = {value} missing from\n{header}");
        }
        assert_eq!(header, layout.header(), "the same layout gives the same bytes");
    }
}

#[test]
fn the_argument_struct_and_the_words_follow_one_list() {
    let header = smollm2().header();
    let body = &header[header.find("struct FuseDecodeStepArgs {").expect("the struct")..];
    let mut at = 0;
    for member in &STEP_ARGS {
        let line = format!("    {} {};", member.c_type, member.name);
        let found = body[at..].find(&line).unwrap_or_else(|| panic!("`{line}` not in order in\n{body}"));
        at += found + line.len();
    }
    // Every argument once, its word where the struct has its member.
    for (i, member) in STEP_ARGS.iter().enumerate() {
        assert_eq!(STEP_ARGS.iter().filter(|m| m.arg == member.arg).count(), 1, "{:?}", member.arg);
        let words = argument_words(|arg| if arg == member.arg { 1 } else { 0 });
        assert_eq!(words.iter().position(|&w| w == 1), Some(i), "{:?}", member.arg);
        assert!(member.c_type.ends_with('*') || member.c_type.contains("long long"), "{}: 8 bytes", member.name);
    }
}

#[test]
fn eps_comes_from_the_model_file_into_the_source_and_the_cache_key() {
    let (bytes, _) = small_model_of(Config { eps: 1e-6, ..small_config() }, 9, false);
    let file = GgufFile::from_bytes(bytes, "eps-1e-6.gguf").unwrap();
    let packed = DecodeStepWeights::pack(&file).unwrap();
    assert_eq!(packed.layout.shape.eps, 1e-6);
    let source = packed.layout.kernel_source();
    assert!(source.source.contains("constexpr float EPS = 1e-6f;"), "{}", packed.layout.header());
    let default = StepLayout::of(&small_config()).unwrap().kernel_source();
    assert!(default.source.contains("constexpr float EPS = 1e-5f;"));
    assert_ne!(source.fingerprint(), default.fingerprint(), "a cubin built for one eps is not reused for the other");
    source.check().unwrap();
}

#[test]
fn the_source_is_the_header_then_the_kernel_with_no_switch_left() {
    use fuse::ir::codegen::{CUDA_PRELUDE, SM90_HEADER};
    let layout = smollm2();
    let source = layout.source();
    assert!(source.starts_with(&layout.preamble()) && layout.preamble().starts_with(&layout.header()));
    let shared = [CUDA_PRELUDE, SM90_HEADER].concat();
    let own = source.strip_prefix(&layout.header()).and_then(|rest| rest.strip_prefix(&shared));
    let own = own.expect("the header, then fuse's CUDA prelude and sm_90 header, then the kernel's files");
    assert!(own.contains(&format!("extern \"C\" __global__ void __launch_bounds__(THREADS, 1) {STEP_ENTRY}(")));
    assert!(!source.contains("#include"), "the source is self-contained");
    for switch in ["#if", "#ifdef", "#ifndef", "#define", "FUSE_STEP_"] {
        assert!(!own.contains(switch), "`{switch}` in the kernel: its numbers come from the layout");
    }
    // What the shared headers wrap, the kernel calls through them rather than writing it again (in its asm).
    let asm: String = own.lines().filter(|l| l.contains("asm")).collect();
    assert!(asm.contains("fma.rn.f16x2") && asm.contains("%%globaltimer"), "the kernel's own asm helpers found");
    let wrapped = ["cvt.f32.f16", "cvt.rn.f16.f32", "cvt.rn.bf16", "cvta", "mbarrier.", "barrier.cluster", "mapa."];
    for instruction in wrapped.iter().chain(&["%%cluster_ctarank", "cp.async.bulk", "st.async", "fence.proxy"]) {
        assert!(shared.contains(instruction), "the shared headers wrap `{instruction}`");
        assert!(!asm.contains(instruction), "the kernel writes `{instruction}` itself: use the shared headers'");
    }
    let k = layout.kernel_source();
    assert_eq!((k.entry.as_str(), k.arch.as_str(), k.argument_words), (STEP_ENTRY, "sm_90a", STEP_ARGS.len()));
    let dims = layout.launch_dims();
    assert_eq!((dims.grid, dims.block, dims.cluster), (112, 256, 16));
    assert_eq!(dims.shared_bytes as usize, layout.smem.bytes);
    dims.check().unwrap();
}
