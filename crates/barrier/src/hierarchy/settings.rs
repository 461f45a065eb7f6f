//! The settings of a communicator over a layer (barrier-mpi, barrier-openshmem), checked on
//! every rank and agreed in one exchange, written once for every layer:
//!
//! * every `BARRIER_*` value is checked on every rank (the core's, its backends' and the
//!   registered layers' settings: [`crate::registry::all_params`]); a rank with a bad value
//!   fails with its own error, the others with [`Error::PeerInvalidParam`] naming it, and
//!   nobody serves;
//! * `BARRIER_BACKEND`'s list must be the same on every rank ([`Error::MismatchedParam`]); a
//!   name no rank knows is unknown, and one that some ranks did not register is declined on
//!   every rank, as the core's selector declines it ([`Agreed::not_everywhere`]);
//! * rank 0's values hold for every rank: the node block, the timeout and the stall report
//!   (one rank's short timeout must not end a job across nodes), how the node roots meet
//!   ([`Choice`]: the layer's setting, `auto` timing both ways unless a timeout or an explicit
//!   stall report asks for the reports only our rounds give), and what the list asks of the
//!   layer's own barrier ([`Layer::own_backend`]).

use std::time::Duration;

use crate::compose::Choice;
use crate::error::{Error, Result};
use crate::params::{ParamInfo, ParamKind, Params};

/// The layer's collective for the agreement.
pub trait Allgather {
    /// This rank's name in errors (its world rank).
    fn me(&self) -> usize;

    /// Every rank's `words`, in rank order (collective over the communicator's ranks).
    fn allgather(&self, words: &[u64]) -> Result<Vec<Vec<u64>>>;
}

