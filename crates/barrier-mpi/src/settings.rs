//! The settings of a communicator over MPI, checked on every rank and agreed (step 1 of the crate
//! docs): every `BARRIER_*` value, `BARRIER_BACKEND`'s names (with `mpi`, this level's own), the
//! values that must be rank 0's, and the set-up fault a test injects (`BARRIER_MPI_FAULT`).

use std::time::Duration;

pub(crate) use barrier::params::MPI_FAULT as FAULT;
use barrier::params::MPI_NODE_BLOCK;
use barrier::{Error, Params, Result};

use crate::raw::{self, Comm};

/// The name of the last backend of the chain: `MPI_Barrier` itself.
pub const MPI_BACKEND: &str = "mpi";
/// The name reported for shared memory inside nodes and MPI between them.
pub const HIERARCHICAL: &str = "hierarchical";

const FAULT_STAGES: [&str; 3] = ["open", "join", "internode"];

/// BARRIER_MPI_FAULT as (stage, world rank).
fn parse_fault(params: &Params) -> Result<Option<(String, usize)>> {
    let Some(v) = params.get(FAULT) else { return Ok(None) };
    let parsed = v.trim().split_once(':').and_then(|(stage, rank)| {
        let stage = stage.trim().to_ascii_lowercase();
        (FAULT_STAGES.contains(&stage.as_str())).then_some(stage).zip(rank.trim().parse().ok())
    });
    parsed.map(Some).ok_or_else(|| Error::InvalidParam {
        name: FAULT.into(),
        value: v,
        expected: format!("STAGE:RANK with STAGE one of {}", FAULT_STAGES.join(", ")),
    })
}

/// The settings every rank must agree on, as rank 0 has them.
pub(crate) struct Agreed {
    pub(crate) node_block: usize,
    pub(crate) mpi_only: bool,
    pub(crate) may_fall_back: bool,
    pub(crate) timeout: Option<Duration>,
    /// BARRIER_MPI_FAULT: a set-up stage that fails on one world rank (tests).
    pub(crate) fault: Option<(String, usize)>,
}

/// Checks every setting on every rank and agrees on the verdict and on rank 0's values.
pub(crate) fn agree_settings(comm: Comm, params: &Params, world_rank: usize) -> Result<Agreed> {
    let known = barrier::registry::all_params();
    let core = node_params(params);
    let local_bad = known.iter().enumerate().find_map(|(i, info)| {
        // BARRIER_BACKEND may also name `mpi` here: checked on its own below.
        let checked = match info.name.as_str() {
            "BARRIER_BACKEND" => check_backend_list(params),
            FAULT => parse_fault(params).map(|_| ()),
            _ => core.check(info),
        };
        checked.err().map(|e| (i, e))
    });
    let node_block = params.parse(MPI_NODE_BLOCK, 0usize, "").unwrap_or(0);
    let list = backend_list(params);
    let mpi_only = list.first().is_some_and(|b| b == MPI_BACKEND);
    let may_fall_back = list.is_empty() || list.iter().any(|b| b == MPI_BACKEND);
    let timeout = params.duration("BARRIER_TIMEOUT").ok().flatten();
    // Each rank reads its own: the fault is meant for one rank.
    let fault = parse_fault(params).ok().flatten();
    let words = [
        local_bad.as_ref().map_or(0, |(i, _)| *i as u64 + 1),
        node_block as u64,
        u64::from(mpi_only),
        u64::from(may_fall_back),
        timeout.map_or(0, |t| t.as_micros().clamp(1, u64::MAX as u128) as u64),
        world_rank as u64,
    ];
    let all = raw::allgather(comm, &words)?;
    if let Some((_, e)) = local_bad {
        return Err(e);
    }
    if let Some(w) = all.iter().find(|w| w[0] != 0) {
        return Err(Error::PeerInvalidParam {
            world_rank: w[5] as usize,
            name: known.get(w[0] as usize - 1).map_or_else(String::new, |p| p.name.clone()),
        });
    }
    let r0 = &all[0];
    Ok(Agreed {
        node_block: r0[1] as usize,
        mpi_only: r0[2] != 0,
        may_fall_back: r0[3] != 0,
        timeout: (r0[4] > 0).then(|| Duration::from_micros(r0[4])),
        fault,
    })
}

/// The core parameters for the node's own communicator: `BARRIER_BACKEND` without the names
/// that only exist at this level (`mpi`, `hierarchical`: the node is one node).
pub(crate) fn node_params(params: &Params) -> Params {
    let list: Vec<String> =
        backend_list(params).into_iter().filter(|b| b != MPI_BACKEND && b != HIERARCHICAL).collect();
    params.clone().set("BARRIER_BACKEND", list.join(","))
}

fn backend_list(params: &Params) -> Vec<String> {
    params
        .get("BARRIER_BACKEND")
        .map(|v| v.split(',').map(|b| b.trim().to_ascii_lowercase()).filter(|b| !b.is_empty()).collect())
        .unwrap_or_default()
}

fn check_backend_list(params: &Params) -> Result<()> {
    let known: Vec<&str> = barrier::backends().iter().map(|b| b.name()).chain(std::iter::once(MPI_BACKEND)).collect();
    for name in backend_list(params) {
        if !known.contains(&name.as_str()) {
            return Err(Error::UnknownBackend { name, known: known.join(", ") });
        }
    }
    Ok(())
}
