//! A program that registers the ktree backend, then runs the workspace's correctness check
//! (`barrier_suite::program`) under the launcher:
//!
//! ```text
//! BARRIER_BACKEND=ktree barrier run -n 5 -- target/release/examples/ktree [ITERATIONS] [--split] ...
//! target/release/examples/ktree --info [-n RANKS]     # `barrier info` as this program sees it
//! ```
//!
//! `KTREE_UNREGISTERED_ON=R` (tests): rank R of the launcher's job does not register the
//! backend, so every rank must decline it together.

use std::process::ExitCode;

fn main() -> ExitCode {
    let rank = std::env::var(barrier::ENV_RANK).ok();
    let skip = std::env::var("KTREE_UNREGISTERED_ON").ok();
    if rank.is_none() || rank != skip {
        if let Err(e) = barrier::register_backend(barrier_ktree::KTree) {
            eprintln!("ktree: {e}");
            return ExitCode::from(2);
        }
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--info") {
        // The report `barrier info` prints, from inside the program that registered the backend.
        let ranks = match args.get(1).map(String::as_str) {
            Some("-n") => args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0),
            _ => 2,
        };
        if ranks == 0 {
            eprintln!("ktree --info [-n RANKS]: RANKS is a number of at least 1");
            return ExitCode::from(2);
        }
        return match barrier_cli::info::report(ranks, 1, &[], None) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("ktree --info: {e}");
                ExitCode::from(2)
            }
        };
    }
    barrier_suite::program::main()
}
