//! A matmul on cuBLAS (or one of its cuBLASLt algorithms) on the GPU: its operands as (batched) matrices,
//! a fresh product, the call queued as a launch-plan step, and for FUSE_DEBUG>=3 how it went.

use super::describe::{describe_matmuls, DescribedGemm};
use super::gemm_path::GemmPath;
use super::launch::last_index;
use super::launch_plan::Step;
use super::model_args::Words;
use super::{base_of, Executor};
use crate::call::{operand_name, Value};
use crate::cuda::gemm::cublas::{plan_gemm, GemmCall, Matrix};
use crate::cuda::gemm::lt::lt_matmul;
use crate::cuda::storage::CudaStorage;
use crate::{Error, Result, Tensor};
use fuse_ir::codegen::{self, ModelKernel};
use fuse_ir::{DType, GroupKind, NodeId};

impl Executor<'_> {
    /// One matmul on cuBLAS into a fresh dense product of the node's dtype.
    pub(super) fn run_matmul(&mut self, mm: NodeId) -> Result<()> {
        let graph = self.graph;
        let args = &graph.node(mm).args;
        let (a, b) = match (self.resolve(args[0])?, self.resolve(args[1])?) {
            (Value::Tensor(a), Value::Tensor(b)) => (a, b),
            _ => return Err(self.internal("a scalar as a matmul operand")),
        };
        // cuBLAS multiplies weights of quantized blocks dequantized into scratch memory of a's dtype.
        let quantized = b.dtype().is_quantized();
        let b = if quantized { self.dequantized(&b, a.dtype())? } else { b };
        if a.dtype() != b.dtype() || a.dtype() != self.dtype(mm) {
            return Err(self.internal(format!("matmul of {} by {} into {}", a.dtype(), b.dtype(), self.dtype(mm))));
        }
        let shape = self.shape(mm).to_vec();
        let product = CudaStorage::alloc(self.device, self.dtype(mm), shape.iter().product())?;
        let dtype = self.dtype(mm);
        self.addresses[mm.index()] = product.base_address();
        self.record_computed(mm, dtype, &shape);
        let (ma, mb) = (self.matrix(&a)?, self.matrix(&b)?);
        let mut described: std::result::Result<GemmCall, &'static str> = Err("an empty product: no cuBLAS call");
        if ma.cols == 0 {
            // An empty inner dimension: the product is all zeros.
            product.zero()?;
            described = Err("an empty inner dimension: the product is zero-filled, no cuBLAS call");
            self.unreplayable();
        } else {
            let plan = plan_gemm(&ma, &mb).map_err(|reason| {
                Error::unsupported(self.function, "matmul", format!("{reason} (make the operand contiguous first)"))
            })?;
            match plan.call(a.dtype())? {
                Some(mut call) => {
                    call.tf32 = GemmCall::tf32_for(a.dtype(), quantized, ma.batch * ma.rows);
                    // A cuBLASLt algorithm this shape does not offer (a results file from elsewhere, say)
                    // falls back to cuBLAS: the product is the same, only the speed differs.
                    let lt = match self.path {
                        GemmPath::Lt(algo) => lt_matmul(self.device, &call)
                            .ok()
                            .filter(|form| algo < form.algorithms())
                            .map(|form| (form, algo)),
                        _ => None,
                    };
                    // cuBLAS's A is the weight, its B the left operand (see `plan_gemm`).
                    let (first, second) = (base_of(graph, args[1]).index(), base_of(graph, args[0]).index());
                    // Split on purpose: a launch plan must not pair these two calls either.
                    let (group, dual) = (self.group_of(mm), self.is_dual(mm) && self.path != GemmPath::CublasSplit);
                    // A dequantized weight: the call reads the copy, through the weight's slot of the address
                    // table for this launch only (the call is not replayed: `dequantized`).
                    let kept = self.addresses[first];
                    if quantized {
                        self.addresses[first] = self.address(&b)?;
                    }
                    let queued = self.queue(Step::Gemm { call, lt, first, second, product: mm.index(), group, dual });
                    self.addresses[first] = kept;
                    queued?;
                    described = Ok(call);
                }
                None => self.unreplayable(),
            }
        }
        if self.describe {
            self.gemms.push(DescribedGemm {
                call: described,
                weight: operand_name(self.graph, args[1]),
                left: operand_name(self.graph, args[0]),
                weight_address: mb.address,
                left_node: base_of(self.graph, args[0]),
                escapes: self.graph.outputs.contains(&mm),
            });
        }
        let product = Tensor::from_cuda(product, shape);
        self.values[mm.index()] = Some(Value::Tensor(product));
        Ok(())
    }

    /// The values of `w`, a view of quantized blocks, as a view of the same shape and strides over a fresh
    /// dense `dtype` copy of the stretch of blocks it spans (the dequantize kernel, queued; the copy lives as
    /// long as the view, its memory reused in stream order after).
    pub(super) fn dequantized(&mut self, w: &Tensor, dtype: DType) -> Result<Tensor> {
        let values = w.dtype().block().map_or(1, |b| b.elements);
        let start = w.offset();
        let end = last_index(w).map_or(start, |last| last + 1);
        let count = end.next_multiple_of(values) - start;
        let from = self.address(w)?;
        let out = CudaStorage::alloc(self.device, dtype, count)?;
        if count > 0 {
            let code = codegen::float_dtype_code(dtype).ok_or_else(|| {
                Error::unsupported(self.function, "matmul", format!("quantized weights by {dtype} activations"))
            })?;
            let mut words = Words::default();
            words.address(from).address(out.base_address()).count(count);
            let defines = [ModelKernel::defines(w.dtype()), vec![format!("-DFUSE_DEQUANT_OUT={code}")]].concat();
            let grid = (count / 8).div_ceil(ModelKernel::Dequantize.block_threads() as usize).clamp(1, 1 << 16);
            self.launch_model_kernel_with(ModelKernel::Dequantize, &defines, grid as u32, 0, words)?;
            // The kernel's arguments are this call's addresses, not patched on a replay.
            self.unreplayable();
        }
        Ok(Tensor::cuda_view(out, w.shape().to_vec(), w.strides().to_vec(), 0))
    }

    /// FUSE_DEBUG>=3: how the matmuls of the group just run went to cuBLAS (`None` for a group without
    /// any); see `describe_matmuls`.
    pub(super) fn matmul_path(&mut self, kind: GroupKind) -> Option<String> {
        let library = describe_matmuls(kind, &std::mem::take(&mut self.gemms), self.path == GemmPath::Cublas);
        match (self.path_note.take(), library) {
            (Some(note), Some(library)) => Some(format!("{note}; {library}")),
            (note, library) => note.or(library),
        }
    }

    /// The plan group that computes matmul `mm`.
    pub(super) fn group_of(&self, mm: NodeId) -> usize {
        self.plan.groups.iter().position(|g| g.matmuls.contains(&mm)).unwrap_or(usize::MAX)
    }

    /// Whether matmul `mm` belongs to a DualGemm group (whose two products may be one cuBLAS call).
    pub(super) fn is_dual(&self, mm: NodeId) -> bool {
        self.plan.groups.iter().any(|g| g.kind == GroupKind::DualGemm && g.matmuls.contains(&mm))
    }

    /// A tensor of two or more axes as a (batched) matrix: its batch axes (all but the last two) must merge
    /// into one strided axis (a dense [b, h, s, d] does; a transposed view of one whose batch axes are not
    /// adjacent in memory does not: `.contiguous()` it first).
    pub(super) fn matrix(&self, t: &Tensor) -> Result<Matrix> {
        let (s, st) = (t.shape(), t.strides());
        let address = self.address(t)?;
        let r = s.len();
        if r < 2 {
            return Err(Error::unsupported(
                self.function,
                "matmul",
                format!("an operand of shape {s:?} (at least 2-D)"),
            ));
        }
        let (batch, batch_stride) = merged_batch(&s[..r - 2], &st[..r - 2]).ok_or_else(|| {
            Error::unsupported(
                self.function,
                "matmul",
                format!("an operand of shape {s:?} and strides {st:?}: its batch axes do not merge into one (make it contiguous first)"),
            )
        })?;
        Ok(Matrix {
            address,
            batch,
            rows: s[r - 2],
            cols: s[r - 1],
            batch_stride,
            row_stride: st[r - 2],
            col_stride: st[r - 1],
        })
    }
}