/// What a layer adds to the agreement.
#[derive(Clone, Copy, Debug)]
pub struct Layer {
    /// The layer's own barrier as a backend name at the end of the chain (`mpi`), if it offers
    /// one: `BARRIER_BACKEND` may name it; named first, it serves alone; named anywhere (or with
    /// no list), a failed set-up falls back to it.
    pub own_backend: Option<&'static str>,
    /// The setting that cuts a machine into simulated nodes of that many ranks.
    pub node_block: &'static str,
    /// The setting of how the node roots meet, and its value for the layer's own barrier.
    pub internode: &'static str,
    pub internode_own: &'static str,
    /// A layer setting whose shape the catalogue cannot check (barrier-mpi's injected set-up
    /// fault), and its check.
    pub extra_check: Option<(&'static str, Check)>,
}

/// A check of one setting's value.
pub type Check = fn(&Params) -> Result<()>;

/// The settings every rank goes on with: rank 0's, agreed.
#[derive(Debug)]
pub struct Agreed {
    pub node_block: usize,
    /// `BARRIER_BACKEND` names the layer's own barrier first: it serves alone.
    pub own_only: bool,
    /// A failed set-up may fall back to the layer's own barrier (no list, or the list names it).
    pub may_fall_back: bool,
    pub timeout: Option<Duration>,
    pub stall: Option<Duration>,
    /// How the node roots meet.
    pub internode: Choice,
    /// Names in `BARRIER_BACKEND` that some ranks did not register: declined on every rank (a
    /// node whose ranks all have one must not pick a backend other nodes lack).
    pub not_everywhere: Vec<String>,
}

impl Agreed {
    /// The settings of a node's universe: `params` with the agreed timeout and stall report, and
    /// `BARRIER_BACKEND` without the names the node cannot take (the layer's own, `hierarchical`:
    /// a node is one node, and those not registered everywhere).
    pub fn node_params(&self, params: &Params, layer: &Layer) -> Params {
        let list: Vec<String> = backend_list(params)
            .into_iter()
            .filter(|b| Some(b.as_str()) != layer.own_backend && b != crate::backends::hierarchical::NAME)
            .filter(|b| !self.not_everywhere.contains(b))
            .collect();
        let duration = |d: Option<Duration>| d.map_or_else(|| "none".to_string(), |d| format!("{}ns", d.as_nanos()));
        params
            .clone()
            .derive("BARRIER_BACKEND", list.join(","))
            .derive("BARRIER_TIMEOUT", duration(self.timeout))
            .derive("BARRIER_STALL_REPORT", duration(self.stall))
    }
}

/// Checks every setting on this rank and agrees on the verdict and on rank 0's values
/// (collective: one allgather of each rank's [`Proposal`]).
pub fn agree_settings(x: &impl Allgather, params: &Params, layer: &Layer) -> Result<Agreed> {
    let proposal = Proposal::new(params, layer, x.me());
    let rows = x.allgather(proposal.words())?;
    proposal.decide(&rows)
}

/// How many words a rank's [`Proposal`] has.
pub const PROPOSAL_WORDS: usize = 10;

/// One rank's side of the agreement: its words, which every rank gathers (a layer may gather
/// them with its own), and its verdict on its own settings, which [`Proposal::decide`] reads
/// with every rank's words.
#[derive(Debug)]
pub struct Proposal {
    words: [u64; PROPOSAL_WORDS],
    /// This rank's own bad setting.
    local_bad: Option<Error>,
    list: Vec<String>,
    given_in: String,
    layer: Layer,
}

impl Proposal {
    /// Checks every setting on this rank (`me`: its name in errors, its world rank).
    pub fn new(params: &Params, layer: &Layer, me: usize) -> Proposal {
        let known = crate::registry::all_params();
        let list = backend_list(params);
        // The rest of the settings as the node will see them (the list's shape is checked here;
        // its names are agreed in `decide`, so that a backend registered on some ranks only is
        // named as such).
        let core = params.clone().derive(
            "BARRIER_BACKEND",
            list.iter().filter(|b| Some(b.as_str()) != layer.own_backend).cloned().collect::<Vec<_>>().join(","),
        );
        let local_bad = known.iter().enumerate().find_map(|(i, info)| {
            let checked = match info.name.as_str() {
                "BARRIER_BACKEND" => {
                    params.check(&ParamInfo::new("BARRIER_BACKEND", "", "").kind(ParamKind::AnyBackendList))
                }
                name if layer.extra_check.is_some_and(|(n, _)| n == name) => {
                    layer.extra_check.map_or(Ok(()), |(_, check)| check(params))
                }
                _ => core.check(info),
            };
            checked.err().map(|e| (i, e))
        });
        // The node block may be a setting of a layer not linked here (OpenSHMEM reading
        // barrier-mpi's): checked all the same, past the catalogue's end.
        let (node_block, local_bad) = match (params.parse(layer.node_block, 0usize, "a number of ranks"), local_bad) {
            (Ok(block), bad) => (block, bad),
            (Err(e), None) => (0, Some((known.len(), e))),
            (Err(_), bad) => (0, bad),
        };
        let own_only = layer.own_backend.is_some_and(|own| list.first().is_some_and(|b| b == own));
        let may_fall_back = layer.own_backend.is_some_and(|own| list.is_empty() || list.iter().any(|b| b == own));
        let timeout = params.duration("BARRIER_TIMEOUT").ok().flatten();
        let stall = params.stall_report();
        let reports = timeout.is_some() || params.get("BARRIER_STALL_REPORT").is_some();
        let internode = Choice::from_setting(params.get(layer.internode).as_deref(), layer.internode_own, reports);
        let nanos = |d: Option<Duration>| d.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
        let words = [
            local_bad.as_ref().map_or(0, |(i, _)| *i as u64 + 1),
            node_block as u64,
            u64::from(own_only),
            u64::from(may_fall_back),
            nanos(timeout),
            me as u64,
            unknown_names(&list, layer),
            list_hash(&list),
            internode.to_word(),
            nanos(stall),
        ];
        let given_in = params.source("BARRIER_BACKEND");
        Proposal { words, local_bad: local_bad.map(|(_, e)| e), list, given_in, layer: *layer }
    }

    /// The words every rank gathers.
    pub fn words(&self) -> &[u64; PROPOSAL_WORDS] {
        &self.words
    }

    /// This rank's own node block (rank 0's is agreed).
    pub fn node_block(&self) -> usize {
        self.words[1] as usize
    }

    /// Whether this rank's `BARRIER_BACKEND` names the layer's own barrier first (rank 0's is
    /// agreed: [`Agreed::own_only`]).
    pub fn own_only(&self) -> bool {
        self.words[2] != 0
    }

