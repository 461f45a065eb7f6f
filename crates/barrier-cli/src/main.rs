//! `barrier`: run a job (launcher), benchmark every backend, report backends and parameters.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use barrier_cli::bench::{self, BenchOptions};
use barrier_launch::{launch, JobSpec};

#[derive(Parser, Debug)]
#[command(
    name = "barrier",
    version,
    about = "The fastest correct barrier this machine offers: launcher, benchmark, report"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start N ranks of PROGRAM as one job.
    Run {
        /// Number of ranks.
        #[arg(short = 'n', long = "np", default_value_t = 1)]
        ranks: usize,
        /// Spread the ranks over M simulated nodes (contiguous blocks).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        nodes: u64,
        /// Give up on any barrier after this long and name the missing ranks (sets BARRIER_TIMEOUT).
        #[arg(long)]
        timeout: Option<String>,
        /// Pin rank r to the r-th core when the ranks fit on the cores.
        #[arg(long)]
        pin: bool,
        /// Run emulated devices inside the launcher: switch, gba, a64fx (an A64FX node shaped by
        /// BARRIER_A64FX_EMU_CMGS and _PES), comma-separated.
        #[arg(long, value_delimiter = ',')]
        emulate: Vec<String>,
        /// Print the emulated devices' counters at the end.
        #[arg(long)]
        counters: bool,
        /// Emulated switch and GBA with an engine thread of their own in the launcher, instead of
        /// inline (their work done by the ranks that ring them, through libbarrier_emu_inline.so,
        /// as in `barrier bench`). The thread competes with the ranks for the cores.
        #[arg(long)]
        threaded_emulator: bool,
        /// Prefix every line a rank prints with its rank ("[3] ..."), whole lines only; standard
        /// output and standard error stay apart (like mpirun --tag-output).
        #[arg(long)]
        tag_output: bool,
        /// The program and its arguments (after --).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        program: Vec<OsString>,
    },
    /// Measure barrier latency of every backend beside the floor and std::sync::Barrier.
    Bench {
        /// Rank counts, comma-separated.
        #[arg(short = 'n', long = "np", value_delimiter = ',', default_values_t = vec![2usize, 4, 8])]
        ranks: Vec<usize>,
        /// Backend name, or all.
        #[arg(long, value_delimiter = ',', default_value = "all")]
        backend: Vec<String>,
        /// Spread the ranks over M simulated nodes (contiguous blocks): internode traffic goes
        /// through the simulated network, is counted (the `net ops` column), and waits out
        /// BARRIER_NET_PUT_LATENCY.
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        /// Also measure each software algorithm on its own.
        #[arg(long)]
        algorithms: bool,
        /// Do not start emulated devices (hardware rows then need real devices).
        #[arg(long)]
        no_emulate: bool,
        /// Emulated devices with an engine thread of their own, instead of inline (their work
        /// then competes with the ranks for the cores).
        #[arg(long, conflicts_with = "no_emulate")]
        threaded_emulator: bool,
        /// Barriers per measurement.
        #[arg(long, default_value_t = 100_000)]
        iters: u64,
        /// Barriers per timed batch.
        #[arg(long, default_value_t = 100)]
        batch: u64,
        /// Split each row's --iters into this many rounds, the rows of a rank count taking
        /// turns, and pool the rounds (median of their medians), so that a slow spell of the
        /// machine falls on every row alike [default: 3, fewer if a round would get fewer than
        /// 10 batches].
        #[arg(long)]
        rounds: Option<u64>,
        /// Print one JSON object per line.
        #[arg(long)]
        json: bool,
        /// Draw latency against rank count into this SVG file.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Instead: time ours against the raw floor protocol (and hurdles) in alternating
        /// chunks of --batch barriers in the same two pinned threads, the comparison that holds
        /// on machines whose speed changes from moment to moment.
        #[arg(long, conflicts_with_all = ["mpi", "shmem", "ranks", "backend", "nodes", "algorithms", "no_emulate", "threaded_emulator", "rounds", "json", "plot"])]
        interleave: bool,
        /// Instead: the machine's MPI_Barrier against the same program's barrier under the
        /// PMPI interposer (libbarrier_pmpi.so), timed in alternating chunks in one run of
        /// mpirun per rank count (--iters barriers each). Needs mpicc and mpirun.
        #[arg(long, conflicts_with_all = ["backend", "nodes", "algorithms", "no_emulate", "threaded_emulator", "batch", "rounds", "json", "plot"])]
        mpi: bool,
        /// The interposer for --mpi (default: libbarrier_pmpi.so beside this command).
        #[arg(long, value_name = "PATH", requires = "mpi")]
        mpi_preload: Option<PathBuf>,
        /// Open MPI's coll component for --mpi, timed as a third variant (default: the one
        /// beside this command, libbarrier_ompi.so, when it was built with its `ompi` feature).
        #[arg(long, value_name = "PATH", requires = "mpi")]
        mpi_component: Option<PathBuf>,
        /// Instead: the OpenSHMEM implementation's shmem_barrier_all and shmem_sync_all against
        /// the same program's under the interposer (libbarrier_shmem.so), timed in alternating
        /// chunks in one run of oshrun per PE count (-n; --iters barriers each). Needs oshcc and
        /// oshrun.
        #[arg(long, conflicts_with_all = ["mpi", "backend", "nodes", "algorithms", "no_emulate", "threaded_emulator", "batch", "rounds", "json", "plot"])]
        shmem: bool,
        /// The interposer for --shmem (default: libbarrier_shmem.so beside this command).
        #[arg(long, value_name = "PATH", requires = "shmem")]
        shmem_preload: Option<PathBuf>,
    },
    /// Predict each backend's barrier latency for a job shape this machine cannot run (a model
    /// calibrated here and by published network figures; docs/model.md).
    #[command(group = clap::ArgGroup::new("checks").args(["check", "check_mpi"]))]
    Model {
        /// Nodes of the job.
        #[arg(long, default_value_t = 1, conflicts_with_all = ["sweep", "calibrate", "check"])]
        nodes: usize,
        /// Ranks per node.
        #[arg(long, default_value_t = 1, conflicts_with_all = ["calibrate", "check"])]
        ppn: usize,
        /// Network profile: ib-hdr, ib-edr, slingshot, tofu-d, custom:PUT,GAP (e.g. custom:1.2us,5ns) or
        /// sim:PUT (simulated nodes with BARRIER_NET_PUT_LATENCY=PUT).
        #[arg(long, default_value = "ib-hdr", conflicts_with_all = ["calibrate", "check"])]
        network: String,
        /// Barrier hardware the machine has (switch, gba, a64fx, or none), instead of the profile's.
        #[arg(long, value_delimiter = ',', conflicts_with_all = ["calibrate", "check"])]
        devices: Option<Vec<String>>,
        /// Every node count from 1 to 4,096 in powers of two.
        #[arg(long)]
        sweep: bool,
        /// Print JSON instead of the table.
        #[arg(long, conflicts_with = "sweep")]
        json: bool,
        /// Draw latency against nodes (log scale) per backend into this SVG file (with --sweep).
        #[arg(long, requires = "sweep")]
        plot: Option<PathBuf>,
        /// Measure this machine's constants (flag hand-off, futex wake, yield, emulated device)
        /// and store them for later runs.
        #[arg(long, conflicts_with_all = ["sweep", "json", "plot", "check"])]
        calibrate: bool,
        /// With --calibrate: take the flag hand-off (the floor at 2 ranks) and the cost of a
        /// context switch (rows with more ranks than cores: ns per barrier over switches per
        /// barrier) from this `barrier bench --json` output instead of measuring them.
        #[arg(long, value_name = "FILE", requires = "calibrate")]
        bench: Option<PathBuf>,
        /// Measure dissemination and hierarchical barriers across simulated nodes and compare
        /// them with the model's prediction (exit 1 if one is off by more than 25%).
        #[arg(long, conflicts_with_all = ["sweep", "json", "plot"])]
        check: bool,
        /// Instead: the model against barriers over this machine's MPI (Open MPI's mpirun, or
        /// MPIRUN, with MPIRUN_ARGS): per layout, a ping-pong between two nodes' first ranks gives
        /// the network's one-way latency, then MPI's own barrier and ours (the roots on our
        /// dissemination, then on MPI's barrier) are measured and predicted. Printed, not
        /// judged. tests/net/model.sh runs it across network namespaces.
        #[arg(long, conflicts_with_all = ["sweep", "json", "plot", "check", "calibrate"])]
        check_mpi: bool,
        /// Layouts of --check-mpi, NODESxRANKS (nodes told apart by BARRIER_MPI_NODE_BLOCK).
        #[arg(long, default_value = "2x1,3x1,4x1,2x2", requires = "check_mpi")]
        layouts: String,
        /// With --check-mpi: start every rank through this program (tests/net/in-node.sh puts
        /// each in its node's network namespace).
        #[arg(long, value_name = "PATH", requires = "check_mpi")]
        wrapper: Option<PathBuf>,
        /// With --check-mpi: the interposer (default: libbarrier_pmpi.so beside this command).
        #[arg(long, value_name = "PATH", requires = "check_mpi")]
        mpi_preload: Option<PathBuf>,
        /// Barriers per measured configuration of --check; barriers per chunk of --check-mpi.
        #[arg(long, default_value_t = 400, requires = "checks")]
        iters: u64,
        /// The calibration file (default: ~/.cache/barrier/model-calibration).
        #[arg(long)]
        calibration: Option<PathBuf>,
    },
    /// Open MPI's components `fastbar` (coll: barrier-ompi; scoll for OSHMEM: barrier-oshmem):
    /// where they are, and how a user or a site installs them for the Open MPI found here
    /// (docs/ompi.md).
    Ompi {
        /// One component library (default: libbarrier_ompi.so and libbarrier_oshmem.so beside
        /// this command, whichever were built).
        #[arg(long, value_name = "PATH")]
        component: Option<PathBuf>,
        /// Copy them into DIR under their MCA names (mca_coll_fastbar.so, mca_scoll_fastbar.so;
        /// then name DIR in OMPI_MCA_mca_base_component_path, with Open MPI's own directory).
        #[arg(long, value_name = "DIR")]
        install: Option<PathBuf>,
    },
    /// List backends and parameters, and show which backend a job of N ranks gets and why.
    Info {
        /// Ranks of the job to select for.
        #[arg(short = 'n', long = "np", default_value_t = 2)]
        ranks: usize,
        /// Simulated nodes.
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        /// Start emulated devices for the report: switch, gba, a64fx, comma-separated.
        #[arg(long, value_delimiter = ',')]
        emulate: Vec<String>,
    },
    /// Run an emulated device as a daemon that several jobs share, until SIGINT/SIGTERM.
    Emu {
        /// switch or gba.
        #[arg(long, default_value = "switch")]
        kind: String,
        /// Where to create the device file (removed on exit).
        #[arg(long)]
        device: PathBuf,
        /// Probability of dropping an arrival.
        #[arg(long, default_value_t = 0.0, value_parser = probability)]
        drop_arrival: f64,
        /// Probability of dropping a release store.
        #[arg(long, default_value_t = 0.0, value_parser = probability)]
        drop_release: f64,
        /// Probability of duplicating a release store.
        #[arg(long, default_value_t = 0.0, value_parser = probability)]
        duplicate_release: f64,
        /// Stick the ERROR bit after this many barriers.
        #[arg(long)]
        stick_error_after: Option<u64>,
        /// Vanish after this many barriers.
        #[arg(long)]
        vanish_after: Option<u64>,
        /// Sleep this many microseconds before each release.
        #[arg(long, default_value_t = 0)]
        slow_us: u64,
        /// Delay per network hop of a release, nanoseconds.
        #[arg(long, default_value_t = 0)]
        hop_ns: u64,
        /// Delay per member released, nanoseconds.
        #[arg(long, default_value_t = 0)]
        member_ns: u64,
    },
    /// One rank of a benchmark job (started by `barrier bench`).
    #[command(hide = true)]
    BenchRank {
        #[arg(long)]
        iters: u64,
        #[arg(long)]
        batch: u64,
        /// Before the first barrier, move to this CPU and take the whole mask back (an uneven
        /// start for the launcher's balancer to correct).
        #[arg(long)]
        start_on_cpu: Option<usize>,
    },
}

