//! How an attention call is cut into blocks of `attention.cu` (the host's half of its geometry; the runtime
//! packs the numbers): query tiles of the rows that share a key/value head, key splits that fill the GPU
//! when there are few query tiles (decode), the dynamic shared memory a block needs and the f32 partials
//! that `attention_combine.cu` merges when there is more than one split.

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
    /// Tiles of up to [`ATTENTION_ROW_TILE`] rows among the queries x group rows of each key/value head.
    pub q_tiles: usize,
    /// Key ranges computed by separate blocks (1: the kernel writes the output itself).
    pub splits: usize,
    /// Keys in each split but maybe the last: whole tiles.
    pub split_keys: usize,
    /// Work items, batch x kv_heads x q_tiles x splits: at most one block each.
    pub items: usize,
    /// Dynamic shared memory of a block.
    pub shared_bytes: usize,
    /// f32 values of the partials (0 with one split): d + 2 for each output row and split.
    pub partial_floats: usize,
    /// The build's head dimension (one of [`ATTENTION_HEAD_DIMS`]; the largest when d is larger still).
    pub held_d: usize,
}

impl AttentionLaunch {
    /// The attention kernel's defines: the element type's and the head dimension it holds.
    pub fn defines(&self, dtype: DType) -> Vec<String> {
        let mut defines = ModelKernel::defines(dtype);
        defines.push(format!("-DFUSE_ATTENTION_D={}", self.held_d));
        defines
    }
}

/// Floats a row of the kernel's shared tiles: d rounded up to 4, then to an odd number of 4-float chunks
/// (so that 8 lanes reading 16 bytes of 8 different rows hit 32 different banks). The kernel computes the
/// same (`stride = d4 | 4`).
fn shared_stride(d: usize) -> usize {
    (d.div_ceil(4) * 4) | 4
}

/// Query tiles, key splits and shared memory for `shape` on a GPU of `sm_count` multiprocessors. Splits
/// are added while there are fewer than [`BLOCKS_PER_SM`] blocks a multiprocessor, up to one per key tile,
/// and evened out so that none is empty.
pub fn attention_launch(shape: AttentionShape, sm_count: usize) -> AttentionLaunch {
    let group = shape.q_heads / shape.kv_heads.max(1);
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
        q_tiles,
        splits,
        split_keys: tiles_per_split * ATTENTION_KEY_TILE,
        items: base * splits,
        // query, key and value tiles of f32 rows, then each warp's probabilities (a float4 a key).
        shared_bytes: (ATTENTION_ROW_TILE + 2 * ATTENTION_KEY_TILE) * stride * 4 + warps * ATTENTION_KEY_TILE * 16,
        partial_floats: if splits > 1 { rows * splits * (shape.d + 2) } else { 0 },
        held_d: ATTENTION_HEAD_DIMS.into_iter().find(|&h| h >= shape.d).unwrap_or(ATTENTION_MAX_HEAD_DIM),
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

    #[test]
    fn decode_splits_the_keys_to_fill_the_gpu() {
        for batch in [1, 2] {
            for keys in [1, 17, 1000, 4095] {
                let s = shape(batch, 9, 3, 1, keys, 64);
                let l = attention_launch(s, H200_SMS);
                check_splits(s, &l);
                assert_eq!(l.q_tiles, 1, "the 3 query heads of a kv head share one tile");
                if keys >= 1000 {
                    // As many blocks as the GPU holds twice over, or one a key tile.
                    let most = batch * 3 * keys.div_ceil(ATTENTION_KEY_TILE);
                    assert!(l.splits > 1 && l.items >= H200_SMS.min(most), "{s:?}: {l:?}");
                    assert_eq!(l.partial_floats, batch * 9 * l.splits * 66);
                } else {
                    assert_eq!((l.splits, l.partial_floats), (1, 0), "one key tile: nothing to split");
                }
            }
        }
    }

    #[test]
    fn prefill_has_enough_query_tiles_without_splits() {
        let s = shape(1, 9, 3, 512, 512, 64);
        let l = attention_launch(s, H200_SMS);
        assert_eq!((l.q_tiles, l.splits), (96, 1), "{l:?}");
        // A short prompt over few heads still splits.
        let s = shape(1, 2, 2, 17, 300, 128);
        let l = attention_launch(s, H200_SMS);
        check_splits(s, &l);
        assert!(l.splits > 1, "{l:?}");
        // More query heads a kv head than a tile holds: the rows of one query span tiles.
        let l = attention_launch(shape(1, 32, 1, 3, 40, 64), H200_SMS);
        assert_eq!(l.q_tiles, 6);
    }

    #[test]
    fn shared_memory_fits_every_head_dimension() {
        let bytes = |d| attention_launch(shape(1, 1, 1, 1, 1, d), H200_SMS).shared_bytes;
        assert_eq!(shared_stride(64), 68);
        assert_eq!(shared_stride(3), 4);
        assert_eq!(shared_stride(8), 12);
        assert_eq!(shared_stride(256), 260);
        // Up to d = 128 under the 48 KB a block gets without opting in; d = 256 under sm_80's 163 KB.
        assert!(bytes(128) <= 48 * 1024, "{}", bytes(128));
        assert!(bytes(ATTENTION_MAX_HEAD_DIM) <= 163 * 1024, "{}", bytes(ATTENTION_MAX_HEAD_DIM));
        let held = |d| attention_launch(shape(1, 1, 1, 1, 1, d), H200_SMS).held_d;
        assert_eq!([1, 63, 64, 65, 128, 129, 256].map(held), [64, 64, 64, 128, 128, 256, 256]);
        let defines = attention_launch(shape(1, 1, 1, 1, 1, 100), H200_SMS).defines(DType::BF16);
        assert_eq!(defines, ["-DFUSE_MODEL_DTYPE=2", "-DFUSE_ATTENTION_D=128"]);
    }
}
