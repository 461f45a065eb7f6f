//! The settings of a communicator over MPI, checked on every rank and agreed (step 1 of the crate
//! docs) by the core's agreement ([`barrier::hierarchy::settings`]), with `mpi` (this level's
//! own barrier) as a backend name, and the set-up fault a test injects (`BARRIER_MPI_FAULT`).

pub(crate) use crate::catalogue::FAULT;
use crate::catalogue::{INTERNODE as MPI_INTERNODE, NODE_BLOCK as MPI_NODE_BLOCK};
use barrier::hierarchy::{Layer, Proposal, PROPOSAL_WORDS};
use barrier::{Error, Params, Result};

use crate::census;
use crate::raw::{self, Comm};

/// The name of the last backend of the chain: `MPI_Barrier` itself.
pub const MPI_BACKEND: &str = "mpi";
/// The name reported for shared memory inside nodes and MPI between them.
pub const HIERARCHICAL: &str = "hierarchical";

/// `group` is the scoll component's (an active set's communicator, `MPI_Comm_create_group`);
/// `exchange` the coll component's background set-up (its exchange, started at the first
/// `MPI_Ibarrier`).
const FAULT_STAGES: [&str; 5] = ["open", "join", "internode", "group", "exchange"];

/// BARRIER_MPI_FAULT as (stage, world rank).
fn parse_fault(params: &Params) -> Result<Option<(String, usize)>> {
    let Some(v) = params.get(FAULT) else { return Ok(None) };
    let parsed = v.trim().split_once(':').and_then(|(stage, rank)| {
        let stage = stage.trim().to_ascii_lowercase();
        (FAULT_STAGES.contains(&stage.as_str())).then_some(stage).zip(rank.trim().parse().ok())
    });
    parsed.map(Some).ok_or_else(|| Error::InvalidParam {
        name: FAULT.into(),
        given_in: params.source(FAULT),
        value: v,
        expected: format!("STAGE:RANK with STAGE one of {}", FAULT_STAGES.join(", ")),
    })
}

/// How this layer enters the core's agreement of settings ([`barrier::hierarchy::settings`]).
pub(crate) const LAYER: Layer = Layer {
    own_backend: Some(MPI_BACKEND),
    node_block: MPI_NODE_BLOCK,
    internode: MPI_INTERNODE,
    internode_own: crate::internode::OWN,
    extra_check: Some((FAULT, check_fault)),
};

fn check_fault(params: &Params) -> Result<()> {
    parse_fault(params).map(|_| ())
}

/// The failure of a test's injected fault (`BARRIER_MPI_FAULT`, as (stage, world rank)) at
/// `stage` on `world_rank`, where it names them.
pub(crate) fn fault_at(fault: &Option<(String, usize)>, stage: &str, world_rank: usize) -> Result<()> {
    match fault {
        Some((s, r)) if s == stage && *r == world_rank => {
            Err(Error::Setup(format!("fault injected by {FAULT}={stage}:{world_rank}")))
        }
        _ => Ok(()),
    }
}

/// The failure of a test's injected fault (`BARRIER_MPI_FAULT`) at `stage` on this process's
/// `MPI_COMM_WORLD` rank, for a stage outside the set-up's own, read where it runs: scoll's
/// `group`, the background set-up's `exchange`.
pub fn injected(params: &Params, stage: &str) -> Result<()> {
    let fault = parse_fault(params).ok().flatten();
    raw::rank(raw::comm_world()).map_or(Ok(()), |me| fault_at(&fault, stage, me))
}

/// The settings every rank goes on with (the core's agreement: rank 0's values), and the set-up
/// fault a test injects on one rank (each rank reads its own).
pub(crate) struct Agreed {
    pub(crate) core: barrier::hierarchy::Agreed,
    pub(crate) fault: Option<(String, usize)>,
    /// Every rank's place words ([`census::my_place`]), by rank, gathered with the settings;
    /// empty where it was decided from the background set-up's records.
    pub(crate) places: Vec<Vec<u64>>,
    /// What names this build on every rank, where the settings' allgather made it (see
    /// [`build_token`]): the communicator's rank 0's machine and token.
    pub(crate) build: Option<[u64; 2]>,
}

/// A word no other build of the job has, from its rank 0 with that rank's machine word: this
/// process's ID and its count of builds so far (never 0).
fn build_token() -> u64 {
    static BUILDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let count = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed).wrapping_add(1);
    u64::from(std::process::id()) << 32 | u64::from(count)
}

/// Checks every setting on every rank and agrees on the verdict and on rank 0's values; every
/// rank's place words and build token come with them (one allgather).
pub(crate) fn agree_settings(comm: Comm, params: &Params, world_rank: usize) -> Result<Agreed> {
    let proposal = propose(params, world_rank);
    let mut mine = proposal.words().to_vec();
    mine.extend(census::my_place(world_rank));
    mine.push(build_token());
    let rows = raw::allgather(comm, &mine)?;
    let mut agreed = decide(proposal, &rows, params)?;
    // Each row: the proposal, the place words, the build token.
    agreed.places = rows.iter().map(|row| row[PROPOSAL_WORDS..row.len() - 1].to_vec()).collect();
    agreed.build = rows.first().map(|row| [row[PROPOSAL_WORDS], row[row.len() - 1]]);
    Ok(agreed)
}

/// This rank's side of the core's agreement (the background set-up gathers its words with the
/// rest of its record).
pub(crate) fn propose(params: &Params, world_rank: usize) -> Proposal {
    crate::catalogue::register();
    Proposal::new(params, &LAYER, world_rank)
}

/// The agreement from every rank's row, each starting with its [`Proposal::words`].
pub(crate) fn decide<R: AsRef<[u64]>>(proposal: Proposal, rows: &[R], params: &Params) -> Result<Agreed> {
    let core = proposal.decide(rows)?;
    Ok(Agreed { core, fault: parse_fault(params).ok().flatten(), places: Vec::new(), build: None })
}
