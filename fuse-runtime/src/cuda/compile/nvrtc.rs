//! CUDA C to CUBIN or PTX through NVRTC (raw `cudarc::nvrtc::sys` calls), and the checks CI runs on the
//! generated kernels without a GPU: compile to PTX, assemble with `ptxas -v` (`crate::compile_reports`),
//! refuse register spills.
//!
//! libnvrtc is loaded on first use. cudarc panics when it cannot load it, so every entry point first asks
//! [`nvrtc_available`], which only probes for the library and never panics.

use super::cache;
pub use crate::compile_reports::{ptxas_check, NvrtcError, PtxasReport};

use cudarc::nvrtc::sys;
use std::ffi::{c_char, CStr, CString};
use std::sync::OnceLock;

/// `   1 | line`: the source as NVRTC's log numbers it.
fn numbered(source: &str) -> String {
    source.lines().enumerate().map(|(i, l)| format!("{:5} | {l}\n", i + 1)).collect()
}

/// Whether libnvrtc can be loaded (probed once; never panics).
pub fn nvrtc_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        // SAFETY: only tries to dlopen the candidate library names; nothing is called.
        #[cfg(feature = "cuda")]
        return std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
        // Linked (`candle-cuda`): the program would not have started without it.
        #[cfg(not(feature = "cuda"))]
        true
    })
}

/// NVRTC's (major, minor) version, or `None` without a usable libnvrtc.
pub fn nvrtc_version() -> Option<(i32, i32)> {
    if !nvrtc_available() {
        return None;
    }
    std::panic::catch_unwind(|| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers; the library is present (checked above).
        let status = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
        (status == sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
    })
    .ok()
    .flatten()
}

/// Compiles `source` for the real architecture `arch` (`sm_90`) and returns the CUBIN: from the on-disk cache
/// when an earlier process compiled the same kernel (see `cache.rs`), else from NVRTC, then stored there.
pub(crate) fn compile_cubin(name: &str, source: &str, defines: &[String], arch: &str) -> Result<Vec<u8>, NvrtcError> {
    compile_cubin_with(cache::DiskCache::global(), name, source, defines, arch)
}

/// [`compile_cubin`] with the disk cache given (tests use a temporary one).
fn compile_cubin_with(
    disk: &cache::DiskCache,
    name: &str,
    source: &str,
    defines: &[String],
    arch: &str,
) -> Result<Vec<u8>, NvrtcError> {
    // Without a version there is no libnvrtc: nothing to key on, and the compile below reports why.
    let key = nvrtc_version().map(|version| cubin_key(name, source, defines, arch, version));
    if let Some(key) = key {
        if let cache::Lookup::Hit(cubin) = disk.load(key) {
            return Ok(cubin);
        }
    }
    let program = Program::compile(name, source, defines, &format!("--gpu-architecture={arch}"))?;
    let cubin = program.output(sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN)?;
    if let Some(key) = key {
        disk.store(key, &cubin);
    }
    Ok(cubin)
}

/// Compiles `source` to PTX for the virtual architecture of `arch` (`sm_90` -> `compute_90`).
pub fn compile_ptx(name: &str, source: &str, defines: &[String], arch: &str) -> Result<String, NvrtcError> {
    let virtual_arch = arch.replacen("sm_", "compute_", 1);
    let program = Program::compile(name, source, defines, &format!("--gpu-architecture={virtual_arch}"))?;
    let mut bytes = program.output(sys::nvrtcGetPTXSize, sys::nvrtcGetPTX)?;
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    String::from_utf8(bytes).map_err(|_| program.error("output", "the PTX is not UTF-8".into(), String::new()))
}

/// Options of every compile besides the architecture and the defines (part of the cubin cache key).
/// `-lineinfo` maps SASS to source lines for compute-sanitizer and ncu; it does not change the code.
pub(crate) const FIXED_OPTIONS: &[&str] = &["-default-device", "--std=c++17", "-lineinfo"];

/// The key of a cubin: every input of the compilation that can change its bytes.
pub(crate) fn cubin_key(
    name: &str,
    source: &str,
    defines: &[String],
    arch: &str,
    nvrtc: (i32, i32),
) -> cache::CacheKey {
    let nvrtc = format!("{}.{}", nvrtc.0, nvrtc.1);
    let mut parts: Vec<&[u8]> = vec![b"fuse-cubin", env!("CARGO_PKG_VERSION").as_bytes(), nvrtc.as_bytes()];
    parts.extend(FIXED_OPTIONS.iter().map(|o| o.as_bytes()));
    parts.extend([arch.as_bytes(), name.as_bytes(), source.as_bytes()]);
    parts.extend(defines.iter().map(|d| d.as_bytes()));
    cache::CacheKey::of(&parts)
}

type SizeFn = unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult;
type BytesFn = unsafe fn(sys::nvrtcProgram, *mut c_char) -> sys::nvrtcResult;

/// A compiled NVRTC program, destroyed on drop.
struct Program {
    handle: sys::nvrtcProgram,
    name: String,
    source: String,
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the handle came from nvrtcCreateProgram and is destroyed once.
        unsafe {
            sys::nvrtcDestroyProgram(&mut self.handle);
        }
    }
}

