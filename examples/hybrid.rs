//! The hybrid layout A64FX systems run: a process per CMG, a thread per PE. Each process of the
//! job binds `THREADS` threads to the PEs of its own CMG (from the driver's `core_map`), runs
//! the correctness check on a communicator of those threads (the `a64fx` backend when the node
//! has the hardware barrier), and then the processes meet in a world barrier.
//!
//! ```sh
//! barrier run -n 2 --emulate a64fx -- target/release/examples/hybrid 12 2000
//! ```
//!
//! Without an A64FX node the threads run unpinned on the software barrier. Prints one line per
//! process and exits non-zero if any check fails.

use std::sync::atomic::Ordering;

use barrier::backends::a64fx;

fn main() -> std::process::ExitCode {
    // Errors print as sentences (a barrier error says what to do), not as debug dumps.
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hybrid: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().map_or(Ok(4), |a| a.parse())?;
    let iterations: u64 = args.next().map_or(Ok(1000), |a| a.parse())?;
    let universe = barrier::init()?;
    let world = universe.world();
    let params = barrier::Params::from_env();
    // This process's CMG: the world rank's, modulo the node's CMGs.
    let cpus = a64fx::node_info(&params).ok().and_then(|node| {
        let cmg = node.cmgs.get(world.rank() % node.cmgs.len().max(1))?;
        (cmg.pes.len() >= threads).then(|| cmg.pes[..threads].iter().map(|&(cpu, _)| cpu).collect::<Vec<_>>())
    });
    let mut job = barrier::threads::Job::new(threads).params(params);
    if let Some(cpus) = cpus.clone() {
        job = job.pin_cpus(cpus);
    }
    let out = job.run(|team| -> Result<(String, String), barrier::Error> {
        // Each thread bumps its own counter, then checks everyone's after every barrier.
        let counters = team.shared_window(team.size())?;
        let words = counters.words();
        for k in 1..=iterations {
            words[team.rank()].store(k, Ordering::Relaxed);
            team.barrier()?;
            if let Some((r, w)) = words.iter().enumerate().find(|(_, w)| w.load(Ordering::Relaxed) < k) {
                panic!(
                    "thread {} left barrier {k} while thread {r} had only reached {}",
                    team.rank(),
                    w.load(Ordering::Relaxed)
                );
            }
            team.barrier()?;
        }
        Ok((team.backend().to_string(), team.algorithm()))
    })?;
    let (backend, algorithm) = out.into_iter().next().expect("a team of at least one thread")?;
    println!(
        "process {} of {}: {threads} threads{} passed {iterations} barriers on {backend} ({algorithm})",
        world.rank(),
        world.size(),
        cpus.map(|c| format!(" on CPUs {}-{}", c[0], c[c.len() - 1])).unwrap_or_default()
    );
    world.barrier()?;
    Ok(())
}
