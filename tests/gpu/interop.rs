//! Another library's device memory and stream (here cudarc used directly, as candle's CUDA build or a C
//! library would): read and written in place by raw device pointers, ordered by events between the two
//! streams, never by a copy or a host wait. Each direction is made to fail without its ordering: the other
//! side's stream is kept busy by a spinning kernel, so that an unordered read sees the memory before it is
//! written (zeros, or the NaN bytes fuse's allocations start as here).

use crate::{gpu_alone, random, rng};
use fuse::cudarc::driver::{result, DevicePtr, LaunchConfig, PushKernelArg};
use fuse::cudarc::nvrtc::Ptx;
use fuse::prelude::*;
use std::sync::Arc;

const SPIN: &str = r#"extern "C" __global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {}
}"#;

/// ~10 ms of one thread spinning on `stream`: whatever is queued after it waits that long.
fn spin(ctx: &Arc<fuse::cudarc::driver::CudaContext>, stream: &Arc<fuse::cudarc::driver::CudaStream>) {
    let ptx = fuse::cudarc::nvrtc::compile_ptx(SPIN).expect("compile the spin kernel");
    let module = ctx.load_module(Ptx::from_src(ptx.to_src())).expect("load the spin kernel");
    let f = module.load_function("spin").expect("spin");
    let cycles: i64 = 20_000_000;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&cycles);
    let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: the kernel takes one long long, given.
    unsafe { launch.launch(one) }.expect("launch spin");
}

#[test]
fn another_librarys_memory_is_read_and_written_in_place_in_stream_order() {
    let Some((dev, _gpu)) = gpu_alone() else { return };
    let Device::Cuda(cuda) = &dev else { return };
    let ctx = cuda.context().clone();
    let theirs = ctx.new_stream().expect("a stream of the other library");
    let (rows, cols) = (3, 4095);
    let mut r = rng(71);
    let values = random(&mut r, &[rows, cols], DType::F32, -2.0, 2.0, &Device::Cpu).to_vec::<f32>().unwrap();

    // Their stream: busy, then the values land in their buffer. Fuse must wait for that on the GPU.
    let mut buffer = theirs.alloc_zeros::<f32>(rows * cols).expect("alloc");
    spin(&ctx, &theirs);
    theirs.memcpy_htod(&values, &mut buffer).expect("their copy");
    let address = {
        let (ptr, _record) = buffer.device_ptr(&theirs);
        ptr
    };
    let x = unsafe { Tensor::from_cuda_ptr(address, DType::F32, &[rows, cols], &dev, Box::new(buffer)) }
        .expect("from_cuda_ptr");
    unsafe { cuda.wait_for_stream(theirs.cu_stream()) }.expect("wait_for_stream");
    let doubled = (&x * 2.0f32).expect("x * 2");
    let want: Vec<f32> = values.iter().map(|v| v * 2.0).collect();
    assert_eq!(doubled.to_vec::<f32>().unwrap(), want, "fuse read their buffer before their copy ran");

    // Fuse's stream: busy, then the result is computed. Their stream reads it in place after waiting.
    spin(&ctx, cuda.stream());
    let tripled = (&x * 3.0f32).expect("x * 3");
    let at = tripled.cuda_ptr().expect("cuda_ptr");
    unsafe { cuda.make_stream_wait(theirs.cu_stream()) }.expect("make_stream_wait");
    let mut read = vec![0f32; rows * cols];
    unsafe { result::memcpy_dtoh_async(&mut read, at, theirs.cu_stream()) }.expect("their read");
    theirs.synchronize().expect("their stream");
    let want: Vec<f32> = values.iter().map(|v| v * 3.0).collect();
    assert_eq!(read, want, "their stream read fuse's output before fuse wrote it");

    // A view's address starts at its first element; strided views and CPU tensors have none.
    let row1 = x.narrow(0, 1, 1).expect("narrow");
    assert_eq!(row1.cuda_ptr().unwrap(), address + (cols * 4) as u64);
    assert!(x.t().unwrap().cuda_ptr().unwrap_err().to_string().contains("contiguous"));
    let cpu = Tensor::from_vec(vec![1.0f32], &[1], &Device::Cpu).unwrap();
    assert!(cpu.cuda_ptr().is_err());
    // Dropping the last view waits for fuse's queued work, then drops their buffer (theirs to free).
    drop((x, row1, doubled));
    cuda.synchronize().expect("no fault after the owner was dropped");
}

#[test]
fn bad_device_pointers_are_refused() {
    let Some((dev, _gpu)) = gpu_alone() else { return };
    let none = || Box::new(()) as Box<dyn std::any::Any + Send + Sync>;
    let err = unsafe { Tensor::from_cuda_ptr(0, DType::F32, &[4], &dev, none()) }.unwrap_err();
    assert!(err.to_string().contains("null"), "{err}");
    let err = unsafe { Tensor::from_cuda_ptr(0x1002, DType::F32, &[4], &dev, none()) }.unwrap_err();
    assert!(err.to_string().contains("aligned"), "{err}");
    let err = unsafe { Tensor::from_cuda_ptr(0x1000, DType::F32, &[4], &Device::Cpu, none()) }.unwrap_err();
    assert!(err.to_string().contains("device pointer"), "{err}");
}
