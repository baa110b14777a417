//! Horizontal fusion: matmuls of one left operand (separate q, k and v weights) become one MultiGemm group
//! with the shared prologue, one template kernel whose blocks take one product each.

use fuse_ir::codegen::{group_kernels, Role};
use fuse_ir::graph::InputKind;
use fuse_ir::plan::MAX_PRODUCTS;
use fuse_ir::{BinaryOp, Graph, GroupKind, NodeId, Plan, ReduceOp, UnaryOp};

/// `h = rms_norm(x, w, eps)`, then `q = h Wq^T + bq`, `k = h Wk^T + bk`, `v = h Wv^T` (a Qwen2 attention's
/// projections; v without a bias is written as it is). Returns the graph and the three products.
fn qkv() -> (Graph, [NodeId; 3]) {
    let mut g = Graph::new("qkv");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let eps = g.input("eps", InputKind::Scalar);
    let sq = g.unary(UnaryOp::Square, x, "x.sqr()");
    let ms = g.reduce(ReduceOp::Mean, sq, "mean");
    let plus = g.binary(BinaryOp::Add, ms, eps, "+ eps");
    let r = g.unary(UnaryOp::Rsqrt, plus, "rsqrt");
    let xr = g.binary(BinaryOp::Mul, x, r, "x * r");
    let h = g.binary(BinaryOp::Mul, xr, w, "* w");
    let mut products = Vec::new();
    let mut outputs = Vec::new();
    for (name, bias) in [("q", true), ("k", true), ("v", false)] {
        let wt = g.input(&format!("w{name}"), InputKind::Tensor);
        let wt = g.transpose(wt, &format!("w{name}.t()"));
        let p = g.matmul(h, wt, &format!("h.matmul(w{name}.t())"));
        products.push(p);
        outputs.push(if bias {
            let b = g.input(&format!("b{name}"), InputKind::Tensor);
            g.binary(BinaryOp::Add, p, b, &format!("+ b{name}"))
        } else {
            p
        });
    }
    g.outputs = outputs;
    (g, [products[0], products[1], products[2]])
}

fn planned(g: &Graph) -> Plan {
    let plan = Plan::fused(g);
    plan.verify(g).unwrap_or_else(|e| panic!("fused plan rejected: {e}\n{plan:#?}"));
    plan
}

#[test]
fn q_k_and_v_of_one_normalised_input_are_one_group_with_the_norm_as_prologue() {
    let (g, [q, k, v]) = qkv();
    let plan = planned(&g);
    assert_eq!(plan.groups.len(), 1, "{}", plan.to_text());
    let grp = &plan.groups[0];
    assert_eq!(grp.kind, GroupKind::MultiGemm);
    assert_eq!(grp.matmuls, [q, k, v]);
    assert_eq!(grp.prologue.len(), 6, "the rms_norm is the shared prologue");
    let products = grp.products(&g);
    assert_eq!(products.iter().map(|p| p.epilogue.len()).collect::<Vec<_>>(), [1, 1, 0]);
    assert_eq!(products[2].outputs, [v], "v is written as it is");
    // The text form reads back to the same plan.
    assert_eq!(Plan::parse(&plan.to_text(), &g).unwrap(), plan);
    assert!(plan.to_text().starts_with("multigemm nodes"));
}

#[test]
fn a_split_multigemm_is_a_valid_plan_of_its_prologue_and_one_gemm_per_product() {
    let (g, [q, k, v]) = qkv();
    let plan = planned(&g);
    let split = Plan { groups: plan.groups[0].split_products(&g) };
    split.verify(&g).unwrap();
    let kinds: Vec<GroupKind> = split.groups.iter().map(|grp| grp.kind).collect();
    assert_eq!(kinds, [GroupKind::RowReduce, GroupKind::Gemm, GroupKind::Gemm, GroupKind::Gemm]);
    let matmuls: Vec<&[NodeId]> = split.groups.iter().map(|grp| grp.matmuls.as_slice()).collect();
    assert_eq!(matmuls, [&[][..], &[q], &[k], &[v]]);
}

