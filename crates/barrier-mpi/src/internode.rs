//! The node roots' link over MPI, for the core's composer ([`barrier::hierarchy`]), which runs
//! the roots' phase (its rounds, waits, reports and the choice between ours and MPI's own).
//!
//! * **Our rounds**: a [`ChannelLink`] over MPI's own point-to-point on the roots' private
//!   communicator (one message per round to the round's partner; see `channel.rs`). Nothing is
//!   exchanged to set it up: a root is named by its rank there, its node's index.
//! * **MPI's own barrier among the roots** (`BARRIER_MPI_INTERNODE`, issue 42 item 3): an MPI
//!   whose barrier is tuned for its network can beat our rounds over MPI point-to-point (over
//!   the kernel's TCP between namespaces, at one rank per node, Open MPI's barrier took 9.9 µs
//!   against our rounds' 11.0). It is `MPI_Barrier` on a private duplicate of the roots'
//!   communicator, and `MPI_Ibarrier`, tested, for split-phase barriers and for blocking ones
//!   under a timeout. As with MPI's own barriers, a barrier is then blocking on every rank or
//!   split-phase on every rank (MPI matches no blocking collective with a non-blocking one; our
//!   rounds allow a mix).

use std::ffi::c_int;

use barrier::hierarchy::{Choice, Names, OwnBarrier, OwnPending, Roots, RootsWaits, Way};
use barrier::Result;

use crate::channel::{Carrier, ChannelLink};
use crate::raw::{self, Comm, OwnedComm};

/// The value of `BARRIER_MPI_INTERNODE` that picks MPI's own barrier.
pub(crate) const OWN: &str = "mpi";

/// The tag of our rounds' messages on the roots' private communicator.
const TAG: c_int = 0x6261;

/// MPI's own barrier on a private duplicate of the roots' communicator.
#[derive(Debug)]
struct MpiOwn(OwnedComm);

#[derive(Debug)]
struct MpiPending(raw::Request);

// SAFETY: a plain MPI handle, used only through the `BarrierComm` that holds the hierarchy,
// whose own `Send` says why moving it to another thread makes no MPI call there.
unsafe impl Send for MpiOwn {}
// SAFETY: as `MpiOwn`'s: a plain MPI request of the same `BarrierComm`'s hierarchy.
unsafe impl Send for MpiPending {}

impl OwnPending for MpiPending {
    fn test(&mut self) -> Result<bool> {
        raw::test(&mut self.0)
    }
}

impl OwnBarrier for MpiOwn {
    fn name(&self) -> &'static str {
        "MPI's barrier"
    }

    fn split_name(&self) -> &'static str {
        "MPI_Ibarrier"
    }

    fn barrier(&self) -> Result<()> {
        raw::barrier(self.0 .0)
    }

    fn start(&self) -> Result<Option<Box<dyn OwnPending>>> {
        Ok(Some(Box::new(MpiPending(raw::ibarrier(self.0 .0)?))))
    }
}

/// Where a root is: its rank in the barrier communicator and that communicator's size, and
/// where the timeout was given (for reports).
#[derive(Clone, Debug)]
pub(crate) struct RootPlace {
    pub rank: usize,
    pub size: usize,
    pub limit: String,
}

/// Sets up a root's side of the roots' phase (collective over `roots`, the private communicator
/// of the node roots, which outlives the link). `injected`: a failure to take in place of the
/// set-up (BARRIER_MPI_FAULT). `choice`: rank 0's `BARRIER_MPI_INTERNODE`, the same on every root
/// (MPI's way needs a communicator of its own; our rounds alone need none).
pub(crate) fn set_up(
    roots: Comm,
    place: RootPlace,
    waits: RootsWaits,
    choice: Choice,
    injected: Result<()>,
) -> Result<Roots<ChannelLink>> {
    let index = raw::rank(roots)?;
    let nodes = raw::size(roots)?;
    let world = raw::world_ranks(roots)?;
    // Each root's communicator rank, and whether its set-up went well: a root that failed must
    // not leave the others waiting in the collective below. It alone returns its error, so that
    // the layer's agreement that follows names it, not the lowest root.
    let rows = raw::allgather(roots, &[place.rank as u64, u64::from(injected.is_ok())])?;
    injected?;
    let own = match choice {
        Choice::Fixed(Way::Ours) | Choice::OursForReports => None,
        _ if rows.iter().any(|row| row[1] == 0) => None,
        _ => Some(Box::new(MpiOwn(OwnedComm(raw::dup(roots)?))) as Box<dyn OwnBarrier>),
    };
    let members: Vec<(usize, usize)> = (0..nodes).map(|j| (rows[j][0] as usize, world[j])).collect();
    let names = names(place, world[index], index, &members, node_root);
    let link = ChannelLink::new(roots, TAG, Carrier::Mpi, (0..nodes).collect(), index);
    Ok(Roots::new(link, own, names, waits))
}

/// How the roots' reports name things under MPI: this rank (`place`, `world_rank`) as member
/// `index` of `members` (each its communicator rank and world rank), each named by `name`.
pub(crate) fn names(
    place: RootPlace,
    world_rank: usize,
    index: usize,
    members: &[(usize, usize)],
    name: fn(usize, usize) -> String,
) -> Names {
    Names {
        layer: "barrier",
        member: "rank",
        me: format!("world rank {world_rank} (rank {} of a communicator of {} ranks)", place.rank, place.size),
        index,
        rank: place.rank,
        world_rank,
        size: place.size,
        roots: members.iter().map(|&(rank, world)| name(rank, world)).collect(),
        root_ranks: members.to_vec(),
        limit: place.limit,
        setting: "BARRIER_MPI_INTERNODE",
        flat: false,
    }
}

/// A node root, as the reports name it.
pub(crate) fn node_root(rank: usize, world_rank: usize) -> String {
    format!("the node root at world rank {world_rank} (communicator rank {rank})")
}
