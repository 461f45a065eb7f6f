//! The launcher: starts the ranks of a job and ends the job cleanly.
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
//! 4. Refuses a job of more ranks than the machine can hold at once ([`proc::max_ranks`]).
//!    The signal handlers it installs are removed again when it returns.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use barrier::shm::{JobShape, RankExit, Segment};

use crate::proc;
use crate::rebalance::{Balancer, Kernel};

/// How often the launcher looks at an oversubscribed job's placement ([`crate::rebalance`]).
pub const BALANCE_EVERY: Duration = Duration::from_millis(20);
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
    /// Bytes of the segment pool for sub-communicators and windows (default: the
    /// environment's `BARRIER_SHM_POOL_BYTES`, as every rank would read it).
    pub pool_bytes: usize,
    /// Prefix each line a rank prints with `[rank] ` (output that is not captured).
    pub tag_output: bool,
    /// Emulated devices to run inside the launcher for this job (their paths are passed to
    /// the ranks as `BARRIER_<KIND>_DEVICE_PATH`).
    pub emulate: Vec<barrier_emu::Config>,
    /// An emulated A64FX node of this shape to run inside the launcher (its device and sysfs
    /// tree are passed to the ranks as `BARRIER_A64FX_DEVICE_PATH` and `BARRIER_A64FX_SYSFS`).
    pub emulate_a64fx: Option<barrier_hw::a64fx::node::Layout>,
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
            pool_bytes: barrier::Params::from_env()
                .parse("BARRIER_SHM_POOL_BYTES", barrier::shm::DEFAULT_POOL_BYTES, "")
                .unwrap_or(barrier::shm::DEFAULT_POOL_BYTES),
            tag_output: false,
            emulate: Vec::new(),
            emulate_a64fx: None,
        }
    }
}

/// Where this build's libraries are: beside this executable (a cargo build puts them in
/// `target/<profile>/`), then in the build it came from (`cargo install --path` copies the
/// executable to `~/.cargo/bin`, away from them; the build script records that directory).
pub fn artifact_dirs() -> Vec<PathBuf> {
    let exe_dir = std::env::current_exe().ok().and_then(|exe| exe.parent().map(PathBuf::from));
    let build_dir = option_env!("BUILD_PROFILE_DIR").map(PathBuf::from);
    let mut dirs: Vec<PathBuf> = [exe_dir, build_dir].into_iter().flatten().collect();
    dirs.dedup();
    dirs
}

