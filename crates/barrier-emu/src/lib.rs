//! Software-emulated barrier devices that serve the real register maps of `barrier-hw`.
//!
//! An [`Emulator`] is a real agent: a thread that owns a [`DeviceFile`] and runs the device's
//! protocol against it, independently of the ranks. Drivers map the same file and speak to it
//! only through registers, arrival messages and the DMA memory the device writes releases into.
//!
//! # The engine
//!
//! * **Groups**: a driver claims a free group by compare-and-swap of its id into OWNER, writes
//!   MEMBER_COUNT, MEMBER_MASK and EPOCH_BASE, and sets CONTROL = ENABLE | ARM. On ENABLE the
//!   engine checks the configuration and translates every member's RELEASE_TABLE entry through
//!   the IOMMU; it then reports STATUS.READY, or STATUS.ERROR with ERROR_CODE. RESET clears the
//!   barrier state (the engine clears the bit when done). Clearing OWNER frees the group.
//! * **IOMMU**: a table of `[iova, len, host_offset, state]` entries in device memory. Members map
//!   their release-flag line (state VALID with their pid) and unmap it on detach; the engine
//!   writes releases only through VALID entries and re-checks before every write that the
//!   entry is still the one it translated through (same state word and host offset).
//! * **Arrivals**: each member's arrival remote store lands in its own slot (one writer per
//!   line, so no arrival can overwrite another); the engine decodes the arrival word with the
//!   map's encoding, expands the 32-bit sequence to a 64-bit epoch around the epoch it expects,
//!   and sets the member's bit in ARRIVED_MASK.
//! * **Release**: when ARRIVED_MASK equals MEMBER_MASK the engine records COMPLETED_EPOCH and
//!   stores the 64-bit epoch into every member's release flag (the remote-store broadcast),
//!   waking parked waiters when INTERRUPT_EN is set (the emulated completion interrupt).
//! * **Doorbell**: drivers bump DOORBELL after each arrival or configuration change; an idle
//!   engine sleeps on it (futex) instead of burning a core.
//! * **Cleanup**: every second the engine frees groups and IOMMU entries that no live process
//!   uses, judged by the locks drivers hold on the device file (not by pids), so a job killed
//!   with `kill -9` does not leak groups in a shared daemon and a live job never loses one.
//! * **Liveness**: the emulator holds the device file's `flock` while it serves it; drivers
//!   refuse a file nobody serves and fall back when the lock goes away mid-job.
//!
//! An inline device ([`Config::inline`], see [`inline`]) runs the same engine code in the
//! ranks, in the context of the store that needs it (a trapped arrival), instead of on a thread.
//!
//! The [`Latency`] model delays releases; the [`Faults`] model drops or duplicates messages,
//! sticks the ERROR bit, makes the device vanish (every register reads all ones) or slows the
//! engine. Counters live in the global window (`barrier info` and tests read them).

pub mod a64fx;
mod config;
mod dev;
mod device;
pub mod inline;
mod offload;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use barrier_hw::global;

pub use config::{Config, Counters, Faults, Latency};
pub use device::DeviceFile;

use dev::{bump_doorbell, doorbell, Dev};
use offload::Engine;

/// A running emulated device. Dropping it stops the engine and removes the device.
#[derive(Debug)]
pub struct Emulator {
    device: Arc<DeviceFile>,
    stop: Arc<AtomicBool>,
    engine: Option<JoinHandle<()>>,
}

impl Emulator {
    /// Starts a device private to this process tree (see [`DeviceFile::create_private`]).
    pub fn start(config: Config) -> std::io::Result<Emulator> {
        let device = Arc::new(DeviceFile::create_private(config.map)?);
        Ok(Self::run(device, config))
    }

    /// Starts a device at a named path (the `barrier emu` daemon).
    pub fn start_at(config: Config, path: &std::path::Path) -> std::io::Result<Emulator> {
        let device = Arc::new(DeviceFile::create_at(config.map, path)?);
        Ok(Self::run(device, config))
    }

