//! The kernel ABI shared with fuse-ir's code generator: one by-value parameter, `FuseArgs`, every field
//! 8 bytes, so its layout is a plain array of 64-bit words:
//!
//! ```c
//! struct FuseIn  { const void* ptr; long long strides[6]; double scalar; };   // 8 words
//! struct FuseOut { void* ptr; long long strides[6]; };                        // 7 words
//! struct FuseArgs { long long sizes[6]; long long numel; long long rank;      // 8 words
//!                   FuseIn in[FUSE_NIN]; FuseOut out[FUSE_NOUT]; };
//! ```
//!
//! This file maps a call's operands onto a launch domain (broadcast, merged axes), packs the words, and
//! picks the launch geometry. It touches no GPU, so it is tested on any machine.

use crate::layout::{broadcast_strides, coalesce};
use crate::tensor::contiguous_strides;
use fuse_ir::codegen::{KernelKind, MAX_RANK};

/// Threads per block, fixed by the ABI for both kernel kinds.
pub(crate) const BLOCK_THREADS: u32 = 256;
/// Blocks per SM a pointwise grid-stride launch is capped at: enough to hide latency, no more.
const POINTWISE_BLOCKS_PER_SM: usize = 16;
/// `gridDim.x` limit of the hardware.
const MAX_GRID: usize = (1 << 31) - 1;

/// One operand as the launch sees it: a tensor (device address of its first element, shape and strides in
/// elements) or a scalar.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Operand {
    Tensor { address: u64, shape: Vec<usize>, strides: Vec<usize> },
    Scalar(f64),
}

/// A launch, ready to pack: the merged domain and every operand's strides over it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Launch {
    pub dims: Vec<usize>,
    pub numel: usize,
    pub inputs: Vec<(u64, Vec<usize>, f64)>,
    pub outputs: Vec<(u64, Vec<usize>)>,
    /// Every tensor dense row-major over the whole domain and 16-byte aligned: `-DFUSE_CONTIGUOUS=1`.
    pub contiguous: bool,
}

/// Maps operands onto `domain` (the broadcast of every value in the kernel). RowReduce kernels keep the
/// last axis apart (it is the row); other axes of size 1 are dropped and axes every operand walks through
/// as one are merged, so most launches have rank 1 or 2. Errors (for the caller to report) when more than
/// `MAX_RANK` axes remain.
pub(crate) fn plan_launch(
    kind: KernelKind,
    domain: &[usize],
    inputs: &[Operand],
    outputs: &[Operand],
) -> Result<Launch, String> {
    let strides_of = |op: &Operand| match op {
        Operand::Tensor { shape, strides, .. } => broadcast_strides(shape, strides, domain),
        Operand::Scalar(_) => vec![0; domain.len()],
    };
    let all: Vec<Vec<usize>> = inputs.iter().chain(outputs).map(strides_of).collect();
    let keep_last = kind == KernelKind::RowReduce;
    let (dims, merged) = coalesce(domain, &all, keep_last);
    if dims.len() > MAX_RANK {
        return Err(format!(
            "the kernel's domain {domain:?} keeps {} axes after merging, the GPU kernels take at most {MAX_RANK}",
            dims.len()
        ));
    }
    let numel = dims.iter().product();
    let dense = contiguous_strides(&dims);
    let mut contiguous = true;
    let mut merged = merged.into_iter();
    let mut take = |op: &Operand, contiguous: &mut bool| -> (u64, Vec<usize>, f64) {
        let strides = merged.next().unwrap_or_default();
        match op {
            Operand::Tensor { address, .. } => {
                let walks_dense = dims.iter().zip(&strides).zip(&dense).all(|((&d, &s), &want)| d == 1 || s == want);
                *contiguous &= walks_dense && address % 16 == 0;
                (*address, strides, 0.0)
            }
            Operand::Scalar(v) => (0, strides, *v),
        }
    };
    let inputs: Vec<_> = inputs.iter().map(|op| take(op, &mut contiguous)).collect();
    let outputs: Vec<_> = outputs.iter().map(|op| take(op, &mut contiguous)).map(|(a, s, _)| (a, s)).collect();
    Ok(Launch { dims, numel, inputs, outputs, contiguous })
}

/// Words of the `FuseArgs` header: `sizes[MAX_RANK]`, `numel`, `rank`.
const HEADER_WORDS: usize = MAX_RANK + 2;
/// Words of one `FuseIn`: `ptr`, `strides[MAX_RANK]`, `scalar`.
const IN_WORDS: usize = MAX_RANK + 2;
/// Words of one `FuseOut`: `ptr`, `strides[MAX_RANK]`.
const OUT_WORDS: usize = MAX_RANK + 1;

