//! The GPU plan executor, the twin of `cpu/exec.rs`: infers this call's shapes and dtypes, then runs the
//! plan group by group over a table of values (arguments, group outputs, `.t()` views of those). Each group
//! is its generated kernels (`fuse_ir::codegen::group_kernels`) launched with packed `FuseArgs`, and for
//! Gemm/DualGemm groups the matmuls on cuBLAS between the prologue and the epilogue kernels. Everything is
//! queued on the device's one stream; nothing waits for the GPU until a result is read.

use super::device::{driver_error, CudaDevice};
use super::gemm::{plan_gemm, run_gemm, Matrix};
use super::kernels::{KernelCache, PlanKernels, PreparedKernel};
use super::launch::{plan_launch, Operand, BLOCK_THREADS};
use super::modules;
use super::storage::CudaStorage;
use crate::cpu::exec::{infer, GroupRun, Inferred};
use crate::cpu::Value;
use crate::{Error, Result, Tensor};
use fuse_ir::codegen::{self, InputKind, Role, CONTIGUOUS_DEFINE};
use fuse_ir::infer::broadcast;
use fuse_ir::{DType, Graph, GroupKind, NodeId, Op, Plan};
use std::time::Instant;

struct Executor<'a> {
    function: &'a str,
    graph: &'a Graph,
    plan: &'a Plan,
    device: &'a CudaDevice,
    inferred: Inferred,
    values: Vec<Option<Value>>,
}

/// Runs `plan` on `args` (one per graph input, every tensor on `device`). Returns the graph's outputs and,
/// when `timed`, each group's time (the stream is synchronised after each group to measure it). The plan's
/// kernels come from `cache` (filled on first use) or, without one, are generated for this call.
pub(crate) fn execute(
    function: &str,
    g: &Graph,
    plan: &Plan,
    args: Vec<Value>,
    device: &CudaDevice,
    timed: bool,
    cache: Option<&KernelCache>,
) -> Result<(Vec<Tensor>, Vec<GroupRun>)> {
    let inferred = infer(function, g, &args)?;
    // Raw driver calls below (launches, memsets) need the context current on this thread.
    device.context().bind_to_thread().map_err(|e| driver_error("bind the context", e))?;
    let generated;
    let kernels = match cache {
        Some(cell) => cell.get_or_init(|| PlanKernels::generate(g, plan)),
        None => {
            generated = PlanKernels::generate(g, plan);
            &generated
        }
    };
    if kernels.groups.len() != plan.groups.len() {
        return Err(Error::internal(function, "the cached kernels belong to another plan"));
    }
    let mut values: Vec<Option<Value>> = vec![None; g.nodes.len()];
    let mut args = args.into_iter().map(Some).collect::<Vec<_>>();
    for id in g.ids() {
        if let Op::Input(k) = g.op(id) {
            values[id.index()] = args.get_mut(k as usize).and_then(Option::take);
        }
    }
    let mut ex = Executor { function, graph: g, plan, device, inferred, values };
    let mut runs = Vec::new();
    for (index, group) in plan.groups.iter().enumerate() {
        let start = Instant::now();
        ex.run_group(index, &kernels.groups[index])?;
        if timed {
            device.synchronize()?;
            runs.push(GroupRun { index, kind: group.kind, time: start.elapsed(), unfused_because: None });
        }
    }
    let outputs = g.outputs.iter().map(|&o| ex.output(o)).collect::<Result<Vec<_>>>()?;
    Ok((outputs, runs))
}

/// The largest element index a view touches, `None` for an empty view.
fn last_index(t: &Tensor) -> Option<usize> {
    if t.shape().contains(&0) {
        return None;
    }
    Some(t.offset() + t.shape().iter().zip(t.strides()).map(|(&d, &s)| (d - 1) * s).sum::<usize>())
}

