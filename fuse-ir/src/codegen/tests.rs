//! The generator's contract without a GPU: which kernels each kind of group gets, their slots and names,
//! every op's CUDA expression, the defines, and byte-identical output. (tests/kernels_compile.rs compiles
//! the kernels with NVRTC; the CUDA backend's tests run them against the reference.)

use super::*;
use crate::graph::InputKind as ArgKind;
use crate::op::{BinaryOp, ReduceOp, UnaryOp};

use crate::samples::{self, attention, chain10};

/// The Llama MLP with checkpoint-layout weights (`.t()` in the graph).
fn llama_mlp() -> Graph {
    samples::llama_mlp(true).0
}

fn kernels(g: &Graph) -> (Plan, Vec<KernelSpec>) {
    let plan = Plan::fused(g);
    plan.verify(g).expect("the planner's plan verifies");
    let specs = plan_kernels(g, &plan);
    (plan, specs)
}

fn summary(specs: &[KernelSpec]) -> Vec<(KernelKind, Role, usize)> {
    specs.iter().map(|s| (s.kind, s.role, s.group)).collect()
}

fn rms_norm() -> Graph {
    let mut g = Graph::new("norm");
    let x = g.input("x", ArgKind::Tensor);
    let w = g.input("w", ArgKind::Tensor);
    let eps = g.input("eps", ArgKind::Scalar);
    g.outputs = vec![g.rms_norm(x, w, eps, "rms_norm(x, w, eps)")];
    g
}

#[test]
fn the_mlp_is_one_epilogue_kernel() {
    let g = llama_mlp();
    let (plan, specs) = kernels(&g);
    // The dual gemm's silu(g) * u is its epilogue; the down projection has no pointwise work. Each gemm
    // group also has its skinny and wgmma kernels (the down projection's write the product as it is).
    assert_eq!(
        summary(&specs),
        [
            (KernelKind::Pointwise, Role::Epilogue, 0),
            (KernelKind::Pointwise, Role::Skinny, 0),
            (KernelKind::Pointwise, Role::Wgmma, 0),
            (KernelKind::Pointwise, Role::Mma, 0),
            (KernelKind::Pointwise, Role::Skinny, 1),
            (KernelKind::Pointwise, Role::Wgmma, 1),
            (KernelKind::Pointwise, Role::Mma, 1)
        ]
    );
    let epilogue = &specs[0];
    assert_eq!(epilogue.name, "mlp_k0_dualgemm_silu_mul_epilogue");
    assert_eq!(epilogue.inputs, plan.groups[0].matmuls, "the products are read from memory");
    assert_eq!(epilogue.outputs, plan.groups[0].outputs);
    assert_eq!(epilogue.nodes.len(), 2);
    assert!(epilogue.source.contains(&format!("FUSE_KERNEL(256) {}(FUSE_KERNEL_PARAM(FuseArgs) args)", epilogue.name)));
}

#[test]
fn the_skinny_kernel_feeds_the_accumulators_to_the_epilogue() {
    let g = llama_mlp();
    let (plan, specs) = kernels(&g);
    let dual = specs.iter().find(|s| s.role == Role::Skinny && s.group == 0).expect("a dual skinny kernel");
    let [gate, up] = plan.groups[0].matmuls[..] else { panic!("two matmuls") };
    assert_eq!(dual.name, "mlp_k0_dualgemm_silu_mul_skinny");
    assert_eq!(dual.inputs, [gate, up]);
    assert_eq!(dual.outputs, plan.groups[0].outputs);
    let src = &dual.source;
    for line in [
        "#define FUSE_SKINNY_NAME mlp_k0_dualgemm_silu_mul_skinny",
        "#define FUSE_SKINNY_DUAL 1",
        "x[0] = acc0;",
        "x[1] = acc1;",
        "fuse_write<FUSE_OUT0>(args.out[0], r.bo[0] + col * r.so[0], y[0]);",
    ] {
        assert!(src.contains(line), "{line} missing from\n{src}");
    }
    // The two templates come last, whole, the quantized one behind its define (after the sm_90 header, for
    // its streaming body's bulk copies).
    let templates = format!(
        "#if defined(FUSE_SK_WQ)\n{}{}#else\n{}#endif  // FUSE_SK_WQ\n",
        crate::codegen::SM90_HEADER,
        crate::codegen::QUANT_SKINNY_TEMPLATE,
        SKINNY_TEMPLATE
    );
    assert!(src.ends_with(&templates), "the templates come last, whole");
    assert!(!src.contains("fuse_read<FUSE_IN0>"), "the products are never read from memory");
    // The down projection: a lone product, written as it is.
    let down = specs.iter().find(|s| s.role == Role::Skinny && s.group == 1).expect("a single skinny kernel");
    assert_eq!(
        (down.inputs.as_slice(), down.outputs.as_slice()),
        (plan.groups[1].matmuls.as_slice(), plan.groups[1].outputs.as_slice())
    );
    assert!(down.source.contains("#define FUSE_SKINNY_DUAL 0") && down.source.contains("y[0] = v"));
}

