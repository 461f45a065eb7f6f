//! Memory-mapped device registers: the one place that turns device offsets into references.
//!
//! Used by the hardware drivers (over a real device file or the emulator's) and by the emulator
//! itself, so both sides access registers the same way. Every accessor checks bounds and
//! alignment; registers are read and written only through atomics (a device may change them at
//! any time).

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::sys::{self, Mapping};
use crate::wait::Flag;

/// Device work that runs in the context of the store that triggers it: a device emulated
/// *inline* (its DEVICE_MODE register says so) has no engine of its own; the rank whose store
/// needs the device runs the device's work, with the emulator's code, on the device file at
/// `path`, the way an emulator traps an MMIO write. `instance` is the device's INSTANCE
/// register as the driver read it (a path can name another device later). `barrier-emu`
/// installs the hook ([`install_inline_device`]); a program without it cannot drive an inline
/// device.
pub type InlineDevice = fn(path: &Path, instance: u64, map: &'static barrier_hw::DeviceMap, work: InlineWork);

/// What an inline device is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InlineWork {
    /// Member `member` of group `group` has just written its arrival message into its slot:
    /// the device takes that message (the trapped remote store).
    Arrival {
        /// The group.
        group: usize,
        /// The member whose slot was written.
        member: usize,
    },
    /// The doorbell was rung (configuration changes, a waiting rank's watchdog): the device
    /// scans every group. `ticket` is the doorbell's value after this ring.
    Ring {
        /// The doorbell's value after this ring.
        ticket: u64,
    },
    /// This process's driver is done with the device (its mapping is going away): the device
    /// writes out what it has not written yet (an inline device adds up its counters).
    Flush,
}

static INLINE_DEVICE: std::sync::OnceLock<InlineDevice> = std::sync::OnceLock::new();

/// Installs the inline device hook for this process (the first one wins).
pub fn install_inline_device(hook: InlineDevice) {
    let _ = INLINE_DEVICE.set(hook);
}

/// The inline device hook: the one installed in this process, or else the emulator library
/// that [`INLINE_LIBRARY_VAR`] names, loaded once (`barrier run --emulate` sets it, so that
/// programs that do not link the emulator can drive its inline devices). The error says why
/// neither is there.
pub fn inline_device() -> Result<InlineDevice, String> {
    if let Some(hook) = INLINE_DEVICE.get() {
        return Ok(*hook);
    }
    // Only a load is remembered (it cannot be undone); an unset variable is looked at again.
    let path = std::env::var_os(INLINE_LIBRARY_VAR).ok_or_else(|| {
        format!(
            "this program neither links the emulator (as `barrier bench` does) nor names its library \
             in {INLINE_LIBRARY_VAR} (`barrier run --emulate` sets it)"
        )
    })?;
    match LOADED_LIBRARY.get_or_init(|| load_inline_library(Path::new(&path))) {
        Ok(_) => Ok(loaded_inline_device),
        Err(e) => Err(e.clone()),
    }
}

/// The environment variable that names the inline emulator library (`libbarrier_emu_inline.so`)
/// for programs that do not link the emulator.
pub const INLINE_LIBRARY_VAR: &str = "BARRIER_EMU_INLINE_LIB";

/// The C entry point of the inline emulator library (`barrier-emu-inline`): the work of the
/// device `instance` of kind `kind` (a `DeviceMap::kind`) whose file is at `path`, encoded as
/// `work`/`a`/`b` by [`InlineWork::encode`]. Returns 0, or -1 for a kind or work it does not
/// know, or -2 if the device's work panicked (its message is on stderr).
pub type InlineEntry = unsafe extern "C" fn(
    path: *const u8,
    path_len: usize,
    instance: u64,
    kind: *const u8,
    kind_len: usize,
    work: u32,
    a: u64,
    b: u64,
) -> i32;