/// Where the fields a call changes lie in a kernel's packed `FuseArgs` ([`Launch::pack`] writes them there,
/// a launch plan patches them there): word indices, for a kernel of `inputs` input slots as launched.
pub(crate) struct ArgsLayout {
    /// Input slots in the parameter: at least one (the ABI's dummy input when there are none).
    slots: usize,
}

impl ArgsLayout {
    pub(crate) fn new(inputs: usize) -> ArgsLayout {
        ArgsLayout { slots: inputs.max(1) }
    }

    /// The word of input `i`'s device address.
    pub(crate) fn input_address(&self, i: usize) -> usize {
        HEADER_WORDS + IN_WORDS * i
    }

    /// The word of input `i`'s scalar (an f64's bits).
    pub(crate) fn input_scalar(&self, i: usize) -> usize {
        self.input_address(i) + IN_WORDS - 1
    }

    /// The word of output `j`'s device address.
    pub(crate) fn output_address(&self, j: usize) -> usize {
        HEADER_WORDS + IN_WORDS * self.slots + OUT_WORDS * j
    }
}

/// Words of one stride array, padded to `MAX_RANK`.
fn stride_words(strides: &[usize]) -> [u64; MAX_RANK] {
    let mut words = [0u64; MAX_RANK];
    for (w, &s) in words.iter_mut().zip(strides) {
        *w = s as u64;
    }
    words
}

impl Launch {
    /// The `FuseArgs` parameter as 64-bit words. A kernel without inputs gets one zeroed dummy input
    /// (the ABI has `FUSE_NIN >= 1`).
    pub(crate) fn pack(&self) -> Vec<u64> {
        let nin = self.inputs.len().max(1);
        let mut words = Vec::with_capacity(HEADER_WORDS + IN_WORDS * nin + OUT_WORDS * self.outputs.len());
        words.extend(stride_words(&self.dims));
        words.push(self.numel as u64);
        words.push(self.dims.len() as u64);
        for (address, strides, scalar) in &self.inputs {
            words.push(*address);
            words.extend(stride_words(strides));
            words.push(scalar.to_bits());
        }
        if self.inputs.is_empty() {
            words.extend([0u64; IN_WORDS]);
        }
        for (address, strides) in &self.outputs {
            words.push(*address);
            words.extend(stride_words(strides));
        }
        words
    }

    /// Rows of the domain (every axis but the last). Rows of length 0 still count: their reductions
    /// write the identity (0 for a sum, -inf for a max).
    pub(crate) fn rows(&self) -> usize {
        self.dims[..self.dims.len().saturating_sub(1)].iter().product()
    }

