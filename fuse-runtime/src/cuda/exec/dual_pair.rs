//! A DualGemm's two products as one batched cuBLAS call (`launch_plan::dual_gemm_pairing` decides when).

use super::describe::DescribedGemm;
use super::launch_plan::{dual_gemm_pairing, run_step, Step};
use super::{base_of, Executor};
use crate::call::{operand_name, Value};
use crate::cuda::gemm::cublas::plan_gemm;
use crate::cuda::storage::CudaStorage;
use crate::{Result, Tensor};
use fuse_ir::GroupKind;

impl Executor<'_> {
    /// A DualGemm's two products as one batched cuBLAS call into one buffer, when `dual_gemm_pairing`
    /// allows (the same test a launch plan makes again on each replay). `false`: the caller makes two calls.
    pub(super) fn run_dual_pair(&mut self, index: usize) -> Result<bool> {
        let (graph, plan) = (self.graph, self.plan);
        let group = &plan.groups[index];
        let [mm0, mm1] = group.matmuls[..] else { return Ok(false) };
        if group.kind != GroupKind::DualGemm {
            return Ok(false);
        }
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
}
