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
mod device;
pub mod inline;

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use barrier::wait::{Unwatched, WaitConfig, WaitPolicy};
use barrier_hw::{
    control, error_code, expand_sequence, global, status, DeviceMap, FLAG_BYTES, IOMMU_ENTRIES, IOMMU_FREE, IOMMU_IOVA,
    IOMMU_STATE, IOMMU_STATE_CODE, IOMMU_VALID,
};

pub use device::DeviceFile;

/// Delays added by the device.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Per network hop of a release store (every member is one hop away here).
    pub per_hop: Duration,
    /// Per member released.
    pub per_member: Duration,
}

/// Injected faults. Probabilities are per event (per arrival, per release store).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// Lose an arrival message.
    pub drop_arrival: f64,
    /// Lose a release store to one member.
    pub drop_release: f64,
    /// Write a release store twice (the second time after the next barrier starts).
    pub duplicate_release: f64,
    /// Set STATUS.ERROR for good after this many completed barriers (device-wide).
    pub stick_error_after: Option<u64>,
    /// Vanish (every register reads all ones, nothing is served) after this many barriers.
    pub vanish_after: Option<u64>,
    /// Sleep this long before serving each barrier.
    pub slow_engine: Duration,
    /// Seed of the fault model's random numbers.
    pub seed: u64,
}

/// How a pass makes sure it alone takes a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// Swap the identity word for [`TAKEN`] (the engine thread's scan).
    Swap,
    /// Nobody else takes this message: mark it [`TAKEN`] with a plain store (an inline
    /// device's trap of its own rank's message, see [`inline`]).
    Own,
}

/// What one look at an arrival slot did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Taken {
    /// Nothing to take.
    Nothing,
    /// An arrival was taken (or a bad one failed the group), the epoch is not complete.
    Arrival,
    /// The arrival taken completed the epoch, and the group was released.
    Completed,
}

/// How to run an emulated device.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which device.
    pub map: &'static DeviceMap,
    /// Delays.
    pub latency: Latency,
    /// Faults.
    pub faults: Faults,
    /// Run the device's work inline, in the ranks that ring it, instead of on an engine thread
    /// (see [`inline`]; faults and latency need the thread).
    pub inline: bool,
}

impl Config {
    /// A fault-free, zero-latency device with an engine thread.
    pub fn new(map: &'static DeviceMap) -> Self {
        Config { map, latency: Latency::default(), faults: Faults::default(), inline: false }
    }

    /// The same device, emulated inline.
    pub fn inline(self) -> Self {
        Config { inline: true, ..self }
    }
}

/// The device's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Arrival messages accepted.
    pub arrivals: u64,
    /// Release stores written.
    pub releases: u64,
    /// Errors raised.
    pub errors: u64,
    /// Groups allocated now.
    pub groups_in_use: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Engine time spent serving, ns.
    pub busy_ns: u64,
}

impl Counters {
    /// Reads the counters of a device file.
    pub fn read(dev: &DeviceFile) -> Counters {
        let r = |reg: &barrier_hw::Register| dev.word(reg.offset).load(Ordering::Relaxed);
        Counters {
            arrivals: r(&global::ARRIVALS),
            releases: r(&global::RELEASES),
            errors: r(&global::ERRORS),
            groups_in_use: r(&global::GROUPS_IN_USE),
            barriers: r(&global::BARRIERS),
            busy_ns: r(&global::ENGINE_BUSY_NS),
        }
    }
}

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

fn doorbell(dev: &barrier::mmio::Mmio) -> &barrier::wait::Flag {
    dev.flag(global::DOORBELL.offset)
}

fn bump_doorbell(dev: &barrier::mmio::Mmio) {
    doorbell(dev).bump(true);
}

/// The device memory an engine works on: its own device file (an engine with a thread), or a
/// mapping of another process's device file (an inline engine in a rank). Registers are reached
/// through `mmio` either way (a handle on the same mapping), without a branch per access.
struct Dev {
    mmio: barrier::mmio::Mmio,
    /// The device file this engine serves, when it is the emulator's own.
    own: Option<Arc<DeviceFile>>,
}

impl Dev {
    fn own(file: Arc<DeviceFile>) -> Dev {
        Dev { mmio: file.share(), own: Some(file) }
    }

    fn mapped(mmio: barrier::mmio::Mmio) -> Dev {
        Dev { mmio, own: None }
    }
}

impl std::ops::Deref for Dev {
    type Target = barrier::mmio::Mmio;
    #[inline]
    fn deref(&self) -> &barrier::mmio::Mmio {
        &self.mmio
    }
}

