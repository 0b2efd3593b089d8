//! STUB: to be replaced by the real algorithm.

use super::{check_bounds, Algorithm, Window};
use crate::ConfigError;

/// Configuration of [`Gradient2`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gradient2Config {
    /// The limit before any window.
    pub initial_limit: f64,
    /// Floor.
    pub min_limit: f64,
    /// Ceiling.
    pub max_limit: f64,
}

impl Default for Gradient2Config {
    fn default() -> Self {
        Self { initial_limit: 20.0, min_limit: 1.0, max_limit: 1000.0 }
    }
}

/// STUB.
#[derive(Clone, Debug)]
pub struct Gradient2 {
    limit: f64,
}

impl Gradient2 {
    /// Builds it, validating the config.
    pub fn new(config: &Gradient2Config) -> Result<Self, ConfigError> {
        check_bounds(config.min_limit, config.initial_limit, config.max_limit)?;
        Ok(Self { limit: config.initial_limit })
    }
}

impl Algorithm for Gradient2 {
    fn limit(&self) -> f64 {
        self.limit
    }
    fn update(&mut self, _window: &Window) -> f64 {
        self.limit
    }
    fn name(&self) -> &'static str {
        "gradient2"
    }
}
