//! Sorting and picking by index for sampling on the device: `x.arg_sort_last_dim(asc)`, `let (values, indices)
//! = x.sort_last_dim(asc);` (candle's), `let (values, indices) = x.topk(k);` (torch's) and `x.gather(&indexes,
//! axis)` (candle's), eager and inside `#[fuse]`, on the CPU and the GPU (a bitonic network a row, in shared
//! memory up to 4,096 columns and in chunks beyond), against the reference interpreter exactly: rows of odd
//! lengths (1, 7, 300, 4,097, 20,001) with many ties (bf16 values, small integers) that must keep the order of
//! their indices, NaN sorted as torch sorts it, and indexes past the axis as errors.

use fuse::prelude::*;
use fuse::testing::{random, TestRng};

#[fuse]
fn sorts(x: &Tensor, k: usize) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor)> {
    let (values, indices) = x.sort_last_dim(true);
    let (top, top_indices) = x.topk(k);
    let down = x.arg_sort_last_dim(false);
    Ok((values, indices, top, top_indices, down))
}

#[fuse]
fn pick_rows(x: &Tensor, indexes: &Tensor) -> Result<Tensor> {
    Ok(x.gather(indexes, 0))
}

/// The same bits: indices exactly, values exactly (a NaN matches a NaN).
fn assert_same(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w): (Vec<f32>, Vec<f32>) = (got.to_vec().unwrap(), want.to_vec().unwrap());
    if let Some(i) = (0..g.len()).find(|&i| !(g[i] == w[i] || (g[i].is_nan() && w[i].is_nan()))) {
        panic!("{what}: element {i} of {:?} is {}, the reference has {}", got.shape(), g[i], w[i]);
    }
}

fn sorts_match_reference(dev: &Device) {
    let mut r = TestRng::new(71);
    // (shape, k): k = n, k past what the GPU selects without sorting (4,096), ties (the rows of 300).
    let cases: [(&[usize], usize); 8] = [
        (&[1, 1], 1),
        (&[3, 7], 3),
        (&[2, 300], 40),
        (&[2, 4097], 50),
        (&[1, 20001], 64),
        (&[2, 3, 33], 33),
        (&[2, 9000], 5000),
        (&[3, 5000], 4096),
    ];
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for &(shape, k) in &cases {
            let mut x = random(&mut r, shape, dtype, -1.0, 1.0, dev);
            if shape[shape.len() - 1] == 300 {
                // Small integers: every value repeated many times.
                let scaled: Tensor = (&x * 3.0f64).expect("scaled");
                x = scaled.trunc().expect("integers");
            }
            let args = [fuse::arg(&x), fuse::Arg::Scalar(k as f64)];
            let want = fuse::reference(sorts_fused(), &args).expect("reference");
            for fusion in [Fusion::On, Fusion::Off] {
                let got = sorts_fused().call_with(&args, fusion).expect("sorts");
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_same(&format!("{dtype} {shape:?} k={k} output {i} ({fusion:?})"), g, w);
                }
            }
            // Eager: the same.
            let (values, indices) = x.sort_last_dim(true).expect("eager sort");
            assert_same("eager sort values", &values, &want[0]);
            assert_same("eager sort indices", &indices, &want[1]);
            let (top, top_indices) = x.topk(k).expect("eager topk");
            assert_same("eager topk", &top, &want[2]);
            assert_same("eager topk indices", &top_indices, &want[3]);
        }
    }
    // NaN: last ascending, first descending; ties by index either way.
    let x = Tensor::from_vec(vec![2.0f32, f32::NAN, -1.0, 2.0, f32::NAN, 0.0], &[1, 6], dev).unwrap();
    let up: Vec<u32> = x.arg_sort_last_dim(true).unwrap().to_vec().unwrap();
    assert_eq!(up, [2, 5, 0, 3, 1, 4]);
    let down: Vec<u32> = x.arg_sort_last_dim(false).unwrap().to_vec().unwrap();
    assert_eq!(down, [1, 4, 0, 3, 5, 2]);
    let (top, indices) = x.topk(3).unwrap();
    assert_eq!(indices.to_vec::<u32>().unwrap(), [1, 4, 0]);
    assert!(top.to_vec::<f32>().unwrap()[..2].iter().all(|v| v.is_nan()));
    // k past the axis, ids (u32) to sort: errors.
    assert!(x.topk(7).is_err());
    let ids = Tensor::from_vec(vec![1u32, 0], &[1, 2], dev).unwrap();
    assert!(ids.arg_sort_last_dim(true).is_err());
}

fn gather_picks_along_any_axis(dev: &Device) {
    let mut r = TestRng::new(72);
    for dtype in [DType::F32, DType::BF16] {
        let x = random(&mut r, &[5, 9], dtype, -1.0, 1.0, dev);
        let picks: Vec<u32> = (0..7 * 9).map(|i| (i * 7 + i / 9) as u32 % 5).collect();
        let indexes = Tensor::from_vec(picks, &[7, 9], dev).unwrap();
        let args = [fuse::arg(&x), fuse::arg(&indexes)];
        let want = fuse::reference(pick_rows_fused(), &args).expect("reference");
        assert_same(&format!("gather along 0 {dtype}"), &pick_rows(&x, &indexes).expect("gather"), &want[0]);
        assert_same("eager gather along 0", &x.gather(&indexes, 0).expect("eager"), &want[0]);
        // A transposed x and u32 values: copied as they are.
        let ids = Tensor::from_vec((0..12u32).map(|i| i * 1000).collect(), &[4, 3], dev).unwrap();
        let order = Tensor::from_vec(vec![3u32, 0, 1, 1, 2, 3], &[3, 2], dev).unwrap();
        let got: Vec<u32> = ids.t().unwrap().gather(&order, -1).unwrap().to_vec().unwrap();
        assert_eq!(got, [9000, 0, 4000, 4000, 8000, 11000]);
    }
    // An index past the axis: an error naming it (the GPU's kernel finds it; reported at the next sync).
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 3], dev).unwrap();
    let bad = Tensor::from_vec(vec![0u32, 3], &[1, 2], dev).unwrap();
    let err = x.gather(&bad, -1).and_then(|t| t.to_vec::<f32>()).unwrap_err().to_string();
    assert!(err.contains("gather index 3 is out of range for an axis of 3"), "{err}");
    // Leading sizes that differ, float indexes: errors at the call.
    let wrong = Tensor::from_vec(vec![0u32, 1], &[2, 1], dev).unwrap();
    assert!(x.gather(&wrong, -1).is_err());
    assert!(x.gather(&x, -1).is_err());
}

fuse::device_tests!(sorts_match_reference, gather_picks_along_any_axis);
