//! The transports of one machine: every rank of the job maps the same shared segment, so a
//! registered run of slots is an offset in it, and reaching a slot is a store to an address.
//!
//! * `self`: this rank's own slots.
//! * `shm`: the slots of ranks on this rank's node (the XPMEM model: resolved once to an
//!   address, then every signal is one CPU store).
//! * `net-sim`: the slots of ranks on other simulated nodes. The store is the same, but it goes
//!   through this transport on every call, is counted, and lands only after
//!   `BARRIER_NET_PUT_LATENCY`: the initiator waits the wire time out before the store
//!   (spinning for short latencies; yielding for latencies above 20 µs when the job's ranks
//!   park, so that a long wire does not hold a core another rank needs), so that a benchmark
//!   shows what saving a network put is worth. That wait is the one bounded delay inside an
//!   `arrive` or `progress`. By default its puts are complete when `put` returns, so `flush`
//!   has nothing to wait for; with `BARRIER_NET_ASYNC=1` they queue and land, once due, on the
//!   initiator's next `progress` or `flush` (which waits the same bounded way for the last
//!   one), and atomics first deliver every queued put, so that they never overtake one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
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
        let Some(offset) = self.seg.try_offset_of(first).filter(|&o| self.seg.holds_regions(o, slots.len() * SLOT))
        else {
            return Err(Error::Transport(format!(
                "{name}: only slots of a communicator's region in the job segment can be registered"
            )));
        };
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
        // The whole run must lie where regions live (not the header, not the rank table), so a
        // corrupt or hostile handle cannot aim a put at the job's control words.
        let start = handle.offset as usize;
        let fits = start.is_multiple_of(std::mem::align_of::<Flag>())
            && (handle.slots as usize).checked_mul(SLOT).is_some_and(|len| self.seg.holds_regions(start, len));
        let Some(at) = Some(start + slot * SLOT).filter(|_| fits) else {
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
    /// Asynchronous puts: queued here (when they land, segment offset, value) until the
    /// initiator's progress or flush delivers them.
    queue: Option<Mutex<VecDeque<(Instant, usize, u64)>>>,
}

impl SimNetTransport {
    /// Over the job segment `seg`, with `latency` per put or atomic; `asynchronous`: puts
    /// return at once and land, once their latency has passed, on the initiator's next
    /// [`Transport::progress`] or [`Transport::flush`] (the model of an MPI or RDMA transport
    /// whose puts need the initiator's progress calls).
    pub fn new(seg: &Arc<Segment>, wake: bool, latency: Option<Duration>, asynchronous: bool) -> Self {
        SimNetTransport {
            slots: SegmentSlots { seg: seg.clone(), wake, counters: Counters::default() },
            latency: latency.filter(|l| !l.is_zero()),
            queue: asynchronous.then(|| Mutex::new(VecDeque::new())),
        }
    }

