//! The executor's Gemm/DualGemm groups on the path chosen for them (`gemm_path.rs` names the paths,
//! `tuning.rs` chooses): library matmuls then the epilogue kernel, a DualGemm's two products as one batched
//! cuBLAS call, or one template kernel (skinny, wgmma, mma) for the matmuls and the epilogue together.

use super::describe::DescribedGemm;
use super::fuse_args::{plan_launch, Operand, BLOCK_THREADS};
use super::gemm_path::GemmPath;
use super::kernels::PreparedKernel;
use super::launch::KernelDims;
use super::launch_plan::{dual_gemm_pairing, run_step, MapPatch, Patch, Step};
use super::{base_of, Executor};
use crate::call::{operand_name, Value};
use crate::cuda::driver::driver_error;
use crate::cuda::gemm::cublas::plan_gemm;
use crate::cuda::gemm::skinny::{quant_skinny_gemm, skinny_gemm, SkinnyGemm};
use crate::cuda::gemm::wgmma::{self, TensorMapSpec, MAP_WORDS, PARAM_ALIGN_WORDS};
use crate::cuda::storage::CudaStorage;
use crate::layout::broadcast_strides;
use crate::{Error, Result, Tensor};
use cudarc::driver::sys::CUfunction_attribute;
use fuse_ir::codegen::{self, InputKind, Role};
use fuse_ir::codegen::{GemmTiling, PROLOGUE_MAX_ROWS};
use fuse_ir::infer::broadcast;
use fuse_ir::{DType, NodeId};

/// How one template config launches for one shape.
struct TemplateLaunch {
    config: &'static str,
    defines: Vec<String>,
    arch: String,
    grid: u32,
    block: u32,
    cluster: u32,
    shared_bytes: usize,
    workspace_floats: usize,
    tiles: usize,
    /// The wgmma template's tensor maps (X, W0, W1), which come before its FuseArgs.
    maps: Option<[TensorMapSpec; 3]>,
}

