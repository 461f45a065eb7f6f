//! The transports of one machine: every rank of the job maps the same shared segment, so a
//! registered run of slots is an offset in it, and reaching a slot is a store to an address.
//!
//! * `self`: this rank's own slots.
//! * `shm`: the slots of ranks on this rank's node (the XPMEM model: resolved once to an
//!   address, then every signal is one CPU store).
//! * `net-sim`: the slots of ranks on other simulated nodes. The store is the same, but it goes
//!   through this transport on every call, is counted, and lands only after
//!   `BARRIER_NET_PUT_LATENCY` (the initiator waits it out before the store, spinning or, when
//!   the job's ranks park, yielding), so that a benchmark shows what saving a network put is
//!   worth. Its puts are complete when `put` returns, so `flush` has nothing to wait for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    Counters, Fabric, MemHandle, Peer, RemoteSlot, Transport, TransportCounters, EXCLUSIVITY_NET, EXCLUSIVITY_SELF,
    EXCLUSIVITY_SHM,
};
use crate::error::{Error, Result};
use crate::shm::{Segment, Shared};
use crate::wait::Flag;

/// Registration and address resolution in the job segment, shared by the three transports.
#[derive(Debug)]
struct SegmentSlots {
    seg: Arc<Segment>,
    wake: bool,
    counters: Counters,
}

const SLOT: usize = std::mem::size_of::<Flag>();

impl SegmentSlots {
    fn register(&self, name: &str, owner: Peer, slots: &[Flag]) -> Result<MemHandle> {
        let Some(first) = slots.first() else {
            return Err(Error::Transport(format!("{name}: cannot register an empty run of slots")));
        };
        let offset = self.seg.offset_of(first);
        Ok(MemHandle { owner: owner.world_rank, offset: offset as u64, slots: slots.len() as u32 })
    }

    fn resolve(&self, name: &str, peer: Peer, handle: MemHandle, slot: usize) -> Result<RemoteSlot> {
        if handle.owner != peer.world_rank {
            return Err(Error::Transport(format!(
                "{name}: a handle of world rank {} used to reach world rank {}",
                handle.owner, peer.world_rank
            )));
        }
        if slot >= handle.slots as usize {
            return Err(Error::Transport(format!(
                "{name}: slot {slot} of a run of {} registered by world rank {}",
                handle.slots, handle.owner
            )));
        }
        let at = (handle.offset as usize).checked_add(slot * SLOT);
        let fits = at.is_some_and(|at| {
            at % std::mem::align_of::<Flag>() == 0 && at.checked_add(SLOT).is_some_and(|end| end <= self.seg.len())
        });
        let Some(at) = at.filter(|_| fits) else {
            return Err(Error::Transport(format!(
                "{name}: world rank {}'s handle (offset {}, {} slots) lies outside the job segment",
                handle.owner, handle.offset, handle.slots
            )));
        };
        Ok(RemoteSlot { peer, handle, slot, addr: Some(Shared::new(&self.seg, at)) })
    }

    fn addr<'a>(&self, name: &str, to: &'a RemoteSlot) -> Result<&'a Flag> {
        to.addr.as_deref().ok_or_else(|| Error::Transport(format!("{name}: slot was not resolved by this transport")))
    }
}

macro_rules! segment_transport {
    ($ty:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug)]
        pub struct $ty {
            slots: SegmentSlots,
        }

        impl $ty {
            /// Over the job segment `seg`; `wake`: the job's ranks park, so stores wake them.
            pub fn new(seg: &Arc<Segment>, wake: bool) -> Self {
                $ty { slots: SegmentSlots { seg: seg.clone(), wake, counters: Counters::default() } }
            }
        }
    };
}

segment_transport!(SelfTransport, "This rank's own slots.");
segment_transport!(ShmTransport, "The slots of ranks on this rank's node.");

/// The simulated network between simulated nodes (see the module docs).
#[derive(Debug)]
pub struct SimNetTransport {
    slots: SegmentSlots,
    latency: Option<Duration>,
}

