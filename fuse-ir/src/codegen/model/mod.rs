//! Hand-written CUDA C for the model ops (`embedding`, `argmax`, `cumsum`, `arg_sort_last_dim`, `gather`,
//! `unfold`, `rope`, `attention`), `cat` and the
//! decoding of quantized blocks (`dequantize`): one kernel
//! per op (attention: a decode kernel that merges its own key splits, and a prefill kernel with a second
//! kernel merging its key splits), the same text for every shape; the element type
//! is the `-D` define of [`ModelKernel::defines`]. Each kernel takes one argument struct made of 8-byte words
//! (pointers, sizes, strides; a `double` scale), which the runtime packs as `u64` words in the order the
//! struct declares them (`cuda/exec/model.rs`). Attention's geometry (tiles, splits, shared memory) is
//! `attention.rs`.

mod attention;

pub use attention::{
    attention_launch, attention_launch_with_split_floor, AttentionLaunch, AttentionShape, ATTENTION_COMBINE_THREADS,
    ATTENTION_DECODE_CLUSTER_DEFINE, ATTENTION_DECODE_CLUSTER_MAX, ATTENTION_DECODE_EARLY_DEFINE,
    ATTENTION_DECODE_MAX_SPLITS, ATTENTION_DECODE_PASS_ROWS, ATTENTION_DECODE_ROPE_DEFINE,
    ATTENTION_DECODE_ROPE_VECTOR_DEFINE, ATTENTION_DECODE_ROWS, ATTENTION_DECODE_ROW_GROUP_KEYS,
    ATTENTION_DECODE_SPLIT_KEYS, ATTENTION_DECODE_THREADS, ATTENTION_DECODE_VECTOR_DEFINE, ATTENTION_HEAD_DIMS,
    ATTENTION_KEY_TILE, ATTENTION_MAX_HEAD_DIM, ATTENTION_ROW_TILE, ATTENTION_THREADS,
};

use crate::DType;

/// Threads per block of every model kernel but the two of attention.
pub const MODEL_BLOCK_THREADS: u32 = 256;
/// Axes of a strided operand the kernels address (`FuseLayout`), padded in front with axes of size 1.
pub const MODEL_RANK: usize = 6;
/// Threads of the argmax kernel's block (one block a row: a decoder's logits at batch 1 are one long row).
pub const ARGMAX_THREADS: u32 = 1024;
/// Threads of the sort and top-k kernels' blocks.
pub const SORT_THREADS: u32 = 1024;
/// Positions a sort kernel's block sorts in shared memory, and the largest k the top-k kernel selects.
pub const SORT_CHUNK: usize = 4096;
/// Copies one launch of the cat kernel makes (`FUSE_CAT_COPIES`): cat's parts and consecutive slice_sets.
pub const MODEL_CAT_COPIES: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKernel {
    Embedding,
    Argmax,
    /// Running sums along the last axis (one block a row).
    Cumsum,
    /// Each row's indices in sorted order (a bitonic network, in launches).
    Sort,
    /// A row's k largest, largest first, selected by radix passes (a block a row).
    TopK,
    /// Elements picked along the last axis by u32 indexes.
    Gather,
    /// A convolution's columns (im2col).
    Unfold,
    Rope,
    /// Attention of many queries (prefill).
    Attention,
    /// attention_len's key counts checked before the prefill kernel (which clamps them).
    LensCheck,
    /// Merges the prefill kernel's per-split partials (when the keys were split across blocks).
    AttentionCombine,
    /// Attention whose rows of a kv head fit one block (decode), key splits merged in the same launch.
    AttentionDecode,
    Cat,
    /// Quantized blocks into dense f32/f16/bf16 values (`-DFUSE_DEQUANT_OUT`): a quantized weight cuBLAS
    /// multiplies, an eager `to_dtype`.
    Dequantize,
}

impl ModelKernel {
    pub const ALL: [ModelKernel; 14] = [
        ModelKernel::Embedding,
        ModelKernel::Argmax,
        ModelKernel::Cumsum,
        ModelKernel::Sort,
        ModelKernel::TopK,
        ModelKernel::Gather,
        ModelKernel::Unfold,
        ModelKernel::Rope,
        ModelKernel::Attention,
        ModelKernel::LensCheck,
        ModelKernel::AttentionCombine,
        ModelKernel::AttentionDecode,
        ModelKernel::Cat,
        ModelKernel::Dequantize,
    ];

