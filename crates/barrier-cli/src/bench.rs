//! `barrier bench`: latency per barrier for every backend, beside two references measured in
//! the same run.
//!
//! * **floor**: two threads pinned to two cores, each storing its epoch into its own cache line
//!   and spinning until the other's line reaches the same epoch. That is the least work any
//!   two-party barrier can do on this machine; every row is also given as a multiple of it.
//!   Virtual machines change speed from one second to the next, so the floor is measured before
//!   every row and the row reported as `floor` pools those measurements (median of medians).
//! * **std**: `std::sync::Barrier` with as many threads as ranks.
//! * **hurdles**: `hurdles::Barrier`, the fastest Rust barrier crate measured here, likewise.
//!
//! `--interleave` compares instead ours, the floor protocol and hurdles timed in alternating
//! chunks in the same two pinned threads (see [`interleave`]).
//!
//! Backends run as real processes under the launcher (this same binary, hidden subcommand
//! `bench-rank`), pinned one per core when the ranks fit on the cores. Time is read once per
//! batch of barriers (a clock read costs about as much as a barrier), so a sample is the mean
//! latency of one batch; the median, p99, mean and min are over those samples.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use barrier::pad::CachePadded;

use crate::launch::{launch, JobSpec};

/// Fewer timed batches than this cannot give a median worth printing: refused.
pub const MIN_SAMPLES: u64 = 10;
/// Rounds per row unless `--rounds` says otherwise (fewer when a round would get fewer than
/// [`MIN_SAMPLES`] batches).
pub const DEFAULT_ROUNDS: u64 = 3;
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

    fn encode(&self) -> String {
        format!("{} {} {} {}", self.median, self.p99, self.mean, self.min)
    }

    fn decode(text: &str) -> Option<Stats> {
        let v: Vec<f64> = text.split_whitespace().filter_map(|t| t.parse().ok()).collect();
        (v.len() == 4).then(|| Stats { median: v[0], p99: v[1], mean: v[2], min: v[3] })
    }
}

/// One row from its rounds: the stats pooled as [`pool`] does; the emulator's time per barrier
/// from the round whose median is the row's (so that device and host time split one round's
/// barrier); network operations the rounds' mean.
fn pool_rounds(rounds: &[&Row]) -> Row {
    let stats: Vec<Stats> = rounds.iter().map(|r| r.stats).collect();
    let pooled = pool(&stats);
    let median_round = rounds
        .iter()
        .min_by(|a, b| (a.stats.median - pooled.median).abs().total_cmp(&(b.stats.median - pooled.median).abs()));
    let emulator_ns = median_round.and_then(|r| r.emulator_ns);
    let net: Vec<f64> = rounds.iter().filter_map(|r| r.network_ops).collect();
    let network_ops = (!net.is_empty()).then(|| net.iter().sum::<f64>() / net.len() as f64);
    Row {
        iters: rounds.iter().map(|r| r.iters).sum(),
        measurements: rounds.iter().map(|r| r.measurements).sum(),
        stats: pooled,
        emulator_ns,
        network_ops,
        ..rounds[0].clone()
    }
}

/// Pools several measurements: the median of medians (and of the other statistics; min of mins).
fn pool(all: &[Stats]) -> Stats {
    let med = |f: fn(&Stats) -> f64| Stats::from_samples(all.iter().map(f).collect()).median;
    Stats {
        median: med(|s| s.median),
        p99: med(|s| s.p99),
        mean: med(|s| s.mean),
        min: all.iter().map(|s| s.min).fold(f64::MAX, f64::min),
    }
}

