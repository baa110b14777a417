//! The decode step of a Llama decoder at batch 1 as one launch on thread-block clusters (`decode_step/`,
//! docs/persistent-step.md): Q4_1 layer weights held in shared memory, a layer on one cluster of
//! [`DECODE_STEP_CLUSTER`] blocks, the embedding, the LM head and the argmax in the same launch. Written for
//! SmolLM2-135M's shapes (the `FUSE_STEP_*` defines). Not launched by the runtime yet:
//! `scripts/kernels/cluster_step.cu` builds the same files under nvcc, checks them against a reference and
//! times them.

/// The kernel's `extern "C"` symbol.
pub const DECODE_STEP_ENTRY: &str = "fuse_decode_step";
/// Blocks a cluster (a layer's), clusters a launch, threads a block.
pub const DECODE_STEP_CLUSTER: u32 = 16;
pub const DECODE_STEP_CLUSTERS: u32 = 7;
pub const DECODE_STEP_THREADS: u32 = 256;

/// The kernel's self-contained source: its shapes and layout, its stages, the step's ends, the kernel.
pub fn decode_step_source() -> &'static str {
    concat!(
        include_str!("decode_step/common.cuh"),
        include_str!("decode_step/stages.cuh"),
        include_str!("decode_step/head.cuh"),
        include_str!("decode_step/kernel.cu")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_agrees_with_the_constants_here() {
        let source = decode_step_source();
        assert!(source
            .contains(&format!("constexpr int CLUSTER = {DECODE_STEP_CLUSTER}, CLUSTERS = {DECODE_STEP_CLUSTERS},")));
        assert!(source.contains(&format!("#define FUSE_STEP_THREADS {DECODE_STEP_THREADS}")));
        assert!(source
            .contains(&format!("extern \"C\" __global__ void __launch_bounds__(THREADS, 1) {DECODE_STEP_ENTRY}(")));
        assert!(!source.contains("#include"), "the source must be self-contained");
    }
}
