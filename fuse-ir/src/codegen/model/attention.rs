//! How an attention call is cut into blocks (the host's half of the geometry; the runtime packs the numbers).
//! Two paths:
//! - decode (`attention_decode.cu`), when the rows of one key/value head (queries x group) fit one block:
//!   one block per (batch, kv head, key split), splits chosen so that the grid is about one block a
//!   multiprocessor with at least [`ATTENTION_DECODE_SPLIT_KEYS`] keys a split; the last split block of a
//!   (batch, kv head) merges the splits' f32 partials itself, counting arrivals in device counters.
//! - prefill (`attention.cu`): query tiles of the rows that share a key/value head, key splits that fill
//!   the GPU when there are few query tiles, the dynamic shared memory a block needs and the f32 partials
//!   that `attention_combine.cu` merges when there is more than one split.

use super::ModelKernel;
use crate::DType;

/// Threads per block of the attention kernel: 4 warps.
pub const ATTENTION_THREADS: u32 = 128;
/// The largest head dimension the attention kernel holds (its shared rows, two channels a lane per pair).
pub const ATTENTION_MAX_HEAD_DIM: usize = 256;
/// Keys a tile: one a lane when scoring.
pub const ATTENTION_KEY_TILE: usize = 32;
/// Query rows a block: (query, query head) pairs of one key/value head, 4 for each warp.
pub const ATTENTION_ROW_TILE: usize = 16;
/// Threads per block of the combine kernel: one per channel.
pub const ATTENTION_COMBINE_THREADS: u32 = 256;
/// Head dimensions the attention kernel is built for (`-DFUSE_ATTENTION_D`, the smallest that holds d): a lane
/// keeps D / 64 channel pairs of each of its rows in registers.
pub const ATTENTION_HEAD_DIMS: [usize; 3] = [64, 128, ATTENTION_MAX_HEAD_DIM];
/// Threads per block of the decode kernel: 4 warps.
pub const ATTENTION_DECODE_THREADS: u32 = 128;
/// Rows (queries x group) of one key/value head the decode kernel holds: calls with more take the prefill
/// kernel.
pub const ATTENTION_DECODE_ROWS: usize = 16;
/// Rows (queries x group of one kv head) the decode kernel computes in one pass over a split's keys, at most
/// (`FUSE_DECODE_PASS_ROWS`; more rows take more passes).
pub const ATTENTION_DECODE_PASS_ROWS: usize = 4;
/// Most key splits of the decode kernel (the last split block keeps a weight for each in shared memory).
pub const ATTENTION_DECODE_MAX_SPLITS: usize = 128;
/// Fewest keys a decode split covers (but the last): fewer would cost more in merging than they save. The
/// kernel applies it again to each sequence's key count (measured on an H200: 128 was 15% slower at 1024
/// cached keys, batch 1).
pub const ATTENTION_DECODE_SPLIT_KEYS: usize = 64;
/// Decode: the most keys a split may have for the kernel to run a kv head's rows in row groups
/// ([`AttentionLaunch::row_groups`]).
pub const ATTENTION_DECODE_ROW_GROUP_KEYS: usize = 256;
/// The define of the decode kernel's variant with rope and the cache appends fused in (fuse-runtime's
/// `rope_append.rs`).
pub const ATTENTION_DECODE_ROPE_DEFINE: &str = "-DFUSE_DECODE_ROPE=1";
/// Added to the rope variant where rope's input, the tables and the new value rows are vector-loadable and
/// the caches are (with `-DFUSE_DECODE_VECTOR=1` and d the build's): the rope runs in registers.
pub const ATTENTION_DECODE_ROPE_VECTOR_DEFINE: &str = "-DFUSE_DECODE_ROPE_VECTOR=1";
/// The define of the decode kernel's build for k and v rows it may read as 16-byte vectors (the host checks
/// them: `kv_vector`), without the element-by-element path.
pub const ATTENTION_DECODE_VECTOR_DEFINE: &str = "-DFUSE_DECODE_VECTOR=1";
/// The define of the decode kernel's build that loads its first keys and values before it waits for the kernel
/// before it (only where the host knows that kernel writes none of k, v and lens).
pub const ATTENTION_DECODE_EARLY_DEFINE: &str = "-DFUSE_DECODE_EARLY=1";
/// The define of the decode kernel's variant launched in clusters of `splits` blocks (sm_90), whose splits
/// merge through the cluster's shared memory.
pub const ATTENTION_DECODE_CLUSTER_DEFINE: &str = "-DFUSE_DECODE_CLUSTER=1";
/// Most splits a cluster of the decode kernel holds (8: the portable cluster size).
pub const ATTENTION_DECODE_CLUSTER_MAX: usize = 8;
/// Blocks wanted for each multiprocessor before the keys are split further (two resident at a time hide
/// the load latency of one another's tiles).
const BLOCKS_PER_SM: usize = 2;

