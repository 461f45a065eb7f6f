//! Bootstrap: how a rank finds its job, and the thread-mode job.
//!
//! Under the launcher, a rank's environment holds:
//!
//! | variable | meaning |
//! |---|---|
//! | `BARRIER_SHM_FD` | inherited descriptor of the job segment (already unlinked) |
//! | `BARRIER_RANK` | this process's world rank |
//! | `BARRIER_SIZE` | ranks in the world |
//! | `BARRIER_NODES` | simulated nodes (`--nodes`) |
//! | `BARRIER_LIFELINE_FD` | read end of a pipe whose write end only the launcher holds |
//!
//! A rank takes both descriptors out of what its own subprocesses inherit (close-on-exec), and
//! records its pid in the job's rank table, so a program the rank starts cannot join the job as
//! a second copy of that rank. A thread of the rank waits on the lifeline: when the launcher
//! dies (killed, crashed), the pipe reports end of file, the rank marks the job gone (every
//! wait ends with [`Error::JobGone`]), says so on stderr, and ends itself with SIGTERM (then
//! `_exit` after a grace period), just as the launcher would have ended it. This also reaches
//! ranks behind a wrapper script, which the kernel's parent-death signal does not.
//!
//! Without them, [`init`] makes a world of one rank. In thread mode ([`threads::Job`]) every
//! thread is a rank and the segment is an anonymous mapping shared by the threads.

use std::sync::Arc;

use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::params::Params;
use crate::region::Region;
use crate::shm::{JobShape, RankExit, Segment, DEFAULT_POOL_BYTES};

/// Environment variable: inherited descriptor of the job segment.
pub const ENV_SHM_FD: &str = "BARRIER_SHM_FD";
/// Environment variable: world rank.
pub const ENV_RANK: &str = "BARRIER_RANK";
/// Environment variable: world size.
pub const ENV_SIZE: &str = "BARRIER_SIZE";
/// Environment variable: simulated nodes.
pub const ENV_NODES: &str = "BARRIER_NODES";
/// Environment variable: the read end of the launcher's lifeline pipe.
pub const ENV_LIFELINE_FD: &str = "BARRIER_LIFELINE_FD";

/// How long a rank whose launcher died has between SIGTERM and `_exit`.
const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// One rank's view of its job. Create it with [`init`] (processes) or [`threads::Job`].
#[derive(Debug)]
pub struct Universe {
    // Field order is drop order: the world goes before the communicator that made it.
    world: Communicator,
    /// Under the launcher, the communicator that made the world (see [`Universe::attach`]); a
    /// joined universe's world is made on the world region at once.
    _base: Option<Communicator>,
}

/// Joins the job the launcher started, or makes a world of one rank when started alone.
/// Collective: every rank calls it once.
///
/// ```
/// # fn main() -> Result<(), barrier::Report> {
/// let universe = barrier::init()?; // under `barrier run -n 4 -- prog`: rank r of 4
/// let world = universe.world();
/// println!("rank {} of {} uses {}", world.rank(), world.size(), world.backend());
/// world.barrier()?;
/// # Ok(())
/// # }
/// ```
pub fn init() -> Result<Universe> {
    init_with(Params::from_env())
}

/// The variables by which MPI launchers (and Slurm's `srun`) tell a process how many they
/// started: Open MPI's `mpirun`/`prterun`, MPICH's Hydra and other PMI launchers, MVAPICH's,
/// Slurm's job steps.
const LAUNCHER_SIZE_VARS: &[(&str, &str)] = &[
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's launcher"),
    ("PMI_SIZE", "a PMI launcher (MPICH's Hydra, Intel MPI)"),
    ("MV2_COMM_WORLD_SIZE", "MVAPICH's launcher"),
    ("SLURM_STEP_NUM_TASKS", "Slurm (srun)"),
];

/// An MPI launcher's job of more than one process, as `lookup` (the environment) describes it.
fn launched_by_mpi(lookup: impl Fn(&str) -> Option<String>) -> Option<Error> {
    LAUNCHER_SIZE_VARS.iter().find_map(|&(var, launcher)| {
        let size = lookup(var)?.trim().parse::<usize>().ok()?;
        (size > 1).then_some(Error::LaunchedByMpi { launcher, var, size })
    })
}