/// Whether `path`'s kernel can run a group's prologue itself (a skinny config of few enough rows a block).
pub(super) fn streams_prologue(path: &GemmPath) -> bool {
    skinny_rows(path).is_some_and(|rows| rows <= PROLOGUE_MAX_ROWS)
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
            _ if path.template_role().is_some() => return prologue + 1,
            GemmPath::Cublas if self.plan.groups[index].matmuls.len() == 2 => 1,
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
    /// place of the left operand when it runs the prologue itself (see `in_kernel_prologue`).
    pub(super) fn template_operands(
        &self,
        index: usize,
        specs: &[PreparedKernel],
        path: &GemmPath,
    ) -> std::result::Result<(SkinnyGemm, Option<NodeId>), String> {
        let Some(role) = path.template_role() else { return Err(format!("{} is not a template path", path.name())) };
        if !specs.iter().any(|k| k.spec.role == role) {
            return Err(format!("the group has no {role:?} kernel (its epilogue does not fit one)"));
        }
        if role == Role::Wgmma && wgmma::compile_arch(self.device.arch()).is_none() {
            return Err(format!("the wgmma template runs on sm_90 GPUs only, not {}", self.device.arch()));
        }
        let group = &self.plan.groups[index];
        let left = self.left_operand(index);
        let tensor = |id: NodeId| match self.resolve(id) {
            Ok(Value::Tensor(t)) => Ok(t),
            _ => Err("a matmul operand is not a tensor".to_string()),
        };
        let dtype = self.dtype(group.matmuls[0]);
        // The quantized skinny template reads weights of one block type, the mma template those or weights of
        // the product's dtype; every other, weights of the product's dtype.
        let blocks = self.weight_dtype(index);
        let quantized = match path {
            GemmPath::QuantSkinny(_) => true,
            GemmPath::Mma(_) => blocks.is_some_and(DType::is_quantized),
            _ => false,
        };
        let mut weights = Vec::new();
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
                (true, q) if Some(q) != blocks => return Err("the weights are of two block types".into()),
                _ => {}
            }
            weights.push(self.matrix(&w).map_err(|e| e.to_string())?);
        }
        let read = |a: &Tensor| -> std::result::Result<SkinnyGemm, String> {
            if a.dtype() != dtype {
                return Err("mixed dtypes".into());
            }
            let x = self.matrix(a).map_err(|e| e.to_string())?;
            let gemm = match blocks.filter(|_| quantized) {
                Some(blocks) => quant_skinny_gemm(dtype, blocks, &x, &weights),
                None => skinny_gemm(dtype, &x, &weights),
            }
            .map_err(str::to_string)?;
            if let (GemmPath::QuantSkinny(c), Some(blocks)) = (path, blocks) {
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
            Ok(gemm)
        };
        // The prologue's tensor when the template can stream it; otherwise the left operand, in memory.
        if let Ok(primary) = self.in_kernel_prologue(index, specs, path) {
            if let Ok(gemm) = read(&tensor(primary)?) {
                return Ok((gemm, Some(primary)));
            }
        }
        Ok((read(&tensor(left)?)?, None))
    }

    /// The dtype of the weight of group `index`'s first matmul (`None` where it is no tensor).
    pub(super) fn weight_dtype(&self, index: usize) -> Option<DType> {
        let mm = self.plan.groups[index].matmuls[0];
        match self.resolve(self.graph.node(mm).args[1]) {
            Ok(Value::Tensor(w)) => Some(w.dtype()),
            _ => None,
        }
    }

    /// The launch of `path`'s template for these operands (`weights`: the weights' dtype).
    fn template_launch(
        &self,
        path: &GemmPath,
        gemm: &SkinnyGemm,
        dtype: DType,
        weights: DType,
        dual: bool,
    ) -> Result<TemplateLaunch> {
        if let Some(why) = path.lacks_room(dual) {
            return Err(Error::unsupported(self.function, "matmul", why));
        }
        let quant_defines = |c: &fuse_ir::codegen::QuantSkinnyConfig| {
            c.defines(dtype, weights).ok_or_else(|| self.internal(format!("{} of {dtype} by {weights}", path.name())))
        };
        let (tiling, config, defines, shared_bytes): (&dyn GemmTiling, _, _, _) = match path {
            GemmPath::Skinny(c) => (*c, c.name, c.defines(dtype), c.shared_bytes(dual)),
            GemmPath::QuantSkinny(c) => (*c, c.name, quant_defines(c)?, c.shared_bytes(gemm.k, weights, dual)),
            GemmPath::Wgmma(c) => (*c, c.name, c.defines(dtype), c.shared_bytes(dual)),
            GemmPath::Mma(c) => {
                let defines = c.defines(dtype, weights);
                let defines =
                    defines.ok_or_else(|| self.internal(format!("{} of {dtype} by {weights}", path.name())))?;
                (*c, c.name, defines, c.shared_bytes(dual, dtype, weights))
            }
            _ => return Err(self.internal(format!("{} is not a template path", path.name()))),
        };
        // The wgmma template: its own arch target, block size, clusters and tensor maps.
        let (arch, block, cluster, maps) = match path {
            GemmPath::Wgmma(c) => {
                let arch = wgmma::compile_arch(self.device.arch()).ok_or_else(|| self.internal("wgmma off sm_90"))?;
                (arch, c.threads(), c.cluster as u32, Some(TensorMapSpec::of(gemm, c, dtype, dual)))
            }
            _ => (self.device.arch(), BLOCK_THREADS, 1, None),
        };
        Ok(TemplateLaunch {
            config,
            defines,
            arch: arch.to_string(),
            grid: match path {
                // The streaming body: one wave of blocks sharing the rows, however many tiles.
                GemmPath::QuantSkinny(c) if c.stages > 0 => {
                    c.stream_grid(gemm.m, gemm.n, shared_bytes, self.device.sm_count())
                }
                _ => tiling.grid(gemm.m, gemm.n),
            }
            .ok_or_else(|| self.internal("the template's grid is too large"))?,
            block,
            cluster,
            shared_bytes,
            workspace_floats: tiling.workspace_floats(gemm.m, gemm.n, dual),
            tiles: tiling.tiles(gemm.m, gemm.n),
            maps,
        })
    }

    /// A DualGemm's two products as one batched cuBLAS call into one buffer, when `dual_gemm_pairing`
    /// allows (the same test a launch plan makes again on each replay). `false`: the caller makes two calls.
    fn run_dual_pair(&mut self, index: usize) -> Result<bool> {
        let (graph, plan) = (self.graph, self.plan);
        let group = &plan.groups[index];
        let [mm0, mm1] = group.matmuls[..] else { return Ok(false) };
        let (n0, n1) = (graph.node(mm0), graph.node(mm1));
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
        // Batch 0 is the weight lower in memory: its product comes first in the buffer.
        let (low, high) = if swapped { (mm1, mm0) } else { (mm0, mm1) };
        self.addresses[low.index()] = base;
        self.addresses[high.index()] = base + (stride * dtype.size_bytes()) as u64;
        // The one batched call, launched through the address table as a replay launches it; recorded as the
        // two calls it stands for, which `LaunchPlan::build` pairs again (the same tests as here).
        let (weight, left) = (base_of(graph, graph.node(low).args[1]).index(), base_of(graph, n0.args[0]).index());
        let mut batched = Step::Gemm {
            call: pair,
            lt: None,
            first: weight,
            second: left,
            product: low.index(),
            group: index,
            dual: true,
        };
        run_step(self.device, &mut batched, &mut self.addresses)?;
        let first = Tensor::from_cuda(buffer, self.shape(mm0).to_vec());
        let second = first.at_offset(stride, self.shape(mm1).to_vec());
        let (t0, t1) = if swapped { (second, first) } else { (first, second) };
        let recorded = [(mm0, &c0), (mm1, &c1)];
        for (mm, c) in recorded {
            let node = graph.node(mm);
            let (first, second) = (base_of(graph, node.args[1]).index(), base_of(graph, node.args[0]).index());
            self.record_computed(mm, dtype, &self.inferred.shapes[mm.index()].clone());
            self.record(Step::Gemm {
                call: *c,
                lt: None,
                first,
                second,
                product: mm.index(),
                group: index,
                dual: true,
            });
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

    /// A template kernel (skinny or wgmma): the matmuls and the epilogue in one launch, its `FuseArgs` over
    /// the product with the last axis kept apart (so a row is a product row), then `FuseGemmArgs`; the
    /// wgmma template's tensor maps come first.
    fn run_template(
        &mut self,
        index: usize,
        specs: &[PreparedKernel],
        kernel: &PreparedKernel,
        path: &GemmPath,
    ) -> Result<()> {
        let spec = &kernel.spec;
        let plan = self.plan;
        let group = &plan.groups[index];
        let (gemm, primary) = self
            .template_operands(index, specs, path)
            .map_err(|why| Error::unsupported(self.function, "matmul", format!("{}: {why}", path.name())))?;
        let dtype = self.dtype(group.matmuls[0]);
        let dual = group.matmuls.len() == 2;
        let weights = self.weight_dtype(index).unwrap_or(dtype);
        let shape = self.template_launch(path, &gemm, dtype, weights, dual)?;
        let product_shape = self.shape(group.matmuls[0]).to_vec();
        let dense = crate::tensor::contiguous_strides(&product_shape);
        let left = self.left_operand(index);
        let lhs_shape = self.shape(left).to_vec();
        let prologue_from = spec.prologue.map_or(spec.inputs.len(), |p| p.first);
        let mut values = Vec::with_capacity(spec.inputs.len());
        let (mut kinds, mut in_operands) = (Vec::new(), Vec::new());
        for (slot, &id) in spec.inputs.iter().enumerate() {
            if group.matmuls.contains(&id) {
                // The accumulators stand in for the product: no memory behind this slot.
                kinds.push(InputKind::Tensor(dtype));
                in_operands.push(Operand::Tensor { address: 0, shape: product_shape.clone(), strides: dense.clone() });
                values.push(Value::Scalar(0.0));
                continue;
            }
            let value = self.resolve(id)?;
            let (kind, mut operand) = self.input_slot(&value)?;
            if slot >= prologue_from {
                // A prologue slot: strides over the left operand's domain, whose last axis (k) stands in
                // for the product's; all zero when the kernel runs without its prologue (unread).
                if let Operand::Tensor { address, shape, strides } = operand {
                    let strides = match primary {
                        Some(_) => broadcast_strides(&shape, &strides, &lhs_shape),
                        None => vec![0; product_shape.len()],
                    };
                    operand = Operand::Tensor { address, shape: product_shape.clone(), strides };
                }
            }
            kinds.push(kind);
            in_operands.push(operand);
            values.push(value);
        }
        let outputs = spec.outputs.iter().map(|&id| self.allocate(id)).collect::<Result<Vec<_>>>()?;
        let out_operands = outputs.iter().map(|t| self.tensor_operand(t)).collect::<Result<Vec<_>>>()?;
        let mut domain = product_shape.clone();
        for &id in spec.inputs[..prologue_from].iter().chain(&spec.nodes).chain(&spec.outputs) {
            domain = broadcast(&domain, self.shape(id)).unwrap_or_default();
        }
        if domain != product_shape {
            return Err(Error::unsupported(
                self.function,
                "matmul",
                format!("{}: the epilogue's domain {domain:?} is not the product's {product_shape:?}", path.name()),
            ));
        }
        let launch = plan_launch(codegen::KernelKind::RowReduce, &domain, &in_operands, &out_operands)
            .map_err(|reason| Error::unsupported(self.function, "kernel", format!("{}: {reason}", spec.name)))?;
        let out_dtypes: Vec<DType> = outputs.iter().map(Tensor::dtype).collect();
        let mut defines = codegen::defines(spec, &kinds, &out_dtypes);
        defines.extend(shape.defines.iter().cloned());
        if primary.is_some() {
            defines.push("-DFUSE_GEMM_PRO=1".into());
        }
        let early = match path {
            GemmPath::Skinny(_) => true,
            GemmPath::QuantSkinny(c) => c.stages > 0,
            _ => false,
        };
        if early && self.weights_unwritten_before(group) {
            defines.push(codegen::EARLY_WEIGHTS_DEFINE.into());
        }
        let function =
            self.device.kernel(self.function, &spec.name, &spec.source, kernel.source_hash, &defines, &shape.arch)?;
        // The templates' rings live in dynamic shared memory, past the default 48 KB for most configs.
        let shared = i32::try_from(shape.shared_bytes).map_err(|_| self.internal("template shared memory size"))?;
        function.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared).map_err(
            |e| driver_error(&format!("{}: allow {} bytes of shared memory", spec.name, shape.shared_bytes), e),
        )?;
        // Split-K: partial sums and one counter per tile (zeroed here; every launch leaves them zeroed).
        let scratch = match shape.workspace_floats {
            0 => None,
            floats => {
                let workspace = CudaStorage::alloc(self.device, DType::F32, floats)?;
                let counters = CudaStorage::alloc(self.device, DType::F32, shape.tiles)?;
                counters.zero()?;
                Some((workspace, counters))
            }
        };
        let (ws, counters) = scratch.as_ref().map_or((0, 0), |(w, c)| (w.base_address(), c.base_address()));
        // The wgmma template: three tensor maps (X, W0, W1), then FuseArgs.
        let left = base_of(self.graph, primary.unwrap_or(left)).index();
        let weight = |j: usize| {
            base_of(self.graph, self.graph.node(group.matmuls[j.min(group.matmuls.len() - 1)]).args[1]).index()
        };
        let mut maps = Vec::new();
        let mut words = Vec::new();
        if let Some(specs) = shape.maps {
            let (nodes, addresses) =
                ([left, weight(0), weight(1)], [gemm.x, gemm.w[0], if dual { gemm.w[1] } else { gemm.w[0] }]);
            for (j, map) in specs.into_iter().enumerate() {
                words.extend(map.encode(addresses[j]).map_err(|e| self.internal(e))?);
                maps.push(MapPatch { word: j * MAP_WORDS, node: nodes[j], map, encoded_at: addresses[j] });
            }
        }
        let args_at = words.len();
        words.extend(launch.pack());
        let gemm_at = words.len();
        words.extend(gemm.words(ws, counters));
        if shape.maps.is_some() {
            words.resize(words.len().next_multiple_of(PARAM_ALIGN_WORDS), 0);
        }
        // The wgmma kernel launches after the kernel before it has finished: overlapping it (a skinny down
        // projection, back to back) cost ~10 us per call on an H200, where every other kernel gained 1-7 us.
        let overlap = !matches!(path, GemmPath::Wgmma(_));
        let dims = KernelDims {
            grid: shape.grid,
            block: shape.block,
            cluster: shape.cluster,
            shared_bytes: shared as u32,
            overlap,
        };
        let mut patches = self.patches(spec, &values);
        for p in &mut patches {
            p.word += args_at;
        }
        patches.push(Patch { word: gemm_at + SkinnyGemm::X_WORD, node: left });
        for j in 0..group.matmuls.len() {
            patches.push(Patch { word: gemm_at + SkinnyGemm::weight_word(j), node: weight(j) });
        }
        self.queue(Step::Kernel { name: spec.name.clone(), function, dims, words, patches, maps })?;
        if let Some(recording) = &mut self.recording {
            recording.scratch.extend(scratch.into_iter().flat_map(|(w, c)| [w, c]));
        }
        for (&id, t) in spec.outputs.iter().zip(outputs) {
            self.values[id.index()] = Some(Value::Tensor(t));
        }
        if self.describe {
            let mut read = if weights.is_quantized() { format!(" weights as {weights} blocks") } else { String::new() };
            if matches!(path, GemmPath::Mma(_)) && dtype == DType::F32 {
                read.push_str(", both operands rounded to bf16 for the tensor cores");
            }
            let form = format!(
                "m={} n={} k={} lda={} ldw={:?}{read}",
                gemm.m,
                gemm.n,
                gemm.k,
                gemm.lda,
                &gemm.ldw[..group.matmuls.len()]
            );
            let note = self.path_note.take().map_or(String::new(), |n| format!("{n}; "));
            let kind = match (path, primary.is_some()) {
                (GemmPath::Wgmma(_), _) => "wgmma",
                (GemmPath::Mma(_), _) => "mma",
                (GemmPath::QuantSkinny(_), true) => {
                    "quantized skinny (running the prologue as it loads the left operand)"
                }
                (GemmPath::QuantSkinny(_), false) => "quantized skinny",
                (_, true) => "skinny (running the prologue as it loads the left operand)",
                (_, false) => "skinny",
            };
            let (grid, block) = (dims.grid, dims.block);
            self.path_note =
                Some(format!("{note}{kind} template {} ({form}), grid {grid} x {block} threads", shape.config));
        }
        Ok(())
    }

    /// Whether a skinny kernel may copy its weights before it waits for the kernel before it (programmatic
    /// dependent launch; `EARLY_WEIGHTS_DEFINE`): see `unwritten_before`.
    fn weights_unwritten_before(&mut self, group: &fuse_ir::Group) -> bool {
        let graph = self.graph;
        self.unwritten_before(group.matmuls.iter().map(|&mm| graph.node(mm).args[1]))
    }
}