#[test]
fn the_wgmma_kernel_shares_the_skinny_kernels_epilogue() {
    let g = llama_mlp();
    let (_, specs) = kernels(&g);
    for group in [0, 1] {
        let of = |role| specs.iter().find(|s| s.role == role && s.group == group).expect("both templates");
        let (skinny, wgmma) = (of(Role::Skinny), of(Role::Wgmma));
        assert_eq!((&wgmma.inputs, &wgmma.outputs, &wgmma.nodes), (&skinny.inputs, &skinny.outputs, &skinny.nodes));
        assert_eq!(wgmma.name, skinny.name.replace("_skinny", "_wgmma"));
        let hook = |src: &str| {
            let start = src.find("struct FuseGemmRow").expect("the hook");
            src[start..start + src[start..].find("}\n\n").expect("its end")].to_string()
        };
        assert_eq!(hook(&wgmma.source), hook(&skinny.source), "one epilogue hook for both templates");
        assert!(wgmma.source.ends_with(WGMMA_TEMPLATE), "the template comes last, whole");
        let dual = if group == 0 { 1 } else { 0 };
        assert!(wgmma.source.contains(&format!("#define FUSE_WGMMA_DUAL {dual}")));
        assert!(wgmma.source.contains(&format!("#define FUSE_WGMMA_NAME {}", wgmma.name)));
    }
}

#[test]
fn rms_norm_and_softmax_are_one_row_kernel() {
    let g = rms_norm();
    let (plan, specs) = kernels(&g);
    assert_eq!(summary(&specs), [(KernelKind::RowReduce, Role::Whole, 0)]);
    assert_eq!(specs[0].inputs, plan.groups[0].inputs);
    assert_eq!(specs[0].outputs, plan.groups[0].outputs);
    assert_eq!(specs[0].nodes, plan.groups[0].nodes);
    let src = &specs[0].source;
    assert_eq!(src.matches("fuse_block_sum(acc").count(), 1, "one reduction pass");
    // The scalar eps is read once per kernel, the per-row rsqrt once per row (before the last pass).
    let eps = specs[0].inputs.iter().position(|&i| g.op(i) == Op::Input(2)).expect("eps is read");
    let eps_read =
        src.find(&format!("const float v2 = fuse_read<FUSE_IN{eps}>(args.in[{eps}], 0);")).expect("eps read once");
    let rsqrt = src.find("const float v6 = rsqrtf(v5);").expect("rsqrt once per row");
    let last_pass = src.rfind("for (long long j0 = threadIdx.x; j0 < n;").expect("a last pass");
    assert!(eps_read < rsqrt && rsqrt < last_pass, "{src}");
    // Each pass takes four columns per thread with no bound test between them, then the row's tail.
    assert_eq!(src.matches("if (j0 + 3 * (long long)blockDim.x < ").count(), 2, "{src}");

    let mut g = Graph::new("softmax");
    let x = g.input("x", ArgKind::Tensor);
    g.outputs = vec![g.softmax(x, "softmax(x)")];
    let (_, specs) = kernels(&g);
    assert_eq!(summary(&specs), [(KernelKind::RowReduce, Role::Whole, 0)]);
    let src = &specs[0].source;
    assert_eq!(src.matches("fuse_block_max(acc").count(), 1);
    assert_eq!(src.matches("fuse_block_sum(acc").count(), 1);
}

