//! Checking a fused function against the reference interpreter (fuse-ir's f64 definition of every op).

use crate::call::node_error;
use crate::{Arg, Device, Error, FusedFn, Result, Tensor};
use fuse_ir::interp::{self, Array};

/// Runs `f`'s graph through the reference interpreter (unfused, f64, exact math) on `args` and returns its
/// outputs as f32 tensors on the CPU: the answer a fused run is compared against.
pub fn reference(f: &FusedFn, args: &[Arg<'_>]) -> Result<Vec<Tensor>> {
    let g = f.graph()?;
    if args.len() != g.inputs.len() {
        return Err(Error::ArgumentCount { function: f.name().to_string(), expected: g.inputs.len(), got: args.len() });
    }
    let inputs = args
        .iter()
        .map(|a| match a {
            Arg::Tensor(t) => {
                let data: Vec<f32> = t.to_vec()?;
                Ok(Array::new(t.shape().to_vec(), data.into_iter().map(f64::from).collect()))
            }
            Arg::Scalar(s) => Ok(Array::scalar(*s)),
        })
        .collect::<Result<Vec<Array>>>()?;
    let outputs = interp::eval(g, &inputs).map_err(|e| node_error(f.name(), g, e))?;
    outputs
        .into_iter()
        .map(|a| Tensor::from_vec(a.data.iter().map(|&v| v as f32).collect::<Vec<f32>>(), &a.shape, &Device::Cpu))
        .collect()
}

/// `‖got − want‖₂ / ‖want‖₂` (the denominator floored at 1e-30 so an all-zero reference still compares);
/// infinite when the lengths differ or `got` holds a NaN or infinity where `want` does not.
pub fn rel_l2_error(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        let (g, w) = (g as f64, w as f64);
        if !g.is_finite() && g != w {
            return f64::INFINITY;
        }
        if g != w {
            diff += (g - w) * (g - w);
        }
        norm += w * w;
    }
    diff.sqrt() / norm.sqrt().max(1e-30)
}

#[cfg(test)]
mod tests {
    use super::rel_l2_error;

    #[test]
    fn rel_l2_error_measures_and_flags() {
        assert_eq!(rel_l2_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        let e = rel_l2_error(&[3.0, 4.0], &[3.0, 4.5]);
        assert!((e - 0.5 / (9.0f64 + 20.25).sqrt()).abs() < 1e-12);
        assert_eq!(rel_l2_error(&[f32::NAN], &[1.0]), f64::INFINITY);
        assert_eq!(rel_l2_error(&[1.0], &[1.0, 2.0]), f64::INFINITY);
    }
}
