//! `barrier model --check-mpi`: the model against barriers over a real MPI's messages.
//!
//! For each layout (nodes × ranks per node, the nodes told apart by `BARRIER_MPI_NODE_BLOCK`)
//! and each way the node roots can meet (`BARRIER_MPI_INTERNODE=dissemination`: our rounds over
//! MPI point-to-point; `mpi`: MPI's barrier among the roots), one launch of `barrier bench
//! --mpi`'s C program under the interposer measures, in the same run and over the same network:
//!
//! * a ping-pong of 8-byte messages between the first ranks of nodes 0 and 1: half its round
//!   trip is the **one-way latency**, the network constant the predictions use;
//! * an exchange between the same two (`MPI_Sendrecv`: both send and receive at once), one
//!   step of a barrier: the predictions are made a second time with it as the step's cost,
//!   which says how much of the error is what a step adds to a one-way message;
//! * MPI's own barrier (`PMPI_Barrier` on `MPI_COMM_WORLD`) and ours (`MPI_Barrier`), in
//!   alternating chunks (medians).
//!
//! The predictions, per barrier, for `P` ranks on `N` nodes of `K`:
//!
//! * **MPI's own**: ⌈log2 P⌉ message steps of one one-way latency each (Open MPI's barrier
//!   algorithms for small communicators, two-process, recursive doubling and Bruck's, take
//!   ⌈log2 P⌉ steps where P is a power of two, each a message every rank sends and one it
//!   receives; recursive doubling takes more where it is not, which the model leaves out). Every message is
//!   counted as a network one, as it is where the MPI's only transport is TCP (the namespace
//!   runs of `tests/net`); a real node's MPI takes shared memory within the node.
//! * **ours**: the node's gather (tree depth × a hand-off on this machine), ⌈log2 N⌉ steps of
//!   one one-way latency among the roots (either way), and the release (one hand-off); nothing
//!   on a node of one rank.
//!
//! Where ranks outnumber this machine's cores (the namespaces share them), a message also waits
//! for its receiver's turn on a core: a hand-off of [`handoff`](super::predict) per step, and
//! the node's hand-offs are yield hand-offs (the same terms as the simulated nodes' check).
//!
//! The check prints each configuration's measurement, prediction and error, and the ratio of
//! ours to MPI's own; it is printed, not judged (a real MPI's timing on a shared machine moves
//! with everything else on it): docs/model.md keeps a table of runs and names the terms the
//! model misses where it is off by more than 25%.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use barrier::algo::tree::LocalTree;

use super::predict::{handoff, Machine, Part, Shape};

/// How the node roots meet (`BARRIER_MPI_INTERNODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootsWay {
    /// Our dissemination rounds over MPI point-to-point.
    Dissemination,
    /// MPI's barrier on a communicator of the roots.
    Mpi,
}

impl RootsWay {
    /// The value of `BARRIER_MPI_INTERNODE`.
    pub fn setting(self) -> &'static str {
        match self {
            RootsWay::Dissemination => "dissemination",
            RootsWay::Mpi => "mpi",
        }
    }

    /// What the interposer's description says of it.
    fn described(self) -> &'static str {
        match self {
            RootsWay::Dissemination => "internode dissemination over mpi-p2p among the node roots",
            RootsWay::Mpi => "internode MPI's barrier among the node roots",
        }
    }
}

/// One launch's measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Half the ping-pong's round trip between ranks 0 and K.
    pub one_way_ns: f64,
    /// One exchange between ranks 0 and K (both send and receive at once): a barrier's step.
    pub exchange_ns: f64,
    /// MPI's own barrier (median of the chunks).
    pub own_ns: f64,
    /// Ours under the interposer (median of the chunks).
    pub ours_ns: f64,
}

