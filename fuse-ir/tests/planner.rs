//! Fusion decisions, counted: which groups the planner makes for the graphs that matter, and that every
//! plan it makes (for hand-built and random graphs) passes `Plan::verify` and the structural rules.

use fuse_ir::graph::InputKind;
use fuse_ir::plan::{is_free, RopeAppendAttention};
use fuse_ir::{BinaryOp, DType, Graph, GroupKind, ModelOp, NodeId, Op, Plan, ReduceOp, UnaryOp, ViewOp};

#[path = "../src/samples.rs"]
mod samples;
use samples::{attention, chain10, llama_mlp};

/// The fused plan, checked: it verifies, the unfused plan verifies, and the kind rules hold.
fn planned(g: &Graph) -> Plan {
    let plan = Plan::fused(g);
    if let Err(e) = plan.verify(g) {
        panic!("fused plan rejected: {e}\n{}\n{plan:#?}", g.to_text());
    }
    Plan::unfused(g).verify(g).unwrap_or_else(|e| panic!("unfused plan rejected: {e}"));
    check_structure(g, &plan);
    plan
}

fn kinds(plan: &Plan) -> Vec<GroupKind> {
    plan.groups.iter().map(|grp| grp.kind).collect()
}

/// Rules `Plan::verify` does not check: reductions only in RowReduce groups, right operands and views'
/// sources in memory, prologues feeding only their matmul, outputs exactly the values read elsewhere.
fn check_structure(g: &Graph, plan: &Plan) {
    let owner = plan.owner(g);
    let users = g.users();
    for (i, grp) in plan.groups.iter().enumerate() {
        let reductions = grp.nodes.iter().filter(|&&n| matches!(g.op(n), Op::Reduce(_))).count();
        let prologue_reductions = grp.prologue.iter().filter(|&&n| matches!(g.op(n), Op::Reduce(_))).count();
        match grp.kind {
            GroupKind::RowReduce => assert!(reductions > 0, "group {i}: rowreduce without a reduction"),
            GroupKind::Gemm | GroupKind::DualGemm | GroupKind::MultiGemm => {
                assert_eq!(reductions, prologue_reductions, "group {i}: a reduction after the matmuls")
            }
            _ => assert_eq!(reductions, 0, "group {i} ({}) holds a reduction", grp.kind.name()),
        }
        for &m in &grp.matmuls {
            let rhs = g.node(m).args[1];
            assert_ne!(owner[rhs.index()], Some(i), "group {i}: right operand of %{} computed in the group", m.0);
        }
        if grp.kind == GroupKind::DualGemm {
            assert_eq!(g.node(grp.matmuls[0]).args[0], g.node(grp.matmuls[1]).args[0], "dualgemm without shared lhs");
        }
        for &p in &grp.prologue {
            assert!(users[p.index()].iter().all(|u| grp.nodes.contains(u)), "prologue %{} read outside", p.0);
            assert!(!grp.outputs.contains(&p), "prologue %{} written", p.0);
        }
        // A rope_append_attention group reads two views of its rope inside itself: the rope is not written.
        let inner = RopeAppendAttention::of_group(g, &grp.nodes).map_or(Vec::new(), |b| b.inner_views().to_vec());
        assert_eq!(inner.is_empty(), grp.kind != GroupKind::RopeAppendAttention, "group {i}: a decode block?");
        let read_outside = |u: &NodeId| owner[u.index()] != Some(i) && !inner.contains(u);
        let mut expected_outputs: Vec<NodeId> = grp
            .nodes
            .iter()
            .copied()
            .filter(|n| g.outputs.contains(n) || users[n.index()].iter().any(read_outside))
            .collect();
        expected_outputs.sort();
        assert_eq!(grp.outputs, expected_outputs, "group {i}: outputs");
        assert!(grp.inputs.iter().all(|&n| !matches!(g.op(n), Op::Const(_))), "group {i} lists a literal as input");
    }
    for id in g.ids().filter(|&id| is_free(g.op(id))) {
        assert_eq!(owner[id.index()], None);
    }
}