/// Per-group engine state: the group's configuration as this engine knows it. The barrier
/// state itself (ARRIVED_MASK, ARRIVAL_COUNT, COMPLETED_EPOCH) lives in the registers, so that
/// every engine of an inline device works on the same state.
#[derive(Clone, Debug, Default)]
struct Group {
    /// The owner id the group had when this engine configured or adopted it.
    owner: u64,
    enabled: bool,
    /// ERROR was raised; the group stays failed until RESET or until it is freed.
    failed: bool,
    members: Vec<usize>,
    /// Each member id's index in `members` (and `release`), [`NOT_A_MEMBER`] for the others;
    /// empty for a group that is not running.
    index: Vec<u32>,
    mask: Vec<u64>,
    /// The one MEMBER_MASK word that holds every member, if there is one: then the arrival
    /// that fills that ARRIVED_MASK word completes the epoch; otherwise ARRIVAL_COUNT decides.
    single_word: Option<usize>,
    /// Each member's release target.
    release: Vec<ReleaseTarget>,
    /// Duplicate releases to send at the next release: (target, epoch).
    duplicates: Vec<(ReleaseTarget, u64)>,
}

/// Where a member is released (the DMA offset of its flag), and the IOMMU mapping that allows
/// it: the entry and its state word when the member's release address was translated. A VALID
/// state word is drawn anew for every claim of an entry (VALID, a random tag, the pid; see
/// [`barrier_hw::IOMMU_STATE`]), and a driver changes an entry only through FREE, so the state
/// word alone says whether that mapping is still the one in place. Every release store checks
/// it: no flag is written through a mapping found removed or replaced.
#[derive(Clone, Copy, Debug)]
struct ReleaseTarget {
    flag: u64,
    /// Device offset of the IOMMU entry.
    entry: u64,
    state: u64,
}

impl ReleaseTarget {
    /// Whether the mapping this target was translated through is still in place.
    #[inline]
    fn mapped(&self, dev: &barrier::mmio::Mmio) -> bool {
        dev.word(self.entry + IOMMU_STATE).load(Ordering::Acquire) == self.state
    }
}

/// Device offsets of a group's registers that every barrier touches, worked out once per
/// engine (a trap would otherwise compute each from the map at every access).
#[derive(Clone, Copy, Debug, Default)]
struct RegsAt {
    owner: u64,
    control: u64,
    status: u64,
    completed_epoch: u64,
    arrival_count: u64,
    /// ARRIVED_MASK's first word.
    arrived_mask: u64,
    /// Member 0's arrival slot.
    slots: u64,
}

impl RegsAt {
    fn of(map: &DeviceMap, g: usize) -> RegsAt {
        let r = &map.group;
        let word = |reg: &barrier_hw::Register| {
            assert_eq!(reg.bytes, 8, "{} is read as one 64-bit word", reg.name);
            map.group_reg(g, reg)
        };
        RegsAt {
            owner: word(&r.owner),
            control: word(&r.control),
            status: word(&r.status),
            completed_epoch: word(&r.completed_epoch),
            arrival_count: word(&r.arrival_count),
            arrived_mask: map.group_reg(g, &r.arrived_mask),
            slots: map.group_reg(g, &r.arrival_slots),
        }
    }

    fn slot(&self, member: usize) -> u64 {
        self.slots + member as u64 * barrier_hw::ARRIVAL_SLOT_BYTES
    }
}

impl Group {
    /// A configured, running group (the threaded engine configured it, or an inline engine
    /// adopted it).
    fn running(owner: u64, mask: Vec<u64>, members: Vec<usize>, release: Vec<ReleaseTarget>) -> Self {
        let used: Vec<usize> = (0..mask.len()).filter(|&w| mask[w] != 0).collect();
        let mut index = vec![NOT_A_MEMBER; members.last().map_or(0, |&m| m + 1)];
        for (i, &member) in members.iter().enumerate() {
            index[member] = i as u32;
        }
        Group {
            index,
            owner,
            enabled: true,
            failed: false,
            single_word: (used.len() == 1).then(|| used[0]),
            mask,
            members,
            release,
            duplicates: Vec::new(),
        }
    }
}

/// Whether a group whose CONTROL and STATUS read `ctl` and `st` is served: enabled and
/// armed, READY, no ERROR.
#[inline]
fn served(ctl: u64, st: u64) -> bool {
    ctl & (control::ENABLE | control::ARM) == control::ENABLE | control::ARM
        && st & status::READY != 0
        && st & status::ERROR == 0
}

/// [`Group::index`] of an id that is not a member.
const NOT_A_MEMBER: u32 = u32::MAX;

