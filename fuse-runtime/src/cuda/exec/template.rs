//! A Gemm/DualGemm/MultiGemm group's template kernel (skinny, wgmma, mma): the matmuls and the epilogue in
//! one launch, or for a MultiGemm group one launch per block type of its weights (`products.rs`).

use super::fuse_args::{plan_launch, Operand, BLOCK_THREADS};
use super::gemm_path::GemmPath;
use super::kernels::PreparedKernel;
use super::launch::KernelDims;
use super::launch_plan::{MapPatch, Patch, Step};
use super::{base_of, Executor};
use crate::call::Value;
use crate::cuda::driver::driver_error;
use crate::cuda::gemm::skinny::SkinnyGemm;
use crate::cuda::gemm::wgmma::{self, TensorMapSpec, MAP_WORDS, PARAM_ALIGN_WORDS};
use crate::cuda::storage::CudaStorage;
use crate::layout::broadcast_strides;
use crate::{Error, Result, Tensor};
use cudarc::driver::sys::CUfunction_attribute;
use fuse_ir::codegen::{self, GemmTiling, InputKind};
use fuse_ir::infer::broadcast;
use fuse_ir::DType;

/// How one template config launches for one shape.
pub(super) struct TemplateLaunch {
    config: &'static str,
    defines: Vec<String>,
    arch: String,
    pub(super) grid: u32,
    block: u32,
    cluster: u32,
    shared_bytes: usize,
    workspace_floats: usize,
    tiles: usize,
    /// The wgmma template's tensor maps (X, W0, W1), which come before its FuseArgs.
    maps: Option<[TensorMapSpec; 3]>,
}

