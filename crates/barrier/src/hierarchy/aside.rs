//! The node's set-up aside: [`set_up_node`](super::set_up_node)'s segment and universe, made by
//! a thread of ours while the layer's caller goes on, for a layer that must not wait (the coll
//! component's barrier built after a first `MPI_Ibarrier`: barrier-mpi's `background.rs`).
//!
//! The layer's one exchange has happened before: every rank offered an empty memfd of its own
//! ([`crate::sys::memfd_empty`]) with its descriptor and identity, and every rank knows the
//! node's first rank's offer. Then:
//!
//! 1. the first rank lays the segment out in its memfd, at once, on the caller's thread
//!    ([`Segment::create_for_job_in`]);
//! 2. a thread of ours (the others': after mapping the first rank's segment through
//!    `/proc/<pid>/fd`, retrying until it is laid out) joins the node's universe, waiting for the
//!    node's others in shared memory, and, for a communicator across nodes, makes the node's
//!    part of the hierarchy ([`node_part`]). The layer's progress call is set on the segment but never
//!    runs on that thread ([`crate::wait::Progress::run`] skips it there: the layer's engine,
//!    MPI, may not allow it). A failed step marks the segment aborted and the hand-over failed
//!    ([`crate::wait::handover`]), so that nobody waits for this rank or switches to the
//!    barrier;
//! 3. the caller polls [`NodeAside::is_finished`] and takes the outcome with
//!    [`NodeAside::finish`] (the first rank's descriptor is released there: every rank has
//!    mapped the segment once the universe is joined).
//!
//! What runs on the new barrier from which call is the layer's business: the segment's
//! [`Segment::handover`].

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::hierarchy::node::{node_part, Node};
use crate::params::Params;
use crate::shm::{JobShape, RankNames, Segment};
use crate::universe::Universe;
use crate::wait::Progress;

/// Where the node's first rank's segment is (its offer in the layer's exchange).
#[derive(Debug, Clone, Copy)]
pub struct Offer {
    pub pid: u32,
    pub fd: i32,
    /// Device and inode of the memfd.
    pub identity: (u64, u64),
}

/// A test's fault at a set-up stage (`open`, `join`) on this rank: the error to fail it with.
pub type Fault = Box<dyn Fn(&str) -> Result<()> + Send>;

/// What the node's set-up aside needs.
pub struct AsideSpec {
    /// This rank on its node (0 lays the segment out).
    pub local_rank: usize,
    /// The node's shape (`world_size`: the node's ranks).
    pub shape: JobShape,
    /// The node universe's settings (agreed).
    pub params: Params,
    /// The layer's progress call (never run on the set-up's thread).
    pub progress: Option<Progress>,
    /// The layer's names of the node's ranks.
    pub names: RankNames,
    /// The first rank's offer.
    pub first: Offer,
    /// This rank's own memfd: the first rank's segment is laid out in it; the others' is closed.
    pub memfd: Option<OwnedFd>,
    /// How long a node's other rank retries to map the first rank's segment.
    pub open_limit: Duration,
    /// A test's fault at `open` (a node's other rank maps the segment) or `join`, on this rank.
    pub fault: Fault,
    /// The communicator spans several nodes: make the node's part of the hierarchy too.
    pub across_nodes: bool,
}

impl std::fmt::Debug for AsideSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsideSpec")
            .field("local_rank", &self.local_rank)
            .field("shape", &self.shape)
            .field("first", &self.first)
            .finish_non_exhaustive()
    }
}

/// The set-up thread's outcome: the node's segment, its joined universe and, across nodes, the
/// node's part of the hierarchy.
type Joined = Result<Node>;

/// A node's set-up under way on a thread of ours (see the module docs). Dropped unfinished, it
/// gives up and waits for its thread to end (a few milliseconds: the thread stops at the
/// segment's abort), so that no thread of ours runs once a component's library may be unloaded
/// (Open MPI unloads its components in `MPI_Finalize`).
#[derive(Debug)]
pub struct NodeAside {
    mapped: Arc<OnceLock<Arc<Segment>>>,
    stop: Arc<AtomicBool>,
    /// `None` once finished.
    joiner: Option<JoinHandle<Joined>>,
    local_rank: usize,
    began: Instant,
    /// Given up past this ([`AsideState::Overdue`]).
    limit: Duration,
}

/// Where a set-up aside is ([`NodeAside::poll`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsideState {
    /// Its thread has finished: [`NodeAside::finish`] does not wait.
    Finished,
    /// Still joining.
    Running,
    /// Still joining past its limit (the open's limit plus [`JOIN_SLACK`]): a rank that could
    /// not map the segment cannot abort it, so the ranks waiting for it would wait for ever;
    /// the layer gives up ([`NodeAside::give_up`]).
    Overdue(Duration),
}

