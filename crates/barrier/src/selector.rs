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

use crate::registry::{backends, MAX_BACKENDS, SOFTWARE};

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
    /// Not named in `BARRIER_BACKEND`: where that list was given ([`crate::Params::source`]).
    NotListed(String),
    /// A backend earlier in the order was chosen first.
    NotNeeded,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Chosen => f.write_str("chosen"),
            Outcome::Declined(why) => write!(f, "declined: {why}"),
            Outcome::Disabled => f.write_str("disabled by its _DISABLE parameter"),
            Outcome::NotListed(given_in) => write!(f, "not listed in {given_in}"),
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
    /// Builds the hierarchical backend's composition across nodes (the communicator layer's).
    pub compose: crate::engine::Compose<'a>,
}

/// A backend's name as the ranks compare it (FNV-1a of the lowercase name; never 0, which
/// marks an empty entry of the exchange).
fn name_hash(name: &str) -> u64 {
    name.bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b.to_ascii_lowercase() as u64).wrapping_mul(0x100_0000_01b3))
        | 1
}

/// The backends of the communicator, agreed by name: rank 0's registry (its order), each
/// entry with this rank's backend of that name, if it has one, and the ranks that lack it.
struct Agreed {
    /// Per entry of rank 0's registry: this rank's index of the backend in its own registry.
    local: Vec<Option<usize>>,
    /// Per entry: the communicator ranks that did not register it.
    missing: Vec<Vec<usize>>,
    /// Every rank's registry, as name hashes.
    lists: Vec<Vec<u64>>,
}

/// Exchanges every rank's registry by name (collective): the backends a program registered
/// need not be the same on every rank, and the ranks must still mean the same backend by the
/// same index.
///
/// The same exchange compares `BARRIER_BACKEND` (its hash, last word): an explicit choice is
/// the job's, not a rank's, and every rank must read the names in it alike.
fn agree_on_names(ctrl: &Ctrl<'_>, registry: &[&'static dyn Backend], members: &[usize], list: &str) -> Result<Agreed> {
    let mut words = [0u64; MAX_BACKENDS + 1];
    for (w, b) in words.iter_mut().zip(registry) {
        *w = name_hash(b.name());
    }
    words[MAX_BACKENDS] = list_hash(list);
    let all = ctrl.allgather(&words)?;
    let differ: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, w)| w[MAX_BACKENDS] != all[0][MAX_BACKENDS])
        .map(|(r, _)| members[r])
        .collect();
    if !differ.is_empty() {
        return Err(Error::MismatchedParam {
            name: "BARRIER_BACKEND".into(),
            differ,
            reference: members[0],
            value: list.to_string(),
        });
    }
    let lists: Vec<Vec<u64>> =
        all.into_iter().map(|l| l[..MAX_BACKENDS].iter().copied().filter(|&h| h != 0).collect()).collect();
    let reference = &lists[0];
    let local = reference.iter().map(|h| registry.iter().position(|b| name_hash(b.name()) == *h)).collect();
    let missing = reference
        .iter()
        .map(|h| lists.iter().enumerate().filter(|(_, l)| !l.contains(h)).map(|(r, _)| r).collect())
        .collect();
    Ok(Agreed { local, missing, lists })
}