/// The symbol of the library's [`InlineEntry`].
pub const INLINE_ENTRY_SYMBOL: &std::ffi::CStr = c"barrier_emu_inline_work";
/// The symbol of the library's `extern "C" fn() -> u64` that returns its [`INLINE_ABI`].
pub const INLINE_ABI_SYMBOL: &std::ffi::CStr = c"barrier_emu_inline_abi";

/// The version of the library interface: this crate's version, a hash of this crate's and
/// `barrier-hw`'s sources (made by the build script) and the register maps' versions, hashed
/// (FNV-1a). A library built from other sources of the driver side than this program is
/// refused, because the two sides read the same registers and flags.
pub const INLINE_ABI: u64 = {
    let version = concat!(env!("CARGO_PKG_VERSION"), "/inline-entry-1/", env!("BARRIER_SOURCE_HASH")).as_bytes();
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut i = 0;
    while i < version.len() {
        hash = (hash ^ version[i] as u64).wrapping_mul(0x100_0000_01b3);
        i += 1;
    }
    hash ^ barrier_hw::SWITCH.version.rotate_left(32)
        ^ barrier_hw::GBA.version
        ^ barrier_hw::SOURCE_HASH.rotate_left(17)
};

impl InlineWork {
    /// The work as the library's entry point takes it: `(work, a, b)`.
    pub fn encode(self) -> (u32, u64, u64) {
        match self {
            InlineWork::Arrival { group, member } => (0, group as u64, member as u64),
            InlineWork::Ring { ticket } => (1, ticket, 0),
            InlineWork::Flush => (2, 0, 0),
        }
    }

    /// The work the library's entry point was given, if it is one.
    pub fn decode(work: u32, a: u64, b: u64) -> Option<InlineWork> {
        match work {
            0 => Some(InlineWork::Arrival { group: a as usize, member: b as usize }),
            1 => Some(InlineWork::Ring { ticket: a }),
            2 => Some(InlineWork::Flush),
            _ => None,
        }
    }
}

static LOADED_LIBRARY: std::sync::OnceLock<Result<InlineEntry, String>> = std::sync::OnceLock::new();

/// Loads the inline emulator library at `path` (for good: it is never unloaded) and checks that
/// it was built from the same sources; returns its entry point.
pub fn load_inline_library(path: &Path) -> Result<InlineEntry, String> {
    use std::os::unix::ffi::OsStrExt;
    let what = || format!("the inline emulator library {}", path.display());
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: the path holds a NUL byte", what()))?;
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call. Loading runs the
    // library's initialisers: it is a Rust cdylib whose only exports are the two entry points.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(format!("cannot load {}: {}", what(), dl_error()));
    }
    let symbol = |name: &std::ffi::CStr| {
        // SAFETY: `handle` is a live handle from dlopen (never closed); `name` is NUL-terminated.
        let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if address.is_null() {
            Err(format!("{} has no symbol {}: it is not barrier-emu-inline", what(), name.to_string_lossy()))
        } else {
            Ok(address)
        }
    };
    let abi = symbol(INLINE_ABI_SYMBOL)?;
    // SAFETY: the symbol is the library's `extern "C" fn() -> u64` (the name is ours), and the
    // library stays loaded.
    let abi = unsafe { std::mem::transmute::<*mut libc::c_void, extern "C" fn() -> u64>(abi) }();
    if abi != INLINE_ABI {
        return Err(format!(
            "{} was built from other sources than this program (interface {abi:#x}, this program's \
             {INLINE_ABI:#x}): rebuild both from one tree (`cargo build --release --workspace`)",
            what()
        ));
    }
    let entry = symbol(INLINE_ENTRY_SYMBOL)?;
    // SAFETY: the symbol has the type `InlineEntry` in a library whose interface version matches
    // this program's (checked above); the library is never unloaded.
    Ok(unsafe { std::mem::transmute::<*mut libc::c_void, InlineEntry>(entry) })
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call on
    // this thread; it is copied at once.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { std::ffi::CStr::from_ptr(message) }.to_string_lossy().into_owned()
    }
}

