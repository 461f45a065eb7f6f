//! Barrier latency as a program sees it: rank 0 prints the mean time per barrier of a loop of
//! `world.barrier()`, after a warm-up. Run it under the launcher with any backend, for example
//! `barrier run -n 2 --emulate gba -- target/release/examples/latency 100000` (arguments:
//! barriers to time, default 100,000; rounds, default 3, each printed; the best is the last line).
//! A third argument `split` times instead `ibarrier()` completed by `wait()` against a
//! `while !request.test()? {}` loop, alternating round by round (issue 41 item 1: when ranks
//! outnumber cores, a test loop must cost about what `wait()` does).

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
    let split = args.next().is_some_and(|a| a == "split");
    let universe = barrier::init()?;
    let world = universe.world();
    if split {
        return split_rounds(world, barriers, rounds);
    }
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

/// `ibarrier` + `wait()` against `ibarrier` + a `test()` loop, alternating, `rounds` of each;
/// rank 0 prints each one's best and the ratio.
fn split_rounds(world: &barrier::Communicator, barriers: u64, rounds: u32) -> Result<(), barrier::Report> {
    let (mut wait_best, mut test_best) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..rounds {
        for by_test in [false, true] {
            world.barrier()?;
            let start = Instant::now();
            for _ in 0..barriers {
                let mut request = world.ibarrier()?;
                if by_test {
                    while !request.test()? {}
                } else {
                    request.wait()?;
                }
            }
            let ns = start.elapsed().as_nanos() as f64 / barriers.max(1) as f64;
            let best = if by_test { &mut test_best } else { &mut wait_best };
            *best = best.min(ns);
        }
    }
    if world.rank() == 0 {
        println!(
            "latency split: ibarrier + wait {wait_best:.0} ns, ibarrier + test loop {test_best:.0} ns per barrier (ratio {:.2}), {} ranks, waits {}",
            test_best / wait_best,
            world.size(),
            world.wait_policy()
        );
    }
    Ok(())
}