/// How much longer than the open's limit a join may take before it is overdue.
pub const JOIN_SLACK: Duration = Duration::from_secs(10);
/// For how long [`NodeAside::poll`] yields the caller's core to the set-up's thread.
const YIELDS_FOR: Duration = Duration::from_secs(1);

impl NodeAside {
    /// Starts it: the first rank lays its segment out now (an error here is this rank's,
    /// returned), the thread does the rest.
    pub fn start(spec: AsideSpec) -> Result<NodeAside> {
        let AsideSpec { local_rank, shape, params, progress, names, first, memfd, open_limit, fault, across_nodes } =
            spec;
        let forced = params.get("BARRIER_BACKEND").is_some();
        let pool = params
            .parse("BARRIER_SHM_POOL_BYTES", crate::shm::DEFAULT_POOL_BYTES, "")
            .unwrap_or(crate::shm::DEFAULT_POOL_BYTES);
        let laid_out = match (local_rank, memfd) {
            (0, Some(fd)) => Some(Segment::create_for_job_in(fd, shape, pool)?),
            (0, None) => {
                return Err(Error::Setup("the node's first rank has no memfd to lay its segment out in".into()))
            }
            // Not the first: its own memfd is closed here.
            _ => None,
        };
        let mapped: Arc<OnceLock<Arc<Segment>>> = Default::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (slot, stopped) = (mapped.clone(), stop.clone());
        let joiner = std::thread::Builder::new()
            .name("barrier-set-up".into())
            .spawn(move || {
                crate::wait::skip_progress_on_this_thread();
                let seg = match laid_out {
                    Some(seg) => seg,
                    None => fault("open").and_then(|()| open_when_laid_out(first, open_limit, &stopped))?,
                };
                let _ = slot.set(seg.clone());
                // Given up meanwhile: `give_up` saw no segment to abort. A SeqCst fence on both
                // sides (store, fence, load): either it sees the segment or this sees the stop.
                std::sync::atomic::fence(Ordering::SeqCst);
                if stopped.load(Ordering::SeqCst) {
                    return Err(Error::Setup("the node's set-up was given up".into()));
                }
                if let Some(progress) = progress {
                    seg.set_progress(progress);
                }
                seg.set_rank_names(names);
                // A failed step marks the segment aborted (the others stop waiting for this rank).
                let joined = fault("join").and_then(|()| Universe::join(seg.clone(), local_rank, params));
                let made = joined.and_then(|universe| {
                    let halves = across_nodes.then(|| node_part(&universe, forced)).transpose()?;
                    Ok(Node { seg: seg.clone(), universe, halves, forced })
                });
                if made.is_err() {
                    seg.set_abort(local_rank);
                    seg.handover().fail();
                }
                made
            })
            .map_err(|e| Error::io("starting a thread for the node's set-up", e))?;
        Ok(NodeAside {
            mapped,
            stop,
            joiner: Some(joiner),
            local_rank,
            began: Instant::now(),
            limit: open_limit + JOIN_SLACK,
        })
    }

    /// Where it is, for a caller that polls it from a program's calls (never waits). While the
    /// join is young a poll that finds it running yields the core: the thread needs one, and a
    /// program polling MPI (`MPI_Wait`, an NBX probe loop) holds it (measured: the join took
    /// longer than 20,000 barriers of 0.5 µs without this; it takes milliseconds with it).
    pub fn poll(&self) -> AsideState {
        if self.is_finished() {
            return AsideState::Finished;
        }
        let elapsed = self.began.elapsed();
        if elapsed > self.limit {
            return AsideState::Overdue(self.limit);
        }
        if elapsed < YIELDS_FOR {
            crate::sys::yield_now();
        }
        AsideState::Running
    }

    /// Whether the thread has finished (then [`finish`](Self::finish) does not wait).
    pub fn is_finished(&self) -> bool {
        self.joiner.as_ref().is_none_or(|j| j.is_finished())
    }

    /// The node: its segment, the joined universe (the first rank's descriptor released) and,
    /// across nodes, its part of the hierarchy; or why not. Waits for the thread if it has not
    /// finished.
    pub fn finish(mut self) -> Result<Node> {
        let joiner = self.joiner.take().expect("a set-up aside is finished once");
        let node = joiner.join().unwrap_or_else(|_| Err(Error::Setup("the node's set-up thread panicked".into())))?;
        node.seg.release_fd();
        Ok(node)
    }

    /// Gives up (the layer's communicator is freed, or it declined): the thread stops waiting,
    /// and nobody switches.
    pub fn give_up(&self) {
        self.stop.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if let Some(seg) = self.mapped.get() {
            seg.handover().fail();
            seg.set_abort(self.local_rank);
        }
    }
}

