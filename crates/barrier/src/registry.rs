//! The registry: every backend this build knows, in registry order, and the catalogue of every
//! parameter (the core ones, each backend's, MPI's). It sits above the backends (it names
//! them) and beneath the selector, the communicator and the tools, which read it; `params.rs`
//! below it is only the mechanism (values, kinds, checks).

use crate::backend::Backend;
use crate::backends::dissemination::Software;
use crate::backends::hierarchical::Hierarchical;
use crate::error::Error;
use crate::params::{ParamInfo, ParamKind, Params, MPI_FAULT, MPI_NODE_BLOCK, MPI_PROGRESS, REBALANCE};

/// The software backend (the selector enables it statically: see `engine.rs`).
pub(crate) static SOFTWARE: Software = Software;
static HIERARCHICAL: Hierarchical = Hierarchical;

/// Every backend this build knows, in registry order.
pub fn backends() -> Vec<&'static dyn Backend> {
    vec![
        &crate::backends::a64fx::A64FX,
        &crate::backends::offload::GBA,
        &crate::backends::offload::SWITCH,
        &HIERARCHICAL,
        &SOFTWARE,
    ]
}

/// The names of [`backends`], for the `BARRIER_BACKEND` check.
pub const BACKEND_NAMES: &[&str] = &["a64fx", "gba", "switch", "hierarchical", "dissemination"];

/// Checks every parameter this build knows ([`all_params`]); the first bad value, with its
/// index in that list.
pub fn check_all(params: &Params) -> std::result::Result<(), Box<(usize, Error)>> {
    params.check_each(&all_params())
}

const U32_MAX: i64 = u32::MAX as i64;

/// Communicator-wide parameters (not tied to one backend).
pub fn core_params() -> Vec<ParamInfo> {
    vec![
        ParamInfo::new(
            "BARRIER_BACKEND",
            "",
            "Comma-separated backend names: only these are tried, in this order, and if none can run \
             the communicator fails with every reason (explicit choices fail loudly). Empty: all \
             backends by priority, falling back automatically.",
        )
        .kind(ParamKind::BackendList(BACKEND_NAMES.to_vec())),
        ParamInfo::new(
            "BARRIER_TIMEOUT",
            "0",
            "Give up on a barrier after this long and report the ranks that have not arrived \
             (e.g. 30s, 500ms, 2.5; 0 or none: wait for ever).",
        )
        .kind(ParamKind::Duration),
        ParamInfo::new(
            "BARRIER_VERBOSE",
            "0",
            "1: also print on stderr what is otherwise only logged as a warning (a hardware module \
             falling back to software after a device fault, once per communicator).",
        )
        .kind(ParamKind::Bool),
        ParamInfo::new(
            "BARRIER_STALL_REPORT",
            "30s",
            "When a wait has lasted this long, print once which ranks have not arrived (world ranks) \
             and keep waiting (0 or none: never report).",
        )
        .kind(ParamKind::Duration),
        ParamInfo::new(
            "BARRIER_WAIT_POLICY",
            "auto",
            "spin (spin, then yield), park (spin briefly, yield, then sleep on a futex), or auto \
             (park when the job's ranks outnumber the cores).",
        )
        .kind(ParamKind::Choice(&["auto", "spin", "park"])),
        ParamInfo::new(
            "BARRIER_SPIN_COUNT",
            "auto",
            "Busy-wait rounds before yielding (auto: 2000 with spin, 0 with park).",
        )
        .kind(ParamKind::Int { min: 0, max: U32_MAX }),
        ParamInfo::new(
            crate::backend::NET_PUT_LATENCY,
            "0",
            "Simulated nodes (`barrier run --nodes M`): how long every put or atomic between nodes \
             takes to land (the initiator waits it out), to see what saving network traffic is worth.",
        )
        .kind(ParamKind::Duration),
        ParamInfo::new(
            crate::backend::NET_ASYNC,
            "0",
            "Simulated nodes: 1 makes puts between nodes asynchronous: they land, once their latency \
             has passed, on the initiator's next progress call or flush (the model of an MPI or RDMA \
             transport whose puts need the initiator's help).",
        )
        .kind(ParamKind::Bool),
        ParamInfo::new(
            REBALANCE,
            "1",
            "`barrier run` with more ranks than cores and no pinning: the launcher moves a rank off \
             a CPU that holds two or more ranks more than another for a lasting moment, within \
             the job's CPU mask (0: leave placement to the kernel). MPI launchers place their own ranks.",
        )
        .kind(ParamKind::Bool),
        ParamInfo::new(
            crate::mmio::INLINE_LIBRARY_VAR,
            "",
            "The inline emulator library (libbarrier_emu_inline.so) that a program loads to drive \
             an emulated device whose work runs in its ranks. `barrier run --emulate` sets it.",
        ),
        ParamInfo::new(
            crate::params::SINGLETON,
            "0",
            "barrier::init() in a process that an MPI launcher or srun started with others fails (each would be \
             a world of 1; use barrier-mpi or the interposer). 1: make that world of 1 in each process anyway.",
        )
        .kind(ParamKind::Bool),
        ParamInfo::new("BARRIER_YIELD_COUNT", "auto", "Yields before parking with the park policy (auto: 256).")
            .kind(ParamKind::Int { min: 0, max: U32_MAX }),
        ParamInfo::new(
            "BARRIER_SHM_POOL_BYTES",
            crate::shm::DEFAULT_POOL_BYTES.to_string(),
            "Bytes of the job segment for communicators and shared windows beyond the world (sparse).",
        )
        .kind(ParamKind::Int { min: 0, max: i64::MAX }),
    ]
}

