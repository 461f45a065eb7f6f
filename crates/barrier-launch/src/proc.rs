//! The launcher's system calls, behind one small module: process descriptors (`pidfd`) to
//! learn when exactly our ranks end, `waitpid` on those pids only, the lifeline pipe, signals
//! to process groups, the terminal, and the machine's limits on processes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A descriptor that becomes readable when process `pid` (a child not yet reaped) ends.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Waits up to `timeout` for any of `fds` to become readable; the indexes that are.
pub fn poll_readable(fds: &[RawFd], timeout: Duration) -> Vec<usize> {
    let mut pfds: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfds` is a live buffer of `pfds.len()` pollfd structs.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if rc <= 0 {
        return Vec::new();
    }
    pfds.iter().enumerate().filter(|(_, p)| p.revents != 0).map(|(i, _)| i).collect()
}

/// How a child ended, if it has: reaps exactly that child (never another process's). A child
/// that someone else already reaped (another thread's `waitpid(-1)`) has ended with a status
/// nobody can learn any more: reported as a clean exit.
pub fn try_reap(pid: u32) -> Option<libc::c_int> {
    let mut status: libc::c_int = 0;
    // SAFETY: `status` is a live local that waitpid writes into; WNOHANG never blocks.
    let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
    if rc == pid as libc::pid_t {
        Some(status)
    } else if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
        Some(0)
    } else {
        None
    }
}

/// Blocks until child `pid` ends and reaps it.
pub fn reap(pid: u32) {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: as in `try_reap`; blocking is wanted here (the child was just killed).
        let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        // A signal handled meanwhile (the launcher's handlers do not restart calls) must not
        // end the wait before the child is gone.
        if rc != -1 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Signals a rank's whole process group (each rank leads its own), so that whatever the rank
/// started (a shell's children, helpers) stops with it; falls back to the process alone.
pub fn signal_group(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions. The group id is the pid of a child this
    // launcher has not reaped yet (callers check), so it cannot have been reused.
    unsafe {
        if libc::kill(-(pid as libc::pid_t), sig) != 0 {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

/// A pipe with both ends close-on-exec: (read, write).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Whether standard input is a terminal of which this process is in the foreground (only then
/// may it read from it without being stopped by SIGTTIN).
pub fn stdin_terminal() -> Option<bool> {
    // SAFETY: isatty, tcgetpgrp and getpgrp only query the state of descriptor 0 and this process.
    unsafe {
        if libc::isatty(0) != 1 {
            return None;
        }
        Some(libc::tcgetpgrp(0) == libc::getpgrp())
    }
}

/// Whether standard error is a terminal (progress lines are for people, not logs).
pub fn stderr_terminal() -> bool {
    // SAFETY: isatty only queries descriptor 2.
    unsafe { libc::isatty(2) == 1 }
}

/// Raises the soft limit on open descriptors to at least `want` (up to the hard limit): the
/// launcher holds a process descriptor per rank, and pipes per rank when it captures output.
pub fn ensure_open_files(want: u64) {
    // SAFETY: rlimit is plain data; getrlimit writes it, setrlimit reads it.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn rlimit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    // SAFETY: rlimit is plain data; getrlimit writes it.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `lim` is a live local.
    if unsafe { libc::getrlimit(resource, &mut lim) } != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(lim.rlim_cur)
}

/// Memory a started rank is counted at when deciding how many ranks fit: a small program's
/// resident set plus its page tables and kernel structures.
pub const MEMORY_PER_RANK: u64 = 4 << 20;

/// The most ranks (processes or threads) this machine can hold at once, and which limit says so.
pub fn max_ranks() -> (usize, String) {
    let mut limits: Vec<(u64, String)> = Vec::new();
    if let Some(kb) = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines().find(|l| l.starts_with("MemAvailable:"))?.split_whitespace().nth(1)?.parse::<u64>().ok()
    }) {
        let bytes = kb * 1024;
        limits.push((
            bytes / MEMORY_PER_RANK,
            format!("{} MiB of available memory at {} MiB per rank", bytes >> 20, MEMORY_PER_RANK >> 20),
        ));
    }
    if let Some(n) = rlimit(libc::RLIMIT_NPROC) {
        limits.push((n / 2, format!("half of this user's process limit (ulimit -u {n})")));
    }
    if let Some(pid_max) =
        std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|t| t.trim().parse::<u64>().ok())
    {
        limits.push((pid_max / 2, format!("half of the kernel's pid_max ({pid_max})")));
    }
    limits
        .into_iter()
        .min_by_key(|(n, _)| *n)
        .map_or((usize::MAX, "no limit found".into()), |(n, why)| (n.max(1) as usize, why))
}

/// Descriptor number of an owned descriptor (for the environment of a rank).
pub fn raw(fd: &OwnedFd) -> RawFd {
    fd.as_raw_fd()
}