/// Batches of `batch` iterations of `step`, timed per batch.
fn timed_batches(iters: u64, batch: u64, mut step: impl FnMut()) -> Vec<f64> {
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

/// The floor: two pinned threads, each storing its epoch on its own line, waiting for the other's.
pub fn floor(iters: u64, batch: u64) -> Stats {
    let cores = barrier::sys::affinity_cores();
    let lines: Arc<[CachePadded<AtomicU64>; 2]> = Arc::new(Default::default());
    let warmup = iters / 10;
    let peer = {
        let lines = lines.clone();
        let core = cores.get(1).copied().unwrap_or(0);
        std::thread::spawn(move || {
            let _ = barrier::sys::pin_to_core(core);
            let total = warmup + (iters / batch).max(1) * batch;
            for e in 1..=total {
                lines[1].store(e, Ordering::Release);
                while lines[0].load(Ordering::Acquire) < e {
                    std::hint::spin_loop();
                }
            }
        })
    };
    let before = barrier::sys::affinity_cores();
    let _ = barrier::sys::pin_to_core(cores.first().copied().unwrap_or(0));
    let mut e = 0u64;
    let mut step = || {
        e += 1;
        lines[0].store(e, Ordering::Release);
        while lines[1].load(Ordering::Acquire) < e {
            std::hint::spin_loop();
        }
    };
    for _ in 0..warmup {
        step();
    }
    let samples = timed_batches(iters, batch, step);
    peer.join().expect("floor peer thread");
    // Restore the mask: the ranks launched later inherit this thread's affinity.
    let _ = barrier::sys::set_affinity(&before);
    Stats::from_samples(samples)
}

/// A thread barrier with `n` threads, each waiting through its own `waiter()`; thread 0's
/// timings. A signal (Ctrl-C) stops every thread after the same number of waits: thread 0
/// sets a limit two batches ahead of its own count, and no thread can be a whole batch ahead of
/// another (they are in one barrier), so every thread sees the limit in time.
fn thread_barrier<W: FnMut() + Send + 'static>(n: usize, iters: u64, batch: u64, waiter: impl Fn() -> W) -> Stats {
    // Whole batches of warm-up: the timed batches then start on a batch boundary, all of them.
    let warmup = (iters / 10).min(10_000).next_multiple_of(batch);
    let batches = (iters / batch).max(1);
    let total = warmup + batches * batch;
    let limit = Arc::new(AtomicU64::new(u64::MAX));
    let others: Vec<_> = (1..n)
        .map(|_| {
            let mut wait = waiter();
            let limit = limit.clone();
            std::thread::spawn(move || {
                for i in 0..total {
                    if i % batch == 0 && i / batch >= limit.load(Ordering::Acquire) {
                        break;
                    }
                    wait();
                }
            })
        })
        .collect();
    let mut wait = waiter();
    let mut samples = Vec::with_capacity(batches as usize);
    let mut i = 0;
    while i < total {
        if i % batch == 0 {
            if limit.load(Ordering::Relaxed) == u64::MAX && crate::signals::peek().is_some() {
                limit.store(i / batch + 2, Ordering::Release);
            }
            if i / batch >= limit.load(Ordering::Relaxed) {
                break;
            }
        }
        // A batch is timed whole, from a boundary, once the warm-up is over.
        if i < warmup {
            wait();
            i += 1;
            continue;
        }
        let t = Instant::now();
        for _ in 0..batch {
            wait();
        }
        samples.push(t.elapsed().as_nanos() as f64 / batch as f64);
        i += batch;
    }
    for t in others {
        t.join().expect("reference barrier thread");
    }
    if samples.is_empty() {
        samples.push(f64::NAN);
    }
    Stats::from_samples(samples)
}

/// `std::sync::Barrier` with `n` threads; thread 0's timings.
pub fn std_barrier(n: usize, iters: u64, batch: u64) -> Stats {
    let b = Arc::new(std::sync::Barrier::new(n));
    thread_barrier(n, iters, batch, || {
        let b = b.clone();
        move || {
            b.wait();
        }
    })
}

/// `hurdles::Barrier` (the fastest Rust barrier crate measured here) with `n` threads; thread
/// 0's timings.
pub fn hurdles_barrier(n: usize, iters: u64, batch: u64) -> Stats {
    let b = hurdles::Barrier::new(n);
    thread_barrier(n, iters, batch, || {
        let mut b = b.clone();
        move || {
            b.wait();
        }
    })
}

/// Per-chunk latencies (ns per barrier) of the three contenders of [`interleave`].
#[derive(Debug, Clone, Default)]
pub struct Interleaved {
    /// The raw floor protocol.
    pub floor: Vec<f64>,
    /// This library's barrier (`Communicator::barrier`, thread mode, as configured).
    pub ours: Vec<f64>,
    /// `hurdles::Barrier`.
    pub hurdles: Vec<f64>,
}