/// The standard parameters of a backend named `name` with default priority `priority`.
pub fn backend_params(name: &str, priority: i32) -> Vec<ParamInfo> {
    let up = name.to_ascii_uppercase();
    vec![
        ParamInfo::new(
            format!("BARRIER_{up}_PRIORITY"),
            priority.to_string(),
            format!("Priority of the {name} backend (highest usable wins)."),
        )
        .kind(ParamKind::Int { min: i32::MIN as i64, max: i32::MAX as i64 }),
        ParamInfo::new(format!("BARRIER_{up}_DISABLE"), "0", format!("1: never use the {name} backend."))
            .kind(ParamKind::Bool),
        ParamInfo::new(
            format!("BARRIER_{up}_MIN_COMM_SIZE"),
            "1",
            format!("The {name} backend declines communicators smaller than this."),
        )
        .kind(ParamKind::Int { min: 0, max: i64::MAX }),
    ]
}

/// Every parameter this build knows: the core ones, then each backend's standard three and its
/// own, in registry order (`barrier info` lists them in this order).
pub fn all_params() -> Vec<ParamInfo> {
    let mut all = core_params();
    for b in backends() {
        all.extend(backend_params(b.name(), b.default_priority()));
        all.extend(b.params());
    }
    all.extend(mpi_params());
    all
}

/// The parameters of communicators made over MPI (`barrier-mpi` and its interposer): described
/// here so that `barrier info` lists them and every communicator checks them, read there.
pub fn mpi_params() -> Vec<ParamInfo> {
    vec![
        ParamInfo::new(
            MPI_NODE_BLOCK,
            "0",
            "MPI only: pretend that every K consecutive MPI_COMM_WORLD ranks of a machine are one node, so the \
             internode path (MPI between node roots) runs on one machine. 0: nodes are the machines \
             (MPI_COMM_TYPE_SHARED).",
        )
        .kind(ParamKind::Int { min: 0, max: i32::MAX as i64 }),
        ParamInfo::new(
            MPI_PROGRESS,
            "1",
            "MPI only: a rank waiting in a barrier keeps MPI's progress engine turning (one MPI_Iprobe every 16 \
             yields and around every park, parks cut to 1 ms), so that a large send to it or a one-sided read of \
             its window completes meanwhile, as MPI's progress rule promises. 0 turns it off (tests; programs \
             that never rely on it).",
        )
        .kind(ParamKind::Bool),
        ParamInfo::new(
            MPI_FAULT,
            "",
            "MPI only, tests: make one set-up stage fail on one MPI_COMM_WORLD rank, STAGE:RANK with STAGE one of \
             open (mapping the node's segment), join (joining it), internode (the internode set-up). Every rank \
             must then fall back to MPI_Barrier together.",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_are_the_backends_names() {
        let names: Vec<&str> = backends().iter().map(|b| b.name()).collect();
        assert_eq!(names, BACKEND_NAMES);
    }

    #[test]
    fn every_known_parameter_is_checked_against_its_kind() {
        let cases = [
            ("BARRIER_TIMEOUT", "abc"),
            ("BARRIER_GBA_DISABLE", "maybe"),
            ("BARRIER_WAIT_POLICY", "bogus"),
            ("BARRIER_SPIN_COUNT", "-1"),
            ("BARRIER_YIELD_COUNT", "many"),
            ("BARRIER_BACKEND", "dissemination,nonesuch"),
            ("BARRIER_SW_ALGORITHM", "bubble"),
            ("BARRIER_TREE_ARITY", "1"),
            ("BARRIER_SW_TAIL_SPIN", "briefly"),
            ("BARRIER_SW_TAIL_SPIN", "2s"),
            ("BARRIER_SWITCH_WATCHDOG", "soon"),
            ("BARRIER_STALL_REPORT", "-3s"),
        ];
        for (name, value) in cases {
            let (i, err) = *check_all(&Params::defaults_only().set(name, value)).unwrap_err();
            assert_eq!(all_params()[i].name, name);
            let msg = err.to_string();
            assert!(msg.contains(name) || msg.contains("nonesuch"), "{name}={value}: {msg}");
        }
        let good = Params::defaults_only()
            .set("BARRIER_TIMEOUT", "2s")
            .set("BARRIER_WAIT_POLICY", "PARK")
            .set("BARRIER_SPIN_COUNT", "auto")
            .set("BARRIER_BACKEND", "gba, dissemination")
            .set("BARRIER_TREE_ARITY", "64")
            .set("BARRIER_SW_TAIL_SPIN", "20us");
        assert!(check_all(&good).is_ok());
    }
}
