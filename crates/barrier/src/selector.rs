//! Choosing a backend for a communicator, collectively.
//!
//! Like Open MPI's coll selection (query every component, order by priority, enable the best),
//! with one difference that matters for barriers: the choice is **agreed**. Each rank queries
//! every backend locally and publishes a bit mask of the backends it could run; rank 0 also
//! publishes its order. The candidates are the backends every rank accepted, tried in rank 0's
//! order; enabling one is itself collective and only succeeds if it succeeds on every rank. So
//! all ranks of a communicator end up in the same module, and a rank whose environment differs
//! cannot split the job.
//!
//! * `BARRIER_BACKEND=a,b`: only `a` then `b` are tried; if neither runs, creating the
//!   communicator fails with every reason (explicit choices fail loudly).
//! * otherwise every backend not disabled is tried by priority, and each one that declines is
//!   recorded with its reason (implicit choices fall back).

use std::fmt;

use crate::backend::{Backend, EnableContext, QueryContext};
use crate::ctrl::Ctrl;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::params::Params;
use crate::region::Region;
use crate::wait::WaitPolicy;

use crate::registry::{backends, SOFTWARE};

/// What happened to one backend during selection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// This backend runs the communicator's barriers.
    Chosen,
    /// It could not run; the reason.
    Declined(String),
    /// Disabled by `BARRIER_<NAME>_DISABLE`.
    Disabled,
    /// Not named in `BARRIER_BACKEND`.
    NotListed,
    /// A backend earlier in the order was chosen first.
    NotNeeded,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Chosen => f.write_str("chosen"),
            Outcome::Declined(why) => write!(f, "declined: {why}"),
            Outcome::Disabled => f.write_str("disabled by its _DISABLE parameter"),
            Outcome::NotListed => f.write_str("not listed in BARRIER_BACKEND"),
            Outcome::NotNeeded => f.write_str("usable, but a higher-priority backend was chosen"),
        }
    }
}

/// One backend's line in the selection report.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Backend name.
    pub name: &'static str,
    /// Effective priority.
    pub priority: i32,
    /// What happened.
    pub outcome: Outcome,
}

/// The result of selection on one communicator, as this rank saw it.
#[derive(Clone, Debug)]
pub struct Selection {
    /// The chosen backend.
    pub backend: &'static str,
    /// The chosen module's algorithm.
    pub algorithm: String,
    /// Every backend with its outcome, in the order tried.
    pub candidates: Vec<Candidate>,
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "chosen: {} ({})", self.backend, self.algorithm)?;
        for c in &self.candidates {
            writeln!(f, "  {:<14} priority {:>4}  {}", c.name, c.priority, c.outcome)?;
        }
        Ok(())
    }
}

fn pack_order(order: &[usize]) -> u64 {
    order
        .iter()
        .take(15)
        .enumerate()
        .fold(order.len().min(15) as u64, |acc, (i, &b)| acc | ((b as u64 & 0xf) << (4 * (i + 1))))
}

fn unpack_order(word: u64) -> Vec<usize> {
    let len = (word & 0xf) as usize;
    (0..len).map(|i| ((word >> (4 * (i + 1))) & 0xf) as usize).collect()
}

pub(crate) struct SelectInput<'a> {
    pub query: QueryContext<'a>,
    /// World rank of each member (for reports).
    pub members: &'a [usize],
    pub policy: WaitPolicy,
    pub ctrl: &'a Ctrl<'a>,
    pub region: &'a Region,
}

