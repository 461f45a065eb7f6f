//! `barrier model`: a latency model of every backend for job shapes this machine cannot run.
//!
//! A barrier's latency is the sum of the steps on its critical path, and each backend's steps
//! come from the **same planning functions the backend runs**: the dissemination rounds
//! ([`barrier::rounds`]), the depth of a node's k-ary gather and fanout tree
//! ([`LocalTree::depth`] at `BARRIER_HIER_RADIX`'s default), the tree of device groups past a
//! device's member limit and whether the device can hold it ([`TreeShape`]), the A64FX node's
//! CMGs. A change to a backend's plan changes the model with it.
//!
//! Each step costs a constant of one of two kinds:
//!
//! * **this machine's**, measured by `barrier model --calibrate` (and read back from a small
//!   file): a shared-memory flag hand-off between two cores, a futex wake, a yield hand-off on
//!   one core, the emulated device's work per barrier;
//! * **the network's**, from a named profile (InfiniBand HDR, Slingshot, Tofu-D, the simulated
//!   nodes of `barrier run --nodes`) or `custom:PUT,GAP`: the one-way latency of a small put
//!   between nodes, the gap between two messages a NIC injects, the time a barrier device (an
//!   in-network switch, a GBA) adds per stage. Every constant's source is in `docs/model.md`.
//!
//! The parts are, per barrier: the intranode gather (tree levels × a flag hand-off), the
//! internode rounds (dissemination rounds × a put, plus the NIC's injection gap for the puts a
//! node sends in the round), the device stages (one per level of its group tree: every member's
//! arrival leaves its NIC, crosses to the device, is aggregated, and the release comes back),
//! and the fanout. A round whose puts cross between nodes costs a put even if only some of them
//! do: the last one is on the critical path.
//!
//! The model is checked against this machine's own runs: `barrier model --check` measures
//! dissemination and hierarchical barriers across simulated nodes (`BARRIER_NET_PUT_LATENCY`)
//! and compares them with what it predicts for the `sim:` profile.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use barrier::algo::tree::LocalTree;
use barrier::backends::hw::TreeShape;
use barrier_hw::DeviceMap;

/// PEs per CMG and CMGs per node of an A64FX (Fugaku's nodes): 4 CMGs of 12 compute PEs.
pub const A64FX_PES_PER_CMG: usize = 12;
/// CMGs per A64FX node.
pub const A64FX_CMGS: usize = 4;

/// This machine's constants, in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// A store to a flag on one core seen by a thread spinning on it on another core.
    pub flag_ns: f64,
    /// A futex wake: the woken thread runs this long after the wake call.
    pub wake_ns: f64,
    /// Two threads on one core handing over by `sched_yield`.
    pub yield_ns: f64,
    /// The emulated device's work per barrier (the engine's part of a 2-member group).
    pub device_ns: f64,
    /// Cores of the machine (oversubscription of simulated nodes).
    pub cores: usize,
    /// Where the numbers come from.
    pub source: String,
}

impl Machine {
    /// Constants typical of the 2-core x86-64 VM this project is developed on (rounded from
    /// calibrations on 2026-11-24, whose flag hand-off read 41 to 242 ns as the VM's speed
    /// changed), used until `barrier model --calibrate` measures the machine at hand.
    pub fn builtin() -> Machine {
        Machine {
            flag_ns: 60.0,
            wake_ns: 48_000.0,
            yield_ns: 2_000.0,
            device_ns: 180.0,
            cores: 2,
            source: "built-in (typical of the project's 2-core VM; run `barrier model --calibrate`)".into(),
        }
    }

    /// The calibration file: `$XDG_CACHE_HOME/barrier/model-calibration`, else
    /// `~/.cache/barrier/model-calibration`.
    pub fn default_path() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("barrier").join("model-calibration"))
    }

    /// Reads a calibration file written by [`Machine::save`].
    pub fn load(path: &Path) -> Result<Machine, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut m = Machine::builtin();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (key, value) =
                line.split_once('=').ok_or_else(|| format!("{}: not key=value: {line}", path.display()))?;
            let bad = || format!("{}: {key} = {value:?} is not a positive number", path.display());
            let ns = || value.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(bad);
            match key.trim() {
                "flag_ns" => m.flag_ns = ns()?,
                "wake_ns" => m.wake_ns = ns()?,
                "yield_ns" => m.yield_ns = ns()?,
                "device_ns" => m.device_ns = ns()?,
                "cores" => m.cores = value.trim().parse().ok().filter(|c| *c > 0).ok_or_else(bad)?,
                "source" => m.source = value.trim().to_string(),
                // A newer build's constant: this one does not use it.
                other => eprintln!("barrier model: {}: ignoring unknown key {other}", path.display()),
            }
        }
        Ok(m)
    }

    /// Writes the constants as `key = value` lines.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let text = format!(
            "# barrier model --calibrate\nflag_ns = {:.1}\nwake_ns = {:.1}\nyield_ns = {:.1}\ndevice_ns = {:.1}\ncores = {}\nsource = {}\n",
            self.flag_ns, self.wake_ns, self.yield_ns, self.device_ns, self.cores, self.source
        );
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// A network's constants, in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    /// Profile name.
    pub name: String,
    /// One-way latency of a small put (or MPI message) between two nodes, software included.
    pub put_ns: f64,
    /// Gap between two messages one NIC injects (the inverse of its message rate).
    pub gap_ns: f64,
    /// What a barrier device (in-network switch, GBA) adds per stage beyond a put's latency:
    /// aggregation over its ports and the release's broadcast.
    pub device_ns: f64,
    /// An A64FX hardware barrier sync within one CMG (profiles of A64FX systems).
    pub a64fx_sync_ns: f64,
    /// Barrier hardware the profile's machines have: `switch`, `gba`, `a64fx`.
    pub devices: Vec<&'static str>,
    /// The ranks yield while a simulated put is on the wire (`sim:` profiles, latency > 20 µs).
    pub simulated: bool,
}