/// A probability: a number from 0 to 1.
fn probability(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{text} is not a probability (a number from 0 to 1, e.g. 0.01)")),
    }
}

/// Checks what every rank would check at `init()`, before anything starts: the launcher's
/// environment (ranks inherit it) and `--timeout`.
/// `BARRIER_*` names that are not parameters but are still ours: what the launcher passes to
/// the ranks, and the emulated A64FX node's shape and debugging switches.
const OTHER_NAMES: &[&str] = &[
    barrier::ENV_SHM_FD,
    barrier::ENV_RANK,
    barrier::ENV_SIZE,
    barrier::ENV_NODES,
    barrier::ENV_LIFELINE_FD,
    "BARRIER_A64FX_EMU_CMGS",
    "BARRIER_A64FX_EMU_PES",
    "BARRIER_A64FX_SYSFS",
    "BARRIER_HIER_DEBUG",
];

/// One warning per `BARRIER_*` variable of the environment that no setting of this build
/// reads (a misspelt one would otherwise be ignored without a word), with the nearest name.
fn warn_unknown_settings(who: &str) {
    let mut known: Vec<String> = barrier::registry::all_params().into_iter().map(|p| p.name).collect();
    known.extend(OTHER_NAMES.iter().map(|s| s.to_string()));
    known.extend(["SWITCH", "GBA", "A64FX"].iter().map(|k| format!("BARRIER_{k}_DEVICE_PATH")));
    for (name, _) in std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v))) {
        if !name.starts_with("BARRIER_") || known.contains(&name) {
            continue;
        }
        let nearest = known.iter().min_by_key(|k| edit_distance(&name, k)).cloned().unwrap_or_default();
        eprintln!(
            "{who}: warning: {name} is not a setting this build reads, and is ignored unless a backend the \
             program registers reads it (did you mean {nearest}? `barrier info` lists every setting)"
        );
    }
}

