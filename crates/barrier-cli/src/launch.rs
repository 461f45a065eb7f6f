//! The launcher: starts the ranks of a job and ends the job cleanly.
//!
//! 1. Creates the job segment (`shm_open` 0600, `O_EXCL`, unique name) and unlinks its name at
//!    once, so nothing can be left in `/dev/shm` whatever happens later; the ranks inherit the
//!    open descriptor (`BARRIER_SHM_FD`).
//! 2. Spawns `n` copies of the program with `BARRIER_RANK`, `BARRIER_SIZE`, `BARRIER_NODES`. Each
//!    child asks the kernel to kill it if the launcher dies (`PR_SET_PDEATHSIG`) and runs in its
//!    own process group, so a terminal's Ctrl-C reaches the launcher once and is forwarded.
//! 3. Waits. SIGINT/SIGTERM to the launcher are forwarded to every rank (its process group). When a rank dies from a
//!    signal or exits non-zero, the launcher marks the job aborted in the segment (ranks waiting
//!    in a barrier stop at once with an error), sends SIGTERM to the others, SIGKILL after a
//!    grace period, and reports which rank failed and how.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use barrier::shm::{JobShape, Segment};

/// How long ranks get between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// What to launch.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Ranks.
    pub ranks: usize,
    /// Simulated nodes.
    pub nodes: usize,
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    /// Pin rank `r` to the `r`-th core of the launcher's affinity mask (when ranks <= cores).
    pub pin: bool,
    /// Capture every rank's standard output instead of passing it through.
    pub capture_stdout: bool,
    /// Capture every rank's standard error instead of passing it through.
    pub capture_stderr: bool,
    /// Bytes of the segment pool for sub-communicators and windows.
    pub pool_bytes: usize,
    /// Emulated devices to run inside the launcher for this job (their paths are passed to
    /// the ranks as `BARRIER_<KIND>_DEVICE_PATH`).
    pub emulate: Vec<barrier_emu::Config>,
}

impl JobSpec {
    /// A job running `program` on `ranks` ranks with default settings.
    pub fn new(ranks: usize, program: impl Into<PathBuf>) -> Self {
        JobSpec {
            ranks,
            nodes: 1,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            pin: false,
            capture_stdout: false,
            capture_stderr: false,
            pool_bytes: barrier::shm::DEFAULT_POOL_BYTES,
            emulate: Vec::new(),
        }
    }
}

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
                "barrier run: rank {} (pid {}) {} after {:.2?}; the job of {ranks} ranks was stopped",
                f.rank, f.pid, f.end, f.after
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

