//! The MPI transport: how a node root's signal reaches a root on another node.
//!
//! It implements the core's [`Transport`] (the byte-transfer-layer model of
//! `barrier::transport`) over MPI point-to-point messages on a private communicator of the
//! roots, ranked as a network (exclusivity [`EXCLUSIVITY_NET`]: below self and shared memory,
//! which reach the ranks of a node directly):
//!
//! * **registration**: the slots a peer can target are this transport's own inbox
//!   (`MpiTransport::inbox`, cache-line flags on the heap); a handle names the owner, the
//!   run's first slot and its length;
//! * **put**: an `MPI_Isend` of one small message `[PUT, slot, value, …]` to the owner; the
//!   owner's transport applies it (raising the slot to the value) when the owner calls
//!   [`Transport::progress`], which every wait of the internode phase does: MPI gives no
//!   progress of its own, so this transport [needs progress](Transport::needs_progress);
//! * **atomics**: none (the roots' rounds only put): [`Transport::atomic_add`] and
//!   [`Transport::compare_swap`] are refused with an error that says so;
//! * **completion**: sends are small and eager in every MPI measured; their requests are
//!   tested on each progress call and freed when done, and [`Transport::flush`] makes
//!   progress until none is left.
//!
//! One message per put, in order per sender (MPI does not overtake between one pair of ranks
//! on one tag), and a slot only ever grows: a slot has one writer per barrier, and raising to
//! the maximum makes a late duplicate harmless.
//!
//! Why point-to-point and not one-sided (`MPI_Put` into a window): see `docs/mpi.md`. In short,
//! the owner must call into MPI either way (passive-target RMA completes only when the target
//! makes progress in Open MPI's `osc/pt2pt` and for accumulates in `osc/rdma` without network
//! atomics, and a load from a window needs `MPI_Win_sync` besides), and a matched eager message
//! costs one copy; measured on Open MPI 4.1 the message path was the faster one.

use std::ffi::c_int;
use std::sync::Mutex;
use std::time::Duration;

use barrier::transport::{Counters, MemHandle, Peer, RemoteSlot, Transport, TransportCounters, EXCLUSIVITY_NET};
use barrier::wait::{poll_for, poll_until, Flag, Pace};
use barrier::{Error, Result};

use crate::raw::{self, Comm, Request};

/// The tag of every message of this transport (on its private communicator).
const TAG: c_int = 0x6261;
/// Words per message: kind, slot, value, sender.
const WORDS: usize = 4;

/// The one kind of message: raise a slot to a value.
const PUT: u64 = 0;

/// A send in flight: the request and the buffer MPI reads from until it completes.
type Outgoing = raw::InFlight<WORDS>;

struct State {
    recv: Request,
    recv_buf: Box<[u64; WORDS]>,
    sends: Vec<Outgoing>,
}

/// Point-to-point MPI transport among the node roots. See the module docs.
pub struct MpiTransport {
    /// A private duplicate of the roots' communicator: rank = node index.
    comm: Comm,
    me: usize,
    inbox: Box<[Flag]>,
    state: Mutex<State>,
    counters: Counters,
}

// SAFETY: the MPI handles are only used under `state`'s lock or for calls MPI allows from any
// thread of a process initialized with the thread level the application chose (the barrier
// communicator is driven by one thread at a time, as MPI requires of a communicator).
unsafe impl Send for MpiTransport {}
// SAFETY: as above: every mutation goes through the mutex or the flags' atomics.
unsafe impl Sync for MpiTransport {}

impl std::fmt::Debug for MpiTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiTransport").field("me", &self.me).field("inbox", &self.inbox.len()).finish()
    }
}

impl MpiTransport {
    /// A transport over a private copy of `roots` (collective over the roots), with `slots`
    /// inbox slots that peers can target.
    pub(crate) fn new(roots: Comm, slots: usize) -> Result<Self> {
        let comm = raw::dup(roots)?;
        let me = raw::rank(comm)?;
        let mut recv_buf = Box::new([0u64; WORDS]);
        let recv = raw::irecv_any(comm, &mut recv_buf[..], TAG)?;
        Ok(MpiTransport {
            comm,
            me,
            inbox: (0..slots).map(|_| Flag::default()).collect(),
            state: Mutex::new(State { recv, recv_buf, sends: Vec::new() }),
            counters: Counters::default(),
        })
    }

    /// The slots peers can target: register a run of them, wait on them.
    pub(crate) fn inbox(&self) -> &[Flag] {
        &self.inbox
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, st: &mut State, dest: usize, msg: [u64; WORDS]) -> Result<()> {
        let buf = Box::new(msg);
        let req = raw::isend(self.comm, &buf[..], dest, TAG)?;
        // Kept until MPI says it is done with the buffer (eager sends usually are at once).
        st.sends.push(Outgoing { req, buf });
        let last = st.sends.last_mut().expect("just pushed");
        if raw::test(&mut last.req)? {
            st.sends.pop();
        }
        Ok(())
    }