/// The inline emulator library for the ranks of `barrier run --emulate` (see
/// `barrier_emu_inline`): the one `BARRIER_EMU_INLINE_LIB` names, else the one beside this
/// executable, else the one in the build this executable came from (`cargo install --path`
/// copies the executable away from it); loaded here once to check that it was built from the
/// same sources. The error says what was looked at and what to do.
pub fn inline_emulator_library() -> Result<PathBuf, String> {
    use barrier::mmio::{load_inline_library, INLINE_LIBRARY_VAR};
    let path = match std::env::var_os(INLINE_LIBRARY_VAR) {
        // Absolute for the ranks, whatever their working directory.
        Some(path) => PathBuf::from(&path)
            .canonicalize()
            .map_err(|e| format!("{INLINE_LIBRARY_VAR}={}: {e}", PathBuf::from(&path).display()))?,
        None => {
            // deps/ first: a build of the launcher always refreshes the library there, and copies
            // it up beside the executable only when the library's package is built by name.
            let candidates: Vec<PathBuf> = artifact_dirs()
                .into_iter()
                .flat_map(|dir| {
                    [
                        dir.join("deps").join(barrier_emu_inline::LIBRARY_FILE),
                        dir.join(barrier_emu_inline::LIBRARY_FILE),
                    ]
                })
                .collect();
            match candidates.iter().find(|path| path.is_file()) {
                Some(path) => path.clone(),
                None => {
                    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
                    return Err(format!(
                        "no {} at {}: build it with `cargo build --release -p barrier-emu-inline` and name it in {INLINE_LIBRARY_VAR}",
                        barrier_emu_inline::LIBRARY_FILE,
                        looked.join(", ")
                    ));
                }
            }
        }
    };
    load_inline_library(&path)?;
    Ok(path)
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

/// Runs a job to completion.
pub fn launch(spec: &JobSpec) -> Result<JobReport, LaunchError> {
    if spec.ranks == 0 {
        return Err(LaunchError("barrier run: -n must be at least 1".into()));
    }
    let (limit, why) = proc::max_ranks();
    if spec.ranks > limit {
        return Err(LaunchError(format!(
            "barrier run: -n {} is more ranks than this machine can hold at once: at most {limit} ({why}); \
             use fewer ranks, or spread the job over nodes with an MPI launcher",
            spec.ranks
        )));
    }
    // From here on SIGINT/SIGTERM/SIGHUP are noticed, even while ranks are still being started.
    let signals = crate::signals::install();
    proc::ensure_open_files(spec.ranks as u64 * 4 + 256);
    let mut shape = JobShape::local(spec.ranks, spec.nodes);
    // An emulated device's engine thread needs a core while barriers run (an inline one has none).
    shape.ranks_on_machine += usize::from(spec.emulate.iter().any(|c| !c.inline));
    let emulators = spec
        .emulate
        .iter()
        .map(|config| barrier_emu::Emulator::start(config.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LaunchError(format!("barrier run: cannot start an emulated device: {e}")))?;
    let a64fx = spec
        .emulate_a64fx
        .map(barrier_emu::a64fx::Node::start)
        .transpose()
        .map_err(|e| LaunchError(format!("barrier run: cannot start an emulated A64FX node: {e}")))?;
    // The pool size the ranks will see: the job's own environment first, then the launcher's.
    let pool_bytes = match spec.env.iter().rev().find(|(k, _)| k == "BARRIER_SHM_POOL_BYTES") {
        Some((_, v)) => v
            .trim()
            .parse()
            .map_err(|_| LaunchError(format!("barrier run: BARRIER_SHM_POOL_BYTES={v} is not a number of bytes")))?,
        None => spec.pool_bytes,
    };
    let seg = Segment::create_for_job(shape, pool_bytes).map_err(|e| LaunchError(format!("barrier run: {e}")))?;
    let seg_fd = seg.raw_fd().expect("job segment has a descriptor");
    // The lifeline: ranks inherit the read end; only this process holds the write end, so when
    // it dies the ranks (even behind a wrapper script) see end of file and end themselves.
    let (lifeline_read, lifeline_write) =
        proc::pipe().map_err(|e| LaunchError(format!("barrier run: creating the lifeline pipe: {e}")))?;
    let lifeline_fd = proc::raw(&lifeline_read);
    let stdin_plan = StdinPlan::new();

    let cores = barrier::sys::affinity_cores();
    // Pin only when every busy thread (ranks and any emulator engine) has a core of its own.
    let pin = spec.pin && shape.ranks_on_machine <= cores.len();
    let whole_mask = barrier::sys::cpu_set(&cores);
    // The launcher hops from core to core while it starts unpinned ranks (see below); this
    // gives it its own mask back on every way out of the loop.
    let home = (!pin && cores.len() >= 2).then(|| HomeMask(cores.clone()));
    // SAFETY: getpid has no preconditions.
    let launcher_pid = unsafe { libc::getpid() };
    let start = Instant::now();
    let mut ranks: Vec<RankProcess> = Vec::with_capacity(spec.ranks);
    let mut readers = Vec::new();
    let mut err_readers = Vec::new();
    let mut taggers = Vec::new();
    let mut progress = StartProgress::new(spec.ranks);
    for rank in 0..spec.ranks {
        progress.show(rank);
        if let Some(sig) = crate::signals::take() {
            progress.done(start.elapsed());
            return Ok(abandon_start(ranks, sig, start, &emulators));
        }
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .env(barrier::ENV_SHM_FD, seg_fd.to_string())
            .env(barrier::ENV_LIFELINE_FD, lifeline_fd.to_string())
            .env(barrier::ENV_RANK, rank.to_string())
            .env(barrier::ENV_SIZE, spec.ranks.to_string())
            .env(barrier::ENV_NODES, shape.nodes.to_string())
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .envs(a64fx.iter().flat_map(|node| node.env()))
            .envs(emulators.iter().map(|e| {
                (
                    format!("BARRIER_{}_DEVICE_PATH", e.device().map().kind.to_ascii_uppercase()),
                    e.path().as_os_str().to_owned(),
                )
            }));
        cmd.stdin(stdin_plan.for_rank(rank));
        if spec.capture_stdout || spec.tag_output {
            cmd.stdout(Stdio::piped());
        }
        if spec.capture_stderr || spec.tag_output {
            cmd.stderr(Stdio::piped());
        }
        let core = cores.get(rank).copied().filter(|_| pin);
        // Unpinned ranks start spread: the launcher moves itself to core r mod cores while it
        // forks rank r, and the child takes the launcher's whole mask back before its exec, so
        // it starts there (unless the kernel's exec balancing moves it at once) and the kernel
        // may move it as it likes; no thread of it, nor of the launcher, keeps a narrower mask.
        // Left to itself the kernel starts a burst of processes from one parent on one or two
        // cores and takes up to a second to spread them (one migration every few dozen
        // milliseconds), and an oversubscribed barrier waits for its most crowded core in
        // every call.
        let start_core = if pin || cores.len() < 2 { None } else { Some(cores[rank % cores.len()]) };
        if let Some(c) = start_core {
            // Best effort: if the launcher cannot move, the rank starts wherever it is.
            let _ = barrier::sys::set_affinity(&[c]);
        }
        // The mask the child takes before its exec: its pinned core, or the launcher's whole
        // mask back after starting on `start_core` (built here: nothing may allocate there).
        let exec_mask = core.map(|c| barrier::sys::cpu_set(&[c])).or(start_core.map(|_| whole_mask));
        // SAFETY: the closure runs in the child between fork and exec and only makes
        // async-signal-safe system calls (prctl, getppid, setpgid, fcntl, sched_setaffinity,
        // _exit); it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
                if libc::getppid() != launcher_pid {
                    libc::_exit(1);
                }
                libc::setpgid(0, 0);
                // The job's descriptors reach the ranks, and only the ranks: they stay
                // close-on-exec in the launcher, so no other program it runs inherits them.
                for fd in [seg_fd, lifeline_fd] {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
                }
                if let Some(mask) = &exec_mask {
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), mask);
                }
                Ok(())
            });
        }
        let spawned = cmd.spawn();
        if start_core.is_some() {
            // Back to the whole mask before any thread is made (the output readers below): a
            // new thread copies its creator's mask. `home` covers the ways out before this.
            let _ = barrier::sys::set_affinity(&cores);
        }
        match spawned {
            Ok(mut child) => {
                if let Some(out) = child.stdout.take() {
                    if spec.capture_stdout {
                        readers.push(read_all(out));
                    } else {
                        taggers.push(tag_lines(out, rank, false));
                    }
                }
                if let Some(err) = child.stderr.take() {
                    if spec.capture_stderr {
                        err_readers.push(read_all(err));
                    } else {
                        taggers.push(tag_lines(err, rank, true));
                    }
                }
                let pid = child.id();
                // Reaped below with waitpid on this pid, never through `Child`.
                drop(child);
                ranks.push(RankProcess { pid, pidfd: proc::pidfd_open(pid).ok(), alive: true });
            }
            Err(e) => {
                progress.done(start.elapsed());
                abandon_start(ranks, libc::SIGKILL, start, &emulators);
                return Err(LaunchError(format!("barrier run: cannot start {}: {e}", spec.program.display())));
            }
        }
        if rank == 0 {
            stdin_plan.started_rank0();
        }
    }

    drop(home);
    progress.done(start.elapsed());
    // Unpinned and oversubscribed: keep the ranks evenly spread over the job's CPUs.
    let params = spec.env.iter().fold(barrier::Params::from_env(), |p, (k, v)| p.set(k, v));
    let mut balancer = (!pin && shape.ranks_on_machine > cores.len() && cores.len() >= 2)
        .then(|| params.flag_or(barrier::params::REBALANCE, true).unwrap_or(true))
        .filter(|&on| on)
        .map(|_| {
            let verbose = params.flag("BARRIER_VERBOSE").unwrap_or(false);
            Balancer::new(Kernel, cores.clone(), spec.ranks, verbose)
        });
    let started = Instant::now();
    let mut next_look = started;

    let mut failure: Option<RankFailure> = None;
    let mut interrupted: Option<i32> = None;
    let mut stopping_since: Option<Instant> = None;
    let mut killed = false;
    let mut live = spec.ranks;
    let signal_all = |ranks: &[RankProcess], sig: i32| {
        for r in ranks.iter().filter(|r| r.alive) {
            proc::signal_group(r.pid, sig);
        }
    };
    while live > 0 {
        if let Some(sig) = crate::signals::take() {
            interrupted.get_or_insert(sig);
            signal_all(&ranks, sig);
            stopping_since.get_or_insert_with(Instant::now);
        }
        if let Some(since) = stopping_since {
            if !killed && since.elapsed() > GRACE {
                killed = true;
                signal_all(&ranks, libc::SIGKILL);
            }
        }
        if let Some(b) = balancer.as_mut().filter(|_| Instant::now() >= next_look) {
            // The process that joined as each rank (behind a wrapper script, not the one
            // started), with the rank's process group (that of the process started).
            let joined: Vec<Option<(u32, u32)>> = (0..ranks.len())
                .map(|r| {
                    let live = ranks[r].alive && seg.exited(r).is_none();
                    let pid = live.then(|| seg.joined_pid(r).and_then(|p| u32::try_from(p).ok())).flatten();
                    pid.map(|pid| (pid, ranks[r].pid))
                })
                .collect();
            if stopping_since.is_some() {
                b.release(&joined);
            } else {
                b.tick(&joined);
            }
            // Placement changes most in the job's first moments: look closely then; later, the
            // longer it has stayed even, the less often (each look reads every rank's /proc
            // entry on a core the ranks need).
            let every = if started.elapsed() < Duration::from_millis(500) {
                BALANCE_EVERY / 4
            } else {
                BALANCE_EVERY * (1 << (b.settled() / 16).min(3)) as u32
            };
            next_look = Instant::now() + every;
            if b.gave_up() || stopping_since.is_some() {
                if b.verbose() {
                    eprintln!("{}", b.summary());
                }
                balancer = None;
            }
        }
        let poll = if stopping_since.is_some() {
            Duration::from_millis(10)
        } else if balancer.is_some() {
            next_look.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))
        } else {
            Duration::from_millis(50)
        };
        for (rank, status) in wait_for_ends(&mut ranks, poll) {
            live -= 1;
            let end = if libc::WIFEXITED(status) {
                RankEnd::Exited(libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                RankEnd::Signaled(libc::WTERMSIG(status))
            } else {
                RankEnd::Exited(1)
            };
            if end == RankEnd::Exited(0) {
                // Ranks still waiting for this one learn that it is gone (see barrier's watch).
                seg.mark_exited(rank, RankExit::Status(0));
            } else if failure.is_none() && interrupted.is_none() {
                // A rank that failed because another called abort(): the job failed with the
                // aborting rank's code.
                let (rank, end) = match seg.abort_state() {
                    Err(barrier::wait::WaitError::Aborted(r)) if r != rank => match seg.exited(r) {
                        Some(RankExit::Status(code)) => (r, RankEnd::Exited(code)),
                        _ => (rank, end),
                    },
                    _ => (rank, end),
                };
                failure = Some(RankFailure { rank, pid: ranks[rank].pid, end, after: start.elapsed() });
                seg.set_abort(rank);
                signal_all(&ranks, libc::SIGTERM);
                stopping_since.get_or_insert_with(Instant::now);
            }
        }
    }
    if let Some(b) = balancer.take().filter(|b| b.verbose()) {
        eprintln!("{}", b.summary());
    }
    drop(lifeline_write);
    drop(signals);
    if let Some(sig) = interrupted {
        // A caller that runs several jobs (`barrier bench`) stops too.
        crate::signals::remember(sig);
    }
    // A rank may have left a background child holding its output open: copy what comes for a
    // moment, then let the copying threads go rather than wait for that child.
    let deadline = Instant::now() + Duration::from_secs(1);
    for t in taggers {
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if t.is_finished() {
            let _ = t.join();
        }
    }
    let stdout = readers.into_iter().map(|h| h.join().unwrap_or_default()).collect();
    let stderr = err_readers.into_iter().map(|h| h.join().unwrap_or_default()).collect();
    let devices = device_counters(&emulators);
    Ok(JobReport { failure, interrupted, stdout, stderr, elapsed: start.elapsed(), devices })
}

