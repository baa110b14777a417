//! Tensors on the GPU: copies both ways, dtype conversion, interop slices, device errors, and the module
//! cache (a repeated call compiles nothing).

use crate::{gpu, gpu_alone, random, rng, DTYPES};
use fuse::prelude::*;

#[fuse]
fn scale_shift(x: &Tensor, s: f32) -> Result<Tensor> {
    Ok(x * s + 1.0)
}

#[test]
fn devices_print_and_fall_back() {
    let Some((dev, _gpu)) = gpu() else {
        assert_eq!(Device::cuda_if_available(0), Device::Cpu);
        return;
    };
    assert_eq!(dev.to_string(), "cuda:0");
    assert_eq!(Device::cuda_if_available(0), dev);
    assert!(matches!(Device::cuda(1 << 20), Err(Error::CudaUnavailable { .. })));
}

#[test]
fn copies_round_trip_in_every_dtype() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(31);
    for dtype in DTYPES {
        let host = random(&mut r, &[17, 33], dtype, -2.0, 2.0, &Device::Cpu);
        let on_gpu = host.to_device(&dev).expect("to gpu");
        assert_eq!((on_gpu.dtype(), on_gpu.shape()), (dtype, &[17, 33][..]));
        let want: Vec<f32> = host.to_vec().expect("to_vec");
        assert_eq!(on_gpu.to_vec::<f32>().expect("to_vec"), want, "{dtype}: values changed on the way");
        // a .t() view goes over as a dense copy and comes back with the same values
        let t = host.t().expect("t");
        let back = t.to_device(&dev).and_then(|g| g.to_device(&Device::Cpu)).expect("round trip");
        assert_eq!(back.to_vec::<f32>().expect("to_vec"), t.to_vec::<f32>().expect("to_vec"));
        // GPU views read back through their strides
        assert_eq!(on_gpu.t().expect("t").to_vec::<f32>().expect("to_vec"), t.to_vec::<f32>().expect("to_vec"));
    }
}

#[test]
fn to_dtype_on_the_gpu_rounds_like_the_cpu() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(32);
    let x = random(&mut r, &[127, 65], DType::F32, -300.0, 300.0, &dev);
    let xc = x.to_device(&Device::Cpu).expect("to cpu");
    for dtype in DTYPES {
        let g = x.to_dtype(dtype).expect("gpu cast");
        assert!(g.device().is_cuda());
        assert_eq!(g.dtype(), dtype);
        let c = xc.to_dtype(dtype).expect("cpu cast");
        assert_eq!(g.to_vec::<f32>().expect("to_vec"), c.to_vec::<f32>().expect("to_vec"), "round to {dtype}");
    }
}

#[test]
fn interop_slices_round_trip() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(33);
    for dtype in DTYPES {
        let x = random(&mut r, &[3, 17], dtype, -2.0, 2.0, &dev);
        let slice = x.to_cuda_slice().expect("to_cuda_slice");
        let y = Tensor::from_cuda_slice(slice, dtype, &[3, 17], &dev).expect("from_cuda_slice");
        assert_eq!(y.to_vec::<f32>().expect("to_vec"), x.to_vec::<f32>().expect("to_vec"));
        let short = x.to_cuda_slice().expect("to_cuda_slice");
        assert!(matches!(Tensor::from_cuda_slice(short, dtype, &[4, 17], &dev), Err(Error::DataLength { .. })));
    }
}

#[test]
fn tensors_on_different_devices_are_an_error() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(34);
    let a = random(&mut r, &[3, 5], DType::F32, -1.0, 1.0, &dev);
    let b = random(&mut r, &[3, 5], DType::F32, -1.0, 1.0, &Device::Cpu);
    assert!(matches!(&a + &b, Err(Error::DeviceMismatch { .. })));
}

#[test]
fn a_repeated_call_compiles_nothing_and_reuses_memory() {
    let Some((dev, _gpu)) = gpu_alone() else { return };
    let Device::Cuda(cuda) = &dev else { return };
    let mut r = rng(35);
    let x = random(&mut r, &[17, 33], DType::BF16, -1.0, 1.0, &dev);
    let first = scale_shift(&x, 0.5).expect("first call");
    let loaded = cuda.loaded_kernels();
    for _ in 0..3 {
        let again = scale_shift(&x, 0.5).expect("repeated call");
        assert_eq!(again.to_vec::<f32>().expect("to_vec"), first.to_vec::<f32>().expect("to_vec"));
    }
    assert_eq!(cuda.loaded_kernels(), loaded, "a repeated call with the same shapes compiled a kernel");
}
