//! Arithmetic on sizes and scalars inside `#[fuse]`: sizes derived from others (`qkv.dim(2) / 3`,
//! `width * 2`, `x.dim(0) * x.dim(1)`) in views, integers dividing as Rust's do, `as` between integers and
//! floats (`(head as f32).sqrt()`); no group computes them, and a replayed call recomputes them from its own
//! scalar arguments. CPU and GPU, against the same computation written eagerly.

use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};

/// A fused q/k/v projection's value part, split by sizes computed from the input's.
#[fuse]
fn split_value(qkv: &Tensor, heads: usize) -> Result<(Tensor, Tensor)> {
    let width = qkv.dim(2) / 3;
    let head = width / heads;
    let v = qkv.narrow(2, width * 2, width);
    let rows = v.reshape(&[qkv.dim(0) * qkv.dim(1), -1]);
    let scale = 1.0 / (head as f32).sqrt();
    (rows * scale, v.reshape(&[qkv.dim(0), qkv.dim(1), heads, head]))
}

/// Integer division truncates (`n / 2`, `x.dim(1) / 2`); a float on either side divides exactly.
#[fuse]
fn halves(x: &Tensor, n: usize) -> Result<(Tensor, Tensor)> {
    (x * (n / 2) + x.dim(1) / 2, x * ((n as f32) / 2) - (x.dim(1) as f64) / 2.0)
}

/// Only scalar arithmetic around the tensor: the graph has no views, so a GPU call after the first replays.
#[fuse]
fn scaled(x: &Tensor, d: usize, bias: f32) -> Result<Tensor> {
    Ok(x * (1.0 / (d as f32).sqrt()) + bias * 2.0)
}

fn sizes_derived_from_sizes_drive_views(dev: &Device) {
    let mut r = TestRng::new(51);
    for (b, s, heads, head) in [(1, 1, 1, 4), (2, 3, 4, 8), (3, 5, 2, 12)] {
        let width = heads * head;
        let qkv = random(&mut r, &[b, s, 3 * width], DType::F32, -1.0, 1.0, dev);
        let (rows, split) = split_value(&qkv, heads).expect("split_value");
        let v = qkv.narrow(2, 2 * width, width).expect("narrow");
        let want_rows = (v.reshape(&[b * s, width]).expect("reshape") * (1.0 / (head as f64).sqrt())).expect("scale");
        assert_close("rows", &rows, &want_rows, DType::F32, dev);
        assert_eq!(split.shape(), &[b, s, heads, head]);
        assert_close("split", &split, &v.reshape(&[b, s, heads, head]).expect("reshape"), DType::F32, dev);
    }
    // Sizes that do not fit are errors naming the view (a width of 12 is not 5 heads).
    let qkv = random(&mut r, &[1, 2, 36], DType::F32, -1.0, 1.0, dev);
    let e = split_value(&qkv, 5).expect_err("12 / 5 heads").to_string();
    assert!(e.contains("reshape"), "{e}");
}

fn integers_divide_as_rust_does(dev: &Device) {
    let x = random(&mut TestRng::new(52), &[3, 5], DType::F32, -1.0, 1.0, dev);
    for n in [1usize, 6, 7] {
        let (truncated, exact) = halves(&x, n).expect("halves");
        let want = ((&x * (n / 2) as f64).expect("mul") + (5 / 2) as f64).expect("add");
        assert_close(&format!("n = {n}, truncated"), &truncated, &want, DType::F32, dev);
        let half: Tensor = (&x * (n as f64 / 2.0)).expect("mul");
        let want = (half - 2.5f64).expect("sub");
        assert_close(&format!("n = {n}, exact"), &exact, &want, DType::F32, dev);
    }
}

fn host_scalars_are_recomputed_on_every_call(dev: &Device) {
    let x = random(&mut TestRng::new(53), &[4, 33], DType::F32, -1.0, 1.0, dev);
    let plan = scaled_fused().plan(Fusion::On).expect("plan");
    assert_eq!(plan.groups.len(), 1, "the scalar arithmetic is no group of its own: {plan:?}");
    // Repeated calls with changing scalars: on the GPU the second and later calls of one signature replay.
    for (d, bias) in [(16usize, 0.5f32), (64, -1.0), (16, 0.25), (9, 3.0)] {
        let got = scaled(&x, d, bias).expect("scaled");
        let want = ((&x * (1.0 / (d as f64).sqrt())).expect("mul") + f64::from(bias) * 2.0).expect("add");
        assert_close(&format!("d = {d}, bias = {bias}"), &got, &want, DType::F32, dev);
    }
}

/// Heads from a field of `self`: `self.heads` in a size is a number, checked against the field's type.
struct Attention {
    heads: usize,
    scale: f32,
}

#[fuse]
impl Attention {
    fn split(&self, x: &Tensor) -> Result<Tensor> {
        let head = x.dim(2) / self.heads;
        Ok(x.reshape(&[x.dim(0), x.dim(1), self.heads, head]).transpose(1, 2) * self.scale)
    }
}

fn fields_of_self_are_sizes_too(dev: &Device) {
    let x = random(&mut TestRng::new(54), &[2, 3, 12], DType::F32, -1.0, 1.0, dev);
    for heads in [1, 3, 4] {
        let a = Attention { heads, scale: 0.5 };
        let got = a.split(&x).expect("split");
        let split = x.reshape(&[2, 3, heads, 12 / heads]).and_then(|t| t.transpose(1, 2)).expect("eager");
        let want = (split * 0.5f64).expect("scale");
        assert_eq!(got.shape(), &[2, heads, 3, 12 / heads]);
        assert_close(&format!("{heads} heads"), &got, &want, DType::F32, dev);
    }
    // 12 features do not split into 5 heads: the reshape says so.
    let e = Attention { heads: 5, scale: 1.0 }.split(&x).expect_err("5 heads").to_string();
    assert!(e.contains("reshape"), "{e}");
}

fuse::device_tests!(
    fields_of_self_are_sizes_too,
    sizes_derived_from_sizes_drive_views,
    integers_divide_as_rust_does,
    host_scalars_are_recomputed_on_every_call,
);
