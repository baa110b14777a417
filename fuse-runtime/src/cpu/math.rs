//! f32 `exp`, `tanh` and `erf` written with plain arithmetic and selects, so loops over them vectorise (libm's
//! scalar calls do not, and dominate a fused pointwise pass otherwise). Both are within a few ulp.

/// e^x: x = k ln2 + r with |r| <= ln2/2, e^r by its Taylor series to degree 7 (error < 1e-8 relative),
/// and 2^k applied in two halves so neither overflows before the product does.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that k * LN2_HI is exact for |k| < 2^9 (Cody-Waite).
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without a rounding instruction.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-104.0, 89.0);
    let shifted = xc * LOG2E + ROUND;
    let kf = shifted - ROUND;
    // The integer k sits in the low mantissa bits of `shifted`: read it without a float-to-int conversion.
    let k = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = (xc - kf * LN2_HI) - kf * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let k1 = k >> 1;
    let k2 = k - k1;
    let pow2 = |e: i32| f32::from_bits(((e + 127) as u32) << 23);
    let y = p * pow2(k1) * pow2(k2);
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// tanh x: an odd series near 0 (where 1 - 2/(e^2x + 1) would cancel), that formula elsewhere.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    let ax = x.abs();
    let x2 = x * x;
    let near_zero = x
        * (1.0
            + x2 * (-1.0 / 3.0
                + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0 - x2 * (1382.0 / 155_925.0))))));
    let far = (1.0 - 2.0 / (exp(2.0 * ax) + 1.0)).copysign(x);
    if ax < 0.3 {
        near_zero
    } else {
        far
    }
}

/// erf a and erfc a for a >= 0: the Maclaurin series (fixed length, so it vectorises) below 1.2, the
/// continued fraction of erfc above (which converges fast there and keeps erfc's relative accuracy where
/// 1 - erf would cancel). Errors: erf below 3e-7 absolute, erfc below 1e-5 relative.
#[inline(always)]
fn erf_erfc(a: f32) -> (f32, f32) {
    const TWO_OVER_SQRT_PI: f32 = std::f32::consts::FRAC_2_SQRT_PI;
    // Past 10, erf is 1 in f32; written as a select so that NaN passes through.
    let a = if a > 10.0 { 10.0 } else { a };
    let a2 = a * a;
    // sum_n (-1)^n a^(2n+1) / (n! (2n+1)); 20 terms reach 1e-12 at a = 1.2.
    let mut term = a;
    let mut series = a;
    for n in 1..20 {
        let nf = n as f32;
        term *= -a2 / nf;
        series += term / (2.0 * nf + 1.0);
    }
    let erf_near = series * TWO_OVER_SQRT_PI;
    // erfc a = e^(-a^2) / sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...)))), evaluated from the tail.
    let mut fraction = a;
    for k in (1..32).rev() {
        fraction = a + (k as f32 * 0.5) / fraction;
    }
    let erfc_far = exp(-a2) * (TWO_OVER_SQRT_PI * 0.5) / fraction;
    if a < 1.2 {
        (erf_near, 1.0 - erf_near)
    } else {
        (1.0 - erfc_far, erfc_far)
    }
}

/// The exact (erf) GELU, `0.5 x (1 + erf(x / sqrt 2))`; for negative x, `1 + erf` is computed as erfc.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    let (erf, erfc) = erf_erfc(x.abs() * std::f32::consts::FRAC_1_SQRT_2);
    let one_plus_erf = if x >= 0.0 { 1.0 + erf } else { erfc };
    0.5 * x * one_plus_erf
}

/// GELU's tanh approximation, `0.5 x (1 + tanh y)` with `y = sqrt(2/pi) (x + 0.044715 x^3)`, computed as
/// the equal `x / (1 + e^(-2y))`, which does not cancel where tanh y is near -1.
#[inline(always)]
pub(crate) fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let y = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
    x / (1.0 + exp(-2.0 * y))
}

/// Dot product over eight lanes (vectorisable; a single running sum is not). Always inlined, so that a caller
/// compiled for AVX2 (`attention_decode`) vectorises it with its features.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// One query's online-softmax step over a tile of keys (`keys` and `values`: the tile's rows of `query.len()`
/// values; `scores` one slot a key): its scores `query . key * scale`, what was summed under the old maximum
/// rescaled once, then the tile's weights added into `sum` and `acc`. `query` is not empty (the attention
/// kernels return early on an empty output). Always inlined (see `dot`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn softmax_tile(
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    scale: f32,
    scores: &mut [f32],
    max: &mut f32,
    sum: &mut f32,
    acc: &mut [f32],
) {
    let d = query.len();
    let mut tile_max = f32::NEG_INFINITY;
    for (s, key) in scores.iter_mut().zip(keys.chunks_exact(d)) {
        *s = dot(query, key) * scale;
        tile_max = tile_max.max(*s);
    }
    let new_max = max.max(tile_max);
    let correction = exp(*max - new_max);
    if correction != 1.0 {
        acc.iter_mut().for_each(|a| *a *= correction);
        *sum *= correction;
    }
    for (&s, value) in scores.iter().zip(values.chunks_exact(d)) {
        let p = exp(s - new_max);
        *sum += p;
        acc.iter_mut().zip(value).for_each(|(a, &x)| *a += p * x);
    }
    *max = new_max;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn erf(x: f32) -> f32 {
        erf_erfc(x.abs()).0.copysign(x)
    }

    fn rel(a: f32, b: f64) -> f64 {
        ((a as f64 - b) / b).abs()
    }

    #[test]
    fn exp_is_accurate_over_the_range() {
        let mut x = -87.0f32;
        while x < 88.0 {
            assert!(rel(exp(x), (x as f64).exp()) < 5e-7, "exp({x}) = {}", exp(x));
            x += 0.0137;
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-200.0), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(89.0).is_infinite());
    }

    #[test]
    fn tanh_is_accurate_near_zero_and_far() {
        let mut x = -12.0f32;
        while x < 12.0 {
            if x != 0.0 {
                assert!(rel(tanh(x), (x as f64).tanh()) < 5e-7, "tanh({x}) = {}", tanh(x));
            }
            x += 0.00731;
        }
        assert_eq!(tanh(1e-30), 1e-30);
        assert_eq!(tanh(50.0), 1.0);
        assert_eq!(tanh(-50.0), -1.0);
        assert!(tanh(f32::NAN).is_nan());
    }

    #[test]
    fn erf_and_gelu_match_the_op_table() {
        let mut x = -8.0f32;
        while x < 8.0 {
            let want = fuse_ir::op::erf(x as f64);
            assert!((erf(x) as f64 - want).abs() < 3e-7, "erf({x}) = {} want {want}", erf(x));
            for (op, got) in [(fuse_ir::UnaryOp::Gelu, gelu(x)), (fuse_ir::UnaryOp::GeluTanh, gelu_tanh(x))] {
                let want = op.eval(x as f64);
                assert!(
                    (got as f64 - want).abs() < 5e-6 * want.abs() + 1e-12,
                    "{}({x}) = {got} want {want}",
                    op.name()
                );
            }
            x += 0.00917;
        }
        assert!(erf(f32::NAN).is_nan());
        assert_eq!(erf(f32::INFINITY), 1.0);
    }
}
