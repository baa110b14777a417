//! A build without the `cuda` feature (`scripts/test.sh` runs it with `--no-default-features`): asking for a
//! GPU is an error that names the feature, and fused functions run on the CPU as before.
#![cfg(not(feature = "cuda"))]

use fuse_ir::{BinaryOp, Graph, InputKind};
use fuse_runtime::{arg, compile_ptx, nvrtc_available, Device, Error, FusedFn, Tensor};

#[test]
fn a_gpu_is_an_error_naming_the_cuda_feature() {
    let error = Device::cuda(0).expect_err("this build has no CUDA backend");
    assert!(matches!(error, Error::CudaUnavailable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("GPU 0") && message.contains("`cuda` cargo feature"), "{message}");
    assert_eq!(Device::cuda_if_available(0), Device::Cpu);
    assert!(!nvrtc_available());
    let nvrtc = compile_ptx("k", "extern \"C\" __global__ void k() {}", &[], "sm_90").expect_err("no NVRTC");
    assert_eq!(nvrtc.stage, "load");
    assert!(nvrtc.to_string().contains("`cuda` cargo feature"), "{nvrtc}");
}

#[test]
fn a_fused_matmul_with_an_epilogue_runs_on_the_cpu() {
    let mut g = Graph::new("scaled_matmul");
    let x = g.input("x", InputKind::Tensor);
    let w = g.input("w", InputKind::Tensor);
    let scale = g.input("scale", InputKind::Scalar);
    let product = g.matmul(x, w, "x.matmul(w)");
    let out = g.binary(BinaryOp::Mul, product, scale, "h * scale");
    g.outputs = vec![out];
    let f = FusedFn::from_graph(g);

    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &Device::Cpu).unwrap();
    let w = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2], &Device::Cpu).unwrap();
    let outputs = f.call(&[arg(&x), arg(&w), arg(&0.5f32)]).expect("runs on the CPU");
    assert_eq!(outputs[0].device(), &Device::Cpu);
    assert_eq!(outputs[0].to_vec::<f32>().unwrap(), vec![2.0, 2.5, 5.0, 5.5]);
}
