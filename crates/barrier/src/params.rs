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

/// One documented parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    /// Full name, e.g. `BARRIER_TIMEOUT`.
    pub name: String,
    /// Default value as text.
    pub default: String,
    /// What it does.
    pub description: String,
}

impl ParamInfo {
    /// A new parameter description.
    pub fn new(name: impl Into<String>, default: impl Into<String>, description: impl Into<String>) -> Self {
        ParamInfo { name: name.into(), default: default.into(), description: description.into() }
    }
}

/// Communicator-wide parameters (not tied to one backend).
pub fn core_params() -> Vec<ParamInfo> {
    vec![
        ParamInfo::new(
            "BARRIER_BACKEND",
            "",
            "Comma-separated backend names: only these are tried, in this order, and if none can run \
             the communicator fails with every reason (explicit choices fail loudly). Empty: all \
             backends by priority, falling back automatically.",
        ),
        ParamInfo::new(
            "BARRIER_TIMEOUT",
            "0",
            "Give up on a barrier after this long and report the ranks that have not arrived \
             (e.g. 30s, 500ms, 2.5; 0 or none: wait for ever).",
        ),
        ParamInfo::new(
            "BARRIER_WAIT_POLICY",
            "auto",
            "spin (spin, then yield), park (spin briefly, yield, then sleep on a futex), or auto \
             (park when the job's ranks outnumber the cores).",
        ),
        ParamInfo::new(
            "BARRIER_SPIN_COUNT",
            "auto",
            "Busy-wait rounds before yielding (auto: 2000 with spin, 64 with park).",
        ),
        ParamInfo::new("BARRIER_YIELD_COUNT", "auto", "Yields before parking with the park policy (auto: 4)."),
        ParamInfo::new(
            "BARRIER_SHM_POOL_BYTES",
            crate::shm::DEFAULT_POOL_BYTES.to_string(),
            "Bytes of the job segment for communicators and shared windows beyond the world (sparse).",
        ),
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
        ),
        ParamInfo::new(format!("BARRIER_{up}_DISABLE"), "0", format!("1: never use the {name} backend.")),
        ParamInfo::new(
            format!("BARRIER_{up}_MIN_COMM_SIZE"),
            "1",
            format!("The {name} backend declines communicators smaller than this."),
        ),
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
