//! Inline devices: the device's work runs in the context of the store that triggers it, the
//! way an emulator traps an MMIO write, instead of on an engine thread of its own.
//!
//! On a machine with few cores, an engine thread competes with the ranks for a core, so a
//! threaded emulated barrier mostly measures scheduler hops. An inline device has no thread:
//! its DEVICE_MODE register says so, and the driver calls the hook [`install`] puts in place
//! (`barrier::mmio::install_inline_device`) where a device would notice the driver's stores.
//! The hook runs the **same engine code** as the threaded device, on the calling process's own
//! mapping of the device file:
//!
//! * **A trapped arrival** (`InlineWork::Arrival`, after a member wrote its arrival message):
//!   the device takes that one message with the engine thread's code (`take_arrival`: check
//!   the message, mark it TAKEN, set the member's ARRIVED_MASK bit; the mask's line, which
//!   the previous arrival's rank holds, is asked for first, so it travels while the message is
//!   checked), and the arrival that
//!   completes the epoch releases the group. Every message is followed by exactly one trap,
//!   its writer's, and nothing else takes messages from an inline device's slots, so the trap
//!   marks it with a plain store (the engine thread, which races with nobody either, swaps).
//!   No lock and no doorbell: traps in several ranks run at once, each step one atomic
//!   operation on a register, and exactly one arrival fills the mask (or, for groups whose
//!   members span several mask words, brings ARRIVAL_COUNT to the member count). The release
//!   clears the arrival state before it writes any release flag, and a member's next arrival
//!   follows its release, so no arrival of the next epoch is lost. A barrier therefore touches
//!   the lines a real device's host side would (the member's slot, its release flag) plus the
//!   group's ARRIVED_MASK and, from the completing rank, COMPLETED_EPOCH.
//! * **A doorbell ring** (`InlineWork::Ring`: configuration changes, a waiting rank's
//!   watchdog): a full pass under the device's ENGINE_LOCK: apply configuration (resets, first
//!   configuration of an enabled group by whichever process sees it first, forgetting freed
//!   groups), move the heartbeat, write held-back counts. A ring that finds
//!   the lock taken leaves its work to the holder, who looks at the doorbell again after
//!   releasing the lock (both sides separate their two accesses with a sequentially
//!   consistent fence, so one of them always sees the other).
//!
//! Any rank may run the engine, so it keeps no barrier state of its own: ARRIVED_MASK,
//! ARRIVAL_COUNT and COMPLETED_EPOCH are read from the registers, and a group another process
//! configured is taken over ("adopted", keyed by the group's owner id, with this process's own
//! address translations). A pass that panics releases the lock; a rank killed in the middle of
//! one leaves it held, and the device then stops answering rings (its heartbeat freezes):
//! communicators fall back to software after the driver's silence limit, as for any device
//! that stops.
//!
//! ENGINE_BUSY_NS (the device's work, which `barrier bench` reports per barrier) counts, for
//! traps, the trap that completes an epoch (the device's work from the last arrival to the
//! last release store), sampled: one trap in [`TIMED_TRAP_EVERY`] is timed, and counted that
//! many times if it completed, because reading the clock twice per trap would cost about as
//! much as the trap. The counters (ARRIVALS, RELEASES, BARRIERS, ENGINE_BUSY_NS) share one
//! line; an inline engine adds up in its thread and writes them every few hundred barriers,
//! at every full pass, and when a driver is done with the device (`InlineWork::Flush`), so a
//! rank killed mid-run takes its last counts with it.
//!
//! Faults and latency are modelled by the threaded engine only (`Emulator::start`): inline
//! devices serve the benchmark, which measures the host side of the protocol.

use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use barrier::mmio::InlineWork;
use barrier_hw::{control, global, status, DeviceMap};

use crate::config::{Claim, Config, Taken};
use crate::dev::{doorbell, Dev};
use crate::offload::{Engine, Group};

/// One trap in this many (at random) is timed for ENGINE_BUSY_NS (and counted this many
/// times). A power of two.
pub const TIMED_TRAP_EVERY: u64 = 64;
const _: () = assert!(TIMED_TRAP_EVERY.is_power_of_two());

