//! A small seeded random number generator: xoshiro256** (Blackman and Vigna) seeded through
//! splitmix64, written from the published algorithm descriptions.
//!
//! The cell needs reproducible runs for a seed and independent streams per UE and purpose
//! (HARQ draws, RSRQ noise), so that adding a UE or switching the noise on does not change
//! another stream's draws. A cryptographic generator would be wasted here.

/// One independent stream of pseudo-random numbers.
#[derive(Clone, Debug)]
pub struct Rng {
    state: [u64; 4],
}

/// The splitmix64 step: advances `x` and returns a well-mixed 64-bit value.
fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// The generator for stream `stream` of run seed `seed`. Different (seed, stream) pairs
    /// give unrelated sequences; the same pair always gives the same sequence.
    pub(crate) fn new(seed: u64, stream: u64) -> Rng {
        // Mix the stream number through splitmix first so that streams 0, 1, 2... of one
        // seed do not start from neighbouring splitmix states.
        let mut mixer = stream;
        let mut x = seed ^ splitmix64(&mut mixer);
        let state = [splitmix64(&mut x), splitmix64(&mut x), splitmix64(&mut x), splitmix64(&mut x)];
        Rng { state }
    }

    /// The next 64 uniformly distributed bits (xoshiro256**).
    pub(crate) fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A uniform draw from [0, 1) with 53 bits of precision.
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p` (0 never, 1 always). Always consumes one draw, so a stream
    /// stays aligned whatever the probabilities were.
    pub(crate) fn bernoulli(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// A standard normal draw (mean 0, standard deviation 1), by the Box–Muller transform.
    pub(crate) fn gaussian(&mut self) -> f64 {
        // 1 − uniform is in (0, 1], so the logarithm is finite.
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::new(7, 3);
        let mut b = Rng::new(7, 3);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = Rng::new(7, 4);
        let mut d = Rng::new(8, 3);
        let first = Rng::new(7, 3).next_u64();
        assert_ne!(c.next_u64(), first);
        assert_ne!(d.next_u64(), first);
    }

    #[test]
    fn moments() {
        let mut rng = Rng::new(1, 0);
        let n = 200_000;
        let (mut sum_u, mut sum_g, mut sum_g2, mut hits) = (0.0, 0.0, 0.0, 0u32);
        for _ in 0..n {
            let u = rng.uniform();
            assert!((0.0..1.0).contains(&u));
            sum_u += u;
            let g = rng.gaussian();
            sum_g += g;
            sum_g2 += g * g;
            hits += u32::from(rng.bernoulli(0.25));
        }
        let n = f64::from(n);
        assert!((sum_u / n - 0.5).abs() < 0.01);
        assert!((sum_g / n).abs() < 0.01);
        assert!((sum_g2 / n - 1.0).abs() < 0.02);
        assert!((f64::from(hits) / n - 0.25).abs() < 0.01);
        assert!(!rng.bernoulli(0.0));
        assert!(rng.bernoulli(1.0));
    }
}
