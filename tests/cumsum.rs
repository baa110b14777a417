//! `x.cumsum(axis)` (candle's name): running sums along any axis, eager and inside `#[fuse]`, on the CPU and
//! the GPU (one block a row, a scan of warps), against the reference interpreter at odd shapes (rows longer
//! than a block's 256 columns, a single column, an inner axis), in each float dtype; a NaN carries on.

use fuse::prelude::*;
use fuse::testing::{assert_close, check_against_reference, random, TestRng};

#[fuse]
fn running(x: &Tensor) -> Result<(Tensor, Tensor)> {
    (x.cumsum(-1), exp(x.cumsum(0)))
}

fn cumsum_matches_reference(dev: &Device) {
    let mut r = TestRng::new(131);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for shape in [vec![1, 1], vec![3, 1], vec![2, 300], vec![5, 7, 513], vec![4, 1025]] {
            let x = random(&mut r, &shape, dtype, -1.0, 1.0, dev);
            check_against_reference(
                &format!("cumsum {shape:?} {dtype}"),
                running_fused(),
                &[fuse::arg(&x)],
                dtype,
                dev,
            );
            // Eager: the same values as the fused call's.
            let fused = running(&x).expect("fused");
            assert_close("eager cumsum(-1)", &x.cumsum(-1).expect("eager"), &fused.0, dtype, dev);
            assert_close("eager cumsum(0)", &x.cumsum(0).and_then(|t| t.exp()).expect("eager"), &fused.1, dtype, dev);
        }
    }
    // A NaN carries on from where it is; what is before it stays.
    let x = Tensor::from_vec(vec![1.0f32, 2.0, f32::NAN, 4.0], &[1, 4], dev).unwrap();
    let got: Vec<f32> = x.cumsum(-1).unwrap().to_vec().unwrap();
    assert_eq!(&got[..2], &[1.0, 3.0]);
    assert!(got[2..].iter().all(|v| v.is_nan()), "{got:?}");
    // An axis out of range, or ids (u32), are errors.
    assert!(x.cumsum(2).unwrap_err().to_string().contains("axis 2 is out of range"));
    let ids = Tensor::from_vec(vec![1u32, 2], &[2], dev).unwrap();
    assert!(ids.cumsum(-1).is_err());
}

fuse::device_tests!(cumsum_matches_reference);