    /// The agreement, from every rank's words in rank order (`rows[r]`: at least the
    /// [`PROPOSAL_WORDS`] of rank `r`): this rank's own bad setting, else the first rank's that
    /// has one, else the backend names agreed and rank 0's values.
    pub fn decide<R: AsRef<[u64]>>(self, rows: &[R]) -> Result<Agreed> {
        if let Some(e) = self.local_bad {
            return Err(e);
        }
        let known = crate::registry::all_params();
        if let Some(w) = rows.iter().map(AsRef::as_ref).find(|w| w[0] != 0) {
            return Err(Error::PeerInvalidParam {
                world_rank: w[5] as usize,
                name: known
                    .get(w[0] as usize - 1)
                    .map_or_else(|| self.layer.node_block.to_string(), |p| p.name.clone()),
            });
        }
        let not_everywhere = agree_backend_names(&self.list, rows, &self.given_in, &self.layer)?;
        let r0 = rows[0].as_ref();
        let duration = |w: u64| (w > 0).then(|| Duration::from_nanos(w));
        Ok(Agreed {
            not_everywhere,
            node_block: r0[1] as usize,
            own_only: r0[2] != 0,
            may_fall_back: r0[3] != 0,
            timeout: duration(r0[4]),
            internode: Choice::from_word(r0[8]),
            stall: duration(r0[9]),
        })
    }
}

fn backend_list(params: &Params) -> Vec<String> {
    params
        .get("BARRIER_BACKEND")
        .map(|v| v.split(',').map(|b| b.trim().to_ascii_lowercase()).filter(|b| !b.is_empty()).collect())
        .unwrap_or_default()
}

/// The backend names this rank knows: its registry's and the layer's own.
fn known_backends(layer: &Layer) -> Vec<&'static str> {
    crate::backends().iter().map(|b| b.name()).chain(layer.own_backend).collect()
}

/// Bit `i` set: the list's name `i` is not a backend this rank knows.
fn unknown_names(list: &[String], layer: &Layer) -> u64 {
    let known = known_backends(layer);
    list.iter().take(64).enumerate().filter(|(_, n)| !known.contains(&n.as_str())).fold(0, |m, (i, _)| m | 1 << i)
}

/// The list as the ranks compare it (FNV-1a; 0 for no list).
fn list_hash(list: &[String]) -> u64 {
    if list.is_empty() {
        return 0;
    }
    list.join(",").bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)) | 1
}

