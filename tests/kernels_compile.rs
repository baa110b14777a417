//! Every CUDA kernel the code generator emits for a corpus of `#[fuse]` functions (every op, every kind of
//! group, the Llama MLP, rms_norm -> MLP -> residual, attention, a ten-op chain) compiles with NVRTC to PTX
//! for sm_80 and sm_90 (the wgmma template for sm_90a), in f32/f16/bf16, with scalar and tensor arguments, dense and strided, and assembles
//! with `ptxas -v` without register spills. No GPU needed.
//!
//! Without NVRTC the test says it skipped; with `FUSE_TEST_NVRTC=1` (scripts/test.sh sets it once
//! scripts/cuda-tools.sh has installed NVRTC and ptxas) a missing NVRTC or `FUSE_PTXAS` is a failure.

use std::io::Write as _; // skip notices go straight to stderr, past libtest's capture

#[path = "common/fused_fns.rs"]
mod fused_fns;
use fused_fns::*;

use fuse::ir::codegen::{self, GemmTiling, InputKind, KernelKind, KernelSpec, Role, CONTIGUOUS_DEFINE};
use fuse::ir::{BinaryOp, DType, Graph, Op, ReduceOp, UnaryOp};
use fuse::prelude::*;
use fuse_runtime::{compile_ptx, nvrtc_available, nvrtc_version, ptxas_check, PtxasReport};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

const ARCHS: [&str; 2] = ["sm_80", "sm_90"];
const WGMMA_ARCHS: [&str; 1] = ["sm_90a"];
/// Functions whose kernels are checked with every define variant (each kind of kernel and role is here).
const FULL_MATRIX: [&str; 4] = ["chain10", "ffn_block", "attention", "scaled_projection"];

#[fuse]
fn casts(x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    (x.to_dtype(DType::F16) * 3.0, x.to_dtype(DType::BF16) - 1e-3, exp(x.to_dtype(DType::F32)))
}

#[fuse]
fn attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(softmax(q.matmul(&k.t()) * scale).matmul(v))
}

fn corpus() -> Vec<&'static FusedFn> {
    vec![
        unary_a_fused(),
        unary_b_fused(),
        unary_c_fused(),
        binary_fused(),
        compare_fused(),
        masked_fused(),
        repeated_fused(),
        reductions_fused(),
        norm_and_cast_fused(),
        casts_fused(),
        mlp_fused(),
        llama_mlp_fused(),
        ffn_block_fused(),
        Block::forward_fused(),
        attention_scores_fused(),
        attention_fused(),
        scaled_projection_fused(),
        chain10_fused(),
        qkv_projections_fused(),
    ]
}

/// Every kernel of the fused plans, and of the unfused plan of `reductions` (a reduction alone in its
/// kernel), without repeats.
fn kernels() -> Vec<(Graph, KernelSpec)> {
    let mut all: Vec<(Graph, KernelSpec)> = Vec::new();
    let unfused = reductions_fused();
    for f in corpus() {
        let g = f.graph().expect("the corpus traces");
        let plans = if std::ptr::eq(f, unfused) { vec![Fusion::On, Fusion::Off] } else { vec![Fusion::On] };
        for fusion in plans {
            let plan = f.plan(fusion).expect("the corpus plans");
            for spec in codegen::plan_kernels(g, plan) {
                if !all.iter().any(|(_, s)| s.source == spec.source) {
                    all.push((g.clone(), spec));
                }
            }
        }
    }
    all
}

