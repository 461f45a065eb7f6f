//! The node's part of a layer's set-up, written once for every layer (barrier-mpi over an MPI
//! node's communicator, barrier-openshmem over its exchange of PEs' words):
//!
//! 1. **the node's segment**: its first rank makes it (a memfd, unlinked at once) and offers
//!    `[1, pid, descriptor, device, inode]` to the node's other ranks, which map it through that
//!    process's descriptor and check it is the same file ([`Segment::open_from_process`]);
//!    agreed. Once every rank of the node has mapped it, its first rank closes the descriptor
//!    ([`Segment::release_fd`]: a program of thousands of communicators would keep one each);
//! 2. the layer's progress call and the names of its ranks (stall reports and errors of the
//!    node's waits name the layer's ranks);
//! 3. **the node's universe**: every rank joins it ([`Universe::join`]; the core selector picks
//!    the node's backend); agreed. A rank that fails to join marks the segment aborted, so that
//!    the node's others do not wait for it;
//! 4. across nodes, **the node's part of the hierarchy**: the gather and the release
//!    ([`Communicator::halves`]) or, where `BARRIER_BACKEND` forces a backend on the node, a
//!    duplicate of the node's communicator whose whole barriers run in both places; agreed.
//!
//! "Agreed": every step that can fail on one rank is followed by the layer's agreement
//! ([`NodeExchange::first_failed`]) before the next, so every rank of the communicator goes on,
//! or every rank stops with the lowest failing rank's error ([`NodeFailure`]), and nobody waits
//! in a collective alone.

use std::sync::Arc;

use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::params::Params;
use crate::shm::{JobShape, RankNames, Segment};
use crate::universe::Universe;
use crate::wait::Progress;

/// What a layer provides for the node's set-up: its collectives among the ranks.
pub trait NodeExchange {
    /// This rank's name in the layer's failures (a world rank, a PE).
    fn me(&self) -> usize;

    /// The layer's name of rank `id` in a failure: `world rank 3`, `PE 3`.
    fn name(&self, id: usize) -> String;

    /// Hands the node's first rank's `words` to the node's other ranks (collective over the
    /// node's ranks at least; on the first rank `words` stays as it is).
    fn share_from_node_first(&self, words: &mut [u64; 5]) -> Result<()>;

    /// Collective over every rank of the communicator: `None` when every rank's `ok` is true,
    /// else the lowest failing rank ([`me`](Self::me) of it).
    fn first_failed(&self, ok: bool) -> Result<Option<usize>>;

    /// A fault injected at `stage` (`open`: a node's other rank maps the segment; `join`) on
    /// this rank, for tests of the failure paths; none by default.
    fn fault(&self, _stage: &str) -> Result<()> {
        Ok(())
    }
}

/// A set-up step failed: on rank `rank` (the layer's name of it: [`NodeExchange::me`]), with
/// `error` (its own error on that rank; on the others, an error naming it).
#[derive(Debug)]
pub struct NodeFailure {
    pub rank: usize,
    pub error: Error,
}

/// What a node's set-up needs of the layer besides its exchange.
#[derive(Debug)]
pub struct NodeSpec {
    /// This rank on its node (0: the node's first rank, which makes the segment).
    pub local_rank: usize,
    /// The node's shape (`world_size`: the node's ranks; `nodes`: 1).
    pub shape: JobShape,
    /// The settings of the node's universe (rank 0's timeout already put in by the layer).
    pub params: Params,
    /// The layer's progress call for the node's waits, if it has one.
    pub progress: Option<Progress>,
    /// The layer's names of the node's ranks.
    pub names: RankNames,
    /// The communicator spans several nodes: make the node's part of the hierarchy.
    pub across_nodes: bool,
}

/// A rank's node, set up.
#[derive(Debug)]
pub struct Node {
    pub seg: Arc<Segment>,
    /// The node's universe (keep it while `halves` lives).
    pub universe: Universe,
    /// Across nodes: the node's part of the hierarchy (see the module docs).
    pub halves: Option<Communicator>,
    /// `BARRIER_BACKEND` forces the node's backend: `halves` is a duplicate of the node's
    /// communicator, two whole barriers of it per barrier.
    pub forced: bool,
}

impl Node {
    /// This rank is alone on its node and the node's halves are the gather and the release: its
    /// barriers, blocking and split-phase, skip them ([`super::Hierarchy::new`]'s `alone`).
    pub fn alone(&self) -> bool {
        self.universe.world().size() == 1 && !self.forced
    }
}

