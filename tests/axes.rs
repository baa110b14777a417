//! Reductions over any axis, keeping it with size 1 (candle's `sum_keepdim`, `mean_keepdim`, `max_keepdim`,
//! `min_keepdim`), fused and eager, against sums written out in plain Rust; the results broadcast back
//! against their input (`x - x.mean_keepdim(0)`). And axes of size 1 added and removed (`unsqueeze`,
//! `squeeze`, views) and values repeated to a shape (`broadcast_as`, a copy).

use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};

#[fuse]
fn keepdims(x: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor)> {
    (x.sum_keepdim(0), x.max_keepdim(1), x.mean_keepdim(-2), x.min_keepdim(-1), x - x.mean_keepdim(0))
}

/// Reduces axis `axis` of a row-major `shape` with `fold`, keeping it with size 1.
fn reduce(data: &[f32], shape: &[usize], axis: usize, fold: impl Fn(&[f32]) -> f32) -> (Vec<f32>, Vec<usize>) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let n = shape[axis];
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let line: Vec<f32> = (0..n).map(|k| data[(o * n + k) * inner + i]).collect();
            out.push(fold(&line));
        }
    }
    let mut kept = shape.to_vec();
    kept[axis] = 1;
    (out, kept)
}

fn any_axis_reductions_keep_it(dev: &Device) {
    let mut r = TestRng::new(81);
    let sum = |l: &[f32]| l.iter().sum::<f32>();
    let mean = |l: &[f32]| l.iter().sum::<f32>() / l.len() as f32;
    let max = |l: &[f32]| l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let min = |l: &[f32]| l.iter().copied().fold(f32::INFINITY, f32::min);
    for shape in [[2usize, 3, 5], [1, 7, 1], [4, 1, 33]] {
        let x = random(&mut r, &shape, DType::F32, -1.0, 1.0, dev);
        let data = x.to_vec::<f32>().expect("data");
        let tensor = |(v, s): (Vec<f32>, Vec<usize>)| Tensor::from_vec(v, &s, dev).expect("want");
        let want = [
            tensor(reduce(&data, &shape, 0, sum)),
            tensor(reduce(&data, &shape, 1, max)),
            tensor(reduce(&data, &shape, 1, mean)),
            tensor(reduce(&data, &shape, 2, min)),
        ];
        let mean0: Tensor = (&want[0] / shape[0] as f64).expect("mean over axis 0");
        let centred = (&x - &mean0).expect("centred reference");
        let (s0, m1, a1, n2, c) = keepdims(&x).expect("keepdims");
        let eager = [x.sum_keepdim(0), x.max_keepdim(1), x.mean_keepdim(-2), x.min_keepdim(-1)];
        for (k, ((fused, eager), want)) in [s0, m1, a1, n2].iter().zip(eager).zip(&want).enumerate() {
            assert_eq!(fused.shape(), want.shape(), "output {k} of {shape:?}");
            assert_close(&format!("fused {k} {shape:?}"), fused, want, DType::F32, dev);
            assert_close(&format!("eager {k} {shape:?}"), &eager.expect("eager"), want, DType::F32, dev);
        }
        assert_close(&format!("centred {shape:?}"), &c, &centred, DType::F32, dev);
    }
    // An axis out of range is an error naming it.
    let x = random(&mut r, &[2, 3], DType::F32, -1.0, 1.0, dev);
    let e = x.sum_keepdim(2).expect_err("axis 2 of a matrix").to_string();
    assert!(e.contains('2') && e.contains("[2, 3]"), "{e}");
}

/// A per-row scale [rows] made a column with `unsqueeze`, a [rows, 1] sum made a vector with `squeeze`.
#[fuse]
fn size_one_axes(x: &Tensor, scale: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    (x * scale.unsqueeze(1), x.sum(-1).squeeze(-1), x.unsqueeze(0).unsqueeze(-1))
}

fn size_one_axes_come_and_go(dev: &Device) {
    let mut r = TestRng::new(82);
    let x = random(&mut r, &[5, 7], DType::F32, -1.0, 1.0, dev);
    let scale = random(&mut r, &[5], DType::F32, 0.5, 1.5, dev);
    let (scaled, sums, lifted) = size_one_axes(&x, &scale).expect("size_one_axes");
    let want = (&x * &scale.reshape(&[5, 1]).expect("column")).expect("scaled");
    assert_close("x * scale.unsqueeze(1)", &scaled, &want, DType::F32, dev);
    assert_eq!(sums.shape(), &[5]);
    assert_close(
        "x.sum(-1).squeeze(-1)",
        &sums,
        &x.sum(-1).and_then(|s| s.reshape(&[5])).expect("sum"),
        DType::F32,
        dev,
    );
    assert_eq!(lifted.shape(), &[1, 5, 7, 1]);
    assert_eq!(x.unsqueeze(2).expect("eager unsqueeze").shape(), &[5, 7, 1]);
    assert_eq!(x.unsqueeze(-1).and_then(|u| u.squeeze(2)).expect("eager round trip").shape(), &[5, 7]);
    let e = x.squeeze(0).expect_err("axis 0 has size 5").to_string();
    assert!(e.contains("squeeze") && e.contains("size 5"), "{e}");
    let e = x.unsqueeze(3).expect_err("axis 3 of a result of 3 axes").to_string();
    assert!(e.contains("unsqueeze") && e.contains('3'), "{e}");
}