impl Program {
    fn compile(name: &str, source: &str, defines: &[String], arch_option: &str) -> Result<Program, NvrtcError> {
        let fail = |stage, message: String| NvrtcError {
            kernel: name.to_string(),
            stage,
            message,
            log: String::new(),
            numbered_source: if stage == "load" { String::new() } else { numbered(source) },
        };
        if !nvrtc_available() {
            return Err(fail(
                "load",
                "libnvrtc was not found (install the CUDA toolkit or set LD_LIBRARY_PATH)".into(),
            ));
        }
        let c_source = CString::new(source).map_err(|_| fail("create", "the source contains a NUL byte".into()))?;
        let c_name =
            CString::new(format!("{name}.cu")).map_err(|_| fail("create", "the name contains a NUL byte".into()))?;
        let mut options: Vec<CString> = Vec::with_capacity(defines.len() + 3);
        for option in
            std::iter::once(&arch_option).chain(FIXED_OPTIONS).map(|s| s.to_string()).chain(defines.iter().cloned())
        {
            options.push(CString::new(option).map_err(|_| fail("create", "an option contains a NUL byte".into()))?);
        }
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let mut handle: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: valid NUL-terminated strings that outlive the call; no headers.
        let status = unsafe {
            sys::nvrtcCreateProgram(
                &mut handle,
                c_source.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if status != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(fail("create", describe(status)));
        }
        let program = Program { handle, name: name.to_string(), source: source.to_string() };
        let count = option_ptrs.len() as i32;
        // SAFETY: `count` valid option strings, alive for the call.
        let status = unsafe { sys::nvrtcCompileProgram(program.handle, count, option_ptrs.as_ptr()) };
        if status != sys::nvrtcResult::NVRTC_SUCCESS {
            let log = program.log();
            return Err(program.error("compile", describe(status), log));
        }
        Ok(program)
    }

    fn error(&self, stage: &'static str, message: String, log: String) -> NvrtcError {
        NvrtcError { kernel: self.name.clone(), stage, message, log, numbered_source: numbered(&self.source) }
    }

    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: a live program and a valid out-pointer.
        if unsafe { sys::nvrtcGetProgramLogSize(self.handle, &mut size) } != sys::nvrtcResult::NVRTC_SUCCESS {
            return String::new();
        }
        let mut buffer = vec![0u8; size.max(1)];
        // SAFETY: the buffer holds `size` bytes, as NVRTC asked.
        if unsafe { sys::nvrtcGetProgramLog(self.handle, buffer.as_mut_ptr().cast()) }
            != sys::nvrtcResult::NVRTC_SUCCESS
        {
            return String::new();
        }
        CStr::from_bytes_until_nul(&buffer).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// The program's CUBIN or PTX bytes, through the matching size and copy functions.
    fn output(&self, size_of: SizeFn, copy: BytesFn) -> Result<Vec<u8>, NvrtcError> {
        let mut size = 0usize;
        // SAFETY: a compiled program and a valid out-pointer.
        let status = unsafe { size_of(self.handle, &mut size) };
        if status != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(self.error("output", describe(status), self.log()));
        }
        let mut bytes = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes, as NVRTC asked.
        let status = unsafe { copy(self.handle, bytes.as_mut_ptr().cast()) };
        if status != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(self.error("output", describe(status), self.log()));
        }
        Ok(bytes)
    }
}

fn describe(status: sys::nvrtcResult) -> String {
    format!("{status:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_number_the_source() {
        let e = NvrtcError {
            kernel: "k".into(),
            stage: "compile",
            message: "NVRTC_ERROR_COMPILATION".into(),
            log: "k.cu(2): error: identifier \"y\" is undefined".into(),
            numbered_source: numbered("int x;\nint z = y;\n"),
        };
        let text = e.to_string();
        assert!(text.contains("k.cu(2): error") && text.contains("    2 | int z = y;"), "{text}");
    }

    #[test]
    fn cubins_are_looked_up_on_disk_first_and_stored_after_compiling() {
        let Some(version) = nvrtc_version() else {
            eprintln!("skipped: no NVRTC (scripts/cuda-tools.sh installs one)");
            return;
        };
        let dir = std::env::temp_dir().join(format!("fuse-nvrtc-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let disk = cache::DiskCache::at(Some(dir.clone()));
        let source = "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] = 2.0f; }";
        let defines = vec!["-DUNUSED=1".to_string()];
        let compiled = compile_cubin_with(&disk, "k", source, &defines, "sm_90").expect("compiles");
        assert!(compiled.starts_with(b"\x7fELF"), "a cubin is an ELF file");
        let key = cubin_key("k", source, &defines, "sm_90", version);
        assert_eq!(disk.load(key), cache::Lookup::Hit(compiled.clone()), "stored after compiling");
        // A stand-in entry proves the next call reads the disk instead of compiling.
        assert!(disk.store(key, b"stand-in"));
        assert_eq!(compile_cubin_with(&disk, "k", source, &defines, "sm_90").expect("cached"), b"stand-in");
        // Another define is another kernel.
        let other = compile_cubin_with(&disk, "k", source, &[], "sm_90").expect("compiles");
        assert!(other.starts_with(b"\x7fELF"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_or_present_nvrtc_never_panics() {
        let version = nvrtc_version();
        assert_eq!(version.is_some(), nvrtc_available());
        if let Some((major, _)) = version {
            assert!(major >= 11, "NVRTC {major}");
            let ptx =
                compile_ptx("k", "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] = 1.0f; }", &[], "sm_80");
            assert!(ptx.is_ok_and(|p| p.contains(".entry k")));
            let broken = compile_ptx("k", "this is not C", &[], "sm_80").expect_err("must not compile");
            assert_eq!(broken.stage, "compile");
            assert!(!broken.log.is_empty());
        } else {
            let e = compile_ptx("k", "", &[], "sm_80").expect_err("no NVRTC");
            assert_eq!(e.stage, "load");
        }
    }
}
