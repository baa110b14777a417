//! The one-launch decode step's layout, its one description: the model's shapes and eps, each block's rows
//! of each stage, where every part of a block's weight share and of its shared memory lies, the LM head's
//! ring, the hand-offs' sizes. The kernel includes the constants `header.rs` generates from it, the packer
//! writes the shares at its offsets, and the launch takes its shared memory and grid from it. A model past
//! one of the kernel's limits is refused here, with the reason.

use crate::llama::load::Config;
use crate::{Error, Result};

/// Blocks a layer's rows are split over: one thread-block cluster (`CLUSTER` in the kernel).
pub const STEP_SHARES: usize = 16;
/// Clusters a launch: layer l runs on cluster l % STEP_CLUSTERS.
pub const STEP_CLUSTERS: usize = 7;
/// Threads a block.
pub const STEP_THREADS: usize = 256;
/// Positions the library builds the kernel for (its scores in shared memory and its rope table).
pub const STEP_MAX_POSITIONS: usize = 2048;
/// Dynamic shared memory a block may have on sm_90 (227 KB).
pub const STEP_SHARED_MEMORY_LIMIT: usize = 232_448;
/// The head dimension the kernel is written for (a warp's two lanes a dimension pair, rope in halves of 32).
pub const STEP_HEAD_DIM: usize = 64;
/// Cached keys (and values) an attention block holds in shared memory; the rest it reads from L2.
pub const PRELOADED_KEYS: usize = 192;
/// Bytes of one bulk copy.
pub const COPY_BYTES: usize = 32_768;
/// Nanoseconds the clusters after the first wait before loading their first layer (layer 0's weights first).
pub const LOAD_DELAY_NS: usize = 1_500;
/// Slots of the LM head's ring at most.
const MAX_HEAD_SLOTS: usize = 8;
/// Attention's P.V: 8 threads a key.
pub const KEY_GROUPS: usize = STEP_THREADS / 8;
pub const WARPS: usize = STEP_THREADS / 32;
/// Fixed capacities of small regions (4-byte words): xm's sums of squares by producer, attention's output
/// block sums, h's block sums, a block's GEMV outputs and the block's best of the LM head; and (halves) a
/// producer's staged rows.
const SQ_WORDS: usize = 32;
const ATT_SUM_WORDS: usize = 32;
const H_SUM_WORDS: usize = 64;
const OUT_WORDS: usize = 256;
const STAGE_HALVES: usize = 128;

/// A model's shapes as the kernel takes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepShape {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub vocab: usize,
    /// Positions a step can attend to.
    pub max_positions: usize,
    /// rms_norm's epsilon (the file's `layer_norm_rms_epsilon`).
    pub eps: f32,
}

impl StepShape {
    /// `config`'s shapes and eps, for [`STEP_MAX_POSITIONS`] positions.
    pub fn of(config: &Config) -> StepShape {
        let c = config;
        StepShape {
            hidden: c.hidden,
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: c.head_dim,
            intermediate: c.intermediate,
            layers: c.layers,
            vocab: c.vocab,
            max_positions: STEP_MAX_POSITIONS,
            eps: c.eps,
        }
    }

    /// Rows of the stacked q, k and v projections.
    pub fn qkv_rows(&self) -> usize {
        self.hidden + 2 * self.kv_heads * STEP_HEAD_DIM
    }
}

/// Bytes `[offset, offset + bytes)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub offset: usize,
    pub bytes: usize,
}

impl Region {
    pub fn end(&self) -> usize {
        self.offset + self.bytes
    }
}

/// Lays regions out one after another, each at the next multiple of its alignment.
struct Cursor(usize);

impl Cursor {
    fn take(&mut self, bytes: usize, align: usize) -> Region {
        let offset = self.0.div_ceil(align) * align;
        self.0 = offset + bytes;
        Region { offset, bytes }
    }
}

/// One GEMV stage in a block's share: its `rows` (of `blocks` Q4_1 blocks of 32 inputs each) as nibbles
/// `[rows][blocks][16 bytes]`, then their (d, m) scales `[rows][blocks]` as f16 pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageLayout {
    pub rows: usize,
    pub blocks: usize,
    pub nibbles: Region,
    pub scales: Region,
}

/// A block's share of a layer, as bulk-copied into its shared memory: QKV, the output projection, gate and up
/// (the block's gate rows, then its up rows), down, then both norms' weights (f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareLayout {
    pub qkv: StageLayout,
    pub o: StageLayout,
    pub gate_up: StageLayout,
    pub down: StageLayout,
    pub norm1: Region,
    pub norm2: Region,
    /// The share's size (a whole number of 16 bytes: one bulk copy).
    pub bytes: usize,
}

