//! `barrier`: run a job (launcher), benchmark every backend, report backends and parameters.
//! Each subcommand owns its arguments and its run (`cmd/`; `barrier model`'s are the library's).

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Run(cmd::run::RunArgs),
    /// Measure barrier latency of every backend beside the floor and std::sync::Barrier.
    Bench(cmd::bench::BenchArgs),
    /// Predict each backend's barrier latency for a job shape this machine cannot run (a model
    /// calibrated here and by published network figures; docs/model.md).
    Model(barrier_cli::model::cli::ModelArgs),
    /// Open MPI's components `fastbar` (coll: barrier-ompi; scoll for OSHMEM: barrier-oshmem):
    /// where they are, and how a user or a site installs them for the Open MPI found here
    /// (docs/ompi.md).
    Ompi(cmd::ompi::OmpiArgs),
    /// List backends and parameters, and show which backend a job of N ranks gets and why.
    Info(cmd::info::InfoArgs),
    /// Run an emulated device as a daemon that several jobs share, until SIGINT/SIGTERM.
    Emu(cmd::emu::EmuArgs),
    /// One rank of a benchmark job (started by `barrier bench`).
    #[command(hide = true)]
    BenchRank(cmd::bench::BenchRankArgs),
}

fn main() -> ExitCode {
    barrier_cli::register_layers();
    match Cli::parse().command {
        Cmd::Run(args) => args.run(),
        Cmd::Bench(args) => args.run(),
        Cmd::Model(args) => barrier_cli::model::cli::run(args),
        Cmd::Ompi(args) => args.run(),
        Cmd::Info(args) => args.run(),
        Cmd::Emu(args) => args.run(),
        Cmd::BenchRank(args) => args.run(),
    }
}
