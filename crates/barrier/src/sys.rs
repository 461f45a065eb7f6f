//! Every raw system call the crate makes, behind one small module.
//!
//! Callers get safe wrappers; each `unsafe` block here states why the call is sound. Nothing
//! outside this module calls `libc` directly, so the list of syscalls the barrier relies on is
//! this file: `futex(2)` for parking, `shm_open(3)`/`mmap(2)` for shared segments,
//! `sched_yield(2)`, `sched_getcpu(3)` and `sched_{get,set}affinity(2)` for the wait policy and
//! benchmarks, `fcntl(2)` and `poll(2)` for the launcher's descriptors (close-on-exec, the
//! lifeline), `fcntl(2)` open-file-description locks and `flock(2)` for device liveness.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Blocks while `*word == expected`, for at most `timeout`.
///
/// Returns when woken, when the word differs (`EAGAIN`), on a signal or at the timeout; the
/// caller always re-checks its condition. The futex is not `FUTEX_PRIVATE_FLAG`, so it works on
/// memory shared between processes (the job segment).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call (borrowed), the
    // timespec pointer is null or points to a live local, and FUTEX_WAIT reads only the word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every thread or process blocked in [`futex_wait`] on `word`.
pub fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a valid aligned u32; FUTEX_WAKE does not access memory beyond the key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// The wall clock in nanoseconds since the epoch, at the kernel's tick resolution
/// (`CLOCK_REALTIME_COARSE`): a few nanoseconds to read, where the precise clock costs tens in
/// a virtual machine. For timestamps that only label things (device messages).
pub fn coarse_wall_clock_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// Gives the core to another runnable thread.
#[inline]
pub fn yield_now() {
    // SAFETY: sched_yield has no preconditions.
    unsafe {
        libc::sched_yield();
    }
}

/// The CPU this thread is running on now (`sched_getcpu(3)`: recent glibc reads it from the
/// rseq area or the vDSO without a system call; older ones on some architectures make one),
/// or `None` where the kernel cannot tell. Only ever a hint: the thread may be moved right
/// after.
pub fn current_cpu() -> Option<u32> {
    // Miri runs no sched_getcpu: the kernel "cannot tell", a path every caller has.
    if cfg!(miri) {
        return None;
    }
    // SAFETY: sched_getcpu takes no arguments and touches no caller memory.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// Number of cores this process may run on (the calling thread's affinity mask, and the
/// cgroup's CPU quota), at least 1.
///
/// `std::thread::available_parallelism` reads the cgroup's files on every call (three opens and
/// reads: about 30 µs, a fifth of an MPI communicator's set-up was spent there). Its answer,
/// the mask's count capped by the quota, depends on the count alone (the quota does not change
/// while the process runs), so it is asked once per count; the mask, which the launcher and
/// thread jobs change, is read on every call (one system call).
pub fn available_cores() -> usize {
    const COUNTS: usize = 1024;
    static BY_MASK_COUNT: [std::sync::atomic::AtomicUsize; COUNTS] =
        [const { std::sync::atomic::AtomicUsize::new(0) }; COUNTS];
    let ask_std = || std::thread::available_parallelism().map_or(1, |n| n.get());
    match affinity_count().filter(|&m| m < COUNTS) {
        Some(m) => {
            let known = &BY_MASK_COUNT[m];
            match known.load(std::sync::atomic::Ordering::Relaxed) {
                0 => {
                    let cores = ask_std();
                    // Kept only if the mask did not change meanwhile (another count's answer).
                    if affinity_count() == Some(m) {
                        known.store(cores, std::sync::atomic::Ordering::Relaxed);
                    }
                    cores
                }
                cores => cores,
            }
        }
        None => ask_std(),
    }
}

/// CPUs in the calling thread's affinity mask, where the kernel says.
fn affinity_count() -> Option<usize> {
    if cfg!(miri) {
        return None;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable cpu_set_t of the size passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    // SAFETY: `set` was filled by the kernel.
    (rc == 0).then(|| unsafe { libc::CPU_COUNT(&set) } as usize)
}

/// Restricts the calling thread to `cores`.
pub fn set_affinity(cores: &[usize]) -> io::Result<()> {
    let set = cpu_set(cores);
    // SAFETY: pid 0 means the calling thread; the pointer and size describe `set`.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The affinity mask of `cores` (for a child's `sched_setaffinity` between fork and exec,
/// where nothing may allocate).
pub fn cpu_set(cores: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; zeroed is its empty value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cores {
        // SAFETY: CPU_SET writes one bit inside `set`; the index is bounded by its capacity.
        unsafe { libc::CPU_SET(c % libc::CPU_SETSIZE as usize, &mut set) };
    }
    set
}

/// Pins the calling thread to one core. Errors are returned, not ignored: a benchmark that
/// asked for pinning should say that it did not get it.
pub fn pin_to_core(core: usize) -> io::Result<()> {
    set_affinity(&[core])
}

/// The cores in this thread's affinity mask, in order.
pub fn affinity_cores() -> Vec<usize> {
    affinity_mask().map_or_else(|| vec![0], |set| cpus_in(&set).collect())
}

/// The cores in this thread's affinity mask as a bit mask of `64 * N` CPUs (those past it left
/// out): the words a layer exchanges so that the ranks of one machine count the cores they
/// may use together ([`cores_in`]).
pub fn affinity_words<const N: usize>() -> [u64; N] {
    let mut words = [0u64; N];
    for cpu in affinity_cores() {
        if let Some(w) = words.get_mut(cpu / 64) {
            *w |= 1 << (cpu % 64);
        }
    }
    words
}

/// How many cores the masks ([`affinity_words`]) cover together; at least 1.
pub fn cores_in<'a>(masks: impl IntoIterator<Item = &'a [u64]>) -> usize {
    let mut union: Vec<u64> = Vec::new();
    for mask in masks {
        union.resize(union.len().max(mask.len()), 0);
        union.iter_mut().zip(mask).for_each(|(u, w)| *u |= w);
    }
    union.iter().map(|w| w.count_ones() as usize).sum::<usize>().max(1)
}

/// The calling thread's affinity mask, if it can be read.
fn affinity_mask() -> Option<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data; zeroed is its empty value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the pointer and size describe `set`.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    (rc == 0).then_some(set)
}

/// The CPUs in `set`, in order.
fn cpus_in(set: &libc::cpu_set_t) -> impl Iterator<Item = usize> + '_ {
    // SAFETY: CPU_ISSET reads one bit inside `set`.
    (0..libc::CPU_SETSIZE as usize).filter(move |&c| unsafe { libc::CPU_ISSET(c, set) })
}

