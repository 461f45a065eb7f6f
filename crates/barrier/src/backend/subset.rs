//! Running any backend on a subset of a communicator's ranks: the members of the subset get a
//! region of their own in the job segment and a control plane over it, and enable the backend
//! among themselves as if they were a communicator; the other ranks only take part in the
//! agreements around it. The hierarchical backend runs a switch or GBA group of its node roots
//! this way (Open MPI's `han` composes its up and low modules through sub-communicators the
//! same way), naming the backend, never importing it.
//!
//! # Protocol (collective over the whole communicator)
//!
//! 1. Every member of the subset queries the backend with a context that holds only the subset
//!    (its rank is its index in the subset); the answers are agreed.
//! 2. The subset's first member creates the subset's region and broadcasts its offset.
//! 3. The other members attach to it; agreed, so that no member enters the subset's collectives
//!    alone. The creator leaves the region on behalf of a member that could not attach, so the
//!    last one out still frees it.
//! 4. The members enable the backend with their own control plane; the outcome is agreed.
//!
//! Every rank returns the same variant ([`SubsetOutcome::Member`] on members,
//! [`SubsetOutcome::NotMember`] elsewhere) or the same decline.

use std::cell::Cell;

use super::component::{Backend, Decline, EnableContext, QueryContext};
use super::module::Module;
use crate::error::Error;
use crate::region::Region;

/// The subset's own region, left when the member's module goes (the last member out frees it).
#[derive(Debug)]
struct SubsetRegion {
    region: Region,
    index: usize,
}

impl Drop for SubsetRegion {
    fn drop(&mut self) {
        self.region.depart(self.index, 0, false);
    }
}

/// A backend's module over a subset of the ranks, on one member. The module and the subset's
/// region stay together (the module is dropped first, then this member leaves the region), so
/// neither is handed out by value.
#[derive(Debug)]
pub struct SubsetModule {
    name: &'static str,
    module: Box<dyn Module>,
    _region: SubsetRegion,
}

impl SubsetModule {
    /// The backend's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The backend's module over the subset.
    pub fn module(&self) -> &dyn Module {
        &*self.module
    }

    /// The backend's module over the subset, to drive.
    pub fn module_mut(&mut self) -> &mut dyn Module {
        &mut *self.module
    }
}

/// What [`enable_on_subset`] agreed on.
#[derive(Debug)]
pub enum SubsetOutcome {
    /// Runs on this rank, a member of the subset.
    Member(SubsetModule),
    /// Runs on the subset; this rank is not in it.
    NotMember,
    /// Declined, with the reason (the same on every rank).
    Declined(String),
}