/// Sets up this rank's node (collective over every rank of the communicator; see the module
/// docs for the steps).
pub fn set_up_node(x: &impl NodeExchange, spec: NodeSpec) -> std::result::Result<Node, NodeFailure> {
    let mine = |error: Error| NodeFailure { rank: x.me(), error };
    // 1. The node's segment.
    let first = spec.local_rank == 0;
    let pool = spec
        .params
        .parse("BARRIER_SHM_POOL_BYTES", crate::shm::DEFAULT_POOL_BYTES, "")
        .unwrap_or(crate::shm::DEFAULT_POOL_BYTES);
    let mut offer = [0u64; 5];
    let mut made = None;
    if first {
        let seg = Segment::create_for_job(spec.shape, pool).and_then(|seg| match (seg.raw_fd(), seg.identity()) {
            (Some(fd), Some((dev, ino))) => {
                offer = [1, u64::from(std::process::id()), fd as u64, dev, ino];
                Ok(seg)
            }
            _ => Err(Error::Setup("the node's new segment has no descriptor to share".into())),
        });
        made = Some(seg);
    }
    x.share_from_node_first(&mut offer).map_err(mine)?;
    let seg = match made {
        Some(seg) => seg,
        None if offer[0] == 1 => x
            .fault("open")
            .and_then(|()| Segment::open_from_process(offer[1] as u32, offer[2] as i32, (offer[3], offer[4]))),
        None => Err(Error::Setup("the node's first rank could not make the node's shared segment".into())),
    };
    let seg = agree(x, seg, "map the node's shared segment")?;
    seg.release_fd();

    // 2. The layer's progress and names.
    if let Some(progress) = spec.progress {
        seg.set_progress(progress);
    }
    seg.set_rank_names(spec.names);

    // 3. The node's universe.
    let forced = spec.params.get("BARRIER_BACKEND").is_some();
    let joined = x.fault("join").and_then(|()| Universe::join(seg.clone(), spec.local_rank, spec.params));
    if joined.is_err() {
        // The node's others must not wait for this rank.
        seg.set_abort(spec.local_rank);
    }
    let universe = agree(x, joined, "join the node")?;

    // 4. The node's part of the hierarchy.
    let halves = match spec.across_nodes {
        false => None,
        true => Some(agree(x, node_part(&universe, forced), node_part_what(forced))?),
    };
    Ok(Node { seg, universe, halves, forced })
}

/// The node's part of the hierarchy across nodes (collective over the node's ranks): the
/// gather and the release ([`Communicator::halves`]), or, where `BARRIER_BACKEND` forces the
/// node's backend (`forced`), a duplicate of the node's communicator whose whole barriers run in
/// both places.
pub fn node_part(universe: &Universe, forced: bool) -> Result<Communicator> {
    match forced {
        true => universe.world().dup(),
        false => universe.world().halves(),
    }
}

/// What [`node_part`] does, for a failure's text.
fn node_part_what(forced: bool) -> &'static str {
    match forced {
        true => "make the node's forced barrier",
        false => "make the node's gather and release",
    }
}

/// A step's outcome, agreed over the layer's exchange (collective): every rank goes on with its value only if every rank
/// had one; a rank that failed keeps its own error, the others get one naming the lowest
/// failing rank.
pub fn agree<T>(x: &impl NodeExchange, outcome: Result<T>, what: &str) -> std::result::Result<T, NodeFailure> {
    let mine = |error: Error| NodeFailure { rank: x.me(), error };
    match (x.first_failed(outcome.is_ok()), outcome) {
        (Ok(None), Ok(v)) => Ok(v),
        (Ok(Some(rank)), Ok(_)) => Err(NodeFailure {
            rank,
            error: Error::Setup(format!("{} could not {what} (its own error says why)", x.name(rank))),
        }),
        (Err(error), Ok(_)) | (_, Err(error)) => Err(mine(error)),
    }
}