/// `BARRIER_BACKEND` agreed across the ranks (words 6 and 7 of the exchange): the same list
/// everywhere. A name no rank knows is unknown (refused); one some ranks lack is declined on
/// every rank, as the core's selector declines it, and returned; if that leaves no name, the
/// refusal names the ranks that lack each.
fn agree_backend_names<R: AsRef<[u64]>>(
    list: &[String],
    all: &[R],
    given_in: &str,
    layer: &Layer,
) -> Result<Vec<String>> {
    let all: Vec<&[u64]> = all.iter().map(AsRef::as_ref).collect();
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
                known: known_backends(layer).join(", "),
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
    use std::sync::{Arc, Barrier, Mutex};

    use super::*;

    const LAYER: Layer = Layer {
        own_backend: Some("mine"),
        node_block: "BARRIER_TEST_NODE_BLOCK",
        internode: "BARRIER_TEST_INTERNODE",
        internode_own: "mine",
        extra_check: None,
    };

    /// A settings exchange's rows: world rank, unknown-name mask and list hash per rank.
    fn rows(list: &[String], masks: &[u64]) -> Vec<Vec<u64>> {
        masks.iter().enumerate().map(|(r, &m)| vec![0, 0, 0, 0, 0, r as u64, m, list_hash(list)]).collect()
    }

    /// Issue 40 item 8: a backend registered on some ranks only is named as such (as the core's
    /// selector names it), not "unknown" on those ranks; one no rank knows is unknown.
    #[test]
    fn backend_names_are_agreed_not_judged_alone() {
        let list = vec!["usercentral".to_string(), "dissemination".to_string()];
        let agree =
            |list: &[String], rows: &[Vec<u64>], given_in: &str| agree_backend_names(list, rows, given_in, &LAYER);
        assert_eq!(agree(&list, &rows(&list, &[0, 0, 0]), "BARRIER_BACKEND").unwrap(), Vec::<String>::new());
        // Declined together, and the next name serves.
        assert_eq!(agree(&list, &rows(&list, &[0, 0, 1]), "BARRIER_BACKEND").unwrap(), vec!["usercentral".to_string()]);
        let alone = vec!["usercentral".to_string()];
        let some = agree(&alone, &rows(&alone, &[0, 0, 1]), "BARRIER_BACKEND").unwrap_err().to_string();
        assert!(some.contains("usercentral: not registered on world rank(s) [2]"), "{some}");
        let none = agree(&list, &rows(&list, &[1, 1, 1]), "BARRIER_BACKEND").unwrap_err().to_string();
        assert!(none.contains("unknown backend \"usercentral\""), "{none}");
        let named = agree(&alone, &rows(&alone, &[1, 1, 1]), "FastBarrierSettings::backend").unwrap_err().to_string();
        assert!(named.contains("\"usercentral\" in FastBarrierSettings::backend"), "{named}");
        let mut differ = rows(&list, &[0, 0, 0]);
        differ[1][7] = 99;
        let mismatch = agree(&list, &differ, "BARRIER_BACKEND").unwrap_err().to_string();
        assert!(mismatch.contains("BARRIER_BACKEND is not the same on every rank: world ranks [1]"), "{mismatch}");
    }

    /// Ranks as threads, their allgather a board read between two barriers.
    struct Threads {
        rank: usize,
        board: Arc<(Barrier, Mutex<Vec<Vec<u64>>>)>,
    }

    impl Allgather for Threads {
        fn me(&self) -> usize {
            self.rank
        }
        fn allgather(&self, words: &[u64]) -> Result<Vec<Vec<u64>>> {
            let (barrier, rows) = &*self.board;
            rows.lock().unwrap()[self.rank] = words.to_vec();
            barrier.wait();
            let all = rows.lock().unwrap().clone();
            barrier.wait();
            Ok(all)
        }
    }

    fn agree_on(params: Vec<Params>) -> Vec<Result<Agreed>> {
        let n = params.len();
        let board = Arc::new((Barrier::new(n), Mutex::new(vec![Vec::new(); n])));
        std::thread::scope(|s| {
            let handles: Vec<_> = params
                .into_iter()
                .enumerate()
                .map(|(rank, p)| {
                    let x = Threads { rank, board: board.clone() };
                    s.spawn(move || agree_settings(&x, &p, &LAYER))
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("no panic")).collect()
        })
    }

    #[test]
    fn rank_0_s_values_hold_everywhere_and_a_bad_value_fails_every_rank() {
        let with = |pairs: &[(&str, &str)]| pairs.iter().fold(Params::defaults_only(), |p, (k, v)| p.set(*k, *v));
        let agreed = agree_on(vec![
            with(&[
                ("BARRIER_TIMEOUT", "2s"),
                ("BARRIER_STALL_REPORT", "1s"),
                ("BARRIER_BACKEND", "dissemination,mine"),
            ]),
            with(&[("BARRIER_TIMEOUT", "9s"), ("BARRIER_BACKEND", "dissemination,mine")]),
        ]);
        for a in agreed {
            let a = a.expect("agreed");
            assert_eq!((a.timeout, a.stall), (Some(Duration::from_secs(2)), Some(Duration::from_secs(1))));
            assert!(a.may_fall_back && !a.own_only);
            let node = a.node_params(&Params::defaults_only().set("BARRIER_BACKEND", "dissemination,mine"), &LAYER);
            assert_eq!(node.get("BARRIER_BACKEND").as_deref(), Some("dissemination"));
        }
        let agreed = agree_on(vec![Params::defaults_only(), with(&[("BARRIER_TIMEOUT", "soon")])]);
        let peer = agreed[0].as_ref().expect_err("rank 1's value is bad").to_string();
        assert!(peer.contains("world rank 1 rejected its value of BARRIER_TIMEOUT"), "{peer}");
        let own = agreed[1].as_ref().expect_err("its own value is bad").to_string();
        assert!(own.contains("soon"), "{own}");
    }
}
