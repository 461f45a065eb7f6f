//! The hardware barrier backends: switch offload (`switch`) and the Global Barrier Accelerator
//! (`gba`). One driver serves both; the register map (`barrier-hw`) is the only difference.
//!
//! # Control plane (collective, when a communicator is created)
//!
//! 1. Every rank maps the device (`BARRIER_<NAME>_DEVICE_PATH`) and checks MAGIC, VERSION and
//!    DEVICE_STATUS.
//! 2. Rank 0 claims a free group (compare-and-swap of its owner id into OWNER), resets it
//!    (CONTROL.RESET, which the device clears when done) and writes MEMBER_COUNT and MEMBER_MASK.
//! 3. Every rank attaches: clears its arrival slot, maps its release-flag line through the IOMMU
//!    (an entry VALID with its pid), writes its IOVA into the release table and its node into
//!    the network-address table, and counts itself in REFS.
//! 4. Rank 0 sets EPOCH_BASE to the highest value any member's release flag already holds (flags
//!    are never reset, so a reused group continues from there) and CONTROL = ENABLE | ARM, plus
//!    INTERRUPT_EN when the communicator's ranks park; it waits for STATUS.READY.
//!
//! Every rank runs every step even after a local failure, carrying an ok bit, so that a failure
//! is agreed and nobody waits in a collective that another rank skipped. A communicator that is
//! dropped detaches (unmap, clear its table entry, REFS - 1); the last member frees the group.
//! Groups of a process that died are freed by the device (the emulator checks owners' pids).
//!
//! # Data plane (every barrier)
//!
//! `arrive(e)` records the arrival in the communicator's arrival flag (for the fallback and for
//! timeout reports), writes the remote-store message into its arrival slot with the arrival word
//! (`store_value`) last, and rings the doorbell (an inline emulated device instead takes the
//! message at once, in this call: the trapped store). `progress(e)` is ready when the release
//! flag holds `EPOCH_BASE + e` or more (64-bit, so nothing wraps); otherwise it asks to be called
//! again every few milliseconds to watch the device, which it inspects from the third call of a
//! wait on (not on the fast path). With more ranks than cores, one group (of at most 48 ranks)
//! and one node, a waiter whose CPU holds no missing rank first spins for the release (the tail
//! spin of [`crate::algo::tail`]): after its arrival it has nothing left to do.
//!
//! # Trees of groups
//!
//! A communicator larger than one group's member limit becomes a tree (see [`TreeShape`]):
//! chunk gather groups, chunk broadcast groups and a root group of chunk leaders, 2c + 1 groups
//! for c chunks, driven by a per-rank plan of arrive/wait steps. 1,000 ranks take 17 switch
//! groups or 5 GBA groups.
//!
//! # Faults and the fallback
//!
//! A rank that sees STATUS.ERROR, a vanished device (registers read all ones), or, after
//! `BARRIER_<NAME>_WATCHDOG`, a release that the device completed but never delivered or an
//! arrival the device never counted (twice in a row, and only after the device's HEARTBEAT shows
//! it has scanned since: a device that is merely slow to look is not faulty), raises the
//! communicator's shared fault flag. Every rank
//! looks at that flag on each arrival and on each recheck, so all of them leave the hardware.
//! From then on barriers complete in software on the **flat** barrier: a rank passes epoch `e`
//! once every rank's arrival flag holds at least `e`. Each rank stores its arrival before waiting
//! for anything, so ranks may switch at different epochs (one still finishing `e` while another,
//! released by the device, is already at `e + 1`) without a hang and without an early release:
//! an arrival flag at `e + 1` can only exist once its rank passed `e`, which needed everyone at `e`.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier_hw::{
    control, global, status, DeviceMap, MessageType, FLAG_BYTES, IOMMU_CLAIMED, IOMMU_ENTRIES, IOMMU_FREE, IOMMU_HOST,
    IOMMU_IOVA, IOMMU_LEN, IOMMU_STATE, IOMMU_TAG_BITS, IOMMU_TAG_SHIFT, IOMMU_VALID,
    IOVA_BASE,
};

use crate::backend::{Backend, Decline, EnableContext, Module, Poll, QueryContext};
use crate::algo::tail::{self, TailSpin};
use crate::backends::software::{Software, SoftwareModule};
use crate::error::Error;
use crate::mmio::Mmio;
use crate::params::{ParamInfo, ParamKind, Params};
use crate::shm::Shared;
use crate::wait::Flag;

/// How often a waiting rank looks at the device and the fault flag.
const RECHECK: Duration = Duration::from_millis(5);
/// How long the control plane waits for the device to answer RESET or ENABLE.
const DEVICE_ANSWER: Duration = Duration::from_secs(3);

const NO_GROUP: u64 = u64::MAX;
const NO_ANSWER: u64 = u64::MAX - 1;

/// A hardware barrier backend over one register map.
#[derive(Debug)]
pub struct HwBackend {
    /// The device's register map.
    pub map: &'static DeviceMap,
    /// Backend name.
    pub name: &'static str,
    /// Default priority.
    pub priority: i32,
    /// Device path when `BARRIER_<NAME>_DEVICE_PATH` is unset.
    pub default_path: &'static str,
}

/// The switch-offload backend (128 members, 256 groups, priority 90).
pub static SWITCH: HwBackend =
    HwBackend { map: &barrier_hw::SWITCH, name: "switch", priority: 90, default_path: "/dev/switch0" };
/// The Global Barrier Accelerator backend (708 members, 32 groups, priority 100).
pub static GBA: HwBackend = HwBackend { map: &barrier_hw::GBA, name: "gba", priority: 100, default_path: "/dev/gba0" };

impl HwBackend {
    fn param(&self, what: &str) -> String {
        format!("BARRIER_{}_{what}", self.name.to_ascii_uppercase())
    }

    /// The device path from the parameters.
    pub fn device_path(&self, params: &Params) -> PathBuf {
        PathBuf::from(params.get(&self.param("DEVICE_PATH")).unwrap_or_else(|| self.default_path.into()))
    }

    fn watchdog(&self, params: &Params) -> Duration {
        params.duration(&self.param("WATCHDOG")).ok().flatten().unwrap_or(Duration::from_millis(100))
    }

