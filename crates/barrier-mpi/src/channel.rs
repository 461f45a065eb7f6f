//! The node roots' link for the core's roots' phase ([`barrier::hierarchy::RootsLink`]):
//! point-to-point messages, one per round, carried one of two ways (`Carrier`):
//!
//! * **MPI's own point-to-point** (`MPI_Isend`/`MPI_Irecv`, as profiled calls `PMPI_*`) on the
//!   roots' private communicator, which the blocking set-up makes (`comm.rs`);
//! * **a private channel on the program's own communicator** ([`PrivateP2p`]), for a barrier
//!   built without blocking (`background`'s, across nodes), which has no private communicator
//!   (making one is collective, and an `MPI_Ibarrier` must not wait for the others). The layer
//!   below MPI's API provides it (the coll component's C glue, over Open MPI's PML): tags are
//!   reserved on the communicator the way Open MPI's non-blocking collectives reserve theirs
//!   (`ompi_coll_base_nbc_reserve_tags`, in the same call on every rank, so every rank gets the
//!   same ones), and negative tags never match a program's receive, `MPI_ANY_TAG` included.
//!
//! * **A signal** of round `r` is one message `[r, value]` to the round's partner (an eager send
//!   in every MPI measured: it completes at once, and its buffer is kept until it does).
//! * **No receive stays posted** between barriers. A member's round-`r` slot has one sender
//!   (the member `2^r` before it; `2^r` differs from round to round below the member count), so
//!   a receive from that sender is posted when a wait finds the slot short, and applied when it
//!   completes (a slot keeps the largest value it was sent: a late message changes nothing).
//!   With no barrier under way the communicator has no request of ours, so the program can free
//!   it (a posted receive holds a communicator in Open MPI until it completes). MPI gives no
//!   progress of its own: a message lands while the receiver calls MPI, which the roots' waits
//!   do ([`RootsLink::progress`] on every poll that finds a slot short).
//! * **Agreement** (optional, `ChannelLink::agreeing`): every value carries one more bit, "a
//!   member's set-up failed" (value `2 × epoch + bit`). A member sends the OR of its own bit and
//!   every bit it has received, and a bit, once set, stays set, so after one whole barrier every
//!   member has the OR of every member's bit at its start (dissemination reaches every member
//!   from every member), and nothing but a real failure ever sets it.
//!
//! Why point-to-point and not one-sided (`MPI_Put` into a window): the owner must call into MPI
//! either way (passive-target RMA completes only when the target makes progress in Open MPI's
//! `osc/pt2pt`, and a load from a window needs `MPI_Win_sync` besides), and a matched eager
//! message costs one copy; measured on Open MPI 4.1 the message path was the faster one
//! (`docs/mpi.md`).

use std::cell::{Cell, RefCell};
use std::ffi::c_int;

use barrier::hierarchy::ahead::AgreeingLink;
use barrier::hierarchy::RootsLink;
use barrier::{Error, Result};

use crate::raw::{self, Comm};
use mpi::ffi::{MPI_Comm, MPI_Request};

/// The point-to-point layer below MPI's API, with private tags (the coll component's C glue).
#[derive(Clone, Copy, Debug)]
pub struct PrivateP2p {
    /// Reserves `count` consecutive tags on `comm` and returns the first (they go down from
    /// it). Every rank that calls it in the same collective call gets the same tags.
    pub reserve_tags: unsafe extern "C" fn(comm: MPI_Comm, count: c_int) -> c_int,
    /// Starts a send of `words` u64 to `dest` with `tag`; 0 on success.
    pub isend: unsafe extern "C" fn(
        buf: *const u64,
        words: c_int,
        dest: c_int,
        tag: c_int,
        comm: MPI_Comm,
        req: *mut MPI_Request,
    ) -> c_int,
    /// Posts a receive of `words` u64 from `source` with `tag`; 0 on success.
    pub irecv: unsafe extern "C" fn(
        buf: *mut u64,
        words: c_int,
        source: c_int,
        tag: c_int,
        comm: MPI_Comm,
        req: *mut MPI_Request,
    ) -> c_int,
    /// 1 when rank `rank` of `comm` runs on this machine, as the MPI library knows it.
    pub on_this_machine: unsafe extern "C" fn(comm: MPI_Comm, rank: c_int) -> c_int,
}