impl ShareLayout {
    pub fn stages(&self) -> [StageLayout; 4] {
        [self.qkv, self.o, self.gate_up, self.down]
    }

    /// Every region by name, in order.
    pub fn regions(&self) -> Vec<(&'static str, Region)> {
        let mut out = Vec::new();
        for (name, stage) in ["qkv", "o", "gate_up", "down"].into_iter().zip(self.stages()) {
            out.push((name, stage.nibbles));
            out.push((name, stage.scales));
        }
        out.extend([("norm1", self.norm1), ("norm2", self.norm2)]);
        out
    }
}

/// A block's dynamic shared memory: its share (`weights`), an attention block's preloaded keys and values,
/// the position's rope row, the f32 vectors (residual x, xm, QKV's outputs, the hand-offs' sums, the GEMV
/// partials or attention's scratch, a block's outputs), the f16 vectors (the normed input, attention's
/// output, h, a producer's staged rows) and the mbarriers (the layer's weights, the hand-offs, the ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmemLayout {
    pub weights: Region,
    pub kpre: Region,
    pub vpre: Region,
    pub rope: Region,
    pub x: Region,
    pub xm: Region,
    pub qkv: Region,
    pub sq: Region,
    pub atts: Region,
    pub hs: Region,
    pub part: Region,
    pub out: Region,
    pub xn: Region,
    pub att: Region,
    pub h: Region,
    pub stage: Region,
    pub bar: Region,
    pub handoff: Region,
    pub ring: Region,
    pub bytes: usize,
}

impl SmemLayout {
    /// Every region by name with the alignment it needs, in order.
    pub fn regions(&self) -> [(&'static str, Region, usize); 19] {
        let s = self;
        [
            ("weights", s.weights, 16),
            ("kpre", s.kpre, 16),
            ("vpre", s.vpre, 16),
            ("rope", s.rope, 16),
            ("x", s.x, 16),
            ("xm", s.xm, 16),
            ("qkv", s.qkv, 16),
            ("sq", s.sq, 16),
            ("atts", s.atts, 16),
            ("hs", s.hs, 16),
            ("part", s.part, 16),
            ("out", s.out, 16),
            ("xn", s.xn, 16),
            ("att", s.att, 16),
            ("h", s.h, 16),
            ("stage", s.stage, 16),
            ("bar", s.bar, 8),
            ("handoff", s.handoff, 8),
            ("ring", s.ring, 8),
        ]
    }
}

/// Attention's scratch inside `part` (f32 offsets, each part 16-byte aligned: a load the compiler widens
/// must not reach into a neighbour another thread writes in the same phase): the roped q (scaled) and the
/// new key, the scores, the P.V partials of each key group, the output, the softmax sums of each key group,
/// each warp's maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionScratch {
    pub q: usize,
    pub k: usize,
    pub scores: usize,
    /// The scores' length: every position and the new one, padded to 4.
    pub score_slots: usize,
    pub pv: usize,
    pub out: usize,
    pub sums: usize,
    pub max: usize,
    /// Its f32s in all.
    pub floats: usize,
}

/// The LM head's ring in the memory the layers no longer need (the share and the preloaded keys): chunks
/// of `chunk_rows` rows, their values `[rows][hidden]` then their scales `[rows][hidden / 32]` (f16); a
/// row group (the block's threads over the hidden size's blocks of 32) takes 4 rows of a chunk (1 past 16
/// groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadRing {
    /// Q8_0 blocks of a row (hidden / 32).
    pub row_blocks: usize,
    pub groups: usize,
    pub chunk_rows: usize,
    pub chunk_bytes: usize,
    /// Bytes from the start of shared memory the ring may use.
    pub area: usize,
    pub slots: usize,
    /// f32s of one chunk's partials (two alternating buffers in `part`).
    pub partials: usize,
}

/// The in-cluster hand-offs in the kernel's order (its `Handoff` enum: `H_QKV`, ...): QKV's rows to the attention
/// blocks, attention's outputs, xm's rows, h's rows.
pub const HANDOFF_NAMES: [&str; 4] = ["QKV", "ATT", "XM", "H"];