/// Ours against the raw floor protocol and hurdles, timed chunk by chunk in the same two
/// threads pinned to two cores: on a machine whose speed changes from one moment to the next,
/// only figures taken side by side like this compare. The order of the three rotates every
/// chunk, and the communicator's barrier lines the threads up before each timed chunk.
pub fn interleave(chunks: usize, per_chunk: u64, params: barrier::Params) -> Result<Interleaved, String> {
    let cores = barrier::sys::affinity_cores();
    if cores.len() < 2 {
        return Err("--interleave needs two cores (the floor is a two-party protocol)".into());
    }
    let lines: [CachePadded<AtomicU64>; 2] = Default::default();
    let hb = hurdles::Barrier::new(2);
    let out = barrier::threads::Job::new(2)
        .params(params)
        .run(|w| -> Result<Interleaved, barrier::Error> {
            let me = w.rank();
            let _ = barrier::sys::pin_to_core(cores[me]);
            let mut hb = hb.clone();
            let mut epoch = 0u64;
            let mut times = Interleaved::default();
            for chunk in 0..chunks + 1 {
                for turn in 0..3 {
                    w.barrier()?;
                    let t = Instant::now();
                    match (chunk + turn) % 3 {
                        0 => {
                            for _ in 0..per_chunk {
                                epoch += 1;
                                lines[me].store(epoch, Ordering::Release);
                                while lines[1 - me].load(Ordering::Acquire) < epoch {
                                    std::hint::spin_loop();
                                }
                            }
                        }
                        1 => {
                            for _ in 0..per_chunk {
                                w.barrier()?;
                            }
                        }
                        _ => {
                            for _ in 0..per_chunk {
                                hb.wait();
                            }
                        }
                    }
                    let ns = t.elapsed().as_nanos() as f64 / per_chunk as f64;
                    // The first round warms up caches and the branch predictors: not kept.
                    if chunk > 0 {
                        match (chunk + turn) % 3 {
                            0 => times.floor.push(ns),
                            1 => times.ours.push(ns),
                            _ => times.hurdles.push(ns),
                        }
                    }
                }
            }
            Ok(times)
        })
        .map_err(|e| e.to_string())?;
    out.into_iter().next().expect("rank 0").map_err(|e| e.to_string())
}

/// The median of per-chunk ratios `a[i] / b[i]`, and their range.
pub fn ratio(a: &[f64], b: &[f64]) -> (f64, f64, f64) {
    let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    r.sort_by(|x, y| x.total_cmp(y));
    (r[r.len() / 2], r[0], r[r.len() - 1])
}

/// Runs and prints `barrier bench --interleave`.
pub fn run_interleave(iters: u64, chunk: u64) -> Result<(), String> {
    let chunks = (iters / chunk.max(1)).max(10) as usize;
    let t = interleave(chunks, chunk, barrier::Params::from_env())?;
    let med = |v: &[f64]| Stats::from_samples(v.to_vec()).median;
    println!(
        "barrier bench --interleave: 2 threads pinned to 2 cores, {chunks} chunks of {chunk} barriers per contender, order rotating"
    );
    println!("{:<12} {:>10} {:>22}", "contender", "median ns", "x floor (median, range)");
    println!("{:<12} {:>10.1} {:>22}", "floor", med(&t.floor), "1.00");
    for (name, v) in [("ours", &t.ours), ("hurdles", &t.hurdles)] {
        let (m, lo, hi) = ratio(v, &t.floor);
        println!("{:<12} {:>10.1} {:>10.3} ({lo:.2}-{hi:.2})", name, med(v), m);
    }
    Ok(())
}

/// `iters` barriers on `comm` in timed batches of `batch` (ns per barrier for each batch); the
/// first error ends the timing and is returned.
fn timed_barriers(comm: &barrier::Communicator, iters: u64, batch: u64) -> Result<Vec<f64>, barrier::Error> {
    let mut err = None;
    let samples = timed_batches(iters, batch, || {
        if err.is_none() {
            if let Err(e) = comm.barrier() {
                err = Some(e);
            }
        }
    });
    err.map_or(Ok(samples), Err)
}

/// Warm-up barriers of an oversubscribed measurement: at 8 ranks on 2 cores about 0.15 s, the
/// time the launcher's balancer takes to even out the worst start it meets.
pub const SETTLING_WARMUP: u64 = 20_000;

