//! The reference rows measured in the same run as the backends: the floor at each rank count
//! (the best of three raw protocols in pinned threads, [`raw_floor`]), `std::sync::Barrier` and
//! `hurdles::Barrier`, and the interleaved comparison of ours, the two-thread floor protocol
//! and hurdles (`--interleave`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use barrier::pad::CachePadded;

use super::stats::{timed_batches, Stats};

/// Context switches of this process so far, voluntary and involuntary, as the kernel counts
/// them (all its threads).
pub fn process_switches() -> u64 {
    // SAFETY: getrusage writes the struct it is given and has no other precondition.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    (usage.ru_nvcsw as u64).saturating_add(usage.ru_nivcsw as u64)
}

/// Context switches of the calling thread so far, voluntary and involuntary.
pub fn thread_switches() -> u64 {
    // SAFETY: getrusage writes the struct it is given and has no other precondition.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is valid on Linux (the only target).
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return 0;
    }
    (usage.ru_nvcsw as u64).saturating_add(usage.ru_nivcsw as u64)
}

/// The raw protocols the floor at a rank count is the best of: each a barrier at its barest,
/// with one writer per 256-byte block, epochs that only grow, and threads pinned one per core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawProtocol {
    /// ⌈log2 n⌉ rounds: in round r, thread i stores the epoch into round-r flag of thread
    /// (i + 2^r) mod n and waits for its own (at 2 threads: the two-thread floor).
    DisseminationFlags,
    /// Every other thread stores its own flag; thread 0 waits for them all, then stores one
    /// release flag that the others wait for.
    FlatGather,
    /// The same with a k-ary tree: a thread waits for its children's flags before storing its own.
    KaryGather(usize),
}

impl RawProtocol {
    /// The protocols measured at every rank count.
    pub const ALL: [RawProtocol; 3] =
        [RawProtocol::DisseminationFlags, RawProtocol::FlatGather, RawProtocol::KaryGather(4)];

    /// As the floor rows name it.
    pub fn name(self) -> String {
        match self {
            RawProtocol::DisseminationFlags => "raw dissemination flags".into(),
            RawProtocol::FlatGather => "raw flat gather + release flag".into(),
            RawProtocol::KaryGather(k) => format!("raw {k}-ary gather + release flag"),
        }
    }
}

/// One thread's part of a raw protocol: (flag to store, flag to wait for) per round, or its
/// children's flags, its own (none for thread 0) and the release flag.
enum RawPlan {
    Rounds(Vec<(usize, usize)>),
    Gather { children: Vec<usize>, up: Option<usize>, release: usize },
}

/// One writer's flag alone in a 256-byte block (two lines: no adjacent-line prefetch shares it).
#[repr(align(256))]
#[derive(Default)]
struct Block(AtomicU64);

#[inline(always)]
fn spin_until(flag: &AtomicU64, epoch: u64) {
    while flag.load(Ordering::Acquire) < epoch {
        std::hint::spin_loop();
    }
}

/// The floor protocol `protocol` at `n` threads pinned to the first `n` cores of this process's
/// affinity; thread 0's timings (ns per barrier per batch), and the process's context switches
/// per barrier (warm-up and thread start included). `n` must not exceed the cores: a raw
/// protocol only spins.
pub fn raw_floor(protocol: RawProtocol, n: usize, iters: u64, batch: u64) -> (Stats, f64) {
    let switches_before = process_switches();
    let cores = barrier::sys::affinity_cores();
    assert!(n >= 2 && n <= cores.len(), "raw floor of {n} threads on {} cores", cores.len());
    let rounds = barrier::rounds(n);
    // Dissemination: flags[i * rounds + r]; gathers: flags[i] up, flags[n] release.
    let flags: Arc<Vec<Block>> = Arc::new((0..n * rounds.max(1) + 1).map(|_| Block::default()).collect());
    let radix = match protocol {
        RawProtocol::DisseminationFlags => 0,
        RawProtocol::FlatGather => n - 1,
        RawProtocol::KaryGather(k) => k.max(1),
    };
    let warmup = (iters / 10).next_multiple_of(batch);
    let total = warmup + (iters / batch).max(1) * batch;
    // Each thread's flags, worked out before the clock starts: the protocol is loads and stores.
    let plan = move |i: usize| -> RawPlan {
        if radix == 0 {
            let rounds = (0..rounds).map(|r| (((i + (1 << r)) % n) * rounds + r, i * rounds + r)).collect();
            RawPlan::Rounds(rounds)
        } else {
            RawPlan::Gather {
                children: ((i * radix + 1)..(i * radix + radix + 1).min(n)).collect(),
                up: (i > 0).then_some(i),
                release: n,
            }
        }
    };
    let step = |flags: &[Block], plan: &RawPlan, e: u64| match plan {
        RawPlan::Rounds(rounds) => {
            for &(send, wait) in rounds {
                flags[send].0.store(e, Ordering::Release);
                spin_until(&flags[wait].0, e);
            }
        }
        RawPlan::Gather { children, up, release } => {
            for &c in children {
                spin_until(&flags[c].0, e);
            }
            match up {
                None => flags[*release].0.store(e, Ordering::Release),
                Some(up) => {
                    flags[*up].0.store(e, Ordering::Release);
                    spin_until(&flags[*release].0, e);
                }
            }
        }
    };
    let others: Vec<_> = (1..n)
        .map(|i| {
            let flags = flags.clone();
            let core = cores[i];
            let plan = plan(i);
            std::thread::spawn(move || {
                let _ = barrier::sys::pin_to_core(core);
                for e in 1..=total {
                    step(&flags, &plan, e);
                }
            })
        })
        .collect();
    let before = barrier::sys::affinity_cores();
    let _ = barrier::sys::pin_to_core(cores[0]);
    let mine = plan(0);
    let mut e = 0;
    for _ in 0..warmup {
        e += 1;
        step(&flags, &mine, e);
    }
    let samples = timed_batches(total - warmup, batch, || {
        e += 1;
        step(&flags, &mine, e);
    });
    for t in others {
        t.join().expect("raw floor thread");
    }
    // Restore the mask: the ranks launched later inherit this thread's affinity.
    let _ = barrier::sys::set_affinity(&before);
    let switches = (process_switches() - switches_before) as f64 / total as f64;
    (Stats::from_samples(samples), switches)
}