/// [`init`] with explicit parameters.
///
/// Started alone it makes a world of one rank; but in one process of a job that an MPI launcher
/// started with several (`mpirun -np 4 prog`), it fails with [`Error::LaunchedByMpi`], which
/// says to use barrier-mpi or the interposer, unless `BARRIER_SINGLETON=1` asks for a world of
/// one in each process.
pub fn init_with(params: Params) -> Result<Universe> {
    match std::env::var(ENV_SHM_FD) {
        Err(_) => {
            if !params.flag(crate::params::SINGLETON)? {
                if let Some(e) = launched_by_mpi(|var| std::env::var(var).ok()) {
                    return Err(e);
                }
            }
            let seg = Segment::anonymous(JobShape::local(1, 1), pool_bytes(&params)?)?;
            Universe::attach(seg, 0, params)
        }
        Ok(fd) => {
            let var = |name: &str| -> Result<usize> {
                let v = std::env::var(name)
                    .map_err(|_| Error::Bootstrap(format!("{ENV_SHM_FD} is set but {name} is not")))?;
                v.parse().map_err(|_| Error::Bootstrap(format!("{name}={v} is not a number")))
            };
            let fd: i32 =
                fd.parse().map_err(|_| Error::Bootstrap(format!("{ENV_SHM_FD}={fd} is not a descriptor number")))?;
            let rank = var(ENV_RANK)?;
            let size = var(ENV_SIZE)?;
            let seg = Segment::from_fd(fd)?;
            let shape = seg.shape();
            if shape.world_size != size || rank >= size {
                return Err(Error::Bootstrap(format!(
                    "{ENV_RANK}={rank}, {ENV_SIZE}={size} do not match the job segment's {} ranks",
                    shape.world_size
                )));
            }
            // The job is this process's, not its subprocesses'.
            crate::sys::set_cloexec(fd).map_err(|e| Error::io(format!("{ENV_SHM_FD}={fd}: close-on-exec"), e))?;
            seg.join(rank)?;
            if let Ok(text) = std::env::var(ENV_LIFELINE_FD) {
                let lifeline: i32 = text
                    .parse()
                    .map_err(|_| Error::Bootstrap(format!("{ENV_LIFELINE_FD}={text} is not a descriptor number")))?;
                crate::sys::set_cloexec(lifeline)
                    .map_err(|e| Error::io(format!("{ENV_LIFELINE_FD}={lifeline}: close-on-exec"), e))?;
                watch_launcher(lifeline, seg.clone(), rank);
            }
            Universe::attach(seg, rank, params)
        }
    }
}