/// Sizes of one attention call: q [batch, q_heads, queries, d], k and v [batch, kv_heads, keys, d]. With
/// `attention_len`, `keys` is the capacity (skv): the key counts live on the device, so the splits cover the
/// capacity and those past a batch's count do nothing (no host value changes the launch from step to step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub batch: usize,
    pub q_heads: usize,
    pub queries: usize,
    pub kv_heads: usize,
    pub keys: usize,
    pub d: usize,
}

/// The launch of [`AttentionShape`] on a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionLaunch {
    /// The decode kernel (`fuse_model_attention_decode`, one launch whatever the splits), else the prefill
    /// kernel (`fuse_model_attention`, then `fuse_model_attention_combine` with more than one split).
    pub decode: bool,
    /// Tiles of up to [`ATTENTION_ROW_TILE`] rows among the queries x group rows of each key/value head.
    pub q_tiles: usize,
    /// Key ranges computed by separate blocks (1: the kernel writes the output itself).
    pub splits: usize,
    /// Keys in each split but maybe the last: whole tiles for prefill.
    pub split_keys: usize,
    /// Work items, batch x kv_heads x q_tiles x splits: at most one block each.
    pub items: usize,
    /// Dynamic shared memory of a block.
    pub shared_bytes: usize,
    /// f32 values of the partials (0 with one split): d + 2 (decode: d rounded up to 4, + 2) for each
    /// output row and split.
    pub partial_floats: usize,
    /// u32 arrival counters the decode kernel needs (zero between launches), one per (batch, kv head); 0
    /// with one split or for prefill.
    pub counters: usize,
    /// The build's head dimension (one of [`ATTENTION_HEAD_DIMS`]; the largest when d is larger still).
    pub held_d: usize,
    /// Decode: the rows one pass of the kernel holds, the rows of a kv head up to
    /// [`ATTENTION_DECODE_PASS_ROWS`] (a build for 3, say, computes no fourth row only to drop it). 0 for
    /// prefill.
    pub pass_rows: usize,
    /// d is `held_d` (the decode kernel's build then divides by a constant).
    pub exact_d: bool,
    /// Decode: groups of [`ATTENTION_DECODE_THREADS`] threads a block, each taking `pass_rows` rows of a
    /// pass at the same time (a kv head's 2 or 3 rows one a group, 4 two a group; more rows one group).
    /// The block has `row_groups * ATTENTION_DECODE_THREADS` threads. 1 for prefill.
    pub row_groups: usize,
    /// Decode: the fewest keys a split covers but the last (the kernel evens a sequence's keys out over as
    /// many splits as that leaves, `FUSE_DECODE_SPLIT_KEYS`): [`ATTENTION_DECODE_SPLIT_KEYS`] unless asked.
    pub split_floor: usize,
    /// Decode: a sequence that sees at most so many keys runs in one split, whatever the others (0: none;
    /// `FUSE_DECODE_ONE_SPLIT_KEYS`): the kernel chooses per sequence on the device, where the launch covers
    /// the cache's capacity.
    pub one_split_keys: usize,
    /// Decode: blocks a kv head's rows are cut into, each one pass of its rows (`FUSE_DECODE_ROW_BLOCKS`,
    /// [`AttentionLaunch::in_row_blocks`]); 1: every block takes all of them.
    pub row_blocks: usize,
}

