//! Deterministic random inputs for the table-driven tests, so that failures reproduce.

use podracer::array::{Array, Data};

/// splitmix64: a tiny deterministic PRNG.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    pub fn f32s(&mut self, shape: &[usize], lo: f32, hi: f32) -> Array {
        let n = shape.iter().product();
        Array::f32(shape.to_vec(), (0..n).map(|_| self.f32(lo, hi)).collect())
    }

    /// Uniform in `[lo, hi)`.
    pub fn i32s(&mut self, shape: &[usize], lo: i32, hi: i32) -> Array {
        let n = shape.iter().product();
        let span = (i64::from(hi) - i64::from(lo)) as u64;
        Array::i32(shape.to_vec(), (0..n).map(|_| (i64::from(lo) + (self.next() % span) as i64) as i32).collect())
    }

    pub fn u32s(&mut self, shape: &[usize]) -> Array {
        let n = shape.iter().product();
        Array::new(shape.to_vec(), Data::U32((0..n).map(|_| self.next() as u32).collect()))
    }

    pub fn u8s(&mut self, shape: &[usize]) -> Array {
        let n = shape.iter().product();
        Array::new(shape.to_vec(), Data::U8((0..n).map(|_| self.next() as u8).collect()))
    }

    pub fn bools(&mut self, shape: &[usize]) -> Array {
        let n = shape.iter().product();
        Array::new(shape.to_vec(), Data::Bool((0..n).map(|_| self.next() & 1 == 1).collect()))
    }
}