#[test]
fn attention_is_an_epilogue_then_a_softmax_prologue() {
    let g = attention();
    let (plan, specs) = kernels(&g);
    assert_eq!(plan.groups.len(), 2);
    assert_eq!(
        summary(&specs),
        [
            (KernelKind::Pointwise, Role::Epilogue, 0),
            (KernelKind::Pointwise, Role::Skinny, 0),
            (KernelKind::Pointwise, Role::Wgmma, 0),
            (KernelKind::Pointwise, Role::Mma, 0),
            (KernelKind::RowReduce, Role::Prologue, 1),
            (KernelKind::Pointwise, Role::Skinny, 1),
            (KernelKind::Pointwise, Role::Wgmma, 1),
            (KernelKind::Pointwise, Role::Mma, 1)
        ]
    );
    assert_eq!(specs[0].name, "attention_k0_gemm_mul_epilogue");
    assert_eq!(specs[4].name, "attention_k1_gemm_max_sub_exp_sum_prologue");
    let scale = g.ids().find(|&id| g.op(id) == Op::Input(3)).expect("scale");
    assert_eq!(specs[0].inputs, [plan.groups[0].matmuls[0], scale]);
}

#[test]
fn the_ten_op_chain_is_one_pointwise_kernel() {
    let (g, [x, bias, s]) = chain10();
    let (_, specs) = kernels(&g);
    assert_eq!(summary(&specs), [(KernelKind::Pointwise, Role::Whole, 0)]);
    let k = &specs[0];
    assert_eq!(k.inputs, [x, bias, s]);
    assert_eq!(k.nodes.len(), 10);
    assert!(k.source.contains("fuse_round_bf16("), "the cast rounds");
    assert!(k.source.contains("0.5f") && k.source.contains("3.0f"), "literals are inlined");
    assert!(k.source.contains("#if FUSE_CONTIGUOUS") && k.source.contains("fuse_read8<FUSE_IN1>"), "a vector path");
}

#[test]
fn a_prologue_and_an_epilogue_around_one_gemm() {
    let mut g = Graph::new("scaled");
    let x = g.input("x", ArgKind::Tensor);
    let s = g.input("row_scale", ArgKind::Tensor);
    let w = g.input("w", ArgKind::Tensor);
    let xs = g.binary(BinaryOp::Mul, x, s, "x * row_scale");
    let lhs = g.unary(UnaryOp::Relu, xs, "relu(..)");
    let wt = g.transpose(w, "w.t()");
    let y = g.matmul(lhs, wt, "..matmul(w.t())");
    let out = g.unary(UnaryOp::Tanh, y, "tanh(..)");
    g.outputs = vec![out];
    let (_, specs) = kernels(&g);
    assert_eq!(
        summary(&specs),
        [
            (KernelKind::Pointwise, Role::Prologue, 0),
            (KernelKind::Pointwise, Role::Epilogue, 0),
            (KernelKind::Pointwise, Role::Skinny, 0),
            (KernelKind::Pointwise, Role::Wgmma, 0),
            (KernelKind::Pointwise, Role::Mma, 0)
        ]
    );
    let (pro, epi) = (&specs[0], &specs[1]);
    assert_eq!(pro.name, "scaled_k0_gemm_mul_relu_tanh_prologue");
    assert_eq!(
        (pro.inputs.as_slice(), pro.outputs.as_slice(), pro.nodes.as_slice()),
        ([x, s].as_slice(), [lhs].as_slice(), [xs, lhs].as_slice())
    );
    assert_eq!(epi.name, "scaled_k0_gemm_mul_relu_tanh_epilogue");
    assert_eq!(
        (epi.inputs.as_slice(), epi.outputs.as_slice(), epi.nodes.as_slice()),
        ([y].as_slice(), [out].as_slice(), [out].as_slice())
    );
}

