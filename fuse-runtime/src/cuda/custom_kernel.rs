//! A user's own CUDA kernel on fuse's GPU: compiled by the same NVRTC path and cubin cache as the generated
//! kernels, launched on the device's stream in order with them. [`KernelSource`] says what to compile (a
//! source, its entry, `-D` defines, an architecture, how many 8-byte words its one parameter has),
//! [`LaunchDims`] how it launches (blocks, threads, clusters, dynamic shared memory), [`CustomKernel`] is the
//! loaded kernel with those attributes set, and [`DeviceBuffer`] is device memory for its buffers (tensors'
//! addresses come from [`CustomKernel::tensor_address`]).
//!
//! The kernel takes one parameter: a struct of 8-byte members (pointers, `long long`, `unsigned long long`,
//! `double`), passed as that many `u64` words in member order.
//!
//! ```
//! # use fuse_runtime as fuse; // the facade crate `fuse` re-exports this one
//! use fuse::custom_kernel::{CustomKernel, DeviceBuffer, KernelSource, LaunchDims};
//! use fuse::Device;
//!
//! # fn main() -> fuse::Result<()> {
//! let Device::Cuda(gpu) = Device::cuda_if_available(0) else { return Ok(()) }; // it needs a GPU
//! let device = Device::Cuda(gpu.clone());
//! let source = KernelSource {
//!     entry: "scale".into(),
//!     source: r#"
//!         struct ScaleArgs { float* x; unsigned long long n; };
//!         extern "C" __global__ void scale(const ScaleArgs a) {
//!             const unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
//!             if (i < a.n) a.x[i] *= SCALE;
//!         }"#
//!     .into(),
//!     defines: vec!["-DSCALE=2.0f".into()],
//!     arch: gpu.arch().into(), // this GPU's own; an `a` variant (sm_90a) for its architecture-specific PTX
//!     argument_words: 2,
//! };
//! let dims = LaunchDims { grid: 4, block: 256, cluster: 1, shared_bytes: 0 };
//! let kernel = CustomKernel::new(&device, &source, dims)?;
//! let x = DeviceBuffer::upload(&gpu, &vec![1.5f32; 1000])?;
//! // SAFETY: the words are ScaleArgs's members in order; x holds n = 1000 floats and outlives the launch
//! // (device memory is freed in stream order).
//! unsafe { kernel.launch(&mut [x.address(), 1000])? };
//! assert!(x.read()?.iter().all(|&v| v == 3.0));
//! # Ok(())
//! # }
//! ```

use super::compile::cache::CacheKey;
use super::device::CudaDevice;
use super::driver::driver_error;
use super::exec::kernels::fingerprint;
use super::exec::launch::{checked_address, launch_kernel, max_active_clusters, KernelDims};
use crate::{Device, Error, Result, Tensor};
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, DeviceRepr, ValidAsZeroBits};
use fuse_ir::codegen::{define_parts, is_c_identifier};

const OP: &str = "custom kernel";
/// The largest cluster a launch may ask for (sm_90's non-portable limit); past 8 needs the attribute.
const MAX_CLUSTER: u32 = 16;
const PORTABLE_CLUSTER: u32 = 8;

/// What to compile: CUDA C++ `source` with its `extern "C" __global__` function `entry`, built with
/// `defines` (`-DNAME` or `-DNAME=VALUE`) for `arch` (`sm_90`, or `sm_90a` for architecture-specific
/// instructions such as `setmaxnreg`; it must match the GPU's architecture). The kernel's parameter is one
/// struct of `argument_words` 8-byte members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSource {
    pub entry: String,
    pub source: String,
    pub defines: Vec<String>,
    pub arch: String,
    pub argument_words: usize,
}

impl KernelSource {
    /// An error naming the first thing a compile would trip on: an entry that is not a C identifier or not
    /// in the source, a define that is not `-DNAME[=VALUE]`, an architecture that is not `sm_NN` / `sm_NNa`.
    pub fn check(&self) -> Result<()> {
        let invalid = |reason: String| Err(Error::InvalidArgument { op: OP, reason });
        if !is_c_identifier(&self.entry) {
            return invalid(format!("entry `{}` is not a C identifier", self.entry));
        }
        if !self.source.contains(&self.entry) {
            return invalid(format!("the source has no `{}` (the entry to launch)", self.entry));
        }
        if let Some(define) = self.defines.iter().find(|d| define_parts(d).is_none()) {
            return invalid(format!("{}: define `{define}` is not -DNAME or -DNAME=VALUE", self.entry));
        }
        if parse_arch(&self.arch).is_none() {
            return invalid(format!(
                "{}: architecture `{}` is not sm_NN or sm_NNa (e.g. sm_90a)",
                self.entry, self.arch
            ));
        }
        Ok(())
    }

