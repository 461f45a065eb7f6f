//! The registry: every backend this process knows, in registry order (the built-in ones, then
//! those the program registered with [`register_backend`]), and the catalogue of every
//! parameter (the core ones, each backend's, and those of the layers above the core that this
//! process registered with [`register_layer`]: barrier-mpi's, barrier-openshmem's). It sits above
//! the backends (it names them) and beneath the selector, the communicator and the tools, which
//! read it; `params.rs` below it is only the mechanism (values, kinds, checks). The core names
//! no setting of a layer above it: each layer declares its own and registers them.
//!
//! Registration is explicit and happens in one place, like `tracing`'s global subscriber: a
//! program (or a vendor crate on its behalf) calls [`register_backend`] before it creates the
//! communicators the backend should serve. A name may be registered once; the registry holds
//! at most [`MAX_BACKENDS`]. Ranks agree on backends by name while a communicator is created
//! (see `selector.rs`), so a rank that did not register a backend makes every rank decline it.

use std::sync::RwLock;

use crate::backend::Backend;
use crate::backends::dissemination::Software;
use crate::backends::hierarchical::Hierarchical;
use crate::error::Error;
use crate::params::{ParamInfo, ParamKind, Params, REBALANCE};

/// The software backend (the selector enables it statically: see `engine.rs`).
pub(crate) static SOFTWARE: Software = Software;
static HIERARCHICAL: Hierarchical = Hierarchical;

/// The backends this process registered, in the order they were registered.
static REGISTERED: RwLock<Vec<&'static dyn Backend>> = RwLock::new(Vec::new());

/// The layers above the core whose settings this process registered, in the order they were
/// registered: a layer's name and its catalogue.
static LAYERS: RwLock<Vec<(&'static str, Catalogue)>> = RwLock::new(Vec::new());

/// A layer's settings, as [`register_layer`] takes them.
pub type Catalogue = fn() -> Vec<ParamInfo>;

/// The most backends a process can know, the built-in ones included: the selector agrees on
/// them by name in one exchange line (a word each) and orders them in 4-bit fields.
pub const MAX_BACKENDS: usize = {
    // One word of the exchange line is the control epoch, one `BARRIER_BACKEND`'s hash.
    let words = crate::region::EXCHANGE_WORDS - 2;
    if words < 15 {
        words
    } else {
        15
    }
};

/// Names that are not backends of the core registry but mean something in `BARRIER_BACKEND`
/// elsewhere (barrier-mpi's `mpi`, its `MPI_Barrier` fallback).
const RESERVED_NAMES: &[&str] = &["mpi"];

/// The built-in backends, in registry order.
fn builtin() -> [&'static dyn Backend; 5] {
    [
        &crate::backends::a64fx::A64FX,
        &crate::backends::offload::GBA,
        &crate::backends::offload::SWITCH,
        &HIERARCHICAL,
        &SOFTWARE,
    ]
}

/// Every backend this process knows, in registry order: the built-in ones, then the registered
/// ones in the order they were registered.
pub fn backends() -> Vec<&'static dyn Backend> {
    let registered = REGISTERED.read().unwrap_or_else(|p| p.into_inner());
    builtin().into_iter().chain(registered.iter().copied()).collect()
}

/// The names of [`backends`], for the `BARRIER_BACKEND` check.
pub fn backend_names() -> Vec<&'static str> {
    backends().iter().map(|b| b.name()).collect()
}

