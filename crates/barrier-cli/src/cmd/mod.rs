//! The subcommands of `barrier`: each owns its arguments (a `clap::Args` struct) and its run.
//! `barrier model`'s arguments are the library's own (`barrier_cli::model::cli::ModelArgs`).

pub mod bench;
pub mod emu;
pub mod info;
pub mod ompi;
pub mod run;
mod settings;