/// The body of one rank of a backend measurement (the hidden `bench-rank` subcommand).
pub fn rank_main(iters: u64, batch: u64) -> Result<(), barrier::Error> {
    let uni = barrier::init()?;
    let world = uni.world();
    // With more ranks than the machine has CPUs, the launcher evens out the ranks' placement
    // in the first tenths of a second (see `rebalance`): the warm-up covers that time
    // whatever --iters says. Every rank computes the same count (barriers are collective).
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let warmup = if world.size() > online { SETTLING_WARMUP } else { (iters / 10).min(20_000) };
    for _ in 0..warmup {
        world.barrier()?;
    }
    let network_before = world.network_ops();
    let samples = timed_barriers(world, iters, batch)?;
    let network = world.network_ops() - network_before;
    // Everyone finishes timing before anyone exits.
    world.barrier()?;
    println!("NETWORK\t{network}");
    if world.rank() == 0 {
        println!("RESULT\t{}\t{}\t{}", world.backend(), world.algorithm(), Stats::from_samples(samples).encode());
    }
    Ok(())
}

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
    /// [`DEFAULT_ROUNDS`] that leave [`MIN_SAMPLES`] batches per round).
    pub rounds: Option<u64>,
    /// One JSON object per line instead of the table.
    pub json: bool,
    /// Write an SVG plot here.
    pub plot: Option<PathBuf>,
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
    /// What was asked for: `floor`, `std`, a backend (its automatic choice), or
    /// `backend/algorithm` (forced); the plot draws one line per label.
    pub label: String,
}

impl Row {
    /// This row as a multiple of the floor: only for rows of two or more ranks (the floor is
    /// a two-party barrier; a one-rank "barrier" waits for nobody).
    pub fn x_floor(&self, floor: f64) -> Option<f64> {
        (self.ranks >= 2).then(|| self.stats.median / floor)
    }

    /// Whether the p99 of each pooled measurement rests on enough batches to differ from its
    /// maximum.
    pub fn p99_meaningful(&self, batch: u64) -> bool {
        self.iters / self.measurements.max(1) / batch.max(1) >= P99_SAMPLES
    }

    fn to_json_with(&self, floor: Option<f64>, p99_ok: bool) -> String {
        let x = floor.and_then(|f| self.x_floor(f)).map_or("null".to_string(), |x| format!("{x:.3}"));
        let host = self.host_ns().map_or("null".to_string(), |h| format!("{h:.1}"));
        let p99 = if p99_ok { format!("{:.1}", self.stats.p99) } else { "null".into() };
        let emu = self.emulator_ns.map_or("null".to_string(), |e| format!("{e:.1}"));
        let net = self.network_ops.map_or("null".to_string(), |e| format!("{e:.2}"));
        format!(
            "{{\"backend\":\"{}\",\"algorithm\":\"{}\",\"ranks\":{},\"iters\":{},\"median_ns\":{:.1},\"p99_ns\":{},\"mean_ns\":{:.1},\"min_ns\":{:.1},\"x_floor\":{},\"emulator_ns_per_barrier\":{},\"host_ns_per_barrier\":{},\"network_ops_per_barrier\":{}}}",
            self.backend.replace('"', "'"),
            self.algorithm.replace('"', "'"),
            self.ranks,
            self.iters,
            self.stats.median,
            p99,
            self.stats.mean,
            self.stats.min,
            x,
            emu,
            host,
            net
        )
    }

    /// For emulated hardware: what the host side costs per barrier (the driver's stores, waits
    /// and the calls around them), the median less the device model's share.
    pub fn host_ns(&self) -> Option<f64> {
        self.emulator_ns.map(|e| (self.stats.median - e).max(0.0))
    }
}

struct Progress {
    total: usize,
    done: usize,
    tty: bool,
}

impl Progress {
    fn step(&mut self, what: &str) {
        if self.tty {
            let width = 24;
            let filled = width * self.done / self.total.max(1);
            eprint!(
                "\r[{}{}] {}/{} {:<40}",
                "#".repeat(filled),
                ".".repeat(width - filled),
                self.done,
                self.total,
                what
            );
            let _ = std::io::stderr().flush();
        }
        self.done += 1;
    }

    fn finish(&self) {
        if self.tty {
            eprint!("\r{:<80}\r", "");
        }
    }
}