/// The define sets a kernel is checked with: bf16 with scalar arguments and the dense vector path; f16
/// strided; f32 with fields and scalars passed as tensors, dense (its tail is the element path), and f32
/// results from bf16 inputs, strided. Row reductions have no dense path.
fn variants(g: &Graph, spec: &KernelSpec) -> Vec<Vec<String>> {
    let may_be_scalar: Vec<bool> = spec
        .inputs
        .iter()
        .map(|&id| match g.op(id) {
            Op::Input(k) => g.inputs[k as usize].kind != fuse::ir::InputKind::Tensor,
            _ => false,
        })
        .collect();
    let slots = |dtype: DType, scalars: bool| -> Vec<InputKind> {
        may_be_scalar.iter().map(|&s| if s && scalars { InputKind::Scalar } else { InputKind::Tensor(dtype) }).collect()
    };
    let outs = |dtype: DType| vec![dtype; spec.outputs.len()];
    if spec.role == Role::Skinny {
        // Every config in bf16 (the autotuner may pick any), the default in f16; no dense path.
        let mut sets: Vec<Vec<String>> = codegen::SKINNY_CONFIGS
            .iter()
            .map(|c| {
                [codegen::defines(spec, &slots(DType::BF16, true), &outs(DType::BF16)), c.defines(DType::BF16)].concat()
            })
            .collect();
        let f16 = codegen::SKINNY_CONFIGS[0].defines(DType::F16);
        sets.push([codegen::defines(spec, &slots(DType::F16, false), &outs(DType::F32)), f16].concat());
        if spec.prologue.is_some() {
            // The same, running the group's prologue in the kernel: the configs of few enough rows per block.
            let small = |c: &&codegen::SkinnyConfig| c.rows_per_block() <= codegen::PROLOGUE_MAX_ROWS;
            let with_prologue: Vec<Vec<String>> = codegen::SKINNY_CONFIGS
                .iter()
                .zip(&sets)
                .filter(|(c, _)| small(c))
                .map(|(_, d)| d.clone())
                .chain(sets.last().cloned())
                .map(|d| [d, vec!["-DFUSE_GEMM_PRO=1".to_string()]].concat())
                .collect();
            sets.extend(with_prologue);
        }
        // Each again copying its first weight chunks before the grid wait (the ring then also lends its last
        // stages to the prologue's partials).
        let early: Vec<Vec<String>> =
            sets.iter().map(|d| [d.clone(), vec![codegen::EARLY_WEIGHTS_DEFINE.to_string()]].concat()).collect();
        sets.extend(early);
        // The configs that take an X ring (`SkinnyConfig::takes_x_ring`) with one, as a step recorded for one
        // launch builds them, with and without the early weights and the prologue.
        let takes_ring = |d: &Vec<String>| {
            let config = codegen::SKINNY_CONFIGS.iter().find(|c| c.defines.iter().all(|x| d.iter().any(|s| s == x)));
            config.is_some_and(|c| c.takes_x_ring())
        };
        let ringed: Vec<Vec<String>> = sets
            .iter()
            .filter(|d| takes_ring(d))
            .map(|d| [d.clone(), vec![codegen::X_RING_DEFINE.to_string()]].concat())
            .collect();
        sets.extend(ringed);
        sets.extend(quant_variants(spec, &slots, &outs));
        return sets;
    }
    if spec.role == Role::Mma {
        // Every config the group's product count allows, in bf16; the last in f16.
        let dual = spec.source.contains("#define FUSE_MMA_DUAL 1");
        let fits: Vec<&codegen::MmaConfig> = codegen::MMA_CONFIGS.iter().filter(|c| c.supports(dual)).collect();
        let mut sets: Vec<Vec<String>> = fits
            .iter()
            .map(|c| {
                let mma = c.defines(DType::BF16, DType::BF16).expect("bf16 by bf16");
                [codegen::defines(spec, &slots(DType::BF16, true), &outs(DType::BF16)), mma].concat()
            })
            .collect();
        if let Some(c) = fits.last() {
            let mma = c.defines(DType::F16, DType::F16).expect("f16 by f16");
            sets.push([codegen::defines(spec, &slots(DType::F16, false), &outs(DType::F32)), mma].concat());
        }
        // Weights of quantized blocks decoded into the tiles: every type with f32 activations (the first config),
        // bf16 and f16 activations with one type each (the last).
        let quant = |c: &codegen::MmaConfig, x: DType, w: DType| {
            [codegen::defines(spec, &slots(x, false), &outs(x)), c.defines(x, w).expect("float x, block weights")]
                .concat()
        };
        if let (Some(first), Some(last)) = (fits.first(), fits.last()) {
            sets.extend(DType::QUANTIZED.iter().map(|&w| quant(first, DType::F32, w)));
            sets.push(quant(last, DType::BF16, DType::Q4_K));
            sets.push(quant(last, DType::F16, DType::Q6_K));
        }
        return sets;
    }
    if spec.role == Role::Wgmma {
        // Every config the group's product count allows, in bf16; the first in f16.
        let dual = spec.source.contains("#define FUSE_WGMMA_DUAL 1");
        let mut sets: Vec<Vec<String>> = codegen::WGMMA_CONFIGS
            .iter()
            .filter(|c| c.supports(dual))
            .map(|c| {
                [codegen::defines(spec, &slots(DType::BF16, true), &outs(DType::BF16)), c.defines(DType::BF16)].concat()
            })
            .collect();
        let f16 = codegen::WGMMA_CONFIGS[0].defines(DType::F16);
        sets.push([codegen::defines(spec, &slots(DType::F16, false), &outs(DType::F32)), f16].concat());
        return sets;
    }
    let dense = spec.kind == KernelKind::Pointwise;
    let sets = [
        (codegen::defines(spec, &slots(DType::BF16, true), &outs(DType::BF16)), dense),
        (codegen::defines(spec, &slots(DType::F16, true), &outs(DType::F16)), false),
        (codegen::defines(spec, &slots(DType::F32, false), &outs(DType::F32)), dense),
        (codegen::defines(spec, &slots(DType::BF16, false), &outs(DType::F32)), false),
    ];
    sets.into_iter()
        .map(|(mut d, contiguous)| {
            if contiguous {
                d.push(CONTIGUOUS_DEFINE.to_string());
            }
            d
        })
        .collect()
}

