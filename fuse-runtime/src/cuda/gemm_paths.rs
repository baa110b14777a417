//! How each path of a Gemm/DualGemm group runs on the GPU (`tuning.rs` chooses among them):
//!
//! - `cublas`: cuBLAS for the matmuls (a DualGemm's two as one batched call where the two weights lie a
//!   whole number of elements apart), then the epilogue kernel; `cublas:split`: a DualGemm's two as two
//!   calls (at some shapes cuBLAS picks a slower kernel for the batched call);
//! - `cublaslt:<i>`: the same through cuBLASLt with algorithm `i` of its heuristic's list;
//! - `skinny:<config>`: the skinny template, matmuls and epilogue in one kernel (`cuda/skinny.rs`).

use super::super::skinny::{skinny_gemm, SkinnyConfig, SkinnyGemm};
use super::*;
use cudarc::driver::sys::CUfunction_attribute;

/// One way to run a Gemm/DualGemm group.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum GemmPath {
    /// cuBLAS; a DualGemm's two products as one batched call where the weights allow it.
    Cublas,
    /// cuBLAS, a DualGemm's products as two calls.
    CublasSplit,
    Lt(usize),
    Skinny(&'static SkinnyConfig),
}

impl GemmPath {
    pub(super) fn name(&self) -> String {
        match self {
            GemmPath::Cublas => "cublas".into(),
            GemmPath::CublasSplit => "cublas:split".into(),
            GemmPath::Lt(i) => format!("cublaslt:{i}"),
            GemmPath::Skinny(c) => format!("skinny:{}", c.name),
        }
    }

    pub(super) fn parse(text: &str) -> Option<GemmPath> {
        match text.split_once(':') {
            None if text == "cublas" => Some(GemmPath::Cublas),
            Some(("cublas", "split")) => Some(GemmPath::CublasSplit),
            Some(("cublaslt", i)) => i.parse().ok().map(GemmPath::Lt),
            Some(("skinny", c)) => SkinnyConfig::by_name(c).map(GemmPath::Skinny),
            _ => None,
        }
    }
}

