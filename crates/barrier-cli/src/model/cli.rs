//! The `barrier model` command: its options, refused input, and what it prints.

use std::path::PathBuf;
use std::process::ExitCode;

/// The options of `barrier model`: its command-line arguments (`barrier model --help`), and what
/// a tool that runs the model fills in.
#[derive(clap::Args, Debug)]
#[command(group = clap::ArgGroup::new("checks").args(["check", "check_mpi"]))]
pub struct ModelArgs {
    /// Nodes of the job.
    #[arg(long, default_value_t = 1, conflicts_with_all = ["sweep", "calibrate", "check"])]
    pub nodes: usize,
    /// Ranks per node.
    #[arg(long, default_value_t = 1, conflicts_with_all = ["calibrate", "check"])]
    pub ppn: usize,
    /// Network profile: ib-hdr, ib-edr, slingshot, tofu-d, custom:PUT,GAP (e.g. custom:1.2us,5ns) or
    /// sim:PUT (simulated nodes with BARRIER_NET_PUT_LATENCY=PUT).
    #[arg(long, default_value = "ib-hdr", conflicts_with_all = ["calibrate", "check"])]
    pub network: String,
    /// Barrier hardware the machine has (switch, gba, a64fx, or none), instead of the profile's.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["calibrate", "check"])]
    pub devices: Option<Vec<String>>,
    /// Every node count from 1 to 4,096 in powers of two.
    #[arg(long)]
    pub sweep: bool,
    /// Print JSON instead of the table.
    #[arg(long, conflicts_with = "sweep")]
    pub json: bool,
    /// Draw latency against nodes (log scale) per backend into this SVG file (with --sweep).
    #[arg(long, requires = "sweep")]
    pub plot: Option<PathBuf>,
    /// Measure this machine's constants (flag hand-off, futex wake, yield, emulated device)
    /// and store them for later runs.
    #[arg(long, conflicts_with_all = ["sweep", "json", "plot", "check"])]
    pub calibrate: bool,
    /// With --calibrate: take the flag hand-off (the floor at 2 ranks) and the cost of a
    /// context switch (rows with more ranks than cores: ns per barrier over switches per
    /// barrier) from this `barrier bench --json` output instead of measuring them.
    #[arg(long, value_name = "FILE", requires = "calibrate")]
    pub bench: Option<PathBuf>,
    /// Measure dissemination and hierarchical barriers across simulated nodes and compare
    /// them with the model's prediction (exit 1 if one is off by more than 25%).
    #[arg(long, conflicts_with_all = ["sweep", "json", "plot"])]
    pub check: bool,
    /// Instead: the model against barriers over this machine's MPI (Open MPI's mpirun, or
    /// MPIRUN, with MPIRUN_ARGS): per layout, a ping-pong between two nodes' first ranks gives
    /// the network's one-way latency, then MPI's own barrier and ours (the roots on our
    /// dissemination, then on MPI's barrier) are measured and predicted. Printed, not
    /// judged. tests/net/model.sh runs it across network namespaces.
    #[arg(long, conflicts_with_all = ["sweep", "json", "plot", "check", "calibrate"])]
    pub check_mpi: bool,
    /// Layouts of --check-mpi, NODESxRANKS (nodes told apart by BARRIER_MPI_NODE_BLOCK).
    #[arg(long, default_value = "2x1,3x1,4x1,2x2", requires = "check_mpi")]
    pub layouts: String,
    /// With --check-mpi: start every rank through this program (tests/net/in-node.sh puts
    /// each in its node's network namespace).
    #[arg(long, value_name = "PATH", requires = "check_mpi")]
    pub wrapper: Option<PathBuf>,
    /// With --check-mpi: the interposer (default: libbarrier_pmpi.so beside this command).
    #[arg(long, value_name = "PATH", requires = "check_mpi")]
    pub mpi_preload: Option<PathBuf>,
    /// Barriers per measured configuration of --check; barriers per chunk of --check-mpi.
    #[arg(long, default_value_t = 400, requires = "checks")]
    pub iters: u64,
    /// The calibration file (default: ~/.cache/barrier/model-calibration).
    #[arg(long)]
    pub calibration: Option<PathBuf>,
}

