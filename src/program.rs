//! The correctness check as a program ([`main`]), shared by `examples/correctness.rs` and by
//! programs that register a backend of their own first (crates/barrier-ktree's example):
//!
//! ```text
//! PROGRAM [ITERATIONS] [--split] [--seed S] [--die RANK:ITER] [--skip RANK]
//! ```
//!
//! `--split` also runs the check on three sub-communicators (rank % 3) at the same time.
//! `--die R:I` makes rank R kill itself with SIGKILL before barrier I (launcher tests).
//! `--skip R` makes rank R skip the last barrier (timeout tests: the others must report R).

use std::process::ExitCode;

use crate::{stress, StressOptions};

/// The program: reads the arguments, joins the launcher's job (`barrier::init`), runs the
/// check on the world (and on split communicators with `--split`) and says how it went.
pub fn main() -> ExitCode {
    let mut opts = StressOptions::default();
    let mut split = false;
    let mut die: Option<(usize, u64)> = None;
    let mut skip: Option<usize> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--split" => split = true,
            "--seed" => opts.seed = args.next().and_then(|v| v.parse().ok()).expect("--seed N"),
            "--die" => {
                let v = args.next().expect("--die RANK:ITER");
                let (r, i) = v.split_once(':').expect("--die RANK:ITER");
                die = Some((r.parse().expect("rank"), i.parse().expect("iteration")));
            }
            "--skip" => skip = Some(args.next().and_then(|v| v.parse().ok()).expect("--skip RANK")),
            n => opts.iterations = n.parse().expect("iterations must be a number"),
        }
    }
    let universe = match barrier::init() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("correctness: init failed: {e}");
            return ExitCode::from(2);
        }
    };
    let world = universe.world();
    let me = world.rank();
    opts.die_before = die;
    if let Some(rank) = skip {
        let result = world.barrier();
        if rank == me {
            std::thread::sleep(std::time::Duration::from_secs(3));
            return ExitCode::SUCCESS;
        }
        return match result.and_then(|_| world.barrier()) {
            Ok(()) => {
                eprintln!("rank {me}: the barrier completed although rank {rank} never arrived");
                ExitCode::from(4)
            }
            Err(e) => {
                eprintln!("rank {me}: {e}");
                ExitCode::from(5)
            }
        };
    }
    let result = if split {
        let sub = world.split(me % 3, me).map(|s| s.expect("every rank has a color"));
        match sub {
            Err(e) => Err(e.into()),
            Ok(sub) => {
                // Interleave the sub-communicator's check with the world's.
                stress(&sub, &opts)
                    .and_then(|_| stress(world, &StressOptions { iterations: opts.iterations / 4, ..opts }))
                    .and_then(|n| {
                        stress(&sub, &StressOptions { iterations: opts.iterations / 4, ..opts }).map(|m| n + m)
                    })
            }
        }
    } else {
        stress(world, &opts)
    };
    match result {
        Ok(n) => {
            if me == 0 {
                println!(
                    "correctness: {} ranks passed {n} barriers ({}, {})",
                    world.size(),
                    world.backend(),
                    world.algorithm()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rank {me}: {e}");
            ExitCode::from(3)
        }
    }
}
