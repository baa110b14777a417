//! A MultiGemm group's template launch (fuse-ir's `codegen/gemm/hook.rs` says what the kernel does): the
//! products' grids laid one after another in a table that follows `FuseGemmArgs`, one launch per block type
//! of the weights (a Q4_K_M file's v weight is Q6_K where q and k are Q4_K: the template is compiled for
//! one type), and the epilogue's `FuseArgs` over the products' common rows.

use super::fuse_args::Operand;
use super::Executor;
use crate::cuda::gemm::skinny::SkinnyGemm;
use fuse_ir::{DType, Group, GroupKind, NodeId};

/// The product table of one launch: its words, the grid they cover, where the weights' addresses lie.
pub(super) struct ProductTable {
    pub words: Vec<u64>,
    pub grid: u32,
    products: usize,
}

impl ProductTable {
    /// The word of product `j`'s weight address, counted from the start of `FuseGemmArgs`.
    pub(super) fn weight_word(&self, j: usize) -> usize {
        debug_assert!(j < self.products);
        SkinnyGemm::WORDS + j
    }
}

/// `wp[P], np[P], ldwp[P], first_block[P + 1], block, blocks` (fuse-ir's `GEMM_COMMON`): product j's blocks
/// are `blocks[j]` (0 for a product this launch leaves to another), laid in product order. `None` past a
/// grid of `u32::MAX` blocks.
pub(super) fn table(gemms: &[SkinnyGemm], blocks: &[u32]) -> Option<ProductTable> {
    let p = gemms.len();
    let mut words = Vec::with_capacity(5 * p + 3);
    words.extend(gemms.iter().map(|g| g.w[0]));
    words.extend(gemms.iter().map(|g| g.n as u64));
    words.extend(gemms.iter().map(|g| g.ldw[0] as u64));
    let mut first = 0u64;
    for &b in blocks {
        words.push(first);
        first += u64::from(b);
    }
    words.push(first);
    words.extend([0, 0]);
    Some(ProductTable { words, grid: u32::try_from(first).ok()?, products: p })
}

/// The products of each launch: those whose weights share a dtype, in the order the types first appear.
pub(super) fn launches(weight_types: &[DType]) -> Vec<Vec<usize>> {
    let mut runs: Vec<(DType, Vec<usize>)> = Vec::new();
    for (j, &t) in weight_types.iter().enumerate() {
        match runs.iter_mut().find(|(u, _)| *u == t) {
            Some((_, run)) => run.push(j),
            None => runs.push((t, vec![j])),
        }
    }
    runs.into_iter().map(|(_, run)| run).collect()
}

/// `shape` with its last axis as the domain's where it is not 1: an epilogue operand of a product narrower
/// than the widest keeps its own strides, and its kernel reads no column past its product's width.
pub(super) fn widened_shape(shape: &[usize], domain: &[usize]) -> Vec<usize> {
    let mut shape = shape.to_vec();
    if let (Some(last), Some(&width)) = (shape.last_mut(), domain.last()) {
        if *last != 1 {
            *last = width;
        }
    }
    shape
}

/// [`widened_shape`] for a tensor operand.
pub(super) fn widened(operand: Operand, domain: &[usize]) -> Operand {
    match operand {
        Operand::Tensor { address, shape, strides } => {
            Operand::Tensor { address, shape: widened_shape(&shape, domain), strides }
        }
        scalar => scalar,
    }
}

impl Executor<'_> {
    /// The domain of a template kernel's epilogue: the product's shape, or for a MultiGemm group the rows
    /// its products share by the widest product.
    pub(super) fn epilogue_domain(&self, group: &Group) -> Vec<usize> {
        let mut shape = self.shape(group.matmuls[0]).to_vec();
        if group.kind == GroupKind::MultiGemm {
            let widest = group.matmuls.iter().filter_map(|&m| self.shape(m).last().copied()).max();
            if let (Some(last), Some(widest)) = (shape.last_mut(), widest) {
                *last = widest;
            }
        }
        shape
    }

    /// The dtype of each of `group`'s weights, in matmul order (the product's where one is no tensor).
    pub(super) fn weight_types(&self, group: &Group) -> Vec<DType> {
        let weight = |m: NodeId| match self.resolve(self.graph.node(m).args[1]) {
            Ok(crate::call::Value::Tensor(w)) => w.dtype(),
            _ => self.dtype(m),
        };
        group.matmuls.iter().map(|&m| weight(m)).collect()
    }

    /// Launches of group `index`'s template kernel: one a block type of a MultiGemm group's weights.
    pub(super) fn template_launches(&self, index: usize) -> usize {
        let group = &self.plan.groups[index];
        if group.kind != GroupKind::MultiGemm {
            return 1;
        }
        launches(&self.weight_types(group)).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_are_launched_by_weight_type_and_laid_in_order() {
        use DType::{Q4_K, Q6_K};
        assert_eq!(launches(&[Q4_K, Q4_K, Q6_K]), [vec![0, 1], vec![2]]);
        assert_eq!(launches(&[Q6_K, Q4_K, Q6_K]), [vec![0, 2], vec![1]]);
        let gemm = |w: u64, n: usize| SkinnyGemm { x: 0x10, w: [w, 0], m: 1, n, k: 64, lda: 64, ldw: [64, 0] };
        let gemms = [gemm(0x100, 576), gemm(0x200, 192), gemm(0x300, 192)];
        // The second launch: only product 2's blocks; products 0 and 1 get empty ranges before it.
        let t = table(&gemms, &[0, 0, 12]).unwrap();
        assert_eq!(t.grid, 12);
        assert_eq!(t.words, [0x100, 0x200, 0x300, 576, 192, 192, 64, 64, 64, 0, 0, 0, 12, 0, 0]);
        assert_eq!(t.words[t.weight_word(1) - SkinnyGemm::WORDS], 0x200);
        let all = table(&gemms, &[36, 12, 12]).unwrap();
        assert_eq!((all.grid, &all.words[9..13]), (60, &[0, 36, 48, 60][..]));
        assert!(table(&gemms, &[u32::MAX, 1, 0]).is_none());
    }

    #[test]
    fn narrower_products_read_through_their_own_strides() {
        assert_eq!(widened_shape(&[4, 192], &[4, 576]), [4, 576]);
        assert_eq!(widened_shape(&[192], &[4, 576]), [576]);
        assert_eq!(widened_shape(&[4, 1], &[4, 576]), [4, 1], "a broadcast column stays one");
    }
}