/// One started rank.
struct RankProcess {
    pid: u32,
    /// Readable once the process ends (None if the kernel could not give one: polled instead).
    pidfd: Option<std::os::fd::OwnedFd>,
    alive: bool,
}

/// Waits up to `poll` for ranks to end; reaps exactly those and returns (rank, wait status).
fn wait_for_ends(ranks: &mut [RankProcess], poll: Duration) -> Vec<(usize, libc::c_int)> {
    let watched: Vec<(usize, std::os::fd::RawFd)> = ranks
        .iter()
        .enumerate()
        .filter(|(_, r)| r.alive)
        .filter_map(|(i, r)| Some((i, proc::raw(r.pidfd.as_ref()?))))
        .collect();
    let unwatched = ranks.iter().any(|r| r.alive && r.pidfd.is_none());
    let fds: Vec<_> = watched.iter().map(|&(_, fd)| fd).collect();
    let ready: Vec<usize> = if fds.is_empty() {
        std::thread::sleep(poll);
        Vec::new()
    } else {
        proc::poll_readable(&fds, if unwatched { poll.min(Duration::from_millis(10)) } else { poll })
            .into_iter()
            .map(|i| watched[i].0)
            .collect()
    };
    let mut ended = Vec::new();
    for (i, r) in ranks.iter_mut().enumerate() {
        if r.alive && (r.pidfd.is_none() || ready.contains(&i)) {
            if let Some(status) = proc::try_reap(r.pid) {
                r.alive = false;
                r.pidfd = None;
                ended.push((i, status));
            }
        }
    }
    ended
}