/// Runs selection (collective) and returns the module with the report.
pub(crate) fn select(input: SelectInput<'_>) -> Result<(Engine, Selection)> {
    let registry = backends();
    let params: &Params = input.query.params;
    let known = registry.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ");
    let requested: Option<Vec<usize>> = match params.get("BARRIER_BACKEND") {
        None => None,
        Some(list) => Some(
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|name| {
                    registry
                        .iter()
                        .position(|b| b.name().eq_ignore_ascii_case(name))
                        .ok_or_else(|| Error::UnknownBackend { name: name.into(), known: known.clone() })
                })
                .collect::<Result<Vec<_>>>()?,
        ),
    };

    let mut candidates: Vec<Candidate> = Vec::new();
    let mut settings = Vec::new();
    for b in &registry {
        let s = params.backend_settings(b.name(), b.default_priority())?;
        settings.push(s);
    }
    let order: Vec<usize> = match &requested {
        Some(list) => list.clone(),
        None => {
            let mut o: Vec<usize> = (0..registry.len()).collect();
            o.sort_by_key(|&i| (-settings[i].priority, i));
            o
        }
    };
    let mut accept: u64 = 0;
    let mut local_reason: Vec<Option<Outcome>> = vec![None; registry.len()];
    for (i, b) in registry.iter().enumerate() {
        let outcome = if !order.contains(&i) {
            Some(Outcome::NotListed)
        } else if settings[i].disabled {
            Some(Outcome::Disabled)
        } else if input.query.size < settings[i].min_comm_size {
            Some(Outcome::Declined(format!(
                "communicator of {} ranks is below BARRIER_{}_MIN_COMM_SIZE={}",
                input.query.size,
                b.name().to_ascii_uppercase(),
                settings[i].min_comm_size
            )))
        } else {
            b.query(&input.query).err().map(|d| Outcome::Declined(d.0))
        };
        if outcome.is_none() {
            accept |= 1 << i;
        }
        local_reason[i] = outcome;
    }

    // The list itself must be the same everywhere: an explicit choice is the job's, not a rank's.
    let list = params.get("BARRIER_BACKEND").unwrap_or_default();
    let all = input.ctrl.allgather(&[accept, pack_order(&order), list_hash(&list)])?;
    let differ: Vec<usize> =
        all.iter().enumerate().filter(|(_, w)| w[2] != all[0][2]).map(|(r, _)| input.members[r]).collect();
    if !differ.is_empty() {
        return Err(Error::MismatchedParam {
            name: "BARRIER_BACKEND".into(),
            differ,
            reference: input.members[0],
            value: list,
        });
    }
    let agreed_mask = all.iter().fold(u64::MAX, |m, w| m & w[0]);
    let agreed_order = unpack_order(all[0][1]);

    let enable_ctx = EnableContext {
        query: input.query,
        policy: input.policy,
        ctrl: input.ctrl,
        region: input.region,
        backends: &registry,
    };
    let mut chosen: Option<(usize, Engine)> = None;
    for &i in &agreed_order {
        let b = registry[i];
        let priority = settings[i].priority;
        if chosen.is_some() {
            let outcome = local_reason[i].clone().unwrap_or(Outcome::NotNeeded);
            candidates.push(Candidate { name: b.name(), priority, outcome });
            continue;
        }
        if agreed_mask & (1 << i) == 0 {
            let outcome = local_reason[i].clone().unwrap_or_else(|| {
                let ranks: Vec<usize> =
                    all.iter().enumerate().filter(|(_, w)| w[0] & (1 << i) == 0).map(|(r, _)| r).collect();
                Outcome::Declined(format!("declined on rank(s) {ranks:?}"))
            });
            candidates.push(Candidate { name: b.name(), priority, outcome });
            continue;
        }
        let result = if b.name() == SOFTWARE.name() {
            SOFTWARE.enable_software(&enable_ctx).map(Engine::Software)
        } else {
            b.enable(&enable_ctx).map(Engine::Dyn)
        };
        let everyone_ok = enable_ctx.all_agree(result.is_ok())?;
        match (result, everyone_ok) {
            (Ok(module), true) => {
                candidates.push(Candidate { name: b.name(), priority, outcome: Outcome::Chosen });
                chosen = Some((i, module));
            }
            (Ok(_module), false) => candidates.push(Candidate {
                name: b.name(),
                priority,
                outcome: Outcome::Declined("enabling failed on another rank".into()),
            }),
            (Err(d), _) => candidates.push(Candidate { name: b.name(), priority, outcome: Outcome::Declined(d.0) }),
        }
    }
    for (i, b) in registry.iter().enumerate() {
        if !agreed_order.contains(&i) {
            let outcome = local_reason[i].clone().unwrap_or(Outcome::NotListed);
            candidates.push(Candidate { name: b.name(), priority: settings[i].priority, outcome });
        }
    }

    match chosen {
        Some((i, module)) => {
            let selection = Selection {
                backend: registry[i].name(),
                algorithm: module.module().algorithm().to_string(),
                candidates,
            };
            tracing::debug!(backend = selection.backend, algorithm = %selection.algorithm, "barrier backend selected");
            Ok((module, selection))
        }
        None => {
            let reasons =
                candidates.iter().map(|c| format!("{}: {}", c.name, c.outcome)).collect::<Vec<_>>().join("; ");
            match params.get("BARRIER_BACKEND") {
                Some(list) => Err(Error::ForcedBackendUnavailable { requested: list, reasons }),
                None => Err(Error::NoBackend(reasons)),
            }
        }
    }
}

/// A hash of a backend list that ignores case and spaces (FNV-1a: the same in every build).
fn list_hash(list: &str) -> u64 {
    let norm: String =
        list.split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(",");
    norm.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_round_trips() {
        for order in [vec![], vec![0], vec![2, 0, 1], vec![4, 3, 2, 1, 0]] {
            assert_eq!(unpack_order(pack_order(&order)), order);
        }
    }
}
