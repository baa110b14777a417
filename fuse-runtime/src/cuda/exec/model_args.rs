//! What the hand-written model kernels take: one struct of 8-byte words each, packed here field by field in
//! the order its `.cu` file declares them ([`Words`]), and the alignment rules that let a kernel read rows
//! as 16-byte vectors. Shared by `model.rs`, `attention.rs` and `rope_append.rs`, which import from here
//! and not from one another.

use crate::Tensor;
use fuse_ir::codegen::MODEL_RANK;
use fuse_ir::DType;

/// A kernel's argument struct as the words the driver copies, in declaration order.
#[derive(Default)]
pub(super) struct Words(pub(super) Vec<u64>);

impl Words {
    pub(super) fn address(&mut self, address: u64) -> &mut Self {
        self.0.push(address);
        self
    }

    pub(super) fn count(&mut self, n: usize) -> &mut Self {
        self.0.push(n as u64);
        self
    }

    pub(super) fn counts(&mut self, ns: &[usize]) -> &mut Self {
        ns.iter().for_each(|&n| self.0.push(n as u64));
        self
    }

    /// A `FuseLayout`: the sizes, then the strides, padded in front to `MODEL_RANK` axes of size 1.
    pub(super) fn layout(&mut self, shape: &[usize], strides: &[usize]) -> &mut Self {
        let pad = MODEL_RANK - shape.len();
        self.counts(&[vec![1; pad], shape.to_vec()].concat()).counts(&[vec![0; pad], strides.to_vec()].concat())
    }
}

/// A rope and cache appends fused into the decode attention kernel (`rope_append.rs`): its words, and
/// whether rope's input rows, the tables' row and the new value rows may be read as 16-byte vectors (the
/// kernel then ropes in registers).
pub(super) struct FusedRope {
    pub words: Words,
    pub vector: bool,
}

/// The words the decode kernel reads after its own for the fused rope and appends (see its
/// `FuseAttentionDecodeArgs`), or as many zeros for plain attention.
pub(super) const ROPE_APPEND_WORDS: usize = 21;

/// Whether the decode kernel may read `t`'s rows (k or v, 4-D, at `address`) as 16-byte vectors of 8
/// channels: d a multiple of 8, unit stride along d, and every row starting on a 16-byte boundary (the axes
/// of size 1 are never stepped along).
pub(super) fn vector_rows(t: &Tensor, address: u64, d: usize) -> bool {
    matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16) && d % 8 == 0 && rows_on_16_bytes(t, address)
}

/// Whether every row of `t` (its last axis, at `address`) is unit-stride and starts on a 16-byte boundary
/// (the axes of size 1 are never stepped along).
pub(super) fn rows_on_16_bytes(t: &Tensor, address: u64) -> bool {
    let (r, elements) = (t.shape().len(), 16 / t.dtype().size_bytes());
    let rows_aligned =
        t.shape()[..r - 1].iter().zip(&t.strides()[..r - 1]).all(|(&n, &stride)| n == 1 || stride % elements == 0);
    t.strides()[r - 1] == 1 && address % 16 == 0 && rows_aligned
}
