//! The plan executor: infers this call's shapes and dtypes, then runs the plan group by group over a table
//! of values (arguments, literals, group outputs, and views of those), and returns the outputs.

use super::kernels::{allocate, sink_of, Sink};
use super::matmul::run_gemm_group;
use super::model::run_model;
use super::rowprog::{compile, CallInfo, Compiled, RowSpec};
use super::rowrun::BlockInputs;
use super::Outcome;
use crate::call::{infer_memo, input_values, GroupRun, InferMemo, Value};
use crate::host::CpuData;
use crate::views::{host_scalar, resolve_view};
use crate::{Error, Result, Tensor};
use fuse_ir::plan::RopeAppendAttention;
use fuse_ir::view::ViewOp;
use fuse_ir::{DType, Graph, Group, GroupKind, NodeId, Op, Plan};
use std::time::Instant;

fn is_cat(op: Op) -> bool {
    matches!(op, Op::View(ViewOp::Cat { .. }))
}

fn is_slice_set(op: Op) -> bool {
    matches!(op, Op::View(ViewOp::SliceSet { .. }))
}

struct Executor<'a> {
    info: CallInfo<'a>,
    values: Vec<Option<Value>>,
    /// Whether to describe each GEMM call (a timed call: FUSE_DEBUG>=2).
    describe: bool,
}

/// Runs `plan` on the CPU (every tensor argument is in host memory). Returns the graph's outputs and, when
/// `timed`, how each group ran (groups that ran unfused are always reported).
pub(crate) fn execute(
    function: &str,
    g: &Graph,
    plan: &Plan,
    args: Vec<Value>,
    timed: bool,
    memo: Option<&InferMemo>,
) -> Result<(Vec<Tensor>, Vec<GroupRun>)> {
    let inferred = infer_memo(function, g, &args, memo)?;
    let values = input_values(g, args);
    let info = CallInfo { function, graph: g, shapes: &inferred.shapes, dtypes: &inferred.dtypes };
    let mut ex = Executor { info, values, describe: timed };
    let mut runs = Vec::new();
    let mut paths = Vec::new();
    for (index, group) in plan.groups.iter().enumerate() {
        let start = Instant::now();
        paths.clear();
        let unfused_because = ex.run_group(group, &mut paths)?;
        if timed || unfused_because.is_some() {
            let path = (!paths.is_empty()).then(|| paths.join("; "));
            runs.push(GroupRun { index, kind: group.kind, time: start.elapsed(), unfused_because, path });
        }
    }
    let outputs = g.outputs.iter().map(|&o| ex.output(o)).collect::<Result<Vec<_>>>()?;
    Ok((outputs, runs))
}

