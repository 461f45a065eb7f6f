//! A row of a measurement: its [`Stats`] (ns per barrier over timed batches) and what it
//! measured, with its JSON: what `barrier bench` measures and `barrier model` predicts.

/// Fewer timed batches than this make the 99th percentile the maximum: shown as `-`.
pub const P99_SAMPLES: u64 = 100;

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

    pub(crate) fn encode(&self) -> String {
        format!("{} {} {} {}", self.median, self.p99, self.mean, self.min)
    }

    pub(crate) fn decode(text: &str) -> Option<Stats> {
        let v: Vec<f64> = text.split_whitespace().filter_map(|t| t.parse().ok()).collect();
        (v.len() == 4).then(|| Stats { median: v[0], p99: v[1], mean: v[2], min: v[3] })
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
    /// A row of threads measured in this process (the thread rows, OpenMP's): one
    /// measurement, no device or network; labelled `backend`, or `backend (algorithm)`.
    pub fn of_threads(backend: &str, algorithm: &str, ranks: usize, iters: u64, stats: Stats, switches: f64) -> Row {
        let label = if algorithm == "-" { backend.to_string() } else { format!("{backend} ({algorithm})") };
        Row {
            backend: backend.into(),
            algorithm: algorithm.into(),
            ranks,
            iters,
            measurements: 1,
            stats,
            emulator_ns: None,
            network_ops: None,
            switches: Some(switches),
            label,
        }
    }

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
    pub(crate) fn to_json_with(&self, floor: Option<f64>, switch_floor: Option<usize>, p99_ok: bool) -> String {
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
