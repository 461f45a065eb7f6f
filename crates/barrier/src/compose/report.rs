//! What the roots' phase says: its stall report and its timeout, one function each, in the
//! layer's words (ranks under MPI, PEs under OpenSHMEM), so that the same stalled node root
//! reads the same under both.

use std::time::Duration;

use crate::error::Error;

/// How the roots' reports name things, in the layer's words.
#[derive(Clone, Debug)]
pub struct Names {
    /// How a report starts ("barrier", "barrier-shmem").
    pub layer: &'static str,
    /// A member of the job ("rank", "PE").
    pub member: &'static str,
    /// This root ("world rank 3 (rank 3 of a communicator of 8 ranks)", "PE 3").
    pub me: String,
    /// This root's index among the roots.
    pub index: usize,
    /// This root's rank in the communicator, its world rank, and the communicator's size.
    pub rank: usize,
    pub world_rank: usize,
    pub size: usize,
    /// Every root, as a report names it ("the node root at world rank 5 (communicator rank
    /// 5)", "the node root PE 5 (its node: PEs [5, 6])"), and its rank and world rank.
    pub roots: Vec<String>,
    pub root_ranks: Vec<(usize, usize)>,
    /// Where the timeout was given (`BARRIER_TIMEOUT`, or the method that set it).
    pub limit: String,
    /// The layer's setting that chooses the roots' way (its name, as the layer declares it).
    pub setting: &'static str,
    /// The members are every rank of the communicator, not node roots (barrier-mpi's flat
    /// dissemination, where a set-up across nodes failed): the reports speak of a dissemination
    /// among all ranks, not of an internode phase.
    pub flat: bool,
}

/// Whom a wait of the roots' phase waits for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Awaited {
    /// Our round `round`'s signal from root `sender` (its index).
    Root { round: usize, sender: usize },
    /// The implementation's barrier, which does not say which root is missing.
    Unknown { barrier: &'static str },
}

/// Where the wait is, and for whom, as both reports say it.
fn waiting_for(names: &Names, epoch: u64, awaited: Awaited, verb: &str) -> String {
    match awaited {
        Awaited::Root { round, sender } if names.flat => format!(
            "in barrier {epoch}, in its dissemination among all {m}s (round {round}): {} {verb}: it has not arrived \
             (or it waits for another {m} in turn)",
            names.roots[sender],
            m = names.member
        ),
        Awaited::Root { round, sender } => format!(
            "in barrier {epoch}, in its internode phase (round {round}): {} {verb}: that node, or a {} on it, has \
             not arrived (or it waits for another root in turn)",
            names.roots[sender], names.member
        ),
        Awaited::Unknown { barrier } => format!(
            "in barrier {epoch}, in its internode phase ({barrier} among the node roots): a node root has not \
             arrived (its node, or a {} on it, has not; {barrier} does not say which: {}=dissemination names it)",
            names.member, names.setting
        ),
    }
}

/// Says once that this root has waited `waited` in the roots' phase of barrier `epoch`, and for
/// whom; the wait goes on.
#[cold]
pub(crate) fn stall(names: &Names, epoch: u64, awaited: Awaited, waited: Duration) {
    let msg = format!(
        "{}: {} has waited {waited:.1?} {}; still waiting (this report: BARRIER_STALL_REPORT; to give up instead, \
         set BARRIER_TIMEOUT)",
        names.layer,
        names.me,
        waiting_for(names, epoch, awaited, "has not signalled")
    );
    tracing::warn!(target: "barrier", "{msg}");
    crate::text::say(&msg);
}

/// The error of a roots' phase that passed the timeout: an [`Error::Timeout`] naming the root
/// waited for as the missing one, or (the implementation's barrier, which cannot say which root
/// is missing) a transport failure that says so.
#[cold]
pub(crate) fn timed_out(names: &Names, epoch: u64, awaited: Awaited, waited: Duration) -> Error {
    match awaited {
        Awaited::Root { round, sender } => Error::Timeout {
            rank: names.rank,
            world_rank: names.world_rank,
            size: names.size,
            epoch,
            during: match names.flat {
                true => format!(
                    "the dissemination among all {m}s of barrier {epoch} (round {round}): {} never signalled: it has \
                     not arrived (or it waits for another {m} in turn)",
                    names.roots[sender],
                    m = names.member
                ),
                false => format!(
                    "the internode phase of barrier {epoch} (round {round}): {} never signalled: that node, or a {} \
                     on it, has not arrived (or it waits for another root in turn)",
                    names.roots[sender], names.member
                ),
            },
            waited,
            missing: vec![names.root_ranks[sender].0],
            missing_world: vec![names.root_ranks[sender].1],
            limit: names.limit.clone(),
        },
        Awaited::Unknown { barrier } => Error::Transport(format!(
            "{}: the internode phase of barrier {epoch} ({barrier} among the node roots) timed out after \
             {waited:.1?}: a node root has not arrived (its node, or a {} on it, has not; {barrier} does not say \
             which: {}=dissemination names it); check that every {} makes the same barrier calls, or raise {}",
            names.me, names.member, names.setting, names.member, names.limit
        )),
    }
}
