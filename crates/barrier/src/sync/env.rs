//! The environment's wait settings for `Barrier::new` and `Team::new`.

/// The environment's wait settings for the barriers of this module, read once per barrier. A
/// value that does not parse is said on stderr, once per process and setting, with the value
/// used instead (the constructors return a barrier, as std's do, so they cannot fail): a
/// misspelt `BARRIER_TIMEOUT` must not leave a program believing it has a timeout.
#[derive(Debug)]
pub(crate) struct EnvWaits {
    pub policy: crate::wait::WaitPolicy,
    pub spin: Option<u32>,
    pub yields: Option<u32>,
    pub timeout: Option<std::time::Duration>,
    pub stall: Option<std::time::Duration>,
}

impl EnvWaits {
    /// For a barrier of `n` threads (`auto` parks when they outnumber this process's cores).
    pub fn read(n: usize) -> EnvWaits {
        Self::among(n, crate::sys::available_cores())
    }

    /// For threads of which `busy` run on `cores` cores (`auto` parks when `busy > cores`).
    pub fn among(busy: usize, cores: usize) -> EnvWaits {
        Self::from(&crate::params::Params::from_env(), busy, cores)
    }

    fn from(params: &crate::params::Params, busy: usize, cores: usize) -> EnvWaits {
        use crate::wait::WaitPolicy;
        let auto = WaitPolicy::auto(busy, cores);
        let policy = match params.get("BARRIER_WAIT_POLICY").map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("auto") => auto,
            Some("spin") => WaitPolicy::Spin,
            Some("park") => WaitPolicy::Park,
            Some(other) => {
                let instead = format!("auto ({auto})");
                bad_once("BARRIER_WAIT_POLICY", other, "one of auto, spin, park", &instead);
                auto
            }
        };
        let count = |name: &'static str| match params.parse::<u32>(name, 0, "a count") {
            // `auto` (the registry's default) keeps the policy's own count.
            Ok(v) => params.get(name).filter(|s| !s.trim().eq_ignore_ascii_case("auto")).map(|_| v),
            Err(_) => {
                bad_once(name, &params.get(name).unwrap_or_default(), "a count (0 to 4294967295)", "the default");
                None
            }
        };
        let (spin, yields) = (count("BARRIER_SPIN_COUNT"), count("BARRIER_YIELD_COUNT"));
        let duration = |name: &'static str, default: Option<std::time::Duration>, instead: &str| {
            params.duration(name).map(|d| if params.get(name).is_some() { d } else { default }).unwrap_or_else(|_| {
                bad_once(name, &params.get(name).unwrap_or_default(), "a duration like 30s, 500ms or none", instead);
                default
            })
        };
        let timeout = duration("BARRIER_TIMEOUT", None, "none (waits for ever)");
        let stall = duration("BARRIER_STALL_REPORT", Some(crate::params::DEFAULT_STALL_REPORT), "the default (30s)");
        EnvWaits { policy, spin, yields, timeout, stall }
    }
}

/// Says once per process and setting that `name`'s `value` is not `expected`, and what is used.
fn bad_once(name: &'static str, value: &str, expected: &str, instead: &str) {
    static SAID: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    if !said.contains(&name) {
        said.push(name);
        crate::text::say(&format!(
            "barrier::sync: {name}={value:?} is not {expected}; barriers of this process's threads use {instead}"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;
    use crate::wait::WaitPolicy;

    #[test]
    fn the_environment_s_wait_settings_are_read_and_bad_ones_fall_back() {
        let set = |pairs: &[(&str, &str)]| pairs.iter().fold(Params::defaults_only(), |p, (k, v)| p.set(*k, *v));
        let w = EnvWaits::from(
            &set(&[
                ("BARRIER_WAIT_POLICY", "park"),
                ("BARRIER_TIMEOUT", "2s"),
                ("BARRIER_SPIN_COUNT", "7"),
                ("BARRIER_YIELD_COUNT", "auto"),
                ("BARRIER_STALL_REPORT", "none"),
            ]),
            2,
            2,
        );
        assert_eq!(w.policy, WaitPolicy::Park);
        assert_eq!(w.timeout, Some(std::time::Duration::from_secs(2)));
        assert_eq!((w.spin, w.yields, w.stall), (Some(7), None, None));
        let w = EnvWaits::from(
            &set(&[("BARRIER_WAIT_POLICY", "yield"), ("BARRIER_TIMEOUT", "soon"), ("BARRIER_SPIN_COUNT", "-1")]),
            1,
            2,
        );
        assert_eq!(w.policy, WaitPolicy::auto(1, 2));
        assert_eq!((w.timeout, w.spin), (None, None));
        assert_eq!(w.stall, Some(crate::params::DEFAULT_STALL_REPORT));
    }

    /// `auto` follows the threads on the machine, not the team's own: 2 members among 8 busy
    /// threads on 2 cores park; among 2 they spin. A set policy holds either way.
    #[test]
    fn auto_follows_the_busy_threads_on_the_cores() {
        let none = Params::defaults_only();
        assert_eq!(EnvWaits::from(&none, 8, 2).policy, WaitPolicy::Park);
        assert_eq!(EnvWaits::from(&none, 2, 2).policy, WaitPolicy::Spin);
        let spin = none.set("BARRIER_WAIT_POLICY", "spin");
        assert_eq!(EnvWaits::from(&spin, 8, 2).policy, WaitPolicy::Spin);
    }
}