impl AttentionLaunch {
    /// The attention kernel's defines: the element type's, the head dimension it holds and, for decode with
    /// fewer rows than a full pass, the rows a pass holds.
    pub fn defines(&self, dtype: DType) -> Vec<String> {
        let mut defines = ModelKernel::defines(dtype);
        defines.push(format!("-DFUSE_ATTENTION_D={}", self.held_d));
        if self.decode && self.pass_rows < ATTENTION_DECODE_PASS_ROWS {
            defines.push(format!("-DFUSE_DECODE_PASS_ROWS={}", self.pass_rows));
        }
        if self.decode && self.exact_d {
            defines.push("-DFUSE_DECODE_EXACT_D=1".to_string());
        }
        if self.decode && self.row_groups > 1 {
            defines.push(format!("-DFUSE_DECODE_ROW_GROUPS={}", self.row_groups));
        }
        if self.decode && self.split_floor != ATTENTION_DECODE_SPLIT_KEYS {
            defines.push(format!("-DFUSE_DECODE_SPLIT_KEYS={}", self.split_floor));
        }
        if self.decode && self.one_split_keys > 0 {
            defines.push(format!("-DFUSE_DECODE_ONE_SPLIT_KEYS={}", self.one_split_keys));
        }
        if self.decode && self.row_blocks > 1 {
            defines.push(format!("-DFUSE_DECODE_ROW_BLOCKS={}", self.row_blocks));
        }
        if self.decode && self.held_splits() < ATTENTION_DECODE_MAX_SPLITS {
            defines.push(format!("-DFUSE_DECODE_MAX_SPLITS={}", self.held_splits()));
        }
        defines
    }

    /// The splits a decode build holds room for (`FUSE_DECODE_MAX_SPLITS`): the launch's rounded up to a warp's
    /// 32, at most [`ATTENTION_DECODE_MAX_SPLITS`]. A step kernel holds every task's static shared memory at
    /// once: 128 splits' merge weights are 8 KB a block where a launch of 16 splits needs 2.
    pub fn held_splits(&self) -> usize {
        self.splits.max(1).next_multiple_of(32).min(ATTENTION_DECODE_MAX_SPLITS)
    }

    /// Threads a block of the decode kernel.
    pub fn decode_threads(&self) -> u32 {
        ATTENTION_DECODE_THREADS * self.row_groups as u32
    }

    /// The same launch where a sequence seeing at most `keys` keys takes one split (no partials to merge);
    /// prefill unchanged.
    pub fn one_split_up_to(self, keys: usize) -> AttentionLaunch {
        AttentionLaunch { one_split_keys: if self.decode { keys } else { 0 }, ..self }
    }

    /// The same launch with blocks of at most `max_threads` (at least one row group's): as many decode row
    /// groups as fit, each taking more of the key/value head's rows a pass (3 rows: 2 groups of up
    /// to 2, the second holding one); one group takes them all where only one fits.
    pub fn within_threads(self, max_threads: u32) -> AttentionLaunch {
        if !self.decode || self.decode_threads() <= max_threads.max(ATTENTION_DECODE_THREADS) {
            return self;
        }
        let groups = (max_threads / ATTENTION_DECODE_THREADS).max(1) as usize;
        let rows_a_head = self.row_groups * self.pass_rows;
        let pass_rows = rows_a_head.div_ceil(groups).clamp(1, ATTENTION_DECODE_PASS_ROWS);
        AttentionLaunch { row_groups: rows_a_head.div_ceil(pass_rows).min(groups), pass_rows, ..self }
    }

    /// The same decode launch with a kv head's `rows_a_head` rows cut into blocks of one pass each, a row
    /// group a row, as many groups as `max_threads` holds (at most 2, as `within_threads` has them): where a
    /// block of at most `max_threads` would otherwise give a group several rows (a one-launch step's 256-thread
    /// tasks: the llama-3.2-1b files' 4 rows a kv head in 2 groups of 2), each warp's chain of dependent
    /// instructions is one row's, in more blocks. Not for clusters (their merge is a kv head's block set);
    /// unchanged for prefill and one row a head.
    pub fn in_row_blocks(self, rows_a_head: usize, max_threads: u32) -> AttentionLaunch {
        if !self.decode || rows_a_head < 2 {
            return self;
        }
        let groups = ((max_threads / ATTENTION_DECODE_THREADS).max(1) as usize).min(2).min(rows_a_head);
        let row_blocks = rows_a_head.div_ceil(groups);
        let items = self.items / self.row_blocks.max(1) * row_blocks;
        AttentionLaunch { row_groups: groups, pass_rows: 1, row_blocks, items, ..self }
    }
}

/// Floats a row of the kernel's shared tiles: d rounded up to 4, then to an odd number of 4-float chunks
/// (so that 8 lanes reading 16 bytes of 8 different rows hit 32 different banks). The kernel computes the
/// same (`stride = d4 | 4`).
fn shared_stride(d: usize) -> usize {
    (d.div_ceil(4) * 4) | 4
}