#[test]
fn every_op_appears_with_its_cuda_expression() {
    let mut g = Graph::new("ops");
    let x = g.input("x", ArgKind::Tensor);
    let y = g.input("y", ArgKind::Tensor);
    let mut outputs = Vec::new();
    for u in UnaryOp::ALL {
        outputs.push(g.unary(u, x, u.name()));
    }
    for b in BinaryOp::ALL {
        outputs.push(g.binary(b, x, y, b.name()));
    }
    for d in DType::ALL {
        outputs.push(g.cast(x, d, d.name()));
    }
    for r in ReduceOp::ALL {
        outputs.push(g.reduce(r, x, r.name()));
    }
    g.outputs = outputs;
    let plan = Plan::unfused(&g);
    let specs = plan_kernels(&g, &plan);
    assert_eq!(specs.len(), plan.groups.len(), "one kernel per op");
    for spec in &specs {
        let id = spec.nodes[0];
        let v = |n: NodeId| format!("v{}", n.0);
        let expected = match g.op(id) {
            Op::Unary(u) => format!("const float v{} = {};", id.0, u.cuda(&v(x))),
            Op::Binary(b) => format!("const float v{} = {};", id.0, b.cuda(&v(x), &v(y))),
            Op::Cast(DType::F32) => format!("const float v{} = v{};", id.0, x.0),
            Op::Cast(d) => format!("const float v{} = fuse_round_{}(v{});", id.0, d.name(), x.0),
            Op::Reduce(ReduceOp::Max) => format!("acc{0} = fuse_max(acc{0}, v{1});", id.0, x.0),
            Op::Reduce(ReduceOp::Min) => format!("acc{0} = fuse_min(acc{0}, v{1});", id.0, x.0),
            Op::Reduce(_) => format!("acc{} += v{};", id.0, x.0),
            op => panic!("unexpected {}", op.name()),
        };
        assert!(spec.source.contains(&expected), "{}: no `{expected}` in\n{}", spec.name, spec.source);
        let reduce = matches!(g.op(id), Op::Reduce(_));
        assert_eq!(spec.kind == KernelKind::RowReduce, reduce, "{}", spec.name);
    }
    let mean = specs.iter().find(|s| g.op(s.nodes[0]) == Op::Reduce(ReduceOp::Mean)).expect("a mean kernel");
    assert!(mean.source.contains("/ (float)len"), "a mean divides by the row length");
}

#[test]
fn literals_are_exact_and_deterministic() {
    assert_eq!(emit::literal(0.5), "0.5f");
    assert_eq!(emit::literal(3.0), "3.0f");
    assert_eq!(emit::literal(-1.5), "(-1.5f)");
    assert_eq!(emit::literal(1e-6), "1e-6f");
    assert_eq!(emit::literal(0.044715), "0.044715f");
    assert_eq!(emit::literal(f64::INFINITY), "__int_as_float(0x7f800000)");
    assert_eq!(emit::literal(f64::NEG_INFINITY), "(-__int_as_float(0x7f800000))");
    assert_eq!(emit::literal(f64::NAN), "__int_as_float(0x7fc00000)");
    for c in [0.1f64, 1.0 / 3.0, 12345.678, 6.02e23, -2.5e-12] {
        let text = emit::literal(c);
        let digits = text.trim_start_matches("(-").trim_start_matches('(').trim_end_matches(')').trim_end_matches('f');
        let back: f32 = digits.parse().expect("a C float literal Rust can read");
        assert_eq!(back.abs(), (c as f32).abs(), "{text} reads back");
    }
}

#[test]
fn defines_come_in_a_fixed_order() {
    let (g, _) = chain10();
    let (_, specs) = kernels(&g);
    let d = defines(
        &specs[0],
        &[InputKind::Tensor(DType::BF16), InputKind::Tensor(DType::F32), InputKind::Scalar],
        &[DType::F16],
    );
    assert_eq!(d, ["-DFUSE_NIN=3", "-DFUSE_NOUT=1", "-DFUSE_IN0=2", "-DFUSE_IN1=0", "-DFUSE_IN2=3", "-DFUSE_OUT0=1"]);
    // Every slot the source names has a define.
    for k in 0..3 {
        assert!(specs[0].source.contains(&format!("FUSE_IN{k}>")));
    }
    assert!(!specs[0].source.contains("FUSE_IN3"));
}

#[test]
fn kernels_without_inputs_still_get_one_slot_each() {
    let mut g = Graph::new("constant");
    let c = g.constant(2.0);
    g.outputs = vec![g.unary(UnaryOp::Exp, c, "exp(2.0)")];
    let (_, specs) = kernels(&g);
    assert!(specs[0].inputs.is_empty());
    assert_eq!(defines(&specs[0], &[], &[DType::F32]), ["-DFUSE_NIN=1", "-DFUSE_NOUT=1", "-DFUSE_OUT0=0"]);
    assert!(specs[0].source.contains("expf(2.0f)"));
}

