//! The hierarchical backend (`hierarchical`): a barrier in three phases that keeps all but the
//! node roots off the network.
//!
//! 1. **Gather** within each node: the node's ranks signal up a k-ary tree
//!    (`BARRIER_HIER_RADIX`), each storing the epoch into its own cache-line-padded up-slot,
//!    which its parent reads ([`crate::algo::tree`]).
//! 2. **Among node roots** ([`internode`]): put-based dissemination over the transport,
//!    ⌈log2 nodes⌉ rounds for any node count, one network put per round per root; or a switch
//!    or GBA group whose members are the node roots only (`BARRIER_HIER_INTERNODE`).
//! 3. **Release** within each node: the root stores the epoch into the node's one release
//!    flag, which the node's other ranks wait on.
//!
//! Every slot only grows (it holds epochs), so nothing is reset between barriers and the
//! split-phase `ibarrier` works: `arrive` runs every step that does not wait (a leaf's up-slot
//! store; a root's first put), and `progress` resumes where the last wait stopped.
//!
//! # One node
//!
//! A communicator on one node (the backend forced there) has no phase among roots, and there a
//! gather and a release cost two hand-overs one after the other where the flat barrier of the
//! same ranks needs one (two ranks: 71 ns against 36 ns measured here, 2.0x). So on one node
//! the backend runs the node's flat barrier instead, the algorithm the software backend would
//! choose for those ranks and that wait policy ([`crate::algo::flag`]; `barrier info` says
//! which): the seed's structure pays where it keeps all but the roots off the network, and
//! only there.
//!
//! # Roles and slots
//!
//! A node's ranks are the communicator's members on it, in communicator order; the first is the
//! node root. Each rank's up- and down-slots are its lines of the communicator's region, so
//! communicators that overlap (a world and its splits) never share a slot. Intranode slots are
//! reached by CPU load and store (the shared-memory transport's model); internode puts go
//! through the transport the [`Fabric`] ranks first for the peer.
//!
//! # Selection
//!
//! Priority 50: below a flat hardware group (one device group for the whole communicator),
//! above the software backend. `auto` takes it when the communicator spans two or more nodes
//! and every node holds at least `BARRIER_HIER_THRESHOLD` of its ranks (default 2; a node with
//! one rank gains nothing from a tree); the facts are the same on every rank, so is the answer.
//! `BARRIER_BACKEND=hierarchical` forces it on any communicator (one node: no internode phase).
//!
//! # Faults
//!
//! The software phases wait like every software barrier (timeouts and stall reports name the
//! missing ranks). A device among the roots is the flat hardware driver's: a fault moves every
//! root, at one epoch, to the flat barrier and then to software dissemination among the roots.
//!
//! `BARRIER_HIER_DEBUG=1` prints, when the communicator is freed, each rank's time per phase
//! (across nodes: on one node there are no phases).

pub mod internode;

use std::time::{Duration, Instant};

use crate::backend::subset::SubsetOutcome;
use crate::backend::{Backend, Decline, EnableContext, Module, Poll, QueryContext};
use crate::error::Error;
use crate::params::{ParamInfo, ParamKind, Params};
use crate::shm::Shared;
use crate::transport::Fabric;
use crate::wait::Flag;

use internode::{RootsDevice, AUTO_DEVICES};

use crate::algo::dissemination::FabricDissemination;
use crate::algo::topology::Topology;
use crate::algo::tree::TreeSlots;

/// The backend's name.
pub const NAME: &str = "hierarchical";

/// Children per rank in the node trees when `BARRIER_HIER_RADIX` is not set (see
/// `docs/benchmark.md` for the measurement behind it).
pub const DEFAULT_RADIX: usize = 8;

const INTERNODE: [&str; 4] = ["auto", "dissemination", "switch", "gba"];

/// The hierarchical backend.
#[derive(Debug, Default)]
pub struct Hierarchical;

/// The settings every rank must share (rank 0's win).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Settings {
    radix: usize,
    /// Index into `INTERNODE`.
    internode: usize,
    debug: bool,
    /// Bit `i`: `AUTO_DEVICES[i]`'s `BARRIER_<NAME>_DISABLE` is set (auto skips it).
    disabled: u8,
}