impl Executor<'_> {
    fn shape(&self, id: NodeId) -> &[usize] {
        &self.inferred.shapes[id.index()]
    }

    /// A node's dtype; values made of scalars only have none and are computed as f32.
    fn dtype(&self, id: NodeId) -> DType {
        self.inferred.dtypes[id.index()].unwrap_or(DType::F32)
    }

    fn internal(&self, message: impl Into<String>) -> Error {
        Error::internal(self.function, message)
    }

    /// The value of a node some kernel reads (never one computed inside that kernel).
    fn resolve(&self, id: NodeId) -> Result<Value> {
        match self.graph.op(id) {
            Op::Const(c) => Ok(Value::Scalar(c)),
            Op::Transpose => match self.resolve(self.graph.node(id).args[0])? {
                Value::Tensor(t) => Ok(Value::Tensor(t.t()?)),
                Value::Scalar(_) => Err(self.internal("a transposed scalar")),
            },
            _ => self.values[id.index()]
                .clone()
                .ok_or_else(|| self.internal(format!("%{} is read before it is computed", id.0))),
        }
    }

    /// A tensor's device memory, after checking it is on this GPU and the view lies inside it.
    fn storage_of<'t>(&self, t: &'t Tensor) -> Result<&'t CudaStorage> {
        let storage = t.cuda_storage().filter(|s| s.device() == self.device).ok_or_else(|| Error::DeviceMismatch {
            function: self.function.to_string(),
            first: crate::Device::Cuda(self.device.clone()),
            second: t.device().clone(),
        })?;
        if last_index(t).is_some_and(|last| last >= storage.len()) {
            return Err(self.internal(format!("a view of shape {:?} reaches past its allocation", t.shape())));
        }
        Ok(storage)
    }

    /// The device address of a view's first element.
    fn address(&self, t: &Tensor) -> Result<u64> {
        let storage = self.storage_of(t)?;
        Ok(storage.base_address() + (t.offset() * storage.dtype().size_bytes()) as u64)
    }

    /// A fresh dense tensor for node `id`.
    fn allocate(&self, id: NodeId) -> Result<Tensor> {
        let shape = self.shape(id).to_vec();
        let storage = CudaStorage::alloc(self.device, self.dtype(id), shape.iter().product())?;
        Ok(Tensor::from_cuda(storage, shape))
    }

    fn run_group(&mut self, index: usize, specs: &[PreparedKernel]) -> Result<()> {
        let plan = self.plan;
        let group = &plan.groups[index];
        let is_gemm = matches!(group.kind, GroupKind::Gemm | GroupKind::DualGemm);
        for spec in specs.iter().filter(|k| k.spec.role != Role::Epilogue) {
            self.run_kernel(spec)?;
        }
        if is_gemm {
            for &mm in &group.matmuls {
                self.run_matmul(mm)?;
            }
        }
        for spec in specs.iter().filter(|k| k.spec.role == Role::Epilogue) {
            self.run_kernel(spec)?;
        }
        if let Some(missing) = group.outputs.iter().find(|o| self.values[o.index()].is_none()) {
            return Err(self.internal(format!(
                "group {index} ({}): no kernel wrote its output %{}",
                group.kind.name(),
                missing.0
            )));
        }
        Ok(())
    }

    /// Launches one generated kernel: resolves its inputs, allocates its outputs, maps them onto the
    /// domain, compiles (once) and launches.
    fn run_kernel(&mut self, kernel: &PreparedKernel) -> Result<()> {
        let spec = &kernel.spec;
        let inputs = spec.inputs.iter().map(|&id| self.resolve(id)).collect::<Result<Vec<_>>>()?;
        let outputs = spec.outputs.iter().map(|&id| self.allocate(id)).collect::<Result<Vec<_>>>()?;
        let mut domain: Vec<usize> = Vec::new();
        let mut shapes = spec.inputs.iter().chain(&spec.nodes).chain(&spec.outputs).map(|&id| self.shape(id));
        for shape in &mut shapes {
            domain = broadcast(&domain, shape).ok_or_else(|| {
                self.internal(format!("{}: shapes {domain:?} and {shape:?} do not broadcast", spec.name))
            })?;
        }
        let mut kinds = Vec::with_capacity(inputs.len());
        let mut in_operands = Vec::with_capacity(inputs.len());
        for value in &inputs {
            match value {
                Value::Tensor(t) => {
                    kinds.push(InputKind::Tensor(t.dtype()));
                    in_operands.push(self.tensor_operand(t)?);
                }
                Value::Scalar(v) => {
                    kinds.push(InputKind::Scalar);
                    in_operands.push(Operand::Scalar(*v));
                }
            }
        }
        let out_operands = outputs.iter().map(|t| self.tensor_operand(t)).collect::<Result<Vec<_>>>()?;
        let launch = plan_launch(spec.kind, &domain, &in_operands, &out_operands)
            .map_err(|reason| Error::unsupported(self.function, "kernel", format!("{}: {reason}", spec.name)))?;
        let out_dtypes: Vec<DType> = outputs.iter().map(Tensor::dtype).collect();
        let mut defines = codegen::defines(spec, &kinds, &out_dtypes);
        if launch.contiguous {
            defines.push(CONTIGUOUS_DEFINE.to_string());
        }
        let grid = launch.grid(spec.kind, self.device.sm_count());
        if grid > 0 {
            let function =
                modules::kernel(self.device, self.function, &spec.name, &spec.source, kernel.source_hash, &defines)?;
            let mut words = launch.pack();
            let mut params = [words.as_mut_ptr().cast::<std::ffi::c_void>()];
            // SAFETY: the kernel was generated for exactly this parameter (one FuseArgs, laid out as the
            // packed words, slot counts and dtypes fixed by the defines); every address is a live
            // allocation on this GPU whose view was bounds-checked above; the driver copies the parameter
            // at launch, and allocations are freed in stream order, after the kernel.
            unsafe {
                cudarc::driver::result::launch_kernel(
                    function.cu_function(),
                    (grid, 1, 1),
                    (BLOCK_THREADS, 1, 1),
                    0,
                    self.device.stream().cu_stream(),
                    &mut params,
                )
            }
            .map_err(|e| driver_error(&format!("launch {}", spec.name), e))?;
        }
        for (&id, t) in spec.outputs.iter().zip(outputs) {
            self.values[id.index()] = Some(Value::Tensor(t));
        }
        Ok(())
    }

    fn tensor_operand(&self, t: &Tensor) -> Result<Operand> {
        Ok(Operand::Tensor { address: self.address(t)?, shape: t.shape().to_vec(), strides: t.strides().to_vec() })
    }

    /// One matmul on cuBLAS into a fresh dense product of the node's dtype.
    fn run_matmul(&mut self, mm: NodeId) -> Result<()> {
        let args = &self.graph.node(mm).args;
        let (a, b) = match (self.resolve(args[0])?, self.resolve(args[1])?) {
            (Value::Tensor(a), Value::Tensor(b)) => (a, b),
            _ => return Err(self.internal("a scalar as a matmul operand")),
        };
        if a.dtype() != b.dtype() || a.dtype() != self.dtype(mm) {
            return Err(self.internal(format!("matmul of {} by {} into {}", a.dtype(), b.dtype(), self.dtype(mm))));
        }
        let shape = self.shape(mm).to_vec();
        let product = CudaStorage::alloc(self.device, self.dtype(mm), shape.iter().product())?;
        let (ma, mb) = (self.matrix(&a)?, self.matrix(&b)?);
        if ma.cols == 0 {
            // An empty inner dimension: the product is all zeros.
            product.zero()?;
        } else {
            let plan = plan_gemm(&ma, &mb).map_err(|reason| {
                Error::unsupported(self.function, "matmul", format!("{reason} (make the operand contiguous first)"))
            })?;
            run_gemm(self.device, &plan, a.dtype(), product.base_address())?;
        }
        let product = Tensor::from_cuda(product, shape);
        self.values[mm.index()] = Some(Value::Tensor(product));
        Ok(())
    }

    /// A 2-D or 3-D tensor as a (batched) matrix.
    fn matrix(&self, t: &Tensor) -> Result<Matrix> {
        let (s, st) = (t.shape(), t.strides());
        let address = self.address(t)?;
        match (s, st) {
            ([r, c], [rs, cs]) => {
                Ok(Matrix { address, batch: 1, rows: *r, cols: *c, batch_stride: 0, row_stride: *rs, col_stride: *cs })
            }
            ([b, r, c], [bs, rs, cs]) => Ok(Matrix {
                address,
                batch: *b,
                rows: *r,
                cols: *c,
                batch_stride: *bs,
                row_stride: *rs,
                col_stride: *cs,
            }),
            _ => {
                Err(Error::unsupported(self.function, "matmul", format!("an operand of shape {s:?} (2-D or 3-D only)")))
            }
        }
    }

    /// A returned value as a tensor; scalars and literals become 0-d f32 tensors on this GPU.
    fn output(&self, id: NodeId) -> Result<Tensor> {
        match self.resolve(id)? {
            Value::Tensor(t) => Ok(t),
            Value::Scalar(v) => Tensor::from_vec(vec![v as f32], &[], &crate::Device::Cuda(self.device.clone())),
        }
    }
}
