//! Phase 2 of the hierarchical barrier: the node roots, one per node, and nobody else.
//!
//! * **dissemination** over the transport: ⌈log2 nodes⌉ rounds; in round `r` root `j` puts the
//!   epoch into round-`r` slot of root `(j + 2^r) mod nodes` and waits for its own round-`r`
//!   slot (the software backend's
//!   `FabricDissemination` among the roots). Slots only grow, so
//!   nothing is reset between barriers and no put is spent on a reset.
//! * **a hardware group of the roots** (`switch` or `gba`): the same driver as the flat hardware
//!   backends, enabled on a communicator-like context that holds only the roots (their own
//!   region in the job segment, their own control plane). Each root sends one arrival per
//!   barrier and polls its release flag; a 4,096-rank job on 128 nodes needs one 128-member
//!   group. A device fault is the driver's: every root leaves the device at the same epoch for
//!   the flat barrier and then software dissemination among the roots, so ranks below the roots
//!   never notice.

use std::cell::Cell;

use crate::backend::{Backend, Decline, EnableContext, Module, QueryContext};
use crate::backends::offload::HwBackend;
use crate::error::Error;
use crate::region::Region;

use crate::algo::topology::Topology;

/// The roots' own region, left when the root's module goes (the last root out frees it).
#[derive(Debug)]
pub(super) struct RootsRegion {
    region: Region,
    index: usize,
}

impl Drop for RootsRegion {
    fn drop(&mut self) {
        self.region.depart(self.index, 0, false);
    }
}

/// A hardware group of the node roots.
#[derive(Debug)]
pub(super) struct RootsDevice {
    /// The device kind (`switch`, `gba`).
    pub kind: &'static str,
    /// The driver's module over the roots (dropped before the region it lives in).
    pub module: Box<dyn Module>,
    _region: RootsRegion,
}

/// Why a device could not serve the roots (agreed: the same on every rank), or a failed
/// collective.
pub(super) enum DeviceOutcome {
    /// Runs on this rank (a root).
    Root(RootsDevice),
    /// Runs on the roots; this rank is not one.
    NotRoot,
    /// Declined, with the reason.
    Declined(String),
}

/// Tries to enable `backend` on a group of the node roots. Collective over the whole
/// communicator; every rank returns the same variant (`Root` on roots, `NotRoot` elsewhere)
/// or the same decline.
pub(super) fn enable_device(
    ctx: &EnableContext<'_>,
    backend: &'static HwBackend,
    topo: &Topology,
) -> Result<DeviceOutcome, Decline> {
    let q = &ctx.query;
    let coll = |e: Error| Decline::new(e.to_string());
    let root_members: Vec<usize> = topo.roots().iter().map(|&r| q.members[r]).collect();
    let root_nodes: Vec<usize> = topo.roots().iter().map(|&r| q.node_of[r]).collect();
    let me = topo.root_index(q.rank);
    let roots_query = |index: usize| QueryContext {
        rank: index,
        size: topo.nodes(),
        job: q.job,
        nodes: topo.nodes(),
        node: q.node,
        members: &root_members,
        node_of: &root_nodes,
        one_process: q.one_process,
        params: q.params,
    };
    // 1. Can every root use the device? (A cheap local check on each root, agreed.)
    let usable = match me {
        Some(j) => backend.query(&roots_query(j)).map_err(|d| d.0),
        None => Ok(()),
    };
    let all = ctx.allgather(&[usable.is_ok() as u64]).map_err(coll)?;
    if let Some(bad) = all.iter().position(|w| w[0] == 0) {
        return Ok(DeviceOutcome::Declined(usable.err().unwrap_or_else(|| {
            format!("node root rank {bad} (world rank {}) cannot use the {} device", q.members[bad], backend.name)
        })));
    }
    // 2. The roots' region, made by rank 0 (always a root: the lowest rank of its node), which
    //    leaves it whatever happens next. (If the broadcast itself fails, the control plane is
    //    broken, creating the communicator fails, and the region is lost with it.)
    const NO_REGION: u64 = u64::MAX;
    let created = if q.rank == 0 { Region::create(ctx.region.segment(), topo.nodes()).ok() } else { None };
    let creator_guard =
        created.as_ref().zip(me).map(|(r, j)| RootsRegion { region: r.clone(), index: j });
    let base = ctx.broadcast(0, created.as_ref().map_or(NO_REGION, |r| r.base() as u64)).map_err(coll)?;
    if base == NO_REGION {
        return Ok(DeviceOutcome::Declined("the job segment has no room for the node roots' region".into()));
    }
    // 3. The other roots attach (agreed, so that no root enters the roots' collectives alone).
    //    A root that attached leaves the region whatever happens next; rank 0 leaves it on behalf
    //    of any root that could not attach, so the last one out still frees it.
    let region: Option<Result<Region, String>> = me.map(|_| match &created {
        Some(r) => Ok(r.clone()),
        None => Region::attach(ctx.region.segment(), base as usize, topo.nodes()).map_err(|e| e.to_string()),
    });
    let guard = match (&region, me) {
        (Some(Ok(_)), Some(_)) if creator_guard.is_some() => creator_guard,
        (Some(Ok(r)), Some(j)) => Some(RootsRegion { region: r.clone(), index: j }),
        _ => None,
    };
    let attached = ctx.allgather(&[region.as_ref().is_none_or(|r| r.is_ok()) as u64]).map_err(coll)?;
    if attached.iter().any(|w| w[0] == 0) {
        if let Some(r) = &created {
            for (rank, _) in attached.iter().enumerate().filter(|(_, w)| w[0] == 0) {
                if let Some(k) = topo.root_index(rank) {
                    r.depart(k, 0, true);
                }
            }
        }
        drop(guard);
        return Ok(DeviceOutcome::Declined(match region {
            Some(Err(why)) => why,
            _ => "a node root could not attach to the roots' region".into(),
        }));
    }
    // 4. The roots enable the device among themselves, with their own control plane.
    let attempt: Option<Result<RootsDevice, String>> = match (region, me, guard) {
        (Some(Ok(region)), Some(j), Some(guard)) => {
            let epoch = Cell::new(0);
            let ctrl = ctx.ctrl.over(&region, j, &root_members, &epoch);
            let rctx = EnableContext { query: roots_query(j), policy: ctx.policy, ctrl: &ctrl, region: &region };
            Some(backend.enable(&rctx).map(|module| RootsDevice { kind: backend.name, module, _region: guard }).map_err(|d| d.0))
        }
        _ => None,
    };
    let ok = attempt.as_ref().is_none_or(|a| a.is_ok());
    if !ctx.all_agree(ok).map_err(coll)? {
        let why = match attempt {
            Some(Err(why)) => why,
            _ => format!("enabling the {} group of the node roots failed on a root", backend.name),
        };
        return Ok(DeviceOutcome::Declined(why));
    }
    Ok(match attempt {
        Some(Ok(device)) => DeviceOutcome::Root(device),
        _ => DeviceOutcome::NotRoot,
    })
}
