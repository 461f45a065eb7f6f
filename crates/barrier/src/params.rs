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
#[non_exhaustive]
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
    /// A comma-separated list of these backend names (the registry's, registered ones included).
    BackendList(Vec<&'static str>),
    /// A comma-separated list of backend names, of any names (a program may register its own
    /// on some ranks: the communicator agrees on names), checked for its shape only.
    AnyBackendList,
}

/// The most backend names `BARRIER_BACKEND` may list (the selector agrees on an order of at
/// most this many).
pub const MAX_LISTED_BACKENDS: usize = 15;

/// The names of a `BARRIER_BACKEND` value, or why it is not a list of names: one that names no
/// backend (only commas) or more than [`MAX_LISTED_BACKENDS`].
pub fn backend_list_names(text: &str) -> std::result::Result<Vec<&str>, String> {
    let names: Vec<&str> = text.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    if names.is_empty() && !text.trim().is_empty() {
        return Err("a list of backend names, but this names none (only commas); leave it unset to let the \
                    selector choose"
            .into());
    }
    if names.len() > MAX_LISTED_BACKENDS {
        return Err(format!("at most {MAX_LISTED_BACKENDS} backend names, but this lists {}; name fewer", names.len()));
    }
    Ok(names)
}

impl ParamKind {
    /// What the kind accepts, in words.
    pub fn expected(&self) -> String {
        match self {
            ParamKind::Text => "any text".into(),
            ParamKind::Bool => "1 or 0 (true/false, yes/no, on/off)".into(),
            ParamKind::Int { min, max } => format!("an integer from {min} to {max}, or auto"),
            ParamKind::Duration => {
                "a duration like 30s, 500ms, 100us, 2m or 2.5 (seconds), at most a year (31536000s); 0 or none to disable".into()
            }
            ParamKind::DurationAtMost(max) => {
                format!("a duration of at most {max:?} (like 500us); 0 or none to disable")
            }
            ParamKind::Choice(words) => format!("one of {}", words.join(", ")),
            ParamKind::BackendList(known) => format!("comma-separated backend names from {}", known.join(", ")),
            ParamKind::AnyBackendList => format!("comma-separated backend names (at most {MAX_LISTED_BACKENDS})"),
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

/// Parameter values: code overrides, then (optionally) the environment.
///
/// Each value remembers how it was given ([`Params::source`]), so that an error names the
/// setting the way the user gave it: the variable, a builder's method, an MCA parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    overrides: BTreeMap<String, String>,
    /// How an override was given, where not by [`Params::set`] (see [`Params::set_as`]).
    sources: BTreeMap<String, String>,
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
        Params { overrides: BTreeMap::new(), sources: BTreeMap::new(), use_env: true }
    }

    /// Defaults only: the environment is ignored (tests that must not see the caller's env).
    pub fn defaults_only() -> Self {
        Params { overrides: BTreeMap::new(), sources: BTreeMap::new(), use_env: false }
    }

    /// Sets `name` to `value`, overriding the environment. Errors name it as given in code
    /// (`Params::set("BARRIER_TIMEOUT", ..)`); see [`Params::set_as`] for an API of one's own.
    pub fn set(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        self.sources.remove(&name);
        self.overrides.insert(name, value.into());
        self
    }

    /// [`Params::set`], with the words an error uses for where the value came from: the
    /// method or option the user called (`"FastBarrierSettings::timeout"`, `"MCA parameter
    /// coll_fastbar_timeout"`).
    pub fn set_as(mut self, name: impl Into<String>, value: impl Into<String>, source: impl Into<String>) -> Self {
        let name = name.into();
        self.sources.insert(name.clone(), source.into());
        self.overrides.insert(name, value.into());
        self
    }

    /// Sets `name` to a value derived from the one it has (a list with names removed, a value
    /// agreed with other ranks), keeping its [`Params::source`]: the user gave it, not this code.
    pub fn derive(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        let source = self.source(&name);
        self.set_as(name, value, source)
    }

    /// Where `name`'s value comes from, in the words an error should use: the variable's name
    /// when it comes from the environment or is unset (the variable is how to change it), else
    /// how it was set in code.
    pub fn source(&self, name: &str) -> String {
        match (self.sources.get(name), self.overrides.contains_key(name)) {
            (Some(source), _) => source.clone(),
            (None, true) => format!("Params::set(\"{name}\", ..)"),
            (None, false) => name.to_string(),
        }
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
                given_in: self.source(name),
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
                    given_in: self.source(name),
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
                given_in: self.source(name),
                name: name.into(),
                value: v.clone(),
                expected: "a duration like 30s, 500ms, 100us, 2m or 2.5 (seconds), at most a year (31536000s); 0 or none to disable".into(),
            }),
        }
    }

    /// Checks the value of `info` (if set) against its kind.
    pub fn check(&self, info: &ParamInfo) -> Result<()> {
        let Some(value) = self.get(&info.name) else { return Ok(()) };
        let bad = || Error::InvalidParam {
            given_in: self.source(&info.name),
            name: info.name.clone(),
            value: value.clone(),
            expected: info.kind.expected(),
        };
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
            ParamKind::BackendList(known) => {
                let names = backend_list_names(text).map_err(|expected| Error::InvalidParam {
                    given_in: self.source(&info.name),
                    name: info.name.clone(),
                    value: value.clone(),
                    expected,
                })?;
                for name in names {
                    if !known.iter().any(|k| k.eq_ignore_ascii_case(name)) {
                        return Err(Error::UnknownBackend {
                            name: name.into(),
                            given_in: self.source(&info.name),
                            known: known.join(", "),
                        });
                    }
                }
                true
            }
            ParamKind::AnyBackendList => {
                backend_list_names(text).map_err(|expected| Error::InvalidParam {
                    given_in: self.source(&info.name),
                    name: info.name.clone(),
                    value: value.clone(),
                    expected,
                })?;
                true
            }
        };
        if ok {
            Ok(())
        } else {
            Err(bad())
        }
    }

    /// Checks these parameters (every one this build knows: `registry::check_all`); the first
    /// bad value, with its index in `infos`.
    pub fn check_each(&self, infos: &[ParamInfo]) -> std::result::Result<(), Box<(usize, Error)>> {
        for (i, info) in infos.iter().enumerate() {
            self.check(info).map_err(|e| Box::new((i, e)))?;
        }
        Ok(())
    }

    /// The priority, disable and min-size settings of backend `name`.
    /// Whether the backend called `name` is turned off (`BARRIER_<NAME>_DISABLE`).
    pub fn backend_disabled(&self, name: &str) -> Result<bool> {
        self.flag(&format!("BARRIER_{}_DISABLE", name.to_ascii_uppercase()))
    }

    pub fn backend_settings(&self, name: &str, default_priority: i32) -> Result<BackendSettings> {
        let up = name.to_ascii_uppercase();
        Ok(BackendSettings {
            priority: self.parse(&format!("BARRIER_{up}_PRIORITY"), default_priority, "an integer")?,
            disabled: self.backend_disabled(name)?,
            min_comm_size: self.parse(&format!("BARRIER_{up}_MIN_COMM_SIZE"), 1usize, "a non-negative integer")?,
        })
    }
}

/// The stall report's default delay (`BARRIER_STALL_REPORT`).
pub const DEFAULT_STALL_REPORT: Duration = Duration::from_secs(30);

/// `BARRIER_SINGLETON`: `init()` makes a world of one in each process of an MPI launcher's job.
pub const SINGLETON: &str = "BARRIER_SINGLETON";
/// `BARRIER_REBALANCE`: see `registry::core_params`.
pub const REBALANCE: &str = "BARRIER_REBALANCE";

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
        return Some(None);
    }
    // Past a year it is a mistake (and near u64::MAX seconds, `Instant + it` overflows).
    Duration::try_from_secs_f64(secs).ok().filter(|d| *d <= MAX_DURATION).map(Some)
}

/// The longest duration a setting takes: a year.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

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