thread_local! {
    /// The CPU this thread was bound to by [`bind_thread_to_cpu`], whether or not this machine
    /// has it (an emulated A64FX node has CPUs this machine lacks).
    static BOUND_CPU: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Binds the calling thread to `cpu`: its affinity becomes that one CPU when this process may
/// run there, and the binding is recorded either way, so that a device emulating a node with
/// more CPUs than this machine (the emulated A64FX) sees the thread on `cpu`. Returns whether
/// the affinity was applied.
pub fn bind_thread_to_cpu(cpu: usize) -> io::Result<bool> {
    BOUND_CPU.with(|b| b.set(Some(cpu)));
    if affinity_cores().contains(&cpu) {
        pin_to_core(cpu)?;
        return Ok(true);
    }
    Ok(false)
}

/// The one CPU the calling thread is bound to: the binding recorded by
/// [`bind_thread_to_cpu`], else the affinity mask when it names exactly one CPU. `None` when
/// the thread may run on several (a driver that needs a PE per thread refuses such a thread).
pub fn bound_cpu() -> Option<usize> {
    if let Some(cpu) = BOUND_CPU.with(|b| b.get()) {
        return Some(cpu);
    }
    affinity_one()
}

/// The one CPU the calling thread's affinity mask names; `None` when it names several, or the
/// mask cannot be read.
pub fn affinity_one() -> Option<usize> {
    let set = affinity_mask()?;
    let mut cpus = cpus_in(&set);
    match (cpus.next(), cpus.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// Creates an anonymous shared-memory file (`memfd_create`, close-on-exec) of `len` bytes,
/// labelled `label` in `/proc/<pid>/fd` (sparse: pages cost memory only when touched).
///
/// It has no name anywhere, so nothing can ever be left behind, and it lives on the kernel's
/// internal shared-memory mount, not on `/dev/shm`: a full `/dev/shm` (a container's default
/// is 64 MiB, often filled by other programs' stale files) cannot make a later page fault
/// raise SIGBUS. It is shared by inheriting the descriptor or opening `/proc/<pid>/fd/<n>`.
pub fn memfd_sized(label: &str, len: usize) -> io::Result<OwnedFd> {
    let fd = memfd_empty(label)?;
    memfd_size(fd.as_raw_fd(), len)?;
    Ok(fd)
}

/// A new, empty memfd (close-on-exec, sealable) for [`memfd_size`] to size later: made before
/// its size is known, so that its descriptor and identity can be offered with the first exchange
/// of a set-up.
pub fn memfd_empty(label: &str) -> io::Result<OwnedFd> {
    let clabel = std::ffi::CString::new(label)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "memfd label contains NUL"))?;
    // SAFETY: `clabel` is a valid NUL-terminated string; the flags are plain integers.
    let fd = unsafe { libc::memfd_create(clabel.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sizes a memfd from [`memfd_empty`] to `len` bytes and seals its size.
pub fn memfd_size(fd: RawFd, len: usize) -> io::Result<()> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{len} bytes is too large for a file")))?;
    // SAFETY: `fd` is an open descriptor; ftruncate only changes the file's size.
    if unsafe { libc::ftruncate(fd, len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Its size is final: a process holding the descriptor (every rank does) cannot shrink it
    // under the others' mappings (SIGBUS) or grow it.
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: `fd` is an open memfd made with MFD_ALLOW_SEALING; fcntl only adds seals.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Allocates every page of the first `len` bytes of the file behind `fd` now
/// (`posix_fallocate`): a file system without room says so here (`ENOSPC`), instead of a page
/// fault raising SIGBUS in whoever touches the page first.
pub fn allocate(fd: RawFd, len: usize) -> io::Result<()> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{len} bytes is too large for a file")))?;
    // SAFETY: `fd` is an open descriptor; posix_fallocate only allocates its blocks.
    match unsafe { libc::posix_fallocate(fd, 0, len) } {
        0 => Ok(()),
        code => Err(io::Error::from_raw_os_error(code)),
    }
}

/// Opens `path` (read-write, or read-only) only if it can be trusted as a device or its
/// description: not through a symbolic link (`O_NOFOLLOW`; the `/proc/<pid>/fd/<n>` links of
/// a process of this user are followed, which is how emulated devices are shared), and,
/// checked on the opened file (`fstat`, so nothing can change between check and use), owned
/// by this user or by root and writable by nobody else, unless it is a character device of
/// root's (a kernel driver's node, whose permissions its driver enforces). Only regular files
/// and character devices pass; a FIFO is refused at once (it is opened without blocking).
pub fn open_trusted(path: &std::path::Path, write: bool) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let through_proc = proc_fd_of_own_user(path);
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(write);
    // O_NONBLOCK: opening a FIFO (which no device is) would otherwise wait for a writer for
    // ever; the file's kind is checked below, and blocking mode restored for what passes.
    if !through_proc {
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    } else {
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} is a symbolic link: name the file itself", path.display()),
            )
        } else {
            e
        }
    })?;
    let st = fstat(file.as_raw_fd())?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFREG && kind != libc::S_IFCHR {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is neither a regular file nor a character device (a {}): name the device file or its \
                 emulated description",
                path.display(),
                match kind {
                    libc::S_IFIFO => "FIFO",
                    libc::S_IFSOCK => "socket",
                    libc::S_IFDIR => "directory",
                    libc::S_IFBLK => "block device",
                    _ => "special file",
                }
            ),
        ));
    }
    // Back to blocking mode: what is read or mapped from here on is a file or a device.
    // SAFETY: F_GETFL/F_SETFL only read and write the open file's status flags.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    if kind == libc::S_IFCHR && st.st_uid == 0 {
        return Ok(file);
    }
    if st.st_uid != me && st.st_uid != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to user {} (not to you, user {me}, nor to root): another user's file would decide when \
                 your barriers complete",
                path.display(),
                st.st_uid
            ),
        ));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is writable by other users (mode {:o}): anyone could decide when your barriers complete; make it \
                 0600 (chmod go-w)",
                path.display(),
                st.st_mode & 0o7777
            ),
        ));
    }
    Ok(file)
}