    /// Maps the device and checks that it is the device this backend drives and that it is up.
    pub fn open(&self, params: &Params) -> Result<Arc<Device>, String> {
        let path = self.device_path(params);
        if !path.exists() {
            return Err(format!(
                "no device at {} (set {} or run under `barrier run --emulate {}`)",
                path.display(),
                self.param("DEVICE_PATH"),
                self.name
            ));
        }
        let mmio = Mmio::open(&path, self.map.size).map_err(|e| format!("cannot map {}: {e}", path.display()))?;
        let regular = mmio.file().and_then(|f| f.metadata().ok()).is_some_and(|m| m.file_type().is_file());
        let instance = mmio.word(global::INSTANCE.offset).load(Ordering::Acquire);
        let dev = Device { mmio, map: self.map, path, regular, inline: None, instance };
        let magic = dev.mmio.word(global::MAGIC.offset).load(Ordering::Acquire);
        if magic != self.map.magic {
            return Err(format!("{} is not a {} device (MAGIC {magic:#x})", dev.path.display(), self.name));
        }
        let version = dev.mmio.word(global::VERSION.offset).load(Ordering::Relaxed);
        if version != self.map.version {
            return Err(format!(
                "{} speaks register-map version {version}, this driver {}",
                dev.path.display(),
                self.map.version
            ));
        }
        let mut dev = dev;
        if dev.mmio.word(global::DEVICE_MODE.offset).load(Ordering::Acquire) == global::DEVICE_MODE_INLINE {
            dev.inline = Some(crate::mmio::inline_device().map_err(|why| {
                format!(
                    "the {} device at {} is emulated inline (its work runs in the ranks that ring it), but {why}; \
                     or use a device with an engine of its own (`barrier run --threaded-emulator`, `barrier emu`)",
                    self.name,
                    dev.path.display()
                )
            })?);
        }
        if dev.served() == Some(false) {
            return Err(format!(
                "nothing serves the {} device file {}: it was left behind by a `barrier emu` daemon (or a \
                 launcher) that died; start the daemon again (it replaces the stale file) or remove the file",
                self.name,
                dev.path.display()
            ));
        }
        match dev.mmio.word(global::DEVICE_STATUS.offset).load(Ordering::Acquire) {
            1 => Ok(Arc::new(dev)),
            status::GONE => {
                Err(format!("the {} device at {} is gone (registers read all ones)", self.name, dev.path.display()))
            }
            other => Err(format!(
                "the {} device at {} is not ready (DEVICE_STATUS {other:#x})",
                self.name,
                dev.path.display()
            )),
        }
    }
}

/// Every hardware backend.
pub fn all() -> [&'static HwBackend; 2] {
    [&GBA, &SWITCH]
}

/// A device's counters (global window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Groups allocated.
    pub groups_in_use: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Errors raised.
    pub errors: u64,
}

/// A mapped barrier device.
#[derive(Debug)]
pub struct Device {
    mmio: Mmio,
    map: &'static DeviceMap,
    path: PathBuf,
    /// A regular file (an emulated device), as opposed to a character device.
    regular: bool,
    /// An inline emulated device: its work runs here, after each ring.
    inline: Option<crate::mmio::InlineDevice>,
    /// The device's INSTANCE register (read once: it names this power-on of the device).
    instance: u64,
}

impl Device {
    /// The device's counters.
    pub fn counters(&self) -> DeviceCounters {
        let r = |reg: &barrier_hw::Register| self.mmio.word(reg.offset).load(Ordering::Relaxed);
        DeviceCounters {
            groups_in_use: r(&global::GROUPS_IN_USE),
            barriers: r(&global::BARRIERS),
            errors: r(&global::ERRORS),
        }
    }

    /// Whether anything serves this device. An emulated device is a regular file whose emulator
    /// holds its `flock` for as long as it runs; a real device is a character device served by
    /// its kernel driver while it exists, which the file cannot tell (`None`).
    fn served(&self) -> Option<bool> {
        if !self.regular {
            return None;
        }
        self.mmio.file().map(|f| crate::sys::flock_held(f.as_raw_fd()))
    }

    /// Takes this driver's lock on byte `at` of the device file (see
    /// `barrier_hw::DeviceMap::member_lock`); false if another open file holds it.
    fn lock(&self, at: u64) -> bool {
        self.mmio.file().is_none_or(|f| crate::sys::ofd_lock(f.as_raw_fd(), at).unwrap_or(false))
    }

    fn unlock(&self, at: u64) {
        if let Some(f) = self.mmio.file() {
            crate::sys::ofd_unlock(f.as_raw_fd(), at);
        }
    }

    fn reg(&self, g: usize, r: &barrier_hw::Register) -> u64 {
        self.mmio.group_load(self.map, g, r)
    }

    fn set_reg(&self, g: usize, r: &barrier_hw::Register, v: u64) {
        self.mmio.group_store(self.map, g, r, v)
    }

    fn group_word(&self, g: usize, r: &barrier_hw::Register, index: usize) -> &AtomicU64 {
        self.mmio.group_word(self.map, g, r, index)
    }

    /// Rings the doorbell (the device, or its emulator, looks for new work). An atomic add:
    /// two rings are never merged into one, so the device cannot sleep past an arrival. An
    /// inline device does the work now, in this call.
    fn ring(&self) {
        let ticket = self.mmio.flag(global::DOORBELL.offset).bump(self.inline.is_none());
        if let Some(device) = self.inline {
            device(&self.path, self.instance, self.map, crate::mmio::InlineWork::Ring { ticket });
        }
    }

    /// Tells the device that `member` of `group` wrote its arrival message. A device with an
    /// engine of its own is rung; an inline device takes the message now, in this call (the
    /// trapped store), without touching the doorbell, which every rank would otherwise write.
    fn arrived(&self, group: usize, member: usize) {
        match self.inline {
            Some(device) => {
                device(&self.path, self.instance, self.map, crate::mmio::InlineWork::Arrival { group, member })
            }
            None => {
                self.mmio.flag(global::DOORBELL.offset).bump(true);
            }
        }
    }

    fn config_changed(&self) {
        self.mmio.word(global::CONFIG_SEQ.offset).fetch_add(1, Ordering::AcqRel);
        self.ring();
    }