/// Restores the calling thread's affinity to these cores when dropped.
struct HomeMask(Vec<usize>);

impl Drop for HomeMask {
    fn drop(&mut self) {
        // Best effort: the mask it restores is one this thread had a moment ago.
        let _ = barrier::sys::set_affinity(&self.0);
    }
}

/// Stops the ranks started so far (a signal during start-up, or a rank that could not start).
fn abandon_start(
    mut ranks: Vec<RankProcess>,
    sig: i32,
    start: Instant,
    emulators: &[barrier_emu::Emulator],
) -> JobReport {
    for r in &ranks {
        proc::signal_group(r.pid, libc::SIGKILL);
    }
    for r in &mut ranks {
        proc::reap(r.pid);
        r.alive = false;
    }
    JobReport {
        failure: None,
        interrupted: Some(sig),
        stdout: Vec::new(),
        stderr: Vec::new(),
        elapsed: start.elapsed(),
        devices: device_counters(emulators),
    }
}

fn device_counters(emulators: &[barrier_emu::Emulator]) -> Vec<(&'static str, barrier_emu::Counters)> {
    emulators
        .iter()
        .map(|e| {
            e.quiesce(Duration::from_secs(2));
            (e.device().map().kind, e.counters())
        })
        .collect()
}

/// Who gets the launcher's standard input: rank 0 only, as with `mpirun`; every other rank reads
/// an empty input. A terminal is never handed to a rank: the ranks run in process groups of
/// their own (so a signal reaches everything a rank started), and a background group that reads
/// the terminal is stopped by SIGTTIN. From a terminal the launcher forwards what is typed to
/// rank 0 through a pipe, and only while the launcher is in the terminal's foreground.
enum StdinPlan {
    /// Not a terminal (a file, a pipe, /dev/null): rank 0 inherits it.
    Inherit,
    /// A terminal in whose foreground the launcher is: forwarded to rank 0.
    Forward(std::cell::RefCell<Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>>),
    /// A terminal the launcher may not read (it runs in the background): nothing.
    Nothing,
}