#[test]
fn llama_mlp_is_a_dual_gemm_then_a_gemm() {
    for transposed in [true, false] {
        let (g, [gate, up, h, out]) = llama_mlp(transposed);
        let plan = planned(&g);
        assert_eq!(kinds(&plan), [GroupKind::DualGemm, GroupKind::Gemm], "transposed weights: {transposed}");
        let dual = &plan.groups[0];
        assert_eq!(dual.matmuls, [gate, up]);
        let epilogue: Vec<Op> = dual.epilogue().map(|n| g.op(n)).collect();
        assert_eq!(epilogue, [Op::Unary(UnaryOp::Silu), Op::Binary(BinaryOp::Mul)]);
        assert_eq!(dual.outputs, [h], "only h leaves the dual gemm");
        assert!(dual.prologue.is_empty());
        assert_eq!(plan.groups[1].matmuls, [out]);
        assert_eq!(plan.groups[1].outputs, [out]);
    }
}

#[test]
fn rms_norm_and_softmax_are_one_row_reduction_each() {
    let mut g = Graph::new("norm");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let eps = g.input("eps", InputKind::Scalar);
    g.outputs = vec![g.rms_norm(x, w, eps, "rms_norm(x, w, eps)")];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::RowReduce]);
    assert_eq!(plan.groups[0].nodes.len(), 6);

    let mut g = Graph::new("attn");
    let x = g.input("x", InputKind::Tensor);
    g.outputs = vec![g.softmax(x, "softmax(x)")];
    assert_eq!(kinds(&planned(&g)), [GroupKind::RowReduce]);
}

#[test]
fn scaled_scores_softmax_is_a_gemm_and_one_more_group() {
    let mut g = Graph::new("scores");
    let q = g.input("q", InputKind::Tensor);
    let k = g.input("k", InputKind::Tensor);
    let scale = g.input("scale", InputKind::Scalar);
    let kt = g.transpose(k, "k.t()");
    let s = g.matmul(q, kt, "q.matmul(k.t())");
    let scaled = g.binary(BinaryOp::Mul, s, scale, "s * scale");
    g.outputs = vec![g.softmax(scaled, "softmax(..)")];
    let plan = planned(&g);
    assert_eq!(plan.groups[0].kind, GroupKind::Gemm);
    assert!(plan.groups[0].nodes.contains(&scaled), "the scale is the gemm's epilogue");
    assert!(plan.groups.len() <= 2, "{:?}", kinds(&plan));
}

#[test]
fn transformer_block_is_at_most_three_kernels() {
    let mut g = Graph::new("Block::forward");
    let x = g.input("x", InputKind::Tensor);
    let norm = g.input("self.norm", InputKind::Field);
    let [gate, up, down] = ["self.gate", "self.up", "self.down"].map(|n| g.input(n, InputKind::Field));
    let eps = g.input("self.eps", InputKind::Field);
    let h = g.rms_norm(x, norm, eps, "rms_norm(x, &self.norm, self.eps)");
    let [gate_t, up_t, down_t] = [gate, up, down].map(|w| g.transpose(w, "w.t()"));
    let a = g.matmul(h, gate_t, "h.matmul(&self.gate.t())");
    let a = g.unary(UnaryOp::Silu, a, "silu(..)");
    let b = g.matmul(h, up_t, "h.matmul(&self.up.t())");
    let m = g.binary(BinaryOp::Mul, a, b, "silu(..) * ..");
    let d = g.matmul(m, down_t, "(..).matmul(&self.down.t())");
    g.outputs = vec![g.binary(BinaryOp::Add, x, d, "x + ..")];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::DualGemm, GroupKind::Gemm]);
    let dual = &plan.groups[0];
    assert!(dual.prologue.contains(&h), "rms_norm is the dual gemm's prologue: {:?}", dual.prologue);
    assert_eq!(dual.prologue.len(), 6, "all of rms_norm's nodes");
    assert!(!dual.outputs.contains(&h), "the normalised rows are not written");
    assert!([x, norm, eps].iter().all(|v| dual.inputs.contains(v)), "rms_norm's inputs are the group's");
}

#[test]
fn a_normalised_operand_read_elsewhere_stays_a_row_reduction() {
    let mut g = Graph::new("norm_twice");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let norm = g.input("norm", InputKind::Tensor);
    let eps = g.input("eps", InputKind::Scalar);
    let h = g.rms_norm(x, norm, eps, "rms_norm(x, norm, eps)");
    let p = g.matmul(h, w, "h.matmul(w)");
    g.outputs = vec![p, h];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::RowReduce, GroupKind::Gemm]);
    assert!(plan.groups[1].prologue.is_empty());
}