    /// What identifies the compiled kernel (the entry, source, defines and architecture; the disk cache adds
    /// NVRTC's and fuse's versions): two sources differing in any of them never share a cubin.
    pub fn fingerprint(&self) -> u128 {
        let mut parts: Vec<&[u8]> = vec![self.entry.as_bytes(), self.source.as_bytes(), self.arch.as_bytes()];
        parts.extend(self.defines.iter().map(|d| d.as_bytes()));
        CacheKey::of(&parts).0
    }
}

/// How a [`CustomKernel`] launches: `grid` blocks of `block` threads, in clusters of `cluster` blocks (1:
/// no clusters; up to 16, which needs sm_90), each with `shared_bytes` of dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: u32,
    pub block: u32,
    pub cluster: u32,
    pub shared_bytes: u32,
}

impl LaunchDims {
    /// An error naming the numbers unless the launch is well formed: at least one block, 1 to 1024 threads
    /// a block, clusters of 1 to 16 blocks that divide the grid.
    pub fn check(&self) -> Result<()> {
        let d = self;
        let reason = if d.grid == 0 {
            "a grid of 0 blocks".to_string()
        } else if !(1..=1024).contains(&d.block) {
            format!("{} threads a block (1 to 1024)", d.block)
        } else if !(1..=MAX_CLUSTER).contains(&d.cluster) {
            format!("clusters of {} blocks (1 to {MAX_CLUSTER})", d.cluster)
        } else if d.grid % d.cluster != 0 {
            format!("a grid of {} blocks is not whole clusters of {}", d.grid, d.cluster)
        } else if i32::try_from(d.shared_bytes).is_err() {
            format!("{} bytes of shared memory", d.shared_bytes)
        } else {
            return Ok(());
        };
        Err(Error::InvalidArgument { op: OP, reason: format!("launch dims {d:?}: {reason}") })
    }

    /// The clusters of a launch (blocks when `cluster` is 1).
    pub fn clusters(&self) -> u32 {
        self.grid / self.cluster.max(1)
    }

    fn kernel_dims(&self) -> KernelDims {
        // No overlap with the kernel before: a user's kernel does not wait for it (griddepcontrol.wait).
        KernelDims {
            grid: self.grid,
            block: self.block,
            cluster: self.cluster,
            shared_bytes: self.shared_bytes,
            overlap: false,
        }
    }
}

/// A user's kernel compiled and loaded on a GPU, its shared-memory and cluster attributes set for its
/// [`LaunchDims`]. Launches go to the device's stream, in order with fuse's own kernels.
pub struct CustomKernel {
    device: CudaDevice,
    function: CudaFunction,
    entry: String,
    dims: LaunchDims,
    argument_words: usize,
}

impl CustomKernel {
    /// Compiles `source` (NVRTC, cached on disk like fuse's kernels) for a GPU `device` and sets what `dims`
    /// needs: its dynamic shared memory, and a non-portable cluster size past 8 blocks.
    pub fn new(device: &Device, source: &KernelSource, dims: LaunchDims) -> Result<CustomKernel> {
        source.check()?;
        dims.check()?;
        let Device::Cuda(gpu) = device else {
            return Err(Error::unsupported(
                &source.entry,
                OP,
                format!("a custom CUDA kernel runs on a GPU, not on {device}"),
            ));
        };
        if let Err(reason) = arch_runs_on(&source.arch, gpu.arch()) {
            return Err(Error::unsupported(&source.entry, OP, reason));
        }
        let function = gpu.kernel(
            &source.entry,
            &source.entry,
            &source.source,
            fingerprint(&source.source),
            &source.defines,
            &source.arch,
        )?;
        if dims.cluster > PORTABLE_CLUSTER {
            function
                .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
                .map_err(|e| driver_error(&format!("{OP} {}: allow clusters of {}", source.entry, dims.cluster), e))?;
        }
        let kernel = CustomKernel {
            device: gpu.clone(),
            function,
            entry: source.entry.clone(),
            dims: LaunchDims { shared_bytes: 0, ..dims },
            argument_words: source.argument_words,
        };
        kernel.with_shared_bytes(dims.shared_bytes)
    }

    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    /// The same compiled kernel launched over `grid` blocks (or clusters' blocks) instead: a persistent kernel
    /// sized to what [`CustomKernel::max_resident_clusters`] says the GPU holds, without compiling it again.
    pub fn with_grid(self, grid: u32) -> Result<CustomKernel> {
        let dims = LaunchDims { grid, ..self.dims };
        dims.check()?;
        Ok(CustomKernel { dims, ..self })
    }

