//! Parameters, in the manner of Open MPI's MCA parameters.
//!
//! Every knob has a name `BARRIER_*`, a default and a description (`barrier info` prints them
//! all). A value comes from, in order: an override set in code ([`Params::set`], for thread-mode
//! jobs and tests), the environment (the launcher passes its environment to every rank), the
//! default. Backend parameters follow one pattern: `BARRIER_<NAME>_PRIORITY`,
//! `BARRIER_<NAME>_DISABLE`, `BARRIER_<NAME>_MIN_COMM_SIZE`, plus the backend's own.
//!
//! Values that must be the same on every rank (wait policy, algorithm) are agreed when a
//! communicator is created: rank 0's value wins, so a rank with a stray environment cannot
//! make the job inconsistent.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};

/// What values a parameter accepts. Every value is checked against its kind when a
/// communicator is created, on every rank, and the outcome is agreed: a bad value on one rank
/// fails the creation on all of them instead of leaving the others waiting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// Free text (a path).
    Text,
    /// 1/0, true/false, yes/no, on/off.
    Bool,
    /// An integer in `min..=max`; `auto` means the default.
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A duration (`30s`, `500ms`, `2.5`); `0` or `none` disables.
    Duration,
    /// A duration of at most this long; `0` or `none` disables.
    DurationAtMost(std::time::Duration),
    /// One of these words (case-insensitive).
    Choice(&'static [&'static str]),
    /// A comma-separated list of backend names.
    BackendList,
}

impl ParamKind {
    /// What the kind accepts, in words.
    pub fn expected(&self) -> String {
        match self {
            ParamKind::Text => "any text".into(),
            ParamKind::Bool => "1 or 0 (true/false, yes/no, on/off)".into(),
            ParamKind::Int { min, max } => format!("an integer from {min} to {max}, or auto"),
            ParamKind::Duration => {
                "a duration like 30s, 500ms, 100us, 2m or 2.5 (seconds); 0 or none to disable".into()
            }
            ParamKind::DurationAtMost(max) => {
                format!("a duration of at most {max:?} (like 500us); 0 or none to disable")
            }
            ParamKind::Choice(words) => format!("one of {}", words.join(", ")),
            ParamKind::BackendList => "comma-separated backend names".into(),
        }
    }
}

/// One documented parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    /// Full name, e.g. `BARRIER_TIMEOUT`.
    pub name: String,
    /// Default value as text.
    pub default: String,
    /// What it does.
    pub description: String,
    /// What it accepts.
    pub kind: ParamKind,
}

impl ParamInfo {
    /// A new free-text parameter description (see [`ParamInfo::kind`] to restrict it).
    pub fn new(name: impl Into<String>, default: impl Into<String>, description: impl Into<String>) -> Self {
        ParamInfo { name: name.into(), default: default.into(), description: description.into(), kind: ParamKind::Text }
    }

    /// The same parameter, accepting only values of `kind`.
    pub fn kind(mut self, kind: ParamKind) -> Self {
        self.kind = kind;
        self
    }
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
        .kind(ParamKind::BackendList),
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

/// Parameter values: code overrides, then (optionally) the environment.
#[derive(Clone, Debug)]
pub struct Params {
    overrides: BTreeMap<String, String>,
    use_env: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self::from_env()
    }
}

impl Params {
    /// Values from the environment (and any later overrides).
    pub fn from_env() -> Self {
        Params { overrides: BTreeMap::new(), use_env: true }
    }

    /// Defaults only: the environment is ignored (tests that must not see the caller's env).
    pub fn defaults_only() -> Self {
        Params { overrides: BTreeMap::new(), use_env: false }
    }

    /// Sets `name` to `value`, overriding the environment.
    pub fn set(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.overrides.insert(name.into(), value.into());
        self
    }

    /// The raw value, if set anywhere. Empty strings count as unset.
    pub fn get(&self, name: &str) -> Option<String> {
        let v = match self.overrides.get(name) {
            Some(v) => Some(v.clone()),
            None if self.use_env => std::env::var(name).ok(),
            None => None,
        };
        v.filter(|s| !s.trim().is_empty())
    }