    /// Applies one received message: a put.
    fn apply(&self, msg: [u64; WORDS]) -> Result<()> {
        let [kind, slot, value, from] = msg;
        let flag = self.inbox.get(slot as usize).ok_or_else(|| {
            Error::Transport(format!("a message from node root {from} targets slot {slot} of {}", self.inbox.len()))
        })?;
        if kind != PUT {
            return Err(Error::Transport(format!("unknown message kind {kind} from node root {from}")));
        }
        flag.raise(value, false);
        Ok(())
    }

    fn progress_locked(&self, st: &mut State) -> Result<()> {
        while raw::test(&mut st.recv)? {
            let msg = *st.recv_buf;
            st.recv = raw::irecv_any(self.comm, &mut st.recv_buf[..], TAG)?;
            self.apply(msg)?;
        }
        let mut i = 0;
        while i < st.sends.len() {
            if raw::test(&mut st.sends[i].req)? {
                st.sends.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Receives and applies what has arrived, and retires completed sends.
    pub(crate) fn try_progress(&self) -> Result<()> {
        let mut st = self.lock();
        self.progress_locked(&mut st)
    }
}

/// How long a dropped transport lets its last sends finish before it leaks their buffers.
const DRAIN: Duration = Duration::from_secs(2);

impl Drop for MpiTransport {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        raw::cancel(&mut st.recv);
        // A root's last put of a barrier may still be on its way when the application frees
        // the communicator: MPI may read the buffer until the send completes.
        let _ = poll_for(Pace::Yield, Some(DRAIN), || -> std::result::Result<Option<()>, ()> {
            if !raw::mpi_active() {
                return Ok(Some(()));
            }
            st.sends.retain_mut(|s| !raw::test(&mut s.req).unwrap_or(true));
            Ok(st.sends.is_empty().then_some(()))
        });
        for mut s in st.sends.drain(..) {
            // Still in flight (or MPI is gone): MPI keeps the request, the buffer must stay.
            raw::release(&mut s.req);
            std::mem::forget(s.buf);
        }
        raw::free(&mut self.comm);
    }
}

impl Transport for MpiTransport {
    fn name(&self) -> &'static str {
        "mpi-p2p"
    }

    fn exclusivity(&self) -> u32 {
        EXCLUSIVITY_NET
    }

    fn is_network(&self) -> bool {
        true
    }

    fn reaches(&self, _me: Peer, peer: Peer) -> bool {
        // Every root of the roots' communicator, itself included (a put to itself is a
        // message to itself).
        raw::size(self.comm).is_ok_and(|n| peer.node < n)
    }

    fn register(&self, owner: Peer, slots: &[Flag]) -> Result<MemHandle> {
        let base = self.inbox.as_ptr() as usize;
        let start = slots.as_ptr() as usize;
        let size = std::mem::size_of::<Flag>();
        let end = start + std::mem::size_of_val(slots);
        if start < base || end > base + self.inbox.len() * size {
            return Err(Error::InvalidArgument(
                "the MPI transport registers only slots of its own inbox (MpiTransport::inbox)".into(),
            ));
        }
        Ok(MemHandle { owner: owner.world_rank, offset: ((start - base) / size) as u64, slots: slots.len() as u32 })
    }

    fn resolve(&self, peer: Peer, handle: MemHandle, slot: usize) -> Result<RemoteSlot> {
        if slot >= handle.slots as usize {
            return Err(Error::InvalidArgument(format!(
                "slot {slot} of a run of {} registered by world rank {}",
                handle.slots, handle.owner
            )));
        }
        Ok(RemoteSlot::new(peer, handle, slot))
    }

    fn put(&self, to: &RemoteSlot, value: u64) -> Result<()> {
        self.counters.put();
        let mut st = self.lock();
        self.send(&mut st, to.peer.node, [PUT, to.handle.offset + to.slot as u64, value, self.me as u64])
    }

    fn atomic_add(&self, _to: &RemoteSlot, _value: u64) -> Result<u64> {
        Err(no_atomics())
    }

    fn compare_swap(&self, _to: &RemoteSlot, _expected: u64, _new: u64) -> Result<u64> {
        Err(no_atomics())
    }

    fn flush(&self) -> Result<()> {
        self.counters.flush();
        poll_until(Pace::Yield, |_| {
            let mut st = self.lock();
            self.progress_locked(&mut st)?;
            Ok(st.sends.is_empty())
        })
    }

    fn needs_progress(&self) -> bool {
        true
    }

    fn progress(&self) {
        if let Err(e) = self.try_progress() {
            tracing::warn!(error = %e, "MPI transport progress failed");
        }
    }

    fn counters(&self) -> TransportCounters {
        self.counters.get()
    }
}

/// The MPI transport's answer to an atomic: the roots' rounds only put.
fn no_atomics() -> Error {
    Error::Transport(
        "the MPI transport (mpi-p2p) carries puts only: the node roots' rounds need no remote atomics".into(),
    )
}