/// A thread barrier with `n` threads, each waiting through its own `waiter()`; thread 0's
/// timings. A signal (Ctrl-C) stops every thread after the same number of waits: thread 0
/// sets a limit two batches ahead of its own count, and no thread can be a whole batch ahead of
/// another (they are in one barrier), so every thread sees the limit in time.
/// Also returns the process's context switches per wait, warm-up included.
fn thread_barrier<W: FnMut() + Send + 'static>(
    n: usize,
    iters: u64,
    batch: u64,
    waiter: impl Fn() -> W,
) -> (Stats, f64) {
    let switches_before = process_switches();
    // Whole batches of warm-up: the timed batches then start on a batch boundary, all of them.
    let warmup = (iters / 10).min(10_000).next_multiple_of(batch);
    let batches = (iters / batch).max(1);
    let total = warmup + batches * batch;
    let limit = Arc::new(AtomicU64::new(u64::MAX));
    let others: Vec<_> = (1..n)
        .map(|_| {
            let mut wait = waiter();
            let limit = limit.clone();
            std::thread::spawn(move || {
                for i in 0..total {
                    if i % batch == 0 && i / batch >= limit.load(Ordering::Acquire) {
                        break;
                    }
                    wait();
                }
            })
        })
        .collect();
    let mut wait = waiter();
    let mut samples = Vec::with_capacity(batches as usize);
    let mut i = 0;
    while i < total {
        if i % batch == 0 {
            if limit.load(Ordering::Relaxed) == u64::MAX && barrier_launch::signals::peek().is_some() {
                limit.store(i / batch + 2, Ordering::Release);
            }
            if i / batch >= limit.load(Ordering::Relaxed) {
                break;
            }
        }
        // A batch is timed whole, from a boundary, once the warm-up is over.
        if i < warmup {
            wait();
            i += 1;
            continue;
        }
        let t = Instant::now();
        for _ in 0..batch {
            wait();
        }
        samples.push(t.elapsed().as_nanos() as f64 / batch as f64);
        i += batch;
    }
    for t in others {
        t.join().expect("reference barrier thread");
    }
    let switches = (process_switches() - switches_before) as f64 / i.max(1) as f64;
    if samples.is_empty() {
        samples.push(f64::NAN);
    }
    (Stats::from_samples(samples), switches)
}

/// `std::sync::Barrier` with `n` threads; thread 0's timings, and context switches per barrier.
pub fn std_barrier(n: usize, iters: u64, batch: u64) -> (Stats, f64) {
    let b = Arc::new(std::sync::Barrier::new(n));
    thread_barrier(n, iters, batch, || {
        let b = b.clone();
        move || {
            b.wait();
        }
    })
}

/// `hurdles::Barrier` (the fastest Rust barrier crate measured here) with `n` threads; thread
/// 0's timings, and context switches per barrier.
pub fn hurdles_barrier(n: usize, iters: u64, batch: u64) -> (Stats, f64) {
    let b = hurdles::Barrier::new(n);
    thread_barrier(n, iters, batch, || {
        let mut b = b.clone();
        move || {
            b.wait();
        }
    })
}