#[test]
fn the_template_kernels_select_their_product_and_run_its_epilogue_only() {
    let (g, [q, _, v]) = qkv();
    let plan = planned(&g);
    let specs = group_kernels(&g, &plan, 0);
    let roles: Vec<(Role, &str)> = specs.iter().map(|s| (s.role, s.name.as_str())).collect();
    let base = plan.kernel_name(&g, 0);
    let want = [
        (Role::Prologue, format!("{base}_prologue")),
        (Role::Epilogue, format!("{base}_epilogue0")),
        (Role::Epilogue, format!("{base}_epilogue1")),
        (Role::Skinny, format!("{base}_skinny")),
        (Role::Mma, format!("{base}_mma")),
    ];
    assert_eq!(roles, want.iter().map(|(r, n)| (*r, n.as_str())).collect::<Vec<_>>(), "no wgmma kernel");
    let skinny = specs.iter().find(|s| s.role == Role::Skinny).unwrap();
    let src = &skinny.source;
    assert!(src.starts_with("#define FUSE_GEMM_PRODUCTS 3\n"), "before the prelude's FuseArgs");
    assert!(src.contains("#define FUSE_SKINNY_DUAL 0"));
    assert!(src.contains("case 2: {") && !src.contains("case 3:"));
    assert!(skinny.prologue.is_some(), "the skinny kernel can normalise rows as it loads them");
    // q's case adds its bias; v's writes the accumulator.
    let (before_v, v_case) = src.split_once("case 2: {").unwrap();
    assert!(v_case.contains(&format!("const float v{} = acc0;", v.0)));
    assert!(before_v.contains(&format!("const float v{} = acc0;", q.0)));
    assert_eq!(skinny.outputs.len(), 3);
    let mma = specs.iter().find(|s| s.role == Role::Mma).unwrap();
    assert!(mma.source.contains("#define FUSE_MMA_DUAL 0") && mma.source.contains("FUSE_GEMM_PARAMS(FuseMmaParams"));
}

#[test]
fn dependent_or_too_many_products_are_not_merged() {
    // k = h (q W)^T-like chains: a product read by another matmul's weight stays apart.
    let mut g = Graph::new("chained");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let p = g.matmul(x, w, "x.matmul(w)");
    let r = g.matmul(x, p, "x.matmul(p)");
    g.outputs = vec![p, r];
    let plan = planned(&g);
    assert_eq!(plan.groups.iter().map(|grp| grp.kind).collect::<Vec<_>>(), [GroupKind::Gemm, GroupKind::Gemm]);
    // One more product than a group takes: a full group and a Gemm.
    let mut g = Graph::new("wide");
    let x = g.input("x", InputKind::Tensor);
    for i in 0..=MAX_PRODUCTS {
        let w = g.input(&format!("w{i}"), InputKind::Tensor);
        let p = g.matmul(x, w, &format!("x.matmul(w{i})"));
        g.outputs.push(p);
    }
    let plan = planned(&g);
    let sizes: Vec<(GroupKind, usize)> = plan.groups.iter().map(|grp| (grp.kind, grp.matmuls.len())).collect();
    assert_eq!(sizes, [(GroupKind::MultiGemm, MAX_PRODUCTS), (GroupKind::Gemm, 1)]);
}

#[test]
fn verify_rejects_a_multigemm_whose_epilogue_joins_two_products() {
    let (mut g, [q, k, _]) = qkv();
    let joined = g.binary(BinaryOp::Mul, q, k, "q * k");
    g.outputs.push(joined);
    // The planner never builds it (q * k makes q and k a DualGemm); a hand-made plan must be refused.
    let mut plan = Plan::fused(&g);
    plan.verify(&g).unwrap();
    let bad = plan.groups.iter_mut().find(|grp| grp.nodes.contains(&joined)).unwrap();
    assert_eq!(bad.kind, GroupKind::DualGemm);
    bad.kind = GroupKind::MultiGemm;
    let err = plan.verify(&g).unwrap_err();
    assert!(err.contains("reads 2 products"), "{err}");
}