/// Whether `path` is `/proc/<pid>/fd/<n>` of a process of this user (the kernel lets only such a
/// user, or root, open it).
fn proc_fd_of_own_user(path: &std::path::Path) -> bool {
    let Some(rest) = path.to_str().and_then(|p| p.strip_prefix("/proc/")) else { return false };
    let mut parts = rest.split('/');
    let (Some(pid), Some("fd"), Some(n), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    if pid.parse::<u32>().is_err() || n.parse::<u32>().is_err() {
        return false;
    }
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == me || me == 0)
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: stat is plain data; zeroed is a valid initial value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live local and fstat writes only into it.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Size in bytes of the object behind `fd`.
pub fn fd_len(fd: RawFd) -> io::Result<usize> {
    Ok(fstat(fd)?.st_size as usize)
}

/// The device and inode of the object behind `fd`: which file it is, whoever opened it.
pub fn fd_identity(fd: RawFd) -> io::Result<(u64, u64)> {
    let st = fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// Sets `FD_CLOEXEC`: the descriptor is not passed on to programs this process executes (a
/// rank's own subprocesses must not inherit the job).
pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD only read and write the descriptor's flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Blocks until `fd` (the read end of the launcher's lifeline pipe, which nobody writes)
/// reports end of file or an error: the launcher, the only holder of the write end, is gone.
pub fn wait_hangup(fd: RawFd) {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: `pfd` is a live local describing one descriptor; -1 waits without a timeout.
        let rc = unsafe { libc::poll(&mut pfd, 1, -1) };
        if rc > 0 || (rc < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)) {
            return;
        }
    }
}

