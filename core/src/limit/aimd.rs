//! STUB: to be replaced by the real algorithm.

use super::{check_bounds, Algorithm, Window};
use crate::ConfigError;

/// Configuration of [`Aimd`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AimdConfig {
    /// The limit before any window.
    pub initial_limit: f64,
    /// Floor.
    pub min_limit: f64,
    /// Ceiling.
    pub max_limit: f64,
}

impl Default for AimdConfig {
    fn default() -> Self {
        Self { initial_limit: 20.0, min_limit: 1.0, max_limit: 1000.0 }
    }
}

/// STUB.
#[derive(Clone, Debug)]
pub struct Aimd {
    limit: f64,
}

impl Aimd {
    /// Builds it, validating the config.
    pub fn new(config: &AimdConfig) -> Result<Self, ConfigError> {
        check_bounds(config.min_limit, config.initial_limit, config.max_limit)?;
        Ok(Self { limit: config.initial_limit })
    }
}

impl Algorithm for Aimd {
    fn limit(&self) -> f64 {
        self.limit
    }
    fn update(&mut self, _window: &Window) -> f64 {
        self.limit
    }
    fn name(&self) -> &'static str {
        "aimd"
    }
}