/// What an in-network barrier device adds to a put per stage (aggregation over its levels and
/// the release's multicast): fitted to SHARP's 8-byte allreduce on 128 EDR hosts, 2.83 µs
/// against one put of 0.86 µs (docs/model.md).
pub const SWITCH_STAGE_NS: f64 = 1_970.0;

/// Simulated puts longer than this are waited out yielding (`transport/segment.rs`).
const SIM_YIELD_ABOVE_NS: f64 = 20_000.0;

/// The largest job the model prices (2^32 ranks): beyond it the counts overflow.
pub const MAX_RANKS: usize = 1 << 32;

/// The named profiles (constants and sources in `docs/model.md`).
pub const PROFILES: &[&str] = &["ib-hdr", "ib-edr", "slingshot", "tofu-d"];

impl Network {
    /// The profile `spec`: a name from [`PROFILES`], `custom:PUT,GAP` (durations such as
    /// `1.2us,5ns`; a bare number is nanoseconds) or `sim:PUT` (the simulated nodes of
    /// `barrier run --nodes` with `BARRIER_NET_PUT_LATENCY=PUT`).
    pub fn parse(spec: &str, machine: &Machine) -> Result<Network, String> {
        let base = |name: &str, put_ns: f64, gap_ns: f64, device_ns: f64, devices: Vec<&'static str>| Network {
            name: name.into(),
            put_ns,
            gap_ns,
            device_ns,
            a64fx_sync_ns: 230.0,
            devices,
            simulated: false,
        };
        match spec {
            // docs/model.md gives each constant's source, or says it is assumed or fitted.
            "ib-hdr" => Ok(base("ib-hdr", 1_000.0, 4.7, SWITCH_STAGE_NS, vec!["switch"])),
            "ib-edr" => Ok(base("ib-edr", 860.0, 6.5, SWITCH_STAGE_NS, vec!["switch"])),
            "slingshot" => Ok(base("slingshot", 1_500.0, 5.0, SWITCH_STAGE_NS, vec![])),
            "tofu-d" => Ok(base("tofu-d", 490.0, 10.0, SWITCH_STAGE_NS, vec!["a64fx"])),
            s if s.starts_with("custom:") => {
                let (put, gap) = s["custom:".len()..]
                    .split_once(',')
                    .ok_or_else(|| format!("--network {s}: use custom:PUT,GAP, for example custom:1.2us,5ns"))?;
                let put_ns = parse_ns(put).map_err(|e| format!("--network {s}: {e}"))?;
                let gap_ns = parse_ns(gap).map_err(|e| format!("--network {s}: {e}"))?;
                Ok(base(s, put_ns, gap_ns, SWITCH_STAGE_NS, vec![]))
            }
            s if s.starts_with("sim:") => {
                let wire = parse_ns(&s["sim:".len()..]).map_err(|e| format!("--network {s}: {e}"))?;
                if wire <= SIM_YIELD_ABOVE_NS {
                    return Err(format!(
                        "--network {s}: the model follows simulated puts above 20 µs (the initiator yields while \
                         it waits them out); shorter ones are waited out spinning, which it does not model"
                    ));
                }
                // The initiator waits the wire out, then stores (the hand-off is added per round).
                Ok(Network {
                    name: s.into(),
                    put_ns: wire,
                    gap_ns: 0.0,
                    device_ns: machine.device_ns,
                    a64fx_sync_ns: 0.0,
                    devices: vec![],
                    simulated: true,
                })
            }
            other => Err(format!(
                "--network {other}: unknown; use one of {}, custom:PUT,GAP or sim:PUT",
                PROFILES.join(", ")
            )),
        }
    }
}

/// `1.2us`, `500ns`, `2ms`, `0.3s` or a bare number of nanoseconds.
pub fn parse_ns(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (number, scale) = [("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)]
        .iter()
        .find_map(|(unit, scale)| t.strip_suffix(unit).map(|n| (n, *scale)))
        .unwrap_or((t, 1.0));
    match number.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && (v * scale).is_finite() => Ok(v * scale),
        _ => Err(format!("{text:?} is not a duration (for example 1.2us, 500ns)")),
    }
}

/// A job shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ppn: usize,
}

