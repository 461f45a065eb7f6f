//! What `barrier bench` is asked to measure.

use std::path::PathBuf;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Rank counts.
    pub ranks: Vec<usize>,
    /// Simulated nodes the ranks are spread over.
    pub nodes: usize,
    /// Backend names, or `all`.
    pub backends: Vec<String>,
    /// Add a row per software algorithm.
    pub algorithms: bool,
    /// Start an emulated device for each hardware row.
    pub emulate: bool,
    /// Emulate devices inline (their work runs in the ranks) rather than on an engine thread.
    pub inline: bool,
    /// Barriers per measurement.
    pub iters: u64,
    /// Barriers per timed batch.
    pub batch: u64,
    /// Rounds each row's barriers are split into, the rows taking turns (`None`: as many as
    /// [`super::DEFAULT_ROUNDS`] that leave [`super::MIN_SAMPLES`] batches per round).
    pub rounds: Option<u64>,
    /// One JSON object per line instead of the table.
    pub json: bool,
    /// Write an SVG plot here.
    pub plot: Option<PathBuf>,
}