/// The quantized skinny template (`-DFUSE_SK_WQ`) of a Skinny kernel: every config with Q4_K weights and bf16
/// activations, the first with every other block type, f32 and f16 activations, the 8-bit body with every
/// block type, the streaming 8-bit body likewise; with its prologue, the configs of one and of eight rows and the
/// 8-bit bodies' of one and four.
fn quant_variants(
    spec: &KernelSpec,
    slots: &dyn Fn(DType, bool) -> Vec<InputKind>,
    outs: &dyn Fn(DType) -> Vec<DType>,
) -> Vec<Vec<String>> {
    let configs = codegen::QUANT_SKINNY_CONFIGS;
    let set = |c: &codegen::QuantSkinnyConfig, x: DType, w: DType| {
        [codegen::defines(spec, &slots(x, false), &outs(x)), c.defines(x, w).expect("a float x, block weights")]
            .concat()
    };
    let mut sets: Vec<Vec<String>> = configs.iter().map(|c| set(c, DType::BF16, DType::Q4_K)).collect();
    sets.extend(DType::QUANTIZED.iter().filter(|&&w| w != DType::Q4_K).map(|&w| set(&configs[0], DType::BF16, w)));
    // The 8-bit body (the first of its configs) with every block type, f32 activations as decode runs.
    let x8 = configs.iter().find(|c| c.x8_lanes > 0).expect("an 8-bit config");
    sets.extend(DType::QUANTIZED.iter().filter(|&&w| w != DType::Q4_K).map(|&w| set(x8, DType::F32, w)));
    // The streaming 8-bit body (its first config) likewise, and with the weights copied before the wait.
    let stream = configs.iter().find(|c| c.stages > 0).expect("a streaming config");
    sets.extend(DType::QUANTIZED.iter().filter(|&&w| w != DType::Q4_K).map(|&w| set(stream, DType::F32, w)));
    sets.push([set(stream, DType::F32, DType::Q6_K), vec![codegen::EARLY_WEIGHTS_DEFINE.to_string()]].concat());
    // Its bulk copies on mbarriers (sm_90; the cp.async body below), Q6_K's rows not 16-byte aligned, early.
    let bulk = || codegen::BULK_STREAM_DEFINE.to_string();
    sets.push([set(stream, DType::F32, DType::Q6_K), vec![bulk(), codegen::EARLY_WEIGHTS_DEFINE.to_string()]].concat());
    sets.push([set(stream, DType::BF16, DType::Q8_0), vec![bulk()]].concat());
    // Whole weight rows sent toward L2 before the wait, by the f32 and the 8-bit bodies.
    for (c, w) in [(&configs[0], DType::Q4_K), (x8, DType::Q6_K), (x8, DType::Q4_0)] {
        sets.push([set(c, DType::F32, w), vec![codegen::ROW_PREFETCH_DEFINE.to_string()]].concat());
    }
    sets.push(set(&configs[0], DType::F32, DType::Q8_0));
    sets.push(set(&configs[0], DType::F16, DType::Q6_K));
    if spec.prologue.is_some() {
        let rows = |n: usize| configs.iter().find(|c| c.rows == n).expect("a config of that many rows");
        let x8_rows = |n: usize| configs.iter().find(|c| c.rows == n && c.x8_lanes > 0).expect("an 8-bit config");
        let stream_rows = |n: usize| configs.iter().find(|c| c.rows == n && c.stages > 0).expect("a streaming config");
        for c in [rows(1), rows(8), x8_rows(1), x8_rows(4), stream_rows(1), stream_rows(4)] {
            sets.push([set(c, DType::BF16, DType::Q4_1), vec!["-DFUSE_GEMM_PRO=1".to_string()]].concat());
        }
        // The 8-bit bodies' scaled form of the prologue (where the prologue has one), f32 and bf16 activations.
        for (c, x, w) in [
            (x8_rows(1), DType::F32, DType::Q4_K),
            (x8_rows(4), DType::BF16, DType::Q6_K),
            (stream_rows(1), DType::F32, DType::Q8_0),
        ] {
            let scaled = vec!["-DFUSE_GEMM_PRO=1".to_string(), codegen::SCALED_PROLOGUE_DEFINE.to_string()];
            sets.push([set(c, x, w), scaled].concat());
        }
    }
    sets
}

/// The corpus must exercise what this test claims: every op, both kernel kinds, every role.
fn check_coverage(kernels: &[(Graph, KernelSpec)]) {
    let ops: Vec<Op> = kernels.iter().flat_map(|(g, s)| s.nodes.iter().map(|&n| g.op(n))).collect();
    for u in UnaryOp::ALL {
        assert!(ops.contains(&Op::Unary(u)), "no kernel computes {}", u.name());
    }
    for b in BinaryOp::ALL {
        assert!(ops.contains(&Op::Binary(b)), "no kernel computes {}", b.name());
    }
    for r in ReduceOp::ALL {
        assert!(ops.contains(&Op::Reduce(r)), "no kernel computes {}", r.name());
    }
    for d in DType::ALL {
        assert!(ops.contains(&Op::Cast(d)), "no kernel casts to {d}");
    }
    for kind in [KernelKind::Pointwise, KernelKind::RowReduce] {
        assert!(kernels.iter().any(|(_, s)| s.kind == kind), "no {kind:?} kernel");
    }
    for role in [Role::Whole, Role::Prologue, Role::Epilogue, Role::Skinny, Role::Wgmma, Role::Mma] {
        assert!(kernels.iter().any(|(_, s)| s.role == role), "no {role:?} kernel");
    }
    assert!(
        kernels
            .iter()
            .any(|(g, s)| s.prologue.is_some() && s.source.contains("fuse_warp_sum(s)") && g.name == "ffn_block"),
        "no skinny kernel runs a row-reduction prologue (rms_norm)"
    );
    assert!(
        kernels.iter().any(|(_, s)| s.role == Role::Skinny && s.source.contains("#define FUSE_GEMM_PRO_CAN_SCALE 1")),
        "no skinny kernel has the scaled prologue (rms_norm as s(row) * h(element))"
    );
}

