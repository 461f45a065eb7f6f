//! The result as a table (and the line that says how far the floor moved), and the caption's
//! facts: the machine and the date.

use super::options::BenchOptions;
use super::stats::{Floors, Row, P99_SAMPLES};
pub(crate) use crate::record::{machine_name, today_utc};

pub(super) fn print_table(rows: &[Row], floors: &Floors, opts: &BenchOptions, rounds: u64, per_row: u64) {
    let on_nodes = opts.nodes > 1;
    println!(
        "barrier bench: {} cores, {} barriers per row in batches of {}{}; floor: the best raw protocol at each rank \
         count (more ranks than cores: the context switches a barrier needs){}",
        barrier::sys::available_cores(),
        per_row,
        opts.batch,
        if rounds > 1 { format!(" over {rounds} rounds taken in turn") } else { String::new() },
        if on_nodes { format!(", ranks on {} simulated nodes", opts.nodes) } else { String::new() }
    );
    let net_header = if on_nodes { format!(" {:>8}", "net ops") } else { String::new() };
    println!(
        "{:>5}  {:<14} {:<36} {:>11} {:>11} {:>11} {:>11} {:>8} {:>9} {:>10} {:>8}{net_header}",
        "ranks",
        "backend",
        "algorithm",
        "median ns",
        "p99 ns",
        "mean ns",
        "min ns",
        "x floor",
        "switches",
        "device ns",
        "host ns"
    );
    let ns = |v: f64| if v.is_finite() { format!("{v:.1}") } else { "-".into() };
    for r in rows {
        let emu = r.emulator_ns.map_or("-".to_string(), |e| format!("{e:.0}"));
        let host = r.host_ns().map_or("-".to_string(), |h| format!("{h:.0}"));
        let algorithm: String = r.algorithm.chars().take(36).collect();
        let p99 = if r.p99_meaningful(opts.batch) { ns(r.stats.p99) } else { "-".into() };
        let x = r.x_floor(floors.latency(r.ranks)).map_or("-".into(), |x| format!("{x:.2}"));
        let switches = r.switches.map_or("-".into(), |s| format!("{s:.2}"));
        let net = match (on_nodes, r.network_ops) {
            (false, _) => String::new(),
            (true, None) => format!(" {:>8}", "-"),
            (true, Some(ops)) => format!(" {ops:>8.2}"),
        };
        println!(
            "{:>5}  {:<14} {:<36} {:>11} {:>11} {:>11} {:>11} {:>8} {:>9} {:>10} {:>8}{net}",
            r.ranks,
            r.backend,
            algorithm,
            ns(r.stats.median),
            p99,
            ns(r.stats.mean),
            ns(r.stats.min),
            x,
            switches,
            emu,
            host
        );
    }
    if rows.iter().any(|r| floors.switches(r.ranks).is_some()) {
        println!(
            "switches: context switches per barrier, all ranks together, as the kernel counted them (thread rows: \
             warm-up included); with more ranks than cores the floor row gives the least a barrier needs, ranks \
             less cores"
        );
    }
    if on_nodes {
        println!(
            "net ops: operations per barrier that crossed between simulated nodes, all ranks together \
             (puts, atomics, device arrivals)"
        );
    }
    if rows.iter().any(|r| !r.p99_meaningful(opts.batch)) {
        println!(
            "p99 -: fewer than {P99_SAMPLES} timed batches per round, so the 99th percentile would only be the maximum"
        );
    }
    if rows.iter().any(|r| r.ranks < 2) {
        println!("x floor -: a 1-rank barrier waits for nobody; there is no floor to compare it with");
    }
}
