//! The device file: a shared mapping of a device's size that drivers map as MMIO.
//!
//! * **Private to one job** ([`DeviceFile::create_private`]): created in `/dev/shm` with a unique
//!   name, unlinked at once, and reached through `/proc/<pid>/fd/<fd>` of the process that holds
//!   it. Nothing is left behind whatever dies; used by `barrier run --emulate` and tests.
//! * **Named** ([`DeviceFile::create_at`]): a path several jobs open (the `barrier emu` daemon);
//!   removed when the daemon stops.
//!
//! Either way the emulator holds an exclusive `flock` on the file for as long as it serves it.
//! That is how a driver tells a live device from a file left behind by a daemon killed with
//! `kill -9` (the kernel drops the lock with the process), and how a new daemon knows that it
//! may replace such a stale file.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use barrier::mmio::Mmio;
use barrier_hw::{global, DeviceMap};

/// A mapped device file.
#[derive(Debug)]
pub struct DeviceFile {
    map: &'static DeviceMap,
    mmio: Mmio,
    path: PathBuf,
    remove_on_drop: bool,
    /// Open for as long as the device is served: it carries the emulator's `flock`.
    fd: OwnedFd,
}

pub(crate) fn create_file(path: &Path, len: u64) -> std::io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated path; flags and mode are integers.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC, 0o600) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `open` returned a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `fd` is open; ftruncate only sizes the file.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        let e = std::io::Error::last_os_error();
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    // Every page now: a full file system says so here, not with SIGBUS in a rank later.
    if let Err(e) = barrier::sys::allocate(fd.as_raw_fd(), len as usize) {
        let _ = std::fs::remove_file(path);
        let dir = path.parent().map_or_else(|| "its file system".into(), |d| d.display().to_string());
        return Err(std::io::Error::new(
            e.kind(),
            format!("no room for the emulated device's {len} bytes in {dir} ({e}): free space there"),
        ));
    }
    Ok(fd)
}

impl DeviceFile {
    /// A device private to this process and its children, reachable at the returned path.
    pub fn create_private(map: &'static DeviceMap) -> std::io::Result<DeviceFile> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let tmp = PathBuf::from(format!("/dev/shm/barrier-emu-{}-{}-{nanos:x}", map.kind, std::process::id()));
        let fd = create_file(&tmp, map.size)?;
        std::fs::remove_file(&tmp)?;
        let path = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd()));
        Self::finish(map, fd, path, false)
    }

    /// A named device at `path`, removed when this value is dropped. A file already there is
    /// replaced if nothing serves it (left behind by a daemon that died); if another emulator
    /// serves it, this fails with `AddrInUse`.
    ///
    /// The new file is created under a temporary name and locked before it appears at `path`
    /// (a link for a new path, a rename over a stale file whose lock this process holds), so no
    /// other daemon can ever see it unlocked and take it for stale.
    pub fn create_at(map: &'static DeviceMap, path: &Path) -> std::io::Result<DeviceFile> {
        let tmp = path.with_file_name(format!(
            ".{}.{}.new",
            path.file_name().map_or_else(|| "device".into(), |n| n.to_string_lossy()),
            std::process::id()
        ));
        let fd = create_file(&tmp, map.size)?;
        let publish = (|| {
            if !barrier::sys::flock_exclusive(fd.as_raw_fd())? {
                return Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, "the new device file is locked"));
            }
            match std::fs::hard_link(&tmp, path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    // Held (locked) until the rename has replaced it: no other daemon can take it.
                    let _stale = Self::lock_stale(path)?;
                    std::fs::rename(&tmp, path)
                }
                Err(e) => Err(e),
            }
        })();
        let _ = std::fs::remove_file(&tmp);
        publish?;
        Self::finish(map, fd, path.to_path_buf(), true)
    }

    /// Opens and locks the file at `path` if no emulator serves it; `AddrInUse` if one does.
    fn lock_stale(path: &Path) -> std::io::Result<std::fs::File> {
        let existing = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        // A driver probing the file holds a shared lock for an instant: try a few times.
        for _ in 0..20 {
            if barrier::sys::flock_exclusive(existing.as_raw_fd())? {
                tracing::info!(path = %path.display(), "replacing a device file nothing serves any more");
                return Ok(existing);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("another emulated device (a running `barrier emu`) serves {}", path.display()),
        ))
    }

    fn finish(
        map: &'static DeviceMap,
        fd: OwnedFd,
        path: PathBuf,
        remove_on_drop: bool,
    ) -> std::io::Result<DeviceFile> {
        // (Already ours for a named device; a no-op then.)
        if !barrier::sys::flock_exclusive(fd.as_raw_fd())? {
            return Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, "the new device file is locked"));
        }
        let mmio = Mmio::from_fd(fd.as_raw_fd(), map.size)?;
        let dev = DeviceFile { map, mmio, path, remove_on_drop, fd };
        dev.power_on();
        Ok(dev)
    }

    fn power_on(&self) {
        let m = self.map;
        self.word(global::VERSION.offset).store(m.version, Ordering::Relaxed);
        self.word(global::NETWORK_ADDR.offset).store(0x0A00_0000 | m.max_groups as u64, Ordering::Relaxed);
        for g in 0..m.max_groups {
            self.group_store(m, g, &m.group.group_id, g as u64);
            self.group_word(m, g, &m.group.arrival_addr, 0)
                .store(m.group_reg(g, &m.group.arrival_slots), Ordering::Relaxed);
            if m.kind == "switch" {
                let net = self.word(global::NETWORK_ADDR.offset).load(Ordering::Relaxed);
                self.group_word(m, g, &barrier_hw::SWITCH_GROUP_NETWORK_ADDR, 0).store(net, Ordering::Relaxed);
            }
        }
        self.word(global::INSTANCE.offset).store(random_instance(), Ordering::Relaxed);
        self.word(global::DEVICE_STATUS.offset).store(1, Ordering::Relaxed);
        self.word(global::MAGIC.offset).store(m.magic, Ordering::Release);
    }

    /// The register map this device serves.
    pub fn map(&self) -> &'static DeviceMap {
        self.map
    }

    /// Where drivers open it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open device file (the collector asks it which locks drivers hold).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

/// Register access is the driver's own (`barrier::mmio::Mmio`): the emulator reads and writes
/// the device exactly as drivers do.
impl std::ops::Deref for DeviceFile {
    type Target = Mmio;
    fn deref(&self) -> &Mmio {
        &self.mmio
    }
}

impl Drop for DeviceFile {
    fn drop(&mut self) {
        // Only if the path still names this file (another daemon may have replaced it).
        if self.remove_on_drop && same_file(&self.path, &self.fd) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A random, non-zero id for one power-on of a device.
fn random_instance() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the operating system's random source.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() | 1
}

fn same_file(path: &Path, fd: &OwnedFd) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(at_path) = std::fs::metadata(path) else { return false };
    let Ok(dup) = fd.try_clone() else { return false };
    let Ok(ours) = std::fs::File::from(dup).metadata() else { return false };
    (at_path.dev(), at_path.ino()) == (ours.dev(), ours.ino())
}
