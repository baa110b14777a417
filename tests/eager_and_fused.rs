//! The same body, written eager-style (`&`, `?`, methods, integer literals), runs as plain Rust on eager
//! tensors and traces unchanged under `#[fuse]`; both give the reference's answer.

use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};

fn eager(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    let h = (x.silu()? * 2)?;
    let g = (&h + 1)?.tanh()?.maximum(&x.abs()?)?;
    let n = (g.powf(2)? - (b - 3)?.recip()?)?;
    let s = (x.matmul(&w.t()?)? / 4)?;
    Ok(((s.exp()?.sum(-1)? + n.mean(-1)?)? + (1 - x.max(-1)?)?.sqrt()?.minimum(&x.sigmoid()?)?)?)
}

#[fuse]
fn fused(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    let h = (x.silu()? * 2)?;
    let g = (&h + 1)?.tanh()?.maximum(&x.abs()?)?;
    let n = (g.powf(2)? - (b - 3)?.recip()?)?;
    let s = (x.matmul(&w.t()?)? / 4)?;
    Ok(((s.exp()?.sum(-1)? + n.mean(-1)?)? + (1 - x.max(-1)?)?.sqrt()?.minimum(&x.sigmoid()?)?)?)
}

fn both_forms_agree_with_the_reference(dev: &Device) {
    let mut r = TestRng::new(31);
    for (m, k) in [(1, 1), (3, 17), (17, 33)] {
        let x = random(&mut r, &[m, k], DType::F32, -0.9, 0.9, dev);
        let w = random(&mut r, &[5, k], DType::F32, -0.5, 0.5, dev);
        let b = random(&mut r, &[k], DType::F32, 0.5, 1.5, dev);
        let args = [fuse::arg(&x), fuse::arg(&w), fuse::arg(&b)];
        let want = fuse::reference(fused_fused(), &args).expect("the reference");
        assert_close(&format!("#[fuse] [{m}, {k}]"), &fused(&x, &w, &b).expect("fused"), &want[0], DType::F32, dev);
        assert_close(&format!("eager [{m}, {k}]"), &eager(&x, &w, &b).expect("eager"), &want[0], DType::F32, dev);
    }
}

/// candle's names for two ops (`sqr` for `square`, `gelu_erf` for `gelu`), eager and under `#[fuse]`.
#[fuse]
fn candle_names(x: &Tensor) -> Result<Tensor> {
    Ok(((x.sqr()? + gelu_erf(x)?)? * x.gelu_erf()?)?)
}

fn candle_names_are_fuses_ops(dev: &Device) {
    let x = random(&mut TestRng::new(5), &[7, 33], DType::F32, -2.0, 2.0, dev);
    let want = ((x.square().unwrap() + gelu(&x).unwrap()).unwrap() * x.gelu().unwrap()).unwrap();
    let eager = ((x.sqr().unwrap() + gelu_erf(&x).unwrap()).unwrap() * x.gelu_erf().unwrap()).unwrap();
    assert_close("eager", &eager, &want, DType::F32, dev);
    assert_close("#[fuse]", &candle_names(&x).expect("fused"), &want, DType::F32, dev);
}

/// `x.clamp(min, max)` (candle's), a literal and a scalar parameter as the bounds.
#[fuse]
fn clamped(x: &Tensor, max: f32) -> Result<Tensor> {
    x.clamp(-0.5, max)
}

fn clamp_keeps_values_within_the_bounds(dev: &Device) {
    let x = random(&mut TestRng::new(6), &[5, 19], DType::F32, -2.0, 2.0, dev);
    let want: Vec<f32> = x.to_vec::<f32>().unwrap().iter().map(|v| v.clamp(-0.5, 1.25)).collect();
    let want = Tensor::from_vec(want, &[5, 19], dev).unwrap();
    assert_close("eager", &x.clamp(-0.5, 1.25).unwrap(), &want, DType::F32, dev);
    assert_close("#[fuse]", &clamped(&x, 1.25).expect("fused"), &want, DType::F32, dev);
}

fuse::device_tests!(
    both_forms_agree_with_the_reference,
    candle_names_are_fuses_ops,
    clamp_keeps_values_within_the_bounds
);
