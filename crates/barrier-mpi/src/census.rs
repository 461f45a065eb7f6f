//! The job's processes on this machine: what decides every communicator's wait policy.
//!
//! Whether a waiter may spin depends on whether the processes of the *job* on this machine
//! outnumber the cores they may use, not on how many of them a communicator holds: a pair of
//! ranks timing barriers on 2 cores while 2 more ranks of the job are busy elsewhere must not
//! spin on a core its partner needs (measured: 52 us a barrier against 1.4 us for MPI's own).
//!
//! The census is `MPI_COMM_WORLD` split by shared memory (`MPI_COMM_TYPE_SHARED`) with the union
//! of its ranks' CPU masks, recorded once per process by the first communicator we build whose
//! group is `MPI_COMM_WORLD`'s: its own machine split is the census, at no extra cost, inside a
//! call every rank of the world makes.
//!
//! No collective of ours runs outside a call of the application's that every rank makes (the
//! interposer does not take the census in `MPI_Init`: Fortran's `MPI_INIT` goes to `PMPI_Init`
//! directly in Open MPI, so the ranks of a mixed C and Fortran job would not all take part).
//!
//! A communicator built before any census (the interposer's first barrier on a split, a Rust
//! program's first barrier communicator over a subset) counts the job's processes on the
//! machine from the launcher's environment (Open MPI's `OMPI_COMM_WORLD_LOCAL_SIZE`, MPICH's
//! `MPI_LOCALNRANKS`) and estimates their cores: its own ranks' cores, scaled by the share of
//! the machine's processes it holds when its ranks are bound. Only the node's first rank's count
//! matters: it creates the node's segment, and the policy read from it is agreed.
//!
//! Processes, not threads: two threads of each rank running barriers at once
//! (`MPI_THREAD_MULTIPLE`) are not counted twice; such programs on a full machine should set
//! `BARRIER_WAIT_POLICY=park`.

use std::sync::OnceLock;

use barrier::Result;

use crate::raw::{self, Comm, OwnedComm};

/// The job's processes on this machine and the cores they may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MachineJob {
    /// Processes of the job on this machine.
    pub ranks: usize,
    /// CPUs in the union of their affinity masks.
    pub cores: usize,
}

static CENSUS: OnceLock<MachineJob> = OnceLock::new();

/// The words a rank adds to its communicator's settings' allgather, saying where it runs: its
/// machine ([`machine_key`]), its `MPI_COMM_WORLD` rank and its CPU mask (18 words). A
/// communicator whose ranks all share one machine (and one node block) is one node, known
/// without a split.
pub(crate) fn my_place(world_rank: usize) -> Vec<u64> {
    let mut words = vec![machine_key(), world_rank as u64];
    words.extend_from_slice(&affinity_mask());
    words
}

/// The job on the machine of a communicator whose every rank is on this one, from the ranks'
/// place words (what [`machine_of`] finds with a split and an allreduce).
pub(crate) fn one_machine(places: &[Vec<u64>]) -> MachineJob {
    machine_of_masks(places.iter().map(|row| &row[2..]))
}

/// The ranks of one machine and the cores their CPU masks ([`affinity_mask`]) cover.
pub(crate) fn machine_of_masks<'a>(masks: impl Iterator<Item = &'a [u64]>) -> MachineJob {
    let masks: Vec<&[u64]> = masks.map(|row| &row[..row.len().min(16)]).collect();
    MachineJob { ranks: masks.len(), cores: barrier::sys::cores_in(masks) }
}

/// This machine, as the ranks that can map each other's memfds see it: the host's name, its
/// boot and this process's PID namespace (a rank of another namespace cannot open our
/// `/proc/<pid>/fd`), hashed. Read once per process. Where one of them cannot be read (an
/// empty boot id would make two hosts of one name alike, and every host's first PID namespace
/// has the same inode), this process's PID goes in too: the key is then this process's alone,
/// and no communicator is taken for one node on its word (the node split decides, as before).
pub(crate) fn machine_key() -> u64 {
    static KEY: OnceLock<u64> = OnceLock::new();
    *KEY.get_or_init(|| {
        use std::hash::{Hash, Hasher};
        let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let host = read("/proc/sys/kernel/hostname");
        let boot = read("/proc/sys/kernel/random/boot_id");
        let pid_ns = std::fs::read_link("/proc/self/ns/pid").ok().map(|p| p.to_string_lossy().into_owned());
        let mut h = std::hash::DefaultHasher::new();
        (&host, &boot, &pid_ns).hash(&mut h);
        if host.is_none() || boot.is_none() || pid_ns.is_none() {
            std::process::id().hash(&mut h);
        }
        h.finish()
    })
}