impl Settings {
    fn load(params: &Params) -> Result<Settings, Error> {
        let radix = params.parse::<usize>("BARRIER_HIER_RADIX", DEFAULT_RADIX, "an integer from 1 to 64")?;
        let name = params.get("BARRIER_HIER_INTERNODE").unwrap_or_else(|| "auto".into());
        let internode =
            INTERNODE.iter().position(|c| c.eq_ignore_ascii_case(name.trim())).ok_or_else(|| Error::InvalidParam {
                name: "BARRIER_HIER_INTERNODE".into(),
                given_in: params.source("BARRIER_HIER_INTERNODE"),
                value: name.clone(),
                expected: format!("one of {}", INTERNODE.join(", ")),
            })?;
        let debug = params.flag("BARRIER_HIER_DEBUG")?;
        let mut disabled = 0;
        for (i, name) in AUTO_DEVICES.iter().enumerate() {
            if params.backend_disabled(name)? {
                disabled |= 1 << i;
            }
        }
        Ok(Settings { radix: radix.clamp(1, 64), internode, debug, disabled })
    }

    fn pack(self) -> u64 {
        self.radix as u64 | (self.internode as u64) << 8 | (self.debug as u64) << 16 | (self.disabled as u64) << 17
    }

    fn unpack(word: u64) -> Settings {
        Settings {
            radix: ((word & 0xff) as usize).clamp(1, 64),
            internode: ((word >> 8) & 0xff) as usize % INTERNODE.len(),
            debug: (word >> 16) & 1 == 1,
            disabled: ((word >> 17) & ((1 << AUTO_DEVICES.len()) - 1)) as u8,
        }
    }

    /// The names of the devices to try among the roots, in order (the same on every rank:
    /// rank 0's settings).
    fn devices(self) -> Vec<&'static str> {
        match INTERNODE[self.internode] {
            "dissemination" => vec![],
            "auto" => AUTO_DEVICES
                .iter()
                .enumerate()
                .filter(|&(i, _)| self.disabled & (1 << i) == 0)
                .map(|(_, &name)| name)
                .collect(),
            device => vec![device],
        }
    }
}

fn forced(params: &Params) -> bool {
    params.get("BARRIER_BACKEND").is_some_and(|b| b.split(',').any(|n| n.trim().eq_ignore_ascii_case(NAME)))
}