    fn wait_for(&self, what: impl Fn() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < DEVICE_ANSWER {
            if what() {
                return true;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        what()
    }

    /// Frees group `g` if `owner` still owns it: the device forgets it, OWNER goes back to 0.
    fn free(&self, g: usize, owner: u64) {
        self.set_reg(g, &self.map.group.control, 0);
        let _ = self.group_word(g, &self.map.group.owner, 0).compare_exchange(
            owner,
            0,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.config_changed();
    }

    /// Claims, resets and sizes a free group, holding its claim lock until
    /// [`Device::release_claim`]; `NO_GROUP` if all are taken, `NO_ANSWER` if the device did not
    /// acknowledge the reset.
    fn claim(&self, owner: u64, members: usize) -> u64 {
        let m = self.map;
        // The claim lock first, then OWNER: the device frees only groups whose locks are all
        // free, so a group is never collected between being claimed and being attached to.
        let Some(g) = (0..m.max_groups).find(|&g| {
            let word = self.group_word(g, &m.group.owner, 0);
            if word.load(Ordering::Acquire) != 0 || !self.lock(m.claim_lock(g)) {
                return false;
            }
            let won = word.compare_exchange(0, owner, Ordering::AcqRel, Ordering::Acquire).is_ok();
            if !won {
                self.release_claim(g);
            }
            won
        }) else {
            return NO_GROUP;
        };
        self.set_reg(g, &m.group.control, control::RESET);
        self.config_changed();
        if !self.wait_for(|| self.reg(g, &m.group.control) & control::RESET == 0) {
            self.free(g, owner);
            self.release_claim(g);
            return NO_ANSWER;
        }
        self.set_reg(g, &m.group.refs, 0);
        self.set_reg(g, &m.group.member_count, members as u64);
        for w in 0..barrier_hw::mask_words(m.max_members) {
            let bits = (0..64).filter(|b| w * 64 + b < members).fold(0u64, |acc, b| acc | 1 << b);
            self.group_word(g, &m.group.member_mask, w).store(bits, Ordering::Release);
        }
        g as u64
    }

    fn release_claim(&self, g: usize) {
        self.unlock(self.map.claim_lock(g));
    }

    /// Attaches member `member` of group `g`, which `owner` must still own: member lock taken,
    /// slot cleared, flag mapped through the IOMMU, tables written.
    fn attach(&self, g: usize, member: usize, node: u64, owner: u64) -> Result<Attachment, String> {
        let m = self.map;
        if !self.lock(m.member_lock(g, member)) {
            return Err(format!("member {member} of group {g} at {} is held by another process", self.path.display()));
        }
        // The lock first, then OWNER: the device frees a group only after it has marked OWNER and
        // found no member lock, so either it sees this lock or this rank sees its mark.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.reg(g, &m.group.owner) != owner {
            self.unlock(m.member_lock(g, member));
            return Err(format!(
                "group {g} at {} was freed or taken over before this rank attached (it came too late to a \
                 collective that had already failed)",
                self.path.display()
            ));
        }
        let slot = m.arrival_slot(g, member);
        for w in 0..5 {
            self.mmio.word(slot + 8 * w).store(0, Ordering::Relaxed);
        }
        let flag_off = m.release_flag(g, member);
        let pid = (std::process::id() as u64) << 32;
        // As for groups: an entry's lock is taken before its state leaves FREE.
        let Some(entry) = (0..IOMMU_ENTRIES as usize).find(|&i| {
            let state = self.mmio.word(m.iommu_entry(i) + IOMMU_STATE);
            if state.load(Ordering::Acquire) != IOMMU_FREE || !self.lock(m.iommu_lock(i)) {
                return false;
            }
            let won =
                state.compare_exchange(IOMMU_FREE, IOMMU_CLAIMED | pid, Ordering::AcqRel, Ordering::Acquire).is_ok();
            if !won {
                self.unlock(m.iommu_lock(i));
            }
            won
        }) else {
            self.unlock(m.member_lock(g, member));
            return Err(format!("the IOMMU table of {} is full ({IOMMU_ENTRIES} mappings)", self.path.display()));
        };
        let e = m.iommu_entry(entry);
        // The claim (CLAIMED) before the words below, for a device that reads the state, the
        // words and the state again.
        fence(Ordering::Release);
        let iova = IOVA_BASE + flag_off;
        self.mmio.word(e + IOMMU_IOVA).store(iova, Ordering::Relaxed);
        self.mmio.word(e + IOMMU_LEN).store(FLAG_BYTES, Ordering::Relaxed);
        self.mmio.word(e + IOMMU_HOST).store(flag_off, Ordering::Relaxed);
        // A tag new for this claim, so the device can tell this mapping from any later one of
        // the same entry by its state word alone.
        let tag = (owner_id() & IOMMU_TAG_BITS).max(1) << IOMMU_TAG_SHIFT;
        self.mmio.word(e + IOMMU_STATE).store(IOMMU_VALID | tag | pid, Ordering::Release);
        self.group_word(g, &m.group.release_table, member).store(iova, Ordering::Release);
        self.group_word(g, &m.group.netaddr_table, member).store(node, Ordering::Release);
        self.group_word(g, &m.group.refs, 0).fetch_add(1, Ordering::AcqRel);
        // Set when the device powers on, never changed: read once.
        let arrival_addr = self.reg(g, &m.group.arrival_addr);
        Ok(Attachment { group: g, member, entry, flag_off, slot, owner, arrival_addr })
    }

    /// Frees a group this rank claimed if nobody attached to it (a failed enable).
    fn free_unattached(&self, g: usize, owner: u64) {
        if self.reg(g, &self.map.group.owner) == owner && self.reg(g, &self.map.group.refs) == 0 {
            self.free(g, owner);
        }
        self.release_claim(g);
    }

    /// Undoes `attach`; the last member frees the group. Group registers are touched only while
    /// the group is still this attachment's (a group is never freed under a member holding its
    /// lock, but a device reset by hand may have freed it anyway).
    fn detach(&self, a: &Attachment) {
        let m = self.map;
        let ours = self.reg(a.group, &m.group.owner) == a.owner;
        if ours {
            self.group_word(a.group, &m.group.release_table, a.member).store(0, Ordering::Release);
        }
        self.mmio.word(m.iommu_entry(a.entry) + IOMMU_STATE).store(IOMMU_FREE, Ordering::Release);
        self.unlock(m.iommu_lock(a.entry));
        if ours && self.group_word(a.group, &m.group.refs, 0).fetch_sub(1, Ordering::AcqRel) == 1 {
            self.free(a.group, a.owner);
        }
        self.unlock(m.member_lock(a.group, a.member));
    }

    /// Starts the group at `base` and waits until the device reports READY (or ERROR).
    fn enable(&self, g: usize, base: u64, interrupts: bool) -> Result<(), String> {
        let m = self.map;
        self.set_reg(g, &m.group.epoch_base, base);
        let irq = if interrupts { control::INTERRUPT_EN } else { 0 };
        self.set_reg(g, &m.group.control, control::ENABLE | control::ARM | irq);
        self.config_changed();
        let answered = self.wait_for(|| self.reg(g, &m.group.status) & (status::READY | status::ERROR) != 0);
        let st = self.reg(g, &m.group.status);
        if !answered {
            Err(format!("group {g} of {} did not become READY within {DEVICE_ANSWER:?}", self.path.display()))
        } else if st & status::ERROR != 0 {
            Err(format!(
                "group {g} of {} reported ERROR code {} when enabled",
                self.path.display(),
                self.reg(g, &m.group.error_code)
            ))
        } else {
            Ok(())
        }
    }
}

/// One member's hold on a group.
#[derive(Debug, Clone, Copy)]
struct Attachment {
    group: usize,
    member: usize,
    entry: usize,
    flag_off: u64,
    slot: u64,
    /// The owner id the group had when this member attached.
    owner: u64,
    /// The group's ARRIVAL_ADDR (where arrival messages land), for the messages.
    arrival_addr: u64,
}

/// A group owner id: random, so that no two claims share one, whatever their processes' pid
/// namespaces or pid reuse (0 is "free" and all ones is the collector's mark).
fn owner_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    loop {
        // RandomState is seeded from the operating system's random source.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
        h.write_u32(std::process::id());
        let id = h.finish();
        if id != 0 && id != u64::MAX {
            return id;
        }
    }
}

impl Backend for HwBackend {
    fn name(&self) -> &'static str {
        self.name
    }

