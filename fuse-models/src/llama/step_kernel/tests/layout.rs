//! The layout's regions: aligned, in order, not overlapping, each as large as what it holds, within the
//! shared memory a block may have; the hand-offs' sizes are what their producers send; models past the
//! kernel's limits are refused with the reason.

use super::small_config;
use crate::llama::step_kernel::layout::{KEY_GROUPS, PRELOADED_KEYS, WARPS};
use crate::llama::step_kernel::*;
use crate::llama::Config;

/// The layouts checked: SmolLM2 as the library builds it and at the harness's old 1024 positions, the small
/// test model, and another shape (hidden 512, 8 query heads over 2, 512 positions, a vocabulary not a power of 2).
fn layouts() -> Vec<StepLayout> {
    let smollm2 = StepShape::of(&Config::smollm2_135m());
    let other = StepShape {
        hidden: 512,
        heads: 8,
        kv_heads: 2,
        intermediate: 1536,
        layers: 4,
        vocab: 32_000,
        max_positions: 512,
        ..smollm2
    };
    [smollm2, StepShape { max_positions: 1024, ..smollm2 }, StepShape::of(&small_config()), other]
        .into_iter()
        .map(|shape| StepLayout::new(shape).unwrap_or_else(|e| panic!("{shape:?}: {e}")))
        .collect()
}

/// Regions in order, each aligned to `align` and after the previous one, the last within `bytes`.
fn assert_tiled(what: &str, regions: &[(&str, Region, usize)], bytes: usize) {
    let mut end = 0;
    for (name, region, align) in regions {
        assert_eq!(region.offset % align, 0, "{what}: {name} at {} is not {align}-byte aligned", region.offset);
        assert!(
            region.offset >= end,
            "{what}: {name} at {} overlaps the region before (ending at {end})",
            region.offset
        );
        assert!(region.offset - end < *align, "{what}: {name} leaves a gap of {} bytes", region.offset - end);
        end = region.end();
    }
    assert!(end <= bytes, "{what}: the regions end at {end}, past {bytes}");
}

#[test]
fn the_share_is_its_stages_and_norms_aligned_and_without_overlap() {
    for layout in layouts() {
        let (s, share) = (layout.shape, layout.share);
        let aligned: Vec<(&str, Region, usize)> = share
            .regions()
            .into_iter()
            .map(|(name, region)| {
                (name, region, if share.stages().iter().any(|st| st.nibbles == region) { 16 } else { 4 })
            })
            .collect();
        assert_tiled("share", &aligned, share.bytes);
        assert_eq!(share.bytes % 16, 0, "the share is one bulk copy");
        assert!(share.bytes - share.norm2.end() < 16);
        // Each stage holds its 1/STEP_SHARES of the rows, each row its input's Q4_1 blocks.
        let want_rows = [s.qkv_rows(), s.hidden, 2 * s.intermediate, s.hidden];
        let want_blocks = [s.hidden / 32, s.hidden / 32, s.hidden / 32, s.intermediate / 32];
        for ((stage, rows), blocks) in share.stages().iter().zip(want_rows).zip(want_blocks) {
            assert_eq!((stage.rows * STEP_SHARES, stage.blocks), (rows, blocks));
            assert_eq!(
                (stage.nibbles.bytes, stage.scales.bytes),
                (rows / STEP_SHARES * blocks * 16, rows / STEP_SHARES * blocks * 4)
            );
        }
        assert_eq!((share.norm1.bytes, share.norm2.bytes), (4 * s.hidden, 4 * s.hidden));
    }
}

#[test]
fn shared_memory_regions_are_aligned_disjoint_and_fit_the_limit() {
    for layout in layouts() {
        let (s, m) = (layout.shape, layout.smem);
        assert_tiled("shared memory", &m.regions(), m.bytes);
        assert_eq!(m.bytes, m.ring.end());
        assert!(m.bytes <= STEP_SHARED_MEMORY_LIMIT, "{} bytes", m.bytes);
        assert_eq!(m.weights, Region { offset: 0, bytes: layout.share.bytes }, "the share is bulk-copied to the start");
        for (what, region, want) in [
            ("kpre", m.kpre, 2 * PRELOADED_KEYS * 64),
            ("vpre", m.vpre, 2 * PRELOADED_KEYS * 64),
            ("rope", m.rope, 4 * 64),
            ("x", m.x, 4 * s.hidden),
            ("xm", m.xm, 4 * s.hidden),
            ("qkv", m.qkv, 4 * s.qkv_rows()),
            ("part", m.part, 4 * layout.part_floats),
            ("xn", m.xn, 2 * s.hidden),
            ("att", m.att, 2 * s.hidden),
            ("h", m.h, 2 * s.intermediate),
            ("handoff", m.handoff, 8 * HANDOFF_NAMES.len()),
            ("ring", m.ring, 8 * layout.head.slots),
        ] {
            assert_eq!(region.bytes, want, "{what}");
        }
        // The small regions hold what is written into them.
        assert!(
            m.sq.bytes >= 4 * STEP_SHARES && m.atts.bytes >= 4 * 2 * s.heads && m.hs.bytes >= 4 * s.intermediate / 32
        );
        assert!(m.stage.bytes >= 2 * layout.share.gate_up.rows / 2 && m.stage.bytes >= 2 * 64);
        let largest_gemv = layout.share.stages().iter().map(|st| st.rows * st.blocks).max().unwrap();
        assert!(m.out.bytes >= 4 * layout.share.qkv.rows.max(layout.share.gate_up.rows / 2).max(2 * WARPS));
        assert!(layout.part_floats >= largest_gemv && layout.part_floats >= layout.attention.floats);
    }
}