/// Everything the kernel, the packer and the launch share, for one model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepLayout {
    pub shape: StepShape,
    pub share: ShareLayout,
    pub smem: SmemLayout,
    pub attention: AttentionScratch,
    pub head: HeadRing,
    /// Bytes a consumer receives in each hand-off (`HANDOFF_NAMES`): QKV's rows (the attention blocks
    /// only), attention's outputs (f16) and their block sums, xm's rows and their sums of squares, h (f16)
    /// and its block sums.
    pub handoff_bytes: [usize; 4],
    /// f32s of `part`: the largest GEMV's partials (one a row and input block) or attention's scratch.
    pub part_floats: usize,
}

fn refuse(what: String) -> Error {
    Error::BadShape { what: format!("the one-launch decode step cannot run this model: {what}") }
}

impl StepLayout {
    /// The layout of `config`'s model at [`STEP_MAX_POSITIONS`] positions, or the first of the kernel's
    /// limits it is past.
    pub fn of(config: &Config) -> Result<StepLayout> {
        StepLayout::new(StepShape::of(config))
    }

    /// The layout of `shape`, or an error naming the first of the kernel's limits it is past.
    pub fn new(shape: StepShape) -> Result<StepLayout> {
        check_shape(&shape)?;
        let s = shape;
        let (kb_h, kb_f) = (s.hidden / 32, s.intermediate / 32);
        let rows = [
            s.qkv_rows() / STEP_SHARES,
            s.hidden / STEP_SHARES,
            2 * s.intermediate / STEP_SHARES,
            s.hidden / STEP_SHARES,
        ];
        let mut share_at = Cursor(0);
        let mut stage = |rows: usize, blocks: usize| StageLayout {
            rows,
            blocks,
            nibbles: share_at.take(rows * blocks * 16, 16),
            scales: share_at.take(rows * blocks * 4, 4),
        };
        let (qkv, o, gate_up, down) =
            (stage(rows[0], kb_h), stage(rows[1], kb_h), stage(rows[2], kb_h), stage(rows[3], kb_f));
        let (norm1, norm2) = (share_at.take(4 * s.hidden, 4), share_at.take(4 * s.hidden, 4));
        let share = ShareLayout { qkv, o, gate_up, down, norm1, norm2, bytes: share_at.0.div_ceil(16) * 16 };

        let score_slots = (s.max_positions + 1).div_ceil(4) * 4;
        let hd = STEP_HEAD_DIM;
        // Attention's scratch in f32s, each part at a multiple of 4 (16 bytes).
        let mut scratch = Cursor(0);
        let mut part = |floats: usize| scratch.take(floats, 4).offset;
        let (q, k, scores, pv) = (part(hd), part(hd), part(score_slots), part(KEY_GROUPS * hd));
        let (out, sums, max) = (part(hd), part(KEY_GROUPS), part(WARPS));
        let attention = AttentionScratch { q, k, scores, score_slots, pv, out, sums, max, floats: scratch.0 };
        let partials = share.stages().iter().map(|st| st.rows * st.blocks).max().unwrap_or(0);
        let part_floats = partials.max(attention.floats).div_ceil(4) * 4;

        let mut at = Cursor(0);
        let weights = at.take(share.bytes, 16);
        let kpre = at.take(2 * PRELOADED_KEYS * hd, 16);
        let vpre = at.take(2 * PRELOADED_KEYS * hd, 16);
        let head = head_ring(&s, vpre.end());
        let smem = SmemLayout {
            weights,
            kpre,
            vpre,
            rope: at.take(4 * hd, 16),
            x: at.take(4 * s.hidden, 16),
            xm: at.take(4 * s.hidden, 16),
            qkv: at.take(4 * s.qkv_rows(), 16),
            sq: at.take(4 * SQ_WORDS, 16),
            atts: at.take(4 * ATT_SUM_WORDS, 16),
            hs: at.take(4 * H_SUM_WORDS, 16),
            part: at.take(4 * part_floats, 16),
            out: at.take(4 * OUT_WORDS, 16),
            xn: at.take(2 * s.hidden, 16),
            att: at.take(2 * s.hidden, 16),
            h: at.take(2 * s.intermediate, 16),
            stage: at.take(2 * STAGE_HALVES, 16),
            bar: at.take(8, 8),
            handoff: at.take(8 * HANDOFF_NAMES.len(), 8),
            ring: at.take(8 * head.slots, 8),
            bytes: 0,
        };
        let smem = SmemLayout { bytes: at.0, ..smem };
        let r_gu = gate_up.rows;
        let handoff_bytes = [
            4 * s.qkv_rows(),
            s.heads * (2 * hd + 2 * 4),
            4 * s.hidden + 4 * STEP_SHARES,
            STEP_SHARES * (r_gu / 2 * 2 + r_gu / 64 * 4),
        ];
        let layout = StepLayout { shape, share, smem, attention, head, handoff_bytes, part_floats };
        layout.check_fits()?;
        Ok(layout)
    }