/// The hook that forwards to the loaded library.
fn loaded_inline_device(path: &Path, instance: u64, map: &'static barrier_hw::DeviceMap, work: InlineWork) {
    use std::os::unix::ffi::OsStrExt;
    let Some(Ok(entry)) = LOADED_LIBRARY.get() else {
        unreachable!("the loaded hook is handed out only once the library is loaded")
    };
    let path = path.as_os_str().as_bytes();
    let (work_code, a, b) = work.encode();
    // SAFETY: the pointers and lengths describe live byte strings for the call; the entry point
    // checks its arguments and catches the device's panics.
    let status =
        unsafe { entry(path.as_ptr(), path.len(), instance, map.kind.as_ptr(), map.kind.len(), work_code, a, b) };
    match status {
        0 => {}
        -2 => panic!("the inline {} emulator panicked doing {work:?} (its message is above)", map.kind),
        _ => panic!("the inline emulator library does not know a {} device or {work:?}", map.kind),
    }
}

/// A mapped device.
#[derive(Debug)]
pub struct Mmio {
    /// The mapping's base address and length, copied out of `mapping` (which keeps them
    /// valid): every register access checks against them, one load each instead of two.
    base: std::ptr::NonNull<u8>,
    len: u64,
    /// Keeps `base` mapped (shared with the other `Mmio`s of the file in this process).
    _mapping: std::sync::Arc<Mapping>,
    /// The device file, kept open: the locks a driver holds on it (see
    /// `barrier_hw::DeviceMap::member_lock`) live as long as this open file.
    file: Option<std::fs::File>,
}

// SAFETY: `base` points into `mapping`, plain shared memory that `Mmio` keeps mapped and
// accesses through atomics only (the same argument as `Mapping`'s own Send and Sync).
unsafe impl Send for Mmio {}
// SAFETY: as above; `&Mmio` hands out only atomics in the mapping.
unsafe impl Sync for Mmio {}

/// This process's mappings of device files, by file identity and length.
type MappingCache = Vec<((u64, u64, usize), std::sync::Weak<Mapping>)>;
static MAPPINGS: std::sync::Mutex<MappingCache> = std::sync::Mutex::new(Vec::new());

/// The process's one mapping of the device file `file` (`len` bytes), made now if there is
/// none. Every [`Mmio::open`] of a file in a process shares it, each with its own open file
/// (the driver's locks belong to open files). One mapping, not one per open: an inline device
/// reads the arrival its driver has just stored, and writes the release flag the driver then
/// reads, in the same thread; through two mappings of one page the load and the store have
/// different addresses, and the processor discards its work when it finds out that they
/// alias. A live mapping keeps its file's inode from being reused, so the identity is unique.
fn shared_mapping(file: &std::fs::File, len: usize) -> std::io::Result<std::sync::Arc<Mapping>> {
    let (dev, ino) = sys::fd_identity(file.as_raw_fd())?;
    let key = (dev, ino, len);
    let mut cache = MAPPINGS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    cache.retain(|(_, m)| m.strong_count() > 0);
    if let Some(mapping) = cache.iter().find(|(k, _)| *k == key).and_then(|(_, m)| m.upgrade()) {
        return Ok(mapping);
    }
    let mapping = std::sync::Arc::new(Mapping::map_fd(file.as_raw_fd(), len)?);
    cache.push((key, std::sync::Arc::downgrade(&mapping)));
    Ok(mapping)
}

#[cold]
#[inline(never)]
#[track_caller]
fn bad_offset(offset: u64) -> ! {
    panic!("device offset {offset:#x} out of range or misaligned")
}

