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
//!
//! # Files
//!
//! `mod.rs` the backend (parameters, query, enable); `device.rs` the device: claim, attach,
//! detach, the register driver; `groups.rs` the trees of groups past a device's member limit;
//! `module.rs` the data plane; `fault.rs` the watchdog and the fall back to software (methods of
//! the module: `module.rs` calls them, `fault.rs` imports `module.rs`).

mod device;
mod fault;
mod groups;
mod module;
#[cfg(test)]
mod tests;

pub use device::{Device, DeviceCounters};
pub use groups::TreeShape;
pub use module::HwModule;

use device::{owner_id, NO_ANSWER, NO_GROUP};
use groups::*;
use module::*;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier_hw::{global, status, DeviceMap};

use crate::algo::flag::{self};
use crate::algo::tail::{self, TailSpin};
use crate::backend::{Backend, Decline, EnableContext, Module, QueryContext};
use crate::error::Error;
use crate::mmio::Mmio;
use crate::params::{ParamInfo, ParamKind, Params};

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
    pub(super) fn param(&self, what: &str) -> String {
        format!("BARRIER_{}_{what}", self.name.to_ascii_uppercase())
    }

    /// The device path from the parameters.
    pub fn device_path(&self, params: &Params) -> PathBuf {
        PathBuf::from(params.get(&self.param("DEVICE_PATH")).unwrap_or_else(|| self.default_path.into()))
    }

    pub(super) fn watchdog(&self, params: &Params) -> Duration {
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
        let software = flag::enable(ctx)?;
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