/// Reads the C program's report: `None` for a line it lacks.
pub fn parse_report(text: &str) -> Option<Measured> {
    // By what a line holds, not how it starts: a launcher option such as --tag-output puts a
    // prefix before every line.
    let median = |holds: &str| {
        text.lines().find(|l| l.contains(holds)).and_then(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "median")?;
            words.get(at + 1)?.parse::<f64>().ok()
        })
    };
    Some(Measured {
        one_way_ns: median("ping-pong rank 0 - ")?,
        exchange_ns: median("exchange rank 0 - ")?,
        own_ns: median("PMPI_Barrier (the MPI library)")?,
        ours_ns: median("MPI_Barrier (this process's)")?,
    })
}

/// The predictions for a layout from the cost of one message step (the ping-pong's one-way
/// latency, or an exchange): MPI's own barrier, and ours (either way among the roots), in ns per
/// barrier, each with its parts.
pub fn predict_over_mpi(shape: Shape, one_way_ns: f64, machine: &Machine) -> (Vec<Part>, Vec<Part>) {
    let ranks = shape.ranks();
    let local = handoff(machine, ranks);
    let turn = if ranks > machine.cores { local } else { 0.0 };
    let part = |name, ns| Part { name, ns };
    let steps = |members: usize| barrier::rounds(members) as f64;
    let mut own = vec![part("message steps", steps(ranks) * one_way_ns)];
    let mut ours = Vec::new();
    if turn > 0.0 {
        own.push(part(TURN, steps(ranks) * turn));
    }
    if shape.ppn > 1 {
        let tree = LocalTree::new(shape.ppn, barrier::backends::hierarchical::DEFAULT_RADIX);
        ours.push(part("intranode gather", tree.depth() as f64 * local));
    }
    ours.push(part("message steps among the node roots", steps(shape.nodes) * one_way_ns));
    if turn > 0.0 {
        ours.push(part(TURN, steps(shape.nodes) * turn));
    }
    if shape.ppn > 1 {
        ours.push(part("intranode release", local));
    }
    (own, ours)
}

const TURN: &str = "waiting for the receiver's turn on a core";

/// One row of the check.
#[derive(Clone, Debug, PartialEq)]
pub struct MpiCheck {
    /// The layout.
    pub shape: Shape,
    /// How the roots met.
    pub way: RootsWay,
    /// What the launch measured.
    pub measured: Measured,
    /// Predicted from the ping-pong (a step costs one one-way latency): MPI's own barrier,
    /// ours.
    pub from_one_way: (f64, f64),
    /// Predicted from the exchange (a step costs one exchange): MPI's own barrier, ours.
    pub from_exchange: (f64, f64),
}

impl MpiCheck {
    /// Measured over predicted, minus one, for MPI's own barrier and ours.
    pub fn errors(&self, predicted: (f64, f64)) -> (f64, f64) {
        (self.measured.own_ns / predicted.0 - 1.0, self.measured.ours_ns / predicted.1 - 1.0)
    }
}

/// Parses `2x1,3x1` into shapes.
pub fn parse_layouts(text: &str) -> Result<Vec<Shape>, String> {
    text.split(',')
        .map(|l| {
            let (n, k) = l.trim().split_once('x').ok_or_else(|| format!("--layouts {l:?}: use NODESxRANKS, as 2x1"))?;
            let n: usize = n.parse().map_err(|_| format!("--layouts {l:?}: {n:?} is not a node count"))?;
            let k: usize = k.parse().map_err(|_| format!("--layouts {l:?}: {k:?} is not a count of ranks"))?;
            if n < 2 || k < 1 {
                return Err(format!("--layouts {l:?}: a layout needs 2 nodes or more and a rank on each"));
            }
            Ok(Shape { nodes: n, ppn: k })
        })
        .collect()
}

/// The options of the check.
#[derive(Clone, Debug)]
pub struct MpiCheckOptions {
    /// The layouts.
    pub layouts: Vec<Shape>,
    /// Barriers (and round trips) per chunk.
    pub iters: u64,
    /// Each rank is started through this program (for example `tests/net/in-node.sh`, which
    /// puts it in its node's network namespace).
    pub wrapper: Option<PathBuf>,
    /// The interposer.
    pub preload: PathBuf,
}