impl Drop for NodeAside {
    fn drop(&mut self) {
        if let Some(joiner) = self.joiner.take() {
            self.give_up();
            let _ = joiner.join();
        }
    }
}

/// Maps the segment the node's first rank lays out in its memfd, retrying until it is laid out
/// (or `limit`, or `stop`, or the first rank has closed the memfd it offered: it keeps it open
/// from the exchange until every rank of the node has mapped the segment, unless its set-up
/// failed or was given up; then this ends as on the segment's abort, [`Error::Aborted`]).
fn open_when_laid_out(first: Offer, limit: Duration, stop: &AtomicBool) -> Result<Arc<Segment>> {
    let began = Instant::now();
    let mut pause = Duration::from_micros(20);
    loop {
        match Segment::open_from_process(first.pid, first.fd, first.identity) {
            Ok(seg) => return Ok(seg),
            Err(e) if began.elapsed() >= limit || stop.load(Ordering::SeqCst) => {
                return Err(Error::Setup(format!(
                    "the node's first rank did not lay out its segment in {limit:?}: {e}"
                )))
            }
            // Its own failure, which it says (or its communicator was freed there): the join ends
            // as on the segment's abort.
            Err(_) if closed(first) => return Err(Error::Aborted { failed_rank: 0 }),
            Err(_) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_micros(200));
            }
        }
    }
}

