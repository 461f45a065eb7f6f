//! What both sides of the background set-up (one node, across nodes) share: the member this
//! rank is, its record in the exchange (one `MPI_Iallgather` in the first call), and what every
//! rank reads back from the gathered records: the settings' agreement decided over them, each
//! rank's node, and its node's set-up aside.
//!
//! A record is [`HEAD`] words (the component's verdict here, the world rank, the machine word,
//! the PID, the offered memfd's descriptor, device and inode, and whether this rank serves the
//! communicator ahead across nodes), then the settings' agreement's [`SETTINGS`] words, then the
//! CPU mask's [`MASK`] words.

use std::os::fd::OwnedFd;
use std::time::Duration;

use barrier::hierarchy::aside::{AsideSpec, Fault, Offer};
use barrier::shm::JobShape;
use barrier::{Params, Result};

use crate::census::{self, MachineJob};
use crate::raw::{self, Comm};
use crate::settings;

/// The component that builds in the background (its messages' prefix; `coll_fastbar_*` its
/// settings).
pub(super) const FRAMEWORK: &str = "coll";
pub(super) const COMPONENT: &str = "coll/fastbar";

/// This rank as a member of the communicator being built, as both sides of the set-up (one
/// node, across nodes) know it.
#[derive(Clone, Debug)]
pub(super) struct Member {
    pub(super) comm: Comm,
    pub(super) params: Params,
    pub(super) rank: usize,
    pub(super) size: usize,
    pub(super) world_rank: usize,
    pub(super) verbose: bool,
}

/// Words of a rank's record before the settings' words.
pub(super) const HEAD: usize = 8;
/// The settings' agreement's words ([`barrier::hierarchy::Proposal`]).
pub(super) const SETTINGS: usize = barrier::hierarchy::PROPOSAL_WORDS;
/// The CPU mask's words.
pub(super) const MASK: usize = 16;
pub(super) const RECORD: usize = HEAD + SETTINGS + MASK;

/// How long a node's other rank retries to map the first rank's segment at least (its
/// `BARRIER_TIMEOUT` if longer): the first rank lays it out at its own next MPI call.
const OPEN_LIMIT: Duration = Duration::from_secs(60);

/// The settings' agreement, from the gathered records.
pub(super) fn agree(rows: &[&[u64]], world_rank: usize, params: &Params) -> Result<settings::Agreed> {
    let settings_rows: Vec<&[u64]> = rows.iter().map(|r| &r[HEAD..HEAD + SETTINGS]).collect();
    settings::decide(settings::propose(params, world_rank), &settings_rows, params)
}

/// A rank's node: its machine and, with node blocks of `block` ranks, its world rank's block.
fn node_key(row: &[u64], block: usize) -> (u64, usize) {
    (row[2], (row[1] as usize).checked_div(block).unwrap_or(0))
}

/// A rank's node among the gathered records (by rank): the nodes' first ranks, in rank order,
/// this rank's node among them, its ranks, and the job on its machine (the communicator's ranks
/// there and their cores).
pub(super) struct NodeOf {
    pub(super) firsts: Vec<usize>,
    pub(super) node: usize,
    pub(super) local: Vec<usize>,
    pub(super) job: MachineJob,
}

/// Rank `rank`'s node, with node blocks of `block` ranks.
pub(super) fn node_of(rows: &[&[u64]], rank: usize, block: usize) -> NodeOf {
    let nodes = barrier::hierarchy::number_nodes(&rows.iter().map(|row| node_key(row, block)).collect::<Vec<_>>());
    // A node's first rank is where its number first appears (numbers come in order).
    let mut firsts: Vec<usize> = Vec::new();
    for (r, &n) in nodes.iter().enumerate() {
        if n == firsts.len() {
            firsts.push(r);
        }
    }
    let node = nodes[rank];
    let local = (0..rows.len()).filter(|&r| nodes[r] == node).collect();
    let machine = rows.iter().filter(|r| r[2] == rows[rank][2]).map(|r| &r[HEAD + SETTINGS..]);
    NodeOf { firsts, node, local, job: census::job_on_machine(census::machine_of_masks(machine)) }
}

/// What the core's set-up aside ([`NodeAside`](barrier::hierarchy::aside::NodeAside)) needs on
/// this rank (`rank`, `world_rank`) of `node`, with the empty memfd it offered in case it is the
/// node's first; `across_nodes`: the set-up also makes the node's part of the hierarchy (where
/// this rank decided to serve ahead across nodes, even if the records find one node). `Err`: why
/// the node cannot be set up (its first rank made no memfd).
pub(super) fn aside_spec(
    rows: &[&[u64]],
    node: &NodeOf,
    (rank, world_rank): (usize, usize),
    agreed: &settings::Agreed,
    params: &Params,
    memfd: Option<OwnedFd>,
    across_nodes: bool,
) -> std::result::Result<AsideSpec, String> {
    let first = rows[node.local[0]];
    if first[4] == u64::MAX {
        return Err(format!("world rank {} could not make an empty memfd", first[1]));
    }
    let job = node.job;
    Ok(AsideSpec {
        local_rank: node.local.iter().position(|&r| r == rank).expect("this rank is on its node"),
        shape: JobShape { world_size: node.local.len(), nodes: 1, ranks_on_machine: job.ranks, cores: job.cores },
        params: agreed.core.node_params(params, &settings::LAYER),
        progress: Some(barrier::wait::Progress::new(raw::progress, raw::to_word(raw::comm_self()))),
        names: barrier::shm::RankNames {
            world: node.local.iter().map(|&r| rows[r][1] as usize).collect(),
            comm: node.local.clone(),
            comm_size: rows.len(),
            hierarchical: node.firsts.len() > 1,
        },
        first: offer_of(first),
        memfd,
        open_limit: open_limit(agreed.core.timeout),
        fault: fault(world_rank, agreed),
        across_nodes,
    })
}

/// Where a node's first rank offered its memfd.
fn offer_of(first: &[u64]) -> Offer {
    Offer { pid: first[3] as u32, fd: first[4] as i32, identity: (first[5], first[6]) }
}

/// How long a node's other rank retries to map its first rank's segment: [`OPEN_LIMIT`], or the
/// agreed timeout where longer.
pub(super) fn open_limit(timeout: Option<Duration>) -> Duration {
    timeout.unwrap_or(OPEN_LIMIT).max(OPEN_LIMIT)
}

/// A test's fault (`BARRIER_MPI_FAULT`) on `world_rank`: `open` on a node's other rank, `join`
/// on any.
fn fault(world_rank: usize, agreed: &settings::Agreed) -> Fault {
    let fault = agreed.fault.clone();
    Box::new(move |stage: &str| settings::fault_at(&fault, stage, world_rank))
}