/// Measures one backend configuration at `n` ranks as processes under the launcher.
pub fn measure_backend(
    n: usize,
    nodes: usize,
    env: Vec<(String, String)>,
    emulate: Option<barrier_emu::Config>,
    iters: u64,
    batch: u64,
) -> Result<Row, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the barrier binary: {e}"))?;
    let mut spec = JobSpec::new(n, exe);
    spec.args = vec![
        "bench-rank".into(),
        "--iters".into(),
        iters.to_string().into(),
        "--batch".into(),
        batch.to_string().into(),
    ];
    spec.env = env;
    spec.nodes = nodes;
    spec.pin = true;
    spec.capture_stdout = true;
    spec.emulate = emulate.into_iter().collect();
    let report = launch(&spec).map_err(|e| e.to_string())?;
    if let Some(why) = report.describe(n) {
        return Err(why);
    }
    let line = report
        .stdout
        .first()
        .and_then(|s| s.lines().find(|l| l.starts_with("RESULT\t")))
        .ok_or("rank 0 printed no result")?;
    let mut parts = line.splitn(4, '\t');
    parts.next();
    let backend = parts.next().unwrap_or_default().to_string();
    let algorithm = parts.next().unwrap_or_default().to_string();
    let stats = Stats::decode(parts.next().unwrap_or_default()).ok_or("unreadable result line")?;
    let emulator_ns = report.devices.first().map(|(_, c)| c.busy_ns as f64 / c.barriers.max(1) as f64);
    // Every rank reports what it sent over the network while it was timed.
    let mut network = 0u64;
    for (rank, out) in report.stdout.iter().enumerate() {
        let line = out.lines().find_map(|l| l.strip_prefix("NETWORK\t"));
        network +=
            line.and_then(|v| v.trim().parse::<u64>().ok()).ok_or(format!("rank {rank} printed no network count"))?;
    }
    let network_ops = Some(network as f64 / iters as f64);
    Ok(Row {
        backend,
        algorithm,
        ranks: n,
        iters,
        measurements: 1,
        stats,
        emulator_ns,
        network_ops,
        label: String::new(),
    })
}

/// Measures the `a64fx` backend at `n` ranks. A blade belongs to one process, so its ranks are
/// threads of this process, each bound to its own PE (the first `n` CPUs of the node, CMG by
/// CMG). With `emulate`, on an emulated node of `layout` started here; else on the device the
/// parameters name.
pub fn measure_a64fx(
    n: usize,
    emulate: Option<barrier_hw::a64fx::node::Layout>,
    iters: u64,
    batch: u64,
) -> Result<Row, String> {
    let node = emulate.map(barrier_emu::a64fx::Node::start).transpose().map_err(|e| e.to_string())?;
    let mut params = barrier::Params::from_env().set("BARRIER_BACKEND", "a64fx").set("BARRIER_TIMEOUT", "60s");
    if let Some(node) = &node {
        params = node.params(params);
    }
    let info = barrier::backends::a64fx::node_info(&params)?;
    let cpus = info.compact_cpus(n).ok_or_else(|| format!("the node has fewer than {n} CPUs"))?;
    let warmup = (iters / 10).min(20_000);
    let out = barrier::threads::Job::new(n)
        .pin_cpus(cpus)
        .params(params)
        .run(|world| -> Result<_, barrier::Error> {
            for _ in 0..warmup {
                world.barrier()?;
            }
            let samples = timed_barriers(&world, iters, batch)?;
            world.barrier()?;
            Ok((world.backend().to_string(), world.algorithm(), samples))
        })
        .map_err(|e| e.to_string())?;
    let mut ranks = out.into_iter();
    let (backend, algorithm, samples) = ranks.next().ok_or("no ranks")?.map_err(|e| e.to_string())?;
    for r in ranks {
        r.map_err(|e| e.to_string())?;
    }
    Ok(Row {
        backend,
        algorithm: format!("{algorithm} (threads)"),
        ranks: n,
        iters,
        measurements: 1,
        stats: Stats::from_samples(samples),
        emulator_ns: None,
        network_ops: Some(0.0),
        label: String::new(),
    })
}