    /// Blocks a launch.
    pub fn grid(&self) -> usize {
        STEP_SHARES * STEP_CLUSTERS
    }

    /// The LM head's rows of block `block`: `[head_first(block), head_first(block + 1))`, in whole 16s (so
    /// that each block's rows and their scales start 16-byte aligned for bulk copies).
    pub fn head_first(&self, block: usize) -> usize {
        block * (self.shape.vocab / 16) / self.grid() * 16
    }

    /// The limits that depend on the sizes computed: the ring, the partials, the total.
    fn check_fits(&self) -> Result<()> {
        let h = &self.head;
        if h.slots < 2 {
            return Err(refuse(format!(
                "hidden size {} (the LM head's ring needs two chunks of {} bytes in {} bytes)",
                self.shape.hidden, h.chunk_bytes, h.area
            )));
        }
        if 2 * h.partials > self.part_floats {
            return Err(refuse(format!(
                "hidden size {} (two chunks of the LM head's partials, {} f32s, past the {} of the partials)",
                self.shape.hidden,
                2 * h.partials,
                self.part_floats
            )));
        }
        if self.smem.bytes > STEP_SHARED_MEMORY_LIMIT {
            return Err(refuse(format!(
                "{} bytes of shared memory a block (at most {STEP_SHARED_MEMORY_LIMIT})",
                self.smem.bytes
            )));
        }
        Ok(())
    }
}

fn head_ring(s: &StepShape, area: usize) -> HeadRing {
    let row_blocks = s.hidden / 32;
    let groups = STEP_THREADS / row_blocks;
    let chunk_rows = groups * if groups > 16 { 1 } else { 4 };
    let chunk_bytes = chunk_rows * (s.hidden + row_blocks * 2);
    HeadRing {
        row_blocks,
        groups,
        chunk_rows,
        chunk_bytes,
        area,
        slots: (area / chunk_bytes).min(MAX_HEAD_SLOTS),
        partials: chunk_rows * row_blocks,
    }
}

/// The limits on the shapes alone, each with what the kernel needs.
fn check_shape(s: &StepShape) -> Result<()> {
    let limit = |ok: bool, what: String| if ok { Ok(()) } else { Err(refuse(what)) };
    limit(
        s.head_dim == STEP_HEAD_DIM,
        format!("heads of {} dimensions (it is written for {STEP_HEAD_DIM})", s.head_dim),
    )?;
    limit(
        s.kv_heads > 0 && s.heads <= STEP_SHARES && s.heads % s.kv_heads == 0,
        format!(
            "{} query heads over {} kv heads (at most {STEP_SHARES}, a whole number a kv head)",
            s.heads, s.kv_heads
        ),
    )?;
    limit(
        s.heads * STEP_HEAD_DIM == s.hidden,
        format!("hidden size {} is not its {} heads of {STEP_HEAD_DIM}", s.hidden, s.heads),
    )?;
    limit(
        s.hidden % 64 == 0 && s.hidden / STEP_SHARES <= 64,
        format!("hidden size {} (a multiple of 64, at most {}: 4 threads a row of down)", s.hidden, 64 * STEP_SHARES),
    )?;
    limit(
        s.intermediate % (STEP_SHARES * 32) == 0 && s.intermediate / STEP_SHARES <= STAGE_HALVES,
        format!(
            "intermediate size {} (a multiple of {}, at most {} rows of h a block)",
            s.intermediate,
            STEP_SHARES * 32,
            STAGE_HALVES
        ),
    )?;
    limit(
        s.qkv_rows() / STEP_SHARES <= OUT_WORDS && s.qkv_rows() % (4 * STEP_SHARES) == 0,
        format!("{} rows of q, k and v (whole 16 bytes a block, at most {OUT_WORDS} a block)", s.qkv_rows()),
    )?;
    limit(
        s.vocab > 0 && s.vocab <= 1 << 16 && s.vocab % 16 == 0,
        format!("a vocabulary of {} (token ids in 16 bits, the LM head's rows in 16s)", s.vocab),
    )?;
    limit(s.layers > 0, "no layers".into())?;
    limit(s.max_positions > 0, "no positions".into())?;
    limit(s.eps.is_finite() && s.eps > 0.0, format!("an epsilon of {}", s.eps))?;
    Ok(())
}