    fn default_priority(&self) -> i32 {
        self.priority
    }

    fn description(&self) -> &'static str {
        match self.name {
            "switch" => "switch barrier offload: remote-store arrivals, release-flag polling (128 members, 256 groups)",
            _ => "Global Barrier Accelerator: remote-store arrivals, release-flag polling (708 members, 32 groups)",
        }
    }

    fn params(&self) -> Vec<ParamInfo> {
        vec![
            ParamInfo::new(self.param("DEVICE_PATH"), self.default_path, format!("The {} device file to map.", self.name)),
            ParamInfo::new(
                self.param("WATCHDOG"),
                "100ms",
                "How long a rank waits for a release before checking the device for a lost release or arrival (then all ranks fall back to software).",
            )
            .kind(ParamKind::Duration),
        ]
    }

    fn query(&self, ctx: &QueryContext<'_>) -> Result<(), Decline> {
        TreeShape::new(ctx.size, self.map.max_members).fits(self.map, self.name).map_err(Decline::new)?;
        self.open(ctx.params).map(|_| ()).map_err(Decline::new)
    }

    fn enable(&self, ctx: &EnableContext<'_>) -> Result<Box<dyn Module>, Decline> {
        let q = &ctx.query;
        let coll = |e: Error| Decline::new(e.to_string());
        // The software algorithm this communicator returns to after a device fault (agreed now,
        // while every rank is here: it is a collective).
        let software = Software.enable_software(ctx)?;
        let dev = self.open(q.params);
        if !ctx.all_agree(dev.is_ok()).map_err(coll)? {
            return Err(Decline::new(
                dev.err().unwrap_or_else(|| "the device could not be mapped on another rank".into()),
            ));
        }
        let dev = dev.map_err(Decline::new)?;
        let shape = TreeShape::new(q.size, self.map.max_members);
        // Rank 0 claims every group the shape needs (all or none) and tells everyone which.
        let owner = if q.rank == 0 { owner_id() } else { 0 };
        let mut claimed: Vec<u64> = Vec::new();
        let mut status = 0u64;
        if q.rank == 0 {
            for k in 0..shape.groups() {
                match dev.claim(owner, shape.members_of(k)) {
                    g if g == NO_GROUP || g == NO_ANSWER => {
                        status = g;
                        for &c in &claimed {
                            dev.free_unattached(c as usize, owner);
                        }
                        claimed.clear();
                        break;
                    }
                    g => claimed.push(g),
                }
            }
        }
        // Whatever happens next, rank 0 gives up its claim locks when enable ends, and frees the
        // groups nobody attached to if it failed.
        let claims = Claims { dev: &dev, owner, groups: claimed.iter().map(|&g| g as usize).collect(), ok: false };
        match ctx.broadcast(0, status).map_err(coll)? {
            NO_GROUP => {
                let free = (0..self.map.max_groups).filter(|&g| dev.reg(g, &self.map.group.owner) == 0).count();
                return Err(Decline::new(format!(
                    "all {} {} groups at {} are in use ({} needed, {free} free)",
                    self.map.max_groups,
                    self.name,
                    dev.path.display(),
                    shape.groups()
                )));
            }
            NO_ANSWER => {
                return Err(Decline::new(format!(
                    "the {} device at {} did not answer a group reset",
                    self.name,
                    dev.path.display()
                )))
            }
            _ => {}
        }
        let owner = ctx.broadcast(0, owner).map_err(coll)?;
        let mut groups = Vec::with_capacity(shape.groups());
        for k in 0..shape.groups() {
            groups.push(ctx.broadcast(0, claimed.get(k).copied().unwrap_or(0)).map_err(coll)? as usize);
        }
        // Every rank attaches to the groups it belongs to and reports the flags it found.
        let roles = shape.roles(q.rank);
        let mut stages = Vec::new();
        let mut error = None;
        for &(k, member) in &roles {
            match dev.attach(groups[k], member, q.node as u64, owner) {
                Ok(a) => stages.push(Stage { group_index: k, a, base: 0 }),
                Err(e) => error = Some(e),
            }
        }
        // Fixed width (ok + three roles at most) so every rank reads every rank's report whole.
        let mut report = [error.is_none() as u64, 0, 0, 0];
        for (i, &(k, _)) in roles.iter().enumerate() {
            report[1 + i] =
                stages.iter().find(|s| s.group_index == k).map_or(0, |s| dev.mmio.flag(s.a.flag_off).load());
        }
        let region = ctx.region;
        let silence = (self.watchdog(q.params) * 10).max(Duration::from_secs(1));
        let mut module = HwModule {
            dev: dev.clone(),
            sends_through: sends_through(&shape.plan(q.rank)),
            plan: shape.plan(q.rank),
            stages,
            shape,
            bases: vec![0; shape.groups()],
            step: 0,
            n: q.size,
            wake: ctx.policy.wakes(),
            watchdog: self.watchdog(q.params),
            silence,
            pending_since: None,
            polls: 0,
            suspect: None,
            heartbeat: (0, Instant::now()),
            fault: region.shared_flag(region.fault()),
            arrivals: region.arrivals().iter().map(|f| region.shared_flag(f)).collect(),
            sent: region.sent().iter().map(|f| region.shared_flag(f)).collect(),
            rank: q.rank,
            degraded: None,
            resume_at: u64::MAX,
            software,
            on_software: false,
            verbose: q.params.flag("BARRIER_VERBOSE").unwrap_or(false),
            flat_next: 0,
            algorithm: String::from("offload"),
            messages: std::cell::Cell::new(0),
            tail: None,
        };
        // One group: after its arrival a rank only waits for the device's release, so a rank
        // whose CPU holds no missing rank spins for it (see algo::tail).
        if shape.chunks == 1 && tail::wanted(ctx) {
            module.tail = TailSpin::new(region, q.rank, module.software.tail_limit);
        }
        // From here on the module owns the attachments: an error below detaches them.
        let all = ctx.allgather(&report).map_err(coll)?;
        // Each group starts after the highest epoch any of its members' flags already holds.
        for (rank, words) in all.iter().enumerate() {
            for (i, &(k, _)) in shape.roles(rank).iter().enumerate() {
                module.bases[k] = module.bases[k].max(words[1 + i]);
            }
        }
        for st in &mut module.stages {
            st.base = module.bases[st.group_index];
        }
        if all.iter().any(|w| w[0] == 0) {
            return Err(Decline::new(
                error.unwrap_or_else(|| "attaching to the device's groups failed on another rank".into()),
            ));
        }
        let ready = if q.rank == 0 {
            groups.iter().enumerate().try_for_each(|(k, &g)| dev.enable(g, module.bases[k], ctx.policy.wakes()))
        } else {
            Ok(())
        };
        if ctx.broadcast(0, ready.is_ok() as u64).map_err(coll)? != 1 {
            return Err(Decline::new(
                ready.err().unwrap_or_else(|| "a group did not become ready (see rank 0)".into()),
            ));
        }
        drop(claims.succeeded());
        module.algorithm = if shape.chunks == 1 {
            let spin = if module.tail.is_some() { " + tail spin" } else { "" };
            format!("offload group {}{spin}", groups[0])
        } else {
            format!("offload tree of {} groups ({} chunks)", shape.groups(), shape.chunks)
        };
        tracing::debug!(backend = self.name, groups = ?groups, "hardware barrier groups enabled");
        Ok(Box::new(module))
    }
}