#[test]
fn pointwise_chain_with_broadcasts_is_one_kernel() {
    let (g, [x, bias, s]) = chain10();
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::Pointwise]);
    assert_eq!(plan.groups[0].nodes.len(), 10);
    assert_eq!(plan.groups[0].inputs, [x, bias, s]);
}

#[test]
fn independent_chains_feeding_one_node_are_inlined() {
    let mut g = Graph::new("two_chains");
    let x = g.input("x", InputKind::Tensor);
    let y = g.input("y", InputKind::Tensor);
    let ex = g.unary(UnaryOp::Exp, x, "exp(x)");
    let ty = g.unary(UnaryOp::Tanh, y, "tanh(y)");
    g.outputs = vec![g.binary(BinaryOp::Mul, ex, ty, "exp(x) * tanh(y)")];
    assert_eq!(kinds(&planned(&g)), [GroupKind::Pointwise]);
}

#[test]
fn two_independent_outputs_are_each_written() {
    let mut g = Graph::new("pair");
    let x = g.input("x", InputKind::Tensor);
    let y = g.input("y", InputKind::Tensor);
    let a = g.unary(UnaryOp::Exp, x, "exp(x)");
    let a = g.binary(BinaryOp::Mul, a, x, "* x");
    let b = g.reduce(ReduceOp::Sum, y, "y.sum(-1)");
    g.outputs = vec![a, b];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::Pointwise, GroupKind::RowReduce]);
    let written: Vec<NodeId> = plan.groups.iter().flat_map(|grp| grp.outputs.clone()).collect();
    assert_eq!(written, [a, b]);
}

#[test]
fn a_value_read_by_two_groups_is_written_once() {
    let mut g = Graph::new("shared");
    let x = g.input("x", InputKind::Tensor);
    let u = g.input("u", InputKind::Tensor);
    let v = g.input("v", InputKind::Tensor);
    let w = g.unary(UnaryOp::Sigmoid, x, "sigmoid(x)");
    let p = g.matmul(u, w, "u.matmul(w)");
    let q = g.matmul(v, w, "v.matmul(w)");
    g.outputs = vec![p, q];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::Pointwise, GroupKind::Gemm, GroupKind::Gemm]);
    let writes_of_w = plan.groups.iter().flat_map(|grp| &grp.outputs).filter(|&&o| o == w).count();
    assert_eq!(writes_of_w, 1);
    assert!(plan.groups[1].inputs.contains(&w) && plan.groups[2].inputs.contains(&w));
}

#[test]
fn pointwise_on_the_left_operand_is_a_prologue() {
    let mut g = Graph::new("scaled");
    let x = g.input("x", InputKind::Tensor);
    let s = g.input("row_scale", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let xs = g.binary(BinaryOp::Mul, x, s, "x * row_scale");
    let xs2 = g.unary(UnaryOp::Relu, xs, "relu(..)");
    let wt = g.transpose(w, "w.t()");
    let y = g.matmul(xs2, wt, "..matmul(w.t())");
    g.outputs = vec![g.unary(UnaryOp::Tanh, y, "tanh(..)")];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::Gemm]);
    assert_eq!(plan.groups[0].prologue, [xs, xs2]);
    assert_eq!(plan.groups[0].inputs, [x, s, wt]);
}

#[test]
fn a_shared_left_operand_chain_is_the_dual_gemm_prologue() {
    let mut g = Graph::new("scaled_mlp");
    let x = g.input("x", InputKind::Tensor);
    let s = g.input("s", InputKind::Scalar);
    let wg = g.input("wg", InputKind::Tensor);
    let wu = g.input("wu", InputKind::Tensor);
    let xs = g.binary(BinaryOp::Mul, x, s, "x * s");
    let gate = g.matmul(xs, wg, "xs.matmul(wg)");
    let act = g.unary(UnaryOp::Silu, gate, "silu(..)");
    let up = g.matmul(xs, wu, "xs.matmul(wu)");
    g.outputs = vec![g.binary(BinaryOp::Mul, act, up, "silu(..) * ..")];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::DualGemm]);
    assert_eq!(plan.groups[0].prologue, [xs]);
}

#[test]
fn attention_is_a_gemm_then_a_gemm_with_the_softmax_as_prologue() {
    let g = attention();
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::Gemm, GroupKind::Gemm]);
    let softmax = &plan.groups[1].prologue;
    assert!(softmax.iter().filter(|&&n| matches!(g.op(n), Op::Reduce(_))).count() == 2, "max and sum: {softmax:?}");
}

