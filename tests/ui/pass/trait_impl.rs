use fuse::prelude::*;
use std::marker::PhantomData;

trait Module {
    fn forward(&self, xs: &Tensor) -> Result<Tensor>;
    fn name(&self) -> &'static str;
}

struct Lin {
    w: Tensor,
    b: Tensor,
}

// On the impl block: `forward` is fused, `name` is left as it is.
#[fuse]
impl Module for Lin {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Ok(xs.matmul(&self.w.t()) + &self.b)
    }

    fn name(&self) -> &'static str {
        "lin"
    }
}

// Generics and a `where` clause are copied to the companions' impl.
struct Gated<T> {
    w: Tensor,
    marker: PhantomData<T>,
}

#[fuse]
impl<T: Copy> Module for Gated<T>
where
    T: Default,
{
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Ok(silu(xs.matmul(&self.w)))
    }

    fn name(&self) -> &'static str {
        "gated"
    }
}

// An inherent impl: a marked associated function is fused too.
#[fuse]
impl Lin {
    #[fuse]
    pub fn scale(x: &Tensor, s: f32) -> Result<Tensor> {
        Ok(x * s)
    }

    pub fn bias(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x + &self.b)
    }
}

// One method of a trait impl, the others left as they are: `#[fuse(trait_impl)]` keeps the plan in its body
// (a trait impl can hold no `forward_fused()` companion).
trait Act {
    fn act(&self, xs: &Tensor) -> Result<Tensor>;
    fn label(&self) -> &'static str;
}

impl Act for Lin {
    #[fuse(trait_impl)]
    fn act(&self, xs: &Tensor) -> Result<Tensor> {
        Ok(silu(xs) + &self.b)
    }

    fn label(&self) -> &'static str {
        "act"
    }
}

fn main() {
    let _ = <Lin as Act>::act;
    let _ = <Lin as Act>::label;
    let _: &'static FusedFn = Lin::forward_fused();
    let _: &'static FusedFn = Gated::<u8>::forward_fused();
    let _: &'static FusedFn = Lin::scale_fused();
    let _: &'static FusedFn = Lin::bias_fused();
    let _ = <Lin as Module>::name;
    let _ = <Gated<u8> as Module>::forward;
    let _ = PhantomData::<u8>;
}