/// Whether the descriptor the node's first rank offered no longer names the file it offered:
/// gone (the descriptor or the process), or another file now. (A refusal to look, as for
/// another user's process, is not taken for it: the open's own error says so at its limit.)
fn closed(first: Offer) -> bool {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(format!("/proc/{}/fd/{}", first.pid, first.fd)) {
        Ok(m) => (m.dev(), m.ino()) != first.identity,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::wait::handover::Switch;

    /// Two ranks as threads of one process: each offers an empty memfd, the first lays the
    /// segment out in its own, the other maps it; both join, become ready and switch at the call
    /// after the later one's; a barrier of the joined universe then runs between them. A fault
    /// at `join` on one rank fails both (the other's join ends on the segment's abort) and
    /// nobody switches.
    #[test]
    fn two_ranks_set_up_their_node_aside_and_hand_over() {
        for faulty in [None, Some(1usize)] {
            let fds: Vec<OwnedFd> = (0..2).map(|_| crate::sys::memfd_empty("barrier-test").unwrap()).collect();
            let (fd0, identity) = (fds[0].as_raw_fd(), crate::sys::fd_identity(fds[0].as_raw_fd()).unwrap());
            let first = Offer { pid: std::process::id(), fd: fd0, identity };
            let outcomes: Vec<_> = std::thread::scope(|s| {
                let runs: Vec<_> = fds
                    .into_iter()
                    .enumerate()
                    .map(|(rank, fd)| {
                        s.spawn(move || {
                            let spec = AsideSpec {
                                local_rank: rank,
                                shape: JobShape::local(2, 1),
                                params: Params::defaults_only().set("BARRIER_TIMEOUT", "20s"),
                                progress: None,
                                names: RankNames {
                                    world: vec![0, 1],
                                    comm: vec![0, 1],
                                    comm_size: 2,
                                    hierarchical: false,
                                },
                                first,
                                memfd: Some(fd),
                                open_limit: Duration::from_secs(20),
                                fault: Box::new(move |stage| match faulty {
                                    Some(r) if r == rank && stage == "join" => Err(Error::Setup("injected".into())),
                                    _ => Ok(()),
                                }),
                                across_nodes: false,
                            };
                            let Node { seg, universe, .. } = NodeAside::start(spec)?.finish()?;
                            // Rank 0 made 3 calls, rank 1 made 4: the switch is call 4 on both.
                            seg.handover().ready(3 + rank as u64);
                            let call = loop {
                                match seg.handover().switch_call() {
                                    Some(call) => break call,
                                    None => std::thread::yield_now(),
                                }
                            };
                            assert_eq!(seg.handover().call(call), Switch::New);
                            universe.world().barrier()?;
                            Ok::<_, Error>(call)
                        })
                    })
                    .collect();
                runs.into_iter().map(|r| r.join().unwrap()).collect()
            });
            match faulty {
                None => assert_eq!(outcomes.iter().map(|o| *o.as_ref().unwrap()).collect::<Vec<_>>(), vec![4, 4]),
                Some(r) => {
                    let own = outcomes[r].as_ref().unwrap_err().to_string();
                    assert!(own.contains("injected"), "{own}");
                    assert!(matches!(outcomes[1 - r], Err(Error::Aborted { .. })), "{:?}", outcomes[1 - r]);
                }
            }
        }
    }

    /// Across nodes the set-up's thread also makes the node's part of the hierarchy: its gather
    /// and release run between the node's two ranks.
    #[test]
    fn across_nodes_the_set_up_makes_the_nodes_halves() {
        let fds: Vec<OwnedFd> = (0..2).map(|_| crate::sys::memfd_empty("barrier-test").unwrap()).collect();
        let (fd0, identity) = (fds[0].as_raw_fd(), crate::sys::fd_identity(fds[0].as_raw_fd()).unwrap());
        let first = Offer { pid: std::process::id(), fd: fd0, identity };
        std::thread::scope(|s| {
            for (rank, fd) in fds.into_iter().enumerate() {
                s.spawn(move || {
                    let spec = AsideSpec {
                        local_rank: rank,
                        shape: JobShape::local(2, 1),
                        params: Params::defaults_only().set("BARRIER_TIMEOUT", "20s"),
                        progress: None,
                        names: RankNames { world: vec![0, 1], comm: vec![0, 1], comm_size: 4, hierarchical: true },
                        first,
                        memfd: Some(fd),
                        open_limit: Duration::from_secs(20),
                        fault: Box::new(|_| Ok(())),
                        across_nodes: true,
                    };
                    let node = NodeAside::start(spec).unwrap().finish().unwrap();
                    assert!(!node.forced && !node.alone());
                    let halves = node.halves.expect("across nodes");
                    assert_eq!(halves.size(), 2);
                    for _ in 0..4 {
                        halves.barrier().unwrap();
                    }
                });
            }
        });
    }

    /// A node's other rank whose first rank has closed the memfd it offered (its set-up failed
    /// there) stops waiting for it at once, not at its open limit, as on the segment's abort.
    #[test]
    fn a_closed_offer_ends_the_wait_for_it() {
        let offered = crate::sys::memfd_empty("barrier-test").unwrap();
        let (fd, identity) = (offered.as_raw_fd(), crate::sys::fd_identity(offered.as_raw_fd()).unwrap());
        drop(offered);
        let spec = AsideSpec {
            local_rank: 1,
            shape: JobShape::local(2, 1),
            params: Params::defaults_only().set("BARRIER_TIMEOUT", "60s"),
            progress: None,
            names: RankNames { world: vec![0, 1], comm: vec![0, 1], comm_size: 2, hierarchical: false },
            first: Offer { pid: std::process::id(), fd, identity },
            memfd: Some(crate::sys::memfd_empty("barrier-test").unwrap()),
            open_limit: Duration::from_secs(60),
            fault: Box::new(|_| Ok(())),
            across_nodes: false,
        };
        let began = Instant::now();
        let e = NodeAside::start(spec).unwrap().finish().unwrap_err();
        assert!(began.elapsed() < Duration::from_secs(20), "took {:?}", began.elapsed());
        assert!(matches!(e, Error::Aborted { failed_rank: 0 }), "{e}");
    }

    /// Dropped unfinished (a rank that never comes), a set-up aside gives up and its thread
    /// ends: on the node's first rank (waiting in the universe's join for rank 1) and on another
    /// rank (waiting for a first rank that never lays its segment out). Each would otherwise
    /// wait its 60 s limit.
    #[test]
    fn an_unfinished_set_up_dropped_ends_its_thread() {
        for rank in [0usize, 1] {
            let fd = crate::sys::memfd_empty("barrier-test").unwrap();
            let (raw, identity) = (fd.as_raw_fd(), crate::sys::fd_identity(fd.as_raw_fd()).unwrap());
            let spec = AsideSpec {
                local_rank: rank,
                shape: JobShape::local(2, 1),
                params: Params::defaults_only().set("BARRIER_TIMEOUT", "60s"),
                progress: None,
                names: RankNames { world: vec![0, 1], comm: vec![0, 1], comm_size: 2, hierarchical: false },
                first: Offer { pid: std::process::id(), fd: raw, identity },
                // Rank 1 is offered an empty memfd nobody lays out (`fd`, held in this scope);
                // its own is closed by `start`.
                memfd: Some(if rank == 0 { fd } else { crate::sys::memfd_empty("barrier-test").unwrap() }),
                open_limit: Duration::from_secs(60),
                fault: Box::new(|_| Ok(())),
                across_nodes: false,
            };
            let aside = NodeAside::start(spec).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            assert!(!aside.is_finished(), "rank {rank}: finished without the other rank");
            let began = Instant::now();
            drop(aside);
            assert!(began.elapsed() < Duration::from_secs(20), "rank {rank}: the drop took {:?}", began.elapsed());
        }
    }
}
