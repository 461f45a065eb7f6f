//! The correctness check as a program, for runs under the launcher (`barrier_suite::program`):
//!
//! ```text
//! barrier run -n 13 -- target/release/examples/correctness [ITERATIONS] [--split] [--seed S]
//!                                                          [--die RANK:ITER] [--skip RANK]
//! ```
//!
//! `--split` also runs the check on three sub-communicators (rank % 3) at the same time.
//! `--die R:I` makes rank R kill itself with SIGKILL before barrier I (launcher tests).
//! `--skip R` makes rank R skip the last barrier (timeout tests: the others must report R).

use std::process::ExitCode;

fn main() -> ExitCode {
    barrier_suite::program::main()
}