impl SimNetTransport {
    /// Over the job segment `seg`, with `latency` per put or atomic.
    pub fn new(seg: &Arc<Segment>, wake: bool, latency: Option<Duration>) -> Self {
        SimNetTransport {
            slots: SegmentSlots { seg: seg.clone(), wake, counters: Counters::default() },
            latency: latency.filter(|l| !l.is_zero()),
        }
    }

    /// The wire: waits out the latency before the operation lands.
    fn cross(&self) {
        let Some(latency) = self.latency else { return };
        let until = Instant::now() + latency;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}

/// The operations every segment transport shares; each type's `wire` is what crossing costs.
macro_rules! segment_ops {
    ($ty:ident, $name:literal, $excl:expr, $network:literal, |$me:ident, $peer:ident| $reaches:expr) => {
        impl Transport for $ty {
            fn name(&self) -> &'static str {
                $name
            }
            fn exclusivity(&self) -> u32 {
                $excl
            }
            fn is_network(&self) -> bool {
                $network
            }
            fn reaches(&self, $me: Peer, $peer: Peer) -> bool {
                $reaches
            }
            fn register(&self, owner: Peer, slots: &[Flag]) -> Result<MemHandle> {
                self.slots.register($name, owner, slots)
            }
            fn resolve(&self, peer: Peer, handle: MemHandle, slot: usize) -> Result<RemoteSlot> {
                self.slots.resolve($name, peer, handle, slot)
            }
            #[inline]
            fn put(&self, to: &RemoteSlot, value: u64) -> Result<()> {
                let flag = self.slots.addr($name, to)?;
                self.slots.counters.put();
                self.wire();
                flag.signal(value, self.slots.wake);
                Ok(())
            }
            fn atomic_add(&self, to: &RemoteSlot, value: u64) -> Result<u64> {
                let flag = self.slots.addr($name, to)?;
                self.slots.counters.atomic();
                self.wire();
                Ok(flag.fetch_add(value, self.slots.wake))
            }
            fn compare_swap(&self, to: &RemoteSlot, expected: u64, new: u64) -> Result<u64> {
                let flag = self.slots.addr($name, to)?;
                self.slots.counters.atomic();
                self.wire();
                Ok(flag.compare_swap(expected, new, self.slots.wake))
            }
            fn flush(&self) -> Result<()> {
                // Every operation landed before it returned.
                self.slots.counters.flush();
                Ok(())
            }
            fn counters(&self) -> TransportCounters {
                self.slots.counters.get()
            }
        }
    };
}

impl SelfTransport {
    #[inline(always)]
    fn wire(&self) {}
}
impl ShmTransport {
    #[inline(always)]
    fn wire(&self) {}
}
impl SimNetTransport {
    #[inline(always)]
    fn wire(&self) {
        self.cross();
    }
}

segment_ops!(SelfTransport, "self", EXCLUSIVITY_SELF, false, |me, peer| me.world_rank == peer.world_rank);
segment_ops!(ShmTransport, "shm", EXCLUSIVITY_SHM, false, |me, peer| me.node == peer.node);
segment_ops!(SimNetTransport, "net-sim", EXCLUSIVITY_NET, true, |me, peer| me.node != peer.node);