impl Executor<'_> {
    /// The matmul part of the group (after its prologue) on `path`.
    pub(super) fn run_gemm(&mut self, index: usize, specs: &[PreparedKernel], path: &GemmPath) -> Result<()> {
        self.path = path.clone();
        if let GemmPath::Skinny(config) = path {
            let spec = specs.iter().find(|k| k.spec.role == Role::Skinny).ok_or_else(|| self.internal("no skinny kernel"))?;
            return self.run_skinny(index, spec, config);
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

    /// The group's operands as the skinny template reads them, or why it cannot.
    pub(super) fn skinny_operands(&self, index: usize, specs: &[PreparedKernel]) -> std::result::Result<SkinnyGemm, String> {
        if !specs.iter().any(|k| k.spec.role == Role::Skinny) {
            return Err("the group has no skinny kernel (its epilogue does not fit one)".into());
        }
        let group = &self.plan.groups[index];
        let left = self.graph.node(group.matmuls[0]).args[0];
        let tensor = |id: NodeId| match self.resolve(id) {
            Ok(Value::Tensor(t)) => Ok(t),
            _ => Err("a matmul operand is not a tensor".to_string()),
        };
        let a = tensor(left)?;
        let dtype = self.dtype(group.matmuls[0]);
        let mut weights = Vec::new();
        for &mm in &group.matmuls {
            let node = self.graph.node(mm);
            if node.args[0] != left {
                return Err("the matmuls have different left operands".into());
            }
            let w = tensor(node.args[1])?;
            if w.dtype() != dtype || self.dtype(mm) != dtype {
                return Err("mixed dtypes".into());
            }
            weights.push(self.matrix(&w).map_err(|e| e.to_string())?);
        }
        if a.dtype() != dtype {
            return Err("mixed dtypes".into());
        }
        skinny_gemm(dtype, &self.matrix(&a).map_err(|e| e.to_string())?, &weights).map_err(str::to_string)
    }

    /// A DualGemm's two products as one batched cuBLAS call into one buffer, when `dual_gemm_pairing`
    /// allows (the same test a launch plan makes again on each replay). `false`: the caller makes two calls.
    fn run_dual_pair(&mut self, index: usize) -> Result<bool> {
        let group = &self.plan.groups[index];
        let [mm0, mm1] = group.matmuls[..] else { return Ok(false) };
        let (n0, n1) = (self.graph.node(mm0), self.graph.node(mm1));
        let tensor = |v: Value| match v {
            Value::Tensor(t) => Some(t),
            Value::Scalar(_) => None,
        };
        let (Some(a), Some(w0), Some(w1)) =
            (tensor(self.resolve(n0.args[0])?), tensor(self.resolve(n0.args[1])?), tensor(self.resolve(n1.args[1])?))
        else {
            return Ok(false);
        };
        let dtype = self.dtype(mm0);
        if [a.dtype(), w0.dtype(), w1.dtype(), self.dtype(mm1)].iter().any(|&d| d != dtype) {
            return Ok(false);
        }
        let (ma, m0, m1) = (self.matrix(&a)?, self.matrix(&w0)?, self.matrix(&w1)?);
        if ma.cols == 0 {
            return Ok(false);
        }
        let call = |w| plan_gemm(&ma, w).ok().and_then(|p| p.call(dtype).ok().flatten());
        let (Some(c0), Some(c1)) = (call(&m0), call(&m1)) else { return Ok(false) };
        let escapes = self.graph.outputs.contains(&mm0) || self.graph.outputs.contains(&mm1);
        let same_left = n0.args[0] == n1.args[0];
        let Ok((swapped, pair)) = dual_gemm_pairing(&c0, &c1, same_left, escapes, [m0.address, m1.address]) else {
            return Ok(false);
        };
        let stride = c0.paired_product_stride();
        let buffer = CudaStorage::alloc(self.device, dtype, 2 * stride)?;
        let base = buffer.base_address();
        let low = if swapped { m1.address } else { m0.address };
        launch_gemm(self.device, &pair, low, ma.address, base)?;
        // Batch 0 is the weight lower in memory: its product comes first in the buffer.
        let first = Tensor::from_cuda(buffer, self.shape(mm0).to_vec());
        let second = first.at_offset(stride, self.shape(mm1).to_vec());
        let (t0, t1) = if swapped { (second, first) } else { (first, second) };
        let recorded = [(mm0, &c0), (mm1, &c1)];
        if let Some(recording) = &mut self.recording {
            for (mm, c) in recorded {
                let node = self.graph.node(mm);
                let (first, second) = (base_of(self.graph, node.args[1]).index(), base_of(self.graph, node.args[0]).index());
                recording.computed.push((mm.index(), dtype, self.inferred.shapes[mm.index()].clone()));
                recording.steps.push(Step::Gemm { call: *c, lt: None, first, second, product: mm.index(), group: index, dual: true });
            }
        }
        if self.describe {
            for (mm, c) in recorded {
                let args = &self.graph.node(mm).args;
                self.gemms.push(DescribedGemm {
                    call: Ok(*c),
                    weight: operand_name(self.graph, args[1]),
                    left: operand_name(self.graph, args[0]),
                    weight_address: if mm == mm0 { m0.address } else { m1.address },
                    left_node: base_of(self.graph, args[0]),
                    escapes,
                });
            }
        }
        self.values[mm0.index()] = Some(Value::Tensor(t0));
        self.values[mm1.index()] = Some(Value::Tensor(t1));
        Ok(true)
    }

    /// The skinny kernel: the matmuls and the epilogue in one launch, its `FuseArgs` over the product with
    /// the last axis kept apart (so a row is a product row), then `FuseGemmArgs`.
    fn run_skinny(&mut self, index: usize, kernel: &PreparedKernel, config: &SkinnyConfig) -> Result<()> {
        let spec = &kernel.spec;
        let group = &self.plan.groups[index];
        let gemm = self
            .skinny_operands(index, std::slice::from_ref(kernel))
            .map_err(|why| Error::unsupported(self.function, "matmul", format!("the skinny template: {why}")))?;
        let dtype = self.dtype(group.matmuls[0]);
        let product_shape = self.shape(group.matmuls[0]).to_vec();
        let dense = crate::tensor::contiguous_strides(&product_shape);
        let mut values = Vec::with_capacity(spec.inputs.len());
        let (mut kinds, mut in_operands) = (Vec::new(), Vec::new());
        for &id in &spec.inputs {
            if group.matmuls.contains(&id) {
                // The accumulators stand in for the product: no memory behind this slot.
                kinds.push(InputKind::Tensor(dtype));
                in_operands.push(Operand::Tensor { address: 0, shape: product_shape.clone(), strides: dense.clone() });
                values.push(Value::Scalar(0.0));
                continue;
            }
            let value = self.resolve(id)?;
            let (kind, operand) = self.input_slot(&value)?;
            kinds.push(kind);
            in_operands.push(operand);
            values.push(value);
        }
        let outputs = spec.outputs.iter().map(|&id| self.allocate(id)).collect::<Result<Vec<_>>>()?;
        let out_operands = outputs.iter().map(|t| self.tensor_operand(t)).collect::<Result<Vec<_>>>()?;
        let mut domain = product_shape.clone();
        for &id in spec.inputs.iter().chain(&spec.nodes).chain(&spec.outputs) {
            domain = broadcast(&domain, self.shape(id)).unwrap_or_default();
        }
        if domain != product_shape {
            return Err(Error::unsupported(
                self.function,
                "matmul",
                format!("the skinny template: the epilogue's domain {domain:?} is not the product's {product_shape:?}"),
            ));
        }
        let launch = plan_launch(codegen::KernelKind::RowReduce, &domain, &in_operands, &out_operands)
            .map_err(|reason| Error::unsupported(self.function, "kernel", format!("{}: {reason}", spec.name)))?;
        let out_dtypes: Vec<DType> = outputs.iter().map(Tensor::dtype).collect();
        let mut defines = codegen::defines(spec, &kinds, &out_dtypes);
        defines.extend(config.defines(dtype));
        let grid = config.grid(gemm.m, gemm.n).ok_or_else(|| self.internal("the skinny grid is too large"))?;
        let function = modules::kernel(self.device, self.function, &spec.name, &spec.source, kernel.source_hash, &defines)?;
        // The template's ring lives in dynamic shared memory, past the default 48 KB for most configs.
        let shared_bytes = config.shared_bytes(group.matmuls.len() == 2);
        let shared = i32::try_from(shared_bytes).map_err(|_| self.internal("skinny shared memory size"))?;
        function
            .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
            .map_err(|e| driver_error(&format!("{}: allow {shared_bytes} bytes of shared memory", spec.name), e))?;
        // Split-K: partial sums and one counter per tile (zeroed here; every launch leaves them zeroed).
        let dual = group.matmuls.len() == 2;
        let scratch = match config.workspace_floats(gemm.m, gemm.n, dual) {
            0 => None,
            floats => {
                let workspace = CudaStorage::alloc(self.device, DType::F32, floats)?;
                let counters = CudaStorage::alloc(self.device, DType::F32, config.tiles(gemm.m, gemm.n))?;
                counters.zero()?;
                Some((workspace, counters))
            }
        };
        let (ws, counters) = scratch.as_ref().map_or((0, 0), |(w, c)| (w.base_address(), c.base_address()));
        let mut words = launch.pack();
        let gemm_at = words.len();
        words.extend(gemm.words(ws, counters));
        let shared_bytes = shared as u32;
        launch_kernel(self.device, &spec.name, &function, grid, shared_bytes, &mut words)?;
        if self.recording.is_some() {
            let mut patches = self.patches(spec, &values);
            let left = self.graph.node(group.matmuls[0]).args[0];
            patches.push(Patch { word: gemm_at, node: base_of(self.graph, left).index() });
            for (j, &mm) in group.matmuls.iter().enumerate() {
                patches.push(Patch { word: gemm_at + 1 + j, node: base_of(self.graph, self.graph.node(mm).args[1]).index() });
            }
            if let Some(recording) = &mut self.recording {
                recording.steps.push(Step::Kernel { name: spec.name.clone(), function, grid, shared_bytes, words, patches });
                recording.scratch.extend(scratch.into_iter().flat_map(|(w, c)| [w, c]));
            }
        }
        for (&id, t) in spec.outputs.iter().zip(outputs) {
            self.values[id.index()] = Some(Value::Tensor(t));
        }
        if self.describe {
            let form = format!("m={} n={} k={} lda={} ldw={:?}", gemm.m, gemm.n, gemm.k, gemm.lda, &gemm.ldw[..group.matmuls.len()]);
            let note = self.path_note.take().map_or(String::new(), |n| format!("{n}; "));
            self.path_note = Some(format!("{note}skinny template {} ({form}), grid {grid}", config.name));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_names_round_trip() {
        let mut paths = vec![GemmPath::Cublas, GemmPath::CublasSplit, GemmPath::Lt(3)];
        paths.extend(fuse_ir::codegen::SKINNY_CONFIGS.iter().map(GemmPath::Skinny));
        for p in paths {
            assert_eq!(GemmPath::parse(&p.name()), Some(p));
        }
        for bad in ["", "cublaslt", "cublaslt:x", "cublas:joined", "skinny:nope", "magic"] {
            assert_eq!(GemmPath::parse(bad), None, "{bad}");
        }
    }
}
