//! Groups whose kernels the code generator wrote (`fuse_ir::codegen::group_kernels`) on the GPU: whether
//! a pointwise or row group's one pass fits this call's shapes, each kernel's operands resolved, its outputs
//! allocated, its `FuseArgs` packed (`fuse_args`) and its launch queued, and the node-by-node fallback.

use super::fuse_args::{plan_launch, ArgsLayout, Operand};
use super::kernels::PreparedKernel;
use super::launch::KernelDims;
use super::launch_plan::{Patch, Step};
use super::{base_of, Executor};
use crate::call::Value;
use crate::{Error, Result, Tensor};
use fuse_ir::codegen::{self, InputKind, CONTIGUOUS_DEFINE};
use fuse_ir::infer::broadcast;
use fuse_ir::{DType, GroupKind, Op, Plan};

impl Executor<'_> {
    /// Why this call's shapes do not fit a pointwise or row group's one pass (`None` when they do): the
    /// planner groups without shapes (`x.sum(-1) + z` is one row group), and a value whose rows are another
    /// width than the others' makes no one domain. The CPU backend decides the same (`cpu/rowprog.rs`).
    pub(super) fn does_not_fit(&self, group: &fuse_ir::Group) -> Option<String> {
        if !matches!(group.kind, GroupKind::Pointwise | GroupKind::RowReduce) {
            return None;
        }
        let mut domain: Vec<usize> = Vec::new();
        for &id in group.inputs.iter().chain(&group.nodes) {
            let shape = self.shape(id);
            match broadcast(&domain, shape) {
                Some(d) => domain = d,
                None => return Some(format!("shapes {domain:?} and {shape:?} make no one domain")),
            }
        }
        // A row kernel reduces along the domain's rows: an operand whose rows are narrower (broadcast along
        // them, `[3, 1]` in a `[3, 7]` domain) would be summed once per column.
        let width = domain.last().copied().unwrap_or(1);
        for &n in group.nodes.iter().filter(|&&n| matches!(self.graph.op(n), Op::Reduce(_))) {
            let operand = self.graph.node(n).args[0];
            let rows = self.shape(operand).last().copied().unwrap_or(1);
            if rows != width {
                return Some(format!("%{} reduces rows of {rows}, the group's rows hold {width}", n.0));
            }
        }
        None
    }

    /// Runs `group` one node at a time, each node's kernel generated now (as the unfused plan's would be).
    pub(super) fn run_node_by_node(&mut self, group: &fuse_ir::Group) -> Result<()> {
        for &n in &group.nodes {
            let single = Plan { groups: vec![fuse_ir::Group::single(self.graph, n)] };
            for spec in codegen::group_kernels(self.graph, &single, 0) {
                let kernel = PreparedKernel::new(spec);
                self.run_kernel(&kernel)?;
            }
        }
        Ok(())
    }

    /// Launches one generated kernel: resolves its inputs, allocates its outputs, maps them onto the
    /// domain, compiles (once) and launches.
    pub(super) fn run_kernel(&mut self, kernel: &PreparedKernel) -> Result<()> {
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
        let (kinds, in_operands): (Vec<InputKind>, Vec<Operand>) =
            inputs.iter().map(|v| self.input_slot(v)).collect::<Result<Vec<_>>>()?.into_iter().unzip();
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
            let function = self.device.kernel(
                self.function,
                &spec.name,
                &spec.source,
                kernel.source_hash,
                &defines,
                self.device.arch(),
            )?;
            let (words, patches) = (launch.pack(), self.patches(spec, &inputs));
            let name = spec.name.clone();
            self.queue(Step::Kernel {
                name,
                function,
                dims: KernelDims::plain(grid),
                words,
                patches,
                maps: Vec::new(),
            })?;
        } else {
            self.unreplayable();
        }
        for (&id, t) in spec.outputs.iter().zip(outputs) {
            self.values[id.index()] = Some(Value::Tensor(t));
        }
        Ok(())
    }

    /// Where a call's addresses and scalar arguments go in the kernel's words (`fuse_args::ArgsLayout`).
    pub(super) fn patches(&self, spec: &codegen::KernelSpec, inputs: &[Value]) -> Vec<Patch> {
        let layout = ArgsLayout::new(inputs.len());
        let mut patches = Vec::with_capacity(inputs.len() + spec.outputs.len());
        for (i, (&id, value)) in spec.inputs.iter().zip(inputs).enumerate() {
            match (value, self.graph.op(id)) {
                (Value::Tensor(_), _) => {
                    patches.push(Patch { word: layout.input_address(i), node: base_of(self.graph, id).index() })
                }
                // A scalar argument, or arithmetic of them (a host scalar): from the table on each call.
                (Value::Scalar(_), op) if matches!(op, Op::Input(_)) || op.is_pointwise() => {
                    patches.push(Patch { word: layout.input_scalar(i), node: id.index() })
                }
                // A literal stays as packed.
                (Value::Scalar(_), _) => {}
            }
        }
        for (j, &id) in spec.outputs.iter().enumerate() {
            patches.push(Patch { word: layout.output_address(j), node: id.index() });
        }
        patches
    }

    /// What an input slot holds: its kind (for the defines) and its operand (for the launch).
    pub(super) fn input_slot(&self, value: &Value) -> Result<(InputKind, Operand)> {
        Ok(match value {
            Value::Tensor(t) if t.dtype() == DType::U32 => {
                return Err(Error::unsupported(
                    self.function,
                    "kernel",
                    "u32 tensors (token ids) are not yet read by GPU kernels",
                ))
            }
            Value::Tensor(t) => (InputKind::Tensor(t.dtype()), self.tensor_operand(t)?),
            Value::Scalar(v) => (InputKind::Scalar, Operand::Scalar(*v)),
        })
    }

    pub(super) fn tensor_operand(&self, t: &Tensor) -> Result<Operand> {
        Ok(Operand::Tensor { address: self.address(t)?, shape: t.shape().to_vec(), strides: t.strides().to_vec() })
    }
}