/// `FUSE_PTXAS`, else `ptxas` on the PATH.
/// ptxas, where NVRTC and ptxas are both here; else `None` after printing that `what` is skipped and why (with
/// `FUSE_TEST_NVRTC=1`, which scripts/test.sh sets once it has installed them, a missing tool fails instead).
fn tools_or_skip(what: &str) -> Option<PathBuf> {
    let required = std::env::var("FUSE_TEST_NVRTC").is_ok_and(|v| v == "1");
    if !nvrtc_available() {
        assert!(
            !required,
            "FUSE_TEST_NVRTC=1 but libnvrtc cannot be loaded (run scripts/cuda-tools.sh, check LD_LIBRARY_PATH)"
        );
        let _ = writeln!(std::io::stderr(), "kernels_compile: {what} SKIPPED, no libnvrtc (scripts/test.sh installs it; FUSE_TEST_NVRTC=1 makes this a failure)");
        return None;
    }
    let ptxas = ptxas();
    if ptxas.is_none() {
        assert!(!required, "FUSE_TEST_NVRTC=1 but no ptxas (set FUSE_PTXAS)");
        let _ = writeln!(std::io::stderr(), "kernels_compile: {what} SKIPPED, no ptxas (set FUSE_PTXAS)");
    }
    ptxas
}

fn ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FUSE_PTXAS").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("ptxas")).find(|p| p.is_file())
}

/// `FUSE_PTX_DUMP=DIR`: every PTX the tests compile is also written to DIR, and every kernel is compiled with
/// all of its define sets (not one in turn), so that two trees' dumps can be compared after a change to the
/// kernel sources (`scripts`-free: `diff -r`, ignoring the `.loc` line info that `-lineinfo` adds).
fn ptx_dump_dir() -> Option<PathBuf> {
    std::env::var_os("FUSE_PTX_DUMP").filter(|d| !d.is_empty()).map(PathBuf::from)
}