/// Runs selection (collective) and returns the module with the report.
///
/// The candidates are rank 0's registry, matched by name on every rank (see
/// [`agree_on_names`]): in the common case every rank knows the same backends; a backend that
/// some rank did not register is declined on every rank, naming the ranks that lack it.
pub(crate) fn select(input: SelectInput<'_>) -> Result<(Engine, Selection)> {
    let registry = backends();
    let params: &Params = input.query.params;
    let list = params.get("BARRIER_BACKEND").unwrap_or_default();
    let agreed = agree_on_names(input.ctrl, &registry, input.members, &list)?;
    let count = agreed.local.len();
    // Entry `i` of the agreed list, on this rank (None: this rank did not register it).
    let backend = |i: usize| agreed.local[i].map(|l| registry[l]);

    // BARRIER_BACKEND by name: a name no rank registered is a mistake on every rank alike (the
    // list is the same everywhere, and so are the registries' names); one that some rank lacks
    // is a backend that cannot run.
    let mut unregistered: Vec<String> = Vec::new();
    let requested: Option<Vec<usize>> = match params.get("BARRIER_BACKEND") {
        None => None,
        Some(list) => {
            let mut order = Vec::new();
            for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let h = name_hash(name);
                match agreed.lists[0].iter().position(|&x| x == h) {
                    Some(i) => {
                        if agreed.local[i].is_none() {
                            // The others name this rank; here it has no backend to report.
                            unregistered.push(format!(
                                "{}: not registered on rank(s) {:?} (every rank must register it)",
                                name.to_ascii_lowercase(),
                                agreed.missing[i]
                            ));
                        }
                        order.push(i);
                    }
                    // A rank that has it reports it as a candidate (below); one that lacks it, here.
                    None if registry.iter().any(|b| name_hash(b.name()) == h) => {}
                    None if agreed.lists.iter().any(|l| l.contains(&h)) => {
                        let lacking: Vec<usize> =
                            (0..agreed.lists.len()).filter(|&r| !agreed.lists[r].contains(&h)).collect();
                        unregistered.push(format!(
                            "{}: not registered on rank(s) {lacking:?} (every rank must register it)",
                            name.to_ascii_lowercase()
                        ));
                    }
                    None => {
                        let known = registry.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ");
                        return Err(Error::UnknownBackend {
                            name: name.into(),
                            given_in: params.source("BARRIER_BACKEND"),
                            known,
                        });
                    }
                }
            }
            Some(order)
        }
    };

    let mut candidates: Vec<Candidate> = Vec::new();
    // Rank 0's priorities order the candidates (every rank reads the same order from it).
    let mut settings = Vec::new();
    for i in 0..count {
        settings.push(match backend(i) {
            Some(b) => Some(params.backend_settings(b.name(), b.default_priority())?),
            None => None,
        });
    }
    let order: Vec<usize> = match &requested {
        Some(list) => list.clone(),
        None => {
            let mut o: Vec<usize> = (0..count).collect();
            // Highest priority first (Reverse: negating i32::MIN would overflow).
            o.sort_by_key(|&i| (std::cmp::Reverse(settings[i].as_ref().map_or(i32::MIN, |s| s.priority)), i));
            o
        }
    };
    let mut accept: u64 = 0;
    let mut local_reason: Vec<Option<Outcome>> = vec![None; count];
    for i in 0..count {
        let (Some(b), Some(s)) = (backend(i), &settings[i]) else { continue };
        let outcome = if !order.contains(&i) {
            Some(Outcome::NotListed(params.source("BARRIER_BACKEND")))
        } else if s.disabled {
            Some(Outcome::Disabled)
        } else if input.query.size < s.min_comm_size {
            Some(Outcome::Declined(format!(
                "communicator of {} ranks is below BARRIER_{}_MIN_COMM_SIZE={}",
                input.query.size,
                b.name().to_ascii_uppercase(),
                s.min_comm_size
            )))
        } else {
            b.query(&input.query).err().map(|d| Outcome::Declined(d.0))
        };
        if outcome.is_none() {
            accept |= 1 << i;
        }
        local_reason[i] = outcome;
    }

    let all = input.ctrl.allgather(&[accept, pack_order(&order)])?;
    let agreed_mask = all.iter().fold(u64::MAX, |m, w| m & w[0]);
    let agreed_order = unpack_order(all[0][1]);

    let enable_ctx = EnableContext { query: input.query, policy: input.policy, ctrl: input.ctrl, region: input.region };
    let mut chosen: Option<(&'static dyn Backend, Engine)> = None;
    for &i in &agreed_order {
        // A backend this rank lacks has no name here to report it by: the ranks that have it
        // report it, naming this one.
        let (Some(b), Some(s)) = (backend(i), &settings[i]) else { continue };
        let priority = s.priority;
        if chosen.is_some() {
            let outcome = local_reason[i].clone().unwrap_or(Outcome::NotNeeded);
            candidates.push(Candidate { name: b.name(), priority, outcome });
            continue;
        }
        if agreed_mask & (1 << i) == 0 {
            let outcome = local_reason[i].clone().unwrap_or_else(|| {
                if !agreed.missing[i].is_empty() {
                    return Outcome::Declined(format!(
                        "not registered on rank(s) {:?} (every rank must register it)",
                        agreed.missing[i]
                    ));
                }
                let ranks: Vec<usize> =
                    all.iter().enumerate().filter(|(_, w)| w[0] & (1 << i) == 0).map(|(r, _)| r).collect();
                Outcome::Declined(format!("declined on rank(s) {ranks:?}"))
            });
            candidates.push(Candidate { name: b.name(), priority, outcome });
            continue;
        }
        let result = if b.name() == SOFTWARE.name() {
            SOFTWARE.enable_software(&enable_ctx).map(Engine::Software)
        } else if b.name() == crate::backends::hierarchical::NAME && enable_ctx.query.nodes < 2 {
            // On one node the hierarchical backend runs the flat barrier: dispatched statically
            // like the software backend's, so that it costs what that one does.
            crate::backends::hierarchical::one_node(&enable_ctx).map(Engine::Software)
        } else if b.name() == crate::backends::hierarchical::NAME {
            // Across nodes it is the composer's hierarchy over the communicator's nodes and
            // roots, which waits in its own parts: not a module.
            (input.compose)(&enable_ctx).map(Engine::Composed)
        } else {
            b.enable(&enable_ctx).map(Engine::Dyn)
        };
        let everyone_ok = enable_ctx.all_agree(result.is_ok())?;
        match (result, everyone_ok) {
            (Ok(module), true) => {
                candidates.push(Candidate { name: b.name(), priority, outcome: Outcome::Chosen });
                chosen = Some((b, module));
            }
            (Ok(_module), false) => candidates.push(Candidate {
                name: b.name(),
                priority,
                outcome: Outcome::Declined("enabling failed on another rank".into()),
            }),
            (Err(d), _) => candidates.push(Candidate { name: b.name(), priority, outcome: Outcome::Declined(d.0) }),
        }
    }
    for i in 0..count {
        let (Some(b), Some(s)) = (backend(i), &settings[i]) else { continue };
        if !agreed_order.contains(&i) {
            let outcome =
                local_reason[i].clone().unwrap_or_else(|| Outcome::NotListed(params.source("BARRIER_BACKEND")));
            candidates.push(Candidate { name: b.name(), priority: s.priority, outcome });
        }
    }
    // This rank's backends that rank 0 did not register: never candidates here.
    for b in registry.iter().filter(|b| !agreed.lists[0].contains(&name_hash(b.name()))) {
        let priority =
            params.backend_settings(b.name(), b.default_priority()).map_or(b.default_priority(), |s| s.priority);
        let outcome = Outcome::Declined("not registered on rank 0 (every rank must register it)".into());
        candidates.push(Candidate { name: b.name(), priority, outcome });
    }

    match chosen {
        Some((b, module)) => {
            let selection = Selection { backend: b.name(), algorithm: module.algorithm(), candidates };
            tracing::debug!(backend = selection.backend, algorithm = %selection.algorithm, "barrier backend selected");
            Ok((module, selection))
        }
        None => {
            let reasons = candidates
                .iter()
                .map(|c| format!("{}: {}", c.name, c.outcome))
                .chain(unregistered)
                .collect::<Vec<_>>()
                .join("; ");
            match params.get("BARRIER_BACKEND") {
                Some(list) => Err(Error::ForcedBackendUnavailable {
                    requested: list,
                    given_in: params.source("BARRIER_BACKEND"),
                    reasons,
                }),
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