    /// The same compiled kernel allowed `bytes` of dynamic shared memory instead (the driver's error, naming
    /// `bytes`, where that and its static shared memory exceed what a block may have).
    pub fn with_shared_bytes(self, bytes: u32) -> Result<CustomKernel> {
        let dims = LaunchDims { shared_bytes: bytes, ..self.dims };
        dims.check()?;
        if bytes > 0 {
            self.function
                .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32)
                .map_err(|e| {
                    let what = format!("{OP} {}: allow {bytes} bytes of shared memory", self.entry);
                    driver_error(&what, e)
                })?;
        }
        Ok(CustomKernel { dims, ..self })
    }

    /// Bytes of shared memory the kernel declares statically (every `__shared__` variable of its code).
    pub fn static_shared_bytes(&self) -> Result<usize> {
        self.byte_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "its static shared memory")
    }

    /// Bytes of local memory a thread takes (spilled registers, the stack of its calls).
    pub fn local_bytes(&self) -> Result<usize> {
        self.byte_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "its local memory")
    }

    /// A size the driver reports of the compiled function (`what` names it in the error).
    fn byte_attribute(&self, attribute: CUfunction_attribute, what: &str) -> Result<usize> {
        let bytes = self
            .function
            .get_attribute(attribute)
            .map_err(|e| driver_error(&format!("{OP} {}: {what}", self.entry), e))?;
        Ok(bytes.max(0) as usize)
    }

    pub fn dims(&self) -> LaunchDims {
        self.dims
    }

    /// Clusters of this launch (blocks, without clusters) the GPU can hold at once.
    pub fn max_resident_clusters(&self) -> Result<u32> {
        if self.dims.cluster > 1 {
            return max_active_clusters(&self.device, &self.entry, &self.function, self.dims.kernel_dims());
        }
        let per_sm = self
            .function
            .occupancy_max_active_blocks_per_multiprocessor(self.dims.block, self.dims.shared_bytes as usize, None)
            .map_err(|e| driver_error(&format!("{OP} {}: blocks resident at once", self.entry), e))?;
        Ok(per_sm.saturating_mul(self.device.sm_count() as u32))
    }

    /// An error naming the numbers unless every cluster (block) of the launch can be resident at once: a
    /// kernel whose blocks wait for each other would hang otherwise.
    pub fn require_co_resident(&self) -> Result<()> {
        check_co_resident(&self.entry, self.dims, self.max_resident_clusters()?)
    }

    /// The device address of a tensor's first element, after checking it is on this kernel's GPU and that
    /// its view lies inside its allocation.
    pub fn tensor_address(&self, t: &Tensor) -> Result<u64> {
        checked_address(&self.entry, &self.device, t)
    }

    /// Queues one launch on the device's stream, `words` as the kernel's parameter (an error unless there
    /// are exactly the source's `argument_words`).
    ///
    /// # Safety
    ///
    /// The words must be what the kernel's parameter struct holds, member by member, and every address among
    /// them must point to device memory on this GPU that stays allocated until the kernel has run (fuse's
    /// tensors and [`DeviceBuffer`]s are freed in stream order, after the kernels queued before) and that
    /// the kernel accesses only within bounds.
    pub unsafe fn launch(&self, words: &mut [u64]) -> Result<()> {
        check_words(&self.entry, self.argument_words, words.len())?;
        launch_kernel(&self.device, &self.entry, &self.function, self.dims.kernel_dims(), words)
    }
}

/// Device memory of `T`s on one GPU, for a custom kernel's buffers: uploaded, written and read back on the
/// device's stream (in order with the kernels queued there).
pub struct DeviceBuffer<T> {
    device: CudaDevice,
    slice: CudaSlice<T>,
}