#[test]
fn attention_scratch_parts_are_16_byte_aligned_and_disjoint() {
    for layout in layouts() {
        let a = layout.attention;
        let parts = [
            ("q", a.q, 64),
            ("k", a.k, 64),
            ("scores", a.scores, a.score_slots),
            ("pv", a.pv, KEY_GROUPS * 64),
            ("out", a.out, 64),
            ("sums", a.sums, KEY_GROUPS),
            ("max", a.max, WARPS),
        ];
        let regions: Vec<(&str, Region, usize)> =
            parts.iter().map(|&(name, at, floats)| (name, Region { offset: 4 * at, bytes: 4 * floats }, 16)).collect();
        assert_tiled("attention's scratch", &regions, 4 * a.floats);
        assert!(a.score_slots > layout.shape.max_positions, "every position and the new one");
        assert_eq!(a.floats, a.max + WARPS);
    }
}

#[test]
fn the_lm_heads_ring_fits_the_memory_the_layers_leave() {
    for layout in layouts() {
        let (s, h) = (layout.shape, layout.head);
        assert!(h.slots >= 2 && h.slots * h.chunk_bytes <= h.area, "{h:?}");
        assert_eq!(h.area, layout.smem.vpre.end(), "the share and the preloaded keys, no more");
        assert_eq!(h.chunk_bytes % 16, 0);
        assert_eq!(h.chunk_rows * h.row_blocks * 2 % 16, 0, "the scales start 16-byte aligned");
        assert!(h.chunk_rows <= STEP_THREADS && h.groups * h.row_blocks <= STEP_THREADS);
        assert!(2 * h.partials <= layout.part_floats, "two chunks' partials");
        // Every row is some block's, in whole 16s.
        assert_eq!((layout.head_first(0), layout.head_first(layout.grid())), (0, s.vocab));
        for b in 0..layout.grid() {
            let (first, next) = (layout.head_first(b), layout.head_first(b + 1));
            assert!(first <= next && first % 16 == 0, "block {b}: {first}..{next}");
        }
    }
}

#[test]
fn each_handoff_is_what_its_producers_send() {
    for layout in layouts() {
        let (s, sh) = (layout.shape, layout.share);
        // QKV: every block's rows to each attention block; attention: each head's 64 f16 and two block sums to
        // every block; xm: every block's rows and its sum of squares; h: every block's rows (f16) and their sums.
        let sends = [
            (STEP_SHARES, 4 * sh.qkv.rows, 0),
            (s.heads, 2 * 64, 2 * 4),
            (STEP_SHARES, 4 * sh.o.rows, 4),
            (STEP_SHARES, 2 * sh.gate_up.rows / 2, sh.gate_up.rows / 64 * 4),
        ];
        for ((name, &bytes), (producers, rows, words)) in HANDOFF_NAMES.iter().zip(&layout.handoff_bytes).zip(sends) {
            assert_eq!(bytes, producers * (rows + words), "hand-off {name}");
            assert_eq!(rows % 16, 0, "hand-off {name}: st.async sends rows 16 bytes at a time");
        }
    }
}

#[test]
fn shapes_past_the_kernels_limits_are_refused_with_the_reason() {
    let base = Config::smollm2_135m();
    let cases: [(Config, &str); 9] = [
        (Config { head_dim: 128, hidden: 1152, ..base.clone() }, "heads of 128 dimensions"),
        (Config { intermediate: 1000, ..base.clone() }, "intermediate size 1000"),
        (Config { intermediate: 2560, ..base.clone() }, "at most 128 rows of h a block"),
        (Config { vocab: 70_000, ..base.clone() }, "a vocabulary of 70000"),
        (Config { vocab: 49_150, ..base.clone() }, "a vocabulary of 49150"),
        (Config { hidden: 608, ..base.clone() }, "hidden size 608 is not its 9 heads"),
        (Config { hidden: 1152, heads: 18, kv_heads: 6, ..base.clone() }, "18 query heads"),
        (Config { heads: 32, kv_heads: 8, hidden: 2048, ..base.clone() }, "32 query heads"),
        (Config { eps: 0.0, ..base.clone() }, "an epsilon of 0"),
    ];
    for (config, reason) in cases {
        let err = StepLayout::of(&config).unwrap_err().to_string();
        assert!(err.contains("cannot run this model") && err.contains(reason), "{reason}: {err}");
    }
    // Past the shared memory a block may have: the scores of 20000 positions.
    let long = StepShape { max_positions: 20_000, ..StepShape::of(&base) };
    let err = StepLayout::new(long).unwrap_err().to_string();
    assert!(err.contains("bytes of shared memory a block (at most 232448)"), "{err}");
}
