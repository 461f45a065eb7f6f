//! The subcommands of `barrier`: each owns its arguments (a `clap::Args` struct) and its run.
//! `barrier model`'s arguments are the library's own (`barrier_cli::model::cli::ModelArgs`).

pub mod bench;
pub mod emu;
pub mod info;
pub mod ompi;
pub mod run;
mod settings;

/// A command's exit code from its outcome: success, or the error said as `WHO: error` on stderr
/// and a failure.
fn finish<T, E: std::fmt::Display>(who: &str, outcome: Result<T, E>) -> std::process::ExitCode {
    match outcome {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{who}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