impl Backend for Hierarchical {
    fn name(&self) -> &'static str {
        NAME
    }

    fn default_priority(&self) -> i32 {
        50
    }

    fn description(&self) -> &'static str {
        "three phases: k-ary gather in each node, dissemination (or a switch/GBA group) among node roots, one release flag per node"
    }

    fn params(&self) -> Vec<ParamInfo> {
        vec![
            ParamInfo::new(
                "BARRIER_HIER_RADIX",
                DEFAULT_RADIX.to_string(),
                "Children per rank in each node's gather tree (1..=64; 64 or the node's size less one: the root reads every slot).",
            )
            .kind(ParamKind::Int { min: 1, max: 64 }),
            ParamInfo::new(
                "BARRIER_HIER_THRESHOLD",
                "2",
                "Automatic selection needs at least this many of the communicator's ranks on every node.",
            )
            .kind(ParamKind::Int { min: 1, max: i64::from(u32::MAX) }),
            ParamInfo::new(
                "BARRIER_HIER_INTERNODE",
                "auto",
                "Phase 2 among node roots: auto (a GBA or switch group of the roots when a device serves them all, \
                 else dissemination), dissemination, switch or gba.",
            )
            .kind(ParamKind::Choice(&INTERNODE)),
            ParamInfo::new(
                "BARRIER_HIER_DEBUG",
                "0",
                "1: print each rank's time per phase when a communicator is freed.",
            )
            .kind(ParamKind::Bool),
        ]
    }

    fn query(&self, ctx: &QueryContext<'_>) -> Result<(), Decline> {
        Settings::load(ctx.params).map_err(|e| Decline::new(e.to_string()))?;
        if forced(ctx.params) {
            return Ok(());
        }
        if ctx.nodes < 2 {
            return Err(Decline::new(
                "the communicator runs on one node (list hierarchical in BARRIER_BACKEND to force it)",
            ));
        }
        let threshold = ctx
            .params
            .parse::<usize>("BARRIER_HIER_THRESHOLD", 2, "a positive integer")
            .map_err(|e| Decline::new(e.to_string()))?;
        let mut ids: Vec<usize> = ctx.node_of.to_vec();
        ids.sort_unstable();
        let mut i = 0;
        while i < ids.len() {
            let count = ids[i..].iter().take_while(|&&n| n == ids[i]).count();
            if count < threshold {
                return Err(Decline::new(format!(
                    "node {} holds {count} rank(s) of this communicator, fewer than BARRIER_HIER_THRESHOLD={threshold}",
                    ids[i]
                )));
            }
            i += count;
        }
        Ok(())
    }

    fn enable(&self, ctx: &EnableContext<'_>) -> Result<Box<dyn Module>, Decline> {
        if ctx.query.nodes < 2 {
            return one_node(ctx).map(|m| Box::new(m) as Box<dyn Module>);
        }
        let q = &ctx.query;
        let coll = |e: Error| Decline::new(e.to_string());
        let local = Settings::load(q.params).map_err(coll)?;
        let settings = Settings::unpack(ctx.broadcast(0, local.pack()).map_err(coll)?);
        let topo = Topology::new(q.node_of, q.rank, settings.radix);
        let fabric = ctx.fabric();
        if !ctx.all_agree(fabric.is_ok()).map_err(coll)? {
            return Err(Decline::new(
                fabric.err().map_or("the transports could not be set up on another rank".into(), |e| e.to_string()),
            ));
        }
        let fabric = fabric.map_err(coll)?;

        // Phase 2: a device group of the roots if asked for (or, with auto, if one serves them
        // all), else dissemination over the transport.
        let mut internode = Internode::None;
        let mut label = String::from("none (one node)");
        if topo.nodes() > 1 {
            let devices = settings.devices();
            let explicit = settings.internode >= 2;
            let mut why = Vec::new();
            for name in devices {
                match internode::enable_device(ctx, name, &topo)? {
                    SubsetOutcome::Member(device) => {
                        label = format!("{name} {}", device.module().algorithm());
                        internode = Internode::Device(device);
                        break;
                    }
                    SubsetOutcome::NotMember => {
                        label = format!("{name} group of the node roots");
                        internode = Internode::Remote;
                        break;
                    }
                    SubsetOutcome::Declined(reason) if explicit => {
                        return Err(Decline::new(format!(
                            "BARRIER_HIER_INTERNODE={}: {reason}",
                            INTERNODE[settings.internode]
                        )))
                    }
                    SubsetOutcome::Declined(reason) => why.push(format!("{name}: {reason}")),
                }
            }
            if matches!(internode, Internode::None) {
                if !why.is_empty() {
                    tracing::debug!(reasons = ?why, "hierarchical: no device among the node roots");
                }
                let diss = FabricDissemination::enable(ctx, &fabric, topo.roots())?;
                // The transport between two nodes, as seen from this node (the same on every rank).
                let my_node = topo.root_index(topo.rank_of(0)).expect("the root is a root");
                let other = ctx.peer(topo.roots()[(my_node + 1) % topo.nodes()]);
                label = format!("dissemination over {}", fabric.route(other).map_or("?", |t| t.name()));
                internode = match diss {
                    Some(d) => Internode::Dissemination(d),
                    None => Internode::Remote,
                };
            }
        }

        // Phases 1 and 3: this rank's slots in the communicator's region (the node's release
        // flag is its root's down-slot, which no tree of the region writes otherwise).
        let tree = crate::algo::topology::node_slots(ctx.region, &topo);
        let algorithm = format!("radix {}; roots: {label}", settings.radix);
        let net_recheck = match &internode {
            Internode::Dissemination(d) if d.needs_progress() => Some(crate::transport::PROGRESS_SLICE),
            _ => None,
        };
        Ok(Box::new(HierModule {
            net_recheck,
            wake: ctx.policy.wakes(),
            tree,
            internode,
            phase: Phase::Done,
            next_child: 0,
            fabric,
            algorithm,
            inner_algorithm: String::new(),
            clock: settings.debug.then(|| PhaseClock::new(q.rank, q.node, topo.me)),
        }))
    }
}

