//! NaN as torch keeps it: `relu`, `maximum`, `minimum`, `clamp`, the `max` and `min` reductions (and so
//! `softmax`) give NaN where an operand is NaN, fused and eager, on the CPU and the GPU, in every float dtype;
//! `argmax` of a row with a NaN is the NaN's index; `max` and `min` over an empty axis are errors.

use fuse::prelude::*;
use fuse::testing::{random, TestRng};

const NAN: f32 = f32::NAN;

#[fuse]
fn pointwise(x: &Tensor, y: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    (relu(x), maximum(x, y), minimum(x, y), x.clamp(-1.0, 1.0))
}

#[fuse]
fn rows(x: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    (x.max(-1), x.min(-1), softmax(x), x.argmax(-1))
}

/// The max reduction as a GEMM's prologue (on the GPU the skinny template's in-kernel prologue).
#[fuse]
fn prologue_max(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    Ok((x - x.max(-1)).matmul(&w.t()))
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).and_then(|t| t.to_vec::<f32>()).expect("values")
}

/// NaN where `want` is NaN, else within a bf16 step of it (every case's finite values are small).
fn same(what: &str, got: &Tensor, want: &[f32]) {
    let got = values(got);
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() { g.is_nan() } else { g == w || (g - w).abs() <= 1e-2 * w.abs().max(1.0) };
        assert!(ok, "{what}: element {i} is {g}, torch gives {w} (all: {got:?})");
    }
}

fn torch_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        NAN
    } else {
        a.max(b)
    }
}

fn torch_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        NAN
    } else {
        a.min(b)
    }
}

fn nan_propagates_fused_and_eager(dev: &Device) {
    #[rustfmt::skip]
    let x = vec![
        NAN, 1.0, 2.0, -3.0, 0.5,
        1.0, 2.0, 3.0, 4.0, 5.0,
        -1.0, NAN, -2.0, 7.0, f32::NEG_INFINITY,
    ];
    #[rustfmt::skip]
    let y = vec![
        0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 9.0, NAN, 0.0, 9.0,
        0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    let relu_want: Vec<f32> = x.iter().map(|&v| torch_max(v, 0.0)).collect();
    let max_want: Vec<f32> = x.iter().zip(&y).map(|(&a, &b)| torch_max(a, b)).collect();
    let min_want: Vec<f32> = x.iter().zip(&y).map(|(&a, &b)| torch_min(a, b)).collect();
    let clamp_want: Vec<f32> = x.iter().map(|&v| torch_min(torch_max(v, -1.0), 1.0)).collect();
    let row_max = [NAN, 5.0, NAN];
    let row_min = [NAN, 1.0, NAN];
    let e: Vec<f32> = (1..=5).map(|v| (v as f32 - 5.0).exp()).collect();
    let total: f32 = e.iter().sum();
    let mut softmax_want = vec![NAN; 15];
    for (i, v) in e.iter().enumerate() {
        softmax_want[5 + i] = v / total;
    }
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let x = Tensor::from_vec(x.clone(), &[3, 5], dev).and_then(|t| t.to_dtype(dtype)).expect("x");
        let y = Tensor::from_vec(y.clone(), &[3, 5], dev).and_then(|t| t.to_dtype(dtype)).expect("y");
        let (relu_f, max_f, min_f, clamp_f) = pointwise(&x, &y).expect("pointwise");
        let (rmax_f, rmin_f, soft_f, arg_f) = rows(&x).expect("rows");
        let eager = [
            ("relu", relu(&x), relu_f, &relu_want[..]),
            ("maximum", maximum(&x, &y), max_f, &max_want[..]),
            ("minimum", minimum(&x, &y), min_f, &min_want[..]),
            ("clamp", x.clamp(-1.0, 1.0), clamp_f, &clamp_want[..]),
            ("max(-1)", x.max(-1), rmax_f, &row_max[..]),
            ("min(-1)", x.min(-1), rmin_f, &row_min[..]),
            ("softmax", softmax(&x), soft_f, &softmax_want[..]),
        ];
        for (what, eager, fused, want) in eager {
            same(&format!("{what} fused {dtype}"), &fused, want);
            same(&format!("{what} eager {dtype}"), &eager.expect("eager"), want);
        }
        let want_idx = vec![0u32, 4, 1];
        assert_eq!(arg_f.to_vec::<u32>().expect("ids"), want_idx, "argmax fused {dtype}: the NaN's index");
        assert_eq!(x.argmax(-1).and_then(|t| t.to_vec::<u32>()).expect("ids"), want_idx, "argmax eager {dtype}");
    }
}

fn a_nan_row_spreads_through_a_prologue_reduction(dev: &Device) {
    let mut r = TestRng::new(41);
    for dtype in [DType::F32, DType::BF16] {
        for rows in [3, 17] {
            let mut xs = values(&random(&mut r, &[rows, 40], DType::F32, -1.0, 1.0, dev));
            xs[40 + 7] = NAN; // row 1
            let x = Tensor::from_vec(xs, &[rows, 40], dev).and_then(|t| t.to_dtype(dtype)).expect("x");
            let w = random(&mut r, &[9, 40], dtype, -0.5, 0.5, dev);
            let got = values(&prologue_max(&x, &w).expect("prologue_max"));
            for (i, v) in got.iter().enumerate() {
                let row = i / 9;
                assert_eq!(v.is_nan(), row == 1, "{dtype} rows={rows}: element {i} ({v}) of row {row}");
            }
        }
    }
}

fn max_and_min_over_an_empty_axis_are_errors(dev: &Device) {
    let x = Tensor::zeros(&[3, 0], DType::F32, dev).expect("an empty tensor");
    for (what, got) in [("max", x.max(-1)), ("min", x.min(-1))] {
        let e = got.expect_err(what).to_string();
        assert!(e.contains(what) && e.contains("[3, 0]") && e.contains("no elements"), "eager {what}: {e}");
    }
    let e = rows(&x).expect_err("fused").to_string();
    assert!(e.contains("max") && e.contains("[3, 0]") && e.contains("no elements"), "fused: {e}");
    // A sum over the same axis is 0, as in torch.
    assert_eq!(x.sum(-1).and_then(|t| t.to_vec::<f32>()).expect("sum"), [0.0; 3]);
}

fuse::device_tests!(
    nan_propagates_fused_and_eager,
    a_nan_row_spreads_through_a_prologue_reduction,
    max_and_min_over_an_empty_axis_are_errors,
);
