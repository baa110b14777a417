//! The CUDA sources `#[fuse]` emits into the binary (`FusedFn::kernels`) are exactly the kernels the runtime
//! generates from the parsed graph text and runs: same names, same bytes, same order. And tracing is
//! deterministic: two functions with the same body emit the same kernels, up to the function's name in the
//! kernel names. No GPU or NVRTC needed.

#[path = "common/fused_fns.rs"]
mod fused_fns;
use fused_fns::{chain10_fused, ffn_block, ffn_block_fused, llama_mlp_fused, scaled_projection_fused, Block};

use fuse::ir::codegen::plan_kernels;
use fuse::ir::Plan;
use fuse::prelude::*;

#[fuse]
fn reductions(x: &Tensor, s: f64) -> Result<(Tensor, Tensor, Tensor)> {
    (softmax(x * s), x - x.mean(-1), x.max(-1))
}

#[fuse]
fn twin_a(x: &Tensor, w: &Tensor, eps: f32) -> Result<(Tensor, Tensor)> {
    let h = rms_norm(x, w, eps);
    (softmax(h * 2.0), sigmoid(h.matmul(&w.t())) + eps)
}

#[fuse]
fn twin_b(x: &Tensor, w: &Tensor, eps: f32) -> Result<(Tensor, Tensor)> {
    let h = rms_norm(x, w, eps);
    (softmax(h * 2.0), sigmoid(h.matmul(&w.t())) + eps)
}

fn corpus() -> Vec<&'static FusedFn> {
    vec![
        llama_mlp_fused(),
        ffn_block_fused(),
        reductions_fused(),
        chain10_fused(),
        scaled_projection_fused(),
        Block::forward_fused(),
        twin_a_fused(),
        twin_b_fused(),
    ]
}

#[test]
fn emitted_sources_are_what_the_runtime_generates() {
    let mut total = 0;
    for f in corpus() {
        let g = f.graph().expect("the embedded graph parses");
        let generated = plan_kernels(g, &Plan::fused(g));
        let emitted = f.kernels();
        let names = |v: Vec<&str>| v.join(", ");
        assert_eq!(
            names(emitted.iter().map(|k| k.name).collect()),
            names(generated.iter().map(|k| k.name.as_str()).collect()),
            "`{}`: kernel names",
            f.name()
        );
        for (e, k) in emitted.iter().zip(&generated) {
            // assert! rather than assert_eq!: on failure, print the first differing line, not two whole sources.
            if e.source != k.source {
                let differs = e.source.lines().zip(k.source.lines()).position(|(a, b)| a != b);
                panic!(
                    "`{}` kernel `{}`: emitted source differs from the generated one at line {differs:?}",
                    f.name(),
                    e.name
                );
            }
            let entry = e
                .source
                .lines()
                .find(|l| l.starts_with("FUSE_KERNEL(") || l.starts_with("extern \"C\" __global__ void"));
            // A template's entry point is named through the define the generated part sets before it.
            let named = |define: &str| {
                e.source.contains(&format!("\n#define {define} {}\n", e.name))
                    && entry.is_some_and(|l| l.contains(&format!(" {define}(")))
            };
            let calls = |l: &str| {
                l.contains(&format!(" {}(", e.name))
                    || named("FUSE_SKINNY_NAME")
                    || named("FUSE_WGMMA_NAME")
                    || named("FUSE_MMA_NAME")
            };
            assert!(entry.is_some_and(calls), "`{}`: entry point {entry:?}", e.name);
        }
        total += emitted.len();
    }
    // Every function above but `llama_mlp` (whose only pointwise work, silu * mul, is an epilogue) has kernels; the
    // count guards against a macro that silently emits nothing.
    assert!(total >= 10, "only {total} kernels emitted for the corpus");
}

#[test]
fn every_kind_of_kernel_is_covered() {
    let names: Vec<&str> = corpus().iter().flat_map(|f| f.kernels()).map(|k| k.name).collect();
    for part in ["_epilogue", "_prologue", "rowreduce", "pointwise"] {
        assert!(names.iter().any(|n| n.contains(part)), "no `{part}` kernel among {names:?}");
    }
}

#[test]
fn the_same_body_emits_the_same_kernels() {
    let (a, b) = (twin_a_fused().kernels(), twin_b_fused().kernels());
    assert!(!a.is_empty());
    assert_eq!(a.len(), b.len());
    for (ka, kb) in a.iter().zip(b) {
        assert_eq!(kb.name.replacen("twin_b", "twin_a", 1), ka.name);
        // The function's name appears in kernel names and in the header comment; nothing else may differ.
        let renamed = kb.source.replace("twin_b", "twin_a");
        let differs = renamed.lines().zip(ka.source.lines()).position(|(x, y)| x != y);
        assert!(renamed == ka.source, "kernel `{}` differs at line {differs:?}", ka.name);
    }
}

#[test]
fn a_function_built_in_code_has_no_emitted_kernels() {
    let g = reductions_fused().graph().expect("parses").clone();
    let f = FusedFn::from_graph(g);
    assert!(f.kernels().is_empty());
}

/// Runs `ffn_block` once on the CPU when this process is the child of `debug_levels_add_up` (FUSE_DEBUG is
/// read once per process, so each level needs a process of its own).
#[test]
fn debug_ladder_child() {
    if std::env::var_os("FUSE_DEBUG_LADDER_CHILD").is_none() {
        return;
    }
    let t = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        Tensor::from_vec((0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) / 8.0).collect::<Vec<f32>>(), shape, &Device::Cpu)
            .expect("a tensor")
    };
    let y = ffn_block(&t(&[3, 8]), &t(&[8]), &t(&[16, 8]), &t(&[16, 8]), &t(&[8, 16]), 1e-5).expect("runs");
    assert_eq!(y.shape(), &[3, 8]);
}

