//! The model itself: this machine's and the network's constants, and each backend's
//! prediction for a job shape, from the backends' own plans.

use std::path::{Path, PathBuf};

use barrier::algo::tree::LocalTree;
use barrier::backends::offload::TreeShape;
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
    /// Ranks in the job.
    pub fn ranks(&self) -> usize {
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
pub(super) fn handoff(machine: &Machine, ranks_here: usize) -> f64 {
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
pub(super) fn crossing_puts(n: usize, per_node: usize, distance: usize) -> usize {
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
    // hierarchical: gather over a k-ary tree, an internode leg among node roots, the release
    // through one flag (one hand-over).
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
        parts.push(Part { name: "intranode release", ns: local });
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