    fn run(device: Arc<DeviceFile>, config: Config) -> Emulator {
        let stop = Arc::new(AtomicBool::new(false));
        if config.inline {
            // No engine: whoever rings does the work (this process too, for `quiesce`).
            inline::install();
            device.word(global::DEVICE_MODE.offset).store(global::DEVICE_MODE_INLINE, Ordering::Release);
            return Emulator { device, stop, engine: None };
        }
        let engine = {
            let device = device.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("emu-{}", config.map.kind))
                .spawn(move || Engine::new(Dev::own(device), config, stop).run())
                .expect("spawning the emulator thread")
        };
        Emulator { device, stop, engine: Some(engine) }
    }

    /// The path drivers open.
    pub fn path(&self) -> &std::path::Path {
        self.device.path()
    }

    /// The device file (tests inspect registers).
    pub fn device(&self) -> &DeviceFile {
        &self.device
    }

    /// The counters now.
    pub fn counters(&self) -> Counters {
        Counters::read(&self.device)
    }

    /// Waits (up to `limit`) until the engine has processed every configuration change made so
    /// far, so that counters such as `groups_in_use` are up to date.
    pub fn quiesce(&self, limit: Duration) -> bool {
        let target = self.device.word(global::CONFIG_SEQ.offset).load(Ordering::Acquire);
        let start = Instant::now();
        let inline = self.engine.is_none();
        loop {
            bump_doorbell(&self.device);
            if inline {
                let instance = self.device.word(global::INSTANCE.offset).load(Ordering::Relaxed);
                let ticket = doorbell(&self.device).load();
                inline::ring(
                    self.device.path(),
                    instance,
                    self.device.map(),
                    barrier::mmio::InlineWork::Ring { ticket },
                );
            }
            if self.device.word(global::CONFIG_SEEN.offset).load(Ordering::Acquire) >= target {
                return true;
            }
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        bump_doorbell(&self.device);
        if let Some(t) = self.engine.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Claim, Taken};
    use barrier_hw::{control, error_code, status, FLAG_BYTES, IOMMU_FREE, IOMMU_IOVA, IOMMU_STATE, IOMMU_VALID};

    #[test]
    fn a_crafted_iommu_entry_near_the_top_of_the_address_space_does_not_translate() {
        let map = &barrier_hw::SWITCH;
        let dev = Arc::new(DeviceFile::create_private(map).unwrap());
        let engine = Engine::new(Dev::own(dev.clone()), Config::new(map), Arc::new(AtomicBool::new(false)));
        let e = map.iommu_entry(0);
        let start = u64::MAX - 64;
        // A window that wraps past 2^64 onto a DMA offset: unchecked, `iova + FLAG_BYTES`
        // and `start + len` both wrap and the entry passes.
        dev.word(e + IOMMU_IOVA).store(start, Ordering::Relaxed);
        dev.word(e + barrier_hw::IOMMU_LEN).store(1 << 20, Ordering::Relaxed);
        dev.word(e + barrier_hw::IOMMU_HOST).store(map.dma_base, Ordering::Relaxed);
        dev.word(e + IOMMU_STATE).store(IOMMU_VALID, Ordering::Release);
        assert!(engine.translate(start).is_none());
        assert!(engine.translate(start + 32).is_none());
        // A sane entry still translates.
        dev.word(e + IOMMU_IOVA).store(barrier_hw::IOVA_BASE, Ordering::Relaxed);
        dev.word(e + barrier_hw::IOMMU_LEN).store(FLAG_BYTES, Ordering::Relaxed);
        assert_eq!(engine.translate(barrier_hw::IOVA_BASE).map(|t| (t.flag, t.entry)), Some((map.dma_base, e)));
    }

    /// Sets up group `g` of `dev` as a driver would: `members` members, each released through
    /// IOMMU entry `m` onto its own flag line.
    fn configure_by_hand(dev: &DeviceFile, g: usize, members: usize) {
        let map = dev.map();
        for m in 0..members {
            let e = map.iommu_entry(m);
            let iova = barrier_hw::IOVA_BASE + m as u64 * FLAG_BYTES;
            dev.word(e + IOMMU_IOVA).store(iova, Ordering::Relaxed);
            dev.word(e + barrier_hw::IOMMU_LEN).store(FLAG_BYTES, Ordering::Relaxed);
            dev.word(e + barrier_hw::IOMMU_HOST).store(map.release_flag(g, m), Ordering::Relaxed);
            dev.word(e + IOMMU_STATE).store(IOMMU_VALID, Ordering::Release);
            dev.group_word(map, g, &map.group.release_table, m).store(iova, Ordering::Relaxed);
        }
        dev.group_word(map, g, &map.group.member_mask, 0).store((1 << members) - 1, Ordering::Relaxed);
        dev.group_store(map, g, &map.group.member_count, members as u64);
        dev.group_store(map, g, &map.group.owner, 0x5eed);
        dev.group_store(map, g, &map.group.control, control::ENABLE | control::ARM);
    }

    /// Writes member `m`'s arrival message for `epoch` into its slot, as a driver does.
    fn arrive_by_hand(dev: &DeviceFile, g: usize, m: usize, epoch: u64) {
        let map = dev.map();
        let msg = barrier_hw::Message {
            msg_type: barrier_hw::MessageType::Arrive,
            group_id: g as u32,
            member_id: m as u32,
            sequence: epoch as u32,
            timestamp: 0,
            target_addr: 0,
            store_value: map.encoding.encode(m as u32, epoch as u32),
        };
        for (w, v) in dev.words(map.arrival_slot(g, m), 5).iter().zip(msg.to_words()) {
            w.store(v, Ordering::Release);
        }
    }

    #[test]
    fn a_release_target_unmapped_or_remapped_after_configuration_fails_the_group_and_its_flag_stays() {
        // Member 1's mapping is removed (its driver detached), or its entry is taken again by
        // another process for the same line or another one, while the group still runs.
        fn freed(dev: &DeviceFile, e: u64) {
            dev.word(e + IOMMU_STATE).store(IOMMU_FREE, Ordering::Release);
        }
        fn taken_again(dev: &DeviceFile, e: u64) {
            dev.word(e + IOMMU_STATE).store(IOMMU_VALID | 99 << 32, Ordering::Release);
        }
        // By the same process, for another line: only the claim's tag tells the two apart.
        fn taken_again_by_the_same_process(dev: &DeviceFile, e: u64) {
            dev.word(e + IOMMU_STATE).store(barrier_hw::IOMMU_CLAIMED, Ordering::Release);
            dev.word(e + barrier_hw::IOMMU_HOST).store(dev.map().release_flag(5, 0), Ordering::Relaxed);
            dev.word(e + IOMMU_STATE).store(IOMMU_VALID | 7 << barrier_hw::IOMMU_TAG_SHIFT, Ordering::Release);
        }
        let changes: [fn(&DeviceFile, u64); 3] = [freed, taken_again, taken_again_by_the_same_process];
        // With every release duplicated, epoch 1's late duplicates go out at epoch 2's release.
        let models = [Faults::default(), Faults { duplicate_release: 1.0, seed: 7, ..Faults::default() }];
        for (faults, change) in models.into_iter().flat_map(|f| changes.iter().map(move |c| (f, c))) {
            let map = &barrier_hw::GBA;
            let dev = Arc::new(DeviceFile::create_private(map).unwrap());
            let config = Config { faults, ..Config::new(map) };
            let mut engine = Engine::new(Dev::own(dev.clone()), config, Arc::new(AtomicBool::new(false)));
            let (g, members) = (3, 3);
            configure_by_hand(&dev, g, members);
            engine.refresh();
            assert_eq!(engine.plain, faults == Faults::default());
            let flag = |m: usize| dev.flag(map.release_flag(g, m)).load();
            for m in 0..members {
                arrive_by_hand(&dev, g, m, 1);
                let taken = engine.take_arrival(g, m, Claim::Swap);
                assert_eq!(taken, if m + 1 == members { Taken::Completed } else { Taken::Arrival });
            }
            assert_eq!((0..members).map(flag).collect::<Vec<_>>(), [1, 1, 1]);
            // The line is zeroed so that any later store to it shows, a duplicate of epoch 1's
            // release too.
            change(&dev, map.iommu_entry(1));
            dev.flag(map.release_flag(g, 1)).signal(0, false);
            for m in 0..members {
                arrive_by_hand(&dev, g, m, 2);
                engine.take_arrival(g, m, Claim::Swap);
            }
            assert_eq!(flag(1), 0, "an unmapped release flag was written ({faults:?})");
            assert_eq!(flag(0), 2, "member 0 comes before the unmapped one and is released");
            assert_eq!(flag(2), 1, "the release stops at the unmapped member ({faults:?})");
            assert_eq!(dev.flag(map.release_flag(5, 0)).load(), 0, "the new mapping's line was written");
            assert_eq!(engine.reg(g, &map.group.error_code), error_code::IOMMU_FAULT, "{faults:?}");
            assert_ne!(engine.reg(g, &map.group.status) & status::ERROR, 0, "{faults:?}");
            assert!(!engine.groups[g].enabled);
        }
    }
}