impl Mmio {
    /// Maps `len` bytes of the device file at `path` and keeps the file open. The file must be
    /// trustworthy ([`sys::open_trusted`]): not reached through a symbolic link, this user's or
    /// root's, writable by nobody else (a root-owned character device excepted).
    pub fn open(path: &Path, len: u64) -> std::io::Result<Mmio> {
        let file = sys::open_trusted(path, true)?;
        let have = sys::fd_len(file.as_raw_fd())? as u64;
        if have < len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is {have} bytes, smaller than the device's {len}", path.display()),
            ));
        }
        Mmio::new(shared_mapping(&file, len as usize)?, Some(file))
    }

    fn new(mapping: std::sync::Arc<Mapping>, file: Option<std::fs::File>) -> std::io::Result<Mmio> {
        // `at` relies on this: `len - size` never wraps for any register it hands out.
        if mapping.len() < std::mem::size_of::<Flag>() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a device mapping of {} bytes is too small to hold a register", mapping.len()),
            ));
        }
        let base = std::ptr::NonNull::new(mapping.as_ptr()).expect("a mapping is never at address 0");
        Ok(Mmio { base, len: mapping.len() as u64, _mapping: mapping, file })
    }

    /// Maps `len` bytes of an open descriptor (its owner keeps it open).
    pub fn from_fd(fd: std::os::fd::RawFd, len: u64) -> std::io::Result<Mmio> {
        Mmio::new(std::sync::Arc::new(Mapping::map_fd(fd, len as usize)?), None)
    }

    /// Another handle on the same mapping, without the open file (and so without its locks):
    /// for code that keeps the file elsewhere and wants register access without going
    /// through it.
    pub fn share(&self) -> Mmio {
        Mmio { base: self.base, len: self.len, _mapping: self._mapping.clone(), file: None }
    }

    /// The open device file, if this mapping keeps one.
    pub fn file(&self) -> Option<&std::fs::File> {
        self.file.as_ref()
    }

    /// Bytes mapped.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Never true for a mapped device.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn at<T>(&self, offset: u64, align: u64) -> *const T {
        // Every register type fits in a Flag, the least a mapping holds (see `new`).
        const { assert!(std::mem::size_of::<T>() <= std::mem::size_of::<Flag>()) };
        debug_assert!(align.is_power_of_two());
        let size = std::mem::size_of::<T>() as u64;
        // One test for both: an offset past `len - size` (which cannot wrap: `new` makes
        // sure a mapping holds the largest register) or with low bits set is refused.
        if offset > self.len - size || offset & (align - 1) != 0 {
            bad_offset(offset);
        }
        // The address stays inside the mapping (checked above), which `self._mapping` keeps
        // mapped for as long as `self` lives.
        self.base.as_ptr().wrapping_add(offset as usize) as *const T
    }

    /// The 64-bit register at `offset`.
    #[inline]
    pub fn word(&self, offset: u64) -> &AtomicU64 {
        // SAFETY: `at` checked bounds and alignment; the mapping outlives `&self`; an atomic is
        // valid for any bits.
        unsafe { &*self.at::<AtomicU64>(offset, 8) }
    }

    /// The `n` 64-bit words from `offset` (an arrival slot, a mask), checked once.
    #[inline]
    pub fn words(&self, offset: u64, n: usize) -> &[AtomicU64] {
        assert!(
            offset.is_multiple_of(8)
                && (n as u64).checked_mul(8).and_then(|b| offset.checked_add(b)).is_some_and(|end| end <= self.len),
            "device words {offset:#x} + {n} out of range or misaligned"
        );
        // SAFETY: the `n` words lie inside the mapping (whose length fits an isize) and are
        // aligned (checked above); the mapping outlives `&self`; atomics are valid for any bits.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().wrapping_add(offset as usize) as *const AtomicU64, n) }
    }

    /// The 32-bit register at `offset`.
    #[inline]
    pub fn word32(&self, offset: u64) -> &AtomicU32 {
        // SAFETY: as for `word`.
        unsafe { &*self.at::<AtomicU32>(offset, 4) }
    }

    /// Reads a register of `bytes` (4 or 8).
    #[inline]
    pub fn load(&self, offset: u64, bytes: u64) -> u64 {
        if bytes == 4 {
            self.word32(offset).load(Ordering::Acquire) as u64
        } else {
            self.word(offset).load(Ordering::Acquire)
        }
    }

    /// Writes a register of `bytes` (4 or 8).
    #[inline]
    pub fn store(&self, offset: u64, bytes: u64, value: u64) {
        if bytes == 4 {
            self.word32(offset).store(value as u32, Ordering::Release)
        } else {
            self.word(offset).store(value, Ordering::Release)
        }
    }

    /// Reads register `r` of group `g` of a device laid out by `map`.
    #[inline]
    pub fn group_load(&self, map: &barrier_hw::DeviceMap, g: usize, r: &barrier_hw::Register) -> u64 {
        self.load(map.group_reg(g, r), r.bytes)
    }

    /// Writes register `r` of group `g`.
    #[inline]
    pub fn group_store(&self, map: &barrier_hw::DeviceMap, g: usize, r: &barrier_hw::Register, value: u64) {
        self.store(map.group_reg(g, r), r.bytes, value)
    }

    /// The `index`-th 64-bit word of register (or table) `r` of group `g`.
    #[inline]
    pub fn group_word(
        &self,
        map: &barrier_hw::DeviceMap,
        g: usize,
        r: &barrier_hw::Register,
        index: usize,
    ) -> &AtomicU64 {
        self.word(map.group_reg(g, r) + 8 * index as u64)
    }

    /// A flag-shaped line (epoch word and waiter count) at `offset`: release flags in DMA
    /// memory, the doorbell.
    #[inline]
    pub fn flag(&self, offset: u64) -> &Flag {
        // SAFETY: bounds and line alignment checked by `at`; a Flag is atomics only.
        unsafe { &*self.at::<Flag>(offset, barrier_hw::FLAG_BYTES) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch file of `len` bytes, mapped (the file is removed at once; the mapping keeps
    /// it). Each call has a file of its own: tests run in parallel.
    fn mapped(len: u64) -> std::io::Result<Mmio> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("barrier-mmio-test-{}-{n}", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        let _ = std::fs::remove_file(&path);
        file.set_len(len)?;
        Mmio::from_fd(file.as_raw_fd(), len)
    }

    #[test]
    fn a_mapping_too_small_for_a_register_is_refused() {
        let e = mapped(std::mem::size_of::<Flag>() as u64 - 8).unwrap_err();
        assert!(e.to_string().contains("too small to hold a register"), "{e}");
        assert!(mapped(std::mem::size_of::<Flag>() as u64).is_ok());
    }

    #[test]
    fn registers_up_to_the_last_byte_are_reached() {
        let m = mapped(4096).unwrap();
        m.word(4088).store(7, Ordering::Relaxed);
        assert_eq!(m.word(4088).load(Ordering::Relaxed), 7);
        m.word32(4092).store(9, Ordering::Relaxed);
        assert_eq!(m.word32(4092).load(Ordering::Relaxed), 9);
        let last_line = 4096 - std::mem::size_of::<Flag>() as u64;
        assert_eq!(m.flag(last_line).load(), 0);
    }

    #[test]
    #[should_panic(expected = "out of range or misaligned")]
    fn a_word_past_the_end_is_refused() {
        mapped(4096).unwrap().word(4096);
    }

    #[test]
    #[should_panic(expected = "out of range or misaligned")]
    fn a_flag_past_the_end_is_refused() {
        mapped(4096).unwrap().flag(4096);
    }

    #[test]
    #[should_panic(expected = "out of range or misaligned")]
    fn an_offset_near_two_to_the_64_is_refused() {
        mapped(4096).unwrap().word(u64::MAX - 7);
    }

    #[test]
    #[should_panic(expected = "out of range or misaligned")]
    fn a_misaligned_word_is_refused() {
        mapped(4096).unwrap().word(12);
    }

    #[test]
    #[should_panic(expected = "out of range or misaligned")]
    fn a_misaligned_flag_is_refused() {
        mapped(4096).unwrap().flag(barrier_hw::FLAG_BYTES / 2);
    }
}