/// Writes `ptx` to the dump directory as `NAME.ARCH.HASH.ptx` (HASH: FNV-1a of the defines, which head the
/// file as a comment), so that the same kernel, defines and arch land in the same file in every tree, and the
/// kernel's source beside it as `NAME.cu`.
fn dump_ptx(
    dir: &std::path::Path,
    spec: &KernelSpec,
    defines: &[String],
    arch: &str,
    ptx: &str,
) -> std::result::Result<(), String> {
    let joined = defines.join(" ");
    let hash = joined.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let write = |file: String, text: &str| {
        let path = dir.join(file);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write(format!("{}.cu", spec.name), &spec.source)?;
    write(format!("{}.{arch}.{hash:016x}.ptx", spec.name), &format!("// defines: {joined}\n{ptx}"))
}

/// Compiles and assembles one kernel variant for one arch; `Err` says what went wrong.
fn check(
    spec: &KernelSpec,
    defines: &[String],
    arch: &str,
    ptxas: &std::path::Path,
) -> std::result::Result<PtxasReport, String> {
    let ptx = compile_ptx(&spec.name, &spec.source, defines, arch).map_err(|e| format!("{defines:?}: {e}"))?;
    if let Some(dir) = ptx_dump_dir() {
        dump_ptx(&dir, spec, defines, arch, &ptx)?;
    }
    if !ptx.contains(&format!(".entry {}(", spec.name)) {
        return Err(format!("{arch} {defines:?}: the PTX has no entry `{}`", spec.name));
    }
    let report = ptxas_check(ptxas, &spec.name, &ptx, arch).map_err(|e| format!("{defines:?}: {e}"))?;
    if report.spill_stores > 0 || report.spill_loads > 0 {
        return Err(format!("{arch} {defines:?}: register spills\n{}", report.log));
    }
    Ok(report)
}

#[test]
fn every_generated_kernel_compiles_and_assembles_without_spills() {
    let kernels = kernels();
    check_coverage(&kernels);
    let Some(ptxas) = tools_or_skip("generated kernels") else { return };
    // A compilation takes ~0.2 s: every variant for the kernels of FULL_MATRIX, one (in turn) for the others.
    let jobs: Vec<(usize, Vec<String>, &str)> = kernels
        .iter()
        .enumerate()
        .flat_map(|(i, (g, spec))| {
            let all = variants(g, spec);
            // Every wgmma config (each takes seconds) only for the MLP block, the shape it is for.
            let full = ptx_dump_dir().is_some()
                || (FULL_MATRIX.contains(&g.name.as_str()) && (spec.role != Role::Wgmma || g.name == "ffn_block"));
            let chosen = if full { all } else { vec![all[i % all.len()].clone()] };
            // The wgmma template is for sm_90a alone (the runtime offers it on sm_90 GPUs only).
            let archs: &[&'static str] = if spec.role == Role::Wgmma { &WGMMA_ARCHS } else { &ARCHS };
            chosen.into_iter().flat_map(move |d| archs.iter().map(move |&arch| (i, d.clone(), arch)))
        })
        .collect();
    let started = Instant::now();
    let next = Mutex::new(0usize);
    let failures = Mutex::new(Vec::<String>::new());
    // The most registers and stack any kernel needed, and which: a trend worth seeing in CI logs.
    let most = Mutex::new((0u32, 0u64, String::new()));
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let job = {
                    let mut n = next.lock().unwrap_or_else(|e| e.into_inner());
                    *n += 1;
                    jobs.get(*n - 1)
                };
                let Some((i, defines, arch)) = job else { break };
                let spec = &kernels[*i].1;
                match check(spec, defines, arch, &ptxas) {
                    Ok(report) => {
                        let mut most = most.lock().unwrap_or_else(|e| e.into_inner());
                        if report.registers > most.0 {
                            *most = (report.registers, most.1, format!("{} {arch} {defines:?}", spec.name));
                        }
                        most.1 = most.1.max(report.stack_frame_bytes);
                    }
                    Err(e) => failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("kernel `{}` for {arch}: {e}", spec.name)),
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    let (registers, stack, heaviest) = most.into_inner().unwrap_or_else(|e| e.into_inner());
    eprintln!("kernels_compile: at most {registers} registers ({heaviest}), at most {stack} bytes of stack frame");
    eprintln!(
        "kernels_compile: {} kernels, {} compilations with NVRTC {:?} and {} in {:.1}s, {} failed",
        kernels.len(),
        jobs.len(),
        nvrtc_version(),
        ptxas.display(),
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} kernel compilations failed:\n{}", failures.len(), failures.join("\n\n"));
}

/// The hand-written model-op kernels (`fuse::ir::codegen::ModelKernel`): each in every dtype it reads (cat
/// also u32) for sm_80 and sm_90, attention for each head dimension it is built for, without spills.
#[test]
fn every_model_kernel_compiles_and_assembles_without_spills() {
    use fuse::ir::codegen::{
        ModelKernel, ATTENTION_DECODE_CLUSTER_DEFINE, ATTENTION_DECODE_EARLY_DEFINE, ATTENTION_DECODE_ROPE_DEFINE,
        ATTENTION_DECODE_ROPE_VECTOR_DEFINE, ATTENTION_DECODE_VECTOR_DEFINE, ATTENTION_HEAD_DIMS,
    };
    let Some(ptxas) = tools_or_skip("model kernels") else { return };
    let mut failures = Vec::new();
    // FUSE_TEST_MODEL_KERNEL=sort checks only the kernels whose name holds "sort" (while one is written).
    let only = std::env::var("FUSE_TEST_MODEL_KERNEL").unwrap_or_default();
    for kernel in ModelKernel::ALL.into_iter().filter(|k| k.name().contains(only.as_str())) {
        let with_blocks: Vec<DType> = DType::ALL.iter().chain(&DType::QUANTIZED).copied().collect();
        let dtypes: &[DType] = match kernel {
            // Copies of bits: u32 too.
            ModelKernel::Cat | ModelKernel::Gather => &[DType::F32, DType::F16, DType::BF16, DType::U32],
            // The embedding of a quantized table decodes its blocks; dequantize reads blocks only.
            ModelKernel::Embedding => &with_blocks,
            ModelKernel::Dequantize => &DType::QUANTIZED,
            _ => &DType::ALL,
        };
        for &dtype in dtypes {
            let spec = KernelSpec {
                name: kernel.name().to_string(),
                source: kernel.source().into(),
                kind: KernelKind::Pointwise,
                group: 0,
                role: Role::Whole,
                inputs: Vec::new(),
                prologue: None,
                outputs: Vec::new(),
                nodes: Vec::new(),
            };
            let variants: Vec<Vec<String>> = match kernel {
                ModelKernel::Attention => ATTENTION_HEAD_DIMS
                    .iter()
                    .map(|d| [ModelKernel::defines(dtype), vec![format!("-DFUSE_ATTENTION_D={d}")]].concat())
                    .collect(),
                // Plain, and with rope and the cache appends fused in.
                ModelKernel::AttentionDecode => ATTENTION_HEAD_DIMS
                    .iter()
                    .flat_map(|d| {
                        let plain = [ModelKernel::defines(dtype), vec![format!("-DFUSE_ATTENTION_D={d}")]].concat();
                        let with = |defines: &[&str]| {
                            [plain.clone(), defines.iter().map(|d| d.to_string()).collect()].concat()
                        };
                        [
                            plain.clone(),
                            with(&[ATTENTION_DECODE_ROPE_DEFINE]),
                            with(&[ATTENTION_DECODE_CLUSTER_DEFINE]),
                            with(&[ATTENTION_DECODE_ROPE_DEFINE, ATTENTION_DECODE_CLUSTER_DEFINE]),
                            // SmolLM2's decode: rope fused, passes of its 3 rows a kv head, vector loads, cluster merge.
                            with(&[
                                ATTENTION_DECODE_ROPE_DEFINE,
                                "-DFUSE_DECODE_PASS_ROWS=3",
                                ATTENTION_DECODE_VECTOR_DEFINE,
                                ATTENTION_DECODE_CLUSTER_DEFINE,
                                ATTENTION_DECODE_EARLY_DEFINE,
                                "-DFUSE_DECODE_EXACT_D=1",
                            ]),
                            // The same with the rope in registers, and that without clusters and early loads.
                            with(&[
                                ATTENTION_DECODE_ROPE_DEFINE,
                                "-DFUSE_DECODE_PASS_ROWS=3",
                                ATTENTION_DECODE_VECTOR_DEFINE,
                                ATTENTION_DECODE_CLUSTER_DEFINE,
                                ATTENTION_DECODE_EARLY_DEFINE,
                                "-DFUSE_DECODE_EXACT_D=1",
                                ATTENTION_DECODE_ROPE_VECTOR_DEFINE,
                            ]),
                            with(&[
                                ATTENTION_DECODE_ROPE_DEFINE,
                                ATTENTION_DECODE_VECTOR_DEFINE,
                                "-DFUSE_DECODE_EXACT_D=1",
                                ATTENTION_DECODE_ROPE_VECTOR_DEFINE,
                            ]),
                            // Row blocks (a one-launch step's tasks): 2 groups of one row, a kv head's rows in 2 blocks,
                            // with the rope in registers and without.
                            with(&[
                                ATTENTION_DECODE_ROPE_DEFINE,
                                "-DFUSE_DECODE_PASS_ROWS=1",
                                "-DFUSE_DECODE_ROW_GROUPS=2",
                                "-DFUSE_DECODE_ROW_BLOCKS=2",
                                ATTENTION_DECODE_VECTOR_DEFINE,
                                "-DFUSE_DECODE_EXACT_D=1",
                                ATTENTION_DECODE_ROPE_VECTOR_DEFINE,
                                "-DFUSE_DECODE_MAX_SPLITS=32",
                            ]),
                            with(&[
                                ATTENTION_DECODE_ROPE_DEFINE,
                                "-DFUSE_DECODE_PASS_ROWS=1",
                                "-DFUSE_DECODE_ROW_GROUPS=2",
                                "-DFUSE_DECODE_ROW_BLOCKS=4",
                            ]),
                            // Room for 32 splits (a launch of at most 32: the host's held_splits), and 64.
                            with(&[ATTENTION_DECODE_ROPE_DEFINE, "-DFUSE_DECODE_MAX_SPLITS=32"]),
                            with(&[ATTENTION_DECODE_CLUSTER_DEFINE, "-DFUSE_DECODE_MAX_SPLITS=64"]),
                            // Row groups (the host's choice for 2 to 4 rows a kv head): SmolLM2's 3 rows side by side, 4
                            // rows in 2 groups of 2 loading early, 2 rows with element-by-element loads.
                            with(&[
                                ATTENTION_DECODE_ROPE_DEFINE,
                                "-DFUSE_DECODE_PASS_ROWS=1",
                                "-DFUSE_DECODE_ROW_GROUPS=3",
                                ATTENTION_DECODE_VECTOR_DEFINE,
                                ATTENTION_DECODE_CLUSTER_DEFINE,
                                ATTENTION_DECODE_EARLY_DEFINE,
                                "-DFUSE_DECODE_EXACT_D=1",
                                ATTENTION_DECODE_ROPE_VECTOR_DEFINE,
                            ]),
                            with(&[
                                "-DFUSE_DECODE_PASS_ROWS=2",
                                "-DFUSE_DECODE_ROW_GROUPS=2",
                                ATTENTION_DECODE_VECTOR_DEFINE,
                                ATTENTION_DECODE_EARLY_DEFINE,
                            ]),
                            with(&[
                                "-DFUSE_DECODE_PASS_ROWS=1",
                                "-DFUSE_DECODE_ROW_GROUPS=2",
                                ATTENTION_DECODE_ROPE_DEFINE,
                            ]),
                            // Plain attention_len loading early (passes of at most 3 rows).
                            with(&[
                                ATTENTION_DECODE_VECTOR_DEFINE,
                                "-DFUSE_DECODE_PASS_ROWS=2",
                                ATTENTION_DECODE_EARLY_DEFINE,
                            ]),
                            // A one-launch step's form: 2 row groups, a split floor and one split for short
                            // sequences (FUSE_STEP_SPLIT_KEYS, FUSE_STEP_ONE_SPLIT_KEYS).
                            with(&[
                                ATTENTION_DECODE_ROPE_DEFINE,
                                "-DFUSE_DECODE_PASS_ROWS=2",
                                "-DFUSE_DECODE_ROW_GROUPS=2",
                                ATTENTION_DECODE_VECTOR_DEFINE,
                                ATTENTION_DECODE_EARLY_DEFINE,
                                "-DFUSE_DECODE_EXACT_D=1",
                                ATTENTION_DECODE_ROPE_VECTOR_DEFINE,
                                "-DFUSE_DECODE_SPLIT_KEYS=128",
                                "-DFUSE_DECODE_ONE_SPLIT_KEYS=192",
                            ]),
                        ]
                    })
                    .collect(),
                ModelKernel::Dequantize => DType::ALL
                    .iter()
                    .map(|&out| {
                        let code = codegen::float_dtype_code(out).expect("a float dtype");
                        [ModelKernel::defines(dtype), vec![format!("-DFUSE_DEQUANT_OUT={code}")]].concat()
                    })
                    .collect(),
                _ => vec![ModelKernel::defines(dtype)],
            };
            for (defines, arch) in variants.iter().flat_map(|d| ARCHS.map(|arch| (d, arch))) {
                match check(&spec, defines, arch, &ptxas) {
                    Ok(report) => eprintln!(
                        "kernels_compile: {} {defines:?} {arch}: {} registers, {} bytes of stack",
                        kernel.name(),
                        report.registers,
                        report.stack_frame_bytes
                    ),
                    Err(e) => failures.push(format!("{} {defines:?} {arch}: {e}", kernel.name())),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} model kernel compilations failed:\n{}", failures.len(), failures.join("\n\n"));
}

/// A kernel that calls every helper of the shared CUDA headers (`CUDA_PRELUDE`, `SM90_HEADER` with
/// `-DFUSE_CHECK_SM90=1`), never launched: an inline helper that no kernel calls emits no PTX, so this is
/// where ptxas sees the ones fuse's own kernels do not use yet (a model crate's kernel may).
const HEADERS_CHECK: &str = r#"
extern "C" __global__ void __launch_bounds__(256) fuse_headers_check(float* out, const float* in,
                                                                      const unsigned short* half, const void* map) {
  __shared__ __align__(16) float tile[256];
  __shared__ float red[8];
  fuse_grid_wait();
  fuse_grid_release();
  const unsigned t = threadIdx.x;
  const unsigned short h = half[t];
  float v = fuse_bf16_to_f32(h) + fuse_f16_to_f32(h) + fuse_round_f16(in[t]) + fuse_round_bf16(in[t]) +
            fuse_unpack<FUSE_F16>(h) + fuse_unpack<FUSE_BF16>(h) + fuse_sigmoid(in[t]) + fuse_ld_cg(in + t);
  const unsigned w = fuse_pack2_cvt<FUSE_BF16>(v, -v) ^ fuse_pack2_cvt<FUSE_F16>(v, 2.0f * v);
  v += fuse_bf16x2_lo(w) + fuse_bf16x2_hi(w);
  const unsigned bits = fuse_f32_to_bf16(v) ^ fuse_f32_to_bf16_cvt(v) ^ fuse_f32_to_f16(v) ^
                        fuse_pack<FUSE_F16>(v) ^ fuse_pack<FUSE_BF16>(v);
  const unsigned dst = fuse_smem_addr(tile + (t % 64) * 4);
  fuse_cp_async16<0>(dst, in + 4 * t, 16);
  fuse_cp_async16<1>(dst, in + 4 * t, 16);
  fuse_cp_async16<2>(dst, in + 4 * t, 0);
  fuse_cp_async_commit();
  fuse_cp_async_wait<0>();
  __syncthreads();
  float c[4] = {tile[t], v, 0.0f, 0.0f};
  fuse_mma_m16n8k16<FUSE_BF16>(c, w, bits, w, bits, w, bits);
  fuse_mma_m16n8k16<FUSE_F16>(c, w, bits, w, bits, w, bits);
  v = fuse_warp_sum(c[0]) + fuse_warp_max(c[1]) + fuse_block_sum(c[2], red) + fuse_block_max(c[3], red);
  v += fuse_warp_min(c[0]) + fuse_block_min(c[1], red) + fuse_max(c[2], c[3]) + fuse_min(c[0], c[1]);
  // blocks.cuh: every block type decoded, eight values and one.
  const unsigned char* qb = (const unsigned char*)half;
  float q8[8];
  fuse_q_decode8<FUSE_Q4_K>(qb, 8 * t, q8);
  v += q8[0] + q8[7] + fuse_q_value<FUSE_Q4_0>(qb, t) + fuse_q_value<FUSE_Q4_1>(qb, t) + fuse_q_value<FUSE_Q5_0>(qb, t) +
       fuse_q_value<FUSE_Q5_1>(qb, t) + fuse_q_value<FUSE_Q8_0>(qb, t) + fuse_q_value<FUSE_Q5_K>(qb, t) +
       fuse_q_value<FUSE_Q6_K>(qb, t);
  v += (float)(fuse_q_values<FUSE_Q8_0>() + fuse_q_bytes<FUSE_Q5_K>() + fuse_q_align<FUSE_Q4_1>() + fuse_q_has_offset<FUSE_Q4_K>());
  const FuseQBytes8 qq = fuse_q_load8<2>(qb + 2 * t);
  unsigned sc, mn;
  fuse_q_scale_min_k4(qb, t & 7, sc, mn);
  float qi[8], qscale, qoffset;
  fuse_q_ints8<FUSE_Q5_0>(qb, 8 * (t & 3), qi, qscale, qoffset);
  v += fuse_q_byte_int<3>(qq.lo + sc + mn, 8) + (float)fuse_q_spread4(qq.hi) + fuse_q_half(qb) + qi[1] * qscale + qoffset;
  // The streaming units (the quantized skinny template's reads): every type, one run's integers.
  const FuseQUnit u4 = fuse_q_unit<FUSE_Q4_K>(qb, t & 15), u6 = fuse_q_unit<FUSE_Q6_K>(qb, t & 15);
  const FuseQUnit u0 = fuse_q_unit<FUSE_Q5_1>(qb, t & 1), u8 = fuse_q_unit<FUSE_Q8_0>(qb, t & 1);
  fuse_q_run_ints<FUSE_Q6_K>(u6, t & 1, qi);
  fuse_q_scale_min_k4w(u4.lo[0], u4.hi[1], u0.lo[1], t & 7, sc, mn);
  v += qi[2] + u4.scale[1] + u0.offset[0] + u8.scale[1] + (float)(sc + mn + fuse_q_units<FUSE_Q5_K>() + fuse_q_run_gap<FUSE_Q4_0>() +
       fuse_q_unit_start<FUSE_Q4_1>(t & 1) + fuse_q_bias<FUSE_Q5_0>());
#if FUSE_CHECK_SM90
  __shared__ __align__(8) unsigned long long bar;
  const unsigned b = fuse_smem_addr(&bar);
  if (t == 0) {
    fuse_mbar_init(b, 1);
    fuse_mbar_init_fence();
  }
  fuse_cluster_sync();
  if (t == 0) {
    fuse_fence_proxy_async();
    fuse_mbar_expect_tx(b, 2048);
    fuse_bulk_copy(fuse_smem_addr(tile), in, 512, b);
    fuse_tma_load_2d(fuse_smem_addr(tile + 128), map, 0, 0, b);
    fuse_tma_load_2d_multicast(fuse_smem_addr(tile + 128), map, 0, 0, b, 3);
    fuse_bulk_prefetch_l2(in + 256, 4096);
  }
  if (t == 1) fuse_mbar_arrive(b);
  if (!fuse_mbar_try_wait(b, 0)) fuse_mbar_wait(b, 0);
  const unsigned peer = fuse_cluster_rank() ^ 1u;
  const unsigned remote = fuse_cluster_map(fuse_smem_addr(tile + t), peer), remote_bar = fuse_cluster_map(b, peer);
  v += fuse_cluster_load_f32(remote);
  fuse_st_async_b32(remote, __float_as_uint(v), remote_bar);
  fuse_st_async_v4(fuse_cluster_map(fuse_smem_addr(tile + 4 * (t % 64)), peer), 1u, 2u, 3u, 4u, remote_bar);
  fuse_mbar_arrive_remote(b, peer);
  fuse_cluster_sync();
  if (t == 0) fuse_mbar_inval(b);
#endif
  out[t] = v;
}
"#;

#[test]
fn every_helper_of_the_shared_headers_compiles_and_assembles() {
    use fuse::ir::codegen::{CUDA_PRELUDE, SM90_HEADER};
    // Every helper the headers define is called above (a new one must be added there).
    // (A macro's line is no helper: the prelude's FUSE_KERNEL expands to `__device__` in a one-launch step.)
    let helpers = [CUDA_PRELUDE, SM90_HEADER].into_iter().flat_map(str::lines);
    for line in helpers.filter(|l| l.contains("__device__") && !l.trim_start().starts_with('#')) {
        let head = line.split_once('(').map_or(line, |(head, _)| head);
        let helper = head.split_whitespace().last().unwrap_or_default();
        assert!(
            HEADERS_CHECK.contains(&format!("{helper}(")) || HEADERS_CHECK.contains(&format!("{helper}<")),
            "HEADERS_CHECK does not call `{helper}`"
        );
    }
    let Some(ptxas) = tools_or_skip("shared headers") else { return };
    let source = [CUDA_PRELUDE, SM90_HEADER, HEADERS_CHECK].concat();
    let spec = KernelSpec {
        name: "fuse_headers_check".to_string(),
        source: source.into(),
        kind: KernelKind::Pointwise,
        group: 0,
        role: Role::Whole,
        inputs: Vec::new(),
        prologue: None,
        outputs: Vec::new(),
        nodes: Vec::new(),
    };
    let sm90 = vec!["-DFUSE_CHECK_SM90=1".to_string()];
    for (defines, arch) in [(vec![], "sm_80"), (vec![], "sm_90"), (sm90, "sm_90a")] {
        if let Err(e) = check(&spec, &defines, arch, &ptxas) {
            panic!("the shared headers for {arch}: {e}");
        }
    }
}
