//! Functions of one `#[fuse]` impl block call each other (`Self::layer_norm(..)`, `self.mlp(..)`), and so do
//! the functions of a `#[fuse]` module (`layer_norm(..)`): the callee's body is inlined into the caller's
//! graph, so the plan is the one the pasted body would get, and the result is the same as the eager
//! computation.

use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};

struct Block {
    ln_w: Tensor,
    ln_b: Tensor,
    w1: Tensor,
    w2: Tensor,
    eps: f32,
}

#[fuse]
impl Block {
    /// A helper written once: an associated function (no `self`), fused on its own too.
    #[fuse]
    fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Result<Tensor> {
        let d = x - x.mean(-1);
        Ok(d * rsqrt((d * d).mean(-1) + eps) * w + b)
    }

    fn mlp(&self, x: &Tensor) -> Result<Tensor> {
        Ok(gelu(x.matmul(&self.w1.t())).matmul(&self.w2.t()))
    }

    /// Calls both helpers.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = Self::layer_norm(x, &self.ln_w, &self.ln_b, self.eps);
        Ok(x + self.mlp(&h))
    }

    /// The same with the helpers pasted in: the plan to match.
    fn forward_pasted(&self, x: &Tensor) -> Result<Tensor> {
        let d = x - x.mean(-1);
        let h = d * rsqrt((d * d).mean(-1) + self.eps) * &self.ln_w + &self.ln_b;
        Ok(x + gelu(h.matmul(&self.w1.t())).matmul(&self.w2.t()))
    }
}

fn eager_forward(b: &Block, x: &Tensor) -> Result<Tensor> {
    let d = (x - &x.mean(-1)?)?;
    let var = (&d * &d)?.mean(-1)?;
    let h = (((&d * &(var + f64::from(b.eps))?.rsqrt()?)? * &b.ln_w)? + &b.ln_b)?;
    let m = h.matmul(&b.w1.t()?)?.gelu()?.matmul(&b.w2.t()?)?;
    x + &m
}

/// Random weights for a block of `hidden` features and 80 inner ones.
fn random_block(r: &mut TestRng, hidden: usize, dev: &Device) -> Block {
    let inter = 80;
    Block {
        ln_w: random(r, &[hidden], DType::F32, 0.5, 1.5, dev),
        ln_b: random(r, &[hidden], DType::F32, -0.1, 0.1, dev),
        w1: random(r, &[inter, hidden], DType::F32, -0.2, 0.2, dev),
        w2: random(r, &[hidden, inter], DType::F32, -0.2, 0.2, dev),
        eps: 1e-5,
    }
}

fn calls_inside_a_block_are_inlined(dev: &Device) {
    let mut r = TestRng::new(71);
    let hidden = 48;
    let b = random_block(&mut r, hidden, dev);
    for rows in [1, 7] {
        let x = random(&mut r, &[rows, hidden], DType::F32, -1.0, 1.0, dev);
        let want = eager_forward(&b, &x).expect("eager");
        assert_close(&format!("forward, {rows} rows"), &b.forward(&x).expect("forward"), &want, DType::F32, dev);
        let pasted = b.forward_pasted(&x).expect("pasted");
        assert_close(&format!("pasted, {rows} rows"), &pasted, &want, DType::F32, dev);
    }
    let called = Block::forward_fused().plan(Fusion::On).expect("plan");
    let pasted = Block::forward_pasted_fused().plan(Fusion::On).expect("plan");
    let kinds = |p: &fuse::ir::plan::Plan| p.groups.iter().map(|g| (g.kind, g.nodes.len())).collect::<Vec<_>>();
    assert_eq!(kinds(called), kinds(pasted), "the call inlined plans as the pasted body");
    // The helper is a fused function of its own as well.
    let x = random(&mut r, &[3, hidden], DType::F32, -1.0, 1.0, dev);
    let ln = Block::layer_norm(&x, &b.ln_w, &b.ln_b, b.eps).expect("layer_norm");
    assert_eq!(ln.shape(), &[3, hidden]);
}

/// The same helpers as free functions of a module.
#[fuse]
mod layers {
    use fuse::prelude::*;

    pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Result<Tensor> {
        let d = x - x.mean(-1);
        Ok(d * rsqrt((d * d).mean(-1) + eps) * w + b)
    }

    pub fn block(x: &Tensor, ln_w: &Tensor, ln_b: &Tensor, w1: &Tensor, w2: &Tensor, eps: f32) -> Result<Tensor> {
        let h = layer_norm(x, ln_w, ln_b, eps);
        Ok(x + gelu(h.matmul(&w1.t())).matmul(&w2.t()))
    }

    /// Not fused (returns no tensor): left as it is.
    pub fn width() -> usize {
        48
    }
}

fn calls_inside_a_module_are_inlined(dev: &Device) {
    let mut r = TestRng::new(72);
    let hidden = layers::width();
    let b = random_block(&mut r, hidden, dev);
    let x = random(&mut r, &[5, hidden], DType::F32, -1.0, 1.0, dev);
    let got = layers::block(&x, &b.ln_w, &b.ln_b, &b.w1, &b.w2, b.eps).expect("block");
    assert_close("module block", &got, &eager_forward(&b, &x).expect("eager"), DType::F32, dev);
    let plan = layers::block_fused().plan(Fusion::On).expect("plan");
    let pasted = Block::forward_pasted_fused().plan(Fusion::On).expect("plan");
    assert_eq!(plan.groups.len(), pasted.groups.len(), "the module's call inlined");
}

fuse::device_tests!(calls_inside_a_block_are_inlined, calls_inside_a_module_are_inlined);