/// The path, query tiles, key splits and shared memory for `shape` on a GPU of `sm_count` multiprocessors.
/// Decode (the rows of a kv head fit one block): splits until batch x kv_heads x splits reaches the
/// multiprocessors, each of at least [`ATTENTION_DECODE_SPLIT_KEYS`] keys, at most
/// [`ATTENTION_DECODE_MAX_SPLITS`], and at most [`ATTENTION_DECODE_CLUSTER_MAX`] (a cluster's) where those
/// have no more than [`ATTENTION_DECODE_ROW_GROUP_KEYS`] keys each. Prefill: splits are added while there are fewer than
/// `BLOCKS_PER_SM` (2) blocks a multiprocessor, up to one per key tile. Either way evened out so that none is empty.
pub fn attention_launch(shape: AttentionShape, sm_count: usize) -> AttentionLaunch {
    attention_launch_with_split_floor(shape, sm_count, ATTENTION_DECODE_SPLIT_KEYS)
}

/// [`attention_launch`] with decode splits of at least `split_keys` keys (but the last) rather than
/// [`ATTENTION_DECODE_SPLIT_KEYS`]: where merging splits costs more than it saves, as in the tasks of a
/// one-launch step, whose splits merge through global memory and a last block, never a cluster.
pub fn attention_launch_with_split_floor(shape: AttentionShape, sm_count: usize, split_keys: usize) -> AttentionLaunch {
    let split_floor = split_keys.max(1);
    let group = shape.q_heads / shape.kv_heads.max(1);
    let held_d = ATTENTION_HEAD_DIMS.into_iter().find(|&h| h >= shape.d).unwrap_or(ATTENTION_MAX_HEAD_DIM);
    if shape.queries * group <= ATTENTION_DECODE_ROWS {
        // About one block a multiprocessor (the rounding up gives fewer than two), no split under
        // ATTENTION_DECODE_SPLIT_KEYS keys, and the splits evened out over the keys (none empty).
        let base = (shape.batch * shape.kv_heads).max(1);
        let wanted = sm_count.max(1).div_ceil(base);
        // No more splits than a cluster holds where their keys stay few enough for row groups: sm_90 then
        // merges them in the cluster's shared memory, with no partials, counters or last-block merge.
        let in_cluster = shape.keys.div_ceil(ATTENTION_DECODE_CLUSTER_MAX) <= ATTENTION_DECODE_ROW_GROUP_KEYS;
        let wanted = if in_cluster { wanted.min(ATTENTION_DECODE_CLUSTER_MAX) } else { wanted };
        let most = (shape.keys / split_floor).clamp(1, ATTENTION_DECODE_MAX_SPLITS);
        let split_keys = shape.keys.div_ceil(wanted.min(most)).max(1);
        let splits = shape.keys.div_ceil(split_keys).max(1);
        let rows = shape.batch * shape.q_heads * shape.queries;
        // Rows of a kv head side by side in row groups where the registers allow (3 groups of one row:
        // 168 registers at d = 64; 4 would spill under the 128 of a 512-thread block), and where a split's
        // keys are few enough that the kernel's time is its chain of instructions: each group loads the
        // split's keys again (measured on the H200: 187 keys a split 10.4 -> 9.3 us, 342 keys 11.3 -> 17.3).
        let short = split_keys <= ATTENTION_DECODE_ROW_GROUP_KEYS;
        let (row_groups, pass_rows) = match shape.queries * group {
            n @ 2..=3 if short => (n, 1),
            4 if short => (2, 2),
            n => (1, n.clamp(1, ATTENTION_DECODE_PASS_ROWS)),
        };
        return AttentionLaunch {
            decode: true,
            q_tiles: 1,
            splits,
            split_keys,
            items: base * splits,
            shared_bytes: 0,
            partial_floats: if splits > 1 { rows * splits * (shape.d.div_ceil(4) * 4 + 2) } else { 0 },
            counters: if splits > 1 { base } else { 0 },
            held_d,
            pass_rows,
            exact_d: shape.d == held_d,
            row_groups,
            split_floor,
            one_split_keys: 0,
            row_blocks: 1,
        };
    }
    let q_tiles = (shape.queries * group).div_ceil(ATTENTION_ROW_TILE).max(1);
    let base = (shape.batch * shape.kv_heads * q_tiles).max(1);
    let key_tiles = shape.keys.div_ceil(ATTENTION_KEY_TILE).max(1);
    let wanted = (BLOCKS_PER_SM * sm_count.max(1)).div_ceil(base);
    let tiles_per_split = key_tiles.div_ceil(wanted.clamp(1, key_tiles));
    let splits = key_tiles.div_ceil(tiles_per_split);
    let rows = shape.batch * shape.q_heads * shape.queries;
    let stride = shared_stride(shape.d);
    let warps = ATTENTION_THREADS as usize / 32;
    AttentionLaunch {
        decode: false,
        q_tiles,
        splits,
        split_keys: tiles_per_split * ATTENTION_KEY_TILE,
        items: base * splits,
        // query, key and value tiles of f32 rows, then each warp's probabilities (a float4 a key).
        shared_bytes: (ATTENTION_ROW_TILE + 2 * ATTENTION_KEY_TILE) * stride * 4 + warps * ATTENTION_KEY_TILE * 16,
        partial_floats: if splits > 1 { rows * splits * (shape.d + 2) } else { 0 },
        counters: 0,
        held_d,
        pass_rows: 0,
        exact_d: shape.d == held_d,
        row_groups: 1,
        split_floor: ATTENTION_DECODE_SPLIT_KEYS,
        one_split_keys: 0,
        row_blocks: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200_SMS: usize = 132;

    fn shape(batch: usize, q_heads: usize, kv_heads: usize, queries: usize, keys: usize, d: usize) -> AttentionShape {
        AttentionShape { batch, q_heads, queries, kv_heads, keys, d }
    }

    /// Splits are whole tiles, cover the keys, and none is empty.
    fn check_splits(s: AttentionShape, l: &AttentionLaunch) {
        assert_eq!(l.split_keys % ATTENTION_KEY_TILE, 0, "{s:?}: {l:?}");
        assert!(l.splits * l.split_keys >= s.keys, "{s:?}: {l:?}");
        assert!((l.splits - 1) * l.split_keys < s.keys.max(1), "{s:?}: an empty split {l:?}");
        assert_eq!(l.items, s.batch * s.kv_heads * l.q_tiles * l.splits);
    }

    /// Decode splits cover the keys, none is empty, each but the last has at least 64 keys, and there are
    /// no more than the kernel's weights hold.
    fn check_decode_splits(s: AttentionShape, l: &AttentionLaunch) {
        assert!(l.decode && l.q_tiles == 1 && l.shared_bytes == 0, "{s:?}: {l:?}");
        assert!(l.splits >= 1 && l.splits <= ATTENTION_DECODE_MAX_SPLITS, "{s:?}: {l:?}");
        // The build holds room for every split, a warp's 32 at a time, and says so where it holds fewer than 128.
        let held = l.held_splits();
        assert!(held >= l.splits && held % 32 == 0 && held <= ATTENTION_DECODE_MAX_SPLITS, "{s:?}: {l:?}");
        let define = l.defines(DType::BF16).into_iter().find(|d| d.starts_with("-DFUSE_DECODE_MAX_SPLITS="));
        assert_eq!(define.is_some(), held < ATTENTION_DECODE_MAX_SPLITS, "{s:?}: {l:?}");
        assert!(l.splits * l.split_keys >= s.keys, "{s:?}: {l:?}");
        assert!((l.splits - 1) * l.split_keys < s.keys.max(1), "{s:?}: an empty split {l:?}");
        assert!(l.splits == 1 || l.split_keys >= ATTENTION_DECODE_SPLIT_KEYS, "{s:?}: short splits {l:?}");
        assert_eq!(l.items, s.batch * s.kv_heads * l.splits);
        // Row groups only over short splits, at most 3 (the registers), covering the kv head's rows in one pass.
        let rows_a_head = s.queries * (s.q_heads / s.kv_heads.max(1));
        let grouped = l.split_keys <= ATTENTION_DECODE_ROW_GROUP_KEYS && l.row_groups * l.pass_rows >= rows_a_head;
        assert!(l.row_groups == 1 || (grouped && l.row_groups <= 3), "{s:?}: {l:?}");
        let rows = s.batch * s.q_heads * s.queries;
        if l.splits > 1 {
            assert_eq!(l.partial_floats, rows * l.splits * (s.d.div_ceil(4) * 4 + 2), "{s:?}: {l:?}");
            assert_eq!(l.counters, s.batch * s.kv_heads, "{s:?}: {l:?}");
        } else {
            assert_eq!((l.partial_floats, l.counters), (0, 0), "{s:?}: {l:?}");
        }
    }

    #[test]
    fn decode_splits_the_keys_to_fill_the_gpu() {
        for batch in [1, 2, 16] {
            for keys in [0, 1, 17, 63, 64, 127, 128, 1000, 4095, 8192] {
                let s = shape(batch, 9, 3, 1, keys, 64);
                let l = attention_launch(s, H200_SMS);
                check_decode_splits(s, &l);
                // About a block a multiprocessor, fewer than two; or as many 64-key splits as there are; or,
                // where 8 splits (a cluster) have at most 256 keys each, at most 8.
                let base = batch * 3;
                assert!(l.items < 2 * H200_SMS.max(base), "{s:?}: {l:?}");
                let most = (keys / ATTENTION_DECODE_SPLIT_KEYS).max(1);
                let cluster_most = if keys <= 8 * ATTENTION_DECODE_ROW_GROUP_KEYS {
                    most.min(ATTENTION_DECODE_CLUSTER_MAX)
                } else {
                    most
                };
                assert!(l.items >= H200_SMS.min(base * cluster_most), "{s:?}: {l:?}");
                assert!(
                    keys > 8 * ATTENTION_DECODE_ROW_GROUP_KEYS || l.splits <= ATTENTION_DECODE_CLUSTER_MAX,
                    "{s:?}: {l:?}"
                );
            }
        }
        // SmolLM2-135M at batch 1: 63 cached keys in one split, 128 in 2 of 64, 8192 in 44 (132 blocks).
        let l = attention_launch(shape(1, 9, 3, 1, 63, 64), H200_SMS);
        assert_eq!((l.splits, l.split_keys, l.items, l.counters), (1, 63, 3, 0), "{l:?}");
        let l = attention_launch(shape(1, 9, 3, 1, 128, 64), H200_SMS);
        assert_eq!((l.splits, l.split_keys, l.items, l.counters), (2, 64, 6, 3), "{l:?}");
        assert!(l.defines(DType::BF16).contains(&"-DFUSE_DECODE_MAX_SPLITS=32".to_string()), "{l:?}");
        // 1072 (a 1024-token cache with room for 48 more): 8 splits of 134, one cluster of each kv head.
        let l = attention_launch(shape(1, 9, 3, 1, 1072, 64), H200_SMS);
        assert_eq!((l.splits, l.split_keys, l.items), (8, 134, 24), "{l:?}");
        let l = attention_launch(shape(1, 9, 3, 1, 8192, 64), H200_SMS);
        assert_eq!((l.splits, l.items), (44, 132), "{l:?}");
        // Batch 16: 48 blocks before splitting, 3 splits of 8192 keys.
        let l = attention_launch(shape(16, 9, 3, 1, 8192, 64), H200_SMS);
        assert_eq!((l.splits, l.items), (3, 144), "{l:?}");
        // One kv head over a long cache: no more splits than the kernel holds.
        let l = attention_launch(shape(1, 1, 1, 1, 1 << 20, 128), 1000);
        assert_eq!(l.splits, ATTENTION_DECODE_MAX_SPLITS, "{l:?}");
        check_decode_splits(shape(1, 1, 1, 1, 1 << 20, 128), &l);
    }

    #[test]
    fn a_split_floor_keeps_splits_long_and_tells_the_kernel() {
        for keys in [1, 100, 255, 256, 511, 1072, 8192] {
            let s = shape(1, 9, 3, 1, keys, 64);
            let l = attention_launch_with_split_floor(s, H200_SMS, 256);
            assert!(l.splits * l.split_keys >= keys && (l.splits - 1) * l.split_keys < keys, "{s:?}: {l:?}");
            assert!(l.splits == 1 || l.split_keys >= 256, "{s:?}: short splits {l:?}");
            assert_eq!(l.items, 3 * l.splits);
            assert!(l.defines(DType::BF16).contains(&"-DFUSE_DECODE_SPLIT_KEYS=256".to_string()), "{l:?}");
        }
        // 1072 keys: 4 splits of 268 (8 of 134 with the default floor).
        let l = attention_launch_with_split_floor(shape(1, 9, 3, 1, 1072, 64), H200_SMS, 256);
        assert_eq!((l.splits, l.split_keys, l.items), (4, 268, 12), "{l:?}");
        // The default floor is the plain launch, with no define.
        let s = shape(2, 9, 3, 1, 1000, 64);
        let l = attention_launch_with_split_floor(s, H200_SMS, ATTENTION_DECODE_SPLIT_KEYS);
        assert_eq!(l, attention_launch(s, H200_SMS));
        assert!(!l.defines(DType::BF16).iter().any(|d| d.starts_with("-DFUSE_DECODE_SPLIT_KEYS")));
        // One split for short sequences: the kernel is told, the grid is not changed.
        let one = l.one_split_up_to(192);
        assert_eq!((one.splits, one.items), (l.splits, l.items));
        assert!(one.defines(DType::BF16).contains(&"-DFUSE_DECODE_ONE_SPLIT_KEYS=192".to_string()));
        let prefill = attention_launch(shape(1, 32, 8, 512, 512, 64), H200_SMS);
        assert!(!prefill.decode && prefill.one_split_up_to(192).one_split_keys == 0);
    }

    #[test]
    fn decode_is_taken_while_the_rows_of_a_kv_head_fit_one_block() {
        // 9 over 3 heads: 3 rows a query, so up to 5 queries; 16 query heads of one kv head: 1 query.
        for (q_heads, kv_heads, queries, decode) in [
            (9, 3, 1, true),
            (9, 3, 5, true),
            (9, 3, 6, false),
            (16, 1, 1, true),
            (32, 1, 1, false),
            (2, 2, 16, true),
            (2, 2, 17, false),
        ] {
            let s = shape(2, q_heads, kv_heads, queries, 300, 64);
            let l = attention_launch(s, H200_SMS);
            assert_eq!(l.decode, decode, "{s:?}: {l:?}");
            if decode {
                check_decode_splits(s, &l);
            } else {
                check_splits(s, &l);
                assert_eq!(l.counters, 0);
            }
        }
    }

    #[test]
    fn prefill_has_enough_query_tiles_without_splits() {
        let s = shape(1, 9, 3, 512, 512, 64);
        let l = attention_launch(s, H200_SMS);
        assert_eq!((l.decode, l.q_tiles, l.splits), (false, 96, 1), "{l:?}");
        // A short prompt over few heads still splits.
        let s = shape(1, 2, 2, 17, 300, 128);
        let l = attention_launch(s, H200_SMS);
        check_splits(s, &l);
        assert!(l.splits > 1, "{l:?}");
        // More query heads a kv head than a tile holds: the rows of one query span tiles.
        let l = attention_launch(shape(1, 32, 1, 3, 40, 64), H200_SMS);
        assert_eq!(l.q_tiles, 6);
    }

    /// Whether a define is not the splits a build holds (`held_splits`, checked in `check_decode_splits`).
    fn not_held(define: &String) -> bool {
        !define.starts_with("-DFUSE_DECODE_MAX_SPLITS=")
    }

    #[test]
    fn shared_memory_fits_every_head_dimension() {
        let bytes = |d| attention_launch(shape(1, 1, 1, 17, 1, d), H200_SMS).shared_bytes;
        assert_eq!(shared_stride(64), 68);
        assert_eq!(shared_stride(3), 4);
        assert_eq!(shared_stride(8), 12);
        assert_eq!(shared_stride(256), 260);
        // Up to d = 128 under the 48 KB a block gets without opting in; d = 256 under sm_80's 163 KB.
        assert!(bytes(128) <= 48 * 1024, "{}", bytes(128));
        assert!(bytes(ATTENTION_MAX_HEAD_DIM) <= 163 * 1024, "{}", bytes(ATTENTION_MAX_HEAD_DIM));
        let held = |d| attention_launch(shape(1, 1, 1, 1, 1, d), H200_SMS).held_d;
        assert_eq!([1, 63, 64, 65, 128, 129, 256].map(held), [64, 64, 64, 128, 128, 256, 256]);
        let defines = attention_launch(shape(1, 1, 1, 1, 1, 100), H200_SMS)
            .defines(DType::BF16)
            .into_iter()
            .filter(not_held)
            .collect::<Vec<_>>();
        assert_eq!(defines, ["-DFUSE_MODEL_DTYPE=2", "-DFUSE_ATTENTION_D=128", "-DFUSE_DECODE_PASS_ROWS=1"]);
        // SmolLM2's 3 query heads a kv head: 3 row groups of one row each (a block of 3 x 128 threads); 4 rows: 2
        // groups of 2; more rows: one group, full passes; prefill: none.
        let launch = |q_heads, queries| attention_launch(shape(1, q_heads, 1, queries, 300, 64), H200_SMS);
        let pass = |q_heads, queries| {
            launch(q_heads, queries).defines(DType::BF16).into_iter().filter(not_held).collect::<Vec<_>>()
        };
        // d = 64 is the build's: its decode build divides by a constant.
        assert_eq!(
            pass(3, 1)[2..],
            ["-DFUSE_DECODE_PASS_ROWS=1", "-DFUSE_DECODE_EXACT_D=1", "-DFUSE_DECODE_ROW_GROUPS=3"]
        );
        assert_eq!(launch(3, 1).decode_threads(), 384);
        assert_eq!(
            pass(2, 1)[2..],
            ["-DFUSE_DECODE_PASS_ROWS=1", "-DFUSE_DECODE_EXACT_D=1", "-DFUSE_DECODE_ROW_GROUPS=2"]
        );
        assert_eq!(
            pass(4, 1)[2..],
            ["-DFUSE_DECODE_PASS_ROWS=2", "-DFUSE_DECODE_EXACT_D=1", "-DFUSE_DECODE_ROW_GROUPS=2"]
        );
        assert_eq!(pass(3, 5)[2..], ["-DFUSE_DECODE_EXACT_D=1"]);
        // Long splits (batch 16 over 8192 keys: 2,731 keys a split) stay in one group of passes of 3 rows.
        let long = attention_launch(shape(16, 9, 3, 1, 8192, 64), H200_SMS);
        assert_eq!((long.row_groups, long.pass_rows), (1, 3), "{long:?}");
        assert_eq!(launch(3, 5).decode_threads(), 128);
        assert_eq!(pass(1, 17).len(), 2);
        // Within 256 threads (a one-launch step's tasks): 3 rows in 2 groups of passes of 2 (the second holds
        // one row), 4 rows as they were; within 128, one group's passes of all of them.
        // In row blocks within 256 threads: SmolLM2's 3 rows in blocks of 2 and 1 (a group a row), the 1B's 4 in 2
        // blocks of 2; twice the items, and a define; one row a head and prefill unchanged.
        for (q_heads, blocks) in [(3, 2), (4, 2), (2, 1), (8, 4)] {
            let l = launch(q_heads, 1);
            let cut = l.in_row_blocks(q_heads, 256);
            assert_eq!((cut.row_groups, cut.pass_rows, cut.row_blocks), (2, 1, blocks), "{cut:?}");
            assert_eq!((cut.items, cut.decode_threads()), (l.items * blocks, 256), "{cut:?}");
            let define = format!("-DFUSE_DECODE_ROW_BLOCKS={blocks}");
            assert_eq!(cut.defines(DType::BF16).contains(&define), blocks > 1, "{cut:?}");
        }
        assert_eq!(launch(1, 1).in_row_blocks(1, 256).row_blocks, 1);
        let prefill = attention_launch(shape(1, 4, 1, 64, 300, 64), H200_SMS);
        assert_eq!(prefill.in_row_blocks(4, 256).items, prefill.items);
        let within = launch(3, 1).within_threads(256);
        assert_eq!((within.row_groups, within.pass_rows, within.decode_threads()), (2, 2, 256), "{within:?}");
        assert_eq!(
            within.defines(DType::BF16).into_iter().filter(not_held).collect::<Vec<_>>()[2..],
            ["-DFUSE_DECODE_PASS_ROWS=2", "-DFUSE_DECODE_EXACT_D=1", "-DFUSE_DECODE_ROW_GROUPS=2"]
        );
        assert_eq!(launch(4, 1).within_threads(256), launch(4, 1));
        let one = launch(3, 1).within_threads(128);
        assert_eq!((one.row_groups, one.pass_rows, one.decode_threads()), (1, 3, 128), "{one:?}");
        assert_eq!(launch(4, 1).within_threads(128).decode_threads(), 128);
        assert_eq!(launch(4, 1).within_threads(128).pass_rows, 4);
    }
}