#[test]
fn pointwise_on_the_right_operand_is_its_own_kernel() {
    let mut g = Graph::new("rhs");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let ew = g.unary(UnaryOp::Exp, w, "exp(w)");
    g.outputs = vec![g.matmul(x, ew, "x.matmul(exp(w))")];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::Pointwise, GroupKind::Gemm]);
    assert_eq!(plan.groups[0].outputs, [ew]);
    assert!(plan.groups[1].prologue.is_empty());
}

#[test]
fn a_prologue_value_that_is_also_returned_is_not_a_prologue() {
    let mut g = Graph::new("returned_lhs");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let ex = g.unary(UnaryOp::Exp, x, "exp(x)");
    let y = g.matmul(ex, w, "exp(x).matmul(w)");
    g.outputs = vec![y, ex];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::Pointwise, GroupKind::Gemm]);
}

#[test]
fn tuple_outputs_write_intermediates_that_are_returned() {
    let (mut g, [_, _, h, out]) = llama_mlp(true);
    g.outputs = vec![out, h, out];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::DualGemm, GroupKind::Gemm]);
    assert_eq!(plan.groups[0].outputs, [h]);
}

#[test]
fn fusion_never_creates_a_cycle_between_kernels() {
    // a = exp(x); b = a @ w; c = a + b: `c` cannot join a's group (it reads b, which reads a).
    let mut g = Graph::new("cycle");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let a = g.unary(UnaryOp::Exp, x, "exp(x)");
    let b = g.matmul(a, w, "a.matmul(w)");
    let c = g.binary(BinaryOp::Add, a, b, "a + b");
    g.outputs = vec![c];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::Pointwise, GroupKind::Gemm]);
    assert_eq!(plan.groups[0].outputs, [a]);
    assert_eq!(plan.owner(&g)[c.index()], Some(1), "the add is the gemm's epilogue");

    // A view of a value computed in a chain: the value must reach memory before the view is read.
    let mut g = Graph::new("view_cycle");
    let x = g.input("x", InputKind::Tensor);
    let a = g.unary(UnaryOp::Exp, x, "exp(x)");
    let at = g.transpose(a, "a.t()");
    let c = g.binary(BinaryOp::Add, a, at, "a + a.t()");
    g.outputs = vec![g.unary(UnaryOp::Neg, c, "-c")];
    let plan = planned(&g);
    assert_eq!(plan.groups.len(), 2);
    assert_eq!(plan.groups[0].outputs, [a]);

    // The reduction of a gemm product cannot pull the product's consumers into the gemm.
    let mut g = Graph::new("reduce_cycle");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let p = g.matmul(x, w, "x.matmul(w)");
    let s = g.reduce(ReduceOp::Max, p, "p.max(-1)");
    g.outputs = vec![g.binary(BinaryOp::Sub, p, s, "p - s")];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::Gemm, GroupKind::RowReduce]);
}

#[test]
fn a_gemm_cannot_read_its_own_dual_partner() {
    // Both matmuls share x, but the second's right operand is the first's product: merging them would
    // put a right operand inside the kernel that needs it in memory.
    let mut g = Graph::new("chained");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let p = g.matmul(x, w, "x.matmul(w)");
    let q = g.matmul(x, p, "x.matmul(p)");
    g.outputs = vec![g.binary(BinaryOp::Mul, p, q, "p * q")];
    let plan = planned(&g);
    assert_eq!(kinds(&plan), [GroupKind::Gemm, GroupKind::Gemm]);
}

#[test]
fn fused_plans_are_deterministic() {
    let (g, _) = llama_mlp(true);
    let text = g.to_text();
    let again = Graph::parse(&text).expect("the text form reads back");
    assert_eq!(Plan::fused(&g), Plan::fused(&again));
}

/// A tiny xorshift generator: reproducible graphs without extra crates.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A node from `pool`, more often a recent one, so that chains form as in real code.
    fn recent(&mut self, pool: &[NodeId]) -> NodeId {
        let back = self.below(pool.len()).min(self.below(pool.len()));
        pool[pool.len() - 1 - back]
    }
}