/// For each step of `plan`, the number of arrivals sent up to and including it.
fn sends_through(plan: &[Step]) -> Vec<u64> {
    plan.iter()
        .scan(0, |sent, step| {
            *sent += u64::from(matches!(step, Step::Arrive(_)));
            Some(*sent)
        })
        .collect()
}

/// Rank 0's claimed groups during `enable`: on drop, the claim locks are released (the members'
/// own locks keep the groups alive from then on) and, if enabling failed, every group nobody
/// attached to is freed at once rather than left to the device's collector.
struct Claims<'a> {
    dev: &'a Device,
    owner: u64,
    groups: Vec<usize>,
    ok: bool,
}

impl Claims<'_> {
    fn succeeded(mut self) -> Self {
        self.ok = true;
        self
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        for &g in &self.groups {
            if self.ok {
                self.dev.release_claim(g);
            } else {
                self.dev.free_unattached(g, self.owner);
            }
        }
    }
}

/// How a communicator maps onto groups: one group when it fits, otherwise a tree.
///
/// With `c` chunks (contiguous blocks of at most `max` ranks), group `2i` gathers chunk `i`,
/// group `2i + 1` broadcasts to it, and group `2c` (the root) holds the chunk leaders (each
/// chunk's first rank). A non-leader arrives at its gather and broadcast groups and waits for
/// the broadcast release; a leader waits for its gather group, arrives at the root, waits for
/// it, then arrives at its broadcast group and waits for it. The broadcast group completes only
/// once its leader has passed the root, which needed every leader to have seen its whole chunk
/// arrive: nobody leaves before everybody arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeShape {
    /// Ranks.
    pub n: usize,
    /// Chunks (1: a single group, no tree).
    pub chunks: usize,
}

/// One step of a rank's barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Send the arrival for stage `.0`.
    Arrive(usize),
    /// Wait for stage `.0`'s release.
    Wait(usize),
}

impl TreeShape {
    /// The shape for `n` ranks and groups of at most `max` members.
    pub fn new(n: usize, max: usize) -> Self {
        TreeShape { n, chunks: n.div_ceil(max.max(1)).max(1) }
    }

    /// Whether `map`'s device can hold this shape; the reason if not.
    pub fn fits(&self, map: &DeviceMap, name: &str) -> Result<(), String> {
        if self.chunks > map.max_members {
            return Err(format!(
                "{} members > {} (a tree of {name} groups would need {} leaders in its root group of at most {})",
                self.n,
                map.max_members * map.max_members,
                self.chunks,
                map.max_members
            ));
        }
        if self.groups() > map.max_groups {
            return Err(format!(
                "{} members need {} {name} groups as a tree, the device has {}",
                self.n,
                self.groups(),
                map.max_groups
            ));
        }
        Ok(())
    }