/// How a link's messages travel.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Carrier {
    /// MPI's own point-to-point on a private communicator, with one tag of the caller's.
    Mpi,
    /// The layer's private channel on the program's communicator, with a reserved tag.
    Private(PrivateP2p),
}

/// Words of a message: the round and the value.
const WORDS: usize = 2;

/// A posted receive and the buffer MPI writes into until it completes.
type Incoming = raw::InFlight<WORDS>;

/// A send in flight and the buffer MPI reads from until it completes.
type Outgoing = raw::InFlight<WORDS>;

/// One member's link to the others over private point-to-point messages (see the module docs).
pub(crate) struct ChannelLink {
    comm: Comm,
    tag: c_int,
    carrier: Carrier,
    /// Every member's rank in `comm`, in member order.
    members: Vec<usize>,
    /// This member's index.
    me: usize,
    /// The largest value received per round.
    inbox: Vec<Cell<u64>>,
    receiving: RefCell<Vec<Option<Incoming>>>,
    sends: RefCell<Vec<Outgoing>>,
    /// A receive `reached` could not post: the next progress call's error.
    post_failed: RefCell<Option<Error>>,
    /// With agreement: the OR of this member's bit and every bit it has received.
    failed: Option<Cell<bool>>,
    /// Messages sent (the network operations a communicator reports).
    sent: Cell<u64>,
}

impl std::fmt::Debug for ChannelLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelLink")
            .field("tag", &self.tag)
            .field("me", &self.me)
            .field("members", &self.members.len())
            .finish_non_exhaustive()
    }
}

impl ChannelLink {
    /// Member `me` of `members` (ranks of `comm`) over tag `tag`, carried by `carrier`. Local:
    /// nothing is sent yet. `comm` must outlive the link.
    pub(crate) fn new(comm: Comm, tag: c_int, carrier: Carrier, members: Vec<usize>, me: usize) -> Self {
        let rounds = barrier::rounds(members.len());
        ChannelLink {
            comm,
            tag,
            carrier,
            members,
            me,
            inbox: (0..rounds).map(|_| Cell::new(0)).collect(),
            receiving: RefCell::new((0..rounds).map(|_| None).collect()),
            sends: RefCell::new(Vec::new()),
            post_failed: RefCell::new(None),
            failed: None,
            sent: Cell::new(0),
        }
    }

    /// Messages this member has sent.
    pub(crate) fn messages_sent(&self) -> u64 {
        self.sent.get()
    }

    /// The same link, carrying the agreement's bit (see the module docs); `failed`: this
    /// member's own.
    pub(crate) fn agreeing(mut self, failed: bool) -> Self {
        self.failed = Some(Cell::new(failed));
        self
    }

    /// What the slots hold for barrier `epoch`.
    fn value_of(&self, epoch: u64) -> u64 {
        match &self.failed {
            Some(bit) => 2 * epoch + u64::from(bit.get()),
            None => epoch,
        }
    }

    fn post(&self, round: usize) -> Result<Incoming> {
        let mut buf = Box::new([0u64; WORDS]);
        let n = self.members.len();
        let sender = self.members[(self.me + n - (1 << round) % n) % n];
        let req = match self.carrier {
            // The buffer is boxed and kept beside the request until it completes or is
            // cancelled (`Drop`); `comm` outlives the link.
            Carrier::Mpi => raw::irecv(self.comm, &mut buf[..], sender, self.tag)?,
            Carrier::Private(p2p) => {
                let mut req = raw::request_null();
                // SAFETY: as above.
                let rc = unsafe {
                    (p2p.irecv)(buf.as_mut_ptr(), WORDS as c_int, sender as c_int, self.tag, self.comm, &mut req)
                };
                raw::check(rc, "a receive of the barrier's private channel")?;
                req
            }
        };
        Ok(Incoming { req, buf })
    }

