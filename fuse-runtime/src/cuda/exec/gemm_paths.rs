//! The executor's Gemm/DualGemm groups on the path chosen for them (`gemm_path.rs` names the paths,
//! `tuning.rs` chooses): library matmuls then the epilogue kernel, a DualGemm's two products as one batched
//! cuBLAS call, or one template kernel (skinny, wgmma, mma) for the matmuls and the epilogue together.

use super::gemm_path::GemmPath;
use super::kernels::PreparedKernel;
use super::Executor;
use crate::call::Value;
use crate::cuda::gemm::cublas::Matrix;
use crate::cuda::gemm::skinny::{quant_skinny_gemm, skinny_gemm, SkinnyGemm};
use crate::cuda::gemm::wgmma;
use crate::{Result, Tensor};
use fuse_ir::codegen::{self, Role};
use fuse_ir::codegen::{GemmTiling, PROLOGUE_MAX_ROWS};
use fuse_ir::infer::broadcast;
use fuse_ir::{DType, GroupKind, NodeId};

/// Whether `path`'s kernel can run a group's prologue itself (a skinny config of few enough rows a block).
pub(super) fn streams_prologue(path: &GemmPath) -> bool {
    skinny_rows(path).is_some_and(|rows| rows <= PROLOGUE_MAX_ROWS)
}

/// A dense operand of `shape` not written yet (a deferred prologue's output), as the checks of a path read
/// it: at an address any allocation's alignment keeps.
fn pending_dense(shape: &[usize]) -> std::result::Result<Matrix, String> {
    let [batch @ .., rows, cols] = shape else { return Err(format!("an operand of shape {shape:?} (at least 2-D)")) };
    let batch: usize = batch.iter().product();
    let batch_stride = if batch == 1 { 0 } else { rows * cols }; // as `matrix` merges a dense tensor's
    Ok(Matrix { address: 256, batch, rows: *rows, cols: *cols, batch_stride, row_stride: *cols, col_stride: 1 })
}

/// The rows a block of a skinny config (dense or quantized) holds; `None` for other paths.
fn skinny_rows(path: &GemmPath) -> Option<usize> {
    match path {
        GemmPath::Skinny(c) => Some(c.rows_per_block()),
        GemmPath::QuantSkinny(c) => Some(c.rows_per_block()),
        _ => None,
    }
}