impl Shape {
    fn ranks(&self) -> usize {
        self.nodes * self.ppn
    }
}

/// One part of a prediction.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    /// What it is.
    pub name: &'static str,
    /// Its cost per barrier.
    pub ns: f64,
}

/// What the model says of one backend at one shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// Backend (and internode leg).
    pub backend: String,
    /// Selector priority (the default).
    pub priority: i32,
    /// The parts on the critical path.
    pub parts: Vec<Part>,
    /// Messages on the network per barrier (puts, or arrivals and releases of a device).
    pub network_ops: f64,
    /// Why the backend would decline this shape (its latency is then what it would cost).
    pub declined: Option<String>,
}

impl Prediction {
    /// Predicted latency per barrier.
    pub fn ns(&self) -> f64 {
        self.parts.iter().map(|p| p.ns).sum()
    }
}

/// The cost of one hand-off between ranks of one machine: a flag hand-off if the ranks have a
/// core each; else the waiter notices at its next turn on a core, after the other ranks there
/// had theirs (`ranks / cores` yield hand-offs: oversubscribed ranks yield, and never sleep long
/// while their neighbours are runnable).
fn handoff(machine: &Machine, ranks_here: usize) -> f64 {
    if ranks_here > machine.cores {
        ranks_here as f64 / machine.cores.max(1) as f64 * machine.yield_ns
    } else {
        machine.flag_ns
    }
}

/// Dissemination rounds among `n` members spread over nodes in blocks of `per_node`:
/// the round's cost (a put if any of its puts crosses nodes, else a flag hand-off), and the
/// puts that cross per barrier.
fn dissemination(
    n: usize,
    per_node: usize,
    nodes: usize,
    net: &Network,
    local: f64,
    wire_wait: f64,
) -> (f64, f64, f64) {
    let mut rounds_ns = 0.0;
    let mut injection_ns = 0.0;
    let mut crossing = 0.0;
    for k in 0..barrier::rounds(n) {
        let distance = 1usize << k;
        if nodes > 1 {
            rounds_ns += net.put_ns + wire_wait;
            // The node that sends the most in this round injects them one after another.
            injection_ns += distance.min(per_node) as f64 * net.gap_ns;
            crossing += crossing_puts(n, per_node, distance) as f64;
        } else {
            rounds_ns += local;
        }
    }
    (rounds_ns, injection_ns, crossing)
}

/// Members `j` of `n` (nodes in blocks of `per_node`) whose dissemination partner at
/// `distance`, `(j + distance) mod n`, is on another node.
fn crossing_puts(n: usize, per_node: usize, distance: usize) -> usize {
    let d = distance % n;
    // No wrap: j + d < n crosses when its offset in its block plus d reaches the next block.
    let unwrapped = n - d;
    let (full, rest) = (unwrapped / per_node, unwrapped % per_node);
    let mut count = full * d.min(per_node) + rest.saturating_sub(per_node.saturating_sub(d));
    // Wrapped: the last d members send to t = j + d - n, on their own node only if n - d < per_node.
    // With s = n - d < per_node, t stays on j's node when t mod per_node < per_node - s.
    let s = n - d;
    if s >= per_node {
        count += d;
    } else {
        let stays = per_node - s;
        count += d - ((d / per_node) * stays + (d % per_node).min(stays));
    }
    count
}

/// A device's stages over `members` arrivals from `nodes` nodes: its group tree, whether the
/// device holds it, the time per barrier and the messages.
fn device_stages(
    map: &'static DeviceMap,
    name: &str,
    members: usize,
    per_node: usize,
    net: &Network,
) -> (Vec<Part>, f64, Option<String>) {
    let shape = TreeShape::new(members, map.max_members);
    let declined = shape.fits(map, name).err();
    let tree = shape.chunks > 1;
    let stages = if tree { 3.0 } else { 1.0 };
    let stage_ns = net.put_ns + net.device_ns;
    // In a tree every member sends its gather and broadcast arrivals at once.
    let first_arrivals = per_node.min(map.max_members) * if tree { 2 } else { 1 };
    let parts = vec![
        Part { name: "NIC injection of the arrivals", ns: first_arrivals as f64 * net.gap_ns },
        Part { name: "device stages (arrival, aggregation, release)", ns: stages * stage_ns },
    ];
    // Arrivals, as the backend counts its network operations (`barrier bench`'s column): one
    // per member of a single group; in a tree two per member and one more per chunk leader.
    let messages = if tree { 2 * members + shape.chunks } else { members };
    (parts, messages as f64, declined)
}