/// Steps a trap's sampling state (a linear congruential generator), and says whether to time
/// this trap: one in [`TIMED_TRAP_EVERY`], at random, because a fixed period could fall in
/// step with a rank's plan (a tree leader traps twice per barrier) and time only one kind.
#[inline]
fn timed(state: &mut u64) -> bool {
    *state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
    *state >> (64 - TIMED_TRAP_EVERY.trailing_zeros()) == 0
}

/// Asks the cache for the line of `word` now, ahead of an atomic operation on it (x86-64
/// PREFETCHT0; nothing elsewhere): a hint that never faults and changes no memory. (PREFETCHW,
/// which asks for the line in a writable state, measured the same here and needs a CPUID
/// check.)
#[inline(always)]
fn prefetch(word: &std::sync::atomic::AtomicU64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads no memory the program can see, writes none and never faults,
    // whatever the address (this one is a register of the live mapping).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(word.as_ptr() as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = word;
}

/// Makes this process able to drive inline devices (idempotent). `barrier bench`'s ranks call
/// it; so does any program that wants to use an inline device.
pub fn install() {
    barrier::mmio::install_inline_device(ring);
}

thread_local! {
    /// This thread's engine for each inline device it has used, by device instance, with the
    /// state that picks the traps to time (see [`timed`]). Per thread, not per process: an
    /// engine keeps no barrier state of its own (that is in the registers), so thread ranks
    /// need not share one, and a trap takes no lock. An engine writes its held-back counts
    /// when its thread ends.
    static ENGINES: RefCell<Vec<(u64, Engine, u64)>> = const { RefCell::new(Vec::new()) };
}

/// The work `work` of the device `instance` (of kind `map`) at `path`, done by this thread: the
/// hook [`install`] puts in place, and what `barrier-emu-inline`'s entry point calls.
pub fn work(path: &Path, instance: u64, map: &'static DeviceMap, work: InlineWork) {
    ring(path, instance, map, work)
}

/// The hook: the work `work` of the device `instance` at `path`.
pub(crate) fn ring(path: &Path, instance: u64, map: &'static DeviceMap, work: InlineWork) {
    let served = ENGINES.try_with(|engines| {
        // A full pass never calls the hook again, so the borrow is never nested.
        if let Ok(mut engines) = engines.try_borrow_mut() {
            serve(&mut engines, path, instance, map, work);
        }
    });
    if served.is_err() && work != InlineWork::Flush {
        // This thread's engines are gone (a communicator used from another thread-local's
        // destructor): the work is done by an engine made for it, which flushes as it goes.
        serve(&mut Vec::new(), path, instance, map, work);
    }
}

fn serve(engines: &mut Vec<(u64, Engine, u64)>, path: &Path, instance: u64, map: &'static DeviceMap, work: InlineWork) {
    let index = match engines.iter().position(|(i, _, _)| *i == instance) {
        Some(i) => i,
        // Nothing held back in an engine this thread never made.
        None if work == InlineWork::Flush => return,
        None => match barrier::mmio::Mmio::open(path, map.size) {
            Ok(mmio) if mmio.word(global::INSTANCE.offset).load(Ordering::Acquire) == instance => {
                // Engines of devices nobody serves any more (their emulator is gone: its file
                // lock with it) are dropped as new ones come, with their mappings.
                engines.retain(|(_, e, _)| {
                    e.dev.file().is_some_and(|f| barrier::sys::flock_held(std::os::fd::AsRawFd::as_raw_fd(f)))
                });
                let engine =
                    Engine::new(Dev::mapped(mmio), Config::new(map).inline(), Arc::new(AtomicBool::new(false)));
                engines.push((instance, engine, 0));
                engines.len() - 1
            }
            // The device is gone or replaced: the driver's watchdog finds out and falls back.
            _ => return,
        },
    };
    let (_, engine, sampling) = &mut engines[index];
    match work {
        InlineWork::Arrival { group, member } => {
            if timed(sampling) {
                let start = Instant::now();
                if engine.trap_arrival(group, member) == Taken::Completed {
                    engine.tally(0, 0, 0, start.elapsed().as_nanos() as u64 * TIMED_TRAP_EVERY);
                }
            } else {
                engine.trap_arrival(group, member);
            }
        }
        InlineWork::Ring { ticket } => engine.inline_pass(ticket),
        InlineWork::Flush => engine.flush_tally(),
    }
}