#[test]
fn output_is_byte_identical_for_the_same_graph() {
    for g in [llama_mlp(), rms_norm(), attention(), chain10().0] {
        let (_, first) = kernels(&g);
        let reparsed = Graph::parse(&g.to_text()).expect("the text form reads back");
        let (_, again) = kernels(&reparsed);
        assert_eq!(first, again, "{}", g.name);
        assert_eq!(first, kernels(&g).1);
    }
}

#[test]
fn user_text_cannot_break_out_of_comments() {
    let mut g = Graph::new("weird\nname");
    let x = g.input("x", ArgKind::Tensor);
    g.outputs = vec![g.unary(UnaryOp::Exp, x, "exp(x) \\\n #error */")];
    let (_, specs) = kernels(&g);
    let src = &specs[0].source;
    assert!(!src.contains('\\'), "a backslash would splice the next line into the comment");
    for line in src.lines().filter(|l| l.contains("#error")) {
        assert!(line.starts_with("//") || line.starts_with("#error \"fuse: compile with"), "{line}");
    }
    assert!(specs[0].name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
}

#[test]
fn out_of_range_groups_have_no_kernels() {
    let g = rms_norm();
    let plan = Plan::fused(&g);
    assert!(group_kernels(&g, &plan, plan.groups.len()).is_empty());
}

/// rms_norm(x, w, eps) -> silu(h Wg) * (h Wu): the normalisation is the dual gemm's prologue.
fn normed_mlp() -> Graph {
    let mut g = Graph::new("normed");
    let x = g.input("x", ArgKind::Tensor);
    let w = g.input("w", ArgKind::Tensor);
    let eps = g.input("eps", ArgKind::Scalar);
    let [wg, wu] = ["wg", "wu"].map(|n| g.input(n, ArgKind::Tensor));
    let h = g.rms_norm(x, w, eps, "rms_norm(x, w, eps)");
    let a = g.matmul(h, wg, "h.matmul(wg)");
    let a = g.unary(UnaryOp::Silu, a, "silu(..)");
    let b = g.matmul(h, wu, "h.matmul(wu)");
    g.outputs = vec![g.binary(BinaryOp::Mul, a, b, "silu(..) * ..")];
    g
}

#[test]
fn the_skinny_kernel_can_run_an_rms_norm_prologue() {
    let g = normed_mlp();
    let (plan, specs) = kernels(&g);
    assert_eq!(
        summary(&specs),
        [
            (KernelKind::RowReduce, Role::Prologue, 0),
            (KernelKind::Pointwise, Role::Epilogue, 0),
            (KernelKind::Pointwise, Role::Skinny, 0),
            (KernelKind::Pointwise, Role::Wgmma, 0),
            (KernelKind::Pointwise, Role::Mma, 0)
        ]
    );
    let grp = &plan.groups[0];
    let ids = |names: &[&str]| -> Vec<NodeId> {
        names
            .iter()
            .map(|n| {
                g.ids()
                    .find(|&id| g.op(id) == Op::Input(g.inputs.iter().position(|i| i.name == *n).unwrap() as u32))
                    .unwrap()
            })
            .collect()
    };
    let [x, w, eps] = ids(&["x", "w", "eps"])[..] else { panic!() };
    let skinny = &specs[2];
    // Epilogue slots (the two products), then the prologue's: x streamed in place of h, then eps and w.
    assert_eq!(skinny.inputs[..2], grp.matmuls[..]);
    assert_eq!(skinny.inputs[2..], [x, eps, w]);
    assert_eq!(skinny.prologue, Some(PrologueSlots { first: 2, primary: 2 }));
    let src = &skinny.source;
    assert!(src.contains("#if FUSE_GEMM_PRO\n"), "the prologue is compiled in only on request");
    assert!(src.contains(
        "fuse_gemm_pro_rows(const FuseArgs& args, long long m0, int rows, long long n, float* part, int stride)"
    ));
    let (rows, element) = src
        .split_once("void fuse_gemm_pro8(const FuseArgs& args, const FuseProRow& p, long long j8, float (&a)[8])")
        .unwrap();
    assert!(
        rows.contains("fuse_read8<FUSE_IN2>(args.in[2], bi[2] + j8, xv)"),
        "the row pass reads x 16 bytes at a time"
    );
    assert!(
        rows.contains("fuse_warp_sum(s)") && rows.contains("const float v8 = rsqrtf(v7);"),
        "one warp per row ends it"
    );
    assert!(element.contains("fuse_pro_read8<FUSE_IN4>(args.in[4], bi[4], si[4], j8, in4);"), "w: 8 columns at a time");
    assert!(!element.contains("args.in[2]"), "x is not read again per element");
    assert!(element.contains(&format!("const float v{} = a[e];", x.0)), "x comes from the template's load");
    // rms_norm's operand is x * w per element times one value a row (from the mean of squares and eps): the
    // scaled form streams x * w, folds x * x as it loads x, and scales each row's sums by rsqrt(mean + eps).
    let (_, scaled) = element.split_once("#define FUSE_GEMM_PRO_CAN_SCALE 1").expect("rms_norm's prologue factors");
    let (per_element, per_row) = scaled.split_once("fuse_gemm_pro_scale(").unwrap();
    assert!(per_element.contains(&format!("a[e] = v{} * v{};", x.0, w.0)), "h = x * w");
    assert!(per_element.contains("red[0] = red[0] + "), "the sum of squares folds over the loaded elements");
    assert!(per_row.contains("red[0] / (float)n") && per_row.contains("rsqrtf("), "s = rsqrt(mean + eps)");
    assert!(
        scaled.contains(&format!("return (FUSE_IN{} == FUSE_SCALAR || p.si[", 2 + 1)),
        "eps must be constant along the row"
    );
    // The wgmma kernel does not run the prologue: the runtime writes h first on that path.
    assert_eq!(specs[3].prologue, None);
    assert_eq!(specs[3].inputs, grp.matmuls);
    assert!(!specs[3].source.contains("fuse_gemm_pro8"));
}

/// A layer norm in front of the matmul: its operand is (x - mean) times one value a row, and x - mean reads x,
/// so the skinny kernel runs it with the row pass only (no scaled form).
#[test]
fn a_prologue_that_does_not_factor_keeps_the_row_pass() {
    let mut g = Graph::new("layer_normed");
    let x = g.input("x", ArgKind::Tensor);
    let w = g.input("w", ArgKind::Tensor);
    let eps = g.input("eps", ArgKind::Scalar);
    let wg = g.input("wg", ArgKind::Tensor);
    let mean = g.reduce(ReduceOp::Mean, x, "mean(x)");
    let centred = g.binary(BinaryOp::Sub, x, mean, "x - mean");
    let square = g.unary(UnaryOp::Square, centred, "(..)^2");
    let var = g.reduce(ReduceOp::Mean, square, "var");
    let var_eps = g.binary(BinaryOp::Add, var, eps, "var + eps");
    let r = g.unary(UnaryOp::Rsqrt, var_eps, "rsqrt(..)");
    let xn = g.binary(BinaryOp::Mul, centred, r, "(x - mean) * r");
    let h = g.binary(BinaryOp::Mul, xn, w, ".. * w");
    g.outputs = vec![g.matmul(h, wg, "h.matmul(wg)")];
    let (_, specs) = kernels(&g);
    let skinny = specs.iter().find(|s| s.role == Role::Skinny).expect("a skinny kernel");
    assert!(skinny.prologue.is_some(), "the skinny kernel runs the layer norm itself");
    assert!(skinny.source.contains("fuse_gemm_pro_rows("), "the row pass");
    assert!(!skinny.source.contains("#define FUSE_GEMM_PRO_CAN_SCALE 1"), "x - mean is no per-row factor");
}

#[test]
fn contiguous_is_a_copy_kernel() {
    // `x.t().contiguous()`: the copy's kernel reads x through the transposed strides and writes densely; it
    // must compute the value, not refuse the node (an `#error` that NVRTC reports at run time).
    let text = "fn f(x: tensor)\n%0 = input 0\n%1 = t %0\n%2 = contiguous %1\nreturn %2\n";
    let g = Graph::parse(text).unwrap();
    let specs = plan_kernels(&g, &Plan::fused(&g));
    assert_eq!(specs.len(), 1);
    assert!(!specs[0].source.contains("cannot run in a pointwise kernel"), "{}", specs[0].source);
    assert!(specs[0].source.contains("const float v2 = v1;"), "{}", specs[0].source);
}

/// The functions a CUDA text defines (or declares): the name before the parameters of each `__device__` line.
fn device_functions(source: &str) -> Vec<&str> {
    source
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("__device__") || l.starts_with("template"))
        .filter_map(|l| l.split_once("__device__").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_once('(').map(|(head, _)| head))
        .filter_map(|head| head.split_whitespace().last())
        .map(|name| name.trim_start_matches(['*', '&']))
        .collect()
}