#[test]
fn debug_levels_add_up() {
    let run = |level: u32| {
        let exe = std::env::current_exe().expect("the test binary");
        let out = std::process::Command::new(exe)
            .args(["--exact", "debug_ladder_child", "--nocapture", "--test-threads=1"])
            .env("FUSE_DEBUG", level.to_string())
            .env("FUSE_DEBUG_LADDER_CHILD", "1")
            .env_remove("FUSE_FUSION")
            .output()
            .expect("runs the child");
        assert!(out.status.success(), "FUSE_DEBUG={level}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // What each level adds, in ladder order.
    let marks = [
        "fuse: plan of `ffn_block`",
        "fuse: `ffn_block` k0 ",
        "matmul path: the CPU backend's f32 GEMM",
        "fuse: `ffn_block` runs on the CPU: no CUDA kernels to show",
        "fuse: graph of `ffn_block`",
    ];
    for level in 0..=5u32 {
        let stderr = run(level);
        for (i, mark) in marks.iter().enumerate() {
            let expected = (i as u32) < level;
            assert_eq!(stderr.contains(mark), expected, "FUSE_DEBUG={level}, `{mark}`:\n{stderr}");
        }
        if level >= 3 {
            // The CPU GEMM reports its calls: both weights of the DualGemm read in place, transposed.
            assert!(
                stderr.contains(
                    "k0 dualgemm: matmul path: the CPU backend's f32 GEMM: gemm::gemm x2 (dual w_gate.t()|w_up.t()"
                ),
                "{stderr}"
            );
            assert!(
                stderr.contains("k1 gemm: matmul path: the CPU backend's f32 GEMM: gemm::gemm x1, m=3 n=8 k=16"),
                "{stderr}"
            );
        }
        // Introspection knows its device: no CUDA source on a CPU call, and the plan in the CPU's words.
        assert!(!stderr.contains("FUSE_KERNEL(") && !stderr.contains("on chip"), "FUSE_DEBUG={level}:\n{stderr}");
    }
}

#[fuse]
fn only_here(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(tanh(rms_norm(x, b, 1e-5).matmul(&w.t())) * 0.5)
}

#[test]
fn a_fused_call_runs_the_plan_and_kernels_the_macro_emitted() {
    use fuse::ir::codegen::groups_generated_on_this_thread as generated;
    use fuse::ir::plan::fused_plans_made_on_this_thread as planned;
    // Only this test uses `only_here`, so its plan and kernels are made (or not) on this thread.
    let (plans, groups) = (planned(), generated());
    let dev = Device::Cpu;
    let x = Tensor::from_vec((0..3 * 8).map(|i| i as f32 / 10.0).collect::<Vec<f32>>(), &[3, 8], &dev).unwrap();
    let w = Tensor::from_vec((0..5 * 8).map(|i| (i % 7) as f32 / 7.0).collect::<Vec<f32>>(), &[5, 8], &dev).unwrap();
    let b = Tensor::from_vec(vec![1.5f32; 8], &[8], &dev).unwrap();
    let y = only_here(&x, &w, &b).expect("the fused call");
    assert_eq!(y.shape(), &[3, 5]);
    let specs = only_here_fused().plan_kernel_specs(Fusion::On).expect("the kernels the GPU would launch");
    assert_eq!((planned(), generated()), (plans, groups), "a #[fuse] call planned or generated kernels at run time");
    // The launcher's sources are the binary's strings themselves, not copies or regenerations.
    let emitted = only_here_fused().kernels();
    let launched: Vec<_> = specs.iter().flatten().collect();
    assert_eq!(launched.len(), emitted.len());
    for (spec, kernel) in launched.iter().zip(emitted) {
        let std::borrow::Cow::Borrowed(source) = spec.source else { panic!("{}: an owned source", spec.name) };
        assert!(std::ptr::eq(source, kernel.source), "{}: not the emitted string", spec.name);
    }
    // The counters move when planning and generating do happen (so the check above can fail).
    let g = only_here_fused().graph().unwrap();
    let replanned = Plan::fused(g);
    assert_eq!(&replanned, only_here_fused().plan(Fusion::On).unwrap(), "the emitted plan is the planner's");
    only_here_fused().plan_kernel_specs(Fusion::Off).expect("unfused kernels, generated");
    assert!(planned() > plans && generated() > groups);
}

#[test]
fn each_emitted_kernel_says_its_group_and_role() {
    let roles: Vec<(usize, &str)> = llama_mlp_fused().kernels().iter().map(|k| (k.group(), k.role())).collect();
    // The dual GEMM's epilogue (after library matmuls) and its three one-kernel alternatives, then the down
    // projection's three alternatives (no epilogue: the library writes its product directly).
    assert_eq!(
        roles,
        [(0, "epilogue"), (0, "skinny"), (0, "wgmma"), (0, "mma"), (1, "skinny"), (1, "wgmma"), (1, "mma")]
    );
    let ffn: Vec<&str> = ffn_block_fused().kernels().iter().map(|k| k.role()).collect();
    assert!(ffn.starts_with(&["prologue", "epilogue", "skinny"]), "{ffn:?}");
    assert!(chain10_fused().kernels().iter().all(|k| k.role() == "whole"));
}
