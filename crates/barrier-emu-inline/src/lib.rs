//! The inline emulator as a loadable library (`libbarrier_emu_inline.so`).
//!
//! A device emulated *inline* has no engine thread: the rank whose store needs the device runs
//! the device's work itself (see `barrier_emu::inline`). `barrier bench`'s ranks link the
//! emulator and install that work as a hook; a user's program under `barrier run --emulate`
//! links only `barrier`, so the launcher names this library in `BARRIER_EMU_INLINE_LIB` and
//! `barrier::mmio::inline_device` loads it on the first attach to an inline device. The library
//! carries its own copy of the emulator (and of `barrier`'s register access): the two sides
//! share nothing but the device file, which each maps, exactly as a rank and a device would.
//!
//! The interface is C: [`barrier_emu_inline_abi`] (the program refuses a library whose value
//! differs from its own `barrier::mmio::INLINE_ABI`) and [`barrier_emu_inline_work`] (one piece
//! of device work, `barrier::mmio::InlineEntry`). A panic in the device's work is caught here
//! and reported as -2; it does not unwind into the caller.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use barrier::mmio::{InlineWork, INLINE_ABI};
use barrier_hw::DeviceMap;

/// The file name a cargo build gives the library.
pub const LIBRARY_FILE: &str = "libbarrier_emu_inline.so";

/// The interface version this library was built with (see `barrier::mmio::INLINE_ABI`).
#[no_mangle]
pub extern "C" fn barrier_emu_inline_abi() -> u64 {
    INLINE_ABI
}

/// One piece of device work (`barrier::mmio::InlineEntry`): 0 when done, -1 for a device kind
/// or work this library does not know, -2 if the work panicked.
///
/// # Safety
/// `path` and `kind` point to `path_len` and `kind_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn barrier_emu_inline_work(
    path: *const u8,
    path_len: usize,
    instance: u64,
    kind: *const u8,
    kind_len: usize,
    work: u32,
    a: u64,
    b: u64,
) -> i32 {
    // SAFETY: the caller passes `path_len` readable bytes at `path` (this function's contract).
    let path = Path::new(std::ffi::OsStr::from_bytes(unsafe { std::slice::from_raw_parts(path, path_len) }));
    // SAFETY: as above, for `kind`.
    let kind = unsafe { std::slice::from_raw_parts(kind, kind_len) };
    let (Some(map), Some(work)) = (device_map(kind), InlineWork::decode(work, a, b)) else {
        return -1;
    };
    match std::panic::catch_unwind(|| barrier_emu::inline::work(path, instance, map, work)) {
        Ok(()) => 0,
        Err(_) => -2,
    }
}

/// This library's register map of the device kind `kind`.
fn device_map(kind: &[u8]) -> Option<&'static DeviceMap> {
    [&barrier_hw::SWITCH, &barrier_hw::GBA].into_iter().find(|map| map.kind.as_bytes() == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_kinds_and_work_are_refused_without_touching_the_path() {
        let path = b"/nonexistent";
        let kind = b"nonesuch";
        // SAFETY: both slices are live for the call.
        let status =
            unsafe { barrier_emu_inline_work(path.as_ptr(), path.len(), 0, kind.as_ptr(), kind.len(), 1, 0, 0) };
        assert_eq!(status, -1);
        let kind = b"gba";
        // SAFETY: as above.
        let status =
            unsafe { barrier_emu_inline_work(path.as_ptr(), path.len(), 0, kind.as_ptr(), kind.len(), 9, 0, 0) };
        assert_eq!(status, -1);
        assert_eq!(barrier_emu_inline_abi(), INLINE_ABI);
    }
}