/// What this rank does in phase 2.
#[derive(Debug)]
enum Internode {
    /// One node: nothing.
    None,
    /// Not a root: the roots do it.
    Remote,
    /// A root in the dissemination among roots.
    Dissemination(FabricDissemination),
    /// A root in a device group of the roots.
    Device(RootsDevice),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Gather,
    Internode,
    Release,
    Done,
}

/// The hierarchical backend on a communicator within one node: the node's flat barrier (see
/// the module docs), labelled as this backend's choice. The selector runs it without the
/// indirection of a boxed module.
pub(crate) fn one_node(ctx: &EnableContext<'_>) -> Result<crate::algo::flag::SoftwareModule, Decline> {
    Settings::load(ctx.query.params).map_err(|e| Decline::new(e.to_string()))?;
    Ok(crate::algo::flag::enable(ctx)?.labelled(|algorithm| format!("one node: flat {algorithm}")))
}

/// `BARRIER_HIER_DEBUG`: time per phase.
#[derive(Debug)]
struct PhaseClock {
    rank: usize,
    node: usize,
    local: usize,
    mark: Instant,
    totals: [Duration; 3],
    barriers: u64,
}

impl PhaseClock {
    fn new(rank: usize, node: usize, local: usize) -> Self {
        PhaseClock { rank, node, local, mark: Instant::now(), totals: [Duration::ZERO; 3], barriers: 0 }
    }

    fn start(&mut self) {
        self.mark = Instant::now();
        self.barriers += 1;
    }

    fn lap(&mut self, phase: usize) {
        let now = Instant::now();
        self.totals[phase] += now - self.mark;
        self.mark = now;
    }
}

impl Drop for PhaseClock {
    fn drop(&mut self) {
        let per = |d: Duration| d.as_nanos() as f64 / self.barriers.max(1) as f64;
        crate::text::say(&format!(
            "barrier: hierarchical rank {} (node {}, local rank {}): {} barriers; per barrier: gather {:.0} ns, \
             internode {:.0} ns, release {:.0} ns",
            self.rank,
            self.node,
            self.local,
            self.barriers,
            per(self.totals[0]),
            per(self.totals[1]),
            per(self.totals[2])
        ));
    }
}

/// One rank's hierarchical barrier on one communicator.
#[derive(Debug)]
pub struct HierModule {
    wake: bool,
    tree: TreeSlots<Shared<Flag>>,
    internode: Internode,
    phase: Phase,
    next_child: usize,
    fabric: Fabric,
    algorithm: String,
    /// The roots' dissemination uses a transport that needs this rank's progress calls: how
    /// often to be called back while waiting in phase 2.
    net_recheck: Option<Duration>,
    /// The device module's algorithm when `algorithm` was last written (it changes on a fault,
    /// and is looked at when the next barrier starts).
    inner_algorithm: String,
    clock: Option<PhaseClock>,
}

/// Phase 1 is done: a root starts phase 2 (what comes next).
fn start_internode(internode: &mut Internode, epoch: u64, wake: bool) -> Result<Phase, Error> {
    match internode {
        Internode::None | Internode::Remote => return Ok(Phase::Release),
        Internode::Dissemination(d) => d.start(epoch, wake)?,
        Internode::Device(d) => d.module_mut().arrive(epoch)?,
    }
    Ok(Phase::Internode)
}