/// A random graph using every op kind and the composites; shapes are irrelevant to the planner.
fn random_graph(rng: &mut XorShift, index: usize) -> Graph {
    let mut g = Graph::new(format!("random{index}"));
    let mut pool: Vec<NodeId> = Vec::new();
    for k in 0..2 + rng.below(3) {
        pool.push(g.input(&format!("t{k}"), InputKind::Tensor));
    }
    let scalar = g.input("s", InputKind::Scalar);
    for step in 0..4 + rng.below(24) {
        let label = format!("op{step}");
        let a = rng.recent(&pool);
        let b = rng.recent(&pool);
        let node = match rng.below(11) {
            0 | 1 => g.unary(UnaryOp::ALL[rng.below(UnaryOp::ALL.len())], a, &label),
            2 | 3 => g.binary(BinaryOp::ALL[rng.below(BinaryOp::ALL.len())], a, b, &label),
            4 => {
                let literal = g.constant(rng.below(7) as f64 - 3.0);
                let other = if rng.below(2) == 0 { literal } else { scalar };
                g.binary(BinaryOp::ALL[rng.below(BinaryOp::ALL.len())], a, other, &label)
            }
            5 => g.reduce(ReduceOp::ALL[rng.below(ReduceOp::ALL.len())], a, &label),
            6 | 7 => g.matmul(a, b, &label),
            8 => g.transpose(a, &label),
            9 => g.cast(a, DType::ALL[rng.below(DType::ALL.len())], &label),
            _ if rng.below(2) == 0 => g.softmax(a, &label),
            _ => g.rms_norm(a, b, scalar, &label),
        };
        pool.push(node);
    }
    let mut outputs = vec![*pool.last().expect("the pool holds the inputs")];
    for _ in 0..rng.below(3) {
        outputs.push(pool[rng.below(pool.len())]);
    }
    g.outputs = outputs;
    g
}

#[test]
fn random_graphs_get_valid_plans() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut fused_away = 0;
    for index in 0..300 {
        let g = random_graph(&mut rng, index);
        g.verify().expect("the generator builds valid graphs");
        let plan = planned(&g);
        let unfused = Plan::unfused(&g).groups.len();
        assert!(plan.groups.len() <= unfused, "fusion added kernels to\n{}", g.to_text());
        fused_away += unfused - plan.groups.len();
        assert_eq!(plan, Plan::fused(&g), "planning twice gives the same plan");
    }
    assert!(fused_away > 300, "random graphs fused only {fused_away} kernels away");
}

#[test]
fn kernel_names_say_what_the_kernel_does() {
    let (g, _) = llama_mlp(true);
    let plan = planned(&g);
    assert_eq!(plan.kernel_name(&g, 0), "mlp_k0_dualgemm_silu_mul");
    assert_eq!(plan.kernel_name(&g, 1), "mlp_k1_gemm");

    let mut g = Graph::new("Block::forward");
    let x = g.input("x", InputKind::Tensor);
    let mut v = x;
    for u in [UnaryOp::Exp, UnaryOp::Neg, UnaryOp::Exp, UnaryOp::GeluTanh, UnaryOp::Abs, UnaryOp::Tanh] {
        v = g.unary(u, v, "");
    }
    g.outputs = vec![v];
    let plan = planned(&g);
    assert_eq!(plan.kernel_name(&g, 0), "block_forward_k0_pointwise_exp_neg_gelu_tanh_abs");
    g.name = "3d λ".into();
    let name = plan.kernel_name(&g, 0);
    assert!(name.starts_with("f_3d_k0_"), "{name}");
    assert!(name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'), "{name}");
}

#[test]
fn the_report_counts_what_fusion_saves() {
    let (g, [gate, up, h, out]) = llama_mlp(true);
    let plan = planned(&g);
    let (rows, hidden, inter) = (3usize, 17usize, 33usize);
    let shapes = fuse_ir::infer::infer_shapes(
        &g,
        &[vec![rows, hidden], vec![inter, hidden], vec![inter, hidden], vec![hidden, inter]],
    )
    .expect("the mlp shapes fit");
    let dtypes = fuse_ir::infer::infer_dtypes(&g, &[Some(DType::BF16); 4]).expect("one dtype");
    let text = fuse_ir::plan::describe(&g, &plan, Some((&shapes, &dtypes)));
    assert_eq!(text, fuse_ir::plan::describe(&g, &plan, Some((&shapes, &dtypes))), "deterministic");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("k0 dualgemm mlp_k0_dualgemm_silu_mul: "), "{text}");
    assert!(lines[0].contains("silu") && lines[0].contains("\"x.matmul(w_gate)\""), "{text}");
    assert!(lines[1].starts_with("k1 gemm mlp_k1_gemm: "), "{text}");
    // gate, silu(gate) and up stay on chip: 3 values of rows x inter bf16, each written and read once.
    let saved = 3 * rows * inter * 2 * 2;
    assert!(lines[0].ends_with(&format!("keeps 3 intermediates on chip, saving {saved} bytes")), "{text}");
    assert!(lines[2].contains("5 unfused, 3 launches saved"), "{text}");
    assert!(lines[2].contains(&format!("{saved} bytes")), "{text}");
    let _ = (gate, up, h, out);

    let plain = fuse_ir::plan::describe(&g, &plan, None);
    assert!(!plain.contains("bytes") && plain.lines().count() == 3, "{plain}");
}