/// Records a census (the first one wins: every later one would count the same processes).
pub(crate) fn record(job: MachineJob) {
    let _ = CENSUS.set(job);
}

/// The machine split of `comm` (collective over `comm`), with its ranks on this machine and the
/// union of their CPU masks.
pub(crate) fn machine_of(comm: Comm, key: usize) -> Result<(OwnedComm, MachineJob)> {
    let machine = OwnedComm(raw::split_shared(comm, key)?);
    let ranks = raw::size(machine.0)?;
    let mut mask = affinity_mask();
    raw::allreduce_or(machine.0, &mut mask)?;
    Ok((machine, MachineJob { ranks, cores: barrier::sys::cores_in([&mask[..]]) }))
}

/// The job on this machine as seen by a communicator whose own ranks on the machine are
/// `comm`: the census if there is one, else the launcher's count (see the module docs).
pub(crate) fn job_on_machine(comm: MachineJob) -> MachineJob {
    if let Some(job) = CENSUS.get() {
        return MachineJob { ranks: job.ranks.max(comm.ranks), cores: job.cores };
    }
    let launcher = ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.trim().parse::<usize>().ok()));
    estimate(comm, launcher, online_cpus())
}

/// A team for this rank's `threads` threads (a hybrid program: every rank on the machine has
/// one), waiting as the job's threads on this machine together need: `auto` parks where the
/// job's ranks here times `threads` exceed the cores they may use ([`barrier::sync::Team::among`]).
/// The count is the census's once a communicator over `MPI_COMM_WORLD`'s group was built (a
/// first `fast_barrier` on the world, say), else the launcher's count of ranks on the machine.
pub fn hybrid_team(threads: usize) -> barrier::sync::Team {
    let me = MachineJob { ranks: 1, cores: barrier::sys::available_cores() };
    let job = job_on_machine(me);
    barrier::sync::Team::among(threads, job.ranks.saturating_mul(threads.max(1)), job.cores)
}

/// The fallback estimate: `launcher` processes on the machine (if the launcher says), of which
/// `comm` holds `comm.ranks` on `comm.cores` CPUs; bound ranks (fewer cores than the machine
/// has) suggest that the others are bound elsewhere, in the same proportion.
fn estimate(comm: MachineJob, launcher: Option<usize>, online: usize) -> MachineJob {
    let ranks = launcher.unwrap_or(0).max(comm.ranks);
    let cores = if comm.cores < online && ranks > comm.ranks {
        (comm.cores * ranks).div_ceil(comm.ranks.max(1)).min(online)
    } else {
        comm.cores
    };
    MachineJob { ranks, cores: cores.max(1) }
}

fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// This process's CPU affinity as a bit mask of 1,024 CPUs.
pub(crate) fn affinity_mask() -> [u64; 16] {
    barrier::sys::affinity_words()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_counts_the_launchers_processes() {
        let pair = MachineJob { ranks: 2, cores: 2 };
        // Unbound (every rank may use the whole machine): 4 processes on 2 cores park.
        assert_eq!(estimate(pair, Some(4), 2), MachineJob { ranks: 4, cores: 2 });
        // Bound one core each on a 4-core machine: the other 2 are on the other 2 cores.
        assert_eq!(estimate(pair, Some(4), 4), MachineJob { ranks: 4, cores: 4 });
        // No word from the launcher: the communicator's own ranks.
        assert_eq!(estimate(pair, None, 4), pair);
        // A launcher count below the communicator's (it cannot be) does not lower it.
        assert_eq!(estimate(MachineJob { ranks: 3, cores: 1 }, Some(2), 2), MachineJob { ranks: 3, cores: 1 });
    }
}