/// Batch axes as one: their element count and the stride between consecutive batches, when every axis
/// (axes of size 1 aside) steps exactly over the one after it; `None` when they do not merge.
fn merged_batch(shape: &[usize], strides: &[usize]) -> Option<(usize, usize)> {
    let axes: Vec<(usize, usize)> =
        shape.iter().zip(strides).map(|(&d, &st)| (d, st)).filter(|&(d, _)| d != 1).collect();
    let Some(&(_, innermost)) = axes.last() else { return Some((1, 0)) };
    if axes.windows(2).any(|w| w[0].1 != w[1].0 * w[1].1) {
        return None;
    }
    Some((axes.iter().map(|&(d, _)| d).product(), innermost))
}

#[cfg(test)]
mod merged_batch_tests {
    use super::merged_batch;

    #[test]
    fn batch_axes_merge_only_when_adjacent_in_memory() {
        assert_eq!(merged_batch(&[], &[]), Some((1, 0)));
        assert_eq!(merged_batch(&[2, 3], &[3 * 35, 35]), Some((6, 35)));
        assert_eq!(merged_batch(&[1, 3], &[99, 7]), Some((3, 7)));
        assert_eq!(merged_batch(&[2, 1, 1], &[3, 3, 3]), Some((2, 3)));
        // [b, h] of a transposed [b, s, h, d] view: h steps d, b steps s*h*d, not h*d.
        assert_eq!(merged_batch(&[2, 3], &[5 * 3 * 4, 4]), None);
        // A broadcast batch axis (stride 0) beside a real one.
        assert_eq!(merged_batch(&[2, 3], &[0, 12]), None);
    }
}