/// The node of each rank, from each rank's node key (its machine, with its block where a
/// machine is cut into simulated nodes), numbered in the order of each node's first rank: the
/// node roots are the first ranks, in rank order.
pub fn number_nodes<K: PartialEq>(keys: &[K]) -> Vec<usize> {
    let mut firsts: Vec<usize> = Vec::new();
    keys.iter()
        .enumerate()
        .map(|(r, key)| match firsts.iter().position(|&f| keys[f] == *key) {
            Some(node) => node,
            None => {
                firsts.push(r);
                firsts.len() - 1
            }
        })
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::{Barrier, Mutex};

    use super::*;

    #[test]
    fn nodes_are_numbered_by_their_first_rank() {
        assert_eq!(number_nodes(&[7, 3, 7, 3, 9]), vec![0, 1, 0, 1, 2]);
        assert_eq!(number_nodes::<u8>(&[]), Vec::<usize>::new());
    }

    /// The layer's collectives among the threads of one node: a board of each rank's words,
    /// read between two barriers (as OpenSHMEM's exchange does). Its `first_failed` is the
    /// node's alone: a node's set-up decided by its own ranks, as a set-up aside is (and as
    /// every rank's is where the communicator is one node).
    pub(in crate::hierarchy) struct Threads {
        /// This rank's name.
        pub rank: usize,
        /// Its index on the node (its row of the board).
        pub local: usize,
        pub board: Arc<(Barrier, Mutex<Vec<[u64; 5]>>)>,
        /// A fault injected at a stage on a rank (by name).
        pub fault: Option<(&'static str, usize)>,
    }

    impl Threads {
        fn all(&self, words: [u64; 5]) -> Vec<[u64; 5]> {
            let (barrier, rows) = &*self.board;
            rows.lock().unwrap()[self.local] = words;
            barrier.wait();
            let all = rows.lock().unwrap().clone();
            barrier.wait();
            all
        }
    }

    impl NodeExchange for Threads {
        fn me(&self) -> usize {
            self.rank
        }
        fn name(&self, id: usize) -> String {
            format!("thread {id}")
        }
        fn share_from_node_first(&self, words: &mut [u64; 5]) -> Result<()> {
            *words = self.all(*words)[0];
            Ok(())
        }
        fn first_failed(&self, ok: bool) -> Result<Option<usize>> {
            let first = self.rank - self.local;
            Ok(self.all([u64::from(ok), 0, 0, 0, 0]).iter().position(|w| w[0] == 0).map(|i| first + i))
        }
        fn fault(&self, stage: &str) -> Result<()> {
            match self.fault {
                Some((s, r)) if s == stage && r == self.rank => Err(Error::Setup(format!("injected at {stage}"))),
                _ => Ok(()),
            }
        }
    }

    /// Sets up one node of `n` threads; returns each thread's outcome.
    fn node_of(
        n: usize,
        params: Params,
        fault: Option<(&'static str, usize)>,
    ) -> Vec<std::result::Result<Node, NodeFailure>> {
        let board = Arc::new((Barrier::new(n), Mutex::new(vec![[0u64; 5]; n])));
        let outcomes: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|rank| {
                    let x = Threads { rank, local: rank, board: board.clone(), fault };
                    let params = params.clone();
                    s.spawn(move || {
                        let spec = NodeSpec {
                            local_rank: rank,
                            shape: JobShape { world_size: n, nodes: 1, ranks_on_machine: n, cores: 2 },
                            params,
                            progress: None,
                            names: RankNames {
                                world: (0..n).collect(),
                                comm: (0..n).collect(),
                                comm_size: n,
                                hierarchical: true,
                            },
                            across_nodes: true,
                        };
                        let node = set_up_node(&x, spec);
                        if let Ok(node) = &node {
                            // The node's part works: a gather and a release, twice.
                            for _ in 0..4 {
                                node.halves.as_ref().expect("across nodes").barrier().expect("barrier");
                            }
                        }
                        node
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("no panic")).collect()
        });
        outcomes
    }

    #[test]
    fn every_rank_gets_the_node_and_its_halves() {
        for n in [1, 2, 3, 5] {
            for node in node_of(n, Params::default(), None) {
                let node = node.expect("set up");
                assert!(!node.forced);
                assert_eq!(node.alone(), n == 1);
                assert_eq!(node.halves.as_ref().map(|h| h.size()), Some(n));
                assert!(node.seg.raw_fd().is_none(), "the first rank's descriptor is released");
            }
        }
    }

    #[test]
    fn a_forced_backend_serves_the_node_in_both_places() {
        let params = Params::default().derive("BARRIER_BACKEND", "dissemination".to_string());
        for node in node_of(3, params, None) {
            let node = node.expect("set up");
            assert!(node.forced && !node.alone());
            assert_eq!(node.halves.as_ref().expect("across nodes").backend().0, "dissemination");
        }
    }

    #[test]
    fn a_step_failing_on_one_rank_fails_every_rank_naming_it() {
        for (stage, what) in [("open", "map the node's shared segment"), ("join", "join the node")] {
            let outcomes = node_of(3, Params::default(), Some((stage, 2)));
            for (rank, outcome) in outcomes.into_iter().enumerate() {
                let failed = outcome.expect_err("the step failed on thread 2");
                let text = failed.error.to_string();
                match (rank, stage) {
                    (2, _) => assert!(failed.rank == 2 && text.contains(&format!("injected at {stage}")), "{text}"),
                    // A failed join marks the segment aborted: the others' joins end at once,
                    // each with its own error naming the rank that failed.
                    (_, "join") => assert!(text.contains("world rank 2 failed"), "{text}"),
                    _ => assert!(failed.rank == 2 && text.contains(&format!("thread 2 could not {what}")), "{text}"),
                }
            }
        }
    }
}
