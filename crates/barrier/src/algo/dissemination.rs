//! Dissemination over a fabric: the put-based barrier among some ranks of a communicator,
//! shared by the backends that run it among all ranks across nodes (`dissemination`), among
//! the node roots (`hierarchical`) and among the CMG leaders (`a64fx`).

use crate::backend::{Decline, EnableContext};
use crate::error::Error;
use crate::shm::Shared;
use crate::transport::{Fabric, MemHandle, Signal};
use crate::wait::Flag;

/// Dissemination over the fabric among some ranks of a communicator (all of them, the node
/// roots of a hierarchical barrier, the CMG leaders of the A64FX backend): ⌈log2 m⌉ rounds
/// for `m` members; in round `r` member `j` signals round-`r` slot of member `(j + 2^r) mod m`
/// and waits for its own round-`r` slot. Each member registers its row of dissemination slots
/// and the handles are exchanged while the communicator is created; every signal goes through
/// the transport the fabric ranks first for that peer (across nodes: the network, so it is
/// counted). Slots only grow, so nothing is reset between barriers.
#[derive(Debug)]
pub(crate) struct FabricDissemination {
    /// Own slot per round.
    inbox: Vec<Shared<Flag>>,
    /// The partner's slot per round.
    outbox: Vec<Signal>,
    step: usize,
}

impl FabricDissemination {
    /// Sets up the dissemination among `members` (communicator ranks, in member order);
    /// collective over the whole communicator: the other ranks take part in the handle
    /// exchange with empty words. `None` on a rank that is not a member.
    pub fn enable(ctx: &EnableContext<'_>, fabric: &Fabric, members: &[usize]) -> Result<Option<Self>, Decline> {
        let q = &ctx.query;
        let decline = |e: Error| Decline::new(e.to_string());
        let rounds = crate::region::rounds(members.len());
        let me = members.iter().position(|&r| r == q.rank);
        let mine = match me {
            Some(_) if rounds > 0 => fabric.register(&ctx.region.diss_row(q.rank)[..rounds]).map(Some),
            _ => Ok(None),
        };
        let words = mine.as_ref().ok().and_then(|h| h.map(MemHandle::to_words)).unwrap_or([0, 0]);
        let all = ctx.allgather(&words).map_err(decline)?;
        let outbox: Result<Vec<Signal>, Error> = match (&mine, me) {
            (Ok(_), Some(j)) => (0..rounds)
                .map(|r| {
                    let partner = members[(j + (1 << r)) % members.len()];
                    let handle = MemHandle::from_words([all[partner][0], all[partner][1]]);
                    fabric.signal_to(ctx.peer(partner), handle, r)
                })
                .collect(),
            (Ok(_), None) => Ok(Vec::new()),
            (Err(e), _) => Err(Error::Transport(e.to_string())),
        };
        if !ctx.all_agree(outbox.is_ok()).map_err(decline)? {
            return Err(Decline::new(
                outbox.err().map_or_else(
                    || "another rank could not reach its dissemination partners".into(),
                    |e| e.to_string(),
                ),
            ));
        }
        let outbox = outbox.map_err(decline)?;
        Ok(me.map(|_| FabricDissemination {
            inbox: (0..rounds).map(|r| ctx.region.shared_flag(ctx.region.diss(q.rank, r))).collect(),
            outbox,
            step: 0,
        }))
    }

    /// Its own slot and its partner's per round, for a module that runs the rounds itself.
    pub(crate) fn into_parts(self) -> (Vec<Shared<Flag>>, Vec<Signal>) {
        (self.inbox, self.outbox)
    }

    /// Whether the transports need this rank's calls to move its puts along.
    pub fn needs_progress(&self) -> bool {
        self.outbox.iter().any(Signal::needs_progress)
    }

    /// Starts epoch `epoch`: the first round's signal.
    #[inline]
    pub fn start(&mut self, epoch: u64, wake: bool) -> Result<(), Error> {
        self.step = 0;
        match self.outbox.first() {
            Some(first) => first.signal(epoch, wake),
            None => Ok(()),
        }
    }

    /// Advances: `Some((slot, last))` to wait on (`last`: it is the final round), `None` when
    /// every round is done.
    #[inline]
    pub fn progress(&mut self, epoch: u64, wake: bool) -> Result<Option<(&Flag, bool)>, Error> {
        while let Some(slot) = self.inbox.get(self.step) {
            if !slot.reached(epoch) {
                return Ok(Some((slot, self.step + 1 == self.inbox.len())));
            }
            self.step += 1;
            if let Some(next) = self.outbox.get(self.step) {
                next.signal(epoch, wake)?;
            }
        }
        Ok(None)
    }
}
