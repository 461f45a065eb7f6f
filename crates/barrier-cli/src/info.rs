//! `barrier info`: every backend, every parameter, and the choice for a job shape.

use std::fmt::Write;

use barrier::{threads, Params};

/// The report for a job of `ranks` ranks on `nodes` nodes, with these devices emulated (and an
/// emulated A64FX node of this shape): what `barrier info` prints, for a program that wants to
/// say what it will run on (a backend registered before the call is included).
///
/// ```
/// // Four ranks on one node, no devices: every backend, every parameter, and the choice.
/// let text = barrier_cli::info::report(4, 1, &[], None).expect("a report");
/// assert!(text.contains("dissemination"));
/// // An emulated GBA device is tried too.
/// let with_gba = barrier_cli::info::report(2, 1, &[&barrier_hw::GBA], None).expect("a report");
/// assert!(with_gba.contains("gba"));
/// ```
pub fn report(
    ranks: usize,
    nodes: usize,
    emulate: &[&'static barrier_hw::DeviceMap],
    a64fx: Option<barrier_hw::a64fx::node::Layout>,
) -> Result<String, String> {
    crate::register_layers();
    // The selection runs for real, one thread per rank.
    let (limit, why) = barrier_launch::proc::max_ranks();
    if ranks > limit {
        return Err(format!("-n {ranks} is more ranks than this machine can hold at once: at most {limit} ({why})"));
    }
    let mut out = String::new();
    let mut params = Params::from_env();
    let emulators = emulate
        .iter()
        .map(|map| barrier_emu::Emulator::start(barrier_emu::Config::new(map)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot start an emulated device: {e}"))?;
    for e in &emulators {
        let kind = e.device().map().kind;
        params =
            params.set(format!("BARRIER_{}_DEVICE_PATH", kind.to_ascii_uppercase()), e.path().display().to_string());
    }
    let node = a64fx
        .map(barrier_emu::a64fx::Node::start)
        .transpose()
        .map_err(|e| format!("cannot start an emulated A64FX node: {e}"))?;
    if let Some(node) = &node {
        params = node.params(params);
    }
    let _ = writeln!(out, "barrier {} on {} cores\n", env!("CARGO_PKG_VERSION"), barrier::sys::available_cores());
    let _ = writeln!(out, "Backends (highest priority first is tried first):");
    let mut backends = barrier::backends();
    backends.sort_by_key(|b| -b.default_priority());
    for b in &backends {
        let _ = writeln!(out, "  {:<14} default priority {:>4}  {}", b.name(), b.default_priority(), b.description());
    }
    let _ = writeln!(out, "\nParameters (environment variables; current value in brackets when set):");
    for p in &barrier::registry::all_params() {
        let current = params.get(&p.name).map(|v| format!(" [{v}]")).unwrap_or_default();
        let default = if p.default.is_empty() { "(empty)".to_string() } else { p.default.clone() };
        let _ = writeln!(out, "  {}={}{}\n      {}", p.name, default, current, p.description);
    }
    let _ = writeln!(out, "\nDevices:");
    for b in barrier::backends::offload::all() {
        let path = b.device_path(&params);
        match b.open(&params) {
            Ok(dev) => {
                let c = dev.counters();
                let emulated =
                    if emulators.iter().any(|e| e.path() == path) { " (emulated for this report)" } else { "" };
                let _ = writeln!(
                    out,
                    "  {:<7} {}{emulated}: {} groups in use of {}, {} barriers, {} errors",
                    b.name,
                    path.display(),
                    c.groups_in_use,
                    b.map.max_groups,
                    c.barriers,
                    c.errors
                );
            }
            Err(why) => {
                let _ = writeln!(out, "  {:<7} {why}", b.name);
            }
        }
    }
    let a64fx_node = barrier::backends::a64fx::node_info(&params);
    match &a64fx_node {
        Ok(info) => {
            let emulated = if node.is_some() { " (emulated for this report)" } else { "" };
            let _ = writeln!(
                out,
                "  a64fx   {}{emulated}: {} CMGs, {} blades per CMG, {} windows per PE",
                barrier::backends::a64fx::sysfs_path(&params).display(),
                info.cmgs.len(),
                info.blades_per_cmg,
                info.windows_per_pe
            );
            for line in info.summary() {
                let _ = writeln!(out, "          {line}");
            }
        }
        Err(why) => {
            let _ = writeln!(out, "  a64fx   no A64FX barrier driver: {why}");
        }
    }
    // Thread ranks are bound to the node's first CPUs when there is an A64FX node (the
    // hardware barrier needs a PE per rank), as a hybrid program would bind them.
    let pins = a64fx_node.ok().and_then(|info| info.compact_cpus(ranks)).filter(|_| nodes == 1);
    let _ = writeln!(out, "\nSelection for a job of {ranks} ranks on {nodes} node(s) (run now, as threads):");
    let mut job = threads::Job::new(ranks);
    if let Some(cpus) = pins {
        let _ =
            writeln!(out, "  (ranks bound to the A64FX node's CPUs {})", ranks_text(&cpus).trim_start_matches(": "));
        job = job.pin_cpus(cpus);
    }
    let sel = job
        .nodes(nodes)
        .busy_threads(usize::from(!emulators.is_empty()))
        .params(params)
        .run(|w| (w.selection().clone(), w.wait_policy(), w.segment_usage(), w.transport_ranking(), w.algorithm()))
        .map_err(|e| format!("selection failed: {e}"))?;
    let (selection, policy, (used, total), ranking, algorithm) = &sel[0];
    let _ = writeln!(out, "  wait policy: {policy}");
    let _ = writeln!(
        out,
        "  transports as rank 0 sees them (per peer, the reaching transport with the highest exclusivity wins):"
    );
    for route in ranking {
        let _ = writeln!(
            out,
            "    {:<8} exclusivity {:>5}{}  {} peer(s){}",
            route.name,
            route.exclusivity,
            if route.network { " (network)" } else { "          " },
            route.peers.len(),
            ranks_text(&route.peers)
        );
    }
    let _ = writeln!(
        out,
        "  job segment: {} KiB in use of {} KiB (BARRIER_SHM_POOL_BYTES sets the pool; freed communicators and windows are reused)",
        used / 1024,
        total / 1024
    );
    for line in selection.to_string().lines() {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out, "  rank 0's module: {algorithm}");
    // The flat algorithm that `auto` picks for this communicator (the software backend's, and
    // the hierarchical backend's on one node), and why.
    let auto = barrier::backends::dissemination::Algorithm::Auto;
    let parks = policy.wakes();
    let flat = auto.resolve(ranks, parks);
    let why = if nodes > 1 {
        "across nodes the software backend runs dissemination (every flag one writer: a put)".to_string()
    } else {
        barrier::backends::dissemination::Algorithm::reason(ranks, parks)
    };
    let flat = if nodes > 1 { barrier::backends::dissemination::Algorithm::Dissemination } else { flat };
    let set = Params::from_env().get("BARRIER_SW_ALGORITHM").filter(|a| !a.trim().eq_ignore_ascii_case("auto"));
    match set {
        Some(a) => {
            let _ =
                writeln!(out, "  flat algorithm: {a} (BARRIER_SW_ALGORITHM; auto would pick {}: {why})", flat.name());
        }
        None => {
            let _ = writeln!(out, "  flat algorithm (BARRIER_SW_ALGORITHM=auto): {}: {why}", flat.name());
        }
    }
    Ok(out)
}

/// `: 0-3, 8, 10-11` for a sorted list of ranks (empty for none).
fn ranks_text(ranks: &[usize]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        runs.push(if i == j { ranks[i].to_string() } else { format!("{}-{}", ranks[i], ranks[j]) });
        i = j + 1;
    }
    if runs.is_empty() {
        String::new()
    } else {
        format!(": {}", runs.join(", "))
    }
}
