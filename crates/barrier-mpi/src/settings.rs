//! The settings of a communicator over MPI, checked on every rank and agreed (step 1 of the crate
//! docs): every `BARRIER_*` value, `BARRIER_BACKEND`'s names (with `mpi`, this level's own), the
//! values that must be rank 0's, and the set-up fault a test injects (`BARRIER_MPI_FAULT`).

use std::time::Duration;

pub(crate) use crate::catalogue::FAULT;
use crate::catalogue::{INTERNODE as MPI_INTERNODE, NODE_BLOCK as MPI_NODE_BLOCK};
use barrier::params::ParamKind;
use barrier::{Error, ParamInfo, Params, Result};

use crate::raw::{self, Comm};
use barrier::hierarchy::Choice;

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
        given_in: params.source(FAULT),
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
    /// How the node roots meet (BARRIER_MPI_INTERNODE and rank 0's reports).
    pub(crate) internode: Choice,
    /// Names in BARRIER_BACKEND that some ranks did not register: declined on every rank (the
    /// node's own communicator must not see them: a node whose ranks all have it would pick a
    /// backend other nodes lack).
    pub(crate) not_everywhere: Vec<String>,
}

/// Checks every setting on every rank and agrees on the verdict and on rank 0's values.
pub(crate) fn agree_settings(comm: Comm, params: &Params, world_rank: usize) -> Result<Agreed> {
    crate::catalogue::register();
    let known = barrier::registry::all_params();
    let core = node_params(params);
    let local_bad = known.iter().enumerate().find_map(|(i, info)| {
        // BARRIER_BACKEND may also name `mpi` here: checked on its own below.
        let checked = match info.name.as_str() {
            // Its shape here; its names are agreed below (a backend registered on some ranks
            // only is named as such, not "unknown" on those ranks).
            "BARRIER_BACKEND" => {
                params.check(&ParamInfo::new("BARRIER_BACKEND", "", "").kind(ParamKind::AnyBackendList))
            }
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
        unknown_names(&list),
        list_hash(&list),
        internode_choice(params, timeout).to_word(),
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
    let not_everywhere = agree_backend_names(&list, &all, &params.source("BARRIER_BACKEND"))?;
    let r0 = &all[0];
    Ok(Agreed {
        not_everywhere,
        node_block: r0[1] as usize,
        mpi_only: r0[2] != 0,
        may_fall_back: r0[3] != 0,
        timeout: (r0[4] > 0).then(|| Duration::from_micros(r0[4])),
        fault,
        internode: Choice::from_word(r0[8]),
    })
}

/// `BARRIER_MPI_INTERNODE` on this rank: `auto` times both ways unless a report that names the
/// missing root was asked for (a timeout, a stall report set explicitly).
fn internode_choice(params: &Params, timeout: Option<Duration>) -> Choice {
    let reports = timeout.is_some() || params.get("BARRIER_STALL_REPORT").is_some();
    Choice::from_setting(params.get(MPI_INTERNODE).as_deref(), crate::internode::OWN, reports)
}

/// The core parameters for the node's own communicator: `BARRIER_BACKEND` without the names
/// that only exist at this level (`mpi`, `hierarchical`: the node is one node).
pub(crate) fn node_params(params: &Params) -> Params {
    node_params_without(params, &[])
}

/// [`node_params`], without the names in `declined` (see [`Agreed::not_everywhere`]).
pub(crate) fn node_params_without(params: &Params, declined: &[String]) -> Params {
    let list: Vec<String> = backend_list(params)
        .into_iter()
        .filter(|b| b != MPI_BACKEND && b != HIERARCHICAL && !declined.contains(b))
        .collect();
    params.clone().derive("BARRIER_BACKEND", list.join(","))
}

fn backend_list(params: &Params) -> Vec<String> {
    params
        .get("BARRIER_BACKEND")
        .map(|v| v.split(',').map(|b| b.trim().to_ascii_lowercase()).filter(|b| !b.is_empty()).collect())
        .unwrap_or_default()
}

/// The backend names this rank knows: its registry's and `mpi`.
fn known_backends() -> Vec<&'static str> {
    barrier::backends().iter().map(|b| b.name()).chain(std::iter::once(MPI_BACKEND)).collect()
}

/// Bit `i` set: the list's name `i` is not a backend this rank knows.
fn unknown_names(list: &[String]) -> u64 {
    let known = known_backends();
    list.iter().take(64).enumerate().filter(|(_, n)| !known.contains(&n.as_str())).fold(0, |m, (i, _)| m | 1 << i)
}

/// The list as the ranks compare it (FNV-1a; 0 for no list).
fn list_hash(list: &[String]) -> u64 {
    if list.is_empty() {
        return 0;
    }
    list.join(",").bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)) | 1
}