impl Executor<'_> {
    /// Kernels and library calls `run_gemm` queues for group `index` on `path` (the prologue kernel where
    /// it is deferred and the path does not stream it, the matmuls, the epilogue kernels).
    pub(super) fn gemm_launches(&self, index: usize, specs: &[PreparedKernel], path: &GemmPath) -> usize {
        let count = |role: Role| specs.iter().filter(|k| k.spec.role == role).count();
        let prologue = if self.prologue_deferred && !streams_prologue(path) { count(Role::Prologue) } else { 0 };
        let body = match path {
            _ if path.template_role().is_some() => return prologue + self.template_launches(index),
            GemmPath::Cublas if self.plan.groups[index].kind == GroupKind::DualGemm => 1,
            _ => self.plan.groups[index].matmuls.len(),
        };
        prologue + body + count(Role::Epilogue)
    }

    /// The matmul part of the group (after its prologue) on `path`; with the prologue deferred (see
    /// `run_group`), the prologue kernel first unless `path` runs it in its kernel.
    pub(super) fn run_gemm(&mut self, index: usize, specs: &[PreparedKernel], path: &GemmPath) -> Result<()> {
        self.path = path.clone();
        // Deferral was decided on these operands with a skinny config (`run_group`); of the checks in
        // `in_kernel_prologue`, only the rows per block depend on the config.
        if self.prologue_deferred && !streams_prologue(path) {
            for spec in specs.iter().filter(|k| k.spec.role == Role::Prologue) {
                self.run_kernel(spec)?;
            }
        }
        if let Some(role) = path.template_role() {
            let spec = specs
                .iter()
                .find(|k| k.spec.role == role)
                .ok_or_else(|| self.internal(format!("no {role:?} kernel")))?;
            return self.run_template(index, specs, spec, path);
        }
        if *path != GemmPath::Cublas || !self.run_dual_pair(index)? {
            for &mm in &self.plan.groups[index].matmuls {
                self.run_matmul(mm)?;
            }
        }
        for spec in specs.iter().filter(|k| k.spec.role == Role::Epilogue) {
            self.run_kernel(spec)?;
        }
        Ok(())
    }

    /// The left operand of group `index`'s matmuls (one for both of a DualGemm).
    pub(super) fn left_operand(&self, index: usize) -> NodeId {
        self.graph.node(self.plan.groups[index].matmuls[0]).args[0]
    }

    /// The prologue's tensor that `path`'s kernel streams in place of the left operand when it runs the
    /// group's prologue itself (`-DFUSE_GEMM_PRO=1`) on this call, or why it cannot: only a skinny config
    /// of at most `PROLOGUE_MAX_ROWS` rows per block does; the tensor must have the left operand's shape
    /// and dtype, and every input of the prologue must broadcast onto that shape.
    fn in_kernel_prologue(
        &self,
        index: usize,
        specs: &[PreparedKernel],
        path: &GemmPath,
    ) -> std::result::Result<NodeId, String> {
        let Some(rows) = skinny_rows(path) else { return Err("only the skinny templates run a prologue".into()) };
        if rows > PROLOGUE_MAX_ROWS {
            return Err(format!("{} holds more than {PROLOGUE_MAX_ROWS} rows per block", path.name()));
        }
        let Some(pro) =
            specs.iter().find(|k| k.spec.role == Role::Skinny).and_then(|k| k.spec.prologue.map(|p| (p, &k.spec)))
        else {
            return Err("the group has no prologue the skinny kernel can run".into());
        };
        let (pro, spec) = pro;
        let left = self.left_operand(index);
        let lhs_shape = self.shape(left);
        let primary = spec.inputs[pro.primary];
        if !matches!(self.resolve(primary), Ok(Value::Tensor(_))) {
            return Err("the prologue has no tensor to stream".into());
        }
        if self.shape(primary) != lhs_shape || self.dtype(primary) != self.dtype(left) {
            return Err(format!("the prologue's tensor %{} is not shaped and typed as the left operand", primary.0));
        }
        for &id in &spec.inputs[pro.first..] {
            if broadcast(lhs_shape, self.shape(id)).as_deref() != Some(lhs_shape) {
                return Err(format!("the prologue's input %{} does not broadcast onto the left operand", id.0));
            }
        }
        Ok(primary)
    }

    /// The group's operands as `path`'s template reads them, or why it cannot; with the node it streams in
    /// place of the left operand when it runs the prologue itself (see `in_kernel_prologue`). One
    /// `SkinnyGemm` for a Gemm or DualGemm group, one a product for a MultiGemm group (whose products may
    /// have weights of different block types: `products.rs` launches them apart).
    pub(super) fn template_operands(
        &self,
        index: usize,
        specs: &[PreparedKernel],
        path: &GemmPath,
    ) -> std::result::Result<(Vec<SkinnyGemm>, Option<NodeId>), String> {
        let Some(role) = path.template_role() else { return Err(format!("{} is not a template path", path.name())) };
        if !specs.iter().any(|k| k.spec.role == role) {
            return Err(format!("the group has no {role:?} kernel (its epilogue does not fit one)"));
        }
        if role == Role::Wgmma && wgmma::compile_arch(self.device.arch()).is_none() {
            return Err(format!("the wgmma template runs on sm_90 GPUs only, not {}", self.device.arch()));
        }
        let group = &self.plan.groups[index];
        let multi = group.kind == GroupKind::MultiGemm;
        if multi && path.splits() > 1 {
            return Err(format!("{} splits K, which a multigemm group's kernel does not", path.name()));
        }
        let left = self.left_operand(index);
        let tensor = |id: NodeId| match self.resolve(id) {
            Ok(Value::Tensor(t)) => Ok(t),
            _ => Err("a matmul operand is not a tensor".to_string()),
        };
        let dtype = self.dtype(group.matmuls[0]);
        // The quantized skinny template reads weights of one block type a launch, the mma template those or
        // weights of the product's dtype; every other, weights of the product's dtype.
        let blocks = self.weight_dtype(index);
        let quantized = match path {
            GemmPath::QuantSkinny(_) => true,
            GemmPath::Mma(_) => blocks.is_some_and(DType::is_quantized),
            _ => false,
        };
        let mut weights = Vec::new();
        let mut types = Vec::new();
        for &mm in &group.matmuls {
            let node = self.graph.node(mm);
            if node.args[0] != left {
                return Err("the matmuls have different left operands".into());
            }
            let w = tensor(node.args[1])?;
            if self.dtype(mm) != dtype {
                return Err("mixed dtypes".into());
            }
            match (quantized, w.dtype()) {
                (false, q) if q.is_quantized() => {
                    return Err(format!("the weights are {q} blocks, which only the qskinny and mma configs read"))
                }
                (false, w) if w != dtype => return Err("mixed dtypes".into()),
                (true, q) if !q.is_quantized() => return Err(format!("the weights are {q}, not quantized blocks")),
                (true, q) if Some(q) != blocks && !multi => return Err("the weights are of two block types".into()),
                _ => {}
            }
            types.push(w.dtype());
            weights.push(self.matrix(&w).map_err(|e| e.to_string())?);
        }
        let read = |a_dtype: DType, x: Matrix| -> std::result::Result<Vec<SkinnyGemm>, String> {
            if a_dtype != dtype {
                return Err("mixed dtypes".into());
            }
            // A MultiGemm group: each product alone; the others: the one or two weights together.
            let sets: Vec<(DType, &[_])> = match multi {
                true => types.iter().zip(weights.chunks(1)).map(|(&t, w)| (t, w)).collect(),
                false => vec![(types[0], &weights[..])],
            };
            let mut gemms = Vec::with_capacity(sets.len());
            for (blocks, weights) in sets {
                let gemm = match quantized {
                    true => quant_skinny_gemm(dtype, blocks, &x, weights),
                    false => skinny_gemm(dtype, &x, weights),
                }
                .map_err(str::to_string)?;
                if let GemmPath::QuantSkinny(c) = path {
                    let stride = |j: usize| blocks.storage_bytes(gemm.ldw[j]).unwrap_or(0) as u64;
                    let starts = [gemm.w[0], gemm.w[0] + stride(0), gemm.w[1], gemm.w[1] + stride(1)];
                    let dual = weights.len() == 2;
                    if let Some(why) = c.rejects(blocks, gemm.k, dual, &starts[..2 * weights.len().min(2)]) {
                        return Err(why);
                    }
                }
                if role == Role::Wgmma {
                    wgmma::check(&gemm)?;
                }
                if quantized && role == Role::Mma && gemm.k % codegen::MMA_QUANT_COLUMN != 0 {
                    return Err(format!(
                        "{} reads quantized weights {} values at a time: K = {} is not a multiple",
                        path.name(),
                        codegen::MMA_QUANT_COLUMN,
                        gemm.k
                    ));
                }
                gemms.push(gemm);
            }
            Ok(gemms)
        };
        let read_tensor = |a: &Tensor| read(a.dtype(), self.matrix(a).map_err(|e| e.to_string())?);
        // The prologue's tensor when the template can stream it; otherwise the left operand, in memory.
        if let Ok(primary) = self.in_kernel_prologue(index, specs, path) {
            if let Ok(gemms) = read_tensor(&tensor(primary)?) {
                return Ok((gemms, Some(primary)));
            }
        }
        match tensor(left) {
            Ok(left) => Ok((read_tensor(&left)?, None)),
            // A deferred prologue has not written the left operand yet: for a path that does not stream it,
            // `run_gemm` runs the prologue kernel first, which writes it fresh and dense. Checked as that
            // (a path is chosen before it runs; the launch reads the operand once written).
            Err(_) if self.prologue_deferred => Ok((read(self.dtype(left), pending_dense(self.shape(left))?)?, None)),
            Err(e) => Err(e),
        }
    }

    /// The dtype of the weight of group `index`'s first matmul (`None` where it is no tensor).
    pub(super) fn weight_dtype(&self, index: usize) -> Option<DType> {
        let mm = self.plan.groups[index].matmuls[0];
        match self.resolve(self.graph.node(mm).args[1]) {
            Ok(Value::Tensor(w)) => Some(w.dtype()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::pending_dense;

    #[test]
    fn a_pending_operand_is_checked_as_the_dense_tensor_its_prologue_writes() {
        // [b, s, k] with b > 1: batches one after the other, as `matrix` merges a dense tensor's.
        let m = pending_dense(&[16, 1, 576]).unwrap();
        assert_eq!((m.batch, m.rows, m.cols, m.batch_stride, m.row_stride, m.col_stride), (16, 1, 576, 576, 576, 1));
        let m = pending_dense(&[3, 5]).unwrap();
        assert_eq!((m.batch, m.rows, m.cols, m.batch_stride, m.row_stride), (1, 3, 5, 0, 5));
        assert_eq!(m.address % 256, 0, "aligned as any allocation");
        assert!(pending_dense(&[7]).unwrap_err().contains("at least 2-D"));
    }
}