/// Runs the whole benchmark and prints it.
pub fn run(opts: &BenchOptions) -> Result<Vec<Row>, String> {
    let registry = barrier::backends();
    let names: Vec<String> = if opts.backends.iter().any(|b| b == "all") {
        registry.iter().map(|b| b.name().to_string()).collect()
    } else {
        for b in &opts.backends {
            if !registry.iter().any(|r| r.name() == b) {
                let known: Vec<_> = registry.iter().map(|r| r.name()).collect();
                return Err(format!("unknown backend {b:?}; known: {}, or all", known.join(", ")));
            }
        }
        opts.backends.clone()
    };
    // Everything that can be refused is refused before anything is measured.
    let samples = opts.iters / opts.batch.max(1);
    let rounds = opts.rounds.unwrap_or_else(|| (samples / MIN_SAMPLES).clamp(1, DEFAULT_ROUNDS)).max(1);
    if samples / rounds < MIN_SAMPLES {
        return Err(format!(
            "--iters {} in batches of {} over {rounds} round(s) gives {} timed batch(es) per round; a median needs \
             at least {MIN_SAMPLES}: raise --iters, or lower --batch{}",
            opts.iters,
            opts.batch,
            samples / rounds,
            if opts.rounds.is_some() { " or --rounds" } else { "" }
        ));
    }
    // Whole batches: what a round times.
    let round_iters = samples / rounds * opts.batch;
    if let Some(path) = &opts.plot {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| format!("--plot {}: {e} (checked before measuring)", path.display()))?;
    }
    // The emulated A64FX node's shape, read (and refused) once, before any row.
    let a64fx_name = barrier::Backend::name(&barrier::backends::a64fx::A64FX);
    let a64fx_layout = if opts.emulate && names.iter().any(|n| n == a64fx_name) {
        Some(crate::a64fx_layout(&barrier::Params::from_env())?)
    } else {
        None
    };
    // Each configuration: (label, env).
    let mut configs: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for name in &names {
        configs.push((name.clone(), vec![("BARRIER_BACKEND".into(), name.clone())]));
        if opts.algorithms && name == barrier::backends::software::NAME {
            for a in barrier::backends::software::Algorithm::ALL {
                configs.push((
                    format!("{name}/{}", a.name()),
                    vec![("BARRIER_BACKEND".into(), name.clone()), ("BARRIER_SW_ALGORITHM".into(), a.name().into())],
                ));
            }
        }
    }
    // Ctrl-C stops the measurement, and the rows measured until then are still printed.
    let _signals = crate::signals::install();
    let mut progress = Progress {
        total: 1 + opts.ranks.len() * rounds as usize * (2 + configs.len()),
        done: 0,
        tty: std::io::stderr().is_terminal(),
    };
    let mut rows = Vec::new();
    // Rows that could not be measured: (label, ranks, why). The others go on.
    let mut skipped: Vec<(String, usize, String)> = Vec::new();
    // The VM's speed changes from second to second, so the floor is measured again before every
    // row and the reported floor pools all of those samples.
    // (A floor measurement is a quarter of a whole row's barriers: it takes milliseconds.)
    let floor_iters = (opts.iters / 4).max(opts.batch);
    let mut floor_samples: Vec<Stats> = Vec::new();
    progress.step("floor (2 pinned threads)");
    floor_samples.push(floor(floor_iters, opts.batch));
    for &n in &opts.ranks {
        // The rows of this rank count take turns, round by round, so that a slow spell of the
        // machine falls on all of them alike; each row pools its rounds.
        let mut measured: Vec<Vec<Row>> = Vec::new();
        for round in 0..rounds {
            let of = if rounds > 1 { format!(", round {}/{rounds}", round + 1) } else { String::new() };
            let mut this_round = Vec::new();
            progress.step(&format!("std::sync::Barrier n={n}{of}"));
            this_round.push(Row {
                backend: "std".into(),
                algorithm: "-".into(),
                ranks: n,
                iters: round_iters,
                measurements: 1,
                stats: std_barrier(n, round_iters, opts.batch),
                emulator_ns: None,
                network_ops: None,
                label: "std".into(),
            });
            if crate::signals::peek().is_some() {
                // Interrupted: the row was cut short, and is not shown.
                this_round.pop();
                measured.push(this_round);
                break;
            }
            progress.step(&format!("hurdles n={n}{of}"));
            this_round.push(Row {
                backend: "hurdles".into(),
                algorithm: "-".into(),
                ranks: n,
                iters: round_iters,
                measurements: 1,
                stats: hurdles_barrier(n, round_iters, opts.batch),
                emulator_ns: None,
                network_ops: None,
                label: "hurdles".into(),
            });
            if crate::signals::peek().is_some() {
                this_round.pop();
                measured.push(this_round);
                break;
            }
            for (label, env) in &configs {
                progress.step(&format!("{label} n={n}{of}"));
                if skipped.iter().any(|(l, r, _)| l == label && *r == n) {
                    continue;
                }
                floor_samples.push(floor(floor_iters, opts.batch));
                let mut env = env.clone();
                env.push(("BARRIER_TIMEOUT".into(), "60s".into()));
                let device = crate::device_map(label).filter(|_| opts.emulate).map(|map| {
                    let config = barrier_emu::Config::new(map);
                    if opts.inline {
                        config.inline()
                    } else {
                        config
                    }
                });
                let row = if label == a64fx_name {
                    measure_a64fx(n, a64fx_layout, round_iters, opts.batch)
                } else {
                    measure_backend(n, opts.nodes, env, device, round_iters, opts.batch)
                };
                match row {
                    Ok(row) => this_round.push(Row { label: label.clone(), ..row }),
                    // One backend that cannot run here does not stop the others.
                    Err(why) if crate::signals::peek().is_none() => skipped.push((label.clone(), n, why)),
                    Err(_) => {}
                }
                if crate::signals::peek().is_some() {
                    break;
                }
            }
            measured.push(this_round);
            if crate::signals::peek().is_some() {
                break;
            }
        }
        // Pool each row's rounds (a row that failed in a later round is dropped whole).
        let labels: Vec<String> = measured.iter().flatten().map(|r| r.label.clone()).collect();
        let mut seen: Vec<&String> = Vec::new();
        for label in &labels {
            if seen.contains(&label) {
                continue;
            }
            seen.push(label);
            let Some(row) = measured.iter().flatten().find(|r| r.label == *label) else { continue };
            if skipped.iter().any(|(l, r, _)| *l == row.label && *r == n) {
                continue;
            }
            let of_row: Vec<&Row> =
                measured.iter().filter_map(|round| round.iter().find(|r| r.label == row.label)).collect();
            rows.push(pool_rounds(&of_row));
        }
        if crate::signals::peek().is_some() {
            break;
        }
    }
    progress.finish();
    let floor_stats = pool(&floor_samples);
    rows.insert(
        0,
        Row {
            backend: "floor".into(),
            algorithm: "-".into(),
            ranks: 2,
            iters: floor_iters * floor_samples.len() as u64,
            measurements: floor_samples.len() as u64,
            stats: floor_stats,
            emulator_ns: None,
            network_ops: None,
            label: "floor".into(),
        },
    );
    let floor_ns = floor_stats.median;
    if opts.json {
        for r in &rows {
            println!("{}", r.to_json_with(Some(floor_ns), r.p99_meaningful(opts.batch)));
        }
    } else {
        print_table(&rows, floor_ns, opts, rounds, round_iters * rounds);
        let medians: Vec<f64> = floor_samples.iter().map(|f| f.median).collect();
        let (lo, hi) = (medians.iter().cloned().fold(f64::MAX, f64::min), medians.iter().cloned().fold(0.0, f64::max));
        println!(
            "x floor: the floor's median ranged {lo:.1}-{hi:.1} ns over its {} measurements in this run (one before each \
             row); a ratio moves with it, so compare rows of one run with each other, and repeat runs before \
             trusting a ratio across runs",
            medians.len()
        );
    }
    for (label, n, why) in &skipped {
        if opts.json {
            println!(
                "{{\"backend\":\"{}\",\"ranks\":{n},\"skipped\":\"{}\"}}",
                label.replace('"', "'"),
                why.replace('\\', "/").replace('"', "'")
            );
        } else {
            println!("not measured: {label} at {n} ranks: {why}");
        }
    }
    if let Some(path) = &opts.plot {
        let caption = format!(
            "{}, {} cores; {} UTC; {} barriers per row in batches of {} over {rounds} round(s); floor {floor_ns:.1} ns",
            machine_name(),
            barrier::sys::available_cores(),
            today_utc(),
            round_iters * rounds,
            opts.batch
        );
        std::fs::write(path, crate::plot::svg(&rows, floor_ns, barrier::sys::available_cores(), &caption))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        if !opts.json {
            println!("plot written to {}", path.display());
        }
    }
    if let Some(sig) = crate::signals::take() {
        return Err(format!(
            "interrupted by signal {sig} ({}): the rows above are those measured until then",
            crate::launch::signal_name(sig)
        ));
    }
    let asked: Vec<&String> =
        skipped.iter().map(|(l, _, _)| l).filter(|_| !opts.backends.iter().any(|b| b == "all")).collect();
    if !asked.is_empty() {
        return Err(format!(
            "{} row(s) of the backends asked for could not be measured (listed above; `--backend all` lists such rows without failing)",
            asked.len()
        ));
    }
    Ok(rows)
}