/// The fabric of a rank in a job on this machine: self, shared memory, and the simulated
/// network when the job spans simulated nodes.
pub fn local_fabric(seg: &Arc<Segment>, me: Peer, wake: bool, latency: Option<Duration>) -> Fabric {
    let mut transports: Vec<Arc<dyn Transport>> =
        vec![Arc::new(SelfTransport::new(seg, wake)), Arc::new(ShmTransport::new(seg, wake))];
    if seg.shape().nodes > 1 {
        transports.push(Arc::new(SimNetTransport::new(seg, wake, latency)));
    }
    Fabric::new(me, transports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::JobShape;

    fn segment(nodes: usize) -> Arc<Segment> {
        Segment::anonymous(JobShape::local(4, nodes), 1 << 16).unwrap()
    }

    fn run(seg: &Arc<Segment>, slots: usize) -> &[Flag] {
        let off = seg.alloc(slots * SLOT).unwrap();
        seg.slice::<Flag>(off, slots)
    }

    #[test]
    fn ranking_prefers_self_then_shared_memory_then_the_network() {
        let seg = segment(2);
        let me = Peer { world_rank: 0, node: 0 };
        let fabric = local_fabric(&seg, me, false, None);
        let peers = [me, Peer { world_rank: 1, node: 0 }, Peer { world_rank: 2, node: 1 }];
        let ranking = fabric.ranking(&peers);
        let names: Vec<_> = ranking.iter().map(|r| (r.name, r.peers.clone())).collect();
        assert_eq!(names, vec![("self", vec![0]), ("shm", vec![1]), ("net-sim", vec![2])]);
        assert!(ranking[2].network && !ranking[1].network);
    }

    #[test]
    fn a_single_node_job_has_no_network() {
        let seg = segment(1);
        let fabric = local_fabric(&seg, Peer { world_rank: 0, node: 0 }, false, None);
        assert!(fabric.route(Peer { world_rank: 3, node: 1 }).is_err());
        assert_eq!(fabric.ranking(&[]).len(), 2);
    }

    #[test]
    fn puts_and_atomics_reach_the_registered_slot_and_network_ones_are_counted() {
        let seg = segment(2);
        let owner = Peer { world_rank: 2, node: 1 };
        let slots = run(&seg, 3);
        let owner_fabric = local_fabric(&seg, owner, false, None);
        let handle = owner_fabric.register(slots).unwrap();
        assert_eq!(MemHandle::from_words(handle.to_words()), handle);
        let me = local_fabric(&seg, Peer { world_rank: 0, node: 0 }, false, Some(Duration::from_micros(1)));
        let signal = me.signal_to(owner, handle, 2).unwrap();
        assert!(signal.is_network());
        signal.signal(7, false).unwrap();
        assert_eq!(slots[2].load(), 7);
        let t = me.route(owner).unwrap();
        let slot = t.resolve(owner, handle, 1).unwrap();
        assert_eq!(t.atomic_add(&slot, 5).unwrap(), 0);
        assert_eq!(t.compare_swap(&slot, 5, 9).unwrap(), 5);
        assert_eq!(t.compare_swap(&slot, 5, 11).unwrap(), 9, "a failed compare-swap changes nothing");
        assert_eq!(slots[1].load(), 9);
        t.flush().unwrap();
        assert_eq!(me.network_ops(), 4);
        assert_eq!(t.counters(), TransportCounters { puts: 1, atomics: 3, flushes: 1 });
        // Within a node: a direct store, not counted as network traffic.
        let local = Peer { world_rank: 1, node: 0 };
        let mine = run(&seg, 1);
        let h = local_fabric(&seg, local, false, None).register(mine).unwrap();
        let s = me.signal_to(local, h, 0).unwrap();
        assert!(matches!(s, crate::transport::Signal::Store(_)));
        s.signal(3, false).unwrap();
        assert_eq!(mine[0].load(), 3);
        assert_eq!(me.network_ops(), 4);
    }

    #[test]
    fn bad_handles_are_refused_with_the_reason() {
        let seg = segment(2);
        let owner = Peer { world_rank: 2, node: 1 };
        let fabric = local_fabric(&seg, Peer { world_rank: 0, node: 0 }, false, None);
        let handle = MemHandle { owner: 2, offset: seg.len() as u64, slots: 1 };
        let e = fabric.signal_to(owner, handle, 0).unwrap_err().to_string();
        assert!(e.contains("outside the job segment"), "{e}");
        let good = local_fabric(&seg, owner, false, None).register(run(&seg, 2)).unwrap();
        let e = fabric.signal_to(owner, good, 2).unwrap_err().to_string();
        assert!(e.contains("slot 2 of a run of 2"), "{e}");
        let e = fabric.signal_to(Peer { world_rank: 3, node: 1 }, good, 0).unwrap_err().to_string();
        assert!(e.contains("handle of world rank 2"), "{e}");
    }
}
