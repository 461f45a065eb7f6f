//! `barrier bench`: latency per barrier for every backend, beside two references measured in
//! the same run.
//!
//! * **floor**, at every rank count the ranks fit the cores: the best of three raw protocols
//!   ([`RawProtocol`]: dissemination flags, a flat gather with one release flag, a 4-ary gather
//!   with one release flag) run in threads pinned one per core, with one writer per 256-byte
//!   block and nothing but the protocol. That is the least a barrier of that many ranks costs
//!   on this machine; every row of the count is also given as a multiple of it (`x floor`).
//!   Virtual machines change speed from one second to the next, so each protocol is measured
//!   once per round, between the rounds of the other rows, and pooled (median of medians).
//! * **switches**: where ranks outnumber the cores a barrier cannot be cheaper than the context
//!   switches it needs (every rank must run once per barrier: at least ranks less cores
//!   switches), so the floor there is that count, and every row reports the switches per
//!   barrier the kernel counted for its ranks (`getrusage`, all ranks together).
//! * **std**: `std::sync::Barrier` with as many threads as ranks.
//! * **hurdles**: `hurdles::Barrier`, the fastest Rust barrier crate measured here, likewise.
//! * **sync** and **team**: this library's barriers for a program's own threads
//!   (`barrier::sync::Barrier`, the drop-in for std's, and `barrier::sync::Team`), likewise.
//! * **openmp** (`libgomp`, `libomp`): `#pragma omp barrier` with as many OpenMP threads, in a
//!   harness built here with each OpenMP compiler found ([`openmp`]).
//!
//! `--interleave` compares instead ours, the floor protocol and hurdles timed in alternating
//! chunks in the same two pinned threads (see [`interleave`]).
//!
//! Backends run as real processes under the launcher (this same binary, hidden subcommand
//! `bench-rank`), pinned one per core when the ranks fit on the cores. Time is read once per
//! batch of barriers (a clock read costs about as much as a barrier), so a sample is the mean
//! latency of one batch; the median, p99, mean and min are over those samples.

pub mod openmp;
mod options;
mod rank;
mod reference;
mod stats;
mod table;

pub use crate::record::plot;
pub use options::BenchOptions;
pub use rank::{rank_main, SETTLING_WARMUP};
pub use reference::{
    hurdles_barrier, interleave, process_switches, ratio, raw_floor, run_interleave, std_barrier, sync_barrier,
    team_barrier, thread_switches, Interleaved, RawProtocol,
};
pub use stats::{Row, Stats, P99_SAMPLES};
pub(crate) use table::today_utc;

use rank::timed_barriers;
use stats::{pool, pool_rounds, Floors};
use table::{machine_name, print_table};

use std::io::{IsTerminal, Write};

use barrier_launch::{launch, JobSpec};

/// Fewer timed batches than this cannot give a median worth printing: refused.
pub const MIN_SAMPLES: u64 = 10;
/// Rounds per row unless `--rounds` says otherwise (fewer when a round would get fewer than
/// [`MIN_SAMPLES`] batches).
pub const DEFAULT_ROUNDS: u64 = 3;

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
    let mut switches = 0u64;
    for (rank, out) in report.stdout.iter().enumerate() {
        let line = out.lines().find_map(|l| l.strip_prefix("SWITCHES\t"));
        switches += line
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or(format!("rank {rank} printed no context-switch count"))?;
    }
    Ok(Row {
        backend,
        algorithm,
        ranks: n,
        iters,
        measurements: 1,
        stats,
        emulator_ns,
        network_ops,
        switches: Some(switches as f64 / iters as f64),
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
            // Each rank thread's own switches while it was timed, as a rank process counts its.
            let switches_before = thread_switches();
            let samples = timed_barriers(&world, iters, batch)?;
            let switches = thread_switches() - switches_before;
            world.barrier()?;
            Ok((world.backend().to_string(), world.algorithm(), samples, switches))
        })
        .map_err(|e| e.to_string())?;
    let mut ranks = out.into_iter();
    let (backend, algorithm, samples, mut switches) = ranks.next().ok_or("no ranks")?.map_err(|e| e.to_string())?;
    for r in ranks {
        switches += r.map_err(|e| e.to_string())?.3;
    }
    let switches = switches as f64 / iters as f64;
    Ok(Row {
        backend,
        algorithm: format!("{algorithm} (threads)"),
        ranks: n,
        iters,
        measurements: 1,
        stats: Stats::from_samples(samples),
        emulator_ns: None,
        network_ops: Some(0.0),
        switches: Some(switches),
        label: String::new(),
    })
}

