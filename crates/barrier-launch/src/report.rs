//! How a job ended: each rank's end, the failures, the report, and launch errors.

use std::time::Duration;

/// How a rank ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankEnd {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
}

impl std::fmt::Display for RankEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RankEnd::Exited(c) => write!(f, "exited with status {c}"),
            RankEnd::Signaled(s) => write!(f, "was killed by signal {s} ({})", signal_name(*s)),
        }
    }
}

/// The first rank that failed.
#[derive(Debug, Clone)]
pub struct RankFailure {
    /// World rank.
    pub rank: usize,
    /// Its process id.
    pub pid: u32,
    /// How it ended.
    pub end: RankEnd,
    /// Seconds after the start.
    pub after: Duration,
}

/// How a job ended.
#[derive(Debug)]
pub struct JobReport {
    /// The first failing rank, if any.
    pub failure: Option<RankFailure>,
    /// A signal the launcher received and forwarded.
    pub interrupted: Option<i32>,
    /// Captured standard output per rank (with `capture_stdout`).
    pub stdout: Vec<String>,
    /// Captured standard error per rank (with `capture_stderr`).
    pub stderr: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
    /// Counters of each emulated device at the end of the job, by kind.
    pub devices: Vec<(&'static str, barrier_emu::Counters)>,
}

impl JobReport {
    /// True when every rank exited 0 and nobody interrupted the job.
    pub fn success(&self) -> bool {
        self.failure.is_none() && self.interrupted.is_none()
    }

    /// The exit code the launcher should end with.
    pub fn exit_code(&self) -> i32 {
        match (&self.failure, self.interrupted) {
            (Some(f), _) => match f.end {
                RankEnd::Exited(c) => c.clamp(1, 255),
                RankEnd::Signaled(s) => 128 + s,
            },
            (None, Some(sig)) => 128 + sig,
            (None, None) => 0,
        }
    }

    /// A one-line explanation of a failure, for people.
    pub fn describe(&self, ranks: usize) -> Option<String> {
        if let Some(f) = &self.failure {
            return Some(format!(
                "barrier run: rank {} (pid {}) {} after {:.2?}; the job of {} was stopped",
                f.rank,
                f.pid,
                f.end,
                f.after,
                barrier::text::count(ranks, "rank")
            ));
        }
        self.interrupted
            .map(|s| format!("barrier run: interrupted by signal {s} ({}); the ranks were stopped", signal_name(s)))
    }
}

/// Why the launcher itself failed.
#[derive(Debug)]
pub struct LaunchError(pub String);

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LaunchError {}

/// The conventional name of a signal.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "signal",
    }
}
