//! What a measurement comes to: per-barrier latencies of timed batches summarised
//! ([`Stats`]), pooled over rounds, and the rows of the result ([`Row`]) with their JSON.

use std::time::Instant;

/// Fewer timed batches than this make the 99th percentile the maximum: shown as `-`.
pub const P99_SAMPLES: u64 = 100;

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

/// Summary of one measurement, in nanoseconds per barrier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Median over batches.
    pub median: f64,
    /// 99th percentile over batches.
    pub p99: f64,
    /// Mean over batches.
    pub mean: f64,
    /// Fastest batch.
    pub min: f64,
}

impl Stats {
    /// Summarizes per-barrier latencies of batches.
    pub fn from_samples(mut s: Vec<f64>) -> Stats {
        assert!(!s.is_empty(), "no samples");
        s.sort_by(|a, b| a.total_cmp(b));
        let pick = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        Stats { median: pick(0.5), p99: pick(0.99), mean: s.iter().sum::<f64>() / s.len() as f64, min: s[0] }
    }

    pub(super) fn encode(&self) -> String {
        format!("{} {} {} {}", self.median, self.p99, self.mean, self.min)
    }

    pub(super) fn decode(text: &str) -> Option<Stats> {
        let v: Vec<f64> = text.split_whitespace().filter_map(|t| t.parse().ok()).collect();
        (v.len() == 4).then(|| Stats { median: v[0], p99: v[1], mean: v[2], min: v[3] })
    }
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

/// One row of the result.
#[derive(Debug, Clone)]
pub struct Row {
    /// `floor`, `std`, or a backend name.
    pub backend: String,
    /// Algorithm or mode (`-` for the references).
    pub algorithm: String,
    /// Ranks (threads for the references).
    pub ranks: usize,
    /// Barriers measured.
    pub iters: u64,
    /// Measurements pooled into this row (its rounds; the floor's measurements), each of
    /// `iters / measurements` barriers.
    pub measurements: u64,
    /// Latency.
    pub stats: Stats,
    /// For emulated hardware: the emulator's busy time per barrier, ns.
    pub emulator_ns: Option<f64>,
    /// Operations sent across the (simulated) network per barrier, all ranks together: puts,
    /// atomics and device arrival messages. `None` for the thread references.
    pub network_ops: Option<f64>,
    /// Context switches per barrier, all ranks together, as the kernel counted them for the
    /// ranks while they were timed (thread rows: the process, warm-up included). On a floor row
    /// of more ranks than cores: the floor, ranks less cores.
    pub switches: Option<f64>,
    /// What was asked for: `floor`, `std`, a backend (its automatic choice), or
    /// `backend/algorithm` (forced); the plot draws one line per label.
    pub label: String,
}

impl Row {
    /// This row as a multiple of `floor`, the floor at its rank count: `None` where there is
    /// none (one rank waits for nobody; with more ranks than cores the floor is a count of
    /// context switches, not a latency) and on the floor rows themselves.
    pub fn x_floor(&self, floor: Option<f64>) -> Option<f64> {
        floor.filter(|f| f.is_finite() && self.ranks >= 2 && self.backend != "floor").map(|f| self.stats.median / f)
    }

    /// Whether the p99 of each pooled measurement rests on enough batches to differ from its
    /// maximum.
    pub fn p99_meaningful(&self, batch: u64) -> bool {
        self.iters / self.measurements.max(1) / batch.max(1) >= P99_SAMPLES
    }

    /// One JSON object; `floor`: the floor's median at this row's rank count; `switch_floor`:
    /// ranks less cores, where ranks outnumber the cores.
    pub(super) fn to_json_with(&self, floor: Option<f64>, switch_floor: Option<usize>, p99_ok: bool) -> String {
        let x = self.x_floor(floor).map_or("null".to_string(), |x| format!("{x:.3}"));
        let num = |v: f64| if v.is_finite() { format!("{v:.1}") } else { "null".into() };
        let switches = self.switches.map_or("null".to_string(), |s| format!("{s:.2}"));
        let switch_floor = switch_floor.map_or("null".to_string(), |s| s.to_string());
        let host = self.host_ns().map_or("null".to_string(), |h| format!("{h:.1}"));
        let p99 = if p99_ok { num(self.stats.p99) } else { "null".into() };
        let emu = self.emulator_ns.map_or("null".to_string(), |e| format!("{e:.1}"));
        let net = self.network_ops.map_or("null".to_string(), |e| format!("{e:.2}"));
        format!(
            "{{\"backend\":\"{}\",\"algorithm\":\"{}\",\"ranks\":{},\"iters\":{},\"median_ns\":{},\"p99_ns\":{},\"mean_ns\":{},\"min_ns\":{},\"x_floor\":{},\"emulator_ns_per_barrier\":{},\"host_ns_per_barrier\":{},\"network_ops_per_barrier\":{},\"switches_per_barrier\":{},\"switch_floor\":{}}}",
            self.backend.replace('"', "'"),
            self.algorithm.replace('"', "'"),
            self.ranks,
            self.iters,
            num(self.stats.median),
            p99,
            num(self.stats.mean),
            num(self.stats.min),
            x,
            emu,
            host,
            net,
            switches,
            switch_floor
        )
    }

    /// For emulated hardware: what the host side costs per barrier (the driver's stores, waits
    /// and the calls around them), the median less the device model's share.
    pub fn host_ns(&self) -> Option<f64> {
        self.emulator_ns.map(|e| (self.stats.median - e).max(0.0))
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