/// The floor row at `n` ranks: the raw protocol with the lowest pooled median (its note, with
/// every protocol's median, goes to `notes`); with more ranks than cores, the context switches
/// a barrier needs (ranks less cores), and no latency.
fn floor_row(
    n: usize,
    cores: usize,
    raw: &[(RawProtocol, Vec<(Stats, f64)>)],
    floor_iters: u64,
    notes: &mut Vec<String>,
) -> Option<Row> {
    let row = |algorithm: String, measurements: u64, stats: Stats, switches: Option<f64>| Row {
        backend: "floor".into(),
        algorithm,
        ranks: n,
        iters: floor_iters * measurements,
        measurements,
        stats,
        emulator_ns: None,
        network_ops: None,
        switches,
        label: "floor".into(),
    };
    if n > cores {
        let nan = Stats { median: f64::NAN, p99: f64::NAN, mean: f64::NAN, min: f64::NAN };
        let switches = (n - cores) as f64;
        return Some(row(format!("{n} ranks on {cores} cores: {} switch(es)", n - cores), 0, nan, Some(switches)));
    }
    let pooled: Vec<(RawProtocol, Stats, u64, f64)> = raw
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(p, s)| {
            let stats: Vec<Stats> = s.iter().map(|m| m.0).collect();
            let switches = s.iter().map(|m| m.1).sum::<f64>() / s.len() as f64;
            (*p, pool(&stats), s.len() as u64, switches)
        })
        .collect();
    let (best, stats, measurements, switches) = *pooled.iter().min_by(|a, b| a.1.median.total_cmp(&b.1.median))?;
    let each: Vec<String> = pooled.iter().map(|(p, s, _, _)| format!("{} {:.1}", p.name(), s.median)).collect();
    notes.push(format!("floor at {n} ranks: {} (medians, ns: {})", best.name(), each.join(", ")));
    Some(row(best.name(), measurements, stats, Some(switches)))
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
        if opts.algorithms && name == barrier::backends::dissemination::NAME {
            for a in barrier::backends::dissemination::Algorithm::ALL {
                configs.push((
                    format!("{name}/{}", a.name()),
                    vec![("BARRIER_BACKEND".into(), name.clone()), ("BARRIER_SW_ALGORITHM".into(), a.name().into())],
                ));
            }
        }
    }
    // Ctrl-C stops the measurement, and the rows measured until then are still printed.
    let _signals = barrier_launch::signals::install();
    let cores = barrier::sys::available_cores();
    // The raw protocols run where the ranks fit the cores (they only spin).
    let raw_at = |n: usize| if (2..=cores).contains(&n) { RawProtocol::ALL.len() } else { 0 };
    let mut progress = Progress {
        total: opts.ranks.iter().map(|&n| rounds as usize * (2 + configs.len() + raw_at(n))).sum(),
        done: 0,
        tty: std::io::stderr().is_terminal(),
    };
    // The OpenMP harnesses, built once (a runtime this machine lacks is said under the table).
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let omp_dir = std::env::temp_dir().join(format!("barrier-bench-omp-{}-{stamp}", std::process::id()));
    let (omps, omp_missing) = openmp::build_all(&omp_dir);
    let mut omp_notes: Vec<String> =
        omp_missing.iter().map(|(runtime, why)| format!("not measured: openmp ({runtime}): {why}")).collect();
    progress.total += opts.ranks.len() * rounds as usize * omps.len();
    let mut rows = Vec::new();
    // Rows that could not be measured: (label, ranks, why). The others go on.
    let mut skipped: Vec<(String, usize, String)> = Vec::new();
    // Each raw protocol is measured once per round at a quarter of a row's barriers.
    let floor_iters = (round_iters / 4 / opts.batch).max(1) * opts.batch;
    // What each raw protocol measured, per rank count (for the lines under the table).
    let mut floor_notes: Vec<String> = Vec::new();
    for &n in &opts.ranks {
        // The rows of this rank count take turns, round by round, so that a slow spell of the
        // machine falls on all of them alike; each row pools its rounds.
        let mut measured: Vec<Vec<Row>> = Vec::new();
        let mut raw: Vec<(RawProtocol, Vec<(Stats, f64)>)> =
            RawProtocol::ALL.iter().take(raw_at(n)).map(|&p| (p, Vec::new())).collect();
        for round in 0..rounds {
            let of = if rounds > 1 { format!(", round {}/{rounds}", round + 1) } else { String::new() };
            let mut this_round = Vec::new();
            for (protocol, samples) in &mut raw {
                progress.step(&format!("{} n={n}{of}", protocol.name()));
                // (A raw protocol always runs to its end: what it measured counts.)
                samples.push(raw_floor(*protocol, n, floor_iters, opts.batch));
                if barrier_launch::signals::peek().is_some() {
                    break;
                }
            }
            if barrier_launch::signals::peek().is_some() {
                measured.push(this_round);
                break;
            }
            let mut interrupted = false;
            for (name, run) in [
                ("std", std_barrier as fn(usize, u64, u64) -> (Stats, f64)),
                ("hurdles", hurdles_barrier),
                ("sync", sync_barrier),
                ("team", team_barrier),
            ] {
                progress.step(&format!("{} n={n}{of}", if name == "std" { "std::sync::Barrier" } else { name }));
                let (stats, switches) = run(n, round_iters, opts.batch);
                this_round.push(Row::of_threads(name, "-", n, round_iters, stats, switches));
                if barrier_launch::signals::peek().is_some() {
                    this_round.pop();
                    interrupted = true;
                    break;
                }
            }
            for omp in &omps {
                if interrupted || omp_notes.iter().any(|note| note.contains(&format!("{} at {n} ", omp.label()))) {
                    continue;
                }
                progress.step(&format!("{} n={n}{of}", omp.label()));
                match omp.measure(n, round_iters, opts.batch) {
                    Ok((stats, switches)) => {
                        this_round.push(Row::of_threads("openmp", omp.runtime, n, round_iters, stats, switches))
                    }
                    Err(why) => omp_notes.push(format!("not measured: {} at {n} threads: {why}", omp.label())),
                }
                interrupted = barrier_launch::signals::peek().is_some();
            }
            if interrupted {
                measured.push(this_round);
                break;
            }
            for (label, env) in &configs {
                progress.step(&format!("{label} n={n}{of}"));
                if skipped.iter().any(|(l, r, _)| l == label && *r == n) {
                    continue;
                }
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
                    Err(why) if barrier_launch::signals::peek().is_none() => skipped.push((label.clone(), n, why)),
                    Err(_) => {}
                }
                if barrier_launch::signals::peek().is_some() {
                    break;
                }
            }
            measured.push(this_round);
            if barrier_launch::signals::peek().is_some() {
                break;
            }
        }
        // The floor of this rank count: the best raw protocol (pooled over its rounds), or
        // with more ranks than cores the context switches a barrier needs.
        if let Some(row) = floor_row(n, cores, &raw, floor_iters, &mut floor_notes) {
            rows.push(row);
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
        if barrier_launch::signals::peek().is_some() {
            break;
        }
    }
    progress.finish();
    let _ = std::fs::remove_dir_all(&omp_dir);
    // A row that failed in one round only is dropped whole, as a backend's is.
    rows.retain(|r: &Row| !omp_notes.iter().any(|note| note.contains(&format!("{} at {} ", r.label, r.ranks))));
    let floors = Floors::of(&rows, cores);
    if opts.json {
        for r in &rows {
            println!(
                "{}",
                r.to_json_with(floors.latency(r.ranks), floors.switches(r.ranks), r.p99_meaningful(opts.batch))
            );
        }
        for note in &omp_notes {
            eprintln!("barrier bench: {note}");
        }
    } else {
        print_table(&rows, &floors, opts, rounds, round_iters * rounds);
        for note in floor_notes.iter().chain(&omp_notes) {
            println!("{note}");
        }
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
            "{}, {} cores; {} UTC; {} barriers per row in batches of {} over {rounds} round(s); floor: best raw protocol per rank count",
            machine_name(),
            barrier::sys::available_cores(),
            today_utc(),
            round_iters * rounds,
            opts.batch
        );
        std::fs::write(path, crate::plot::svg(&rows, barrier::sys::available_cores(), &caption))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        if !opts.json {
            println!("plot written to {}", path.display());
        }
    }
    if let Some(sig) = barrier_launch::signals::take() {
        return Err(format!(
            "interrupted by signal {sig} ({}): the rows above are those measured until then",
            barrier_launch::signal_name(sig)
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
