//! Inline devices: the device's work runs in the context of the doorbell ring that triggers it,
//! the way an emulator traps an MMIO write, instead of on an engine thread of its own.
//!
//! On a machine with few cores, an engine thread competes with the ranks for a core, so a
//! threaded emulated barrier mostly measures scheduler hops. An inline device has no thread:
//! its DEVICE_MODE register says so, and the driver, after every doorbell ring, calls the hook
//! [`install`] puts in place (`barrier::mmio::install_inline_device`). The hook runs one pass of
//! the **same engine code** as the threaded device (collecting arrivals, releasing, configuring
//! groups), on the ringing process's own mapping of the device file, and returns.
//!
//! Several ranks (threads or processes) may ring at once, so the engine's state must be the
//! device's: an inline engine re-reads each group's dynamic state (ARRIVED_MASK,
//! COMPLETED_EPOCH, STATUS) from the registers at every pass, and takes over ("adopts") a group
//! another process configured, keyed by the group's owner id. Passes are serialized by the
//! device's ENGINE_LOCK. A ring that finds the lock taken leaves its work to the holder, who
//! looks at the doorbell again after releasing the lock (both sides separate their two accesses
//! with a sequentially consistent fence, so one of them always sees the other).
//!
//! No ring is lost: RINGS_SERVED records up to which doorbell value every ring has been served.
//! A pass serves only the ringer's group when the ringer's own ticket is the only ring since
//! then; otherwise (another ring is pending, or the doorbell moved) it scans every group. A pass
//! that panics releases the lock; a rank killed in the middle of a pass leaves it held, and the
//! device then stops answering (its heartbeat freezes): communicators fall back to software
//! after the driver's silence limit, as for any device that stops.
//!
//! Faults and latency are modelled by the threaded engine only (`Emulator::start`): inline
//! devices serve the benchmark, which measures the host side of the protocol.

use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use barrier_hw::{control, global, status, DeviceMap};

use crate::{doorbell, Config, Dev, Engine, Group};

/// Makes this process able to drive inline devices (idempotent). `barrier bench`'s ranks call
/// it; so does any program that wants to use an inline device.
pub fn install() {
    barrier::mmio::install_inline_device(ring);
}

/// This process's engine for each inline device it has rung, by device instance.
static ENGINES: Mutex<Vec<(u64, Engine)>> = Mutex::new(Vec::new());

/// The hook: one pass of the device `instance` at `path`, for `group` (rung with `ticket`).
pub(crate) fn ring(path: &Path, instance: u64, map: &'static DeviceMap, group: Option<usize>, ticket: u64) {
    let mut engines = ENGINES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let index = match engines.iter().position(|(i, _)| *i == instance) {
        Some(i) => i,
        None => match barrier::mmio::Mmio::open(path, map.size) {
            Ok(mmio) if mmio.word(global::INSTANCE.offset).load(Ordering::Acquire) == instance => {
                // Engines of devices nobody serves any more (their emulator is gone: its file
                // lock with it) are dropped as new ones come, with their mappings.
                engines.retain(|(_, e)| {
                    e.dev.file().is_some_and(|f| barrier::sys::flock_held(std::os::fd::AsRawFd::as_raw_fd(f)))
                });
                let engine = Engine::new(Dev::Mapped(mmio), Config::new(map), Arc::new(AtomicBool::new(false)));
                engines.push((instance, engine));
                engines.len() - 1
            }
            // The device is gone or replaced: the driver's watchdog finds out and falls back.
            _ => return,
        },
    };
    engines[index].1.inline_pass(group, ticket);
}

/// Releases the engine lock when a pass ends, also by a panic.
struct Unlock<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