/// Starts (once per process) the thread that ends this rank when the launcher dies.
fn watch_launcher(lifeline: i32, seg: Arc<Segment>, rank: usize) {
    static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if STARTED.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new().name("barrier-lifeline".into()).spawn(move || {
        crate::sys::wait_hangup(lifeline);
        seg.set_job_gone();
        crate::text::say(&format!(
            "barrier: rank {rank}: the launcher of this job is gone (killed or crashed); ending this rank \
             (SIGTERM, then exit after {ORPHAN_GRACE:?})"
        ));
        crate::sys::terminate_self(ORPHAN_GRACE)
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the launcher watch; this rank will not notice if the launcher dies");
    }
}

fn pool_bytes(params: &Params) -> Result<usize> {
    params.parse("BARRIER_SHM_POOL_BYTES", DEFAULT_POOL_BYTES, "a number of bytes")
}

impl Universe {
    /// Joins a job whose segment this process already mapped, as rank `rank` (collective over
    /// the segment's ranks): how a bootstrap other than the launcher brings ranks together.
    /// `barrier-mpi` makes one segment per node and communicator through MPI
    /// ([`Segment::create_for_job`] on one rank, [`Segment::open_from_process`] on the others)
    /// and joins each rank here.
    pub fn join(seg: Arc<Segment>, rank: usize, params: Params) -> Result<Universe> {
        // A rank that fails before it reaches the communicator's creation must not leave the
        // others waiting in it: the segment is this job's alone, so the whole job fails.
        let abort = seg.clone();
        let size = seg.shape().world_size;
        let joined = if rank < size {
            Universe::attach_lean(seg, rank, params)
        } else {
            Err(Error::InvalidArgument(format!("rank {rank} joins a job segment of {size} ranks")))
        };
        joined.inspect_err(|_| abort.set_abort(rank.min(size.saturating_sub(1))))
    }

    fn attach(seg: Arc<Segment>, rank: usize, params: Params) -> Result<Self> {
        seg.join(rank)?;
        let size = seg.shape().world_size;
        let region = Region::attach(&seg, seg.world_region(), size)?;
        // The base communicator only creates other communicators: it stays on the software
        // backend so that it never holds one of a device's scarce groups.
        let base_params = params
            .clone()
            .set("BARRIER_BACKEND", crate::backends::dissemination::NAME)
            .set("BARRIER_DISSEMINATION_DISABLE", "0")
            .set("BARRIER_DISSEMINATION_MIN_COMM_SIZE", "1");
        let mut base = Communicator::create(seg, region, rank, (0..size).collect(), base_params)?;
        base.set_params(params);
        // The world is made once, here: `world()` is then a cheap, infallible handle (as with
        // MPI_COMM_WORLD); `dup()` it for an independent communicator over every rank.
        let world = base.dup()?;
        Ok(Universe { world, _base: Some(base) })
    }

    /// A joined universe (an MPI or OpenSHMEM node's, a thread group's): the world is made on
    /// the world region directly, one communicator creation where [`Universe::attach`] makes
    /// two (a quarter of an MPI communicator's set-up was the second). Nothing else is made
    /// from the world region there.
    fn attach_lean(seg: Arc<Segment>, rank: usize, params: Params) -> Result<Self> {
        seg.join(rank)?;
        let size = seg.shape().world_size;
        let region = Region::attach(&seg, seg.world_region(), size)?;
        let world = Communicator::create(seg, region, rank, (0..size).collect(), params)?;
        Ok(Universe { world, _base: None })
    }

    fn into_world(self) -> Communicator {
        self.world
    }

    /// This rank's world rank.
    pub fn rank(&self) -> usize {
        self.world.rank()
    }

    /// Ranks in the world.
    pub fn size(&self) -> usize {
        self.world.size()
    }

    /// The communicator over every rank of the job (MPI_COMM_WORLD): made by [`init`], so this
    /// is a cheap, infallible handle. For an independent communicator over the same ranks, use
    /// `world().dup()` (collective).
    pub fn world(&self) -> &Communicator {
        &self.world
    }
}

/// Ranks as threads in one process: tests, and hybrid codes that want the same API.
pub mod threads {
    use super::*;
    use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

    /// A thread-mode job: `n` ranks, each a thread with its own [`Communicator`].
    ///
    /// ```
    /// use barrier::threads::Job;
    ///
    /// // 6 ranks on 2 simulated nodes: the hierarchical backend's internode phase runs over
    /// // the simulated network between them.
    /// let nodes = Job::new(6).nodes(2).run(|world| {
    ///     world.barrier().unwrap();
    ///     world.node()
    /// })
    /// .unwrap();
    /// assert_eq!(nodes, vec![0, 0, 0, 1, 1, 1]);
    /// ```
    #[derive(Debug, Clone)]
    pub struct Job {
        ranks: usize,
        nodes: usize,
        busy_threads: usize,
        params: Params,
        cpus: Option<Vec<usize>>,
    }

    impl Job {
        /// A job of `ranks` threads on one node, with parameters from the environment.
        pub fn new(ranks: usize) -> Self {
            Job { ranks, nodes: 1, busy_threads: 0, params: Params::from_env(), cpus: None }
        }

        /// Spreads the ranks over `nodes` simulated nodes (contiguous blocks).
        pub fn nodes(mut self, nodes: usize) -> Self {
            self.nodes = nodes;
            self
        }

        /// Counts `k` more threads that need a core while barriers run (an in-process device
        /// emulator), so the automatic wait policy parks when they would oversubscribe the cores.
        pub fn busy_threads(mut self, k: usize) -> Self {
            self.busy_threads = k;
            self
        }

        /// Binds rank `r`'s thread to CPU `cpus[r]` before it joins (see
        /// [`crate::sys::bind_thread_to_cpu`]): the CPU's affinity where this machine has it,
        /// and a recorded binding that an emulated node reads where it does not. Hardware that
        /// works per PE (the A64FX barrier) needs every rank bound to its own CPU; on a real
        /// A64FX node, take the CPUs from the driver's `core_map`
        /// (`barrier::backends::a64fx::NodeInfo`).
        pub fn pin_cpus(mut self, cpus: Vec<usize>) -> Self {
            self.cpus = Some(cpus);
            self
        }

        /// Uses these parameters instead of the environment's.
        pub fn params(mut self, params: Params) -> Self {
            self.params = params;
            self
        }

        /// Runs `f` on every rank and returns the results by rank. If a rank panics, the other
        /// ranks' waits end with [`Error::Aborted`] and the first panic is resumed here.
        pub fn run<T, F>(&self, f: F) -> Result<Vec<T>>
        where
            T: Send,
            F: Fn(Communicator) -> T + Sync,
        {
            if self.ranks == 0 {
                return Err(Error::InvalidArgument("a job needs at least one rank".into()));
            }
            if let Some(cpus) = self.cpus.as_ref().filter(|c| c.len() < self.ranks) {
                return Err(Error::InvalidArgument(format!(
                    "pin_cpus names {} CPUs for a job of {} ranks: give one CPU per rank",
                    cpus.len(),
                    self.ranks
                )));
            }
            let mut shape = JobShape::local(self.ranks, self.nodes);
            shape.ranks_on_machine += self.busy_threads;
            let seg = Segment::anonymous(shape, pool_bytes(&self.params)?)?;
            let mut spawn_error = None;
            let outcomes: Vec<std::thread::Result<Result<T>>> = std::thread::scope(|s| {
                let mut handles = Vec::with_capacity(self.ranks);
                for rank in 0..self.ranks {
                    let rank_seg = seg.clone();
                    let params = self.params.clone();
                    let f = &f;
                    let cpu = self.cpus.as_ref().map(|c| c[rank]);
                    let spawned = std::thread::Builder::new().name(format!("rank-{rank}")).spawn_scoped(s, move || {
                        let abort_seg = rank_seg.clone();
                        let out = catch_unwind(AssertUnwindSafe(|| {
                            if let Some(cpu) = cpu {
                                crate::sys::bind_thread_to_cpu(cpu)
                                    .map_err(|e| Error::io(format!("binding rank {rank} to CPU {cpu}"), e))?;
                            }
                            let world = Universe::attach(rank_seg, rank, params)?.into_world();
                            Ok(f(world))
                        }));
                        if matches!(out, Ok(Ok(_))) {
                            // Ranks still waiting for this one learn that it returned,
                            // unless a communicator of this rank lives on (moved to
                            // another thread: a `Communicator` is `Send`); that one
                            // records its departure when it is dropped.
                            if abort_seg.live_communicators(rank) == 0 {
                                abort_seg.mark_exited(rank, RankExit::Returned);
                            }
                        } else {
                            abort_seg.set_abort(rank);
                        }
                        out
                    });
                    match spawned {
                        Ok(h) => handles.push(h),
                        Err(e) => {
                            // The ranks already started must not wait for the rest.
                            seg.set_abort(rank);
                            spawn_error = Some(Error::io(format!("starting thread {rank} of {}", self.ranks), e));
                            break;
                        }
                    }
                }
                handles.into_iter().map(|h| h.join().unwrap_or_else(Err)).collect()
            });
            if let Some(e) = spawn_error {
                return Err(e);
            }
            let mut results = Vec::with_capacity(self.ranks);
            let mut first_err = None;
            let mut first_panic = None;
            for out in outcomes {
                match out {
                    Ok(Ok(v)) => results.push(v),
                    Ok(Err(e)) => {
                        // Errors caused by another rank's abort are consequences, not causes.
                        if first_err.is_none() || matches!(first_err, Some(Error::Aborted { .. })) {
                            first_err = Some(e);
                        }
                    }
                    Err(p) => {
                        first_panic.get_or_insert(p);
                    }
                }
            }
            if let Some(p) = first_panic {
                resume_unwind(p);
            }
            match first_err {
                Some(e) => Err(e),
                None => Ok(results),
            }
        }
    }

    /// A group of the program's own threads, joined as the ranks of one communicator: where a
    /// [`Job`] starts its threads, a group takes the threads a program already has (a
    /// `std::thread::scope`, a pool's workers). Each thread calls [`Group::join`] once and gets
    /// its rank's [`Communicator`], ranks in the order the threads join.
    ///
    /// The selector picks the group's barrier as it does any communicator's. On an A64FX node
    /// (or an emulated one: `BARRIER_A64FX_DEVICE_PATH`), members bound one per PE
    /// ([`crate::sys::bind_thread_to_cpu`]) get a barrier blade per CMG and a window register
    /// each, and wait through BST and LBSY: the hardware barrier Fujitsu's `fhwb_sync` gives a
    /// team of threads. Unbound threads get the software barrier, and
    /// [`Communicator::selection`] says why (`a64fx: … is not bound to one CPU`).
    ///
    /// ```
    /// let group = barrier::threads::Group::new(3).unwrap();
    /// std::thread::scope(|s| {
    ///     for _ in 0..3 {
    ///         s.spawn(|| {
    ///             let comm = group.join().unwrap();
    ///             comm.barrier().unwrap();
    ///         });
    ///     }
    /// });
    /// ```
    #[derive(Debug)]
    pub struct Group {
        seg: Arc<Segment>,
        params: Params,
        size: usize,
        joined: std::sync::atomic::AtomicUsize,
    }

    impl Group {
        /// A group of `n` threads, with parameters from the environment.
        pub fn new(n: usize) -> Result<Group> {
            Group::with_params(n, Params::from_env())
        }

        /// A group of `n` threads with these parameters.
        pub fn with_params(n: usize, params: Params) -> Result<Group> {
            if n == 0 {
                return Err(Error::InvalidArgument("a group needs at least one thread".into()));
            }
            let seg = Segment::anonymous(JobShape::local(n, 1), pool_bytes(&params)?)?;
            Ok(Group { seg, params, size: n, joined: std::sync::atomic::AtomicUsize::new(0) })
        }

        /// The threads the group holds.
        pub fn size(&self) -> usize {
            self.size
        }

        /// Joins the calling thread as the next rank and returns its communicator. Collective:
        /// it returns once all `n` threads have joined (a thread that never joins is named by
        /// the others' stall report and timeout, as any absent rank). A join past the `n`-th
        /// fails.
        pub fn join(&self) -> Result<Communicator> {
            let rank = self.joined.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            if rank >= self.size {
                return Err(Error::InvalidArgument(format!(
                    "a group of {} threads already has them all: join once per thread",
                    self.size
                )));
            }
            Universe::join(self.seg.clone(), rank, self.params.clone()).map(Universe::into_world)
        }
    }

    /// Runs `f` on `ranks` threads with the environment's parameters: `Job::new(ranks).run(f)`.
    pub fn run<T, F>(ranks: usize, f: F) -> Result<Vec<T>>
    where
        T: Send,
        F: Fn(Communicator) -> T + Sync,
    {
        Job::new(ranks).run(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |var| pairs.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone())
    }

    #[test]
    fn an_mpi_launchers_job_of_several_is_recognised() {
        for (var, who) in [
            ("OMPI_COMM_WORLD_SIZE", "Open MPI"),
            ("PMI_SIZE", "PMI"),
            ("MV2_COMM_WORLD_SIZE", "MVAPICH"),
            ("SLURM_STEP_NUM_TASKS", "Slurm"),
        ] {
            let e = launched_by_mpi(env(&[(var, "4")])).expect(var);
            let text = e.to_string();
            assert!(text.contains(who) && text.contains(&format!("{var}=4")), "{text}");
            assert!(text.contains("barrier-mpi") && text.contains("libbarrier_pmpi.so"), "{text}");
            assert!(text.contains("BARRIER_SINGLETON=1"), "{text}");
        }
    }

    #[test]
    fn one_process_or_no_launcher_is_a_world_of_one() {
        assert!(launched_by_mpi(env(&[])).is_none());
        assert!(launched_by_mpi(env(&[("OMPI_COMM_WORLD_SIZE", "1")])).is_none());
        assert!(launched_by_mpi(env(&[("PMI_SIZE", "1"), ("SLURM_STEP_NUM_TASKS", "1")])).is_none());
        assert!(launched_by_mpi(env(&[("PMI_SIZE", "garbage")])).is_none());
    }
}