/// The identity word of an arrival slot whose message the device has taken. Member ids stay
/// below 2^32 - 1, so no message carries it: a message is taken once.
const TAKEN: u64 = u64::MAX;

/// What an arrival slot holds, measured against the epoch its group expects.
enum Slot {
    /// Nothing to take: empty, still being written, taken, or a message for an epoch the
    /// group completed already.
    Nothing,
    /// A complete message for the expected epoch: its identity word and the epoch.
    Current { ident: u64, epoch: u64 },
    /// A malformed message, or one for an epoch after the expected one.
    Bad,
}

/// Counter increments an inline engine has not written yet (see [`Engine::tally`]).
#[derive(Debug, Default)]
struct Tally {
    arrivals: u64,
    releases: u64,
    barriers: u64,
    busy_ns: u64,
}

/// An inline engine writes its counts at least every this many barriers.
const TALLY_BARRIERS: u64 = 256;

struct Engine {
    tally: Tally,
    /// No faults and no latency configured: arrivals and releases skip their checks.
    plain: bool,
    /// Each group's register offsets, by group.
    regs: Vec<RegsAt>,
    dev: Dev,
    map: &'static DeviceMap,
    config: Config,
    stop: Arc<AtomicBool>,
    groups: Vec<Group>,
    active: Vec<usize>,
    rng: u64,
    vanished: bool,
    error_stuck: bool,
    last_gc: Instant,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.flush_tally();
    }
}