impl Executor<'_> {
    /// The launch of `path`'s template for these operands (`weights`: the weights' dtype).
    pub(super) fn template_launch(
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
        // Recorded for one launch, or timed as its tasks would run (`task_tuning.rs`).
        let as_task = self.device.recorder().is_on() || self.as_tasks;
        let quant_defines = |c: &fuse_ir::codegen::QuantSkinnyConfig| {
            c.defines(dtype, weights).ok_or_else(|| self.internal(format!("{} of {dtype} by {weights}", path.name())))
        };
        let (tiling, config, defines, shared_bytes): (&dyn GemmTiling, _, _, _) = match path {
            GemmPath::Skinny(c) => {
                // A task of a one-launch step has its multiprocessor to itself: X takes a ring of its own.
                let x_ring = as_task && c.takes_x_ring();
                let mut defines = c.defines(dtype);
                if x_ring {
                    defines.push(codegen::X_RING_DEFINE.into());
                }
                (*c, c.name, defines, c.shared_bytes_with(dual, x_ring))
            }
            GemmPath::QuantSkinny(c) => {
                let mut defines = quant_defines(c)?;
                if crate::env::quant_row_prefetch() && c.stages == 0 {
                    defines.push(codegen::ROW_PREFETCH_DEFINE.into());
                }
                if crate::env::quant_scaled_prologue() && c.x8_lanes > 0 {
                    defines.push(codegen::SCALED_PROLOGUE_DEFINE.into());
                }
                if crate::env::quant_bulk_stream() && c.stages > 0 && self.device.arch_major() >= 9 {
                    defines.push(codegen::BULK_STREAM_DEFINE.into());
                }
                if as_task && crate::env::step_prefetch() {
                    // A step block's next task's weights toward L2 (one_launch.cuh): half the L2 over the
                    // blocks, so that one product ahead fits beside the current one's.
                    let bytes = self.device.l2_bytes() / 2 / self.device.sm_count() / 128 * 128;
                    defines.push(format!("{}={bytes}", codegen::TASK_PREFETCH_BYTES_DEFINE));
                }
                (*c, c.name, defines, c.shared_bytes(gemm.k, weights, dual))
            }
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
                // The streaming body: one wave of blocks sharing the rows, however many tiles; as the tasks of
                // a one-launch step, the step's blocks an SM (more would run one after another, each stream
                // starting cold).
                GemmPath::QuantSkinny(c) if c.stages > 0 => {
                    let most = match as_task {
                        true => crate::env::step_blocks_per_sm() as usize,
                        false => usize::MAX,
                    };
                    c.stream_grid(gemm.m, gemm.n, shared_bytes, self.device.sm_count(), most)
                }
                _ => tiling.grid(gemm.m, gemm.n),
            }
            .ok_or_else(|| self.internal("the template's grid is too large"))?,
            block,
            cluster,
            shared_bytes: match self.as_tasks {
                true => self.one_block_an_sm(shared_bytes)?,
                false => shared_bytes,
            },
            workspace_floats: tiling.workspace_floats(gemm.m, gemm.n, dual),
            tiles: tiling.tiles(gemm.m, gemm.n),
            maps,
        })
    }

    /// A template kernel (skinny, wgmma or mma): the matmuls and the epilogue in one launch (a MultiGemm
    /// group: one a block type of its weights), its `FuseArgs` over the product with the last axis kept
    /// apart (so a row is a product row; a MultiGemm group's products share the rows, `products.rs`), then
    /// `FuseGemmArgs`; the wgmma template's tensor maps come first.
    pub(super) fn run_template(
        &mut self,
        index: usize,
        specs: &[PreparedKernel],
        kernel: &PreparedKernel,
        path: &GemmPath,
    ) -> Result<()> {
        let spec = &kernel.spec;
        let plan = self.plan;
        let group = &plan.groups[index];
        let (gemms, primary) = self
            .template_operands(index, specs, path)
            .map_err(|why| Error::unsupported(self.function, "matmul", format!("{}: {why}", path.name())))?;
        let dtype = self.dtype(group.matmuls[0]);
        let dual = group.kind == fuse_ir::GroupKind::DualGemm;
        let multi = group.kind == fuse_ir::GroupKind::MultiGemm;
        let product_shape = self.epilogue_domain(group);
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
            } else if multi {
                operand = super::products::widened(operand, &product_shape);
            }
            kinds.push(kind);
            in_operands.push(operand);
            values.push(value);
        }
        let outputs = spec.outputs.iter().map(|&id| self.allocate(id)).collect::<Result<Vec<_>>>()?;
        let mut out_operands = outputs.iter().map(|t| self.tensor_operand(t)).collect::<Result<Vec<_>>>()?;
        if multi {
            out_operands = out_operands.into_iter().map(|o| super::products::widened(o, &product_shape)).collect();
        }
        let mut domain = product_shape.clone();
        let widen = |shape: &[usize]| match multi {
            true => super::products::widened_shape(shape, &product_shape),
            false => shape.to_vec(),
        };
        for &id in spec.inputs[..prologue_from].iter().chain(&spec.nodes).chain(&spec.outputs) {
            domain = broadcast(&domain, &widen(self.shape(id))).unwrap_or_default();
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
        let mut common_defines = codegen::defines(spec, &kinds, &out_dtypes);
        if primary.is_some() {
            common_defines.push("-DFUSE_GEMM_PRO=1".into());
        }
        let early = match path {
            GemmPath::Skinny(_) => true,
            GemmPath::QuantSkinny(c) => c.stages > 0,
            _ => false,
        };
        if early && self.weights_unwritten_before(group) {
            common_defines.push(codegen::EARLY_WEIGHTS_DEFINE.into());
        }
        let left = base_of(self.graph, primary.unwrap_or(left)).index();
        let weight = |j: usize| {
            base_of(self.graph, self.graph.node(group.matmuls[j.min(group.matmuls.len() - 1)]).args[1]).index()
        };
        let weight_types = self.weight_types(group);
        // A MultiGemm group: one launch per block type of its weights; the others: one launch.
        let launches = if multi { super::products::launches(&weight_types) } else { vec![vec![0]] };
        let mut notes = Vec::new();
        for run in &launches {
            let weights = weight_types[run[0]];
            let gemm = &gemms[run[0]];
            let shape = self.template_launch(path, gemm, dtype, weights, dual)?;
            let mut defines = common_defines.clone();
            defines.extend(shape.defines.iter().cloned());
            let function = self.device.kernel(
                self.function,
                &spec.name,
                &spec.source,
                kernel.source_hash,
                &defines,
                &shape.arch,
            )?;
            // The templates' rings live in dynamic shared memory, past the default 48 KB for most configs.
            let shared = i32::try_from(shape.shared_bytes).map_err(|_| self.internal("template shared memory size"))?;
            function
                .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
                .map_err(|e| {
                    driver_error(&format!("{}: allow {} bytes of shared memory", spec.name, shape.shared_bytes), e)
                })?;
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
            let mut patches = self.patches(spec, &values);
            for p in &mut patches {
                p.word += args_at;
            }
            let mut grid = shape.grid;
            if multi {
                // FuseArgs::product, set by each block; then the product table after FuseGemmArgs.
                words.push(0);
                let gemm_at = words.len();
                words.extend(gemm.words(ws, counters));
                let mut blocks = Vec::with_capacity(gemms.len());
                for (j, g) in gemms.iter().enumerate() {
                    let launched = run.contains(&j);
                    blocks.push(if launched { self.template_launch(path, g, dtype, weights, dual)?.grid } else { 0 });
                }
                let table = super::products::table(&gemms, &blocks).ok_or_else(|| self.internal("grid too large"))?;
                grid = table.grid;
                words.extend(&table.words);
                patches.push(Patch { word: gemm_at + SkinnyGemm::X_WORD, node: left });
                for j in 0..gemms.len() {
                    patches.push(Patch { word: gemm_at + table.weight_word(j), node: weight(j) });
                }
            } else {
                let gemm_at = words.len();
                words.extend(gemm.words(ws, counters));
                patches.push(Patch { word: gemm_at + SkinnyGemm::X_WORD, node: left });
                for j in 0..group.matmuls.len() {
                    patches.push(Patch { word: gemm_at + SkinnyGemm::weight_word(j), node: weight(j) });
                }
            }
            if shape.maps.is_some() {
                words.resize(words.len().next_multiple_of(PARAM_ALIGN_WORDS), 0);
            }
            // The wgmma kernel launches after the kernel before it has finished: overlapping it (a skinny down
            // projection, back to back) cost ~10 us per call on an H200, where every other kernel gained 1-7 us.
            let overlap = !matches!(path, GemmPath::Wgmma(_));
            let dims =
                KernelDims { grid, block: shape.block, cluster: shape.cluster, shared_bytes: shared as u32, overlap };
            self.queue(Step::Kernel { name: spec.name.clone(), function, dims, words, patches, maps })?;
            if let Some(recording) = &mut self.recording {
                recording.scratch.extend(scratch.into_iter().flat_map(|(w, c)| [w, c]));
            }
            if self.describe {
                notes.push(describe_template(
                    path,
                    &gemms,
                    run,
                    (weights, dtype, dual),
                    primary.is_some(),
                    &shape,
                    grid,
                ));
            }
        }
        for (&id, t) in spec.outputs.iter().zip(outputs) {
            self.values[id.index()] = Some(Value::Tensor(t));
        }
        if self.describe {
            let note = self.path_note.take().map_or(String::new(), |n| format!("{n}; "));
            self.path_note = Some(format!("{note}{}", notes.join("; then ")));
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

/// FUSE_DEBUG>=3: which template, config, form and grid one launch of `run`'s products took (`types`: the
/// weights' dtype, the activations', whether the group is a DualGemm).
fn describe_template(
    path: &GemmPath,
    gemms: &[SkinnyGemm],
    run: &[usize],
    (weights, dtype, dual): (DType, DType, bool),
    streams_prologue: bool,
    shape: &TemplateLaunch,
    grid: u32,
) -> String {
    let gemm = &gemms[run[0]];
    let mut read = if weights.is_quantized() { format!(" weights as {weights} blocks") } else { String::new() };
    if matches!(path, GemmPath::Mma(_)) && dtype == DType::F32 {
        read.push_str(", both operands rounded to bf16 for the tensor cores");
    }
    let n: Vec<usize> = run.iter().map(|&j| gemms[j].n).collect();
    let n = if n.len() == 1 && gemms.len() == 1 {
        n[0].to_string()
    } else {
        format!("{n:?} (products {run:?} of {})", gemms.len())
    };
    let ldw: Vec<usize> = if dual { gemm.ldw.to_vec() } else { run.iter().map(|&j| gemms[j].ldw[0]).collect() };
    let form = format!("m={} n={n} k={} lda={} ldw={ldw:?}{read}", gemm.m, gemm.k, gemm.lda);
    let kind = match (path, streams_prologue) {
        (GemmPath::Wgmma(_), _) => "wgmma",
        (GemmPath::Mma(_), _) => "mma",
        (GemmPath::QuantSkinny(_), true) => "quantized skinny (running the prologue as it loads the left operand)",
        (GemmPath::QuantSkinny(_), false) => "quantized skinny",
        (_, true) => "skinny (running the prologue as it loads the left operand)",
        (_, false) => "skinny",
    };
    format!("{kind} template {} ({form}), grid {grid} x {} threads", shape.config, shape.block)
}