/// Ends this process the way a launcher ends a rank: SIGTERM (the program may clean up),
/// then, if it is still alive after `grace`, `_exit` with the SIGTERM status.
pub fn terminate_self(grace: Duration) -> ! {
    // SAFETY: kill and getpid have no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
    std::thread::sleep(grace);
    // SAFETY: _exit ends the process without running destructors or atexit handlers, which is
    // what a process that ignored SIGTERM gets from a launcher's SIGKILL as well.
    unsafe { libc::_exit(128 + libc::SIGTERM) }
}

fn byte_lock(kind: libc::c_short, at: u64, len: u64) -> libc::flock {
    // SAFETY: flock is plain data; zeroed is valid (l_pid must be 0 for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = at as libc::off_t;
    fl.l_len = len as libc::off_t;
    fl
}

/// Takes an exclusive open-file-description lock on byte `at` of `fd`'s file without waiting:
/// `Ok(false)` if another open file description holds it. The kernel drops the lock when the
/// last descriptor of this open file description closes (the process dies).
pub fn ofd_lock(fd: RawFd, at: u64) -> io::Result<bool> {
    let fl = byte_lock(libc::F_WRLCK as libc::c_short, at, 1);
    // SAFETY: `fl` is a live, initialized flock struct; F_OFD_SETLK only reads it.
    if unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &fl) } == 0 {
        return Ok(true);
    }
    match io::Error::last_os_error() {
        e if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => Ok(false),
        e => Err(e),
    }
}

/// Releases this open file description's lock on byte `at`.
pub fn ofd_unlock(fd: RawFd, at: u64) {
    let fl = byte_lock(libc::F_UNLCK as libc::c_short, at, 1);
    // SAFETY: as in `ofd_lock`.
    unsafe {
        libc::fcntl(fd, libc::F_OFD_SETLK, &fl);
    }
}

/// Whether another open file description holds a lock on any byte of `[at, at + len)`.
pub fn ofd_held(fd: RawFd, at: u64, len: u64) -> bool {
    let mut fl = byte_lock(libc::F_WRLCK as libc::c_short, at, len);
    // SAFETY: `fl` is a live flock struct that F_OFD_GETLK reads and overwrites.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) };
    rc == 0 && fl.l_type != libc::F_UNLCK as libc::c_short
}

/// Takes this open file's whole-file `flock` exclusively, without waiting: `Ok(false)` if
/// another open file holds it. A device emulator holds it for as long as it serves the file.
pub fn flock_exclusive(fd: RawFd) -> io::Result<bool> {
    // SAFETY: flock only changes the lock state of the open file.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    match io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        e => Err(e),
    }
}