impl<T: DeviceRepr + ValidAsZeroBits> DeviceBuffer<T> {
    /// A copy of `data` on `device`.
    pub fn upload(device: &CudaDevice, data: &[T]) -> Result<DeviceBuffer<T>> {
        let slice = device.stream().clone_htod(data).map_err(|e| driver_error(&format!("{OP}: upload"), e))?;
        Ok(DeviceBuffer { device: device.clone(), slice })
    }

    /// `len` zeros on `device`.
    pub fn zeros(device: &CudaDevice, len: usize) -> Result<DeviceBuffer<T>> {
        let slice = device.stream().alloc_zeros(len).map_err(|e| driver_error(&format!("{OP}: alloc {len}"), e))?;
        Ok(DeviceBuffer { device: device.clone(), slice })
    }

    pub fn len(&self) -> usize {
        self.slice.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slice.len() == 0
    }

    /// The address of the first element, for a kernel's argument words.
    pub fn address(&self) -> u64 {
        self.slice.device_ptr(self.device.stream()).0
    }

    /// Overwrites the whole buffer with `data` (an error unless it has exactly [`DeviceBuffer::len`] values).
    pub fn write(&mut self, data: &[T]) -> Result<()> {
        check_length(self.len(), data.len())?;
        self.device.stream().memcpy_htod(data, &mut self.slice).map_err(|e| driver_error(&format!("{OP}: write"), e))
    }

    /// The buffer's values, once the work queued before has run.
    pub fn read(&self) -> Result<Vec<T>> {
        self.device.stream().clone_dtoh(&self.slice).map_err(|e| driver_error(&format!("{OP}: read"), e))
    }
}

/// `sm_90a` -> (9, 0, true): the compute capability and whether the code is architecture-specific.
fn parse_arch(arch: &str) -> Option<(u32, u32, bool)> {
    let digits = arch.strip_prefix("sm_")?;
    let (digits, specific) = match digits.strip_suffix('a') {
        Some(d) => (d, true),
        None => (digits, false),
    };
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: u32 = digits.parse().ok()?;
    Some((number / 10, number % 10, specific))
}

/// Whether a cubin for `kernel_arch` loads on a GPU of `device_arch` (`sm_90`): the same major version, and
/// the same minor one for architecture-specific code (`sm_90a`) or at least the kernel's otherwise.
fn arch_runs_on(kernel_arch: &str, device_arch: &str) -> std::result::Result<(), String> {
    let (Some(kernel), Some(device)) = (parse_arch(kernel_arch), parse_arch(device_arch)) else {
        return Err(format!("architecture {kernel_arch} against a GPU of {device_arch}"));
    };
    let fits = kernel.0 == device.0 && if kernel.2 { kernel.1 == device.1 } else { kernel.1 <= device.1 };
    if fits {
        Ok(())
    } else {
        Err(format!("built for {kernel_arch}, which does not run on this GPU ({device_arch})"))
    }
}

fn check_co_resident(entry: &str, dims: LaunchDims, resident: u32) -> Result<()> {
    if resident >= dims.clusters() {
        return Ok(());
    }
    let unit = if dims.cluster > 1 { format!("clusters of {} blocks", dims.cluster) } else { "blocks".to_string() };
    Err(Error::unsupported(
        entry,
        OP,
        format!(
            "this GPU holds {resident} {unit} of {} threads and {} bytes of shared memory at once; the launch needs {} resident together",
            dims.block,
            dims.shared_bytes,
            dims.clusters()
        ),
    ))
}

fn check_words(entry: &str, want: usize, got: usize) -> Result<()> {
    if want == got {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op: OP,
        reason: format!("{entry} takes {want} argument words, the launch gives {got}"),
    })
}

