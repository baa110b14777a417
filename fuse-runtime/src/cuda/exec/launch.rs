//! Launching one kernel, the same way on a first call and on a replay: its geometry (`KernelDims`), the
//! driver call with the packed parameter words, and the checked device address of a tensor view.

use crate::cuda::device::CudaDevice;
use crate::cuda::exec::fuse_args::BLOCK_THREADS;
pub(crate) use crate::cuda::recorder::KernelDims;
use crate::cuda::recorder::{RecordedLaunch, RecordedOp};
use crate::{Error, Result, Tensor};
use cudarc::driver::CudaFunction;

impl KernelDims {
    /// A generated kernel's: `grid` blocks of [`BLOCK_THREADS`], no cluster, no dynamic shared memory.
    pub(crate) fn plain(grid: u32) -> KernelDims {
        KernelDims { grid, block: BLOCK_THREADS, cluster: 1, shared_bytes: 0, overlap: true }
    }
}

/// Launches a generated kernel on the device's stream with its packed `FuseArgs` words (and, for the
/// templates, their `FuseGemmArgs` after them and the wgmma template's tensor maps before them). Where the
/// device allows it ([`CudaDevice::overlaps_launches`]), the launch may overlap the kernel before it in the
/// stream (programmatic dependent launch): every generated kernel waits for that kernel before it touches
/// memory, so its set-up and first L2 prefetches run during the other's last blocks. While a step is
/// captured for one launch, the launch is also recorded (`recorder.rs`).
pub(crate) fn launch_kernel(
    device: &CudaDevice,
    name: &str,
    function: &CudaFunction,
    dims: KernelDims,
    words: &mut [u64],
) -> Result<()> {
    use cudarc::driver::sys;
    if device.recorder().is_on() {
        device.recorder().record(RecordedOp::Kernel(RecordedLaunch {
            name: name.to_string(),
            function: function.clone(),
            dims: KernelDims { overlap: dims.overlap && device.overlaps_launches(), ..dims },
            words: words.to_vec(),
        }));
    }
    let mut params = [words.as_mut_ptr().cast::<std::ffi::c_void>()];
    // SAFETY (zeroed): plain data; `launch_config` writes the members its attribute ids name.
    let mut attributes: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
    let config = launch_config(device, &dims, &mut attributes);
    // SAFETY: the kernel was generated for exactly this parameter (one FuseArgs, laid out as the packed
    // words, slot counts and dtypes fixed by the defines); every address is a live allocation on this GPU
    // whose view was bounds-checked by the caller; the driver copies the parameter at launch, and
    // allocations are freed in stream order, after the kernel. `config` and `attributes` outlive the call.
    let status =
        unsafe { sys::cuLaunchKernelEx(&config, function.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) };
    match status {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(Error::Cuda {
            op: format!(
                "launch {name} ({} blocks of {}, cluster {}, {} B shared)",
                dims.grid, dims.block, dims.cluster, dims.shared_bytes
            ),
            message: format!("{e:?}"),
        }),
    }
}

/// The driver's configuration of a launch of `dims` on the device's stream: its cluster and (where `dims.overlap`
/// and the device allow) programmatic dependent launch as attributes written into `attributes`, which the
/// configuration points to.
fn launch_config(
    device: &CudaDevice,
    dims: &KernelDims,
    attributes: &mut [cudarc::driver::sys::CUlaunchAttribute; 2],
) -> cudarc::driver::sys::CUlaunchConfig {
    use cudarc::driver::sys;
    let mut count = 0;
    if dims.cluster > 1 {
        attributes[count].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attributes[count].value.clusterDim =
            sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: dims.cluster, y: 1, z: 1 };
        count += 1;
    }
    if dims.overlap && device.overlaps_launches() {
        attributes[count].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attributes[count].value.programmaticStreamSerializationAllowed = 1;
        count += 1;
    }
    sys::CUlaunchConfig {
        gridDimX: dims.grid,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: dims.block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: dims.shared_bytes,
        hStream: device.stream().cu_stream(),
        attrs: attributes.as_mut_ptr(),
        numAttrs: count as u32,
    }
}

/// Clusters of a launch of `dims` the GPU can hold at once (`cuOccupancyMaxActiveClusters`).
pub(crate) fn max_active_clusters(
    device: &CudaDevice,
    name: &str,
    function: &CudaFunction,
    dims: KernelDims,
) -> Result<u32> {
    use cudarc::driver::sys;
    // SAFETY (zeroed): plain data; `launch_config` writes the members its attribute ids name.
    let mut attributes: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
    let config = launch_config(device, &dims, &mut attributes);
    let mut clusters: std::ffi::c_int = 0;
    // SAFETY: `config` and `attributes` outlive the call; the function is loaded in the device's context.
    let status = unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, function.cu_function(), &config) };
    match status {
        sys::CUresult::CUDA_SUCCESS => Ok(clusters as u32),
        e => Err(Error::Cuda { op: format!("{name}: clusters resident at once"), message: format!("{e:?}") }),
    }
}

/// The device address of a view's first element, after checking it is on `device` and lies inside its
/// allocation.
pub(crate) fn checked_address(function: &str, device: &CudaDevice, t: &Tensor) -> Result<u64> {
    let storage = t.cuda_storage().filter(|s| s.device() == device).ok_or_else(|| Error::DeviceMismatch {
        function: function.to_string(),
        first: crate::Device::Cuda(device.clone()).to_string(),
        second: t.device().to_string(),
    })?;
    if last_index(t).is_some_and(|last| last >= storage.len()) {
        return Err(Error::internal(function, format!("a view of shape {:?} reaches past its allocation", t.shape())));
    }
    storage.element_address(t.offset()).ok_or_else(|| {
        Error::unsupported(
            function,
            "view",
            format!("a view of {} blocks starting inside a block (element {})", storage.dtype(), t.offset()),
        )
    })
}

/// The largest element index a view touches, `None` for an empty view.
pub(super) fn last_index(t: &Tensor) -> Option<usize> {
    if t.shape().contains(&0) {
        return None;
    }
    Some(t.offset() + t.shape().iter().zip(t.strides()).map(|(&d, &s)| (d - 1) * s).sum::<usize>())
}