impl Executor<'_> {
    /// The value of a node that some group reads (never a node computed inside that group).
    fn resolve(&self, id: NodeId) -> Result<Value> {
        let g = self.info.graph;
        match g.op(id) {
            Op::Const(c) => Ok(Value::Scalar(c)),
            Op::Transpose => match self.resolve(g.node(id).args[0])? {
                Value::Tensor(t) => Ok(Value::Tensor(t.t()?)),
                Value::Scalar(_) => Err(Error::internal(self.info.function, "a transposed scalar")),
            },
            Op::Unary(_) | Op::Binary(_) | Op::Where if self.values[id.index()].is_none() => {
                Ok(Value::Scalar(host_scalar(self.info.function, g, id, &|a| self.resolve(a))?))
            }
            // A reshape that strides cannot express reads a dense copy of its source.
            Op::View(v) if !v.is_copy() => {
                let dense = |t: &Tensor| Ok(Tensor::from_cpu(t.dense_cpu_data()?, t.shape().to_vec()));
                resolve_view(self.info.function, g, id, self.info.shapes, &|a| self.resolve(a), &dense)
            }
            _ => self.values[id.index()]
                .clone()
                .ok_or_else(|| Error::internal(self.info.function, format!("%{} is read before it is computed", id.0))),
        }
    }

    /// Runs one group fused, or its nodes one at a time when this call's shapes do not fit the fused
    /// form; returns the reason in that case. Describes each GEMM call into `paths` when describing.
    /// A rope_append_attention group runs its members in order (the one-launch form is the GPU's).
    fn run_group(&mut self, group: &Group, paths: &mut Vec<String>) -> Result<Option<String>> {
        if group.kind == GroupKind::RopeAppendAttention {
            let block = RopeAppendAttention::of_group(self.info.graph, &group.nodes).ok_or_else(|| {
                Error::internal(self.info.function, "a rope_append_attention group that is not a decode block")
            })?;
            self.run_one_by_one(&block.members(), paths)?;
            if self.describe {
                paths.push("rope, the two cache appends and attention in order".to_string());
            }
            return Ok(None);
        }
        if group.kind == GroupKind::MultiGemm {
            // The CPU's GEMM runs one product at a time: the shared prologue once, then each product with
            // its epilogue.
            let mut reason = None;
            for part in group.split_products(self.info.graph) {
                reason = reason.or(self.run_group(&part, paths)?);
            }
            return Ok(reason);
        }
        match self.run_fused(group, paths)? {
            Outcome::Done(outputs) => {
                self.store(outputs);
                Ok(None)
            }
            Outcome::DoesNotFit(reason) => {
                self.run_one_by_one(&group.nodes, paths)?;
                Ok(Some(reason))
            }
        }
    }

    /// Runs `nodes` in order, each as a group of its own.
    fn run_one_by_one(&mut self, nodes: &[NodeId], paths: &mut Vec<String>) -> Result<()> {
        for &n in nodes {
            let single = Group::single(self.info.graph, n);
            match self.run_fused(&single, paths)? {
                Outcome::Done(outputs) => self.store(outputs),
                Outcome::DoesNotFit(why) => {
                    return Err(Error::internal(self.info.function, format!("%{} alone does not run: {why}", n.0)))
                }
            }
        }
        Ok(())
    }

    fn store(&mut self, outputs: Vec<(NodeId, Tensor)>) {
        for (id, t) in outputs {
            self.values[id.index()] = Some(Value::Tensor(t));
        }
    }

    fn run_fused(&self, group: &Group, paths: &mut Vec<String>) -> Result<Outcome> {
        let resolve = |id: NodeId| self.resolve(id);
        match group.kind {
            GroupKind::Gemm | GroupKind::DualGemm => {
                run_gemm_group(&self.info, group, &resolve, self.describe.then_some(paths))
            }
            GroupKind::Pointwise if matches!(group.nodes.as_slice(), [n] if is_cat(self.info.graph.op(*n))) => {
                let id = group.nodes[0];
                Ok(Outcome::Done(vec![(id, super::copy::cat(&self.info, id, &resolve)?)]))
            }
            GroupKind::Pointwise if matches!(group.nodes.as_slice(), [n] if is_slice_set(self.info.graph.op(*n))) => {
                let id = group.nodes[0];
                Ok(Outcome::Done(vec![(id, super::copy::slice_set(&self.info, id, &resolve)?)]))
            }
            GroupKind::Pointwise | GroupKind::RowReduce => {
                if !group.matmuls.is_empty() {
                    return Ok(Outcome::DoesNotFit(format!("a {} group with a matmul", group.kind.name())));
                }
                self.run_rows(group)
            }
            GroupKind::Model => {
                let outputs = group.nodes.iter().map(|&id| Ok((id, run_model(&self.info, &resolve, id)?)));
                Ok(Outcome::Done(outputs.collect::<Result<Vec<_>>>()?))
            }
            // `run_group` runs it as the groups it stands for.
            GroupKind::MultiGemm => Ok(Outcome::DoesNotFit("a multigemm group runs product by product".to_string())),
            // Its members run one by one (`run_group`), each a group of one.
            GroupKind::RopeAppendAttention => {
                Ok(Outcome::DoesNotFit("a rope_append_attention group runs member by member".to_string()))
            }
        }
    }

    fn run_rows(&self, group: &Group) -> Result<Outcome> {
        let spec =
            RowSpec { nodes: &group.nodes, sinks: &group.outputs, blocks: &[], domain: None, keep_last_axis: false };
        let program = match compile(&self.info, &spec, &|id| self.resolve(id))? {
            Compiled::Fits(p) => p,
            Compiled::DoesNotFit(reason) => return Ok(Outcome::DoesNotFit(reason)),
        };
        let shape = |id: NodeId| self.info.shapes[id.index()].clone();
        let mut buffers: Vec<CpuData> = group
            .outputs
            .iter()
            .map(|&o| allocate(self.info.dtypes[o.index()].unwrap_or(DType::F32), &shape(o)))
            .collect();
        let sinks: Vec<Sink<'_>> = buffers.iter_mut().map(sink_of).collect();
        program.run(0..program.rows, sinks, &BlockInputs { first_row: 0, buffers: &[] }, true);
        Ok(Outcome::Done(
            group.outputs.iter().zip(buffers).map(|(&o, data)| (o, Tensor::from_cpu(data, shape(o)))).collect(),
        ))
    }

    /// A returned value as a tensor; scalars and literals become 0-d f32 tensors.
    fn output(&self, id: NodeId) -> Result<Tensor> {
        match self.resolve(id)? {
            Value::Tensor(t) => Ok(t),
            Value::Scalar(v) => Ok(Tensor::from_cpu(CpuData::F32(vec![v as f32]), Vec::new())),
        }
    }
}