/// How a decode attention block is built for the tests below: as a decoder writes it, or a near miss.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Decode {
    AsWritten,
    /// The rope's result is also returned.
    RopeReturned,
    /// The query heads are also read by a pointwise op.
    QueriesReadTwice,
    /// The value append's position is another tensor than the key append's.
    OtherValuePosition,
    /// The value append's new rows are computed from the key cache after its append (a cycle, once fused).
    ValuesFromKeyCache,
    /// Attention over the caches without key counts (`attention`, not `attention_len`).
    WithoutLens,
    /// The key append along axis 1.
    KeysAlongAxis1,
}

/// A decode step's attention block (tests/common/decode_step.rs in the workspace): rope over the query and
/// key heads of the stacked projection `qkv`, its key heads and the value rows appended to the caches at
/// the position `at`, attention_len over the caches. Returns the graph and its rope, appends and attention.
fn decode_block(how: Decode) -> (Graph, [NodeId; 4]) {
    let mut g = Graph::new("decode_step_attention");
    let [qkv, cos, sin, k_cache, v_cache, at, lens, other_at] =
        ["qkv", "cos", "sin", "k_cache", "v_cache", "at", "lens", "other_at"].map(|n| g.input(n, InputKind::Tensor));
    let [hq, hkv, hqk, scale] = ["hq", "hkv", "hqk", "scale"].map(|n| g.input(n, InputKind::Scalar));
    let zero = g.constant(0.0);
    let narrow = |axis| ViewOp::Narrow { axis };
    let heads = ViewOp::Transpose { a: 1, b: 2 };
    let append = |axis| ViewOp::SliceSet { axis, at_tensor: true };
    let qk_rows = g.view(narrow(2), &[qkv, zero, hqk], "qkv.narrow(2, 0, hqk)");
    let qk_heads = g.view(heads, &[qk_rows], "..transpose(1, 2)");
    let qk = g.model(ModelOp::Rope, &[qk_heads, cos, sin], "rope(..)");
    let k_new = g.view(narrow(1), &[qk, hq, hkv], "qk.narrow(1, hq, hkv)");
    let k_axis = if how == Decode::KeysAlongAxis1 { 1 } else { 2 };
    let k_append = g.view(append(k_axis), &[k_cache, k_new, at], "k_cache.slice_set(..)");
    let v_new = if how == Decode::ValuesFromKeyCache {
        let latest = g.view(narrow(2), &[k_append, zero, hkv], "k_cache.narrow(..)");
        g.unary(UnaryOp::Exp, latest, "exp(..)")
    } else {
        let v_rows = g.view(narrow(2), &[qkv, hqk, hkv], "qkv.narrow(2, hqk, hkv)");
        g.view(heads, &[v_rows], "..transpose(1, 2)")
    };
    let v_at = if how == Decode::OtherValuePosition { other_at } else { at };
    let v_append = g.view(append(2), &[v_cache, v_new, v_at], "v_cache.slice_set(..)");
    let q = g.view(narrow(1), &[qk, zero, hq], "qk.narrow(1, 0, hq)");
    let attention = ModelOp::Attention { causal: true, with_lens: how != Decode::WithoutLens };
    let operands = [q, k_append, v_append, scale, lens];
    let a = g.model(attention, &operands[..if how == Decode::WithoutLens { 4 } else { 5 }], "attention_len(..)");
    g.outputs = vec![a, k_append, v_append];
    match how {
        Decode::RopeReturned => g.outputs.push(qk),
        Decode::QueriesReadTwice => {
            let doubled = g.binary(BinaryOp::Mul, q, scale, "q * scale");
            g.outputs.push(doubled);
        }
        _ => {}
    }
    g.verify().expect("a valid graph");
    g.verify_writes().expect("appends into arguments nothing else reads");
    (g, [qk, k_append, v_append, a])
}