/// Every backend's prediction at `shape` on `net`, highest priority first.
pub fn predict(shape: Shape, net: &Network, machine: &Machine) -> Vec<Prediction> {
    let n = shape.ranks();
    // Simulated nodes share this machine's cores; a real node is assumed to have a core per
    // rank (its ranks spin), with this machine's flag hand-off.
    let here = if net.simulated { n } else { shape.ppn.min(machine.cores) };
    let local = handoff(machine, here);
    // A simulated put: the initiator waits the wire out (yielding when ranks outnumber cores,
    // so its store waits for its next turn), then the receiver notices the store.
    let wire_wait = match (net.simulated, here > machine.cores) {
        (false, _) => 0.0,
        (true, false) => machine.flag_ns,
        (true, true) => 2.0 * local,
    };
    let has = |d: &str| net.devices.contains(&d);
    let mut out = Vec::new();

    // a64fx: a blade per CMG, dissemination among the CMG leaders.
    {
        let cmgs = shape.ppn.div_ceil(A64FX_PES_PER_CMG).max(1);
        let leaders = shape.nodes * cmgs;
        let (rounds_ns, injection_ns, crossing) = dissemination(leaders, cmgs, shape.nodes, net, local, wire_wait);
        let syncs = if leaders > 1 { 2.0 } else { 1.0 };
        let declined = if !has("a64fx") {
            Some(format!("{} has no A64FX hardware barrier", net.name))
        } else if shape.nodes > 1 {
            Some("the backend serves one node (a blade belongs to one process); shown: blades per CMG with dissemination among all CMG leaders".into())
        } else if shape.ppn < 2 || shape.ppn > A64FX_PES_PER_CMG * A64FX_CMGS {
            Some(format!(
                "{} ranks per node: a blade needs 2 to {} PEs per node",
                shape.ppn,
                A64FX_PES_PER_CMG * A64FX_CMGS
            ))
        } else if shape.ppn % A64FX_PES_PER_CMG == 1 {
            Some(format!(
                "{} ranks packed CMG by CMG leave one rank alone in the last CMG, and a blade needs 2 PEs",
                shape.ppn
            ))
        } else {
            None
        };
        out.push(Prediction {
            backend: "a64fx".into(),
            priority: 110,
            parts: vec![
                Part { name: "blade syncs in each CMG", ns: syncs * net.a64fx_sync_ns },
                Part { name: "rounds among CMG leaders", ns: rounds_ns },
                Part { name: "NIC injection", ns: injection_ns },
            ],
            network_ops: crossing,
            declined,
        });
    }
    // switch and gba, flat (a tree of groups past their member limits).
    for (map, priority) in [(&barrier_hw::GBA, 100), (&barrier_hw::SWITCH, 90)] {
        let (parts, messages, mut declined) = device_stages(map, map.kind, n, shape.ppn, net);
        if !has(map.kind) {
            declined = Some(format!("{} has no {} device (add it with --devices)", net.name, map.kind));
        }
        out.push(Prediction { backend: map.kind.into(), priority, parts, network_ops: messages, declined });
    }
    // hierarchical: gather over a k-ary tree, an internode leg among node roots, fanout.
    let tree = LocalTree::new(shape.ppn, barrier::backends::hierarchical::DEFAULT_RADIX);
    let tree_ns = tree.depth() as f64 * local;
    let hier_declined = if shape.nodes < 2 {
        Some("one node: nothing to save".to_string())
    } else if shape.ppn < 2 {
        Some("one rank per node: every rank is a root (BARRIER_HIER_THRESHOLD is 2)".into())
    } else {
        None
    };
    for leg in ["gba", "switch", "dissemination"] {
        let mut parts = vec![Part { name: "intranode gather", ns: tree_ns }];
        let (network_ops, declined) = if leg == "dissemination" {
            let (rounds_ns, injection_ns, crossing) = dissemination(shape.nodes, 1, shape.nodes, net, local, wire_wait);
            parts.push(Part { name: "internode rounds among node roots", ns: rounds_ns });
            parts.push(Part { name: "NIC injection", ns: injection_ns });
            (crossing, hier_declined.clone())
        } else {
            let map = if leg == "gba" { &barrier_hw::GBA } else { &barrier_hw::SWITCH };
            let (device_parts, messages, fits) = device_stages(map, leg, shape.nodes, 1, net);
            parts.extend(device_parts);
            let declined = if !has(leg) { Some(format!("{} has no {leg} device", net.name)) } else { fits };
            (messages, hier_declined.clone().or(declined))
        };
        parts.push(Part { name: "intranode fanout", ns: tree_ns });
        out.push(Prediction {
            backend: format!("hierarchical ({leg} among roots)"),
            priority: 50,
            parts,
            network_ops,
            declined,
        });
    }
    // dissemination, flat over every rank.
    let (rounds_ns, injection_ns, crossing) = dissemination(n, shape.ppn, shape.nodes, net, local, wire_wait);
    out.push(Prediction {
        backend: "dissemination".into(),
        priority: 10,
        parts: vec![Part { name: "rounds", ns: rounds_ns }, Part { name: "NIC injection", ns: injection_ns }],
        network_ops: crossing,
        declined: None,
    });
    // The selector's order: the backends' own default priorities (stable: hierarchical's legs
    // keep their auto order).
    for p in &mut out {
        let name = p.backend.split(' ').next().unwrap_or_default();
        if let Some(b) = barrier::backends().into_iter().find(|b| b.name() == name) {
            p.priority = b.default_priority();
        }
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.priority));
    out
}