impl StdinPlan {
    fn new() -> Self {
        match proc::stdin_terminal() {
            None => StdinPlan::Inherit,
            Some(true) => match proc::pipe() {
                Ok(ends) => StdinPlan::Forward(std::cell::RefCell::new(Some(ends))),
                Err(_) => StdinPlan::Nothing,
            },
            Some(false) => StdinPlan::Nothing,
        }
    }

    fn for_rank(&self, rank: usize) -> Stdio {
        match (rank, self) {
            (0, StdinPlan::Inherit) => Stdio::inherit(),
            (0, StdinPlan::Forward(ends)) => match ends.borrow().as_ref().and_then(|(r, _)| r.try_clone().ok()) {
                Some(read) => Stdio::from(read),
                None => Stdio::null(),
            },
            _ => Stdio::null(),
        }
    }

    /// Rank 0 has its copy of the read end: start copying the terminal into the write end.
    fn started_rank0(&self) {
        let StdinPlan::Forward(ends) = self else { return };
        let Some((read, write)) = ends.borrow_mut().take() else { return };
        drop(read);
        // The thread ends when rank 0 stops reading (the write fails) or the terminal closes.
        let _ = std::thread::Builder::new().name("stdin-to-rank0".into()).spawn(move || {
            let mut to_rank0 = std::fs::File::from(write);
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_rank0);
        });
    }
}

