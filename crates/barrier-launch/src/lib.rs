//! The launcher: starts the ranks of a job and ends the job cleanly. The `barrier run` command
//! is a front end to [`launch`]; tests and tools call it directly.
//!
//! 1. Creates the job segment (`shm_open` 0600, `O_EXCL`, unique name) and unlinks its name at
//!    once, so nothing can be left in `/dev/shm` whatever happens later; the ranks inherit the
//!    open descriptor (`BARRIER_SHM_FD`).
//! 2. Spawns `n` copies of the program with `BARRIER_RANK`, `BARRIER_SIZE`, `BARRIER_NODES`. Each
//!    child asks the kernel to kill it if the launcher dies (`PR_SET_PDEATHSIG`) and runs in its
//!    own process group, so a terminal's Ctrl-C reaches the launcher once and is forwarded.
//!    Only the ranks inherit the segment and the read end of a lifeline pipe (the launcher keeps
//!    both close-on-exec and clears the flag in each child): if the launcher dies, the ranks see
//!    the pipe close and end themselves, even behind a wrapper script. Rank 0 gets the standard
//!    input (forwarded through a pipe from a terminal); the other ranks get an empty one.
//! 3. Waits, on a process descriptor per rank, and reaps exactly its ranks (never another
//!    child of the calling program). SIGINT/SIGTERM/SIGHUP to the launcher, also during
//!    start-up, are forwarded to every rank (its process group). A rank that exits with status
//!    0 is marked in the segment, so ranks still waiting for it stop with an error naming it.
//!    When a rank dies from a signal or exits non-zero, the launcher marks the job aborted in
//!    the segment (ranks waiting in a barrier stop at once with an error), sends SIGTERM to the
//!    others, SIGKILL after a grace period, and reports which rank failed and how.
//! 4. Refuses a job of more ranks than the machine can hold at once ([`crate::proc::max_ranks`]).
//!    The signal handlers it installs are removed again when it returns.
//!
//! # The folder
//!
//! `spec.rs` (what to run, where the artifacts are) and `report.rs` (how it ended) at the
//! bottom ← `io.rs` (the ranks' streams) ← `run.rs` ([`launch`]); beneath them all, `proc.rs`
//! (process descriptors, limits, the machine's capacity), `signals.rs` (forwarding) and
//! `rebalance.rs` (an oversubscribed job's placement).

mod io;
pub mod proc;
pub mod rebalance;
mod report;
mod run;
pub mod signals;
mod spec;

pub use io::{TAG_LINE_BOUND, WHOLE_LINES_UP_TO};
pub use report::{signal_name, JobReport, LaunchError, RankEnd, RankFailure};
pub use run::launch;
pub use spec::{artifact_dirs, inline_emulator_library, trusted, JobSpec, BALANCE_EVERY, GRACE};