/// Every kernel source fuse-ir builds, named: the generated kernels of every role (a skinny one with its
/// prologue among them) and the hand-written model kernels.
fn every_kernel_source() -> Vec<(String, String)> {
    let mut sources: Vec<(String, String)> =
        ModelKernel::ALL.iter().map(|k| (k.name().into(), k.source().into())).collect();
    for g in [llama_mlp(), rms_norm(), attention(), chain10().0, normed_mlp()] {
        sources.extend(kernels(&g).1.into_iter().map(|s| (s.name, s.source.into_owned())));
    }
    sources
}

#[test]
fn the_shared_headers_follow_their_naming_and_include_nothing() {
    for header in [CUDA_PRELUDE, SM90_HEADER] {
        assert!(!header.contains("#include"), "NVRTC builds the headers as they are");
        let functions = device_functions(header);
        assert!(functions.len() >= 12, "{functions:?}");
        for name in functions {
            assert!(name.starts_with("fuse_"), "`{name}`: the headers' functions are fuse_*");
        }
        for line in header.lines().filter(|l| l.starts_with("#define ")) {
            assert!(line["#define ".len()..].starts_with("FUSE_"), "`{line}`: the headers' macros are FUSE_*");
        }
    }
    let prelude = device_functions(CUDA_PRELUDE);
    assert!(device_functions(SM90_HEADER).iter().all(|f| !prelude.contains(f)), "no helper in both headers");
}

