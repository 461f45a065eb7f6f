//! What several commands check before they start anything: the settings in the environment
//! (refused as every rank would refuse them; unknown names warned about) and `--emulate`.

use std::process::ExitCode;

/// Checks what every rank would check at `init()`, before anything starts: the launcher's
/// environment (ranks inherit it) and `--timeout`.
/// `BARRIER_*` names that are not parameters but are still ours: what the launcher passes to
/// the ranks, and the emulated A64FX node's shape and debugging switches.
const OTHER_NAMES: &[&str] = &[
    barrier::ENV_SHM_FD,
    barrier::ENV_RANK,
    barrier::ENV_SIZE,
    barrier::ENV_NODES,
    barrier::ENV_LIFELINE_FD,
    "BARRIER_A64FX_EMU_CMGS",
    "BARRIER_A64FX_EMU_PES",
    "BARRIER_A64FX_SYSFS",
    "BARRIER_HIER_DEBUG",
];

/// One warning per `BARRIER_*` variable of the environment that no setting of this build
/// reads (a misspelt one would otherwise be ignored without a word), with the nearest name.
pub(super) fn warn_unknown_settings(who: &str) {
    let mut known: Vec<String> = barrier::registry::all_params().into_iter().map(|p| p.name).collect();
    known.extend(OTHER_NAMES.iter().map(|s| s.to_string()));
    known.extend(["SWITCH", "GBA", "A64FX"].iter().map(|k| format!("BARRIER_{k}_DEVICE_PATH")));
    for (name, _) in std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v))) {
        if !name.starts_with("BARRIER_") || known.contains(&name) {
            continue;
        }
        let nearest = known.iter().min_by_key(|k| edit_distance(&name, k)).cloned().unwrap_or_default();
        eprintln!(
            "{who}: warning: {name} is not a setting this build reads, and is ignored unless a backend the \
             program registers reads it (did you mean {nearest}? `barrier info` lists every setting)"
        );
    }
}

/// Levenshtein distance between two names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != b[j])).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// Refuses a setting every rank would refuse. `program`: the command starts a program of the
/// user's, which may register backends of its own: `BARRIER_BACKEND` may then name backends
/// this build does not have (the ranks agree on them by name), and gets a warning, not a refusal.
pub(super) fn check_settings(timeout: Option<&str>, program: bool) -> Result<(), String> {
    let params = barrier::Params::from_env();
    let checked = if program {
        barrier::registry::check_all_but_backend_names(&params)
    } else {
        barrier::registry::check_all(&params)
    };
    checked.map_err(|bad| format!("{} (in the environment: every rank would refuse to start)", bad.1))?;
    if program {
        let known = barrier::registry::backend_names();
        for name in params.get("BARRIER_BACKEND").unwrap_or_default().split(',').map(str::trim) {
            if !name.is_empty() && !known.iter().any(|k| k.eq_ignore_ascii_case(name)) {
                eprintln!(
                    "barrier run: warning: BARRIER_BACKEND names {name}, which is not a backend of this build ({}): \
                     the ranks fail unless the program registers it (barrier::register_backend)",
                    known.join(", ")
                );
            }
        }
    }
    if let Some(t) = timeout {
        let p = barrier::Params::defaults_only().set_as("BARRIER_TIMEOUT", t, "--timeout");
        if let Some(info) = barrier::registry::all_params().into_iter().find(|i| i.name == "BARRIER_TIMEOUT") {
            p.check(&info).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The devices `barrier <command> --emulate <kinds>` names: register maps, and the shape of an
/// A64FX node (from its parameters); a bad name or shape is reported and is exit code 2.
pub(super) fn emulated_devices(
    command: &str,
    kinds: &[String],
) -> Result<(Vec<&'static barrier_hw::DeviceMap>, Option<barrier_hw::a64fx::node::Layout>), ExitCode> {
    let mut maps = Vec::new();
    let mut a64fx = None;
    for kind in kinds {
        if kind.trim().eq_ignore_ascii_case("a64fx") {
            match barrier_cli::a64fx_layout(&barrier::Params::from_env()) {
                Ok(layout) => a64fx = Some(layout),
                Err(e) => {
                    eprintln!("barrier {command}: --emulate a64fx: {e}");
                    return Err(ExitCode::from(2));
                }
            }
            continue;
        }
        match barrier_cli::device_map(kind) {
            Some(map) => maps.push(map),
            None => {
                eprintln!("barrier {command}: --emulate {kind}: unknown device; use switch, gba, a64fx or a list");
                return Err(ExitCode::from(2));
            }
        }
    }
    Ok((maps, a64fx))
}