fn print_table(rows: &[Row], floor_ns: f64, opts: &BenchOptions, rounds: u64, per_row: u64) {
    let on_nodes = opts.nodes > 1;
    println!(
        "barrier bench: {} cores, {} barriers per row in batches of {}{}, floor {:.1} ns (median){}",
        barrier::sys::available_cores(),
        per_row,
        opts.batch,
        if rounds > 1 { format!(" over {rounds} rounds taken in turn") } else { String::new() },
        floor_ns,
        if on_nodes { format!(", ranks on {} simulated nodes", opts.nodes) } else { String::new() }
    );
    let net_header = if on_nodes { format!(" {:>8}", "net ops") } else { String::new() };
    println!(
        "{:>5}  {:<14} {:<36} {:>11} {:>11} {:>11} {:>11} {:>8} {:>10} {:>8}{net_header}",
        "ranks", "backend", "algorithm", "median ns", "p99 ns", "mean ns", "min ns", "x floor", "device ns", "host ns"
    );
    for r in rows {
        let emu = r.emulator_ns.map_or("-".to_string(), |e| format!("{e:.0}"));
        let host = r.host_ns().map_or("-".to_string(), |h| format!("{h:.0}"));
        let algorithm: String = r.algorithm.chars().take(36).collect();
        let p99 = if r.p99_meaningful(opts.batch) { format!("{:.1}", r.stats.p99) } else { "-".into() };
        let x = r.x_floor(floor_ns).map_or("-".into(), |x| format!("{x:.2}"));
        let net = match (on_nodes, r.network_ops) {
            (false, _) => String::new(),
            (true, None) => format!(" {:>8}", "-"),
            (true, Some(ops)) => format!(" {ops:>8.2}"),
        };
        println!(
            "{:>5}  {:<14} {:<36} {:>11.1} {:>11} {:>11.1} {:>11.1} {:>8} {:>10} {:>8}{net}",
            r.ranks, r.backend, algorithm, r.stats.median, p99, r.stats.mean, r.stats.min, x, emu, host
        );
    }
    if on_nodes {
        println!(
            "net ops: operations per barrier that crossed between simulated nodes, all ranks together \
             (puts, atomics, device arrivals)"
        );
    }
    if rows.iter().any(|r| !r.p99_meaningful(opts.batch)) {
        println!(
            "p99 -: fewer than {P99_SAMPLES} timed batches per round, so the 99th percentile would only be the maximum"
        );
    }
    if rows.iter().any(|r| r.ranks < 2) {
        println!("x floor -: a 1-rank barrier waits for nobody; it is not comparable with the 2-thread floor");
    }
}

/// The processor's model name (`/proc/cpuinfo`), or "this machine".
fn machine_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_string()))
        })
        .unwrap_or_else(|| "this machine".into())
}

/// Today's date, UTC, as YYYY-MM-DD (days since 1970 to the civil calendar).
pub(crate) fn today_utc() -> String {
    let days =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
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
            label: "std".into(),
        };
        let j = r.to_json_with(Some(1.0), true);
        for key in [
            "\"backend\":\"std\"",
            "\"ranks\":4",
            "\"iters\":10",
            "\"median_ns\":2.0",
            "\"p99_ns\":3.0",
            "\"mean_ns\":2.5",
            "\"min_ns\":1.0",
            "\"network_ops_per_barrier\":null",
        ] {
            assert!(j.contains(key), "{j} lacks {key}");
        }
    }
}