/// Registers a backend written outside this crate, for every communicator this process creates
/// afterwards (those that exist keep their module). The selector then treats it like the
/// built-in ones: it is asked by priority (`BARRIER_<NAME>_PRIORITY`, its
/// [`default_priority`](Backend::default_priority) otherwise), may decline with a reason,
/// is agreed on by name across ranks (every rank must register it, or every rank declines it),
/// falls back like the others, can be forced with `BARRIER_BACKEND=<name>`, and its parameters
/// (the standard three and [`Backend::params`]) are checked and listed with every other.
/// [`Backend`] says what an implementation must guarantee.
///
/// The name must be new, of lowercase ASCII letters, digits and `_`, and not `mpi`; a
/// process holds at most [`MAX_BACKENDS`] backends. Registering a name twice is an error
/// (the first registration stays), so two crates cannot silently replace each other.
///
/// ```
/// use barrier::backend::{Backend, Decline, EnableContext, Module, QueryContext};
///
/// #[derive(Debug)]
/// struct Nothing;
///
/// impl Backend for Nothing {
///     fn name(&self) -> &'static str { "nothing" }
///     fn default_priority(&self) -> i32 { 0 }
///     fn description(&self) -> &'static str { "declines every communicator (an example)" }
///     fn query(&self, _: &QueryContext<'_>) -> Result<(), Decline> {
///         Err(Decline::new("an example that never runs"))
///     }
///     fn enable(&self, _: &EnableContext<'_>) -> Result<Box<dyn Module>, Decline> {
///         Err(Decline::new("an example that never runs"))
///     }
/// }
///
/// barrier::register_backend(Nothing).unwrap();
/// assert!(barrier::backends().iter().any(|b| b.name() == "nothing"));
/// assert!(barrier::register_backend(Nothing).is_err()); // a name is registered once
/// // Every communicator asks it and records why it declined.
/// let report = barrier::threads::run(2, |world| world.selection().to_string()).unwrap();
/// assert!(report[0].contains("nothing") && report[0].contains("never runs"));
/// ```
pub fn register_backend(backend: impl Backend + 'static) -> Result<(), Error> {
    let name = backend.name();
    let refuse = |why: String| Err(Error::InvalidArgument(format!("cannot register the backend {name:?}: {why}")));
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        return refuse(
            "a name is lowercase ASCII letters, digits and `_` (it makes BARRIER_<NAME>_* parameters)".into(),
        );
    }
    if RESERVED_NAMES.contains(&name) {
        return refuse(format!("`{name}` is reserved (barrier-mpi's MPI_Barrier path)"));
    }
    let mut registered = REGISTERED.write().unwrap_or_else(|p| p.into_inner());
    if builtin().iter().chain(registered.iter()).any(|b| b.name() == name) {
        return refuse("a backend of that name is already registered (a name is registered once)".into());
    }
    if builtin().len() + registered.len() >= MAX_BACKENDS {
        return refuse(format!("this process already knows {MAX_BACKENDS} backends, the most it can hold"));
    }
    // A backend lives as long as the process: communicators hold `&'static` references to it.
    registered.push(Box::leak(Box::new(backend)));
    Ok(())
}

/// Registers the settings of a layer above the core, named `layer` (barrier-mpi registers
/// `"mpi"`, barrier-openshmem `"openshmem"`): from then on every communicator checks them and
/// [`all_params`] (and with it `barrier info`) lists them, after the built-in backends', the
/// layers in name order. A layer registers its settings itself, before it reads them or makes a
/// communicator; a second registration of the same name does nothing (the first catalogue
/// stays). Every process of a job registers the same layers (it runs the same code), so a
/// parameter has the same index everywhere.
///
/// ```
/// use barrier::ParamInfo;
/// fn mine() -> Vec<ParamInfo> {
///     vec![ParamInfo::new("BARRIER_MINE_DEPTH", "1", "How deep my layer's tree is.")]
/// }
/// barrier::registry::register_layer("mine", mine);
/// barrier::registry::register_layer("mine", mine); // once is enough
/// let all = barrier::registry::all_params();
/// assert_eq!(all.iter().filter(|p| p.name == "BARRIER_MINE_DEPTH").count(), 1);
/// ```
pub fn register_layer(layer: &'static str, params: Catalogue) {
    let mut layers = LAYERS.write().unwrap_or_else(|p| p.into_inner());
    // Kept in name order, whatever the order of registration: a parameter's index must be the
    // same in every process of a job.
    if let Err(at) = layers.binary_search_by(|(name, _)| (*name).cmp(layer)) {
        layers.insert(at, (layer, params));
    }
}

/// Checks every parameter this build knows ([`all_params`]); the first bad value, with its
/// index in that list.
pub fn check_all(params: &Params) -> std::result::Result<(), Box<(usize, Error)>> {
    params.check_each(&all_params())
}