impl Engine {
    fn new(dev: Dev, config: Config, stop: Arc<AtomicBool>) -> Self {
        let map = config.map;
        let rng = config.faults.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let plain = config.faults == Faults { seed: config.faults.seed, ..Faults::default() }
            && config.latency == Latency::default();
        Engine {
            tally: Tally::default(),
            plain,
            regs: (0..map.max_groups).map(|g| RegsAt::of(map, g)).collect(),
            dev,
            map,
            config,
            stop,
            groups: vec![Group::default(); map.max_groups],
            active: Vec::new(),
            rng,
            vanished: false,
            error_stuck: false,
            last_gc: Instant::now(),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    #[inline]
    fn reg(&self, g: usize, r: &barrier_hw::Register) -> u64 {
        self.dev.group_load(self.map, g, r)
    }

    #[inline]
    fn set_reg(&self, g: usize, r: &barrier_hw::Register, v: u64) {
        self.dev.group_store(self.map, g, r, v)
    }

    fn count(&self, reg: &barrier_hw::Register, n: u64) {
        self.dev.word(reg.offset).fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a completed barrier (its arrivals, its release stores) and device time. The
    /// engine thread writes the counters at once; an inline engine adds up in this process
    /// and writes every [`TALLY_BARRIERS`] barriers, at every full pass and when a driver is
    /// done with the device (`InlineWork::Flush`): the counters share one line, which would
    /// otherwise move between the completing ranks at every barrier.
    fn tally(&mut self, arrivals: u64, releases: u64, barriers: u64, busy_ns: u64) {
        let t = &mut self.tally;
        t.arrivals += arrivals;
        t.releases += releases;
        t.barriers += barriers;
        t.busy_ns += busy_ns;
        if !self.config.inline || t.barriers >= TALLY_BARRIERS {
            self.flush_tally();
        }
    }

    /// Writes the counts [`Engine::tally`] holds back.
    fn flush_tally(&mut self) {
        let t = std::mem::take(&mut self.tally);
        for (reg, n) in [
            (&global::ARRIVALS, t.arrivals),
            (&global::RELEASES, t.releases),
            (&global::BARRIERS, t.barriers),
            (&global::ENGINE_BUSY_NS, t.busy_ns),
        ] {
            if n != 0 {
                self.count(reg, n);
            }
        }
    }

    fn run(mut self) {
        let mut seen = doorbell(&self.dev).load();
        let config_seq = |dev: &barrier::mmio::Mmio| dev.word(global::CONFIG_SEQ.offset).load(Ordering::Acquire);
        let mut config_seen = config_seq(&self.dev);
        self.refresh();
        let idle_wait = WaitConfig {
            policy: WaitPolicy::Park,
            spin: 2000,
            yields: 8,
            timeout: Some(Duration::from_millis(200)),
            progress: None,
        };
        while !self.stop.load(Ordering::Acquire) {
            if !self.vanished {
                let start = Instant::now();
                seen = doorbell(&self.dev).load();
                let config = config_seq(&self.dev);
                if config != config_seen {
                    config_seen = config;
                    self.refresh();
                }
                self.dev.word(global::CONFIG_SEEN.offset).store(config_seen, Ordering::Release);
                let worked = self.serve();
                if worked {
                    self.count(&global::ENGINE_BUSY_NS, start.elapsed().as_nanos() as u64);
                    continue;
                }
                if self.last_gc.elapsed() > Duration::from_secs(1) {
                    self.collect_garbage();
                }
            }
            // Idle: sleep until a doorbell (or 200 ms, to notice `stop` and collect garbage).
            let _ = idle_wait.wait(doorbell(&self.dev), seen + 1, &Unwatched);
        }
    }

    /// Re-reads which groups are owned and (re)configures groups whose CONTROL changed.
    fn refresh(&mut self) {
        self.active.clear();
        let mut in_use = 0;
        for g in 0..self.map.max_groups {
            let owner = self.reg(g, &self.map.group.owner);
            if owner != 0 {
                in_use += 1;
            }
            let ctl = self.reg(g, &self.map.group.control);
            if ctl & control::RESET != 0 {
                self.reset(g);
            }
            if owner != 0 && ctl & control::ENABLE != 0 {
                if !self.groups[g].enabled && !self.groups[g].failed {
                    self.configure(g);
                }
                if self.groups[g].enabled {
                    self.active.push(g);
                }
            } else if self.groups[g].enabled || owner == 0 {
                self.groups[g] = Group::default();
                if !self.error_stuck {
                    self.set_reg(g, &self.map.group.status, 0);
                }
            }
        }
        self.dev.word(global::GROUPS_IN_USE.offset).store(in_use, Ordering::Relaxed);
    }

    fn reset(&mut self, g: usize) {
        self.groups[g] = Group::default();
        let words = barrier_hw::mask_words(self.map.max_members);
        for w in 0..words {
            self.dev.group_word(self.map, g, &self.map.group.arrived_mask, w).store(0, Ordering::Relaxed);
        }
        self.set_reg(g, &self.map.group.arrival_count, 0);
        self.set_reg(g, &self.map.group.completed_epoch, 0);
        self.set_reg(g, &self.map.group.error_code, error_code::NONE);
        self.set_reg(g, &self.map.group.status, 0);
        self.dev.group_word(self.map, g, &self.map.group.control, 0).fetch_and(!control::RESET, Ordering::AcqRel);
    }

    fn fail(&mut self, g: usize, code: u64) {
        self.set_reg(g, &self.map.group.error_code, code);
        let st = self.reg(g, &self.map.group.status);
        self.set_reg(g, &self.map.group.status, st | status::ERROR);
        self.count(&global::ERRORS, 1);
        self.groups[g].enabled = false;
        self.groups[g].failed = true;
        tracing::debug!(device = self.map.kind, group = g, code, "emulated device raised ERROR");
    }

    /// Checks a group's configuration and translates its release addresses.
    fn configure(&mut self, g: usize) {
        let m = self.map;
        if self.error_stuck {
            self.fail(g, error_code::INJECTED);
            return;
        }
        let count = self.reg(g, &m.group.member_count) as usize;
        let (mask, members) = self.member_mask(g);
        if count == 0 || count > m.max_members || members.len() != count {
            self.fail(g, error_code::BAD_CONFIG);
            return;
        }
        let Some(release) = self.release_targets(g, &members) else {
            self.fail(g, error_code::IOMMU_FAULT);
            return;
        };
        let base = self.reg(g, &m.group.epoch_base);
        self.groups[g] = Group::running(self.reg(g, &m.group.owner), mask, members, release);
        self.set_reg(g, &m.group.completed_epoch, base);
        self.set_reg(g, &m.group.status, status::READY);
    }

    /// Group `g`'s MEMBER_MASK words, and its members in order.
    fn member_mask(&self, g: usize) -> (Vec<u64>, Vec<usize>) {
        let m = self.map;
        let words = barrier_hw::mask_words(m.max_members);
        let mask: Vec<u64> =
            (0..words).map(|w| self.dev.group_word(m, g, &m.group.member_mask, w).load(Ordering::Acquire)).collect();
        let members = (0..m.max_members).filter(|i| mask[i / 64] >> (i % 64) & 1 == 1).collect();
        (mask, members)
    }

    /// Where each of `members` of group `g` is released (its RELEASE_TABLE entry translated);
    /// `None` if any entry does not translate.
    fn release_targets(&self, g: usize, members: &[usize]) -> Option<Vec<ReleaseTarget>> {
        let m = self.map;
        members
            .iter()
            .map(|&member| {
                self.translate(self.dev.group_word(m, g, &m.group.release_table, member).load(Ordering::Acquire))
            })
            .collect()
    }

    /// IOVA → release target, through VALID entries only, inside DMA memory.
    fn translate(&self, iova: u64) -> Option<ReleaseTarget> {
        (0..IOMMU_ENTRIES as usize).find_map(|i| {
            let e = self.map.iommu_entry(i);
            // The state first (a driver writes it last, with release), then the window and
            // host, then the state again: the same claim's state twice means the words read
            // between are that mapping's (a driver changes an entry only through FREE, and
            // every claim draws a new tag), never a mix of two. Most entries of a scan are FREE:
            // their state alone says so.
            let state_word = self.dev.word(e + IOMMU_STATE);
            let state = state_word.load(Ordering::Acquire);
            if state & IOMMU_STATE_CODE != IOMMU_VALID {
                return None;
            }
            let words = self.dev.words(e + IOMMU_IOVA, 3);
            let [start, len, host] = [0, 1, 2].map(|w| words[w].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if state_word.load(Ordering::Relaxed) != state {
                return None;
            }
            // Every word of an entry comes from drivers: checked arithmetic, or a crafted entry
            // near 2^64 could wrap around and translate to memory outside DMA.
            let window_end = start.checked_add(len)?;
            let flag_end = iova.checked_add(FLAG_BYTES)?;
            if iova < start || flag_end > window_end {
                return None;
            }
            let off = host.checked_add(iova - start)?;
            let end = off.checked_add(FLAG_BYTES)?;
            (off >= self.map.dma_base && end <= self.map.size && off.is_multiple_of(FLAG_BYTES))
                .then_some(ReleaseTarget { flag: off, entry: e, state })
        })
    }

    /// One pass over the active groups; true if anything happened.
    fn serve(&mut self) -> bool {
        self.dev.word(global::HEARTBEAT.offset).fetch_add(1, Ordering::Release);
        let mut worked = false;
        for idx in 0..self.active.len() {
            let g = self.active[idx];
            if !self.groups[g].enabled {
                continue;
            }
            if self.reg(g, &self.map.group.control) & control::ARM == 0 {
                continue;
            }
            worked |= self.serve_group(g);
        }
        worked
    }

    /// Takes the arrivals waiting in group `g`'s slots (the scan of the engine thread, and of
    /// an inline device's doorbell rings); the arrival that completes the epoch releases it.
    fn serve_group(&mut self, g: usize) -> bool {
        let m = self.map;
        let mut worked = false;
        let mut completed = false;
        for w in 0..self.groups[g].mask.len() {
            let arrived = self.dev.group_word(m, g, &m.group.arrived_mask, w).load(Ordering::Acquire);
            let mut pending = self.groups[g].mask[w] & !arrived;
            while pending != 0 && self.groups[g].enabled {
                let member = w * 64 + pending.trailing_zeros() as usize;
                pending &= pending - 1;
                match self.take_arrival(g, member, Claim::Swap) {
                    Taken::Nothing => {}
                    Taken::Arrival => worked = true,
                    Taken::Completed => {
                        worked = true;
                        completed = true;
                    }
                }
            }
        }
        if worked && !completed && self.groups[g].enabled {
            let st = self.reg(g, &m.group.status);
            let active = (st | status::ACTIVE) & !status::COMPLETE;
            // Only if it changes: STATUS shares its line with registers every pass reads.
            if active != st {
                self.set_reg(g, &m.group.status, active);
            }
        }
        worked
    }

    /// Reads member `member`'s arrival slot in group `g`. The slot is read before the group's
    /// COMPLETED_EPOCH: a member writes its message for epoch e only after its release from
    /// e - 1, which the device writes after COMPLETED_EPOCH, so the expected epoch read here is
    /// never older than the message's.
    fn look_at_slot(&self, g: usize, member: usize) -> Slot {
        let m = self.map;
        let at = self.regs[g];
        let slot = self.dev.words(at.slot(member), 5);
        // A message is present once its header is non-zero (slots are zeroed on attach), and
        // complete when the arrival word agrees with the member/sequence word: the sender
        // writes the arrival word last, so a disagreement is a message still in flight (or a
        // taken one). A zero arrival word is legal (member 0 at a sequence that wrapped to 0).
        let value = slot[4].load(Ordering::Acquire);
        let header = slot[0].load(Ordering::Acquire);
        let ident = slot[1].load(Ordering::Acquire);
        if header == 0 || ident == TAKEN {
            return Slot::Nothing;
        }
        let (who, seq) = m.encoding.decode(value);
        if ident != (who as u64 | (seq as u64) << 32) {
            return Slot::Nothing;
        }
        // The member's release flag holds the last epoch the device released it from, so a
        // message for the epoch after it is for the expected epoch (an untaken message's epoch
        // is not complete, and the flag never passes COMPLETED_EPOCH): the flag's line is the
        // member's own, where COMPLETED_EPOCH's is written by whichever rank completes.
        // Anything else is judged against COMPLETED_EPOCH. The same checks follow either way.
        let next_after_flag = self
            .member_index(g, member)
            .and_then(|i| self.dev.flag(self.groups[g].release[i].flag).load().checked_add(1))
            .filter(|&next| expand_sequence(next, seq) == next);
        let expected = match next_after_flag {
            Some(next) => next,
            None => self.dev.word(at.completed_epoch).load(Ordering::Acquire) + 1,
        };
        let epoch = expand_sequence(expected, seq);
        if epoch < expected {
            return Slot::Nothing;
        }
        if who as usize != member
            || (header >> 32) as usize != g
            || header & 0xff != barrier_hw::MessageType::Arrive as u64
            || epoch > expected
        {
            return Slot::Bad;
        }
        Slot::Current { ident, epoch }
    }

    /// Member `member`'s index in group `g`'s member list (and release table).
    #[inline]
    fn member_index(&self, g: usize, member: usize) -> Option<usize> {
        self.groups[g].index.get(member).filter(|&&i| i != NOT_A_MEMBER).map(|&i| i as usize)
    }

    /// Whether group `g` is still the running group this engine knows (same owner, enabled,
    /// armed, READY, no ERROR): checked before a release, never on the way to it, so that the
    /// registers' lines stay shared while barriers run.
    fn still_running(&self, g: usize) -> bool {
        let group = &self.groups[g];
        let at = self.regs[g];
        group.enabled
            && self.dev.word(at.owner).load(Ordering::Acquire) == group.owner
            && served(
                self.dev.word(at.control).load(Ordering::Acquire),
                self.dev.word(at.status).load(Ordering::Acquire),
            )
    }

    /// Whether group `g`'s registers say it is served: enabled and armed, READY, no ERROR.
    fn serving(&self, g: usize) -> bool {
        let m = self.map;
        served(self.reg(g, &m.group.control), self.reg(g, &m.group.status))
    }

    /// Takes member `member`'s arrival in group `g` if its slot holds one for the epoch the
    /// group expects: marks the slot [`TAKEN`] (see [`Claim`]), sets the member's
    /// ARRIVED_MASK bit and, if that completes the epoch, releases the group. Shared by the
    /// engine thread's scans and an inline device's trapped stores, which run at the same
    /// time in different ranks: every step is one atomic operation on a register, and exactly
    /// one arrival completes each epoch.
    fn take_arrival(&mut self, g: usize, member: usize, claim: Claim) -> Taken {
        let m = self.map;
        let (ident, epoch) = match self.look_at_slot(g, member) {
            Slot::Nothing => return Taken::Nothing,
            Slot::Bad => {
                self.fail(g, error_code::BAD_MESSAGE);
                return Taken::Arrival;
            }
            Slot::Current { ident, epoch } => (ident, epoch),
        };
        let at = self.regs[g];
        let identity = self.dev.word(at.slot(member) + 8);
        match claim {
            Claim::Swap => {
                if identity.compare_exchange(ident, TAKEN, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                    return Taken::Nothing; // another pass took it first
                }
            }
            Claim::Own => identity.store(TAKEN, Ordering::Relaxed),
        }
        if !self.plain && self.chance(self.config.faults.drop_arrival) {
            // Lost on the wire: taken, never counted.
            tracing::debug!(device = m.kind, group = g, member, epoch, "fault: arrival dropped");
            return Taken::Arrival;
        }
        // The member's bit is clear (its message for this epoch was taken once, just now), so
        // adding the bit sets it: one locked add, where an OR that returns the old word is a
        // compare-and-swap loop whose first load fetches the line only shared (a second trip).
        let bit = 1u64 << (member % 64);
        let before = self.dev.word(at.arrived_mask + 8 * (member / 64) as u64).fetch_add(bit, Ordering::AcqRel);
        let group = &self.groups[g];
        let complete = match group.single_word {
            Some(w) => before | bit == group.mask[w],
            None => {
                let count = self.dev.word(at.arrival_count).fetch_add(1, Ordering::AcqRel) + 1;
                count == group.members.len() as u64
            }
        };
        if !complete {
            Taken::Arrival
        } else if self.still_running(g) {
            self.release(g, epoch);
            Taken::Completed
        } else {
            // Failed (ERROR) meanwhile: no release. The waiting drivers see ERROR and fall
            // back; a full mask that is never released is also what their watchdog reports.
            self.groups[g] = Group::default();
            Taken::Arrival
        }
    }

    /// Completes group `g`'s epoch `epoch`: clears the arrival state for the next epoch,
    /// records COMPLETED_EPOCH and stores the epoch into every member's release flag.
    fn release(&mut self, g: usize, epoch: u64) {
        let at = self.regs[g];
        let plain = self.plain;
        let interrupt = self.dev.word(at.control).load(Ordering::Acquire) & control::INTERRUPT_EN != 0;
        if !plain {
            self.before_modelled_release(g, interrupt);
        }
        // The next epoch's arrival state is cleared before any member is released: a member
        // sends its next arrival only after its release, so none is ever cleared here.
        let group = &self.groups[g];
        match group.single_word {
            Some(w) => self.dev.word(at.arrived_mask + 8 * w as u64).store(0, Ordering::Relaxed),
            None => {
                let mask = self.dev.words(at.arrived_mask, group.mask.len());
                for (word, &members) in mask.iter().zip(&group.mask) {
                    if members != 0 {
                        word.store(0, Ordering::Relaxed);
                    }
                }
                self.dev.word(at.arrival_count).store(0, Ordering::Release);
            }
        }
        self.dev.word(at.completed_epoch).store(epoch, Ordering::Release);
        let done = status::READY | status::COMPLETE;
        // Only if it changes (an inline device keeps it at READY | COMPLETE): the line is shared.
        let st = self.dev.word(at.status);
        if st.load(Ordering::Acquire) != done {
            st.store(done, Ordering::Release);
        }
        let members = group.members.len() as u64;
        // Each store re-checks the IOMMU entry: an unmapped flag must never be written. The
        // first one found unmapped stops the release there.
        let sent = if plain {
            let all = group.release.iter().all(|target| {
                if !target.mapped(&self.dev) {
                    return false;
                }
                // A plain store: a read-modify-write would hold the completing rank until the
                // line, which the member is polling, came over. A member that waits on this
                // group cannot pass this epoch before this store, so its flag only moves
                // forward. One that does not wait on it (a non-leader of a gather group in a
                // tree) can have the group complete again, by another rank, while this store
                // is delayed, and then see its flag go back one epoch for a moment: nothing
                // waits on that flag, the device uses it only as a hint it checks against
                // COMPLETED_EPOCH, and EPOCH_BASE takes the maximum over the members, whose
                // leader's flag is exact.
                self.dev.flag(target.flag).signal(epoch, interrupt);
                true
            });
            all.then_some(members)
        } else {
            self.modelled_release_stores(g, epoch, interrupt)
        };
        let Some(sent) = sent else {
            self.fail(g, error_code::IOMMU_FAULT);
            return;
        };
        // Arrivals are counted here, all at once.
        self.tally(members, sent, 1, 0);
        if !plain {
            self.after_modelled_release();
        }
    }

    /// What a device with latency or faults configured does before a release: a slow engine
    /// waits; late duplicates of the previous barrier's releases go out (harmless by design: a
    /// duplicate never moves a flag backwards, nor past what the device completed), to flags
    /// that are still mapped (a duplicate whose mapping is gone is dropped).
    #[cold]
    fn before_modelled_release(&mut self, g: usize, interrupt: bool) {
        if !self.config.faults.slow_engine.is_zero() {
            std::thread::sleep(self.config.faults.slow_engine);
        }
        for (target, e) in std::mem::take(&mut self.groups[g].duplicates) {
            if target.mapped(&self.dev) {
                self.dev.flag(target.flag).raise(e, interrupt);
            }
        }
    }

    /// The release stores of a device with latency or faults configured: each store waits its
    /// latency, may be lost or sent twice. The stores sent, or `None` at a target that is not
    /// mapped any more (the caller fails the group).
    #[cold]
    fn modelled_release_stores(&mut self, g: usize, epoch: u64, interrupt: bool) -> Option<u64> {
        let m = self.map;
        let faults = self.config.faults;
        let delay = self.config.latency.per_hop + self.config.latency.per_member;
        let mut sent = 0;
        for i in 0..self.groups[g].release.len() {
            let target = self.groups[g].release[i];
            if !delay.is_zero() {
                spin_for(delay);
            }
            if !target.mapped(&self.dev) {
                return None;
            }
            if self.chance(faults.drop_release) {
                tracing::debug!(
                    device = m.kind,
                    group = g,
                    member = self.groups[g].members[i],
                    epoch,
                    "fault: release dropped"
                );
                continue;
            }
            self.dev.flag(target.flag).signal(epoch, interrupt);
            sent += 1;
            if self.chance(faults.duplicate_release) {
                self.groups[g].duplicates.push((target, epoch));
            }
        }
        Some(sent)
    }

    /// The device-wide faults that follow a release (a sticky ERROR, vanishing) when their
    /// barrier count is reached.
    #[cold]
    fn after_modelled_release(&mut self) {
        let faults = self.config.faults;
        if faults.stick_error_after.is_some() || faults.vanish_after.is_some() {
            let barriers = self.dev.word(global::BARRIERS.offset).load(Ordering::Relaxed);
            if faults.stick_error_after.is_some_and(|n| barriers >= n) {
                self.error_stuck = true;
                for &g in &self.active.clone() {
                    self.fail(g, error_code::INJECTED);
                }
            }
            if faults.vanish_after.is_some_and(|n| barriers >= n) {
                self.vanish();
            }
        }
    }

    /// Every register reads all ones from now on; nothing is served.
    fn vanish(&mut self) {
        self.vanished = true;
        self.dev.word(global::DEVICE_STATUS.offset).store(status::GONE, Ordering::Release);
        for g in 0..self.map.max_groups {
            self.dev.group_word(self.map, g, &self.map.group.status, 0).store(status::GONE, Ordering::Release);
            self.dev.group_word(self.map, g, &self.map.group.completed_epoch, 0).store(status::GONE, Ordering::Release);
        }
        tracing::debug!(device = self.map.kind, "fault: device vanished");
    }

    /// Frees groups and IOMMU entries that no live process uses any more.
    ///
    /// Liveness is read from the locks drivers hold on the device file (see
    /// `barrier_hw::DeviceMap::member_lock`), never from process ids: a group is freed only when
    /// neither its claim lock nor any member lock is held, so a group whose claimer exited while
    /// other members are still attached stays theirs, a group claimed by a process that died
    /// before anyone attached is freed, and processes in other pid namespaces are judged right.
    ///
    /// A group is marked [`FREEING`] before it is looked at a second time: a driver attaches by
    /// taking its member lock and then reading OWNER, so either this pass sees that lock and
    /// gives the group back, or the driver sees the mark and refuses to attach.
    fn collect_garbage(&mut self) {
        self.last_gc = Instant::now();
        let m = self.map;
        let Some(file) = &self.dev.own else { return };
        let fd = file.raw_fd();
        let in_use = |g: usize| {
            barrier::sys::ofd_held(fd, m.claim_lock(g), 1)
                || barrier::sys::ofd_held(fd, m.member_lock(g, 0), m.max_members as u64)
        };
        let mut changed = false;
        for g in 0..m.max_groups {
            let owner = self.dev.group_word(m, g, &m.group.owner, 0);
            let id = owner.load(Ordering::Acquire);
            if id == 0 || id == FREEING || in_use(g) {
                continue;
            }
            if owner.compare_exchange(id, FREEING, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            if in_use(g) {
                let _ = owner.compare_exchange(FREEING, id, Ordering::AcqRel, Ordering::Acquire);
                continue;
            }
            tracing::debug!(device = m.kind, group = g, owner = id, "freeing a group no live process uses");
            self.set_reg(g, &m.group.control, 0);
            self.set_reg(g, &m.group.refs, 0);
            for member in 0..m.max_members {
                self.dev.group_word(m, g, &m.group.release_table, member).store(0, Ordering::Relaxed);
            }
            owner.store(0, Ordering::Release);
            changed = true;
        }
        // IOMMU entries the same way: mark, look at the lock again, then free or give back (a
        // plain store could free an entry that was released and claimed again meanwhile).
        for i in 0..IOMMU_ENTRIES as usize {
            let state = self.dev.word(m.iommu_entry(i) + IOMMU_STATE);
            let seen = state.load(Ordering::Acquire);
            if seen == IOMMU_FREE || seen == FREEING || barrier::sys::ofd_held(fd, m.iommu_lock(i), 1) {
                continue;
            }
            if state.compare_exchange(seen, FREEING, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            let back = if barrier::sys::ofd_held(fd, m.iommu_lock(i), 1) { seen } else { IOMMU_FREE };
            state.store(back, Ordering::Release);
        }
        if changed {
            self.refresh();
        }
    }
}

/// OWNER (or an IOMMU entry's state) while the collector decides whether to free it (no driver
/// id or entry state is all ones).
const FREEING: u64 = u64::MAX;

fn spin_for(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
