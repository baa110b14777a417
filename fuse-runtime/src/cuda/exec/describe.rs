//! FUSE_DEBUG>=3's account of a group's matmuls on the GPU: each cuBLAS call in its column-major form,
//! and whether a DualGemm's two products were one batched call (and why not).

use super::launch_plan::dual_gemm_pairing;
use crate::cuda::gemm::cublas::GemmCall;
use fuse_ir::{GroupKind, NodeId};

/// One matmul as it ran, for FUSE_DEBUG>=3.
pub(super) struct DescribedGemm {
    /// The cuBLAS call, or why there was none.
    pub call: std::result::Result<GemmCall, &'static str>,
    /// The weight (cuBLAS's A) and the left operand (cuBLAS's B), as the user wrote them.
    pub weight: String,
    pub left: String,
    pub weight_address: u64,
    /// The base value of the left operand, and whether the product is an output of the function.
    pub left_node: NodeId,
    pub escapes: bool,
}

/// FUSE_DEBUG>=3: how a group's matmuls went to the library (`None` for a group without any), in cuBLAS's
/// call form (a cuBLASLt path makes the same product; the path note before this names it). `pairs`: the
/// group's path puts a DualGemm's two products into one batched call where `dual_gemm_pairing` allows,
/// as this call did and a replayed call with the same arguments does.
pub(super) fn describe_matmuls(kind: GroupKind, gemms: &[DescribedGemm], pairs: bool) -> Option<String> {
    let single = |g: &DescribedGemm| match &g.call {
        Ok(call) => format!("cuBLAS {}", call.describe(1, &format!("A = {}, B = {}", g.weight, g.left))),
        Err(why) => format!("{} x {}: {why}", g.left, g.weight),
    };
    let singles = || Some(gemms.iter().map(single).collect::<Vec<_>>().join("; "));
    match (kind, gemms) {
        (_, []) => None,
        (GroupKind::DualGemm, [a, b]) if pairs => {
            let (Ok(call_a), Ok(call_b)) = (&a.call, &b.call) else { return singles() };
            let weights = [a.weight_address, b.weight_address];
            match dual_gemm_pairing(call_a, call_b, a.left_node == b.left_node, a.escapes || b.escapes, weights) {
                Ok((swapped, pair)) => {
                    let (low, high) = if swapped { (&b.weight, &a.weight) } else { (&a.weight, &b.weight) };
                    let stride = pair.weight_batch_stride();
                    Some(format!(
                        "cuBLAS {}",
                        pair.describe(1, &format!("dual {low}|{high}, batch stride {stride} elems, B = {}", a.left))
                    ))
                }
                Err(why) => Some(format!("{}; {} (two calls: {why})", single(a), single(b))),
            }
        }
        _ => singles(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::gemm::cublas::{plan_gemm, Matrix};
    use fuse_ir::DType;

    fn gemm(weight: &str, weight_address: u64, call: std::result::Result<GemmCall, &'static str>) -> DescribedGemm {
        DescribedGemm {
            call,
            weight: weight.to_string(),
            left: "h".to_string(),
            weight_address,
            left_node: NodeId(3),
            escapes: false,
        }
    }

    #[test]
    fn matmul_paths_name_the_cublas_call_and_the_dual_gemm_pairing() {
        // h [16, 4096] x w.t() with w [14336, 4096] in bf16: the Llama-3-8B MLP's gate and up projections.
        let h = Matrix {
            address: 0x10_0000,
            batch: 1,
            rows: 16,
            cols: 4096,
            batch_stride: 0,
            row_stride: 4096,
            col_stride: 1,
        };
        let w = Matrix {
            address: 0x20_0000,
            batch: 1,
            rows: 4096,
            cols: 14336,
            batch_stride: 0,
            row_stride: 1,
            col_stride: 4096,
        };
        let call = plan_gemm(&h, &w).unwrap().call(DType::BF16).unwrap().unwrap();
        assert_eq!(describe_matmuls(GroupKind::Gemm, &[], true), None);
        let down =
            "cuBLAS cublasGemmStridedBatchedEx x1 (A = w_down.t(), B = h), op(A)=T op(B)=N, m=14336 n=16 k=4096, \
             lda=4096 ldb=4096 ldc=14336, bf16, compute f32";
        assert_eq!(describe_matmuls(GroupKind::Gemm, &[gemm("w_down.t()", 0x20_0000, Ok(call))], true).unwrap(), down);
        let gap = 2 * 14336 * 4096;
        let dual = [gemm("w_gate.t()", 0x20_0000, Ok(call)), gemm("w_up.t()", 0x20_0000 + gap, Ok(call))];
        assert_eq!(
            describe_matmuls(GroupKind::DualGemm, &dual, true).unwrap(),
            "cuBLAS cublasGemmStridedBatchedEx x1 (dual w_gate.t()|w_up.t(), batch stride 58720256 elems, B = h), \
             op(A)=T op(B)=N, m=14336 n=16 k=4096, lda=4096 ldb=4096 ldc=14336, batch 2 (strides A 58720256, B 0, \
             C 229376 elems), bf16, compute f32"
        );
        // The up weight first in memory: it is batch 0.
        let swapped = [gemm("w_gate.t()", 0x20_0000 + gap, Ok(call)), gemm("w_up.t()", 0x20_0000, Ok(call))];
        assert!(describe_matmuls(GroupKind::DualGemm, &swapped, true)
            .unwrap()
            .contains("x1 (dual w_up.t()|w_gate.t(), batch stride"));
        // Two calls, and why; or two calls because the path splits them.
        let same = [gemm("w.t()", 0x20_0000, Ok(call)), gemm("w.t()", 0x20_0000, Ok(call))];
        assert!(describe_matmuls(GroupKind::DualGemm, &same, true)
            .unwrap()
            .ends_with("(two calls: the same weight twice)"));
        let split = describe_matmuls(GroupKind::DualGemm, &dual, false).unwrap();
        assert_eq!(split.matches("cublasGemmStridedBatchedEx x1 (A = w_").count(), 2, "{split}");
        let empty = [gemm("w.t()", 0x20_0000, Err("an empty product: no cuBLAS call"))];
        assert_eq!(
            describe_matmuls(GroupKind::Gemm, &empty, true).unwrap(),
            "h x w.t(): an empty product: no cuBLAS call"
        );
    }
}