/// A bias [n] repeated over rows, then a column [rows, 1] repeated over columns; the shape from sizes.
#[fuse]
fn broadcasts(x: &Tensor, bias: &Tensor, col: &Tensor) -> Result<(Tensor, Tensor)> {
    let b = bias.broadcast_as(&[x.dim(0), x.dim(1)]);
    (b.sum_keepdim(0), x + col.broadcast_as(&[2, x.dim(0), x.dim(1)]))
}

fn broadcast_as_repeats(dev: &Device) {
    let mut r = TestRng::new(83);
    let (rows, cols) = (6, 9);
    let x = random(&mut r, &[rows, cols], DType::F32, -1.0, 1.0, dev);
    let bias = random(&mut r, &[cols], DType::F32, -1.0, 1.0, dev);
    let col = random(&mut r, &[rows, 1], DType::F32, -1.0, 1.0, dev);
    let (sums, stacked) = broadcasts(&x, &bias, &col).expect("broadcasts");
    let want = (&bias.reshape(&[1, cols]).expect("row") * rows as f64).expect("sum of repeats");
    assert_close("bias repeated, summed over rows", &sums, &want, DType::F32, dev);
    assert_eq!(stacked.shape(), &[2, rows, cols]);
    let once = (&x + &col).expect("x + col");
    assert_close(
        "first copy",
        &stacked.narrow(0, 0, 1).and_then(|t| t.reshape(&[rows, cols])).expect("0"),
        &once,
        DType::F32,
        dev,
    );
    assert_close(
        "second copy",
        &stacked.narrow(0, 1, 1).and_then(|t| t.reshape(&[rows, cols])).expect("1"),
        &once,
        DType::F32,
        dev,
    );
    // Eager: each row the bias.
    let b = bias.broadcast_as(&[rows, cols]).expect("eager broadcast_as");
    assert_eq!(b.shape(), &[rows, cols]);
    for row in 0..rows {
        assert_close(
            &format!("row {row}"),
            &b.narrow(0, row, 1).and_then(|t| t.reshape(&[cols])).expect("row"),
            &bias,
            DType::F32,
            dev,
        );
    }
    let e = x.broadcast_as(&[rows, cols + 1]).expect_err("9 does not stretch to 10").to_string();
    assert!(e.contains("broadcast_as") && e.contains("[6, 10]"), "{e}");
}

/// candle's `chunk`: SwiGLU over one projection split in two, and three uneven parts (10 = 4 + 3 + 3).
#[fuse]
fn chunks(x: &Tensor, y: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let (gate, up) = x.chunk(2, -1)?;
    let (a, b, c) = y.chunk(3, 1);
    (silu(gate) * up, a, b, c * 2.0)
}

fn chunks_split_as_candle_does(dev: &Device) {
    let mut r = TestRng::new(84);
    let x = random(&mut r, &[3, 16], DType::F32, -1.0, 1.0, dev);
    let y = random(&mut r, &[2, 10, 3], DType::F32, -1.0, 1.0, dev);
    let (swiglu, a, b, c) = chunks(&x, &y).expect("chunks");
    let halves = x.chunk(2, -1).expect("eager chunk");
    let want = (halves[0].silu().expect("silu") * &halves[1]).expect("mul");
    assert_close("silu(gate) * up", &swiglu, &want, DType::F32, dev);
    let parts = y.chunk(3, 1).expect("eager chunk");
    assert_eq!(parts.iter().map(|p| p.shape()[1]).collect::<Vec<_>>(), [4, 3, 3]);
    assert_close("first of three", &a, &parts[0], DType::F32, dev);
    assert_close("second of three", &b, &parts[1], DType::F32, dev);
    let doubled = (&parts[2] * 2.0f64).expect("c");
    assert_close("third of three", &c, &doubled, DType::F32, dev);
    assert_eq!(y.narrow(1, 0, 2).and_then(|t| t.chunk(3, 1)).expect("fewer entries than chunks").len(), 2);
}

fuse::device_tests!(
    any_axis_reductions_keep_it,
    size_one_axes_come_and_go,
    broadcast_as_repeats,
    chunks_split_as_candle_does
);