/// [`check_all`], except that `BARRIER_BACKEND` may name backends this process has not
/// registered: communicators agree on backends by name (a name some rank lacks is declined
/// together, one no rank has is refused together), and the launcher starts programs that
/// register their own.
pub fn check_all_but_backend_names(params: &Params) -> std::result::Result<(), Box<(usize, Error)>> {
    let mut infos = all_params();
    for info in &mut infos {
        if matches!(info.kind, ParamKind::BackendList(_)) {
            info.kind = ParamKind::AnyBackendList;
        }
    }
    params.check_each(&infos)
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
        .kind(ParamKind::BackendList(backend_names())),
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

/// Every parameter this process knows: the core ones, then each built-in backend's standard
/// three and its own, then each registered layer's ([`register_layer`]), then each registered
/// backend's (`barrier info` lists them in this order).
pub fn all_params() -> Vec<ParamInfo> {
    // The built-in backends' and the layers' parameters come before the registered backends',
    // so that the index of every built-in parameter is the same in every process (ranks name a
    // bad value to each other by its index).
    let mut all = core_params();
    let (builtin_count, every) = (builtin().len(), backends());
    for b in &every[..builtin_count] {
        all.extend(backend_params(b.name(), b.default_priority()));
        all.extend(b.params());
    }
    for (_, params) in LAYERS.read().unwrap_or_else(|p| p.into_inner()).iter() {
        all.extend(params());
    }
    for b in &every[builtin_count..] {
        all.extend(backend_params(b.name(), b.default_priority()));
        all.extend(b.params());
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_backends_come_first_in_registry_order() {
        let names = backend_names();
        assert_eq!(names[..5], ["a64fx", "gba", "switch", "hierarchical", "dissemination"]);
    }

    #[derive(Debug)]
    struct Named(&'static str);

    impl Backend for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        fn default_priority(&self) -> i32 {
            0
        }
        fn description(&self) -> &'static str {
            "a name for the registration tests"
        }
        fn query(&self, _: &crate::backend::QueryContext<'_>) -> Result<(), crate::backend::Decline> {
            Err(crate::backend::Decline::new("test"))
        }
        fn enable(
            &self,
            _: &crate::backend::EnableContext<'_>,
        ) -> Result<Box<dyn crate::backend::Module>, crate::backend::Decline> {
            Err(crate::backend::Decline::new("test"))
        }
    }

    #[test]
    fn registration_refuses_bad_taken_and_reserved_names() {
        for (name, why) in [
            ("", "lowercase"),
            ("Upper", "lowercase"),
            ("with-dash", "lowercase"),
            ("mpi", "reserved"),
            ("dissemination", "already registered"),
            ("gba", "already registered"),
        ] {
            let err = register_backend(Named(name)).unwrap_err().to_string();
            assert!(err.contains(why), "{name:?}: {err}");
        }
        register_backend(Named("registry_test_once")).unwrap();
        let err = register_backend(Named("registry_test_once")).unwrap_err().to_string();
        assert!(err.contains("already registered"), "{err}");
        assert!(backend_names().contains(&"registry_test_once"));
        // Its parameters join the catalogue, and BARRIER_BACKEND accepts its name.
        assert!(all_params().iter().any(|p| p.name == "BARRIER_REGISTRY_TEST_ONCE_PRIORITY"));
        assert!(check_all(&Params::defaults_only().set("BARRIER_BACKEND", "registry_test_once")).is_ok());
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

    /// Issue 40 item 8: a list of only commas is not a forced choice of nothing, and a list
    /// longer than the selector can agree on is refused rather than cut short silently, with
    /// names checked or not.
    #[test]
    fn a_backend_list_names_one_to_fifteen_backends() {
        let sixteen = vec!["dissemination"; 16].join(",");
        for value in [",,,", " , ", sixteen.as_str()] {
            let p = Params::defaults_only().set("BARRIER_BACKEND", value);
            for (i, err) in [*check_all(&p).unwrap_err(), *check_all_but_backend_names(&p).unwrap_err()] {
                assert_eq!(all_params()[i].name, "BARRIER_BACKEND");
                let msg = err.to_string();
                assert!(msg.contains("names none") || msg.contains("at most 15 backend names"), "{value}: {msg}");
            }
        }
        let fifteen = vec!["dissemination"; 15].join(",");
        assert!(check_all(&Params::defaults_only().set("BARRIER_BACKEND", fifteen)).is_ok());
        assert!(check_all_but_backend_names(&Params::defaults_only().set("BARRIER_BACKEND", "mine,yours")).is_ok());
    }
}