/// Signals a rank's whole process group (each rank leads its own), so that whatever the rank
/// started (a shell's children, helpers) stops with it and cannot hold the job's pipes open.
fn send(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions. The group id is the pid of a child this
    // launcher has not reaped yet (callers check), so it cannot have been reused.
    unsafe {
        if libc::kill(-(pid as libc::pid_t), sig) != 0 {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

/// Runs a job to completion.
pub fn launch(spec: &JobSpec) -> Result<JobReport, LaunchError> {
    if spec.ranks == 0 {
        return Err(LaunchError("barrier run: -n must be at least 1".into()));
    }
    let mut shape = JobShape::local(spec.ranks, spec.nodes);
    // An emulated device's engine is one more thread that needs a core while barriers run.
    shape.ranks_on_machine += usize::from(!spec.emulate.is_empty());
    let emulators = spec
        .emulate
        .iter()
        .map(|config| barrier_emu::Emulator::start(config.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LaunchError(format!("barrier run: cannot start an emulated device: {e}")))?;
    let seg = Segment::create_for_job(shape, spec.pool_bytes).map_err(|e| LaunchError(format!("barrier run: {e}")))?;
    let fd = seg.raw_fd().expect("job segment has a descriptor");
    barrier::sys::set_inheritable(fd)
        .map_err(|e| LaunchError(format!("barrier run: making the segment inheritable: {e}")))?;
    crate::signals::install();

    let cores = barrier::sys::affinity_cores();
    // Pin only when every busy thread (ranks and any emulator engine) has a core of its own.
    let pin = spec.pin && shape.ranks_on_machine <= cores.len();
    // SAFETY: getpid has no preconditions.
    let launcher_pid = unsafe { libc::getpid() };
    let start = Instant::now();
    let mut children: Vec<Option<Child>> = Vec::with_capacity(spec.ranks);
    let mut pids = Vec::with_capacity(spec.ranks);
    let mut readers = Vec::new();
    let mut err_readers = Vec::new();
    for rank in 0..spec.ranks {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .env(barrier::ENV_SHM_FD, fd.to_string())
            .env(barrier::ENV_RANK, rank.to_string())
            .env(barrier::ENV_SIZE, spec.ranks.to_string())
            .env(barrier::ENV_NODES, shape.nodes.to_string())
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .envs(emulators.iter().map(|e| {
                (
                    format!("BARRIER_{}_DEVICE_PATH", e.device().map().kind.to_ascii_uppercase()),
                    e.path().as_os_str().to_owned(),
                )
            }));
        if spec.capture_stdout {
            cmd.stdout(Stdio::piped());
        }
        if spec.capture_stderr {
            cmd.stderr(Stdio::piped());
        }
        let core = cores.get(rank).copied().filter(|_| pin);
        // SAFETY: the closure runs in the child between fork and exec and only makes
        // async-signal-safe system calls (prctl, getppid, setpgid, sched_setaffinity, _exit);
        // it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
                if libc::getppid() != launcher_pid {
                    libc::_exit(1);
                }
                libc::setpgid(0, 0);
                if let Some(core) = core {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(core, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                }
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(mut child) => {
                pids.push(child.id());
                if let Some(out) = child.stdout.take() {
                    readers.push(read_all(out));
                }
                if let Some(err) = child.stderr.take() {
                    err_readers.push(read_all(err));
                }
                children.push(Some(child));
            }
            Err(e) => {
                for pid in &pids {
                    send(*pid, libc::SIGKILL);
                }
                for c in children.iter_mut().flatten() {
                    let _ = c.wait();
                }
                return Err(LaunchError(format!("barrier run: cannot start {}: {e}", spec.program.display())));
            }
        }
    }

    // A reaper thread blocks in waitpid(-1) and reports each child's end; the main thread
    // wakes only for those reports and every few tens of milliseconds to forward signals, so
    // it never competes with spinning ranks for a core.
    let (tx, rx) = std::sync::mpsc::channel::<(libc::pid_t, libc::c_int)>();
    let expected = spec.ranks;
    let reaper = std::thread::spawn(move || {
        let mut reaped = 0;
        while reaped < expected {
            let mut status: libc::c_int = 0;
            // SAFETY: `status` is a live local that waitpid writes into.
            let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
            if pid > 0 {
                reaped += 1;
                if tx.send((pid, status)).is_err() {
                    break;
                }
            } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
    });
    // The children are reaped with waitpid above, not through `Child`.
    drop(children);

    let mut failure: Option<RankFailure> = None;
    let mut interrupted: Option<i32> = None;
    let mut stopping_since: Option<Instant> = None;
    let mut killed = false;
    let mut alive = vec![true; spec.ranks];
    let mut live = spec.ranks;
    let signal_all = |alive: &[bool], sig: i32| {
        for (r, &a) in alive.iter().enumerate() {
            if a {
                send(pids[r], sig);
            }
        }
    };
    while live > 0 {
        if let Some(sig) = crate::signals::take() {
            interrupted.get_or_insert(sig);
            signal_all(&alive, sig);
            stopping_since.get_or_insert_with(Instant::now);
        }
        if let Some(since) = stopping_since {
            if !killed && since.elapsed() > GRACE {
                killed = true;
                signal_all(&alive, libc::SIGKILL);
            }
        }
        let poll = if stopping_since.is_some() { Duration::from_millis(10) } else { Duration::from_millis(50) };
        let (pid, status) = match rx.recv_timeout(poll) {
            Ok(ended) => ended,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let Some(rank) = pids.iter().position(|&p| p as libc::pid_t == pid) else {
            continue;
        };
        if !alive[rank] {
            continue;
        }
        alive[rank] = false;
        live -= 1;
        let end = if libc::WIFEXITED(status) {
            RankEnd::Exited(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            RankEnd::Signaled(libc::WTERMSIG(status))
        } else {
            RankEnd::Exited(1)
        };
        if end != RankEnd::Exited(0) && failure.is_none() && interrupted.is_none() {
            failure = Some(RankFailure { rank, pid: pids[rank], end, after: start.elapsed() });
            seg.set_abort(rank);
            signal_all(&alive, libc::SIGTERM);
            stopping_since.get_or_insert_with(Instant::now);
        }
    }
    let _ = reaper.join();
    let stdout = readers.into_iter().map(|h| h.join().unwrap_or_default()).collect();
    let stderr = err_readers.into_iter().map(|h| h.join().unwrap_or_default()).collect();
    let devices = emulators
        .iter()
        .map(|e| {
            e.quiesce(Duration::from_secs(2));
            (e.device().map().kind, e.counters())
        })
        .collect();
    Ok(JobReport { failure, interrupted, stdout, stderr, elapsed: start.elapsed(), devices })
}

fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    })
}

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
        _ => "signal",
    }
}
