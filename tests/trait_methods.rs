//! `#[fuse(trait_impl)]` on one method of a trait impl (candle's `Module::forward` style): fused with its plan
//! kept in its body, reading the fields of `self`, the other methods of the impl untouched.

use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};

trait Module {
    fn forward(&self, xs: &Tensor) -> Result<Tensor>;
    fn name(&self) -> &'static str;
}

struct Gated {
    norm: Tensor,
    gate: Tensor,
    up: Tensor,
    eps: f32,
}

impl Module for Gated {
    #[fuse(trait_impl)]
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let h = rms_norm(xs, &self.norm, self.eps);
        Ok(silu(h.matmul(&self.gate.t())) * h.matmul(&self.up.t()))
    }

    fn name(&self) -> &'static str {
        "gated"
    }
}

fn one_trait_method_is_fused(dev: &Device) {
    let mut r = TestRng::new(61);
    let (hidden, inter) = (24, 40);
    let m = Gated {
        norm: random(&mut r, &[hidden], DType::F32, 0.5, 1.5, dev),
        gate: random(&mut r, &[inter, hidden], DType::F32, -0.3, 0.3, dev),
        up: random(&mut r, &[inter, hidden], DType::F32, -0.3, 0.3, dev),
        eps: 1e-5,
    };
    assert_eq!(m.name(), "gated");
    for rows in [1, 5] {
        let x = random(&mut r, &[rows, hidden], DType::F32, -1.0, 1.0, dev);
        let h = rms_norm(&x, &m.norm, m.eps).expect("rms_norm");
        let gate = h.matmul(&m.gate.t().expect("t")).and_then(|g| g.silu()).expect("gate");
        let want = (gate * h.matmul(&m.up.t().expect("t")).expect("up")).expect("mul");
        assert_close(&format!("forward, {rows} rows"), &m.forward(&x).expect("forward"), &want, DType::F32, dev);
    }
    // A field of the wrong shape is an error naming the method's graph, as for any fused method.
    let bad = Gated { norm: random(&mut r, &[hidden + 1], DType::F32, 0.5, 1.5, dev), ..m };
    let x = random(&mut r, &[2, hidden], DType::F32, -1.0, 1.0, dev);
    let e = bad.forward(&x).expect_err("a norm weight of the wrong length").to_string();
    assert!(e.contains("forward"), "{e}");
}

fuse::device_tests!(one_trait_method_is_fused);
