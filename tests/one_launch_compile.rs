//! A one-launch step made of real kernels (issue 33: `fuse::ir::codegen::one_launch_source`) compiles with
//! NVRTC for sm_90 and assembles with ptxas: the kernels of a `#[fuse]` decoder block (rms_norm, the skinny
//! GEMMs with their prologue and epilogues; bf16, Q4_1, Q4_K and Q8_0 weights), the embedding, the decode
//! attention with rope and the cache append (in the form a recorded step takes), its split combine and the
//! argmax, each in its namespace with its defines. Registers and spills are printed, not bounded: with the
//! 8-bit quantized bodies among the tasks the one kernel spills (188 bytes stored at 4daf334), where each
//! kernel alone does not. No GPU needed; skipped
//! visibly without NVRTC (`FUSE_TEST_NVRTC=1` makes that a failure).

use std::io::Write as _;

#[path = "common/fused_fns.rs"]
mod fused_fns;
use fused_fns::*;

use fuse::ir::codegen::{self, InputKind, ModelKernel, Role, TaskKernel};
use fuse::ir::DType;
use fuse_runtime::{compile_ptx, nvrtc_available, ptxas_check};
use std::path::PathBuf;

fn ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FUSE_PTXAS").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("ptxas")).find(|p| p.is_file())
}