#[test]
fn a_decode_attention_block_is_one_rope_append_attention_group() {
    let (g, [rope, k_append, v_append, attention]) = decode_block(Decode::AsWritten);
    let plan = planned(&g);
    assert_eq!(Plan::unfused(&g).groups.len(), 4, "rope, two appends, attention");
    assert_eq!(kinds(&plan), [GroupKind::RopeAppendAttention]);
    let group = &plan.groups[0];
    assert_eq!(group.nodes, [rope, k_append, v_append, attention]);
    assert_eq!(group.outputs, [k_append, v_append, attention], "the rope's result is never written");
    let block = RopeAppendAttention::of_group(&g, &group.nodes).expect("the group is the block");
    assert_eq!(block.members(), [rope, k_append, v_append, attention]);
    assert!(block.inner_views().iter().all(|v| !group.inputs.contains(v)), "its views of rope are read inside");
    assert_eq!(group.inputs.len(), 9, "the two views of qkv, cos, sin, both caches, at, scale, lens: {group:?}");
    assert_eq!(Plan::parse(&plan.to_text(), &g).expect("the text form reads back"), plan);
    assert!(plan.to_text().starts_with("rope_append_attention nodes "), "{}", plan.to_text());
    let name = plan.kernel_name(&g, 0);
    assert_eq!(name, "decode_step_attention_k0_rope_append_attention_rope_attention");
    let described = fuse_ir::plan::describe(&g, &plan, None);
    assert!(described.starts_with(&format!("k0 rope_append_attention {name}: fuses %{}", rope.0)), "{described}");
    assert!(described.contains("total: 1 kernels for decode_step_attention (4 unfused"), "{described}");
    // The CPU runs the group member by member, and its description says so.
    let on_cpu = fuse_ir::plan::describe_for(&g, &plan, None, fuse_ir::plan::Backend::Cpu);
    assert!(on_cpu.contains("; runs its 4 members one by one"), "{on_cpu}");
    assert!(on_cpu.contains("total: 4 passes for decode_step_attention (4 unfused, 0 passes"), "{on_cpu}");
}

#[test]
fn near_misses_of_the_decode_block_stay_groups_of_their_own() {
    for how in [
        Decode::RopeReturned,
        Decode::QueriesReadTwice,
        Decode::OtherValuePosition,
        Decode::ValuesFromKeyCache,
        Decode::WithoutLens,
        Decode::KeysAlongAxis1,
    ] {
        let (g, [rope, ..]) = decode_block(how);
        let plan = planned(&g);
        assert!(!kinds(&plan).contains(&GroupKind::RopeAppendAttention), "{how:?}: {plan}");
        assert_eq!(
            RopeAppendAttention::find(&g, &g.users(), rope).is_some(),
            how == Decode::ValuesFromKeyCache,
            "{how:?}"
        );
        let models = kinds(&plan).iter().filter(|&&k| k == GroupKind::Model).count();
        assert_eq!(models, 2, "{how:?}: rope and attention alone: {plan}");
    }
}

#[test]
fn a_rope_append_attention_group_must_be_the_block() {
    let (g, [rope, ..]) = decode_block(Decode::AsWritten);
    // The unfused plan's rope group named a decode block: rejected.
    let unfused = Plan::unfused(&g).to_text();
    let (model, block) = (format!("model nodes %{} ", rope.0), format!("rope_append_attention nodes %{} ", rope.0));
    let err = Plan::parse(&unfused.replacen(&model, &block, 1), &g).expect_err("the rope alone");
    assert!(err.contains("is not a rope, its two cache appends and attention"), "{err}");
    // The fused plan's block named a model group: a model op beside other nodes.
    let fused = Plan::fused(&g).to_text().replacen("rope_append_attention nodes", "model nodes", 1);
    let err = Plan::parse(&fused, &g).expect_err("a model group of four nodes");
    assert!(err.contains("must compute one model op alone"), "{err}");
}