impl Engine {
    /// One pass of an inline device's work, under the device's engine lock.
    fn inline_pass(&mut self, mut group: Option<usize>, ticket: u64) {
        // Between the caller's doorbell bump and the lock attempt (see the module docs).
        fence(Ordering::SeqCst);
        loop {
            let seen = doorbell(&self.dev).load();
            if self.lock().compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
                return;
            }
            let lock = self.dev.word(global::ENGINE_LOCK.offset) as *const std::sync::atomic::AtomicU64;
            // SAFETY: the word lives in the device mapping, which `self.dev` keeps mapped for
            // as long as this engine exists, longer than this pass.
            let _unlock = Unlock(unsafe { &*lock });
            let start = Instant::now();
            let served = self.dev.word(global::RINGS_SERVED.offset);
            // Only the ringer's group if its ring is the only one not served yet.
            let mut target = group.take().filter(|_| seen == ticket && served.load(Ordering::Acquire) + 1 == ticket);
            let config = self.dev.word(global::CONFIG_SEQ.offset).load(Ordering::Acquire);
            if config != self.dev.word(global::CONFIG_SEEN.offset).load(Ordering::Acquire) {
                self.refresh_shared();
                self.dev.word(global::CONFIG_SEEN.offset).store(config, Ordering::Release);
                target = None;
            }
            let worked = self.serve_shared(target);
            self.dev.word(global::RINGS_SERVED.offset).store(seen, Ordering::Release);
            if worked {
                self.count(&global::ENGINE_BUSY_NS, start.elapsed().as_nanos() as u64);
            }
            drop(_unlock);
            fence(Ordering::SeqCst);
            if doorbell(&self.dev).load() == seen {
                return;
            }
        }
    }

    fn lock(&self) -> &std::sync::atomic::AtomicU64 {
        self.dev.word(global::ENGINE_LOCK.offset)
    }

    /// Applies configuration changes: resets, first configuration of an enabled group (by
    /// whichever process sees it first), forgetting freed groups.
    fn refresh_shared(&mut self) {
        let mut in_use = 0;
        for g in 0..self.map.max_groups {
            let owner = self.reg(g, &self.map.group.owner);
            in_use += u64::from(owner != 0);
            let ctl = self.reg(g, &self.map.group.control);
            if ctl & control::RESET != 0 {
                self.reset(g);
            }
            let st = self.reg(g, &self.map.group.status);
            if owner != 0 && ctl & control::ENABLE != 0 {
                if st & (status::READY | status::ERROR) == 0 {
                    self.configure(g);
                }
            } else if self.groups[g].owner != 0 || owner == 0 {
                self.groups[g] = Group::default();
                if owner == 0 && st != 0 {
                    self.set_reg(g, &self.map.group.status, 0);
                }
            }
        }
        self.dev.word(global::GROUPS_IN_USE.offset).store(in_use, Ordering::Relaxed);
    }

    /// Collects arrivals and releases, for `group` or every group that is running.
    fn serve_shared(&mut self, group: Option<usize>) -> bool {
        // A scan of every group moves the heartbeat (the rings of waiting ranks' watchdogs are
        // such scans, so liveness and the two-strike checks see it move); a pass for one
        // arrival does not write the shared line.
        if group.is_none() {
            self.dev.word(global::HEARTBEAT.offset).fetch_add(1, Ordering::Release);
        }
        let groups: Vec<usize> = match group {
            Some(g) => vec![g],
            None => (0..self.map.max_groups).filter(|&g| self.reg(g, &self.map.group.owner) != 0).collect(),
        };
        let mut worked = false;
        for g in groups {
            if self.load_shared(g) {
                worked |= self.serve_group(g);
            }
        }
        worked
    }

    /// Brings this engine's view of group `g` up to date from the registers; false if the group
    /// is not running.
    fn load_shared(&mut self, g: usize) -> bool {
        let m = self.map;
        let owner = self.reg(g, &m.group.owner);
        let ctl = self.reg(g, &m.group.control);
        let st = self.reg(g, &m.group.status);
        let running = owner != 0
            && ctl & (control::ENABLE | control::ARM) == control::ENABLE | control::ARM
            && st & status::READY != 0
            && st & status::ERROR == 0;
        if !running {
            return false;
        }
        if self.groups[g].owner != owner || !self.groups[g].enabled {
            // Configured by another process: adopt it (translations are this process's own).
            if !self.adopt(g, owner) {
                return false;
            }
        }
        let words = barrier_hw::mask_words(m.max_members);
        let group = &mut self.groups[g];
        for (w, bits) in group.arrived.iter_mut().enumerate().take(words) {
            *bits = self.dev.group_word(m, g, &m.group.arrived_mask, w).load(Ordering::Acquire);
        }
        group.expected = self.dev.group_load(m, g, &m.group.completed_epoch) + 1;
        true
    }

    /// Takes over a group that another process configured, without touching its registers.
    fn adopt(&mut self, g: usize, owner: u64) -> bool {
        let m = self.map;
        let words = barrier_hw::mask_words(m.max_members);
        let mask: Vec<u64> =
            (0..words).map(|w| self.dev.group_word(m, g, &m.group.member_mask, w).load(Ordering::Acquire)).collect();
        let members: Vec<usize> = (0..m.max_members).filter(|i| mask[i / 64] >> (i % 64) & 1 == 1).collect();
        let mut release = Vec::with_capacity(members.len());
        for &member in &members {
            let iova = self.dev.group_word(m, g, &m.group.release_table, member).load(Ordering::Acquire);
            match self.translate(iova) {
                Some(t) => release.push(t),
                // A member detaching right now: not a fault of the device (a release that
                // cannot be delivered is reported by `release`'s own check).
                None => return false,
            }
        }
        // The expected epoch is read from the registers at every pass (`load_shared`).
        self.groups[g] = Group::running(owner, mask, members, release, 0);
        true
    }
}
