//! What NVRTC and ptxas report: the error of a failed compile, and `ptxas -v`'s resource usage. Free of
//! cudarc, so that both builds share it: the CUDA backend's `cuda/compile/nvrtc.rs` and, without the `cuda`
//! feature, `cuda_off.rs` offer these same types.

use std::fmt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Why NVRTC did not produce code. `Display` shows the compiler log and the numbered source.
#[derive(Clone, Debug)]
pub struct NvrtcError {
    pub kernel: String,
    /// What failed: `load` (no libnvrtc), `create`, `compile`, `output`.
    pub stage: &'static str,
    pub message: String,
    /// NVRTC's log (errors and warnings with `name.cu(line)` positions); empty before compilation.
    pub log: String,
    /// The source with line numbers, to read the log against.
    pub numbered_source: String,
}

impl fmt::Display for NvrtcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nvrtc: {} of kernel `{}` failed: {}", self.stage, self.kernel, self.message)?;
        if !self.log.trim().is_empty() {
            write!(f, "\n{}", self.log.trim_end())?;
        }
        if !self.numbered_source.is_empty() {
            write!(f, "\n--- source of `{}` ---\n{}", self.kernel, self.numbered_source)?;
        }
        Ok(())
    }
}

impl std::error::Error for NvrtcError {}

/// What `ptxas -v` says about one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxasReport {
    pub registers: u32,
    pub spill_stores: u64,
    pub spill_loads: u64,
    pub stack_frame_bytes: u64,
    /// ptxas's whole output.
    pub log: String,
}

/// Assembles `ptx` for `arch` with the `ptxas` at `ptxas` (`-v`), and reads registers, stack and spills
/// from its report. Errors carry ptxas's output.
pub fn ptxas_check(ptxas: &Path, name: &str, ptx: &str, arch: &str) -> Result<PtxasReport, String> {
    // A file per call: callers check the same kernel with other defines concurrently.
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("fuse-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let input = dir.join(format!("{name}.{arch}.{call}.ptx"));
    let output = dir.join(format!("{name}.{arch}.{call}.cubin"));
    std::fs::write(&input, ptx).map_err(|e| format!("cannot write {}: {e}", input.display()))?;
    let run = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
    let log = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    if !run.status.success() {
        return Err(format!("ptxas -arch={arch} failed on `{name}` ({}):\n{log}", run.status));
    }
    parse_ptxas_report(&log).ok_or_else(|| format!("no resource usage for `{name}` in the ptxas output:\n{log}"))
}

/// Reads `N bytes stack frame, N bytes spill stores, N bytes spill loads` and `Used N registers`.
fn parse_ptxas_report(log: &str) -> Option<PtxasReport> {
    let number_before = |line: &str, what: &str| -> Option<u64> {
        let at = line.find(what)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    let mut report =
        PtxasReport { registers: 0, spill_stores: 0, spill_loads: 0, stack_frame_bytes: 0, log: log.to_string() };
    let mut seen_registers = false;
    for line in log.lines() {
        if let Some(stack) = number_before(line, "bytes stack frame") {
            report.stack_frame_bytes = report.stack_frame_bytes.max(stack);
            report.spill_stores += number_before(line, "bytes spill stores").unwrap_or(0);
            report.spill_loads += number_before(line, "bytes spill loads").unwrap_or(0);
        }
        if let Some(at) = line.find("Used ") {
            let registers = line[at + 5..].split_whitespace().next().and_then(|n| n.parse::<u32>().ok());
            if let Some(r) = registers {
                report.registers = report.registers.max(r);
                seen_registers = true;
            }
        }
    }
    seen_registers.then_some(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_ptxas_report() {
        let log = "ptxas info    : 0 bytes gmem\nptxas info    : Compiling entry function 'k' for 'sm_90'\n\
                   ptxas info    : Function properties for k\n    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
                   ptxas info    : Used 40 registers, used 0 barriers, 432 bytes cmem[0]\n";
        let r = parse_ptxas_report(log).expect("a report");
        assert_eq!((r.registers, r.spill_stores, r.spill_loads, r.stack_frame_bytes), (40, 4, 12, 8));
        assert_eq!(parse_ptxas_report("ptxas fatal   : something"), None);
    }
}