/// One prelude and one sm_90 header: no kernel source defines a helper of theirs again, and the instructions
/// they wrap appear in no kernel's own code (each source has them exactly as often as the headers it starts
/// with), so that there is one copy of each to read and to fix.
#[test]
fn kernels_take_the_shared_helpers_from_the_headers_alone() {
    const WRAPPED: [&str; 17] = [
        "griddepcontrol.",
        "cvt.rn.bf16",
        "cvt.rn.f16",
        "cvt.f32.f16",
        "cvta.to.shared",
        "cp.async.cg",
        "cp.async.commit_group",
        "cp.async.wait_group",
        "ld.global.cg",
        "mma.sync.aligned.m16n8k16",
        "mbarrier.",
        "barrier.cluster.",
        "%%cluster_ctarank",
        "mapa.",
        "ld.shared::cluster",
        "cp.async.bulk",
        "st.async",
    ];
    let sources = every_kernel_source();
    assert!(sources.iter().any(|(_, s)| s.contains(SM90_HEADER)), "a wgmma kernel among them");
    for (name, source) in &sources {
        assert!(source.contains(CUDA_PRELUDE), "{name} starts from the CUDA prelude");
        let sm90 = source.contains(SM90_HEADER);
        let headers = if sm90 { [CUDA_PRELUDE, SM90_HEADER].concat() } else { CUDA_PRELUDE.to_string() };
        let defined = device_functions(source);
        for helper in device_functions(&headers) {
            let times = defined.iter().filter(|&&f| f == helper).count();
            assert_eq!(times, 1, "{name} defines `{helper}` {times} times: the headers define it once");
        }
        if !sm90 {
            assert!(device_functions(SM90_HEADER).iter().all(|f| !defined.contains(f)), "{name}: sm_90 helpers");
        }
        for instruction in WRAPPED {
            let (here, there) = (source.matches(instruction).count(), headers.matches(instruction).count());
            assert_eq!(here, there, "{name} writes `{instruction}` itself: use the shared headers' helper");
        }
    }
}
