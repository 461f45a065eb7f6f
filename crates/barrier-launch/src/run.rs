//! Running a job: the segment, the emulated devices, the ranks' processes, their placement,
//! and watching them until every rank has ended.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use barrier::shm::{JobShape, RankExit, Segment};

use crate::proc;
use crate::rebalance::{Balancer, Kernel};

use super::io::{read_all, tag_lines, StartProgress, StdinPlan};
use super::report::{JobReport, LaunchError, RankEnd, RankFailure};
use super::spec::{JobSpec, BALANCE_EVERY, GRACE};

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
    let signals = crate::signals::install_forwarding();
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
    let stderr_is_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
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
        // Standard error goes through the launcher a whole line at a time (untagged unless
        // --tag-output) in jobs small enough for a thread per rank, when it is not a terminal
        // (a log, a pipe: where a rank's line written in several calls, as Rust's `main`
        // returning an error writes it, mixed with another rank's mid-line: issue 40 item 8).
        // A terminal keeps the ranks' own: prompts, colours and partial lines show as written.
        let whole_stderr_lines = (2..=super::io::WHOLE_LINES_UP_TO).contains(&spec.ranks) && !stderr_is_terminal;
        if spec.capture_stderr || spec.tag_output || whole_stderr_lines {
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
                        taggers.push(tag_lines(out, Some(rank), false));
                    }
                }
                if let Some(err) = child.stderr.take() {
                    if spec.capture_stderr {
                        err_readers.push(read_all(err));
                    } else {
                        taggers.push(tag_lines(err, spec.tag_output.then_some(rank), true));
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
        // SIGUSR1/SIGUSR2: passed on to every rank (its process group); the job goes on.
        for sig in crate::signals::take_forwarded() {
            signal_all(&ranks, sig);
        }
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
        let mut ended = wait_for_ends(&mut ranks, poll);
        let ended_after = start.elapsed();
        let failed = |status: libc::c_int| !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        if failure.is_none() && interrupted.is_none() && ended.iter().any(|&(_, status)| failed(status)) {
            // Ranks often fail because another one did (they saw it die and report it): take the
            // ranks that end at about the same time too, and blame one killed by a signal (a
            // crash, abort(3)) before one that exited with a status (issue 40 item 8: rank 0,
            // exiting with 3 after seeing rank 1 abort, was blamed). A shell wrapper reports its
            // program's death by a signal as a status above 128.
            let until = Instant::now() + Duration::from_millis(20);
            while live > ended.len() {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                ended.extend(wait_for_ends(&mut ranks, left));
            }
            let crashed = |status: libc::c_int| {
                libc::WIFSIGNALED(status) || (libc::WIFEXITED(status) && libc::WEXITSTATUS(status) > 128)
            };
            ended.sort_by_key(|&(_, status)| !crashed(status));
        }
        for (rank, status) in ended {
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
                    // The abort word is in shared memory, written by the ranks: a rank number
                    // outside the job (a corrupt word) blames the rank that ended instead.
                    Err(barrier::wait::WaitError::Aborted(r)) if r != rank && r < ranks.len() => match seg.exited(r) {
                        Some(RankExit::Status(code)) => (r, RankEnd::Exited(code)),
                        _ => (rank, end),
                    },
                    _ => (rank, end),
                };
                failure = Some(RankFailure { rank, pid: ranks[rank].pid, end, after: ended_after });
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
