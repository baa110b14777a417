//! `bool` parameters: each combination of their values is a graph of its own, built at compile time; the
//! call picks it. A `bool` passes to attention's `causal` and chooses the branch of an `if`.

use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};

#[fuse]
fn attend(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32, causal: bool) -> Result<Tensor> {
    Ok(attention(q, k, v, scale, causal))
}

#[fuse]
fn act(x: &Tensor, gated: bool, tanh_gelu: bool) -> Result<Tensor> {
    let h = if tanh_gelu { gelu_tanh(x) } else { gelu(x) };
    Ok(if !gated { h } else { h * x })
}

fn each_value_is_its_own_graph(dev: &Device) {
    let mut r = TestRng::new(91);
    let [q, k, v] = [0; 3].map(|_| random(&mut r, &[1, 2, 5, 8], DType::F32, -1.0, 1.0, dev));
    for causal in [false, true] {
        let want = attention(&q, &k, &v, 0.35, causal).expect("eager attention");
        assert_close(
            &format!("causal = {causal}"),
            &attend(&q, &k, &v, 0.35, causal).expect("attend"),
            &want,
            DType::F32,
            dev,
        );
        assert!(attend_fused(causal).name().contains(&format!("causal={causal}")), "{}", attend_fused(causal).name());
    }
    let x = random(&mut r, &[3, 17], DType::F32, -2.0, 2.0, dev);
    for gated in [false, true] {
        for tanh_gelu in [false, true] {
            let h = if tanh_gelu { gelu_tanh(&x) } else { gelu(&x) }.expect("eager");
            let want = if gated { (&h * &x).expect("gate") } else { h };
            let got = act(&x, gated, tanh_gelu).expect("act");
            assert_close(&format!("gated = {gated}, tanh = {tanh_gelu}"), &got, &want, DType::F32, dev);
        }
    }
    // The graphs differ: the gated ones multiply.
    let ops = |gated: bool| act_fused(gated, false).graph().expect("graph").to_text().matches("mul").count();
    assert!(ops(true) > ops(false), "the gated graph multiplies");
    // Their kernels are named from the function's name alone (`[a-z0-9_]`), whatever the variant.
    for kernel in act_fused(true, true).kernels() {
        let name = kernel.spec().expect("spec").name;
        assert!(name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'), "{name}");
    }
}

fuse::device_tests!(each_value_is_its_own_graph);