    /// Groups needed.
    pub fn groups(&self) -> usize {
        if self.chunks == 1 {
            1
        } else {
            2 * self.chunks + 1
        }
    }

    fn chunk_of(&self, rank: usize) -> usize {
        rank * self.chunks / self.n
    }

    /// The first rank of chunk `chunk` (its leader).
    pub fn first_of(&self, chunk: usize) -> usize {
        (chunk * self.n).div_ceil(self.chunks)
    }

    /// The rank that is member `member` of group `k`.
    fn rank_of(&self, k: usize, member: usize) -> usize {
        if self.chunks == 1 {
            member
        } else if k == 2 * self.chunks {
            self.first_of(member)
        } else {
            self.first_of(k / 2) + member
        }
    }

    /// Members of group `k`.
    pub fn members_of(&self, k: usize) -> usize {
        if self.chunks == 1 {
            self.n
        } else if k == 2 * self.chunks {
            self.chunks
        } else {
            let chunk = k / 2;
            self.first_of(chunk + 1) - self.first_of(chunk)
        }
    }

    /// The groups `rank` belongs to, as (group index, member index), in plan order.
    fn roles(&self, rank: usize) -> Vec<(usize, usize)> {
        if self.chunks == 1 {
            return vec![(0, rank)];
        }
        let chunk = self.chunk_of(rank);
        let local = rank - self.first_of(chunk);
        let mut r = vec![(2 * chunk, local), (2 * chunk + 1, local)];
        if local == 0 {
            r.push((2 * self.chunks, chunk));
        }
        r
    }

    /// The steps of `rank`'s barrier, over the stages in `roles` order.
    fn plan(&self, rank: usize) -> Vec<Step> {
        if self.chunks == 1 {
            return vec![Step::Arrive(0), Step::Wait(0)];
        }
        let leader = rank == self.first_of(self.chunk_of(rank));
        if leader {
            // stages: 0 gather, 1 broadcast, 2 root
            vec![Step::Arrive(0), Step::Wait(0), Step::Arrive(2), Step::Wait(2), Step::Arrive(1), Step::Wait(1)]
        } else {
            vec![Step::Arrive(0), Step::Arrive(1), Step::Wait(1)]
        }
    }
}

/// One group this rank belongs to.
#[derive(Debug, Clone, Copy)]
struct Stage {
    group_index: usize,
    a: Attachment,
    /// Device epoch = base + communicator epoch.
    base: u64,
}

/// One rank's hardware barrier on one communicator.
#[derive(Debug)]
pub struct HwModule {
    dev: Arc<Device>,
    stages: Vec<Stage>,
    plan: Vec<Step>,
    /// For each step of the plan, how many arrivals the plan sends up to and including it.
    sends_through: Vec<u64>,
    shape: TreeShape,
    /// The epoch base of every group of the shape.
    bases: Vec<u64>,
    /// Next step of the plan for the current epoch.
    step: usize,
    n: usize,
    rank: usize,
    wake: bool,
    watchdog: Duration,
    /// A device whose HEARTBEAT has not moved for this long, although it was rung, has
    /// stopped answering.
    silence: Duration,
    pending_since: Option<Instant>,
    /// Calls that found the current wait pending. The first two hand the wait to the
    /// communicator (its inline checks, then its wait); the device is inspected from the third
    /// on, a recheck slice later, not on the fast path, where reading the clock would be a good
    /// part of the barrier.
    polls: u8,
    /// What the previous watchdog check found wrong (and the heartbeat then): the same finding
    /// twice in a row, with the device having scanned in between, is a fault.
    suspect: Option<(String, u64)>,
    /// The device's HEARTBEAT, and when it last changed.
    heartbeat: (u64, Instant),
    fault: Shared<Flag>,
    arrivals: Vec<Shared<Flag>>,
    /// Every rank's record of the arrivals it has sent: `(epoch << 2) | sends so far`.
    sent: Vec<Shared<Flag>>,
    degraded: Option<String>,
    /// After a fault: the epoch from which the software algorithm runs (fault epoch + 2).
    resume_at: u64,
    software: SoftwareModule,
    on_software: bool,
    /// BARRIER_VERBOSE: say on stderr, too, when the hardware fails.
    verbose: bool,
    flat_next: usize,
    algorithm: String,
    /// Arrival messages sent to the device (each one crosses the network to it).
    messages: std::cell::Cell<u64>,
    /// One group, ranks that park: when to spin for the release instead of yielding.
    tail: Option<Box<TailSpin>>,
}

impl HwModule {
    /// Leaves the hardware for good; `raise` tells every other rank to do the same.
    ///
    /// The communicator's fault flag holds the epoch of the first rank that raised it (first
    /// writer wins, so every rank reads the same value F). No rank completes epoch F + 1 on the
    /// device (the raiser never sends that arrival), so every rank arrives at F + 2 already
    /// degraded: from there all of them run the software algorithm, and until then the flat
    /// barrier, which tolerates ranks switching one epoch apart.
    fn degrade(&mut self, epoch: u64, reason: String, raise: bool) {
        let fault_epoch = if raise { self.fault.set_once(epoch, true) } else { self.fault.load() };
        self.resume_at = fault_epoch.max(1) + 2;
        if raise && fault_epoch == epoch {
            // The rank whose report set the fault epoch speaks for the communicator: once.
            let msg = format!(
                "barrier: the {} barrier of a communicator of {} ranks failed at barrier {epoch} ({reason}); \
                 its ranks complete barriers in software from now on",
                self.dev.map.kind, self.n
            );
            tracing::warn!(target: "barrier", "{msg}");
            if self.verbose {
                crate::sys::say(&msg);
            }
        } else {
            tracing::debug!(device = self.dev.map.kind, rank = self.rank, epoch, %reason, "leaving the hardware barrier");
        }
        self.algorithm = format!("fallback: flat ({reason})");
        self.degraded = Some(reason);
    }

