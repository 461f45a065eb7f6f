//! Barrier latency as a program sees it: rank 0 prints the mean time per barrier of a loop of
//! `world.barrier()`, after a warm-up. Run it under the launcher with any backend, for example
//! `barrier run -n 2 --emulate gba -- target/release/examples/latency 100000` (arguments:
//! barriers to time, default 100,000; rounds, default 3, each printed; the best is the last line).

use std::time::Instant;

fn main() -> Result<(), barrier::Report> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: latency [BARRIERS (default 100000)] [ROUNDS (default 3)]";
    let barriers: u64 = match args.next() {
        Some(a) => a
            .parse()
            .map_err(|_| barrier::Report(barrier::Error::InvalidArgument(format!("{usage}: {a:?} is not a count"))))?,
        None => 100_000,
    };
    let rounds: u32 = match args.next() {
        Some(a) => a
            .parse()
            .map_err(|_| barrier::Report(barrier::Error::InvalidArgument(format!("{usage}: {a:?} is not a count"))))?,
        None => 3,
    };
    let universe = barrier::init()?;
    let world = universe.world();
    for _ in 0..(barriers / 10).max(1) {
        world.barrier()?;
    }
    let mut best = f64::INFINITY;
    for round in 1..=rounds {
        world.barrier()?;
        let start = Instant::now();
        for _ in 0..barriers {
            world.barrier()?;
        }
        let ns = start.elapsed().as_nanos() as f64 / barriers.max(1) as f64;
        best = best.min(ns);
        if world.rank() == 0 {
            println!("round {round}: {ns:.0} ns per barrier");
        }
    }
    if world.rank() == 0 {
        println!(
            "latency: {best:.0} ns per barrier (best of {rounds} rounds of {barriers}), {} ranks, backend {}, algorithm {}",
            world.size(),
            world.backend(),
            world.algorithm()
        );
    }
    Ok(())
}
