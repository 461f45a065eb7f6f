//! `barrier bench`: every backend beside the floor, or MPI's, OpenSHMEM's and the interleaved
//! comparisons; and `barrier bench-rank`, one rank of a benchmark job.

use std::path::PathBuf;
use std::process::ExitCode;

use barrier_cli::bench::{self, BenchOptions};

use super::settings::{check_settings, warn_unknown_settings};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Rank counts, comma-separated.
    #[arg(short = 'n', long = "np", value_delimiter = ',', default_values_t = vec![2usize, 4, 8])]
    pub ranks: Vec<usize>,
    /// Backend name, or all.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub backend: Vec<String>,
    /// Spread the ranks over M simulated nodes (contiguous blocks): internode traffic goes
    /// through the simulated network, is counted (the `net ops` column), and waits out
    /// BARRIER_NET_PUT_LATENCY.
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// Also measure each software algorithm on its own.
    #[arg(long)]
    pub algorithms: bool,
    /// Do not start emulated devices (hardware rows then need real devices).
    #[arg(long)]
    pub no_emulate: bool,
    /// Emulated devices with an engine thread of their own, instead of inline (their work
    /// then competes with the ranks for the cores).
    #[arg(long, conflicts_with = "no_emulate")]
    pub threaded_emulator: bool,
    /// Barriers per measurement.
    #[arg(long, default_value_t = 100_000)]
    pub iters: u64,
    /// Barriers per timed batch.
    #[arg(long, default_value_t = 100)]
    pub batch: u64,
    /// Split each row's --iters into this many rounds, the rows of a rank count taking
    /// turns, and pool the rounds (median of their medians), so that a slow spell of the
    /// machine falls on every row alike [default: 3, fewer if a round would get fewer than
    /// 10 batches].
    #[arg(long)]
    pub rounds: Option<u64>,
    /// Print one JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Draw latency against rank count into this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Instead: time ours against the raw floor protocol (and hurdles) in alternating
    /// chunks of --batch barriers in the same two pinned threads, the comparison that holds
    /// on machines whose speed changes from moment to moment.
    #[arg(long, conflicts_with_all = ["mpi", "shmem", "ranks", "backend", "nodes", "algorithms", "no_emulate", "threaded_emulator", "rounds", "json", "plot"])]
    pub interleave: bool,
    /// Instead: the machine's MPI_Barrier against the same program's barrier under the
    /// PMPI interposer (libbarrier_pmpi.so), timed in alternating chunks in one run of
    /// mpirun per rank count (--iters barriers each). Needs mpicc and mpirun.
    #[arg(long, conflicts_with_all = ["backend", "nodes", "algorithms", "no_emulate", "threaded_emulator", "batch", "rounds", "json", "plot"])]
    pub mpi: bool,
    /// The interposer for --mpi (default: libbarrier_pmpi.so beside this command).
    #[arg(long, value_name = "PATH", requires = "mpi")]
    pub mpi_preload: Option<PathBuf>,
    /// Open MPI's coll component for --mpi, timed as a third variant (default: the one
    /// beside this command, libbarrier_ompi.so, when it was built with its `ompi` feature).
    #[arg(long, value_name = "PATH", requires = "mpi")]
    pub mpi_component: Option<PathBuf>,
    /// Instead: the OpenSHMEM implementation's shmem_barrier_all and shmem_sync_all against
    /// the same program's under the interposer (libbarrier_shmem.so), timed in alternating
    /// chunks in one run of oshrun per PE count (-n; --iters barriers each). Needs oshcc and
    /// oshrun.
    #[arg(long, conflicts_with_all = ["mpi", "backend", "nodes", "algorithms", "no_emulate", "threaded_emulator", "batch", "rounds", "json", "plot"])]
    pub shmem: bool,
    /// The interposer for --shmem (default: libbarrier_shmem.so beside this command).
    #[arg(long, value_name = "PATH", requires = "shmem")]
    pub shmem_preload: Option<PathBuf>,
}

impl BenchArgs {
    /// Runs the command: the exit code says what happened.
    pub fn run(self) -> ExitCode {
        let BenchArgs {
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
        } = self;
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
            let opts =
                barrier_cli::mpibench::MpiBenchOptions { ranks, iters, preload: mpi_preload, component: mpi_component };
            return super::finish("barrier bench --mpi", barrier_cli::mpibench::run(&opts));
        }
        if shmem {
            let opts = barrier_cli::shmembench::ShmemBenchOptions { pes: ranks, iters, preload: shmem_preload };
            return super::finish("barrier bench --shmem", barrier_cli::shmembench::run(&opts));
        }
        if interleave {
            return super::finish("barrier bench", bench::run_interleave(iters, batch.max(100)));
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
        super::finish("barrier bench", bench::run(&opts))
    }
}

/// One rank of a benchmark job (started by `barrier bench`).
#[derive(clap::Args, Debug)]
pub struct BenchRankArgs {
    #[arg(long)]
    pub iters: u64,
    #[arg(long)]
    pub batch: u64,
    /// Before the first barrier, move to this CPU and take the whole mask back (an uneven
    /// start for the launcher's balancer to correct).
    #[arg(long)]
    pub start_on_cpu: Option<usize>,
}

impl BenchRankArgs {
    /// Runs one rank: the exit code says what happened.
    pub fn run(self) -> ExitCode {
        let BenchRankArgs { iters, batch, start_on_cpu } = self;
        // Bench rows emulate devices inline: their work runs in these ranks.
        barrier_emu::inline::install();
        if let Some(cpu) = start_on_cpu {
            let whole = barrier::sys::affinity_cores();
            if let Err(e) = barrier::sys::set_affinity(&[cpu]).and_then(|()| barrier::sys::set_affinity(&whole)) {
                eprintln!("barrier bench-rank: cannot start on CPU {cpu}: {e}");
                return ExitCode::FAILURE;
            }
        }
        super::finish("barrier bench-rank", bench::rank_main(iters, batch))
    }
}
