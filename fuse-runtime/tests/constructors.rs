//! `Tensor::{zeros, ones, full, arange, arange_step, rand, randn}`: values, dtypes, devices, seeds, errors.

use fuse_runtime::{DType, Device, Error, Tensor};

fn filled_tensors_hold_their_value_in_their_dtype(dev: &Device) {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let z = Tensor::zeros(&[2, 3], dtype, dev).unwrap();
        let o = Tensor::ones(&[3], dtype, dev).unwrap();
        let f = Tensor::full(0.1, &[1, 2, 2], dtype, dev).unwrap();
        assert_eq!((z.shape(), z.dtype(), z.device()), (&[2, 3][..], dtype, dev));
        assert_eq!(z.to_vec::<f32>().unwrap(), vec![0.0; 6]);
        assert_eq!(o.to_vec::<f32>().unwrap(), vec![1.0; 3]);
        let rounded = Tensor::from_vec(vec![0.1f32], &[1], &Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()[0];
        assert_eq!(f.to_vec::<f32>().unwrap(), vec![rounded; 4], "{dtype}: 0.1 rounded once");
    }
    assert_eq!(Tensor::zeros(&[0, 4], DType::F32, dev).unwrap().shape(), &[0, 4]);
    // Ids: whole numbers, made directly.
    assert_eq!(Tensor::zeros(&[2], DType::U32, dev).unwrap().to_vec::<u32>().unwrap(), vec![0, 0]);
    assert_eq!(Tensor::full(7.0, &[3], DType::U32, dev).unwrap().to_vec::<u32>().unwrap(), vec![7; 3]);
    assert!(matches!(Tensor::full(0.5, &[1], DType::U32, dev), Err(Error::InvalidArgument { op: "full", .. })));
}

fn ranges_count_up_and_down(dev: &Device) {
    assert_eq!(Tensor::arange(0.0, 5.0, dev).unwrap().to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(Tensor::arange_step(1.0, 2.0, 0.25, dev).unwrap().to_vec::<f32>().unwrap(), [1.0, 1.25, 1.5, 1.75]);
    assert_eq!(Tensor::arange_step(3.0, 0.0, -1.5, dev).unwrap().to_vec::<f32>().unwrap(), [3.0, 1.5]);
    assert_eq!(Tensor::arange(2.0, 2.0, dev).unwrap().shape(), &[0]);
    for bad in [Tensor::arange_step(0.0, 1.0, 0.0, dev), Tensor::arange_step(0.0, f32::INFINITY, 1.0, dev)] {
        assert!(matches!(bad, Err(Error::InvalidArgument { op: "arange_step", .. })), "{bad:?}");
    }
}

fn random_tensors_follow_their_seed_and_distribution(dev: &Device) {
    let a = Tensor::rand_seeded(-1.0, 3.0, &[64, 65], 7, dev).unwrap().to_vec::<f32>().unwrap();
    let b = Tensor::rand_seeded(-1.0, 3.0, &[64, 65], 7, &Device::Cpu).unwrap().to_vec::<f32>().unwrap();
    let c = Tensor::rand_seeded(-1.0, 3.0, &[64, 65], 8, dev).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a, b, "the same seed gives the same values on every device");
    assert_ne!(a, c, "another seed, other values");
    assert!(a.iter().all(|&v| (-1.0..3.0).contains(&v)));
    let mean = a.iter().sum::<f32>() / a.len() as f32;
    assert!((mean - 1.0).abs() < 0.05, "uniform mean {mean}");
    let n = Tensor::randn_seeded(2.0, 0.5, &[100, 101], 1, dev).unwrap().to_vec::<f32>().unwrap();
    let mean = n.iter().sum::<f32>() / n.len() as f32;
    let var = n.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / n.len() as f32;
    assert!((mean - 2.0).abs() < 0.02 && (var.sqrt() - 0.5).abs() < 0.02, "normal mean {mean} std {}", var.sqrt());
    assert!(n.iter().all(|v| v.is_finite()));
    // candle's signatures: new values at every call, from the same distributions.
    let fresh = |lo| Tensor::rand(lo, lo + 4.0, &[64, 65], dev).unwrap().to_vec::<f32>().unwrap();
    let (u, w) = (fresh(-1.0), fresh(-1.0));
    assert_ne!(u, w, "two unseeded calls differ");
    assert!(u.iter().all(|&v| (-1.0..3.0).contains(&v)));
    let z = Tensor::randn(2.0, 0.5, &[100, 101], dev).unwrap().to_vec::<f32>().unwrap();
    let mean = z.iter().sum::<f32>() / z.len() as f32;
    assert!((mean - 2.0).abs() < 0.02 && z != n, "unseeded normal mean {mean}");
    assert!(matches!(Tensor::rand(1.0, 1.0, &[2], dev), Err(Error::InvalidArgument { op: "rand", .. })));
    assert!(matches!(Tensor::randn(0.0, -1.0, &[2], dev), Err(Error::InvalidArgument { op: "randn", .. })));
    assert!(matches!(Tensor::zeros(&[usize::MAX, 2], DType::F32, dev), Err(Error::InvalidArgument { op: "full", .. })));
}

/// Sizes the address space holds but no machine does are errors, not a panic ("capacity overflow": a bf16
/// tensor was built through an f32 vector twice its size) or an abort (memory the system refuses).
fn sizes_past_the_memory_are_errors(dev: &Device) {
    let out_of_memory = |r: fuse_runtime::Result<Tensor>, op: &str| match r {
        Err(Error::OutOfMemory { op: o, bytes, .. }) => assert!(o == op && bytes > 1 << 40, "{op}: {o}, {bytes}"),
        other => panic!("{op}: expected OutOfMemory, got {:?}", other.map(|t| t.shape().to_vec())),
    };
    out_of_memory(Tensor::zeros(&[usize::MAX], DType::BF16, dev), "full");
    out_of_memory(Tensor::ones(&[1 << 50], DType::F32, dev), "full"); // 4 PiB
    out_of_memory(Tensor::full(2.0, &[1 << 20, 1 << 30], DType::F16, dev), "full");
    out_of_memory(Tensor::arange(0.0, 1e13, dev), "arange_step"); // 40 TB
    out_of_memory(Tensor::rand(0.0, 1.0, &[1 << 48], dev), "rand");
    let err = Tensor::zeros(&[1 << 50], DType::F32, dev).unwrap_err().to_string();
    assert!(err.contains("full: 4503599627370496 bytes cannot be allocated on the host"), "{err}");
}

fuse_runtime::device_tests!(
    filled_tensors_hold_their_value_in_their_dtype,
    ranges_count_up_and_down,
    random_tensors_follow_their_seed_and_distribution,
    sizes_past_the_memory_are_errors,
);