    /// `gridDim.x`: pointwise kernels grid-stride over the elements; row kernels take one block per row
    /// (grid-striding past the hardware limit). Zero when there is nothing to do.
    pub(crate) fn grid(&self, kind: KernelKind, sm_count: usize) -> u32 {
        let blocks = match kind {
            KernelKind::Pointwise => {
                let needed = self.numel.div_ceil(BLOCK_THREADS as usize);
                needed.min(sm_count.max(1) * POINTWISE_BLOCKS_PER_SM)
            }
            KernelKind::RowReduce => self.rows(),
        };
        blocks.min(MAX_GRID) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(address: u64, shape: &[usize], strides: &[usize]) -> Operand {
        Operand::Tensor { address, shape: shape.to_vec(), strides: strides.to_vec() }
    }

    #[test]
    fn dense_pointwise_merges_into_one_axis_and_is_contiguous() {
        let x = tensor(256, &[3, 17], &[17, 1]);
        let out = tensor(512, &[3, 17], &[17, 1]);
        let l = plan_launch(KernelKind::Pointwise, &[3, 17], &[x, Operand::Scalar(0.5)], &[out]).unwrap();
        assert_eq!(l.dims, vec![51]);
        assert_eq!(l.numel, 51);
        assert!(l.contiguous);
        assert_eq!(l.inputs[1], (0, vec![0], 0.5));
        assert_eq!(l.grid(KernelKind::Pointwise, 132), 1);
    }

    #[test]
    fn a_broadcast_row_vector_and_a_transposed_view_are_strided() {
        // x [3, 5] + b [5] into out [3, 5], and a .t() view of a [5, 3] tensor.
        let x = tensor(0, &[3, 5], &[1, 3]);
        let b = tensor(64, &[5], &[1]);
        let out = tensor(128, &[3, 5], &[5, 1]);
        let l = plan_launch(KernelKind::Pointwise, &[3, 5], &[x, b], &[out]).unwrap();
        assert_eq!(l.dims, vec![3, 5]);
        assert_eq!(l.inputs[0].1, vec![1, 3]);
        assert_eq!(l.inputs[1].1, vec![0, 1]);
        assert_eq!(l.outputs[0].1, vec![5, 1]);
        assert!(!l.contiguous);
    }

    #[test]
    fn row_reduce_keeps_the_row_and_writes_reduced_outputs_once_per_row() {
        // rows [2, 3] of 17: the reduced output [2, 3, 1] has stride 0 on the row axis.
        let x = tensor(0, &[2, 3, 17], &[51, 17, 1]);
        let s = tensor(256, &[2, 3, 1], &[3, 1, 1]);
        let l = plan_launch(KernelKind::RowReduce, &[2, 3, 17], &[x], &[s]).unwrap();
        assert_eq!(l.dims, vec![6, 17]);
        assert_eq!(l.outputs[0].1, vec![1, 0]);
        assert_eq!(l.rows(), 6);
        assert_eq!(l.grid(KernelKind::RowReduce, 132), 6);
        // Rows of length 0 are still rows: their reductions write the identity.
        let empty = tensor(0, &[3, 0], &[0, 1]);
        let sums = tensor(0, &[3, 1], &[1, 1]);
        let l = plan_launch(KernelKind::RowReduce, &[3, 0], &[empty], &[sums]).unwrap();
        assert_eq!((l.numel, l.rows(), l.grid(KernelKind::RowReduce, 132)), (0, 3, 3));
        // A single row of one element: the row axis stays, one row.
        let one = tensor(0, &[1, 1], &[1, 1]);
        let l = plan_launch(KernelKind::RowReduce, &[1, 1], std::slice::from_ref(&one), std::slice::from_ref(&one))
            .unwrap();
        assert_eq!((l.dims.clone(), l.rows()), (vec![1], 1));
    }

    #[test]
    fn misaligned_addresses_are_not_contiguous() {
        let x = tensor(4, &[8], &[1]);
        let out = tensor(0, &[8], &[1]);
        assert!(!plan_launch(KernelKind::Pointwise, &[8], &[x], &[out]).unwrap().contiguous);
    }

    #[test]
    fn too_many_axes_are_an_error() {
        // Alternating broadcast axes cannot merge: seven of them stay apart.
        let domain = [2, 3, 2, 3, 2, 3, 2];
        let a = tensor(0, &[2, 1, 2, 1, 2, 1, 2], &[8, 8, 4, 4, 2, 2, 1]);
        let b = tensor(0, &[1, 3, 1, 3, 1, 3, 1], &[27, 9, 9, 3, 3, 1, 1]);
        let out = tensor(0, &domain, &contiguous_strides(&domain));
        let err = plan_launch(KernelKind::Pointwise, &domain, &[a, b], &[out]).unwrap_err();
        assert!(err.contains("at most 6"), "{err}");
    }

    #[test]
    fn packing_follows_the_abi_word_layout() {
        let x = tensor(0x1000, &[3, 17], &[17, 1]);
        let out = tensor(0x2000, &[3, 1], &[1, 1]);
        let l = plan_launch(KernelKind::RowReduce, &[3, 17], &[x, Operand::Scalar(1e-5)], &[out]).unwrap();
        let w = l.pack();
        assert_eq!(w.len(), 8 + 2 * 8 + 7);
        assert_eq!(&w[..8], &[3, 17, 0, 0, 0, 0, 51, 2]);
        assert_eq!(&w[8..16], &[0x1000, 17, 1, 0, 0, 0, 0, 0]);
        assert_eq!(w[16 + 7], 1e-5f64.to_bits());
        assert_eq!(&w[24..31], &[0x2000, 1, 0, 0, 0, 0, 0]);
        // No inputs: one zeroed dummy.
        let l = plan_launch(KernelKind::Pointwise, &[4], &[], &[tensor(0, &[4], &[1])]).unwrap();
        assert_eq!(l.pack().len(), 8 + 8 + 7);
    }

    #[test]
    fn the_layout_names_the_words_pack_writes() {
        let x = tensor(0x1000, &[3, 17], &[17, 1]);
        let out = tensor(0x2000, &[3, 1], &[1, 1]);
        let l = plan_launch(KernelKind::RowReduce, &[3, 17], &[x, Operand::Scalar(1e-5)], &[out]).unwrap();
        let (w, layout) = (l.pack(), ArgsLayout::new(2));
        assert_eq!(w[layout.input_address(0)], 0x1000);
        assert_eq!(w[layout.input_scalar(1)], 1e-5f64.to_bits());
        assert_eq!(w[layout.output_address(0)], 0x2000);
        let l = plan_launch(KernelKind::Pointwise, &[4], &[], &[tensor(0x3000, &[4], &[1])]).unwrap();
        assert_eq!(l.pack()[ArgsLayout::new(0).output_address(0)], 0x3000);
    }
}
