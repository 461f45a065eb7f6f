//! The model's output: the table for one shape, the sweep over node counts, JSON.

use std::fmt::Write as _;

use super::predict::{fastest, predict, selected, Machine, Network, Prediction, Shape};

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
pub fn sweep(ppn: usize, net: &Network, machine: &Machine) -> (String, Vec<crate::record::Row>) {
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
                rows.push(crate::record::Row {
                    backend: short(&p.backend),
                    algorithm: String::new(),
                    ranks: nodes,
                    iters: 0,
                    measurements: 0,
                    stats: crate::record::Stats { median: p.ns(), p99: p.ns(), mean: p.ns(), min: p.ns() },
                    emulator_ns: None,
                    network_ops: Some(p.network_ops),
                    switches: None,
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