/// Tries to enable `backend` on the communicator ranks `subset` (distinct, at least one; member `j`
/// is `subset[j]`, and `subset[0]` creates the region).
/// Collective over the whole communicator: every rank returns the same variant (`Member` on the
/// subset's ranks, `NotMember` elsewhere) or the same decline. `Err` only when a collective of
/// the communicator itself failed.
pub fn enable_on_subset(
    ctx: &EnableContext<'_>,
    backend: &'static dyn Backend,
    subset: &[usize],
) -> Result<SubsetOutcome, Decline> {
    let q = &ctx.query;
    let coll = |e: Error| Decline::new(e.to_string());
    let Some(&first) = subset.first() else {
        return Ok(SubsetOutcome::Declined(format!("no ranks to run the {} backend on", backend.name())));
    };
    // The same subset on every rank, so the same answer: no rank enters a collective alone.
    let mut sorted = subset.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != subset.len() || sorted.last().is_some_and(|&r| r >= q.size) {
        return Ok(SubsetOutcome::Declined(format!(
            "the subset {subset:?} for the {} backend repeats a rank or names one outside the {} ranks",
            backend.name(),
            q.size
        )));
    }
    let subset_members: Vec<usize> = subset.iter().map(|&r| q.members[r]).collect();
    let subset_nodes: Vec<usize> = subset.iter().map(|&r| q.node_of[r]).collect();
    let mut distinct = subset_nodes.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let me = subset.iter().position(|&r| r == q.rank);
    let subset_query = |index: usize| QueryContext {
        rank: index,
        size: subset.len(),
        job: q.job,
        nodes: distinct.len(),
        node: q.node,
        members: &subset_members,
        node_of: &subset_nodes,
        one_process: q.one_process,
        params: q.params,
    };
    // 1. Can every member use the backend? (A cheap local check on each member, agreed.)
    let usable = match me {
        Some(j) => backend.query(&subset_query(j)).map_err(|d| d.0),
        None => Ok(()),
    };
    let all = ctx.allgather(&[usable.is_ok() as u64]).map_err(coll)?;
    if let Some(bad) = all.iter().position(|w| w[0] == 0) {
        return Ok(SubsetOutcome::Declined(usable.err().unwrap_or_else(|| {
            format!("rank {bad} (world rank {}) cannot use the {} backend", q.members[bad], backend.name())
        })));
    }
    // 2. The subset's region, made by its first member, which leaves it whatever happens next.
    //    (If the broadcast itself fails, the control plane is broken, creating the communicator
    //    fails, and the region is lost with it.)
    const NO_REGION: u64 = u64::MAX;
    let created = if q.rank == first { Region::create(ctx.region.segment(), subset.len()).ok() } else { None };
    let creator_guard = created.as_ref().zip(me).map(|(r, j)| SubsetRegion { region: r.clone(), index: j });
    let base = ctx.broadcast(first, created.as_ref().map_or(NO_REGION, |r| r.base() as u64)).map_err(coll)?;
    if base == NO_REGION {
        return Ok(SubsetOutcome::Declined(format!(
            "the job segment has no room for a region of {} ranks",
            subset.len()
        )));
    }
    // 3. The other members attach (agreed, so that no member enters the subset's collectives
    //    alone). A member that attached leaves the region whatever happens next; the creator
    //    leaves it on behalf of any member that could not attach, so the last one out frees it.
    let region: Option<Result<Region, String>> = me.map(|_| match &created {
        Some(r) => Ok(r.clone()),
        None => Region::attach(ctx.region.segment(), base as usize, subset.len()).map_err(|e| e.to_string()),
    });
    let guard = match (&region, me) {
        (Some(Ok(_)), Some(_)) if creator_guard.is_some() => creator_guard,
        (Some(Ok(r)), Some(j)) => Some(SubsetRegion { region: r.clone(), index: j }),
        _ => None,
    };
    let attached = ctx.allgather(&[region.as_ref().is_none_or(|r| r.is_ok()) as u64]).map_err(coll)?;
    if attached.iter().any(|w| w[0] == 0) {
        if let Some(r) = &created {
            for (rank, _) in attached.iter().enumerate().filter(|(_, w)| w[0] == 0) {
                if let Some(k) = subset.iter().position(|&s| s == rank) {
                    r.depart(k, 0, true);
                }
            }
        }
        drop(guard);
        return Ok(SubsetOutcome::Declined(match region {
            Some(Err(why)) => why,
            _ => format!("a rank of the {} subset could not attach to its region", backend.name()),
        }));
    }
    // 4. The members enable the backend among themselves, with their own control plane.
    let attempt: Option<Result<SubsetModule, String>> = match (region, me, guard) {
        (Some(Ok(region)), Some(j), Some(guard)) => {
            let epoch = Cell::new(0);
            let ctrl = ctx.ctrl.over(&region, j, &subset_members, &epoch);
            let sub = EnableContext {
                query: subset_query(j),
                policy: ctx.policy,
                ctrl: &ctrl,
                region: &region,
                backends: ctx.backends,
            };
            Some(
                backend
                    .enable(&sub)
                    .map(|module| SubsetModule { name: backend.name(), module, _region: guard })
                    .map_err(|d| d.0),
            )
        }
        _ => None,
    };
    let ok = attempt.as_ref().is_none_or(|a| a.is_ok());
    if !ctx.all_agree(ok).map_err(coll)? {
        let why = match attempt {
            Some(Err(why)) => why,
            _ => format!("enabling the {} backend on a subset of the ranks failed on one of them", backend.name()),
        };
        return Ok(SubsetOutcome::Declined(why));
    }
    Ok(match attempt {
        Some(Ok(module)) => SubsetOutcome::Member(module),
        _ => SubsetOutcome::NotMember,
    })
}