/// What the selector would run: the highest-priority backend that does not decline (for
/// hierarchical, the first usable leg in its own order: GBA, switch, put dissemination).
pub fn selected(predictions: &[Prediction]) -> Option<&Prediction> {
    predictions.iter().find(|p| p.declined.is_none())
}

/// The fastest backend that does not decline.
pub fn fastest(predictions: &[Prediction]) -> Option<&Prediction> {
    predictions.iter().filter(|p| p.declined.is_none()).min_by(|a, b| a.ns().total_cmp(&b.ns()))
}

fn us(ns: f64) -> String {
    if ns >= 100_000.0 {
        format!("{:.0} µs", ns / 1e3)
    } else {
        format!("{:.2} µs", ns / 1e3)
    }
}

/// The report for one shape.
pub fn report(shape: Shape, net: &Network, machine: &Machine) -> String {
    let predictions = predict(shape, net, machine);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "barrier model: {} nodes x {} ranks per node ({} ranks) on {} (put {:.0} ns, gap {:.1} ns); this machine: {}",
        shape.nodes,
        shape.ppn,
        shape.ranks(),
        net.name,
        net.put_ns,
        net.gap_ns,
        machine.source
    );
    let _ = writeln!(s, "{:<40} {:>11} {:>14}  parts", "backend", "latency", "network msgs");
    for p in &predictions {
        let parts: Vec<String> =
            p.parts.iter().filter(|x| x.ns > 0.0).map(|x| format!("{} {}", x.name, us(x.ns))).collect();
        let latency = if p.declined.is_some() { format!("({})", us(p.ns())) } else { us(p.ns()) };
        let _ = writeln!(s, "{:<40} {:>11} {:>14.0}  {}", p.backend, latency, p.network_ops, parts.join(" + "));
        if let Some(why) = &p.declined {
            let _ = writeln!(s, "{:<40} declines: {why}", "");
        }
    }
    match (selected(&predictions), fastest(&predictions)) {
        (Some(sel), Some(fast)) if sel.backend == fast.backend => {
            let _ = writeln!(s, "selector: {} ({}), also the fastest predicted", sel.backend, us(sel.ns()));
        }
        (Some(sel), Some(fast)) => {
            let _ = writeln!(
                s,
                "selector: {} ({}) by priority; fastest predicted: {} ({}): force it with BARRIER_BACKEND",
                sel.backend,
                us(sel.ns()),
                fast.backend,
                us(fast.ns())
            );
        }
        _ => {}
    }
    s
}

/// Node counts of a sweep: 1 to 4,096 in powers of two.
pub fn sweep_nodes() -> Vec<usize> {
    (0..=12).map(|k| 1usize << k).collect()
}

/// The sweep: one line per node count, one column per backend (declined ones in parentheses).
pub fn sweep(ppn: usize, net: &Network, machine: &Machine) -> (String, Vec<crate::bench::Row>) {
    let mut s = String::new();
    let mut rows = Vec::new();
    let names: Vec<String> = predict(Shape { nodes: 1, ppn }, net, machine).into_iter().map(|p| p.backend).collect();
    let _ = writeln!(
        s,
        "barrier model --sweep: {ppn} ranks per node on {} (µs per barrier; (x): the backend declines)",
        net.name
    );
    let _ = write!(s, "{:>6}", "nodes");
    for name in &names {
        let _ = write!(s, " {:>14}", short(name));
    }
    let _ = writeln!(s, "  {:<22} fastest", "selector");
    for nodes in sweep_nodes() {
        let predictions = predict(Shape { nodes, ppn }, net, machine);
        let _ = write!(s, "{nodes:>6}");
        for p in &predictions {
            let v = format!("{:.2}", p.ns() / 1e3);
            let _ = write!(s, " {:>14}", if p.declined.is_some() { format!("({v})") } else { v });
            if p.declined.is_none() {
                rows.push(crate::bench::Row {
                    backend: short(&p.backend),
                    algorithm: String::new(),
                    ranks: nodes,
                    iters: 0,
                    measurements: 0,
                    stats: crate::bench::Stats { median: p.ns(), p99: p.ns(), mean: p.ns(), min: p.ns() },
                    emulator_ns: None,
                    network_ops: Some(p.network_ops),
                    label: if p.backend == "dissemination" { "dissemination (flat)".into() } else { short(&p.backend) },
                });
            }
        }
        let name = |p: Option<&Prediction>| p.map(|p| short(&p.backend)).unwrap_or_default();
        let _ = writeln!(s, "  {:<22} {}", name(selected(&predictions)), name(fastest(&predictions)));
    }
    (s, rows)
}

