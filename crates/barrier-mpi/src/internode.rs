//! The node roots' link over MPI, for the core's composer ([`barrier::hierarchy`]), which runs
//! the roots' phase (its rounds, waits, reports and the choice between ours and MPI's own).
//!
//! * **Our rounds**: each root registers its row of round slots (the [`MpiTransport`]'s inbox)
//!   and the roots exchange the handles once, when the communicator is created; a signal is a
//!   put through the transport the [`Fabric`] ranks first for that peer (across nodes: MPI
//!   point-to-point), and it lands while the receiving root makes the transport progress.
//! * **MPI's own barrier among the roots** (`BARRIER_MPI_INTERNODE`, issue 42 item 3): an MPI
//!   whose barrier is tuned for its network can beat our rounds over MPI point-to-point (over
//!   the kernel's TCP between namespaces, at one rank per node, Open MPI's barrier took 9.9 µs
//!   against our rounds' 11.0). It is `MPI_Barrier` on a private duplicate of the roots'
//!   communicator, and `MPI_Ibarrier`, tested, for split-phase barriers and for blocking ones
//!   under a timeout. As with MPI's own barriers, a barrier is then blocking on every rank or
//!   split-phase on every rank (MPI matches no blocking collective with a non-blocking one; our
//!   rounds allow a mix).

use std::sync::Arc;

use barrier::hierarchy::{Choice, Names, OwnBarrier, OwnPending, Roots, RootsLink, RootsWaits, Way};
use barrier::transport::{Fabric, MemHandle, Peer, Signal, Transport};
use barrier::{Error, Result};

use crate::raw::{self, Comm, OwnedComm};
use crate::transport::MpiTransport;

/// The value of `BARRIER_MPI_INTERNODE` that picks MPI's own barrier.
pub(crate) const OWN: &str = "mpi";

/// One root's link to the others over MPI.
#[derive(Debug)]
pub(crate) struct MpiRoots {
    /// The partner's slot per round. Declared before the transport: signals hold it too.
    outbox: Vec<Signal>,
    transport: Arc<MpiTransport>,
    fabric: Fabric,
}

impl MpiRoots {
    /// The fabric (for its ranking and counters).
    pub(crate) fn fabric(&self) -> &Fabric {
        &self.fabric
    }
}

impl RootsLink for MpiRoots {
    /// The put, then a progress call: the message goes out now (a root whose slots have all
    /// arrived makes no other call before its next barrier, and a send may need the sender's
    /// progress to leave).
    #[inline]
    fn signal(&self, round: usize, epoch: u64) -> Result<()> {
        self.outbox[round].signal(epoch, false)?;
        self.transport.try_progress()
    }

    #[inline]
    fn reached(&self, round: usize, epoch: u64) -> bool {
        self.transport.inbox()[round].reached(epoch)
    }

    #[inline]
    fn progress(&self) -> Result<()> {
        self.transport.try_progress()
    }
}

/// MPI's own barrier on a private duplicate of the roots' communicator.
#[derive(Debug)]
struct MpiOwn(OwnedComm);

#[derive(Debug)]
struct MpiPending(raw::Request);

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

/// Sets up a root's side of the roots' phase (collective over `roots`, the communicator of the
/// node roots). `injected`: a failure to take in place of registering the inbox
/// (BARRIER_MPI_FAULT). `choice`: rank 0's `BARRIER_MPI_INTERNODE`, the same on every root (MPI's
/// way needs a communicator of its own; our rounds alone need none).
pub(crate) fn set_up(
    roots: Comm,
    place: RootPlace,
    waits: RootsWaits,
    choice: Choice,
    injected: Result<()>,
) -> Result<Roots<MpiRoots>> {
    let index = raw::rank(roots)?;
    let nodes = raw::size(roots)?;
    let world = raw::world_ranks(roots)?;
    let comm_ranks: Vec<usize> = raw::allgather(roots, &[place.rank as u64])?.iter().map(|w| w[0] as usize).collect();
    let rounds = barrier::rounds(nodes);
    let transport = Arc::new(MpiTransport::new(roots, rounds)?);
    let me = Peer { world_rank: world[index], node: index };
    let fabric = Fabric::new(me, vec![transport.clone() as Arc<dyn Transport>]);
    let mine = injected.and_then(|()| fabric.register(transport.inbox()));
    let words = mine.as_ref().map_or([u64::MAX, 0], |h| h.to_words());
    let all = raw::allgather(roots, &words)?;
    let outbox: Result<Vec<Signal>> = match mine {
        Err(e) => Err(e),
        Ok(_) => (0..rounds)
            .map(|r| {
                let partner = (index + (1 << r)) % nodes;
                if all[partner][0] == u64::MAX {
                    return Err(Error::Transport(format!("node root {partner} could not register its slots")));
                }
                let handle = MemHandle::from_words([all[partner][0], all[partner][1]]);
                fabric.signal_to(Peer { world_rank: world[partner], node: partner }, handle, r)
            })
            .collect(),
    };
    // Agreed: a root that cannot reach its partners must not leave the others waiting.
    if !raw::all_agree(roots, outbox.is_ok())? {
        return Err(outbox.err().unwrap_or_else(|| {
            Error::Transport("another node root could not reach its dissemination partners over MPI".into())
        }));
    }
    let own = match choice {
        Choice::Fixed(Way::Ours) | Choice::OursForReports => None,
        _ => Some(Box::new(MpiOwn(OwnedComm(raw::dup(roots)?))) as Box<dyn OwnBarrier>),
    };
    let members: Vec<(usize, usize)> = (0..nodes).map(|j| (comm_ranks[j], world[j])).collect();
    let names = names(place, world[index], index, &members, node_root);
    let link = MpiRoots { outbox: outbox?, transport, fabric };
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
    }
}

/// A node root, as the reports name it.
pub(crate) fn node_root(rank: usize, world_rank: usize) -> String {
    format!("the node root at world rank {world_rank} (communicator rank {rank})")
}