    /// Delivers every queued put that is due (all of them with `all`, waiting for the last).
    fn deliver(&self, all: bool) {
        let Some(queue) = &self.queue else { return };
        let mut queue = queue.lock().unwrap_or_else(|p| p.into_inner());
        // As the synchronous wire: spin, or yield for a long wire when ranks park. (Each queue
        // belongs to one rank's module, driven by one thread: the lock is never contended.)
        let yields = self.slots.wake && self.latency.is_some_and(|l| l > Duration::from_micros(20));
        while let Some(&(due, offset, value)) = queue.front() {
            let now = Instant::now();
            if now < due {
                if !all {
                    break;
                }
                if yields {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            queue.pop_front();
            self.slots.seg.at::<Flag>(offset).signal(value, self.slots.wake);
        }
    }

    /// The wire: waits out the latency before the operation lands.
    fn cross(&self) {
        let Some(latency) = self.latency else { return };
        let until = Instant::now() + latency;
        // A yield costs about a microsecond and may hand the core away for a time slice:
        // worth it only for a long wire, and only when ranks outnumber cores.
        let yields = self.slots.wake && latency > Duration::from_micros(20);
        while Instant::now() < until {
            if yields {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
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
                if !self.queued(flag, value) {
                    self.wire();
                    flag.signal(value, self.slots.wake);
                }
                Ok(())
            }
            fn atomic_add(&self, to: &RemoteSlot, value: u64) -> Result<u64> {
                let flag = self.slots.addr($name, to)?;
                self.slots.counters.atomic();
                self.deliver_all();
                self.wire();
                Ok(flag.fetch_add(value, self.slots.wake))
            }
            fn compare_swap(&self, to: &RemoteSlot, expected: u64, new: u64) -> Result<u64> {
                let flag = self.slots.addr($name, to)?;
                self.slots.counters.atomic();
                self.deliver_all();
                self.wire();
                Ok(flag.compare_swap(expected, new, self.slots.wake))
            }
            fn needs_progress(&self) -> bool {
                self.asynchronous()
            }
            fn progress(&self) {
                self.deliver_due();
            }
            fn flush(&self) -> Result<()> {
                self.slots.counters.flush();
                self.deliver_all();
                Ok(())
            }
            fn counters(&self) -> TransportCounters {
                self.slots.counters.get()
            }
        }
    };
}

/// What differs between the segment transports: the wire, and whether puts queue.
macro_rules! synchronous_store {
    ($ty:ident) => {
        impl $ty {
            #[inline(always)]
            fn wire(&self) {}
            #[inline(always)]
            fn queued(&self, _flag: &Flag, _value: u64) -> bool {
                false
            }
            fn asynchronous(&self) -> bool {
                false
            }
            fn deliver_due(&self) {}
            fn deliver_all(&self) {}
        }
    };
}
synchronous_store!(SelfTransport);
synchronous_store!(ShmTransport);

impl SimNetTransport {
    #[inline(always)]
    fn wire(&self) {
        self.cross();
    }
    /// Queues an asynchronous put; false if puts are synchronous.
    fn queued(&self, flag: &Flag, value: u64) -> bool {
        let Some(queue) = &self.queue else { return false };
        let due = Instant::now() + self.latency.unwrap_or_default();
        let offset = self.slots.seg.offset_of(flag);
        queue.lock().unwrap_or_else(|p| p.into_inner()).push_back((due, offset, value));
        true
    }
    fn asynchronous(&self) -> bool {
        self.queue.is_some()
    }
    fn deliver_due(&self) {
        self.deliver(false);
    }
    fn deliver_all(&self) {
        self.deliver(true);
    }
}

segment_ops!(SelfTransport, "self", EXCLUSIVITY_SELF, false, |me, peer| me.world_rank == peer.world_rank);
segment_ops!(ShmTransport, "shm", EXCLUSIVITY_SHM, false, |me, peer| me.node == peer.node);
segment_ops!(SimNetTransport, "net-sim", EXCLUSIVITY_NET, true, |me, peer| me.node != peer.node);

/// How the simulated network behaves (`BARRIER_NET_PUT_LATENCY`, `BARRIER_NET_ASYNC`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetModel {
    /// Time for a put or atomic to land.
    pub latency: Option<Duration>,
    /// Puts complete asynchronously, on the initiator's progress calls.
    pub asynchronous: bool,
}

/// The fabric of a rank in a job on this machine: self, shared memory, and the simulated
/// network when the job spans simulated nodes.
pub fn local_fabric(seg: &Arc<Segment>, me: Peer, wake: bool, net: NetModel) -> Fabric {
    let mut transports: Vec<Arc<dyn Transport>> =
        vec![Arc::new(SelfTransport::new(seg, wake)), Arc::new(ShmTransport::new(seg, wake))];
    if seg.shape().nodes > 1 {
        transports.push(Arc::new(SimNetTransport::new(seg, wake, net.latency, net.asynchronous)));
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
        let fabric = local_fabric(&seg, me, false, NetModel::default());
        let peers = [me, Peer { world_rank: 1, node: 0 }, Peer { world_rank: 2, node: 1 }];
        let ranking = fabric.ranking(&peers);
        let names: Vec<_> = ranking.iter().map(|r| (r.name, r.peers.clone())).collect();
        assert_eq!(names, vec![("self", vec![0]), ("shm", vec![1]), ("net-sim", vec![2])]);
        assert!(ranking[2].network && !ranking[1].network);
    }

    #[test]
    fn a_single_node_job_has_no_network() {
        let seg = segment(1);
        let fabric = local_fabric(&seg, Peer { world_rank: 0, node: 0 }, false, NetModel::default());
        assert!(fabric.route(Peer { world_rank: 3, node: 1 }).is_err());
        assert_eq!(fabric.ranking(&[]).len(), 2);
    }

    #[test]
    fn puts_and_atomics_reach_the_registered_slot_and_network_ones_are_counted() {
        let seg = segment(2);
        let owner = Peer { world_rank: 2, node: 1 };
        let slots = run(&seg, 3);
        let owner_fabric = local_fabric(&seg, owner, false, NetModel::default());
        let handle = owner_fabric.register(slots).unwrap();
        assert_eq!(MemHandle::from_words(handle.to_words()), handle);
        let me = local_fabric(
            &seg,
            Peer { world_rank: 0, node: 0 },
            false,
            NetModel { latency: Some(Duration::from_micros(1)), asynchronous: false },
        );
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
        let h = local_fabric(&seg, local, false, NetModel::default()).register(mine).unwrap();
        let s = me.signal_to(local, h, 0).unwrap();
        assert!(matches!(s, crate::transport::Signal::Store(_)));
        s.signal(3, false).unwrap();
        assert_eq!(mine[0].load(), 3);
        assert_eq!(me.network_ops(), 4);
    }

    #[test]
    fn asynchronous_puts_land_on_progress_or_flush_after_their_latency() {
        let seg = segment(2);
        let owner = Peer { world_rank: 2, node: 1 };
        let slots = run(&seg, 2);
        let handle = local_fabric(&seg, owner, false, NetModel::default()).register(slots).unwrap();
        let net = NetModel { latency: Some(Duration::from_millis(20)), asynchronous: true };
        let me = local_fabric(&seg, Peer { world_rank: 0, node: 0 }, false, net);
        assert!(me.needs_progress());
        let start = Instant::now();
        me.signal_to(owner, handle, 0).unwrap().signal(4, false).unwrap();
        me.signal_to(owner, handle, 1).unwrap().signal(5, false).unwrap();
        me.progress();
        if start.elapsed() < Duration::from_millis(20) {
            assert_eq!(slots[0].load(), 0, "a put landed before its latency passed");
        }
        me.flush().unwrap();
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!((slots[0].load(), slots[1].load()), (4, 5));
        assert_eq!(me.network_ops(), 2);
    }

    #[test]
    fn bad_handles_are_refused_with_the_reason() {
        let seg = segment(2);
        let owner = Peer { world_rank: 2, node: 1 };
        let fabric = local_fabric(&seg, Peer { world_rank: 0, node: 0 }, false, NetModel::default());
        let last = (seg.len() - SLOT) as u64;
        for offset in [seg.len() as u64, 0, SLOT as u64, last] {
            let slots = if offset == last { 2 } else { 1 };
            let handle = MemHandle { owner: 2, offset, slots };
            let e = fabric.signal_to(owner, handle, 0).unwrap_err().to_string();
            assert!(e.contains("outside the job segment"), "offset {offset}: {e}");
        }
        let outside = Flag::default();
        let e = fabric.register(std::slice::from_ref(&outside)).unwrap_err().to_string();
        assert!(e.contains("can be registered"), "{e}");
        let good = local_fabric(&seg, owner, false, NetModel::default()).register(run(&seg, 2)).unwrap();
        let e = fabric.signal_to(owner, good, 2).unwrap_err().to_string();
        assert!(e.contains("slot 2 of a run of 2"), "{e}");
        let e = fabric.signal_to(Peer { world_rank: 3, node: 1 }, good, 0).unwrap_err().to_string();
        assert!(e.contains("handle of world rank 2"), "{e}");
    }
}
