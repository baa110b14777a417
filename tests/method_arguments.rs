//! A fused method's fields: passed for the caller by the typed companions (`forward_with`, `forward_explain`),
//! and checked by kind when listed by hand, so that a misplaced field is an error, never a wrong answer.

use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};

struct Block {
    norm: Tensor,
    eps: f32,
    proj: Tensor,
}

impl Block {
    #[fuse]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(rms_norm(x, &self.norm, self.eps).matmul(&self.proj.t()))
    }
}

fn block(dev: &Device) -> (Block, Tensor) {
    let mut r = TestRng::new(41);
    let blk = Block {
        norm: random(&mut r, &[8], DType::F32, 0.5, 1.5, dev),
        eps: 1e-5,
        proj: random(&mut r, &[5, 8], DType::F32, -0.5, 0.5, dev),
    };
    (blk, random(&mut r, &[3, 8], DType::F32, -1.0, 1.0, dev))
}

fn fields_listed_by_hand_in_another_order_are_an_error(dev: &Device) {
    let (blk, x) = block(dev);
    let f = Block::forward_fused();
    let names: Vec<&str> = f.graph().unwrap().inputs.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["x", "self.norm", "self.eps", "self.proj"]);
    let right = f.call(&[fuse::arg(&x), fuse::arg(&blk.norm), fuse::arg(&blk.eps), fuse::arg(&blk.proj)]).unwrap();
    assert_close(
        "by hand, in order",
        &right[0],
        &blk.forward(&x).unwrap().to_device(&Device::Cpu).unwrap(),
        DType::F32,
        dev,
    );
    // eps and norm swapped: rms_norm would have run with a scalar weight and a tensor epsilon.
    let err = f.call(&[fuse::arg(&x), fuse::arg(&blk.eps), fuse::arg(&blk.norm), fuse::arg(&blk.proj)]).unwrap_err();
    assert!(
        matches!(&err, Error::ArgumentKind { parameter, expected: "tensor", got: "scalar", .. } if parameter == "self.norm"),
        "{err}"
    );
    assert!(err.to_string().contains("self.norm"), "{err}");
}

fn typed_companions_pass_the_fields_for_the_caller(dev: &Device) {
    let (blk, x) = block(dev);
    let want = fuse::reference(
        Block::forward_fused(),
        &[fuse::arg(&x), fuse::arg(&blk.norm), fuse::arg(&blk.eps), fuse::arg(&blk.proj)],
    )
    .unwrap();
    for fusion in [Fusion::On, Fusion::Off] {
        assert_close(
            &format!("forward_with {fusion:?}"),
            &blk.forward_with(&x, fusion).unwrap(),
            &want[0],
            DType::F32,
            dev,
        );
    }
    let report = blk.forward_explain(&x).unwrap();
    let words = if dev.is_cuda() { "kernels" } else { "passes" };
    assert!(report.contains(&format!("total: 1 {words} for forward")), "{report}");
}

fuse::device_tests!(
    fields_listed_by_hand_in_another_order_are_an_error,
    typed_companions_pass_the_fields_for_the_caller
);

#[test]
fn a_method_fused_alone_is_named_with_its_type() {
    // `#[fuse]` saw only the method, not `impl Block`: the companion declares the type at run time.
    assert_eq!(Block::forward_fused().name(), "Block::forward");
    let (blk, _) = block(&Device::Cpu);
    let x = Tensor::from_vec(vec![1.0f32; 3 * 7], &[3, 7], &Device::Cpu).unwrap();
    let err = blk.forward(&x).unwrap_err();
    assert!(err.to_string().starts_with("in `Block::forward`:"), "{err}");
}