/// Whether some other open file holds `fd`'s file's `flock` exclusively (the file is served).
/// Probes with a shared lock that it drops at once.
pub fn flock_held(fd: RawFd) -> bool {
    // SAFETY: flock only changes the lock state of the open file.
    unsafe {
        if libc::flock(fd, libc::LOCK_SH | libc::LOCK_NB) == 0 {
            libc::flock(fd, libc::LOCK_UN);
            false
        } else {
            io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
        }
    }
}

/// A shared read-write mapping, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all access to it goes through atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out the base pointer.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` shared and read-write.
    pub fn map_fd(fd: RawFd, len: usize) -> io::Result<Self> {
        Self::map(Some(fd), len)
    }

    /// Maps `len` bytes of zeroed anonymous memory shared with children and threads.
    #[cfg(not(miri))]
    pub fn anonymous(len: usize) -> io::Result<Self> {
        Self::map(None, len)
    }

    /// Under Miri (which runs no `mmap`), zeroed page-aligned heap memory stands in for an
    /// anonymous mapping: shared by threads, which is all a Miri test has, so the algorithms
    /// over a segment run under Miri's checks of their atomics and pointers.
    #[cfg(miri)]
    pub fn anonymous(len: usize) -> io::Result<Self> {
        let layout = Self::heap_layout(len)?;
        // SAFETY: the layout has a nonzero size (checked in heap_layout).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(Self { ptr, len })
    }

    #[cfg(miri)]
    fn heap_layout(len: usize) -> io::Result<std::alloc::Layout> {
        std::alloc::Layout::from_size_align(len.max(1), 4096)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }

    fn map(fd: Option<RawFd>, len: usize) -> io::Result<Self> {
        let (flags, raw_fd) = match fd {
            Some(fd) => (libc::MAP_SHARED, fd),
            None => (libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1),
        };
        // SAFETY: a fresh mapping chosen by the kernel (null hint) cannot alias Rust memory.
        let ptr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, raw_fd, 0) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).expect("mmap returned null without MAP_FAILED");
        Ok(Self { ptr, len })
    }

    /// Base address of the mapping (page aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length mapping (never produced by the constructors).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        #[cfg(miri)]
        if let Ok(layout) = Self::heap_layout(self.len) {
            // SAFETY: under Miri every mapping of `len` bytes is this heap allocation (map_fd
            // fails there: Miri has no mmap), made with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
            return;
        }
        // SAFETY: `ptr`/`len` describe a mapping this value created and nothing else unmaps.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranks of a machine count the cores their masks cover together, once each.
    #[test]
    fn cores_are_counted_over_the_union_of_masks() {
        assert_eq!(cores_in([&[0b0011u64][..], &[0b0110, 1]]), 4);
        assert_eq!(cores_in(std::iter::empty()), 1, "no mask: one core");
        let mine: [u64; 16] = affinity_words();
        assert_eq!(cores_in([&mine[..]]), affinity_cores().len().max(1));
    }

    /// The cached answer is std's for the mask the thread has now, also after the mask changed
    /// (a thread moved to one CPU, then back). (That std's cgroup files are then read once per
    /// count, not at every call, is what the cache is for; this test does not observe it.)
    #[test]
    #[cfg_attr(miri, ignore)]
    fn available_cores_is_stds_answer_for_the_mask_now() {
        let std_says = || std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(available_cores(), std_says());
        assert_eq!(available_cores(), std_says(), "the cached answer");
        std::thread::spawn(move || {
            let Some(first) = (0..1024).find(|&c| {
                // SAFETY: as in `affinity_count`.
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: `set` is a writable cpu_set_t of the size passed.
                (unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } == 0)
                    // SAFETY: `set` was filled by the kernel; `c` is below CPU_SETSIZE.
                    && unsafe { libc::CPU_ISSET(c, &set) }
            }) else {
                return;
            };
            set_affinity(&[first]).expect("a thread may narrow its own mask");
            assert_eq!(available_cores(), 1);
            assert_eq!(available_cores(), std_says());
        })
        .join()
        .unwrap();
        assert_eq!(available_cores(), std_says(), "this thread's mask did not change");
    }
}