fn short(backend: &str) -> String {
    backend.replace("hierarchical (", "hier/").replace(" among roots)", "")
}

/// The predictions as JSON (one object per backend).
pub fn json(shape: Shape, net: &Network, machine: &Machine) -> String {
    let predictions = predict(shape, net, machine);
    let selector = selected(&predictions).map(|p| p.backend.clone()).unwrap_or_default();
    let items: Vec<String> = predictions
        .iter()
        .map(|p| {
            let parts: Vec<String> =
                p.parts.iter().map(|x| format!("{{\"name\":{:?},\"ns\":{:.1}}}", x.name, x.ns)).collect();
            format!(
                "{{\"backend\":{:?},\"ns\":{:.1},\"network_ops\":{:.0},\"declined\":{},\"parts\":[{}]}}",
                p.backend,
                p.ns(),
                p.network_ops,
                p.declined.as_ref().map_or("null".into(), |d| format!("{d:?}")),
                parts.join(",")
            )
        })
        .collect();
    format!(
        "{{\"nodes\":{},\"ppn\":{},\"network\":{:?},\"selector\":{selector:?},\"backends\":[{}]}}\n",
        shape.nodes,
        shape.ppn,
        net.name,
        items.join(",")
    )
}

/// Measures this machine's constants (about a second).
pub fn calibrate() -> Result<Machine, String> {
    let cores = barrier::sys::affinity_cores();
    // On one core a spinning ping-pong would hand over only at preemptions: yield there.
    let flag_ns = match cores.get(1) {
        Some(&second) => pingpong(cores.first().copied(), Some(second), Wait::Spin, 200_000),
        None => pingpong(cores.first().copied(), cores.first().copied(), Wait::Yield, 20_000),
    };
    let yield_ns = pingpong(cores.first().copied(), cores.first().copied(), Wait::Yield, 20_000);
    let wake_ns = pingpong(cores.first().copied(), cores.get(1).copied(), Wait::Park, 20_000);
    let device_ns = device_work()?;
    Ok(Machine {
        flag_ns,
        wake_ns,
        yield_ns,
        device_ns,
        cores: cores.len(),
        source: format!("calibrated {} on {} cores", crate::bench::today_utc(), cores.len()),
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Wait {
    Spin,
    Yield,
    Park,
}

/// One-way hand-off time between two threads on `a` and `b`, by ping-pong: half the round trip.
fn pingpong(a: Option<usize>, b: Option<usize>, wait: Wait, trips: u64) -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let ball = Arc::new(AtomicU64::new(0));
    let pin = |cpu: Option<usize>| {
        if let Some(cpu) = cpu {
            let _ = barrier::sys::set_affinity(&[cpu]);
        }
    };
    let main = std::thread::current();
    let other = {
        let ball = ball.clone();
        std::thread::spawn(move || {
            pin(b);
            for i in 0..trips {
                let want = 2 * i + 1;
                loop {
                    match ball.load(Ordering::Acquire) {
                        u64::MAX => return, // stopped at the deadline
                        seen if seen == want => break,
                        _ => {}
                    }
                    match wait {
                        Wait::Spin => std::hint::spin_loop(),
                        Wait::Yield => std::thread::yield_now(),
                        Wait::Park => std::thread::park(),
                    }
                }
                ball.store(want + 1, Ordering::Release);
                if wait == Wait::Park {
                    main.unpark();
                }
            }
        })
    };
    let whole = barrier::sys::affinity_cores();
    pin(a);
    let start = Instant::now();
    // A deadline: on a machine that gives these threads less than it says, each trip could
    // wait for a time slice.
    let deadline = start + Duration::from_secs(1);
    let mut done = trips;
    for i in 0..trips {
        if i % 64 == 0 && Instant::now() > deadline {
            done = i;
            // The partner waits for this trip: tell it to stop instead.
            ball.store(u64::MAX, Ordering::Release);
            if wait == Wait::Park {
                other.thread().unpark();
            }
            break;
        }
        ball.store(2 * i + 1, Ordering::Release);
        if wait == Wait::Park {
            other.thread().unpark();
        }
        while ball.load(Ordering::Acquire) != 2 * i + 2 {
            match wait {
                Wait::Spin => std::hint::spin_loop(),
                Wait::Yield => std::thread::yield_now(),
                Wait::Park => std::thread::park_timeout(Duration::from_millis(1)),
            }
        }
    }
    let elapsed = start.elapsed();
    let _ = other.join();
    let _ = barrier::sys::set_affinity(&whole);
    elapsed.as_nanos() as f64 / done.max(1) as f64 / 2.0
}

/// The emulated device's work per barrier: an inline GBA's busy time over 2 thread ranks.
fn device_work() -> Result<f64, String> {
    let emu = barrier_emu::Emulator::start(barrier_emu::Config::new(&barrier_hw::GBA).inline())
        .map_err(|e| format!("cannot start an emulated GBA: {e}"))?;
    let params = barrier::Params::defaults_only()
        .set("BARRIER_BACKEND", "gba")
        .set("BARRIER_GBA_DEVICE_PATH", emu.path().display().to_string());
    let before = emu.counters();
    barrier::threads::Job::new(2)
        .params(params)
        .run(|w| -> barrier::Result<()> {
            for _ in 0..20_000 {
                w.barrier()?;
            }
            Ok(())
        })
        .map_err(|e| format!("calibrating the emulated GBA: {e}"))?
        .into_iter()
        .collect::<Result<Vec<()>, _>>()
        .map_err(|e| format!("calibrating the emulated GBA: {e}"))?;
    emu.quiesce(Duration::from_secs(2));
    let after = emu.counters();
    let barriers = after.barriers.saturating_sub(before.barriers).max(1);
    Ok(after.busy_ns.saturating_sub(before.busy_ns) as f64 / barriers as f64)
}

/// One configuration of the simulated-node check.
#[derive(Clone, Debug)]
pub struct Check {
    /// Backend as `BARRIER_BACKEND` names it.
    pub backend: &'static str,
    /// The job.
    pub shape: Shape,
    /// `BARRIER_NET_PUT_LATENCY`.
    pub wire_ns: f64,
    /// The model's prediction.
    pub predicted_ns: f64,
    /// The measured median.
    pub measured_ns: f64,
    /// The launch whose measurement this is (1: the first).
    pub attempts: usize,
}

impl Check {
    /// Measured over predicted, minus one.
    pub fn error(&self) -> f64 {
        self.measured_ns / self.predicted_ns - 1.0
    }
}

/// The tolerance of the simulated-node check: measured within this fraction of predicted.
pub const CHECK_TOLERANCE: f64 = 0.25;

/// Launches of one configuration at most, while its measurement is off by more than the
/// tolerance (this VM's speed changes from second to second).
pub const CHECK_ATTEMPTS: usize = 3;

/// Runs the simulated-node check: dissemination over 2, 4 and 8 nodes of one rank and
/// hierarchical over 2 and 4 nodes of two, at two wire latencies, each measured with
/// `barrier bench`'s rank program (up to [`CHECK_ATTEMPTS`] launches while it is off) and
/// compared with the `sim:` prediction for this machine's constants.
pub fn check(machine: &Machine, iters: u64) -> Result<Vec<Check>, String> {
    let mut out = Vec::new();
    let configs: Vec<(&'static str, Shape)> = vec![
        ("dissemination", Shape { nodes: 2, ppn: 1 }),
        ("dissemination", Shape { nodes: 4, ppn: 1 }),
        ("dissemination", Shape { nodes: 8, ppn: 1 }),
        ("hierarchical", Shape { nodes: 2, ppn: 2 }),
        ("hierarchical", Shape { nodes: 4, ppn: 2 }),
    ];
    for wire_us in [50.0, 200.0] {
        let net = Network::parse(&format!("sim:{wire_us}us"), machine)?;
        for (backend, shape) in &configs {
            let predictions = predict(*shape, &net, machine);
            let row =
                if *backend == "dissemination" { "dissemination" } else { "hierarchical (dissemination among roots)" };
            let predicted_ns = predictions
                .iter()
                .find(|p| p.backend == row)
                .map(Prediction::ns)
                .ok_or_else(|| format!("the model has no row {row:?}"))?;
            let env = vec![
                ("BARRIER_BACKEND".to_string(), backend.to_string()),
                ("BARRIER_NET_PUT_LATENCY".to_string(), format!("{wire_us}us")),
                ("BARRIER_TIMEOUT".to_string(), "60s".to_string()),
            ];
            let mut best: Option<Check> = None;
            for attempt in 1..=CHECK_ATTEMPTS {
                let measured = crate::bench::measure_backend(
                    shape.ranks(),
                    shape.nodes,
                    env.clone(),
                    None,
                    iters,
                    (iters / 10).max(1),
                )?;
                let c = Check {
                    backend,
                    shape: *shape,
                    wire_ns: wire_us * 1e3,
                    predicted_ns,
                    measured_ns: measured.stats.median,
                    attempts: attempt,
                };
                let within = c.error().abs() <= CHECK_TOLERANCE;
                if best.as_ref().is_none_or(|b| c.error().abs() < b.error().abs()) {
                    best = Some(Check { attempts: attempt, ..c });
                }
                if within {
                    break;
                }
            }
            let mut best = best.expect("at least one attempt");
            best.attempts = best.attempts.max(1);
            out.push(best);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by<'a>(p: &'a [Prediction], name: &str) -> &'a Prediction {
        p.iter().find(|x| x.backend == name).unwrap()
    }

    #[test]
    fn flat_dissemination_pays_a_put_per_round_and_hierarchical_only_the_roots_rounds() {
        let m = Machine::builtin();
        let net = Network::parse("custom:1us,0", &m).unwrap();
        let p = predict(Shape { nodes: 4096, ppn: 48 }, &net, &m);
        // 196,608 ranks: 18 rounds of a put; 4,096 roots: 12.
        assert_eq!(by(&p, "dissemination").ns(), 18_000.0);
        let hier = by(&p, "hierarchical (dissemination among roots)");
        assert_eq!(hier.parts[1].ns, 12_000.0);
        // 48 ranks, radix 8: two levels up and two down.
        assert_eq!(hier.parts[0].ns, 2.0 * m.flag_ns);
        assert!(hier.declined.is_none());
    }

    #[test]
    fn crossing_puts_are_counted_exactly() {
        for (nodes, per_node) in [(2, 48), (3, 5), (4, 1), (5, 3), (2, 2), (7, 13)] {
            let n = nodes * per_node;
            for k in 0..barrier::rounds(n) {
                let d = 1 << k;
                let brute = (0..n).filter(|&j| j / per_node != ((j + d) % n) / per_node).count();
                assert_eq!(crossing_puts(n, per_node, d), brute, "{nodes} x {per_node}, distance {d}");
            }
        }
    }

    #[test]
    fn devices_decline_what_their_group_tree_cannot_hold() {
        let m = Machine::builtin();
        let mut net = Network::parse("ib-hdr", &m).unwrap();
        net.devices = vec!["switch", "gba"];
        let p = predict(Shape { nodes: 4096, ppn: 48 }, &net, &m);
        assert!(by(&p, "switch").declined.as_deref().unwrap().contains("leaders in its root group"));
        assert!(by(&p, "gba").declined.as_deref().unwrap().contains("groups as a tree"));
        // Among 4,096 node roots a GBA needs 6 chunks, 13 groups: three stages.
        let hier = by(&p, "hierarchical (gba among roots)");
        assert!(hier.declined.is_none(), "{hier:?}");
        assert_eq!(hier.parts[2].ns, 3.0 * (net.put_ns + net.device_ns));
        assert_eq!(selected(&p).unwrap().backend, "hierarchical (gba among roots)");
        // 128 ranks fit one switch group: one stage.
        let p = predict(Shape { nodes: 128, ppn: 1 }, &net, &m);
        assert_eq!(by(&p, "switch").parts[1].ns, net.put_ns + net.device_ns);
    }

    #[test]
    fn profiles_and_durations_parse_and_bad_ones_say_what_to_use() {
        let m = Machine::builtin();
        assert_eq!(parse_ns("1.5us").unwrap(), 1500.0);
        assert_eq!(parse_ns("20").unwrap(), 20.0);
        assert!(parse_ns("fast").is_err());
        let c = Network::parse("custom:2us,10ns", &m).unwrap();
        assert_eq!((c.put_ns, c.gap_ns), (2000.0, 10.0));
        let e = Network::parse("warp", &m).unwrap_err();
        assert!(e.contains("ib-hdr") && e.contains("custom:PUT,GAP"), "{e}");
        for name in PROFILES {
            assert!(Network::parse(name, &m).is_ok());
        }
    }

    #[test]
    fn a64fx_on_one_node_is_two_syncs_around_the_cmg_leaders_rounds() {
        let m = Machine::builtin();
        let net = Network::parse("tofu-d", &m).unwrap();
        let p = predict(Shape { nodes: 1, ppn: 48 }, &net, &m);
        let a = by(&p, "a64fx");
        assert!(a.declined.is_none());
        assert_eq!(a.parts[0].ns, 2.0 * net.a64fx_sync_ns);
        assert_eq!(a.parts[1].ns, 2.0 * m.flag_ns, "4 CMG leaders: 2 rounds");
        let one_cmg = predict(Shape { nodes: 1, ppn: 12 }, &net, &m);
        assert_eq!(by(&one_cmg, "a64fx").ns(), net.a64fx_sync_ns);
        assert!(by(&predict(Shape { nodes: 2, ppn: 48 }, &net, &m), "a64fx").declined.is_some());
    }

    #[test]
    fn the_sweep_covers_1_to_4096_nodes_quickly() {
        let m = Machine::builtin();
        let net = Network::parse("ib-hdr", &m).unwrap();
        let start = Instant::now();
        let (text, rows) = sweep(48, &net, &m);
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(text.lines().count(), 2 + 13);
        assert!(rows.iter().any(|r| r.ranks == 4096));
    }

    #[test]
    fn calibration_round_trips_through_its_file() {
        let dir = std::env::temp_dir().join(format!("barrier-model-{}", std::process::id()));
        let path = dir.join("model-calibration");
        let m = Machine {
            flag_ns: 42.5,
            wake_ns: 3000.0,
            yield_ns: 800.0,
            device_ns: 70.0,
            cores: 2,
            source: "test".into(),
        };
        m.save(&path).unwrap();
        assert_eq!(Machine::load(&path).unwrap(), m);
        std::fs::write(&path, "flag_ns = lots\n").unwrap();
        assert!(Machine::load(&path).unwrap_err().contains("not a positive number"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