fn check_length(len: usize, given: usize) -> Result<()> {
    if len == given {
        return Ok(());
    }
    Err(Error::InvalidArgument { op: OP, reason: format!("{given} values written to a buffer of {len}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> KernelSource {
        KernelSource {
            entry: "k".into(),
            source: "extern \"C\" __global__ void k(const unsigned long long* a) {}".into(),
            defines: vec!["-DN=4".into(), "-DFLAG".into()],
            arch: "sm_90a".into(),
            argument_words: 1,
        }
    }

    fn message(r: Result<()>) -> String {
        r.expect_err("refused").to_string()
    }

    #[test]
    fn a_well_formed_source_and_launch_pass_their_checks() {
        source().check().unwrap();
        LaunchDims { grid: 112, block: 256, cluster: 16, shared_bytes: 225_280 }.check().unwrap();
        LaunchDims { grid: 1, block: 1024, cluster: 1, shared_bytes: 0 }.check().unwrap();
    }

    #[test]
    fn a_malformed_source_is_refused_naming_what() {
        let cases: [(KernelSource, &str); 5] = [
            (KernelSource { entry: "2k".into(), ..source() }, "entry `2k` is not a C identifier"),
            (KernelSource { entry: "other".into(), ..source() }, "the source has no `other`"),
            (KernelSource { defines: vec!["N=4".into()], ..source() }, "define `N=4` is not -DNAME"),
            (KernelSource { defines: vec!["-D=4".into()], ..source() }, "define `-D=4`"),
            (KernelSource { arch: "compute_90".into(), ..source() }, "architecture `compute_90`"),
        ];
        for (s, want) in cases {
            let got = message(s.check());
            assert!(got.contains(want), "{got}");
        }
    }

    #[test]
    fn a_malformed_launch_is_refused_naming_the_numbers() {
        let ok = LaunchDims { grid: 112, block: 256, cluster: 16, shared_bytes: 0 };
        let cases: [(LaunchDims, &str); 5] = [
            (LaunchDims { grid: 0, ..ok }, "a grid of 0 blocks"),
            (LaunchDims { block: 2048, ..ok }, "2048 threads a block"),
            (LaunchDims { cluster: 32, ..ok }, "clusters of 32 blocks"),
            (LaunchDims { grid: 100, ..ok }, "a grid of 100 blocks is not whole clusters of 16"),
            (LaunchDims { shared_bytes: u32::MAX, ..ok }, "4294967295 bytes of shared memory"),
        ];
        for (dims, want) in cases {
            let got = message(dims.check());
            assert!(got.contains(want), "{got}");
        }
        assert_eq!(ok.clusters(), 7);
    }

    #[test]
    fn architectures_load_where_the_gpu_runs_them() {
        assert!(arch_runs_on("sm_90a", "sm_90").is_ok());
        assert!(arch_runs_on("sm_80", "sm_86").is_ok());
        assert!(arch_runs_on("sm_86", "sm_80").unwrap_err().contains("does not run on this GPU (sm_80)"));
        assert!(arch_runs_on("sm_80", "sm_90").is_err(), "another major version");
        assert!(arch_runs_on("sm_90a", "sm_100").is_err(), "architecture-specific code");
        assert_eq!(parse_arch("sm_100a"), Some((10, 0, true)));
        assert_eq!(parse_arch("sm_9"), None);
    }

    #[test]
    fn co_residency_words_and_lengths_are_checked_with_the_numbers() {
        let dims = LaunchDims { grid: 112, block: 256, cluster: 16, shared_bytes: 225_280 };
        check_co_resident("k", dims, 7).unwrap();
        let got = message(check_co_resident("k", dims, 6));
        assert!(got.contains("holds 6 clusters of 16 blocks") && got.contains("needs 7 resident"), "{got}");
        let blocks = LaunchDims { grid: 300, cluster: 1, ..dims };
        assert!(message(check_co_resident("k", blocks, 264)).contains("holds 264 blocks"));
        check_words("k", 18, 18).unwrap();
        assert!(message(check_words("k", 18, 17)).contains("k takes 18 argument words, the launch gives 17"));
        check_length(3, 3).unwrap();
        assert!(message(check_length(3, 4)).contains("4 values written to a buffer of 3"));
    }

    #[test]
    fn the_fingerprint_follows_every_input() {
        let base = source().fingerprint();
        assert_eq!(base, source().fingerprint());
        for other in [
            KernelSource { defines: vec!["-DN=5".into(), "-DFLAG".into()], ..source() },
            KernelSource { source: format!("{}\n", source().source), ..source() },
            KernelSource { arch: "sm_90".into(), ..source() },
        ] {
            assert_ne!(other.fingerprint(), base, "{other:?}");
        }
    }

    #[test]
    fn a_kernel_on_the_cpu_is_refused() {
        let dims = LaunchDims { grid: 1, block: 32, cluster: 1, shared_bytes: 0 };
        let err = CustomKernel::new(&Device::Cpu, &source(), dims).err().expect("refused").to_string();
        assert!(err.contains("runs on a GPU, not on cpu"), "{err}");
    }
}
