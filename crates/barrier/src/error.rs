//! Errors. Each variant says what happened and what to do about it.

use std::time::Duration;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A wait passed `BARRIER_TIMEOUT`.
    #[error(
        "{during} timed out after {waited:?} on world rank {world_rank} (rank {rank} of a communicator of \
         {size}): {} of {size} ranks have not arrived: world ranks {missing_world:?} (communicator ranks \
         {missing:?}); check that every rank makes the same barrier and collective calls, or raise \
         {limit}",
        missing.len()
    )]
    Timeout {
        /// The rank (in the communicator) that gave up.
        rank: usize,
        /// Its world rank.
        world_rank: usize,
        /// Communicator size.
        size: usize,
        /// The barrier epoch that did not complete (0 for a collective call).
        epoch: u64,
        /// The call that did not complete, e.g. "barrier 17".
        during: String,
        /// How long the rank waited.
        waited: Duration,
        /// Ranks (in the communicator) that have not arrived.
        missing: Vec<usize>,
        /// The same ranks as world ranks.
        missing_world: Vec<usize>,
        /// How the time limit was given, in the user's terms (`BARRIER_TIMEOUT`, or the method
        /// or option that set it: [`crate::Params::source`]).
        limit: String,
    },
    /// Another rank of the job failed, and the job is being torn down.
    #[error(
        "the job was aborted because world rank {failed_rank} failed; this rank stops waiting (world rank \
         {failed_rank}'s own error, or its launcher's message, says why it ended)"
    )]
    Aborted {
        /// World rank that failed.
        failed_rank: usize,
    },
    /// A member left the communicator, or exited, before taking part in a call that needs it.
    #[error(
        "rank {rank} (world rank {world_rank}) {how}, so {during} can never complete; every rank must make \
         the same barrier and collective calls before it drops the communicator or exits"
    )]
    RankLeft {
        /// The member, in the communicator.
        rank: usize,
        /// Its world rank.
        world_rank: usize,
        /// The call that cannot complete, e.g. "barrier 17".
        during: String,
        /// What it did, e.g. "exited with status 0 without leaving the communicator".
        how: String,
    },
    /// A member of a thread team (`barrier::sync::Team`) was dropped before a barrier it never
    /// made, so that barrier can never complete.
    #[error(
        "member {member} of a team of {team} threads was dropped{} after {completed} barrier(s), so barrier \
         {epoch} can never complete; every member must wait at every barrier before its handle is dropped",
        if *panicked { " while its thread panicked" } else { "" }
    )]
    TeamMemberGone {
        /// The member that was dropped.
        member: usize,
        /// Members of the team.
        team: usize,
        /// Barriers it completed.
        completed: u64,
        /// The barrier that cannot complete.
        epoch: u64,
        /// It was dropped by a panic unwinding its thread.
        panicked: bool,
    },
    /// A member of a thread team whose earlier wait failed: its barriers are out of step.
    #[error("this team member's barriers are out of step after an earlier failure: {0}; make a new team")]
    TeamBroken(String),
    /// A thread team's wait passed its timeout.
    #[error(
        "member {member} of a team of {team} threads timed out after {waited:.1?} in barrier {epoch}, waiting for \
         member {waiting_for} (or a member it waits for in turn); check that every member waits at every barrier, \
         or raise BARRIER_TIMEOUT"
    )]
    TeamTimeout {
        /// The member that gave up.
        member: usize,
        /// Members of the team.
        team: usize,
        /// The barrier.
        epoch: u64,
        /// How long it waited.
        waited: Duration,
        /// The member whose signal it waited for.
        waiting_for: usize,
    },
    /// The launcher of the job died; the ranks end too.
    #[error("the job's launcher is gone (killed or crashed), so this job has ended; this rank stops waiting")]
    JobGone,
    /// A setting that must be the same on every rank is not.
    #[error(
        "{name} is not the same on every rank: world ranks {differ:?} have a different value from world \
         rank {reference} (this rank has {value:?}); set it the same for every rank"
    )]
    MismatchedParam {
        /// The parameter.
        name: String,
        /// World ranks whose value differs from the reference rank's.
        differ: Vec<usize>,
        /// The world rank whose value is the reference (the communicator's rank 0).
        reference: usize,
        /// This rank's value.
        value: String,
    },
    /// Another rank could not parse one of its settings, so the collective call failed everywhere.
    #[error(
        "world rank {world_rank} rejected its value of {name} (its own error says which value and what is \
         accepted), so this collective call failed on every rank; give every rank valid settings"
    )]
    PeerInvalidParam {
        /// The world rank with the bad value.
        world_rank: usize,
        /// The parameter.
        name: String,
    },
    /// A previous barrier on this communicator failed, so its state is no longer consistent.
    #[error("communicator is unusable after an earlier failure: {0}; create a new communicator")]
    Broken(String),
    /// A backend named in `BARRIER_BACKEND` does not exist.
    #[error("unknown backend {name:?} in {given_in}; known backends: {known}")]
    UnknownBackend {
        /// The name given.
        name: String,
        /// Where the list was given: `BARRIER_BACKEND`, or the method or option that set it
        /// ([`crate::Params::source`]).
        given_in: String,
        /// Comma-separated list of known names.
        known: String,
    },
    /// Backends named explicitly could not run; explicit choices fail loudly.
    #[error("no backend of {requested:?} (given in {given_in}) can run on this communicator: {reasons}")]
    ForcedBackendUnavailable {
        /// The value of BARRIER_BACKEND.
        requested: String,
        /// Where it was given: `BARRIER_BACKEND`, or the method or option that set it
        /// ([`crate::Params::source`]).
        given_in: String,
        /// Why each one declined.
        reasons: String,
    },
    /// No backend at all can run (every one disabled or declined).
    #[error("no barrier backend can run on this communicator: {0}; enable the dissemination backend")]
    NoBackend(String),
    /// A parameter has a value that cannot be parsed or is out of range.
    #[error("invalid value {value:?} for {given_in}: {expected}")]
    InvalidParam {
        /// Parameter name, e.g. `BARRIER_TIMEOUT`.
        name: String,
        /// Where the value was given: the variable (`name`), or the method or option that set
        /// it ([`crate::Params::source`]).
        given_in: String,
        /// The value given.
        value: String,
        /// What would be accepted.
        expected: String,
    },
    /// A communicator could not be set up through a bootstrap other than the launcher (MPI):
    /// what failed, on which rank.
    #[error("could not set up the communicator: {0}")]
    Setup(String),
    /// The launcher's environment is present but inconsistent.
    #[error("bad launcher environment: {0}; start the program with `barrier run -n N -- PROGRAM`")]
    Bootstrap(String),
    /// `init()` in one process of a job that an MPI launcher (or Slurm) started with several:
    /// each would otherwise be a world of one, silently.
    #[error(
        "this process is one of {size} started by {launcher} ({var}={size}), but barrier::init() joins only jobs \
         that `barrier run` starts, so each process would be a world of 1: in an MPI program use barrier-mpi \
         (`use barrier_mpi::FastBarrier;` then `world.fast_barrier()`) or preload the interposer \
         (libbarrier_pmpi.so); to run under `barrier run`, start it with `barrier run -n N -- PROGRAM`; to \
         mean a world of 1 in each process, set BARRIER_SINGLETON=1"
    )]
    LaunchedByMpi {
        /// The launcher the environment names.
        launcher: &'static str,
        /// The variable that says so.
        var: &'static str,
        /// The processes it started.
        size: usize,
    },
    /// The job's shared segment has no room for another communicator or window.
    #[error("the job's shared segment is full ({needed} bytes needed, {free} free); free communicators or start the job with a larger BARRIER_SHM_POOL_BYTES")]
    SegmentFull {
        /// Bytes requested.
        needed: usize,
        /// Bytes left.
        free: usize,
    },
    /// The transport that carries puts and atomics between nodes (the job segment's slots,
    /// MPI one-sided windows) refused or failed an operation: what, and on which slots.
    #[error("transport failure: {0}")]
    Transport(String),
    /// An argument is outside what the call accepts: which, and what it accepts.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The operating system refused an operation.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The same error; a [`Error::Timeout`] names its limit as `given_in` (how the settings
    /// gave `BARRIER_TIMEOUT`: [`crate::Params::source`]), for a layer that built it from the
    /// variable's name.
    pub fn timeout_given_in(self, given_in: String) -> Self {
        match self {
            Error::Timeout { rank, world_rank, size, epoch, during, waited, missing, missing_world, .. } => {
                Error::Timeout {
                    rank,
                    world_rank,
                    size,
                    epoch,
                    during,
                    waited,
                    missing,
                    missing_world,
                    limit: given_in,
                }
            }
            other => other,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { what: what.into(), source }
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An [`Error`] as `main` should show it. Rust prints the error a `main` returns with `Debug`;
/// this type's `Debug` is the error's message, so `fn main() -> Result<(), barrier::Report>`
/// ends with a sentence a person can act on rather than a dump of the enum:
///
/// ```no_run
/// fn main() -> Result<(), barrier::Report> {
///     let universe = barrier::init()?;
///     universe.world().barrier()?;
///     Ok(())
/// }
/// ```
pub struct Report(pub Error);

impl From<Error> for Report {
    fn from(e: Error) -> Self {
        Report(e)
    }
}

impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for Report {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}