/// Copies a rank's output to the launcher's, each whole line prefixed with `[rank] ` and written
/// in one call (so lines of different ranks never mix).
fn tag_lines(pipe: impl Read + Send + 'static, rank: usize, stderr: bool) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        let mut lines = std::io::BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            match lines.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    let mut tagged = format!("[{rank}] ").into_bytes();
                    tagged.extend_from_slice(&line);
                    let _ = if stderr {
                        std::io::stderr().lock().write_all(&tagged)
                    } else {
                        std::io::stdout().lock().write_all(&tagged)
                    };
                }
            }
        }
        String::new()
    })
}

/// A progress line on a terminal while many ranks start (nothing otherwise).
struct StartProgress {
    ranks: usize,
    shown: Option<Instant>,
}

impl StartProgress {
    /// Shown for jobs of at least this many ranks.
    const FROM: usize = 64;

    fn new(ranks: usize) -> Self {
        let on = ranks >= Self::FROM && proc::stderr_terminal();
        let long_ago = Instant::now().checked_sub(Duration::from_secs(1)).unwrap_or_else(Instant::now);
        StartProgress { ranks, shown: on.then_some(long_ago) }
    }

    fn show(&mut self, started: usize) {
        if let Some(last) = self.shown {
            if last.elapsed() >= Duration::from_millis(100) {
                eprint!("\rbarrier run: starting ranks: {started} of {}", self.ranks);
                self.shown = Some(Instant::now());
            }
        }
    }

    fn done(&mut self, took: Duration) {
        if self.shown.take().is_some() {
            eprintln!("\rbarrier run: started {} ranks in {took:.2?}          ", self.ranks);
        }
    }
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