/// `BARRIER_BACKEND` agreed across the ranks (words 6 and 7 of the settings exchange): the same
/// list everywhere. A name no rank knows is unknown (refused); one some ranks lack is declined
/// on every rank, as the core's selector declines it, and returned; if that leaves no name, the
/// refusal names the ranks that lack each.
fn agree_backend_names(list: &[String], all: &[Vec<u64>], given_in: &str) -> Result<Vec<String>> {
    let differ: Vec<usize> = all.iter().filter(|w| w[7] != all[0][7]).map(|w| w[5] as usize).collect();
    if !differ.is_empty() {
        return Err(Error::MismatchedParam {
            name: "BARRIER_BACKEND".into(),
            differ,
            reference: all[0][5] as usize,
            value: list.join(","),
        });
    }
    let mut declined = Vec::new();
    let mut reasons = Vec::new();
    for (i, name) in list.iter().enumerate().take(64) {
        let lacking: Vec<usize> = all.iter().filter(|w| w[6] >> i & 1 == 1).map(|w| w[5] as usize).collect();
        if lacking.len() == all.len() {
            return Err(Error::UnknownBackend {
                name: name.clone(),
                given_in: given_in.into(),
                known: known_backends().join(", "),
            });
        }
        if !lacking.is_empty() {
            reasons.push(format!("{name}: not registered on world rank(s) {lacking:?} (every rank must register it)"));
            declined.push(name.clone());
        }
    }
    if !list.is_empty() && declined.len() == list.len() {
        return Err(Error::ForcedBackendUnavailable {
            requested: list.join(","),
            given_in: given_in.into(),
            reasons: reasons.join("; "),
        });
    }
    Ok(declined)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A settings exchange's rows: world rank, unknown-name mask and list hash per rank.
    fn rows(list: &[String], masks: &[u64]) -> Vec<Vec<u64>> {
        masks.iter().enumerate().map(|(r, &m)| vec![0, 0, 0, 0, 0, r as u64, m, list_hash(list)]).collect()
    }

    /// Issue 40 item 8: a backend registered on some ranks only is named as such (as the core's
    /// selector names it), not "unknown" on those ranks; one no rank knows is unknown.
    #[test]
    fn backend_names_are_agreed_not_judged_alone() {
        let list = vec!["usercentral".to_string(), "dissemination".to_string()];
        assert_eq!(
            agree_backend_names(&list, &rows(&list, &[0, 0, 0]), "BARRIER_BACKEND").unwrap(),
            Vec::<String>::new()
        );
        // Declined together, and the next name serves.
        assert_eq!(
            agree_backend_names(&list, &rows(&list, &[0, 0, 1]), "BARRIER_BACKEND").unwrap(),
            vec!["usercentral".to_string()]
        );
        let alone = vec!["usercentral".to_string()];
        let some = agree_backend_names(&alone, &rows(&alone, &[0, 0, 1]), "BARRIER_BACKEND").unwrap_err().to_string();
        assert!(some.contains("usercentral: not registered on world rank(s) [2]"), "{some}");
        let none = agree_backend_names(&list, &rows(&list, &[1, 1, 1]), "BARRIER_BACKEND").unwrap_err().to_string();
        assert!(none.contains("unknown backend \"usercentral\""), "{none}");
        let named = agree_backend_names(&alone, &rows(&alone, &[1, 1, 1]), "FastBarrierSettings::backend");
        let named = named.unwrap_err().to_string();
        assert!(named.contains("\"usercentral\" in FastBarrierSettings::backend"), "{named}");
        let mut differ = rows(&list, &[0, 0, 0]);
        differ[1][7] = 99;
        let mismatch = agree_backend_names(&list, &differ, "BARRIER_BACKEND").unwrap_err().to_string();
        assert!(mismatch.contains("BARRIER_BACKEND is not the same on every rank: world ranks [1]"), "{mismatch}");
    }
}
