//! What a measurement comes to: timed batches, pooled over rounds into the record's rows
//! ([`Row`], [`Stats`]: `crate::record`), and the floors a row is compared with.

use std::time::Instant;

pub use crate::record::{Row, Stats, P99_SAMPLES};

/// Batches of `batch` iterations of `step`, timed per batch.
pub(super) fn timed_batches(iters: u64, batch: u64, mut step: impl FnMut()) -> Vec<f64> {
    let batches = (iters / batch).max(1);
    let mut samples = Vec::with_capacity(batches as usize);
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..batch {
            step();
        }
        samples.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    samples
}

/// One row from its rounds: the stats pooled as [`pool`] does; the emulator's time per barrier
/// from the round whose median is the row's (so that device and host time split one round's
/// barrier); network operations the rounds' mean.
pub(super) fn pool_rounds(rounds: &[&Row]) -> Row {
    let stats: Vec<Stats> = rounds.iter().map(|r| r.stats).collect();
    let pooled = pool(&stats);
    let median_round = rounds
        .iter()
        .min_by(|a, b| (a.stats.median - pooled.median).abs().total_cmp(&(b.stats.median - pooled.median).abs()));
    let emulator_ns = median_round.and_then(|r| r.emulator_ns);
    let net: Vec<f64> = rounds.iter().filter_map(|r| r.network_ops).collect();
    let network_ops = (!net.is_empty()).then(|| net.iter().sum::<f64>() / net.len() as f64);
    let sw: Vec<f64> = rounds.iter().filter_map(|r| r.switches).collect();
    let switches = (!sw.is_empty()).then(|| sw.iter().sum::<f64>() / sw.len() as f64);
    Row {
        iters: rounds.iter().map(|r| r.iters).sum(),
        measurements: rounds.iter().map(|r| r.measurements).sum(),
        stats: pooled,
        emulator_ns,
        network_ops,
        switches,
        ..rounds[0].clone()
    }
}

/// Pools several measurements: the median of medians (and of the other statistics; min of mins).
pub(super) fn pool(all: &[Stats]) -> Stats {
    let med = |f: fn(&Stats) -> f64| Stats::from_samples(all.iter().map(f).collect()).median;
    Stats {
        median: med(|s| s.median),
        p99: med(|s| s.p99),
        mean: med(|s| s.mean),
        min: all.iter().map(|s| s.min).fold(f64::MAX, f64::min),
    }
}

/// The floors of a run, by rank count.
pub(crate) struct Floors {
    /// (ranks, the floor's median ns) where the ranks fit the cores.
    latency: Vec<(usize, f64)>,
    cores: usize,
}

impl Floors {
    pub(crate) fn of(rows: &[Row], cores: usize) -> Floors {
        let latency = rows
            .iter()
            .filter(|r| r.backend == "floor" && r.stats.median.is_finite())
            .map(|r| (r.ranks, r.stats.median))
            .collect();
        Floors { latency, cores }
    }

    /// The floor's median at `n` ranks, if it was measured.
    pub(crate) fn latency(&self, n: usize) -> Option<f64> {
        self.latency.iter().find(|(r, _)| *r == n).map(|(_, f)| *f)
    }

    /// Ranks less cores, where the ranks outnumber the cores.
    pub(crate) fn switches(&self, n: usize) -> Option<usize> {
        (n > self.cores).then(|| n - self.cores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_pick_order_statistics() {
        let s = Stats::from_samples((1..=100).map(|v| v as f64).collect());
        assert_eq!(s.min, 1.0);
        assert_eq!(s.median, 51.0);
        assert_eq!(s.p99, 99.0);
        assert!((s.mean - 50.5).abs() < 1e-9);
        assert_eq!(Stats::decode(&s.encode()), Some(s));
    }

    #[test]
    fn json_row_has_the_documented_fields() {
        let r = Row {
            backend: "std".into(),
            algorithm: "-".into(),
            ranks: 4,
            iters: 10,
            measurements: 1,
            stats: Stats { median: 2.0, p99: 3.0, mean: 2.5, min: 1.0 },
            emulator_ns: None,
            network_ops: None,
            switches: Some(0.5),
            label: "std".into(),
        };
        let j = r.to_json_with(Some(1.0), None, true);
        for key in [
            "\"backend\":\"std\"",
            "\"ranks\":4",
            "\"iters\":10",
            "\"median_ns\":2.0",
            "\"p99_ns\":3.0",
            "\"mean_ns\":2.5",
            "\"min_ns\":1.0",
            "\"network_ops_per_barrier\":null",
            "\"x_floor\":2.000",
            "\"switches_per_barrier\":0.50",
            "\"switch_floor\":null",
        ] {
            assert!(j.contains(key), "{j} lacks {key}");
        }
    }
}