#[test]
fn a_step_of_a_blocks_kernels_compiles_as_one_launch() {
    let required = std::env::var("FUSE_TEST_NVRTC").is_ok_and(|v| v == "1");
    let (true, Some(ptxas)) = (nvrtc_available(), ptxas()) else {
        assert!(!required, "FUSE_TEST_NVRTC=1 but NVRTC or ptxas is missing");
        let _ = writeln!(std::io::stderr(), "one_launch_compile: SKIPPED, no NVRTC or ptxas");
        return;
    };
    let f = ffn_block_fused();
    let g = f.graph().expect("traces");
    let plan = f.plan(fuse::Fusion::On).expect("plans");
    let specs = codegen::plan_kernels(g, plan);
    let mut kernels: Vec<(String, String, Vec<String>)> = Vec::new();
    for spec in &specs {
        let slots = vec![InputKind::Tensor(DType::BF16); spec.inputs.len()];
        let base = codegen::defines(spec, &slots, &vec![DType::BF16; spec.outputs.len()]);
        let sets: Vec<Vec<String>> = match spec.role {
            Role::Skinny => {
                let pro: Vec<String> = spec.prologue.iter().map(|_| "-DFUSE_GEMM_PRO=1".to_string()).collect();
                // The fixed rule's quantized bodies at one row: f32 products of Q4_1 blocks, 8-bit products of
                // Q4_K blocks in registers, and streamed through shared memory for Q8_0 (GGUF's K-quant files).
                let quant = |name: &str, w: DType| {
                    let config = codegen::QuantSkinnyConfig::by_name(name).expect("a config");
                    [base.clone(), config.defines(DType::BF16, w).expect("quantized blocks"), pro.clone()].concat()
                };
                // The dense body as a recorded step builds it: an X ring, the first weights before the wait.
                let ring = [codegen::X_RING_DEFINE, codegen::EARLY_WEIGHTS_DEFINE].map(String::from).to_vec();
                vec![
                    [base.clone(), codegen::SKINNY_CONFIGS[0].defines(DType::BF16), pro.clone(), ring].concat(),
                    quant(codegen::QUANT_SKINNY_CONFIGS[0].name, DType::Q4_1),
                    quant("x16r1", DType::Q4_K),
                    quant("x32r2s3", DType::Q8_0),
                    // The streaming body's bulk copies (FUSE_QUANT_BULK), its barriers in a task's static memory,
                    // on the host's weights (which a FUSE_STEP_PRELOAD step issues a task ahead).
                    [
                        quant("x32r2s3", DType::Q8_0),
                        [codegen::BULK_STREAM_DEFINE, codegen::EARLY_WEIGHTS_DEFINE].map(String::from).to_vec(),
                    ]
                    .concat(),
                ]
            }
            Role::Wgmma | Role::Mma => continue,
            _ => vec![base],
        };
        for defines in sets {
            kernels.push((spec.name.clone(), spec.source.to_string(), defines));
        }
    }
    let model = |k: ModelKernel, extra: &[&str]| {
        let defines = [ModelKernel::defines(DType::BF16), extra.iter().map(|d| d.to_string()).collect()].concat();
        (k.name().to_string(), k.source().to_string(), defines)
    };
    kernels.push(model(ModelKernel::Embedding, &[]));
    // The decode attention as a recorded step takes it: SmolLM2's 9 query heads over 3 key/value heads, 128
    // keys, in the form within a task's threads (2 row groups), rope and the appends fused, vector loads.
    let shape = codegen::AttentionShape { batch: 1, q_heads: 9, queries: 1, kv_heads: 3, keys: 128, d: 64 };
    let attention = codegen::attention_launch(shape, 132).within_threads(codegen::ONE_LAUNCH_MAX_TASK_THREADS);
    let mut defines = attention.defines(DType::BF16);
    defines.extend([codegen::ATTENTION_DECODE_ROPE_DEFINE, codegen::ATTENTION_DECODE_VECTOR_DEFINE].map(String::from));
    kernels.push((
        ModelKernel::AttentionDecode.name().to_string(),
        ModelKernel::AttentionDecode.source().to_string(),
        defines,
    ));
    kernels.push(model(ModelKernel::AttentionCombine, &["-DFUSE_ATTENTION_D=64"]));
    kernels.push(model(ModelKernel::Argmax, &[]));
    let tasks: Vec<TaskKernel<'_>> =
        kernels.iter().map(|(name, source, defines)| TaskKernel { name, source, defines }).collect();
    let source = codegen::one_launch_source(&tasks, 256).expect("every kernel can be a task");
    // The launch records and the tasks' arguments read from global memory, and copied into shared memory
    // first (the runtime's defines, the largest argument it gives); with those, the builds that time its tasks
    // (FUSE_STEP_TRACE) and fetch each block's next task's weights into L2 (FUSE_STEP_PREFETCH).
    let shared_table = format!("-DFUSE_STEP_LAUNCHES={}", codegen::ONE_LAUNCH_SHARED_LAUNCHES);
    let params = format!("-DFUSE_STEP_PARAM_WORDS={}", codegen::ONE_LAUNCH_MAX_PARAM_WORDS);
    let shared = vec![shared_table, params];
    let with = |define: &str| [shared.clone(), vec![define.to_string()]].concat();
    let (traced, prefetched) = (with("-DFUSE_STEP_TRACE"), with("-DFUSE_STEP_PREFETCH"));
    // Two step blocks a multiprocessor (FUSE_STEP_BLOCKS_PER_SM): registers capped at 128; the next task's first
    // weight stages issued a task ahead (FUSE_STEP_PRELOAD); the task bodies inlined into the dispatch
    // (FUSE_STEP_INLINE), not called.
    let (two_blocks, preloaded) = (with("-DFUSE_STEP_MIN_BLOCKS=2"), with("-DFUSE_STEP_PRELOAD"));
    let inlined = with("-DFUSE_STEP_INLINE_TASKS");
    let mut prefetches = Vec::new();
    let mut bulk_copies = Vec::new();
    let mut registers = Vec::new();
    let mut spills = Vec::new();
    for defines in [vec![], shared, traced, prefetched, two_blocks, preloaded, inlined] {
        let ptx = compile_ptx(codegen::ONE_LAUNCH_ENTRY, &source, &defines, "sm_90").expect("the step compiles");
        // `FUSE_PTX_DUMP=DIR` (as kernels_compile): the first build's PTX to DIR/one_launch_step.ptx, for
        // `ptxas -v` a function at a time.
        if let Some(dir) = std::env::var_os("FUSE_PTX_DUMP").filter(|d| !d.is_empty() && defines.is_empty()) {
            let path = std::path::Path::new(&dir).join("one_launch_step.ptx");
            std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &ptx)).expect("the dump is written");
        }
        assert!(ptx.contains(&format!(".entry {}(", codegen::ONE_LAUNCH_ENTRY)), "no entry");
        prefetches.push(ptx.matches("prefetch.global.L2").count());
        bulk_copies.push(ptx.matches("cp.async.bulk.shared").count());
        let report = ptxas_check(&ptxas, codegen::ONE_LAUNCH_ENTRY, &ptx, "sm_90").expect("the step assembles");
        registers.push(report.registers);
        spills.push(report.spill_stores);
        eprintln!(
            "one_launch_compile {defines:?}: {} task kernels, {} registers, {} bytes of stack, spills {}/{}",
            tasks.len(),
            report.registers,
            report.stack_frame_bytes,
            report.spill_stores,
            report.spill_loads
        );
    }
    // The skinny kernels' own fuse_task_prefetch is found (by argument-dependent lookup), not the no-op.
    assert!(prefetches[3] > prefetches[1], "L2 prefetches without and with FUSE_STEP_PREFETCH: {prefetches:?}");
    assert!(registers[4] <= 128, "two blocks of 256 threads a multiprocessor: {registers:?}");
    // Inlined, the bodies are not held to disjoint bands of registers (the prelude's FUSE_KERNEL): fewer spills.
    assert!(spills[6] < spills[1], "spill stores called and inlined: {spills:?}");
    // The streaming body's own fuse_task_preload is found too: its copies beside the body's.
    assert!(bulk_copies[5] > bulk_copies[1], "bulk copies without and with FUSE_STEP_PRELOAD: {bulk_copies:?}");
    // So are the quantized bodies' (each body's share of rows, at most the runtime's bytes a block), in a step
    // of those kernels alone.
    let capped: Vec<(&str, &str, Vec<String>)> = tasks
        .iter()
        .filter(|t| t.defines.iter().any(|d| d.contains("FUSE_SK_WQ")))
        .map(|t| (t.name, t.source, [t.defines, &[format!("{}=198528", codegen::TASK_PREFETCH_BYTES_DEFINE)]].concat()))
        .collect();
    let quantized: Vec<TaskKernel<'_>> =
        capped.iter().map(|(name, source, defines)| TaskKernel { name, source, defines }).collect();
    assert!(quantized.len() >= 3, "the three quantized bodies, of each product: {}", quantized.len());
    let source = codegen::one_launch_source(&quantized, 256).expect("every kernel can be a task");
    let counts: Vec<usize> = [vec![], vec!["-DFUSE_STEP_PREFETCH".to_string()]]
        .iter()
        .map(|defines| compile_ptx(codegen::ONE_LAUNCH_ENTRY, &source, defines, "sm_90").expect("compiles"))
        .map(|ptx| ptx.matches("prefetch.global.L2").count())
        .collect();
    assert!(counts[1] > counts[0], "quantized bodies' L2 prefetches without and with FUSE_STEP_PREFETCH: {counts:?}");
}