    fn flat(&mut self, epoch: u64) -> Poll<'_> {
        while self.flat_next < self.n {
            if !self.arrivals[self.flat_next].reached(epoch) {
                let last = self.flat_next + 1 == self.n;
                return Poll::Pending { flag: &self.arrivals[self.flat_next], target: epoch, recheck: None, last, spin: None };
            }
            self.flat_next += 1;
        }
        Poll::Ready
    }

    /// This rank's arrival record (the communicator's arrival flag, which the flat fallback
    /// waits on) at `epoch`. The communicator stores it when it hands the barrier to this module
    /// (`Communicator::barrier` without waking anyone, its `drive` and `ibarrier` waking): the
    /// ranks of a flat fallback that parked on it are woken here. A locked add only if the record is behind (a module driven
    /// without a communicator): the flag is this rank's alone, and with spinning ranks (no
    /// wake, whose fence drains the store buffer anyway) a locked instruction would wait for
    /// this rank's release stores to other ranks' flags to drain.
    #[inline]
    fn record_arrival(&self, epoch: u64) {
        let own = &self.arrivals[self.rank];
        if own.load() < epoch {
            own.raise(epoch, self.wake);
        } else if self.wake {
            own.wake();
        }
    }

    /// Sends this rank's arrival at `epoch` to stage `s`.
    fn send(&self, s: usize, epoch: u64) {
        let Stage { a, base, .. } = &self.stages[s];
        let map = self.dev.map;
        let target = base + epoch;
        let msg = barrier_hw::Message {
            msg_type: MessageType::Arrive,
            group_id: a.group as u32,
            member_id: a.member as u32,
            sequence: target as u32,
            timestamp: crate::sys::coarse_wall_clock_ns(),
            target_addr: a.arrival_addr,
            store_value: map.encoding.encode(a.member as u32, target as u32),
        };
        let words = msg.to_words();
        let slot = self.dev.mmio.words(a.slot, words.len());
        for (reg, w) in slot.iter().zip(words).take(4) {
            reg.store(w, Ordering::Release);
        }
        // The arrival word last: the device takes the message as complete only when it agrees
        // with the member/sequence word written above.
        slot[4].store(words[4], Ordering::Release);
        self.dev.arrived(a.group, a.member);
        self.messages.set(self.messages.get() + 1);
        // For the lost-arrival check of whoever waits on this group: how many of this rank's
        // arrivals (in plan order) it has sent for this epoch.
        self.sent[self.rank].signal(epoch << 2 | self.sends_through[self.step], false);
    }

    /// Whether member `member` of the shape's group `k` has sent its arrival for `epoch`: its
    /// rank records, after each send, how many of its arrivals (in plan order) it has sent.
    fn member_sent(&self, k: usize, member: usize, epoch: u64) -> bool {
        let rank = self.shape.rank_of(k, member);
        let stage = self.shape.roles(rank).iter().position(|&(g, _)| g == k).expect("a member of its group");
        let arrivals = self.shape.plan(rank).into_iter().filter(|s| matches!(s, Step::Arrive(_)));
        let nth = arrivals.into_iter().position(|s| s == Step::Arrive(stage)).expect("every stage has an arrival");
        self.sent[rank].load() >= (epoch << 2 | (nth as u64 + 1))
    }

    /// Looks at stage `s`'s group while waiting; returns why the hardware cannot finish.
    fn inspect(&mut self, s: usize, epoch: u64) -> Option<String> {
        let map = self.dev.map;
        let Stage { a, base, group_index } = self.stages[s];
        let st = self.dev.reg(a.group, &map.group.status);
        if st == status::GONE
            || self.dev.mmio.word(global::DEVICE_STATUS.offset).load(Ordering::Acquire) == status::GONE
        {
            return Some("the device vanished (registers read all ones)".into());
        }
        if st & status::ERROR != 0 {
            return Some(format!(
                "the device reported ERROR code {} in group {}",
                self.dev.reg(a.group, &map.group.error_code),
                a.group
            ));
        }
        let heartbeat = self.dev.mmio.word(global::HEARTBEAT.offset).load(Ordering::Acquire);
        if heartbeat != self.heartbeat.0 {
            self.heartbeat = (heartbeat, Instant::now());
        }
        let since = *self.pending_since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.watchdog {
            return None;
        }
        self.pending_since = Some(Instant::now());
        if self.dev.served() == Some(false) {
            return Some(format!(
                "the device stopped answering: nothing serves {} any more (its `barrier emu` daemon died?)",
                self.dev.path.display()
            ));
        }
        let silent = self.heartbeat.1.elapsed();
        if silent >= self.silence {
            return Some(format!("the device stopped answering (no heartbeat for {silent:.1?} although rung)"));
        }
        // Ring, so that a live device scans again before the next check.
        self.dev.ring();
        let target = base + epoch;
        let completed = self.dev.reg(a.group, &map.group.completed_epoch);
        let finding = if completed >= target {
            // The device stores COMPLETED_EPOCH before it writes the release flags: look again.
            (!self.dev.mmio.flag(a.flag_off).reached(target)).then(|| {
                format!("the device completed epoch {epoch} in group {} but its release never reached this rank", a.group)
            })
        } else if completed + 1 == target {
            let members = self.shape.members_of(group_index);
            let counted = |m: usize| {
                self.dev.group_word(a.group, &map.group.arrived_mask, m / 64).load(Ordering::Acquire) >> (m % 64) & 1
                    == 1
            };
            let lost: Vec<usize> =
                (0..members).filter(|&m| !counted(m) && self.member_sent(group_index, m, epoch)).collect();
            if !lost.is_empty() {
                Some(format!(
                    "the device never counted the arrival of member(s) {lost:?} at epoch {epoch} in group {}",
                    a.group
                ))
            } else if (0..members).all(counted) {
                Some(format!(
                    "the device counted every member's arrival at epoch {epoch} in group {} but never released it",
                    a.group
                ))
            } else {
                None
            }
        } else {
            None
        };
        // Only a finding that persists across a scan of the device counts: a device that had no
        // chance to look (an emulator starved of CPU), or a release still being written, is not
        // a fault.
        // (Two heartbeats: the pass under way at the first finding may have scanned this group
        // already; the next one started after it, so it has scanned since.)
        match (finding, self.suspect.take()) {
            (Some(f), Some((prev, seen))) if f == prev && heartbeat >= seen + 2 => Some(f),
            (Some(f), Some((prev, seen))) if f == prev => {
                self.suspect = Some((prev, seen));
                None
            }
            (Some(f), _) => {
                self.suspect = Some((f, heartbeat));
                None
            }
            (None, _) => None,
        }
    }
}