    /// Parses `name` as a `T`, or returns `default` when unset or `auto`.
    pub fn parse<T: FromStr>(&self, name: &str, default: T, expected: &str) -> Result<T> {
        match self.get(name) {
            None => Ok(default),
            Some(v) if v.trim().eq_ignore_ascii_case("auto") => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| Error::InvalidParam {
                name: name.into(),
                value: v,
                expected: expected.into(),
            }),
        }
    }

    /// A boolean: 1/0, true/false, yes/no, on/off.
    /// [`Params::flag`] with `default` when the parameter is not set.
    pub fn flag_or(&self, name: &str, default: bool) -> Result<bool> {
        match self.get(name) {
            None => Ok(default),
            Some(_) => self.flag(name),
        }
    }

    /// `BARRIER_STALL_REPORT`: [`DEFAULT_STALL_REPORT`] when unset (or unreadable: a bad value
    /// is refused by the settings check), `None` for 0.
    pub fn stall_report(&self) -> Option<Duration> {
        match self.get("BARRIER_STALL_REPORT") {
            None => Some(DEFAULT_STALL_REPORT),
            Some(_) => self.duration("BARRIER_STALL_REPORT").unwrap_or(Some(DEFAULT_STALL_REPORT)),
        }
    }

    pub fn flag(&self, name: &str) -> Result<bool> {
        match self.get(name) {
            None => Ok(false),
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(Error::InvalidParam {
                    name: name.into(),
                    value: v,
                    expected: "1 or 0 (true/false, yes/no, on/off)".into(),
                }),
            },
        }
    }

    /// A duration such as `30s`, `500ms`, `100us`, `2m` or plain seconds `2.5`; `0`/`none` is None.
    pub fn duration(&self, name: &str) -> Result<Option<Duration>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => parse_duration(&v).ok_or_else(|| Error::InvalidParam {
                name: name.into(),
                value: v.clone(),
                expected: "a duration like 30s, 500ms, 100us, 2m or 2.5 (seconds); 0 or none to disable".into(),
            }),
        }
    }

    /// Checks the value of `info` (if set) against its kind.
    pub fn check(&self, info: &ParamInfo) -> Result<()> {
        let Some(value) = self.get(&info.name) else { return Ok(()) };
        let bad = || Error::InvalidParam { name: info.name.clone(), value: value.clone(), expected: info.kind.expected() };
        let text = value.trim();
        let ok = match &info.kind {
            ParamKind::Text => true,
            ParamKind::Bool => self.flag(&info.name).is_ok(),
            ParamKind::Int { min, max } => {
                text.eq_ignore_ascii_case("auto") || text.parse::<i64>().is_ok_and(|v| (*min..=*max).contains(&v))
            }
            ParamKind::Duration => self.duration(&info.name).is_ok(),
            ParamKind::DurationAtMost(max) => self.duration(&info.name).is_ok_and(|d| d.is_none_or(|d| d <= *max)),
            ParamKind::Choice(words) => words.iter().any(|w| w.eq_ignore_ascii_case(text)),
            ParamKind::BackendList => {
                let known: Vec<&str> = crate::selector::backends().iter().map(|b| b.name()).collect();
                for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    if !known.iter().any(|k| k.eq_ignore_ascii_case(name)) {
                        return Err(Error::UnknownBackend { name: name.into(), known: known.join(", ") });
                    }
                }
                true
            }
        };
        if ok {
            Ok(())
        } else {
            Err(bad())
        }
    }

    /// Checks every parameter this build knows ([`all_params`]); the first bad value, with its
    /// index in that list.
    pub fn check_all(&self) -> std::result::Result<(), Box<(usize, Error)>> {
        for (i, info) in all_params().iter().enumerate() {
            self.check(info).map_err(|e| Box::new((i, e)))?;
        }
        Ok(())
    }

    /// The priority, disable and min-size settings of backend `name`.
    pub fn backend_settings(&self, name: &str, default_priority: i32) -> Result<BackendSettings> {
        let up = name.to_ascii_uppercase();
        Ok(BackendSettings {
            priority: self.parse(&format!("BARRIER_{up}_PRIORITY"), default_priority, "an integer")?,
            disabled: self.flag(&format!("BARRIER_{up}_DISABLE"))?,
            min_comm_size: self.parse(&format!("BARRIER_{up}_MIN_COMM_SIZE"), 1usize, "a non-negative integer")?,
        })
    }
}

