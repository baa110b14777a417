//! The one-launch decode step's kernel (fuse_models::llama::step_kernel) compiles with NVRTC for sm_90a
//! (clusters, bulk copies, st.async) from the source its layout generates, and assembles with `ptxas -v`
//! without register spills, for SmolLM2 as the library builds it, at 1024 positions, and for another model's
//! shapes with another eps. No GPU needed.
//!
//! Without NVRTC or ptxas the test says it skipped; with `FUSE_TEST_NVRTC=1` (scripts/test.sh sets it once
//! scripts/cuda-tools.sh has installed them) a missing tool is a failure, as in tests/kernels_compile.rs.

use fuse::{compile_ptx, nvrtc_available, ptxas_check};
use fuse_models::llama::{Config, StepLayout, StepShape};
use std::io::Write as _;
use std::path::PathBuf;

/// ptxas (`FUSE_PTXAS`, else `ptxas` on the PATH) where NVRTC and ptxas are both here; else `None` after
/// printing that the test is skipped and why.
fn tools_or_skip() -> Option<PathBuf> {
    let required = std::env::var("FUSE_TEST_NVRTC").is_ok_and(|v| v == "1");
    if !nvrtc_available() {
        assert!(!required, "FUSE_TEST_NVRTC=1 but libnvrtc cannot be loaded (run scripts/cuda-tools.sh)");
        let _ = writeln!(std::io::stderr(), "step_kernel_compiles: SKIPPED, no libnvrtc (scripts/test.sh installs it)");
        return None;
    }
    let ptxas = std::env::var_os("FUSE_PTXAS").filter(|p| !p.is_empty()).map(PathBuf::from).or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join("ptxas")).find(|p| p.is_file())
    });
    if ptxas.is_none() {
        assert!(!required, "FUSE_TEST_NVRTC=1 but no ptxas (set FUSE_PTXAS)");
        let _ = writeln!(std::io::stderr(), "step_kernel_compiles: SKIPPED, no ptxas (set FUSE_PTXAS)");
    }
    ptxas
}

#[test]
fn the_step_kernel_compiles_and_assembles_without_spills() {
    let Some(ptxas) = tools_or_skip() else { return };
    let smollm2 = StepShape::of(&Config::smollm2_135m());
    let other = StepShape {
        hidden: 512,
        heads: 8,
        kv_heads: 2,
        intermediate: 1536,
        layers: 4,
        vocab: 32_000,
        max_positions: 512,
        eps: 1e-6,
        ..smollm2
    };
    for shape in [smollm2, StepShape { max_positions: 1024, ..smollm2 }, other] {
        let layout = StepLayout::new(shape).expect("the kernel runs these shapes");
        let k = layout.kernel_source();
        let what = format!(
            "hidden {} heads {}/{} positions {} eps {}",
            shape.hidden, shape.heads, shape.kv_heads, shape.max_positions, shape.eps
        );
        let ptx =
            compile_ptx(&k.entry, &k.source, &k.defines, &k.arch).unwrap_or_else(|e| panic!("NVRTC, {what}: {e}"));
        assert!(ptx.contains(&format!(".entry {}(", k.entry)), "{what}: the PTX has no entry {}", k.entry);
        let report = ptxas_check(&ptxas, &k.entry, &ptx, &k.arch).unwrap_or_else(|e| panic!("ptxas, {what}: {e}"));
        eprintln!(
            "step_kernel_compiles: {} ({what}) {}: {} registers, {} bytes of stack, {} bytes of shared memory",
            k.entry, k.arch, report.registers, report.stack_frame_bytes, layout.smem.bytes
        );
        assert!(report.spill_stores == 0 && report.spill_loads == 0, "{what}: register spills\n{}", report.log);
    }
}