/// Chunks per launch.
const CHUNKS: u64 = 11;

/// Runs the check: one launch per layout and way (Open MPI's `mpirun`, or `MPIRUN`; extra
/// launcher options from `MPIRUN_ARGS`, split on spaces), each predicted from its own ping-pong.
pub fn check_mpi(opts: &MpiCheckOptions, machine: &Machine) -> Result<Vec<MpiCheck>, String> {
    let program = crate::mpibench::program();
    if !crate::mpibench::check_interposer(&opts.preload, &program.launcher())? {
        return Err(format!(
            "{} is not Open MPI's mpirun, whose options (-x, --oversubscribe) the check passes: set MPIRUN",
            program.launcher()
        ));
    }
    let dir = std::env::temp_dir().join(format!("barrier-model-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let result = program.build(&dir).and_then(|prog| {
        let mut out = Vec::new();
        for &shape in &opts.layouts {
            for way in [RootsWay::Dissemination, RootsWay::Mpi] {
                let text = launch(&program.launcher(), opts, &prog, shape, way)?;
                let measured = parse_report(&text).ok_or_else(|| {
                    format!(
                        "{}x{} ({}): the program's report lacks a line it prints:\n{text}",
                        shape.nodes,
                        shape.ppn,
                        way.setting()
                    )
                })?;
                if !text.contains(way.described()) {
                    return Err(format!(
                        "{}x{}: BARRIER_MPI_INTERNODE={} was not what the interposer ran (it says otherwise):\n{text}",
                        shape.nodes,
                        shape.ppn,
                        way.setting()
                    ));
                }
                let total = |step_ns: f64| {
                    let (own, ours) = predict_over_mpi(shape, step_ns, machine);
                    (own.iter().map(|p| p.ns).sum(), ours.iter().map(|p| p.ns).sum())
                };
                out.push(MpiCheck {
                    shape,
                    way,
                    from_one_way: total(measured.one_way_ns),
                    from_exchange: total(measured.exchange_ns),
                    measured,
                });
            }
        }
        Ok(out)
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A launch's time limit: every launch takes a few seconds (a second of warm-up, then the
/// chunks); one past this hangs, and is killed.
const LAUNCH_LIMIT: Duration = Duration::from_secs(300);

fn launch(mpirun: &str, opts: &MpiCheckOptions, prog: &Path, shape: Shape, way: RootsWay) -> Result<String, String> {
    let mut cmd = Command::new(mpirun);
    // Open MPI's ranks on this machine inherit the launcher's environment: the caller's own
    // barrier settings (a BARRIER_TIMEOUT, a forced BARRIER_BACKEND) would change what is
    // measured, and NET_RANKS_PER_NODE where the wrapper puts each rank.
    for (var, _) in std::env::vars_os() {
        if var.to_str().is_some_and(|v| v.starts_with("BARRIER_") || v == "NET_RANKS_PER_NODE") {
            cmd.env_remove(var);
        }
    }
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    if let Ok(extra) = std::env::var("MPIRUN_ARGS") {
        cmd.args(extra.split_whitespace());
    }
    cmd.arg("--oversubscribe");
    for (var, value) in [
        ("LD_PRELOAD", opts.preload.display().to_string()),
        ("BARRIER_MPI_NODE_BLOCK", shape.ppn.to_string()),
        ("BARRIER_MPI_INTERNODE", way.setting().to_string()),
        ("BARRIER_VERBOSE", "1".to_string()),
    ] {
        cmd.arg("-x").arg(format!("{var}={value}"));
    }
    cmd.arg("-np").arg(shape.ranks().to_string());
    if let Some(w) = &opts.wrapper {
        cmd.arg(w);
    }
    cmd.arg(prog).arg(opts.iters.to_string()).arg(CHUNKS.to_string());
    // The output goes to a file (read once the launch ends), so that waiting can stop at the
    // limit without a reader thread.
    let log = prog.with_extension(format!("{}x{}-{}.log", shape.nodes, shape.ppn, way.setting()));
    let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
    let mut child = cmd
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot run {mpirun} ({e}); install Open MPI or set MPIRUN"))?;
    let began = Instant::now();
    let status = loop {
        match child.try_wait().map_err(|e| format!("waiting for {mpirun}: {e}"))? {
            Some(status) => break Some(status),
            None if began.elapsed() > LAUNCH_LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    match status {
        None => Err(format!(
            "{mpirun} -np {} was still running after {} s (a hang), and was killed:\n{text}",
            shape.ranks(),
            LAUNCH_LIMIT.as_secs()
        )),
        Some(status) if !status.success() => Err(format!("{mpirun} -np {} failed ({status}):\n{text}", shape.ranks())),
        Some(_) => Ok(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "MPI library: Open MPI v4.1.4\n\
        ranks 4, 11 chunks of 300 barriers each, alternating\n\
        PMPI_Barrier (the MPI library)     median      26561 ns   best      25001 ns\n\
        MPI_Barrier (this process's)       median      11086 ns   best      10527 ns\n\
        ratio MPI_Barrier / PMPI_Barrier: 0.417\n\
        ping-pong rank 0 - rank 2: one way median       8135 ns   best       7702 ns\n\
        exchange rank 0 - rank 2: per exchange median       9563 ns   best       9001 ns\n";

    #[test]
    fn the_report_is_read_by_its_median_columns() {
        let m = parse_report(REPORT).expect("every line is there");
        assert_eq!(m, Measured { one_way_ns: 8135.0, exchange_ns: 9563.0, own_ns: 26561.0, ours_ns: 11086.0 });
        // Lines tagged by the launcher (--tag-output) read the same.
        let tagged: String = REPORT.lines().map(|l| format!("[1,0]<stdout>:{l}\n")).collect();
        assert_eq!(parse_report(&tagged), Some(m));
        // A report without the ping-pong (one node) is not a measurement of the network.
        let without: String = REPORT.lines().filter(|l| !l.starts_with("ping-pong")).collect::<Vec<_>>().join("\n");
        assert_eq!(parse_report(&without), None);
    }

    #[test]
    fn layouts_need_two_nodes_and_a_rank_each() {
        assert_eq!(parse_layouts("2x1, 4x2").unwrap(), vec![Shape { nodes: 2, ppn: 1 }, Shape { nodes: 4, ppn: 2 }]);
        for bad in ["1x2", "2x0", "2", "ax1", "2x"] {
            assert!(parse_layouts(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_predictions_count_steps_from_the_rank_and_node_counts() {
        let machine = Machine { cores: 16, flag_ns: 100.0, yield_ns: 1000.0, ..Machine::builtin() };
        let sum = |parts: &[Part]| parts.iter().map(|p| p.ns).sum::<f64>();
        // 2 nodes of 1: one step each; nothing on a node of one rank.
        let (own, ours) = predict_over_mpi(Shape { nodes: 2, ppn: 1 }, 10_000.0, &machine);
        assert_eq!((sum(&own), sum(&ours)), (10_000.0, 10_000.0));
        // 4 nodes of 2 (8 ranks, 16 cores): MPI's own takes 3 steps; ours 2 among the roots plus
        // a gather level and the release.
        let (own, ours) = predict_over_mpi(Shape { nodes: 4, ppn: 2 }, 10_000.0, &machine);
        assert_eq!(sum(&own), 30_000.0);
        assert_eq!(sum(&ours), 20_000.0 + 100.0 + 100.0);
        // Past the cores, a step also waits for the receiver's turn (ranks / cores yields).
        let two_cores = Machine { cores: 2, ..machine };
        let (own, _) = predict_over_mpi(Shape { nodes: 4, ppn: 1 }, 10_000.0, &two_cores);
        assert_eq!(sum(&own), 2.0 * (10_000.0 + 2.0 * 1000.0));
        assert!(own.iter().any(|p| p.name == TURN));
    }
}
