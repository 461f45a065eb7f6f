//! The hierarchical backend (`hierarchical`): a barrier in three phases that keeps all but the
//! node roots off the network.
//!
//! Across nodes it is the composer's hierarchy ([`crate::compose`], the one that barrier-mpi
//! and barrier-openshmem run too) over two things this backend provides:
//!
//! 1. **The node's communicator**: the communicator being made is split into its nodes, each
//!    made as the node's two halves (`algo/halves.rs`): the gather, in which the node's
//!    ranks signal up a k-ary tree (`BARRIER_HIER_RADIX`), each storing the epoch into its own
//!    cache-line-padded up-slot; and the release, the root's store into the node's one release
//!    flag, which the node's other ranks wait on.
//! 2. **The roots' link** ([`roots::FabricLink`]): put-based dissemination over the simulated
//!    network's transports, ⌈log2 nodes⌉ rounds for any node count, one network put per round
//!    per root, into the round's slot of this communicator's region. Or a switch or GBA group
//!    whose members are the node roots only (`BARRIER_HIER_INTERNODE`): a communicator of the
//!    roots with that backend, which the composer runs as the roots' own barrier
//!    (`comm/composed.rs`).
//!
//! The composer runs the rest, as it does for MPI and OpenSHMEM: the order of the phases, a
//! rank alone on its node (the roots' phase alone), split-phase flights, the roots' waits
//! (polling the slot, spinning; or, where the wait policy parks, sleeping on it through
//! the wait layer, the put waking them) with their timeout and stall report (naming the node
//! root waited for), and the rule that a failed barrier breaks the communicator. Slots only grow (they hold epochs), so
//! nothing is reset between barriers.
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
//! node root. The node's halves have a region of their own, so communicators that overlap (a
//! world and its splits) never share a slot. Intranode slots are reached by CPU load and store
//! (the shared-memory transport's model); internode puts go through the transport the
//! [`crate::transport::Fabric`] ranks first for the peer.
//!
//! # Selection
//!
//! Priority 50: below a flat hardware group (one device group for the whole communicator),
//! above the software backend. `auto` takes it when the communicator spans two or more nodes
//! and every node holds at least `BARRIER_HIER_THRESHOLD` of its ranks (default 2; a node with
//! one rank gains nothing from a tree); the facts are the same on every rank, so is the answer.
//! `BARRIER_BACKEND=hierarchical` forces it on any communicator (one node: no internode phase).
//! Across nodes the selector builds the composition (`comm/create.rs`'s `compose`) where it enables other
//! backends' modules: it waits in its own parts, so it is not a module.
//!
//! # Faults
//!
//! The node's halves wait like every core communicator (timeouts and stall reports name the
//! missing ranks); the roots' phase names the node root it waits for, and a root that left or
//! exited fails it at once. A device among the roots is the flat hardware driver's: a fault
//! moves every root, at one epoch, to the flat barrier and then to software dissemination
//! among the roots.
//!
//! `BARRIER_HIER_DEBUG=1` prints, when the communicator is freed, each rank's time per phase
//! (across nodes: on one node there are no phases).

pub mod roots;

use crate::backend::{Backend, Decline, EnableContext, Module, QueryContext};
use crate::error::Error;
use crate::params::{ParamInfo, ParamKind, Params};

/// The backend's name.
pub const NAME: &str = "hierarchical";

/// Children per rank in the node trees when `BARRIER_HIER_RADIX` is not set (see
/// `docs/benchmark.md` for the measurement behind it).
pub const DEFAULT_RADIX: usize = 8;

const INTERNODE: [&str; 4] = ["auto", "dissemination", "switch", "gba"];

/// The devices `BARRIER_HIER_INTERNODE=auto` tries among the roots, in the order of their
/// default priorities (GBA 100, switch 90), skipping any whose `BARRIER_<NAME>_DISABLE` is set.
/// Named as strings, the values of the setting: this backend imports no other.
const AUTO_DEVICES: [&str; 2] = ["gba", "switch"];

/// The hierarchical backend.
#[derive(Debug, Default)]
pub struct Hierarchical;

/// The settings every rank must share (rank 0's win).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    pub radix: usize,
    /// Index into `INTERNODE`.
    internode: usize,
    pub debug: bool,
    /// Bit `i`: `AUTO_DEVICES[i]`'s `BARRIER_<NAME>_DISABLE` is set (auto skips it).
    disabled: u8,
}

impl Settings {
    pub fn load(params: &Params) -> Result<Settings, Error> {
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

    pub fn pack(self) -> u64 {
        self.radix as u64 | (self.internode as u64) << 8 | (self.debug as u64) << 16 | (self.disabled as u64) << 17
    }

    pub fn unpack(word: u64) -> Settings {
        Settings {
            radix: ((word & 0xff) as usize).clamp(1, 64),
            internode: ((word >> 8) & 0xff) as usize % INTERNODE.len(),
            debug: (word >> 16) & 1 == 1,
            disabled: ((word >> 17) & ((1 << AUTO_DEVICES.len()) - 1)) as u8,
        }
    }

    /// `BARRIER_HIER_INTERNODE` names a device (not `auto` or `dissemination`): its failure is
    /// the backend's, not a reason to go on without it.
    pub fn explicit_device(self) -> Option<&'static str> {
        (self.internode >= 2).then_some(INTERNODE[self.internode])
    }

    /// The names of the devices to try among the roots, in order (the same on every rank:
    /// rank 0's settings).
    pub fn devices(self) -> Vec<&'static str> {
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
        Err(Decline::new(
            "across nodes the hierarchical barrier is a composition of communicators, which the selector builds \
             (compose), not a module",
        ))
    }
}

/// The hierarchical backend on a communicator within one node: the node's flat barrier (see
/// the module docs), labelled as this backend's choice. The selector runs it without the
/// indirection of a boxed module.
pub(crate) fn one_node(ctx: &EnableContext<'_>) -> Result<crate::algo::flag::SoftwareModule, Decline> {
    Settings::load(ctx.query.params).map_err(|e| Decline::new(e.to_string()))?;
    Ok(crate::algo::flag::enable(ctx)?.labelled(|algorithm| format!("one node: flat {algorithm}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::topology::Topology;

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
