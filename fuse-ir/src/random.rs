//! One small deterministic generator (SplitMix64) for everything in fuse that draws numbers: the runtime's
//! seeded constructors (`Tensor::rand_seeded`, `Tensor::randn_seeded`) and test helpers, and `quant::random_blocks`. Same
//! seed, same values, on every machine and for every device.

#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 24 bits (every value exact in f32).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Standard normal (Box-Muller on two uniforms; `1 - u` keeps the logarithm finite).
    pub fn normal(&mut self) -> f32 {
        let (u, v) = (1.0 - self.unit() as f64, self.unit() as f64);
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}