/// Releases the engine lock when a pass ends, also by a panic.
struct Unlock<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

impl Engine {
    /// The trapped arrival store of `member` in group `g`: takes that message (see the module
    /// docs). A group this process does not know as running is looked at again after a full
    /// pass (its configuration may be pending).
    fn trap_arrival(&mut self, g: usize, member: usize) -> Taken {
        if g >= self.map.max_groups || member >= self.map.max_members {
            return Taken::Nothing;
        }
        // The arrival's one atomic add needs the mask line, which the previous arrival (in
        // another rank) holds: ask for it now, so that it travels while this trap checks the
        // message (2 ranks: 148 -> 133 ns per barrier, the same run).
        prefetch(self.dev.word(self.regs[g].arrived_mask + 8 * (member / 64) as u64));
        // A group this engine knows is taken as it is if its OWNER is still the one it was
        // adopted under (a line written only when the group is claimed or freed; every new
        // claim has a new random owner id, and a claimed group's configuration never changes).
        // The other registers are checked before a release: reading them first would fetch
        // lines the release then writes.
        let known =
            self.groups[g].enabled && self.dev.word(self.regs[g].owner).load(Ordering::Acquire) == self.groups[g].owner;
        if !known && !self.load_shared(g) {
            let ticket = doorbell(&self.dev).load();
            self.inline_pass(ticket);
            if !self.load_shared(g) {
                return Taken::Nothing;
            }
        }
        self.take_arrival(g, member, Claim::Own)
    }

    /// A full pass (a doorbell ring with value `ticket`), under the device's engine lock.
    fn inline_pass(&mut self, ticket: u64) {
        // Between the caller's doorbell bump and the lock attempt (see the module docs).
        fence(Ordering::SeqCst);
        let mut seen = ticket;
        loop {
            if self.lock().compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
                return;
            }
            let lock = self.dev.word(global::ENGINE_LOCK.offset) as *const std::sync::atomic::AtomicU64;
            // SAFETY: the word lives in the device mapping, which `self.dev` keeps mapped for
            // as long as this engine exists, longer than this pass.
            let _unlock = Unlock(unsafe { &*lock });
            let config = self.dev.word(global::CONFIG_SEQ.offset).load(Ordering::Acquire);
            if config != self.dev.word(global::CONFIG_SEEN.offset).load(Ordering::Acquire) {
                self.refresh_shared();
                self.dev.word(global::CONFIG_SEEN.offset).store(config, Ordering::Release);
            }
            // The rings of waiting ranks' watchdogs are such passes, so liveness and the
            // two-strike checks see the heartbeat move. (Arrivals are not scanned for: each
            // was taken by its own trap.)
            // (Its time is not device time: ENGINE_BUSY_NS is the barriers' work.)
            self.dev.word(global::HEARTBEAT.offset).fetch_add(1, Ordering::Release);
            self.flush_tally();
            drop(_unlock);
            fence(Ordering::SeqCst);
            let now = doorbell(&self.dev).load();
            if now == seen {
                return;
            }
            seen = now;
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

    /// Brings this engine's view of group `g` up to date from the registers; false if the group
    /// is not running.
    fn load_shared(&mut self, g: usize) -> bool {
        let m = self.map;
        let owner = self.reg(g, &m.group.owner);
        if owner == 0 || !self.serving(g) {
            return false;
        }
        if self.groups[g].owner != owner || !self.groups[g].enabled {
            // Configured by another process: adopt it (translations are this process's own).
            if !self.adopt(g, owner) {
                return false;
            }
        }
        true
    }

    /// Takes over a group that another process configured, without touching its registers.
    fn adopt(&mut self, g: usize, owner: u64) -> bool {
        let (mask, members) = self.member_mask(g);
        // An entry that does not translate is a member detaching right now: not a fault of the
        // device (a release that cannot be delivered is reported by `release`'s own check).
        let Some(release) = self.release_targets(g, &members) else { return false };
        self.groups[g] = Group::running(owner, mask, members, release);
        true
    }
}
