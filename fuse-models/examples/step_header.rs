//! Writes the one-launch decode step's preamble (`StepLayout::preamble`: the generated layout header, fuse's
//! CUDA prelude and sm_90 header, then the kernel's own helpers; what its CUDA files include first) for
//! SmolLM2-135M's shapes, for the nvcc harness in benches/kernels/cluster_step/:
//!
//! ```text
//! cargo run -p fuse-models --example step_header -- OUT.h [--max-positions N]
//! ```
//! `--max-positions` (default: the library's, `STEP_MAX_POSITIONS`) sets the positions the kernel holds.

use fuse_models::llama::{Config, StepLayout, StepShape, STEP_MAX_POSITIONS};

fn main() {
    if let Err(e) = run() {
        eprintln!("step_header: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args.next().ok_or("usage: step_header OUT.h [--max-positions N]")?;
    let mut max_positions = STEP_MAX_POSITIONS;
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--max-positions" => {
                max_positions = value.parse().map_err(|_| format!("--max-positions: `{value}` is not a count"))?
            }
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    let layout = StepLayout::new(StepShape { max_positions, ..StepShape::of(&Config::smollm2_135m()) })?;
    std::fs::write(&out, layout.preamble()).map_err(|e| format!("{out}: {e}"))?;
    eprintln!(
        "step_header: {out}: SmolLM2-135M, {max_positions} positions, {} bytes of shared memory a block",
        layout.smem.bytes
    );
    Ok(())
}