    /// The `extern "C"` symbol.
    pub fn name(self) -> &'static str {
        match self {
            ModelKernel::Embedding => "fuse_model_embedding",
            ModelKernel::Argmax => "fuse_model_argmax",
            ModelKernel::Cumsum => "fuse_model_cumsum",
            ModelKernel::Sort => "fuse_model_sort",
            ModelKernel::TopK => "fuse_model_topk",
            ModelKernel::Gather => "fuse_model_gather",
            ModelKernel::Unfold => "fuse_model_unfold",
            ModelKernel::Rope => "fuse_model_rope",
            ModelKernel::Attention => "fuse_model_attention",
            ModelKernel::LensCheck => "fuse_model_lens_check",
            ModelKernel::AttentionCombine => "fuse_model_attention_combine",
            ModelKernel::AttentionDecode => "fuse_model_attention_decode",
            ModelKernel::Cat => "fuse_model_cat",
            ModelKernel::Dequantize => "fuse_model_dequantize",
        }
    }

    /// The kernel's self-contained source (the CUDA prelude, the model kernels' helpers, then the kernel).
    pub fn source(self) -> &'static str {
        macro_rules! with_helpers {
            ($($file:literal),+) => {
                concat!(
                    include_str!("../cuda/prelude.cuh"),
                    include_str!("../cuda/blocks.cuh"),
                    include_str!("common.cuh"),
                    $(include_str!($file)),+
                )
            };
        }
        match self {
            ModelKernel::Embedding => with_helpers!("embedding.cu"),
            ModelKernel::Argmax => with_helpers!("argmax.cu"),
            ModelKernel::Cumsum => with_helpers!("cumsum.cu"),
            ModelKernel::Sort | ModelKernel::TopK => with_helpers!("sort.cu"),
            ModelKernel::Gather => with_helpers!("gather.cu"),
            ModelKernel::Unfold => with_helpers!("unfold.cu"),
            ModelKernel::Rope => with_helpers!("rope.cu"),
            ModelKernel::Attention => with_helpers!("attention.cu"),
            ModelKernel::LensCheck => with_helpers!("check_lens.cu"),
            ModelKernel::AttentionCombine => with_helpers!("attention_combine.cu"),
            ModelKernel::AttentionDecode => {
                with_helpers!("../cuda/sm90.cuh", "attention_decode.cuh", "attention_decode.cu")
            }
            ModelKernel::Cat => with_helpers!("cat.cu"),
            ModelKernel::Dequantize => with_helpers!("dequantize.cu"),
        }
    }

    /// Threads per block the kernel is written for.
    pub fn block_threads(self) -> u32 {
        match self {
            ModelKernel::Attention => ATTENTION_THREADS,
            ModelKernel::AttentionCombine => ATTENTION_COMBINE_THREADS,
            ModelKernel::AttentionDecode => ATTENTION_DECODE_THREADS,
            ModelKernel::Argmax => ARGMAX_THREADS,
            ModelKernel::Sort | ModelKernel::TopK => SORT_THREADS,
            _ => MODEL_BLOCK_THREADS,
        }
    }

    /// The defines that pick the element type: the float dtype the kernel reads and writes (embedding: the
    /// table's; argmax: x's; cat: the parts', u32 included). Attention adds its head dimension
    /// ([`AttentionLaunch::defines`]).
    pub fn defines(dtype: DType) -> Vec<String> {
        let code = match dtype {
            DType::U32 => 3,
            q if q.is_quantized() => crate::codegen::block_dtype_code(q),
            f => crate::codegen::float_dtype_code(f).unwrap_or(0),
        };
        vec![format!("-DFUSE_MODEL_DTYPE={code}")]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_agree_with_the_constants_here() {
        assert!(include_str!("common.cuh").contains(&format!("#define FUSE_MODEL_RANK {MODEL_RANK}")));
        assert!(ModelKernel::Cat.source().contains(&format!("#define FUSE_CAT_COPIES {MODEL_CAT_COPIES}")));
        let attention = ModelKernel::Attention.source();
        assert!(attention.contains(&format!("#define FUSE_ATTENTION_THREADS {ATTENTION_THREADS}")));
        assert!(attention.contains(&format!("#define FUSE_ATTENTION_MAX_D {ATTENTION_MAX_HEAD_DIM}")));
        assert!(attention.contains(&format!("#define FUSE_ATTENTION_KEYS {ATTENTION_KEY_TILE}")));
        assert!(attention.contains(&format!("#define FUSE_ATTENTION_ROWS {ATTENTION_ROW_TILE}")));
        // Each warp holds a quarter of the rows (its register arrays are sized by that); one key a lane.
        assert_eq!((ATTENTION_THREADS / 32, ATTENTION_KEY_TILE), (4, 32));
        let combine = ModelKernel::AttentionCombine.source();
        assert!(combine.contains(&format!("#define FUSE_ATTENTION_COMBINE_THREADS {ATTENTION_COMBINE_THREADS}")));
        assert!(ATTENTION_COMBINE_THREADS as usize >= ATTENTION_MAX_HEAD_DIM, "one combine thread a channel");
        let decode = ModelKernel::AttentionDecode.source();
        // A row group's threads: its key warps.
        assert!(decode.contains(&format!("#define FUSE_DECODE_KEY_WARPS {}", ATTENTION_DECODE_THREADS / 32)));
        assert!(decode.contains("#define FUSE_DECODE_THREADS (32 * FUSE_DECODE_KEY_WARPS * FUSE_DECODE_ROW_GROUPS)"));
        assert!(decode.contains(&format!("#define FUSE_DECODE_ROWS {ATTENTION_DECODE_ROWS}")));
        assert!(decode.contains(&format!("#define FUSE_DECODE_MAX_SPLITS {ATTENTION_DECODE_MAX_SPLITS}")));
        assert!(decode.contains(&format!("#define FUSE_DECODE_SPLIT_KEYS {ATTENTION_DECODE_SPLIT_KEYS}")));
        assert!(decode.contains(&format!("#define FUSE_DECODE_PASS_ROWS {ATTENTION_DECODE_PASS_ROWS}")));
        assert!(decode.contains(&format!("#define FUSE_DECODE_CLUSTER_MAX {ATTENTION_DECODE_CLUSTER_MAX}")));
        // The last split block's weights: a lane a split, a whole number of warp-wide steps.
        assert_eq!(ATTENTION_DECODE_MAX_SPLITS % 32, 0);
        assert_eq!(ATTENTION_DECODE_ROWS, ATTENTION_ROW_TILE, "prefill takes what decode does not hold");
        assert!(ModelKernel::Argmax.source().contains(&format!("#define FUSE_ARGMAX_THREADS {ARGMAX_THREADS}")));
        assert!(ModelKernel::Sort.source().contains(&format!("#define FUSE_SORT_THREADS {SORT_THREADS}")));
        assert!(ModelKernel::Sort.source().contains(&format!("#define FUSE_SORT_CHUNK {SORT_CHUNK}")));
        for kernel in ModelKernel::ALL {
            let source = kernel.source();
            assert!(source.contains("\nFUSE_KERNEL("), "{kernel:?}");
            assert!(
                source.contains(&format!(" {}(FUSE_KERNEL_PARAM(Fuse", kernel.name())),
                "{kernel:?}: no entry {}",
                kernel.name()
            );
            assert!(!source.contains("#include"), "{kernel:?} must be self-contained");
            // Launched overlapping the kernel before (programmatic dependent launch): every entry waits for
            // it before touching memory, as its first statement.
            for entry in source.split("\nFUSE_KERNEL(").skip(1) {
                let body = &entry[entry.find('{').expect("a kernel body") + 1..];
                // The decode kernel's FUSE_DECODE_EARLY build loads keys and values first, where the host
                // knows that kernel does not write them.
                let body = match body.trim_start().strip_prefix("#if FUSE_DECODE_EARLY") {
                    Some(rest) => &rest[rest.find("#endif").expect("the early loads end") + "#endif".len()..],
                    None => body,
                };
                assert!(body.trim_start().starts_with("fuse_model_grid_sync();"), "{kernel:?} does not wait first");
            }
        }
    }
}