    /// Applies the receives that completed, and retires the sends that did.
    fn pump(&self) -> Result<()> {
        for (round, slot) in self.receiving.borrow_mut().iter_mut().enumerate() {
            let Some(incoming) = slot else { continue };
            if !raw::test(&mut incoming.req)? {
                continue;
            }
            let [sent_round, value] = *incoming.buf;
            *slot = None;
            if sent_round as usize != round {
                return Err(Error::Transport(format!(
                    "the barrier's point-to-point messages got round {sent_round} where round {round} was due: a \
                     message of another part of the program with the barrier's tag?"
                )));
            }
            let held = &self.inbox[round];
            held.set(held.get().max(value));
            if let Some(bit) = &self.failed {
                bit.set(bit.get() || value & 1 == 1);
            }
        }
        let mut sends = self.sends.borrow_mut();
        let mut i = 0;
        while i < sends.len() {
            if raw::test(&mut sends[i].req)? {
                sends.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(())
    }
}

impl RootsLink for ChannelLink {
    fn signal(&self, round: usize, epoch: u64) -> Result<()> {
        let n = self.members.len();
        let partner = self.members[(self.me + (1 << round)) % n];
        let buf = Box::new([round as u64, self.value_of(epoch)]);
        // The buffer is boxed and kept until the send completes (`pump`, `Drop`).
        let req = match self.carrier {
            Carrier::Mpi => raw::isend(self.comm, &buf[..], partner, self.tag)?,
            Carrier::Private(p2p) => {
                let mut req = raw::request_null();
                // SAFETY: as above; `comm` outlives the link.
                let rc = unsafe {
                    (p2p.isend)(buf.as_ptr(), WORDS as c_int, partner as c_int, self.tag, self.comm, &mut req)
                };
                raw::check(rc, "a send of the barrier's private channel")?;
                req
            }
        };
        self.sent.set(self.sent.get() + 1);
        // Kept before it is tested: a test that fails leaves MPI reading the buffer.
        let mut sends = self.sends.borrow_mut();
        sends.push(Outgoing { req, buf });
        if raw::test(&mut sends.last_mut().expect("just pushed").req)? {
            sends.pop();
        }
        Ok(())
    }

    fn reached(&self, round: usize, epoch: u64) -> bool {
        let due = match &self.failed {
            Some(_) => 2 * epoch,
            None => epoch,
        };
        if self.inbox[round].get() >= due {
            return true;
        }
        // Short: a receive from the round's sender, posted once (a failure to post surfaces at
        // the progress call that follows).
        let mut receiving = self.receiving.borrow_mut();
        if receiving[round].is_none() {
            match self.post(round) {
                Ok(incoming) => receiving[round] = Some(incoming),
                Err(e) => *self.post_failed.borrow_mut() = Some(e),
            }
        }
        false
    }

    fn progress(&self) -> Result<()> {
        if let Some(e) = self.post_failed.borrow_mut().take() {
            return Err(e);
        }
        self.pump()
    }
}

impl AgreeingLink for ChannelLink {
    /// With agreement: whether a member's bit reached this one (after one whole barrier begun
    /// by every member with its bit set, whether any member's was).
    fn any_failed(&self) -> bool {
        self.failed.as_ref().is_some_and(Cell::get)
    }
}

impl Drop for ChannelLink {
    fn drop(&mut self) {
        if !raw::mpi_active() {
            // After MPI_Finalize nothing of MPI's can be touched; its buffers are left to it.
            self.receiving.get_mut().drain(..).flatten().for_each(|i| std::mem::forget(i.buf));
            self.sends.get_mut().drain(..).for_each(|s| std::mem::forget(s.buf));
            return;
        }
        for incoming in self.receiving.get_mut().iter_mut().flatten() {
            raw::cancel(&mut incoming.req);
        }
        // A last signal may still be on its way (eager sends complete at once where measured):
        // MPI keeps the request, and the buffer must stay while it may read it.
        for mut sent in self.sends.get_mut().drain(..) {
            if !raw::test(&mut sent.req).unwrap_or(true) {
                raw::release(&mut sent.req);
                std::mem::forget(sent.buf);
            }
        }
    }
}