impl Module for HwModule {
    fn algorithm(&self) -> &str {
        &self.algorithm
    }

    fn network_ops(&self) -> u64 {
        self.messages.get() + self.software.network_ops()
    }

    fn arrive(&mut self, epoch: u64) -> Result<(), Error> {
        self.pending_since = None;
        self.polls = 0;
        self.suspect = None;
        self.flat_next = 0;
        self.step = 0;
        if self.degraded.is_none() && self.fault.load() != 0 {
            self.degrade(epoch, "another rank's hardware barrier failed".into(), false);
        }
        if self.degraded.is_some() && epoch >= self.resume_at {
            if !self.on_software {
                self.on_software = true;
                let reason = self.degraded.as_deref().unwrap_or_default();
                self.algorithm = format!("fallback: {} ({reason})", self.software.algorithm());
            }
            self.record_arrival(epoch);
            return self.software.arrive(epoch);
        }
        // Send every arrival that does not wait for a release first, then make sure the arrival
        // is recorded (the flat fallback waits on it).
        if self.degraded.is_none() {
            while let Some(&Step::Arrive(s)) = self.plan.get(self.step) {
                self.send(s, epoch);
                self.step += 1;
            }
            if let Some(tail) = self.tail.as_deref_mut() {
                // Whether this arrival completed the group is the device's to know; the last
                // arriver finds no one missing and does not spin. (The arrival record below is
                // read only by flat fallbacks, which do not mind the few nanoseconds.)
                tail.arrived(epoch, false);
            }
        }
        self.record_arrival(epoch);
        Ok(())
    }

    fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        if self.on_software {
            return self.software.progress(epoch);
        }
        while self.degraded.is_none() {
            match self.plan.get(self.step).copied() {
                None => return Ok(Poll::Ready),
                Some(Step::Arrive(s)) => {
                    self.send(s, epoch);
                    self.step += 1;
                }
                Some(Step::Wait(s)) => {
                    let Stage { a, base, .. } = self.stages[s];
                    if self.dev.mmio.flag(a.flag_off).reached(base + epoch) {
                        self.step += 1;
                        self.pending_since = None;
                        self.polls = 0;
                        self.suspect = None;
                        continue;
                    }
                    if self.fault.load() != 0 {
                        self.degrade(epoch, "another rank's hardware barrier failed".into(), false);
                    } else if self.polls < 2 {
                        self.polls += 1;
                        let flag = self.dev.mmio.flag(a.flag_off);
                        let spin = self.tail.as_deref().and_then(|t| t.spin());
                        // The plan's last wait: its flag reaching the target completes the
                        // barrier (the next arrive resets the wait's bookkeeping).
                        let last = self.step + 1 == self.plan.len();
                        return Ok(Poll::Pending { flag, target: base + epoch, recheck: Some(RECHECK), last, spin });
                    } else if let Some(reason) = self.inspect(s, epoch) {
                        self.degrade(epoch, reason, true);
                    } else {
                        let flag = self.dev.mmio.flag(a.flag_off);
                        return Ok(Poll::Pending { flag, target: base + epoch, recheck: Some(RECHECK), last: false, spin: None });
                    }
                }
            }
        }
        Ok(self.flat(epoch))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(device) = self.inline {
            device(&self.path, self.instance, self.map, crate::mmio::InlineWork::Flush);
        }
    }
}

impl Drop for HwModule {
    fn drop(&mut self) {
        if self.dev.mmio.word(global::DEVICE_STATUS.offset).load(Ordering::Acquire) != status::GONE {
            for st in self.stages.drain(..) {
                self.dev.detach(&st.a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_communicator_that_fits_uses_one_group() {
        let t = TreeShape::new(100, 128);
        assert_eq!((t.chunks, t.groups(), t.members_of(0)), (1, 1, 100));
        assert_eq!(t.roles(37), vec![(0, 37)]);
        assert_eq!(t.plan(37), vec![Step::Arrive(0), Step::Wait(0)]);
    }

    #[test]
    fn shapes_beyond_a_two_level_tree_are_declined_with_the_limit() {
        let t = TreeShape::new(128 * 128 + 1, 128);
        let why = t.fits(&barrier_hw::SWITCH, "switch").unwrap_err();
        assert!(why.contains("16385 members > 16384") && why.contains("129 leaders"), "{why}");
        // 128 chunks would need 2 * 128 + 1 = 257 of the switch's 256 groups; 127 chunks fit.
        let why = TreeShape::new(128 * 128, 128).fits(&barrier_hw::SWITCH, "switch").unwrap_err();
        assert!(why.contains("257 switch groups"), "{why}");
        assert!(TreeShape::new(127 * 128, 128).fits(&barrier_hw::SWITCH, "switch").is_ok());
        // The GBA has only 32 groups: 16 chunks would need 33.
        let why = TreeShape::new(708 * 16, 708).fits(&barrier_hw::GBA, "gba").unwrap_err();
        assert!(why.contains("33 gba groups"), "{why}");
    }

    #[test]
    fn a_thousand_ranks_form_a_tree_whose_groups_cover_every_rank_once() {
        let t = TreeShape::new(1000, 128);
        assert_eq!((t.chunks, t.groups()), (8, 17));
        let mut seen = vec![Vec::new(); t.groups()];
        for r in 0..1000 {
            for (k, m) in t.roles(r) {
                seen[k].push(m);
            }
        }
        for (k, members) in seen.iter().enumerate() {
            let expect: Vec<usize> = (0..t.members_of(k)).collect();
            assert_eq!(members, &expect, "group {k}");
            assert!(members.len() <= 128);
        }
        assert_eq!(t.members_of(16), 8, "the root holds one leader per chunk");
        // Leaders wait for their chunk, then the root, then release their chunk.
        assert_eq!(
            t.plan(0),
            vec![Step::Arrive(0), Step::Wait(0), Step::Arrive(2), Step::Wait(2), Step::Arrive(1), Step::Wait(1)]
        );
        assert_eq!(t.plan(1), vec![Step::Arrive(0), Step::Arrive(1), Step::Wait(1)]);
    }
}