/// Runs `barrier model`: the exit code says what happened (2: refused input, 1: a failure).
pub fn run(a: ModelArgs) -> ExitCode {
    use super::{Machine, Network, Shape};
    use crate::model;
    if a.nodes == 0 || a.ppn == 0 || a.iters == 0 {
        let flag = if a.nodes == 0 {
            "--nodes"
        } else if a.ppn == 0 {
            "--ppn"
        } else {
            "--iters"
        };
        eprintln!("barrier model: {flag} 0: {flag} must be at least 1");
        return ExitCode::from(2);
    }
    if a.nodes.checked_mul(a.ppn).is_none_or(|n| n > model::MAX_RANKS) {
        eprintln!(
            "barrier model: --nodes {} x --ppn {} is more than the {} ranks the model prices",
            a.nodes,
            a.ppn,
            model::MAX_RANKS
        );
        return ExitCode::from(2);
    }
    let path = a.calibration.clone().or_else(Machine::default_path);
    if a.calibrate {
        let Some(path) = path else {
            eprintln!("barrier model --calibrate: no HOME or XDG_CACHE_HOME to store the calibration in: name a file with --calibration");
            return ExitCode::from(2);
        };
        let measured = match &a.bench {
            None => model::calibrate(),
            Some(file) => {
                std::fs::read_to_string(file).map_err(|e| format!("--bench {}: {e}", file.display())).and_then(|text| {
                    model::calibrate_from_bench(&text).map_err(|e| format!("--bench {}: {e}", file.display()))
                })
            }
        };
        return match measured.and_then(|m| m.save(&path).map(|()| m)) {
            Ok(m) => {
                println!(
                    "barrier model: flag hand-off {:.1} ns, futex wake {:.0} ns, yield hand-off {:.0} ns, emulated device {:.1} ns per barrier, {} cores ({}); stored in {}",
                    m.flag_ns, m.wake_ns, m.yield_ns, m.device_ns, m.cores, m.source, path.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("barrier model --calibrate: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if a.check_mpi {
        return check_mpi(&a);
    }
    if a.check {
        // The check compares with this machine as it is now: its constants are measured first.
        let machine = match model::calibrate() {
            Ok(m) => m,
            Err(e) => {
                eprintln!("barrier model --check: {e}");
                return ExitCode::FAILURE;
            }
        };
        return match model::check(&machine, a.iters) {
            Ok(checks) => {
                println!(
                    "barrier model --check: simulated nodes on this machine (flag hand-off {:.0} ns, yield hand-off {:.0} ns, {} cores), predicted against measured (median)",
                    machine.flag_ns, machine.yield_ns, machine.cores
                );
                println!(
                    "{:<14} {:>6} {:>4} {:>9} {:>12} {:>12} {:>7} {:>7} {:>7}",
                    "backend", "nodes", "ppn", "wire", "predicted", "measured", "error", "launch", "others"
                );
                let (mut off, mut unstable) = (0, 0);
                for c in &checks {
                    let verdict = c.verdict();
                    off += usize::from(verdict == model::Verdict::Off);
                    unstable += usize::from(matches!(verdict, model::Verdict::Unstable | model::Verdict::Busy));
                    println!(
                        "{:<14} {:>6} {:>4} {:>7.0}us {:>10.1}us {:>10.1}us {:>+6.0}% {:>7} {:>7}{}",
                        c.backend,
                        c.shape.nodes,
                        c.shape.ppn,
                        c.wire_ns / 1e3,
                        c.predicted_ns / 1e3,
                        c.measured_ns / 1e3,
                        c.error() * 100.0,
                        c.attempts,
                        c.others_cores.map_or_else(|| "-".to_string(), |o| format!("{o:.2}")),
                        match verdict {
                            model::Verdict::Within => String::new(),
                            model::Verdict::Off =>
                                format!("  OFF (launches within {:.0}% of each other)", (c.spread() - 1.0) * 100.0),
                            model::Verdict::Unstable => format!(
                                "  UNSTABLE (launches {:.0}% apart: the machine's speed moved; not judged)",
                                (c.spread() - 1.0) * 100.0
                            ),
                            model::Verdict::Busy => format!(
                                "  BUSY (other programs kept {:.1} cores busy meanwhile; not judged)",
                                c.others_cores.unwrap_or_default()
                            ),
                        }
                    );
                }
                if unstable > 0 {
                    eprintln!(
                        "barrier model --check: {unstable} of {} not judged: their {} launches disagreed by more than {:.0}%, or other programs kept {:.2} cores or more busy meanwhile (run it again on a quiet machine)",
                        checks.len(),
                        model::CHECK_ATTEMPTS,
                        (model::STABLE_SPREAD - 1.0) * 100.0,
                        model::BUSY_CORES
                    );
                }
                if off > 0 {
                    eprintln!(
                        "barrier model --check: {off} of {} outside ±{:.0}%",
                        checks.len(),
                        model::CHECK_TOLERANCE * 100.0
                    );
                    ExitCode::FAILURE
                } else {
                    println!(
                        "{} within ±{:.0}%{}",
                        if unstable == 0 { "all" } else { "all judged" },
                        model::CHECK_TOLERANCE * 100.0,
                        if unstable == 0 { String::new() } else { format!(" ({unstable} unstable, not judged)") }
                    );
                    ExitCode::SUCCESS
                }
            }
            Err(e) => {
                eprintln!("barrier model --check: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let machine = match path.as_deref().filter(|p| p.exists()) {
        Some(p) => match Machine::load(p) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("barrier model: {e}; run `barrier model --calibrate` again");
                return ExitCode::from(2);
            }
        },
        None if a.calibration.is_some() => {
            eprintln!(
                "barrier model: no calibration at {}: run `barrier model --calibrate --calibration FILE`",
                path.unwrap_or_default().display()
            );
            return ExitCode::from(2);
        }
        None => Machine::builtin(),
    };
    let mut net = match Network::parse(&a.network, &machine) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("barrier model: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(devices) = &a.devices {
        let mut chosen = Vec::new();
        for d in devices {
            match d.as_str() {
                "switch" => chosen.push("switch"),
                "gba" => chosen.push("gba"),
                "a64fx" => chosen.push("a64fx"),
                "none" => {}
                other => {
                    eprintln!("barrier model: --devices {other}: unknown; use switch, gba, a64fx or none");
                    return ExitCode::from(2);
                }
            }
        }
        net.devices = chosen;
    }
    if a.sweep {
        let (text, rows) = model::sweep(a.ppn, &net, &machine);
        print!("{text}");
        if let Some(file) = &a.plot {
            let caption = format!(
                "barrier model: {} ranks per node on {} (put {:.0} ns); this machine: {}",
                a.ppn, net.name, net.put_ns, machine.source
            );
            let svg = crate::plot::svg_by_nodes(&rows, &caption);
            if let Err(e) = std::fs::write(file, svg) {
                eprintln!("barrier model: cannot write {}: {e}", file.display());
                return ExitCode::FAILURE;
            }
            eprintln!("barrier model: plot written to {}", file.display());
        }
        return ExitCode::SUCCESS;
    }
    let shape = Shape { nodes: a.nodes, ppn: a.ppn };
    if a.json {
        print!("{}", model::json(shape, &net, &machine));
    } else {
        print!("{}", model::report(shape, &net, &machine));
    }
    ExitCode::SUCCESS
}

/// `barrier model --check-mpi`: measures, predicts and prints (not judged: exit 0 once every
/// launch ran; 2 for refused input, 1 when a launch failed).
fn check_mpi(a: &ModelArgs) -> ExitCode {
    use crate::model;
    let layouts = match model::parse_layouts(&a.layouts) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("barrier model --check-mpi: {e}");
            return ExitCode::from(2);
        }
    };
    let preload = match a.mpi_preload.clone().or_else(crate::mpibench::default_preload) {
        Some(p) if p.is_file() => p,
        other => {
            eprintln!(
                "barrier model --check-mpi: no interposer at {}: build it with `MPI_PKG_CONFIG=ompi cargo build --release -p \
                 barrier-pmpi --features mpi` or name it with --mpi-preload",
                other.map_or_else(|| "libbarrier_pmpi.so beside this command".into(), |p| p.display().to_string())
            );
            return ExitCode::from(2);
        }
    };
    let machine = match model::calibrate() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("barrier model --check-mpi: {e}");
            return ExitCode::FAILURE;
        }
    };
    let preload = preload.canonicalize().unwrap_or(preload);
    let opts = model::MpiCheckOptions { layouts, iters: a.iters, wrapper: a.wrapper.clone(), preload };
    match model::check_mpi(&opts, &machine) {
        Ok(rows) => {
            println!(
                "barrier model --check-mpi: MPI's messages on this machine ({} cores, flag hand-off {:.0} ns, yield hand-off {:.0} ns); one-way latency from a ping-pong in each launch; medians",
                machine.cores, machine.flag_ns, machine.yield_ns
            );
            println!(
                "{:<7} {:<18} {:>8} {:>8} | {:>8} {:>15} {:>15} | {:>8} {:>15} {:>15} | {:>6}",
                "layout",
                "roots",
                "one-way",
                "exchange",
                "MPI own",
                "pred. one-way",
                "pred. exchange",
                "ours",
                "pred. one-way",
                "pred. exchange",
                "ratio"
            );
            let us = |ns: f64| format!("{:.1}us", ns / 1e3);
            let pred = |ns: f64, err: f64| format!("{} {:+.0}%", us(ns), err * 100.0);
            let mut off = [0usize; 2];
            for r in &rows {
                let (own_1, ours_1) = r.errors(r.from_one_way);
                let (own_x, ours_x) = r.errors(r.from_exchange);
                off[0] += [own_1, ours_1].iter().filter(|e| e.abs() > model::CHECK_TOLERANCE).count();
                off[1] += [own_x, ours_x].iter().filter(|e| e.abs() > model::CHECK_TOLERANCE).count();
                println!(
                    "{:<7} {:<18} {:>8} {:>8} | {:>8} {:>15} {:>15} | {:>8} {:>15} {:>15} | {:>6.3}",
                    format!("{}x{}", r.shape.nodes, r.shape.ppn),
                    match r.way {
                        model::RootsWay::Dissemination => "our dissemination",
                        model::RootsWay::Mpi => "MPI's barrier",
                    },
                    us(r.measured.one_way_ns),
                    us(r.measured.exchange_ns),
                    us(r.measured.own_ns),
                    pred(r.from_one_way.0, own_1),
                    pred(r.from_exchange.0, own_x),
                    us(r.measured.ours_ns),
                    pred(r.from_one_way.1, ours_1),
                    pred(r.from_exchange.1, ours_x),
                    r.measured.ours_ns / r.measured.own_ns,
                );
            }
            println!(
                "outside ±{:.0}%: {} of {} predictions from the one-way latency, {} from the exchange (printed, not judged; docs/model.md says which terms the model misses)",
                model::CHECK_TOLERANCE * 100.0,
                off[0],
                rows.len() * 2,
                off[1]
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("barrier model --check-mpi: {e}");
            ExitCode::FAILURE
        }
    }
}