/// Levenshtein distance between two names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != b[j])).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// Refuses a setting every rank would refuse. `program`: the command starts a program of the
/// user's, which may register backends of its own: `BARRIER_BACKEND` may then name backends
/// this build does not have (the ranks agree on them by name), and gets a warning, not a refusal.
fn check_settings(timeout: Option<&str>, program: bool) -> Result<(), String> {
    let params = barrier::Params::from_env();
    let checked = if program {
        barrier::registry::check_all_but_backend_names(&params)
    } else {
        barrier::registry::check_all(&params)
    };
    checked.map_err(|bad| format!("{} (in the environment: every rank would refuse to start)", bad.1))?;
    if program {
        let known = barrier::registry::backend_names();
        for name in params.get("BARRIER_BACKEND").unwrap_or_default().split(',').map(str::trim) {
            if !name.is_empty() && !known.iter().any(|k| k.eq_ignore_ascii_case(name)) {
                eprintln!(
                    "barrier run: warning: BARRIER_BACKEND names {name}, which is not a backend of this build ({}): \
                     the ranks fail unless the program registers it (barrier::register_backend)",
                    known.join(", ")
                );
            }
        }
    }
    if let Some(t) = timeout {
        let p = barrier::Params::defaults_only().set_as("BARRIER_TIMEOUT", t, "--timeout");
        if let Some(info) = barrier::registry::all_params().into_iter().find(|i| i.name == "BARRIER_TIMEOUT") {
            p.check(&info).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

fn info(
    ranks: usize,
    nodes: usize,
    maps: &[&'static barrier_hw::DeviceMap],
    a64fx: Option<barrier_hw::a64fx::node::Layout>,
) -> ExitCode {
    match barrier_cli::info::report(ranks.max(1), nodes.max(1), maps, a64fx) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("barrier info: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The devices `barrier <command> --emulate <kinds>` names: register maps, and the shape of an
/// A64FX node (from its parameters); a bad name or shape is reported and is exit code 2.
fn emulated_devices(
    command: &str,
    kinds: &[String],
) -> Result<(Vec<&'static barrier_hw::DeviceMap>, Option<barrier_hw::a64fx::node::Layout>), ExitCode> {
    let mut maps = Vec::new();
    let mut a64fx = None;
    for kind in kinds {
        if kind.trim().eq_ignore_ascii_case("a64fx") {
            match barrier_cli::a64fx_layout(&barrier::Params::from_env()) {
                Ok(layout) => a64fx = Some(layout),
                Err(e) => {
                    eprintln!("barrier {command}: --emulate a64fx: {e}");
                    return Err(ExitCode::from(2));
                }
            }
            continue;
        }
        match barrier_cli::device_map(kind) {
            Some(map) => maps.push(map),
            None => {
                eprintln!("barrier {command}: --emulate {kind}: unknown device; use switch, gba, a64fx or a list");
                return Err(ExitCode::from(2));
            }
        }
    }
    Ok((maps, a64fx))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Run { ranks, nodes, timeout, pin, emulate, counters, threaded_emulator, tag_output, program } => {
            if let Err(e) = check_settings(timeout.as_deref(), true) {
                eprintln!("barrier run: {e}");
                return ExitCode::from(2);
            }
            warn_unknown_settings("barrier run");
            if ranks == 0 {
                eprintln!("barrier run: -n 0: a job needs at least 1 rank");
                return ExitCode::from(2);
            }
            if emulate.is_empty() && counters {
                eprintln!("barrier run: --counters prints an emulated device's counters: add --emulate switch,gba");
                return ExitCode::from(2);
            }
            let mut spec = JobSpec::new(ranks, PathBuf::from(&program[0]));
            spec.args = program[1..].to_vec();
            spec.nodes = (nodes as usize).min(ranks.max(1));
            if nodes as usize > ranks {
                eprintln!(
                    "barrier run: --nodes {nodes} is more than the {ranks} ranks: using {ranks} nodes of one rank each"
                );
            }
            spec.pin = pin;
            spec.tag_output = tag_output;
            match emulated_devices("run", &emulate) {
                Ok((maps, a64fx)) => {
                    spec.emulate = maps.into_iter().map(barrier_emu::Config::new).collect();
                    spec.emulate_a64fx = a64fx;
                }
                Err(code) => return code,
            }
            if !spec.emulate.is_empty() && !threaded_emulator {
                let kinds: Vec<&str> = spec.emulate.iter().map(|c| c.map.kind).collect();
                match barrier_launch::inline_emulator_library() {
                    Ok(library) => {
                        spec.emulate = spec.emulate.into_iter().map(barrier_emu::Config::inline).collect();
                        if barrier::Params::from_env().flag("BARRIER_VERBOSE").unwrap_or(false) {
                            eprintln!(
                                "barrier run: emulated {} inline, the ranks doing the device's work through {}",
                                kinds.join(","),
                                library.display()
                            );
                        }
                        spec.env
                            .push((barrier::mmio::INLINE_LIBRARY_VAR.into(), library.to_string_lossy().into_owned()));
                    }
                    Err(why) => eprintln!(
                        "barrier run: the emulated {} runs on an engine thread of its own, which competes with \
                         the ranks for the cores (tens of µs a barrier on a small machine) because the inline \
                         emulator cannot be used: {why}; --threaded-emulator asks for the thread and silences this",
                        kinds.join(",")
                    ),
                }
            }
            let cores = barrier::sys::affinity_cores().len();
            let busy = ranks + usize::from(spec.emulate.iter().any(|c| !c.inline));
            if pin && busy > cores {
                eprintln!(
                    "barrier run: --pin ignored: {ranks} ranks{} do not fit on the {cores} cores this launcher may use",
                    if busy == ranks { "" } else { " and an emulated device's engine" }
                );
            }
            if let Some(t) = timeout {
                spec.env.push(("BARRIER_TIMEOUT".into(), t));
            }
            match launch(&spec) {
                Ok(report) => {
                    if let Some(msg) = report.describe(ranks) {
                        eprintln!("{msg}");
                    }
                    if counters {
                        for (kind, c) in &report.devices {
                            eprintln!("barrier run: emulated {kind}: {c:?}");
                        }
                    }
                    ExitCode::from(report.exit_code() as u8)
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Bench {
            ranks,
            backend,
            nodes,
            algorithms,
            no_emulate,
            threaded_emulator,
            iters,
            batch,
            rounds,
            json,
            plot,
            interleave,
            mpi,
            mpi_preload,
            mpi_component,
            shmem,
            shmem_preload,
        } => {
            let zero = [
                ("-n", ranks.contains(&0)),
                ("--nodes", nodes == 0),
                ("--iters", iters == 0),
                ("--batch", batch == 0),
                ("--rounds", rounds == Some(0)),
            ];
            if let Some((flag, _)) = zero.iter().find(|(_, is_zero)| *is_zero) {
                eprintln!("barrier bench: {flag} 0: {flag} must be at least 1");
                return ExitCode::from(2);
            }
            // A setting every rank would refuse is refused before anything is measured.
            if let Err(e) = check_settings(None, false) {
                eprintln!("barrier bench: {e}");
                return ExitCode::from(2);
            }
            warn_unknown_settings("barrier bench");
            if let Some(&n) = ranks.iter().find(|&&n| n < nodes) {
                eprintln!("barrier bench: -n {n} is fewer ranks than --nodes {nodes}: every node needs a rank");
                return ExitCode::from(2);
            }
            let known: Vec<&str> = barrier::backends().iter().map(|b| b.name()).collect();
            if let Some(unknown) = backend.iter().find(|b| *b != "all" && !known.contains(&b.as_str())) {
                eprintln!("barrier bench: unknown backend {unknown:?}; known: {}, or all", known.join(", "));
                return ExitCode::from(2);
            }
            if mpi {
                let opts = barrier_cli::mpibench::MpiBenchOptions {
                    ranks,
                    iters,
                    preload: mpi_preload,
                    component: mpi_component,
                };
                return match barrier_cli::mpibench::run(&opts) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("barrier bench --mpi: {e}");
                        ExitCode::FAILURE
                    }
                };
            }
            if shmem {
                let opts = barrier_cli::shmembench::ShmemBenchOptions { pes: ranks, iters, preload: shmem_preload };
                return match barrier_cli::shmembench::run(&opts) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("barrier bench --shmem: {e}");
                        ExitCode::FAILURE
                    }
                };
            }
            if interleave {
                return match bench::run_interleave(iters, batch.max(100)) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("barrier bench: {e}");
                        ExitCode::FAILURE
                    }
                };
            }
            let opts = BenchOptions {
                ranks,
                nodes,
                backends: backend,
                algorithms,
                emulate: !no_emulate,
                inline: !threaded_emulator,
                iters,
                batch: batch.min(iters),
                rounds,
                json,
                plot,
            };
            match bench::run(&opts) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("barrier bench: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Model {
            nodes,
            ppn,
            network,
            devices,
            sweep,
            json,
            plot,
            calibrate,
            bench,
            check,
            check_mpi,
            layouts,
            wrapper,
            mpi_preload,
            iters,
            calibration,
        } => barrier_cli::model::cli::run(barrier_cli::model::cli::ModelArgs {
            nodes,
            ppn,
            network,
            devices,
            sweep,
            json,
            plot,
            calibrate,
            bench,
            check,
            check_mpi,
            layouts,
            wrapper,
            mpi_preload,
            iters,
            calibration,
        }),
        Cmd::Info { ranks, nodes, .. } if ranks == 0 || nodes == 0 => {
            eprintln!("barrier info: {} 0: a job needs at least 1", if ranks == 0 { "-n" } else { "--nodes" });
            ExitCode::from(2)
        }
        Cmd::Ompi { component, install } => match barrier_cli::ompi::run(component, install) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("barrier ompi: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Info { ranks, nodes, emulate } => {
            // A setting every rank would refuse is refused as the other commands refuse it.
            if let Err(e) = check_settings(None, false) {
                eprintln!("barrier info: {e}");
                return ExitCode::from(2);
            }
            warn_unknown_settings("barrier info");
            match emulated_devices("info", &emulate) {
                Ok((maps, a64fx)) => info(ranks, nodes, &maps, a64fx),
                Err(code) => code,
            }
        }
        Cmd::Emu {
            kind,
            device,
            drop_arrival,
            drop_release,
            duplicate_release,
            stick_error_after,
            vanish_after,
            slow_us,
            hop_ns,
            member_ns,
        } => {
            let Some(map) = barrier_cli::device_map(&kind) else {
                eprintln!("barrier emu: --kind {kind}: unknown device; use switch or gba");
                return ExitCode::from(2);
            };
            let faults = barrier_emu::Faults {
                drop_arrival,
                drop_release,
                duplicate_release,
                stick_error_after,
                vanish_after,
                slow_engine: std::time::Duration::from_micros(slow_us),
                seed: std::process::id() as u64,
            };
            let latency = barrier_emu::Latency {
                per_hop: std::time::Duration::from_nanos(hop_ns),
                per_member: std::time::Duration::from_nanos(member_ns),
            };
            match barrier_cli::emu::serve(barrier_emu::Config { map, latency, faults, inline: false }, &device) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("barrier emu: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::BenchRank { iters, batch, start_on_cpu } => {
            // Bench rows emulate devices inline: their work runs in these ranks.
            barrier_emu::inline::install();
            if let Some(cpu) = start_on_cpu {
                let whole = barrier::sys::affinity_cores();
                if let Err(e) = barrier::sys::set_affinity(&[cpu]).and_then(|()| barrier::sys::set_affinity(&whole)) {
                    eprintln!("barrier bench-rank: cannot start on CPU {cpu}: {e}");
                    return ExitCode::FAILURE;
                }
            }
            bench_rank(iters, batch)
        }
    }
}

fn bench_rank(iters: u64, batch: u64) -> ExitCode {
    match bench::rank_main(iters, batch) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("barrier bench-rank: {e}");
            ExitCode::FAILURE
        }
    }
}
