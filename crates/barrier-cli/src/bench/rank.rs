//! The rank side of a backend row: the hidden `barrier bench-rank` subcommand, run by the
//! launcher in every rank, times its barriers and prints the result lines the bench reads.

use super::stats::{timed_batches, Stats};

/// `iters` barriers on `comm` in timed batches of `batch` (ns per barrier for each batch); the
/// first error ends the timing and is returned.
pub(super) fn timed_barriers(comm: &barrier::Communicator, iters: u64, batch: u64) -> Result<Vec<f64>, barrier::Error> {
    let mut err = None;
    let samples = timed_batches(iters, batch, || {
        if err.is_none() {
            if let Err(e) = comm.barrier() {
                err = Some(e);
            }
        }
    });
    err.map_or(Ok(samples), Err)
}

/// Warm-up barriers of an oversubscribed measurement: at 8 ranks on 2 cores about 0.15 s, the
/// time the launcher's balancer takes to even out the worst start it meets.
pub const SETTLING_WARMUP: u64 = 20_000;

/// The body of one rank of a backend measurement (the hidden `bench-rank` subcommand).
pub fn rank_main(iters: u64, batch: u64) -> Result<(), barrier::Error> {
    let uni = barrier::init()?;
    let world = uni.world();
    // With more ranks than the machine has CPUs, the launcher evens out the ranks' placement
    // in the first tenths of a second (see `rebalance`): the warm-up covers that time
    // whatever --iters says. Every rank computes the same count (barriers are collective).
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let warmup = if world.size() > online { SETTLING_WARMUP } else { (iters / 10).min(20_000) };
    for _ in 0..warmup {
        world.barrier()?;
    }
    let network_before = world.network_ops();
    let switches_before = super::reference::process_switches();
    let samples = timed_barriers(world, iters, batch)?;
    let switches = super::reference::process_switches() - switches_before;
    let network = world.network_ops() - network_before;
    // Everyone finishes timing before anyone exits.
    world.barrier()?;
    println!("NETWORK\t{network}");
    println!("SWITCHES\t{switches}");
    if world.rank() == 0 {
        println!("RESULT\t{}\t{}\t{}", world.backend(), world.algorithm(), Stats::from_samples(samples).encode());
    }
    Ok(())
}
