/// An exponentially weighted moving average: `v ← v + α·(x − v)`; the first sample sets
/// `v` directly.
///
/// ```
/// use surgeguard_core::stats::Ewma;
/// let mut e = Ewma::new(0.5).unwrap();
/// e.update(10.0);
/// e.update(20.0);
/// assert_eq!(e.value(), Some(15.0));
/// ```
///
/// Progress: not shared (`&mut self`). Cost: one multiply-add.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ewma {
    alpha: f64,
    value: f64,
    seeded: bool,
}

impl Ewma {
    /// An average with weight `alpha` in `(0, 1]` for each new sample.
    pub fn new(alpha: f64) -> Result<Self, crate::ConfigError> {
        crate::types::check_range(alpha, f64::MIN_POSITIVE, 1.0, "ewma.alpha")?;
        Ok(Self { alpha, value: 0.0, seeded: false })
    }

    /// The weight of an average over the last `n` samples: `2 / (n + 1)`.
    pub fn with_span(n: u32) -> Result<Self, crate::ConfigError> {
        if n == 0 {
            return Err(crate::ConfigError::out_of_range("ewma.span"));
        }
        Self::new(2.0 / (n as f64 + 1.0))
    }

    /// Folds in one sample (NaN and infinities are ignored) and returns the average.
    pub fn update(&mut self, x: f64) -> f64 {
        if x.is_finite() {
            if self.seeded {
                self.value += self.alpha * (x - self.value);
            } else {
                self.value = x;
                self.seeded = true;
            }
        }
        self.value
    }

    /// The average, or `None` before the first sample.
    pub fn value(&self) -> Option<f64> {
        self.seeded.then_some(self.value)
    }

    /// Forgets every sample.
    pub fn reset(&mut self) {
        self.seeded = false;
        self.value = 0.0;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn converges_and_rejects_bad_alpha() {
        let mut e = Ewma::with_span(9).unwrap(); // alpha 0.2
        assert_eq!(e.value(), None);
        for _ in 0..200 {
            e.update(100.0);
        }
        assert!((e.value().unwrap() - 100.0).abs() < 1e-9);
        e.update(f64::NAN);
        assert!((e.value().unwrap() - 100.0).abs() < 1e-9);
        assert!(Ewma::new(0.0).is_err());
        assert!(Ewma::new(1.5).is_err());
        assert!(Ewma::new(f64::NAN).is_err());
        assert!(Ewma::with_span(0).is_err());
    }
}