/// `barrier::sync::Barrier` (the drop-in for std's) with `n` threads; thread 0's timings, and
/// context switches per barrier.
pub fn sync_barrier(n: usize, iters: u64, batch: u64) -> (Stats, f64) {
    let b = Arc::new(barrier::sync::Barrier::new(n));
    thread_barrier(n, iters, batch, || {
        let b = b.clone();
        move || {
            b.wait();
        }
    })
}

/// `barrier::sync::Team` with `n` member threads; thread 0's timings, and context switches per
/// barrier.
pub fn team_barrier(n: usize, iters: u64, batch: u64) -> (Stats, f64) {
    let team = barrier::sync::Team::new(n);
    thread_barrier(n, iters, batch, || {
        let mut member = team.join().expect("one member per thread");
        move || member.wait().expect("a team barrier of the bench")
    })
}

/// Per-chunk latencies (ns per barrier) of the three contenders of [`interleave`].
#[derive(Debug, Clone, Default)]
pub struct Interleaved {
    /// The raw floor protocol.
    pub floor: Vec<f64>,
    /// This library's barrier (`Communicator::barrier`, thread mode, as configured).
    pub ours: Vec<f64>,
    /// `hurdles::Barrier`.
    pub hurdles: Vec<f64>,
}

/// Ours against the raw floor protocol and hurdles, timed chunk by chunk in the same two
/// threads pinned to two cores: on a machine whose speed changes from one moment to the next,
/// only figures taken side by side like this compare. The order of the three rotates every
/// chunk, and the communicator's barrier lines the threads up before each timed chunk.
pub fn interleave(chunks: usize, per_chunk: u64, params: barrier::Params) -> Result<Interleaved, String> {
    let cores = barrier::sys::affinity_cores();
    if cores.len() < 2 {
        return Err("--interleave needs two cores (the floor is a two-party protocol)".into());
    }
    let lines: [CachePadded<AtomicU64>; 2] = Default::default();
    let hb = hurdles::Barrier::new(2);
    let out = barrier::threads::Job::new(2)
        .params(params)
        .run(|w| -> Result<Interleaved, barrier::Error> {
            let me = w.rank();
            let _ = barrier::sys::pin_to_core(cores[me]);
            let mut hb = hb.clone();
            let mut epoch = 0u64;
            let mut times = Interleaved::default();
            for chunk in 0..chunks + 1 {
                for turn in 0..3 {
                    w.barrier()?;
                    let t = Instant::now();
                    match (chunk + turn) % 3 {
                        0 => {
                            for _ in 0..per_chunk {
                                epoch += 1;
                                lines[me].store(epoch, Ordering::Release);
                                while lines[1 - me].load(Ordering::Acquire) < epoch {
                                    std::hint::spin_loop();
                                }
                            }
                        }
                        1 => {
                            for _ in 0..per_chunk {
                                w.barrier()?;
                            }
                        }
                        _ => {
                            for _ in 0..per_chunk {
                                hb.wait();
                            }
                        }
                    }
                    let ns = t.elapsed().as_nanos() as f64 / per_chunk as f64;
                    // The first round warms up caches and the branch predictors: not kept.
                    if chunk > 0 {
                        match (chunk + turn) % 3 {
                            0 => times.floor.push(ns),
                            1 => times.ours.push(ns),
                            _ => times.hurdles.push(ns),
                        }
                    }
                }
            }
            Ok(times)
        })
        .map_err(|e| e.to_string())?;
    out.into_iter().next().expect("rank 0").map_err(|e| e.to_string())
}

/// The median of per-chunk ratios `a[i] / b[i]`, and their range.
pub fn ratio(a: &[f64], b: &[f64]) -> (f64, f64, f64) {
    let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    r.sort_by(|x, y| x.total_cmp(y));
    (r[r.len() / 2], r[0], r[r.len() - 1])
}

/// Runs and prints `barrier bench --interleave`.
pub fn run_interleave(iters: u64, chunk: u64) -> Result<(), String> {
    let chunks = (iters / chunk.max(1)).max(10) as usize;
    let t = interleave(chunks, chunk, barrier::Params::from_env())?;
    let med = |v: &[f64]| Stats::from_samples(v.to_vec()).median;
    println!(
        "barrier bench --interleave: 2 threads pinned to 2 cores, {chunks} chunks of {chunk} barriers per contender, order rotating"
    );
    println!("{:<12} {:>10} {:>22}", "contender", "median ns", "x floor (median, range)");
    println!("{:<12} {:>10.1} {:>22}", "floor", med(&t.floor), "1.00");
    for (name, v) in [("ours", &t.ours), ("hurdles", &t.hurdles)] {
        let (m, lo, hi) = ratio(v, &t.floor);
        println!("{:<12} {:>10.1} {:>10.3} ({lo:.2}-{hi:.2})", name, med(v), m);
    }
    Ok(())
}