impl HierModule {
    /// Keeps the reported algorithm in step with the device's (which changes on a fault).
    fn note_device_algorithm(&mut self) {
        if let Internode::Device(d) = &self.internode {
            let now = d.module().algorithm();
            if now != self.inner_algorithm {
                let base = self.algorithm.split("; roots: ").next().unwrap_or_default().to_string();
                self.algorithm = format!("{base}; roots: {} {now}", d.name());
                self.inner_algorithm = now.to_string();
            }
        }
    }
}

impl Module for HierModule {
    fn algorithm(&self) -> &str {
        &self.algorithm
    }

    fn network_ops(&self) -> u64 {
        let device = match &self.internode {
            Internode::Device(d) => d.module().network_ops(),
            _ => 0,
        };
        self.fabric.network_ops() + device
    }

    fn arrive(&mut self, epoch: u64) -> Result<(), Error> {
        self.note_device_algorithm();
        self.phase = Phase::Gather;
        self.next_child = 0;
        if let Some(c) = &mut self.clock {
            c.start();
        }
        // Everything that does not wait: a leaf's up-slot, a childless root's first put.
        self.progress(epoch).map(|_| ())
    }

    fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        if self.phase == Phase::Gather {
            if let Err(flag) = self.tree.gather(&mut self.next_child, epoch, self.wake) {
                return Ok(Poll::pending(flag, epoch));
            }
            if let Some(c) = &mut self.clock {
                c.lap(0);
            }
            self.phase = start_internode(&mut self.internode, epoch, self.wake)?;
        }
        // `last` saves the call after the final wait; the phase clock needs that call.
        let leaf = !self.tree.has_children() && self.clock.is_none();
        if self.phase == Phase::Internode {
            match &mut self.internode {
                Internode::Dissemination(d) => {
                    // A transport that needs the initiator's help gets it on every call, and the
                    // phase ends only once this root's puts have landed (no `last` shortcut).
                    if self.net_recheck.is_some() {
                        self.fabric.progress();
                    }
                    if let Some((flag, last_round)) = d.progress(epoch, self.wake)? {
                        if self.net_recheck.is_some() {
                            // The put this call just queued goes out now, not a slice later.
                            self.fabric.progress();
                        }
                        let last = last_round && leaf && self.net_recheck.is_none();
                        return Ok(Poll::Pending {
                            flag,
                            target: epoch,
                            recheck: self.net_recheck,
                            last,
                            spin: None,
                            park: false,
                        });
                    }
                    if self.net_recheck.is_some() {
                        self.fabric.flush()?;
                    }
                }
                Internode::Device(d) => {
                    if let Poll::Pending { flag, target, recheck, last, spin, park } = d.module_mut().progress(epoch)? {
                        return Ok(Poll::Pending { flag, target, recheck, last: last && leaf, spin, park });
                    }
                }
                Internode::None | Internode::Remote => {}
            }
            if let Some(c) = &mut self.clock {
                c.lap(1);
            }
            self.phase = Phase::Release;
        }
        if self.phase == Phase::Release {
            if let Err(flag) = self.tree.release(epoch, self.wake) {
                // A rank that waits for the release has nothing left to do after it.
                let last = self.clock.is_none();
                return Ok(Poll::wait_for(flag, epoch, last));
            }
            if let Some(c) = &mut self.clock {
                c.lap(2);
            }
            self.phase = Phase::Done;
        }
        Ok(Poll::Ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_finds_roots_and_local_ranks_in_any_member_order() {
        // A split with reversed keys: communicator ranks 0..6 on nodes 2,2,1,1,0,0.
        let node_of = [2, 2, 1, 1, 0, 0];
        let t = Topology::new(&node_of, 3, 4);
        assert_eq!(t.roots(), &[4, 2, 0]);
        assert_eq!(t.local, vec![2, 3]);
        assert_eq!(t.me, 1);
        assert_eq!(t.root_index(2), Some(1));
        assert_eq!(t.root_index(3), None);
    }

    #[test]
    fn settings_survive_the_exchange() {
        for s in [
            Settings { radix: 1, internode: 0, debug: false, disabled: 0b01 },
            Settings { radix: 64, internode: 3, debug: true, disabled: 0b10 },
        ] {
            assert_eq!(Settings::unpack(s.pack()), s);
        }
    }
}