/// Every parameter this build knows: the core ones, then each backend's standard three and its
/// own, in registry order (`barrier info` lists them in this order).
pub fn all_params() -> Vec<ParamInfo> {
    let mut all = core_params();
    for b in crate::selector::backends() {
        all.extend(backend_params(b.name(), b.default_priority()));
        all.extend(b.params());
    }
    all.extend(mpi_params());
    all
}

/// The stall report's default delay (`BARRIER_STALL_REPORT`).
pub const DEFAULT_STALL_REPORT: Duration = Duration::from_secs(30);

/// `BARRIER_REBALANCE`: see [`core_params`].
pub const REBALANCE: &str = "BARRIER_REBALANCE";
/// `BARRIER_MPI_FAULT`: see [`mpi_params`].
pub const MPI_FAULT: &str = "BARRIER_MPI_FAULT";
/// `BARRIER_MPI_NODE_BLOCK`: see [`mpi_params`].
pub const MPI_NODE_BLOCK: &str = "BARRIER_MPI_NODE_BLOCK";
/// `BARRIER_MPI_PROGRESS`: see [`mpi_params`].
pub const MPI_PROGRESS: &str = "BARRIER_MPI_PROGRESS";

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

/// A backend's selection settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendSettings {
    /// Higher wins.
    pub priority: i32,
    /// Never use.
    pub disabled: bool,
    /// Decline smaller communicators.
    pub min_comm_size: usize,
}

fn parse_duration(text: &str) -> Option<Option<Duration>> {
    let t = text.trim().to_ascii_lowercase();
    if t == "none" || t == "off" {
        return Some(None);
    }
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("ns") {
        (n, 1e-9)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t.as_str(), 1.0)
    };
    let v: f64 = num.trim().parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    let secs = v * scale;
    if secs == 0.0 {
        Some(None)
    } else {
        Some(Some(Duration::from_secs_f64(secs)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        let p = Params::defaults_only()
            .set("A", "30s")
            .set("B", "500ms")
            .set("C", "2.5")
            .set("D", "0")
            .set("E", "soon")
            .set("F", "2m");
        assert_eq!(p.duration("A").unwrap(), Some(Duration::from_secs(30)));
        assert_eq!(p.duration("B").unwrap(), Some(Duration::from_millis(500)));
        assert_eq!(p.duration("C").unwrap(), Some(Duration::from_millis(2500)));
        assert_eq!(p.duration("D").unwrap(), None);
        assert_eq!(p.duration("F").unwrap(), Some(Duration::from_secs(120)));
        let err = p.duration("E").unwrap_err().to_string();
        assert!(err.contains("BARRIER") || err.contains("E"), "{err}");
        assert!(err.contains("30s"), "error should say what is accepted: {err}");
    }

    #[test]
    fn auto_means_the_default() {
        let p = Params::defaults_only().set("BARRIER_SPIN_COUNT", "auto").set("X", "12").set("Y", "lots");
        assert_eq!(p.parse("BARRIER_SPIN_COUNT", 7u32, "a number").unwrap(), 7);
        assert_eq!(p.parse("X", 7u32, "a number").unwrap(), 12);
        let e = p.parse("Y", 7u32, "a non-negative integer").unwrap_err().to_string();
        assert!(e.contains("\"lots\"") && e.contains("Y") && e.contains("non-negative integer"), "{e}");
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
            let (i, err) = *Params::defaults_only().set(name, value).check_all().unwrap_err();
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
        assert!(good.check_all().is_ok());
    }

    #[test]
    fn backend_settings_follow_the_naming_pattern() {
        let p = Params::defaults_only()
            .set("BARRIER_FOO_PRIORITY", "7")
            .set("BARRIER_FOO_DISABLE", "yes")
            .set("BARRIER_FOO_MIN_COMM_SIZE", "4");
        let s = p.backend_settings("foo", 1).unwrap();
        assert_eq!(s, BackendSettings { priority: 7, disabled: true, min_comm_size: 4 });
        let bad = Params::defaults_only().set("BARRIER_FOO_DISABLE", "maybe");
        assert!(bad.backend_settings("foo", 1).is_err());
    }
}
