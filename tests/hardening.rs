//! Faults and bad input end in a clear error, never a hang, an early release or undefined
//! behaviour. Each test names the failure it covers; docs/failures.md says what every rank sees.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use barrier::{threads::Job, Error, Params};
use barrier_launch::{launch, JobSpec};
use common::faults;

/// Runs `f` on a thread and fails the test if it has not finished within `limit` (a hang).
fn within<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{what}: still running after {limit:?} (a hang)"),
    }
}

#[test]
fn a_bad_setting_on_one_rank_fails_every_rank_at_once() {
    // Rank 1 alone gets the bad value and then stays alive for 20 s (a program that handles the
    // error): the others must fail at once with an error that names the setting and the rank.
    for (name, value) in [
        ("BARRIER_GBA_DISABLE", "maybe"),
        ("BARRIER_TIMEOUT", "abc"),
        ("BARRIER_WAIT_POLICY", "bogus"),
        ("BARRIER_SPIN_COUNT", "lots"),
    ] {
        let script = format!("[ \"$BARRIER_RANK\" = 1 ] && export {name}={value}; exec \"$@\"");
        let report = faults(3, Some(&script), &["linger-on-error"], &[]);
        assert!(report.elapsed < Duration::from_secs(10), "{name}: the job took {:?}", report.elapsed);
        // (Rank 1's own message may be cut short: the launcher stops it once the others fail.)
        for r in [0, 2] {
            let err = &report.stderr[r];
            assert!(
                err.contains("world rank 1 rejected its value of") && err.contains(name),
                "{name}: rank {r}: {err}"
            );
        }
    }
}

#[test]
fn sigusr1_to_the_launcher_reaches_every_rank_and_the_job_goes_on() {
    use std::io::BufRead;
    let faults = common::example("faults");
    let launcher = faults.parent().and_then(|e| e.parent()).expect("target/<profile>").join("barrier");
    let mut child = std::process::Command::new(&launcher)
        .args(["run", "-n", "2", "--"])
        .arg(&faults)
        .arg("wait-usr1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting barrier run");
    // (The example says what it does on stderr.)
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut ready = 0;
    let mut said = Vec::new();
    while ready < 2 {
        let line = lines.next().expect("a rank's line").unwrap();
        ready += usize::from(line.ends_with("ready"));
        said.push(line);
    }
    // SAFETY: kill sends a signal to the launcher we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) };
    said.extend(lines.map_while(Result::ok));
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {said:?}");
    assert_eq!(said.iter().filter(|l| l.ends_with("SIGUSR1 received")).count(), 2, "{said:?}");
}

#[test]
fn a_rank_that_writes_over_the_header_is_reported_and_nothing_crashes() {
    // Rank 1 sets a huge world, moves the rank table past the end, names rank 5 (of 3) in the
    // abort word and exits 3: the launcher keeps the layout it made (no write out of bounds, no
    // index out of range) and reports a rank of the job that ended: rank 1 with its 3, or a
    // rank that the abort stopped first with its error status (5); never a crash.
    let report = within(Duration::from_secs(60), "corrupt header", || faults(3, None, &["corrupt-header"], &[]));
    let failure = report.failure.as_ref().expect("the job fails");
    let expected = match failure.rank {
        1 => barrier_launch::RankEnd::Exited(3),
        _ => barrier_launch::RankEnd::Exited(5),
    };
    assert!(failure.rank < 3 && failure.end == expected, "{failure:?}");
    for (r, err) in report.stderr.iter().enumerate() {
        assert!(!err.contains("panicked") && !err.contains("out of bounds"), "rank {r}: {err}");
    }
}

#[test]
fn a_backend_list_on_one_rank_fails_every_rank_at_once() {
    // BARRIER_BACKEND's names are checked by the selector, which agrees on backends by name (a
    // program may register its own on some ranks only): a list set on one rank is a mismatch
    // that every rank reports at once, whether or not the name exists.
    for value in ["nonesuch", "gba"] {
        let script = format!("[ \"$BARRIER_RANK\" = 1 ] && export BARRIER_BACKEND={value}; exec \"$@\"");
        let report = faults(3, Some(&script), &["linger-on-error"], &[]);
        assert!(report.elapsed < Duration::from_secs(10), "{value}: the job took {:?}", report.elapsed);
        for r in [0, 2] {
            let err = &report.stderr[r];
            assert!(
                err.contains("BARRIER_BACKEND is not the same on every rank: world ranks [1]"),
                "{value}: rank {r}: {err}"
            );
        }
    }
    // The same unknown name on every rank: refused on every rank, with the names it knows.
    let report = faults(3, None, &["stall", "0", "0"], &[("BARRIER_BACKEND", "nonesuch")]);
    assert!(!report.success());
    assert!(report.stderr.iter().any(|e| e.contains("nonesuch") && e.contains("dissemination")), "{:?}", report.stderr);
}

#[test]
fn a_failed_collective_call_breaks_the_communicator() {
    let p = Params::defaults_only().set("BARRIER_TIMEOUT", "200ms");
    let out = Job::new(2)
        .params(p)
        .run(|w| {
            if w.rank() == 1 {
                std::thread::sleep(Duration::from_millis(700));
                return vec![w.split(0u32, 0).map(|_| ())];
            }
            // The first call times out; a retry must not run with this rank's control epoch
            // out of step with the others': every later call fails.
            vec![
                w.split(0u32, 0).map(|_| ()),
                w.split(0u32, 0).map(|_| ()),
                w.dup().map(|_| ()),
                w.shared_window(4).map(|_| ()),
                w.barrier(),
            ]
        })
        .unwrap();
    let rank0 = &out[0];
    assert!(matches!(rank0[0], Err(Error::Timeout { .. })), "{:?}", rank0[0]);
    for later in &rank0[1..] {
        match later {
            Err(Error::Broken(why)) => assert!(why.contains("timed out"), "{why}"),
            other => panic!("a call after a failed collective must fail, got {other:?}"),
        }
    }
    assert!(out[1][0].is_err(), "rank 1's late split cannot complete: {:?}", out[1][0]);
}

#[test]
fn a_rank_that_panics_holding_a_request_does_not_deadlock_the_job() {
    // Rank 0 holds an ibarrier on the world and panics while the others wait in a dup: the
    // request's drop must not wait for a barrier the others will never join.
    let outcome = within(Duration::from_secs(30), "panic with a pending request", || {
        std::panic::catch_unwind(|| {
            Job::new(3).params(Params::defaults_only()).run(|w| {
                if w.rank() == 0 {
                    let _req = w.ibarrier().unwrap();
                    panic!("rank 0 fails on purpose while holding a request");
                }
                w.dup().map(|_| ())
            })
        })
    });
    assert!(outcome.is_err(), "the panic must reach the caller");
}

#[test]
fn a_communicator_moved_to_another_thread_outlives_its_ranks_function() {
    // Thread mode: rank 1 hands a duplicate to a thread of its own and returns. The duplicate
    // is alive: the others' barriers on it must complete, not fail because rank 1 "returned".
    let out = within(Duration::from_secs(30), "a moved communicator", || {
        Job::new(3)
            .params(Params::defaults_only().set("BARRIER_TIMEOUT", "20s"))
            .run(|w| {
                let dup = w.dup().unwrap();
                if w.rank() == 1 {
                    let worker = std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(300));
                        (0..50).try_for_each(|_| dup.barrier())
                    });
                    return Some(worker);
                }
                (0..50).try_for_each(|_| dup.barrier()).unwrap();
                None
            })
            .unwrap()
    });
    for worker in out.into_iter().flatten() {
        worker.join().unwrap().unwrap();
    }
}

#[test]
fn a_barrier_queued_behind_requests_is_not_an_arrival() {
    // Rank 1 starts two ibarriers (the second queued behind the first) and then blocks
    // elsewhere without completing them. Rank 0's second barrier times out: the report must
    // name rank 1, whose module never got that barrier, not "nobody" (it used to look arrived).
    let out = within(Duration::from_secs(30), "queued requests", || {
        Job::new(2)
            .params(Params::defaults_only().set("BARRIER_TIMEOUT", "500ms"))
            .run(|w| {
                if w.rank() == 1 {
                    let first = w.ibarrier().unwrap();
                    let second = w.ibarrier().unwrap();
                    std::thread::sleep(Duration::from_millis(1500));
                    // Rank 0 has given up by now: these fail, as they should.
                    let _ = first.wait();
                    let _ = second.wait();
                    return None;
                }
                w.barrier().unwrap();
                Some(w.barrier().unwrap_err())
            })
            .unwrap()
    });
    match out[0].as_ref() {
        Some(Error::Timeout { missing, .. }) => assert_eq!(missing, &[1], "{}", out[0].as_ref().unwrap()),
        other => panic!("expected a timeout naming rank 1, got {other:?}"),
    }
}

#[test]
fn a_window_that_fails_because_a_rank_left_is_given_back() {
    // Rank 2 drops the duplicate while ranks 0 and 1 ask it for a window: their call fails
    // (rank 2 left), and the block rank 0 took for the window must come back to the segment.
    let out = Job::new(3)
        .params(Params::defaults_only())
        .run(|w| {
            let baseline = w.segment_usage().0;
            let dup = w.dup().unwrap();
            let failed = if w.rank() == 2 {
                drop(dup);
                None
            } else {
                let err = dup.shared_window(50_000).map(drop).unwrap_err();
                drop(dup);
                Some(err.to_string())
            };
            w.barrier().unwrap();
            (failed, baseline, w.segment_usage().0)
        })
        .unwrap();
    for (failed, baseline, after) in out {
        if let Some(err) = failed {
            assert!(err.contains("left"), "{err}");
        }
        assert_eq!(after, baseline, "the window's block (and the duplicate's region) must be given back");
    }
}

#[test]
fn a_rank_that_exits_early_is_named_within_seconds() {
    // No timeout: the waiters learn from the launcher that rank 2 exited (status 0) without
    // leaving the communicator.
    let report = faults(3, None, &["exit-early", "2"], &[]);
    assert!(report.elapsed < Duration::from_secs(10), "took {:?}", report.elapsed);
    // The first waiter to give up fails the job; the launcher may stop the other before it
    // has printed its own (identical) verdict.
    let first = report.failure.as_ref().expect("the waiters fail").rank;
    assert!(first < 2, "rank 2 exited cleanly; rank {first} failed");
    {
        let (r, err) = (first, &report.stderr[first]);
        assert!(
            err.contains("rank 2 (world rank 2) exited with status 0 without leaving the communicator")
                && err.contains("barrier 2 can never complete"),
            "rank {r}: {err}"
        );
    }
}

#[test]
fn a_long_wait_is_reported_once_and_goes_on() {
    let report = faults(3, None, &["stall", "2", "1500"], &[("BARRIER_STALL_REPORT", "300ms")]);
    assert!(report.success(), "{:?}", report.stderr);
    for r in [0, 1] {
        let err = &report.stderr[r];
        assert_eq!(err.matches("has waited").count(), 1, "one report per wait: {err}");
        assert!(err.contains("not arrived yet: world ranks [2]") && err.contains("still waiting"), "{err}");
        assert!(err.contains(&format!("rank {r}: done")), "{err}");
    }
}

#[test]
fn a_subprocess_of_a_rank_cannot_join_the_job() {
    let report = faults(2, None, &["spawn-child"], &[]);
    assert!(report.success(), "{:?}", report.stderr);
    let err = &report.stderr[0];
    assert!(err.contains("child: init refused") && err.contains("not an open descriptor"), "{err}");
}

#[test]
fn a_subprocess_given_the_job_descriptor_still_cannot_join_as_a_second_rank() {
    // Rank 0 hands its segment descriptor to the child on purpose: the rank table refuses it.
    let report = faults(2, None, &["spawn-child", "keep-fd"], &[]);
    assert!(report.success(), "{:?}", report.stderr);
    let err = &report.stderr[0];
    assert!(err.contains("child: init refused") && err.contains("has already joined as process"), "{err}");
}

#[test]
fn a_refused_allocation_leaves_the_rest_of_the_segment_usable() {
    // The sequence the protocol review ran: in a 1 MiB pool a 60,000-word window fits, a
    // 70,000-word one is refused, both go; then small windows and dups must fit again (the
    // refused one used to push the bump pointer past the end for good: "0 free").
    let out = Job::new(2)
        .params(Params::defaults_only().set("BARRIER_SHM_POOL_BYTES", "1048576"))
        .run(|w| {
            let baseline = w.segment_usage().0;
            let fits = w.shared_window(60_000).map(drop);
            let refused = w.shared_window(70_000).map(drop).unwrap_err().to_string();
            let back = w.segment_usage().0;
            let small = w.shared_window(16).map(|win| win.words().len());
            let dup = w.dup().map(|d| d.size());
            (baseline, fits, refused, back, small, dup)
        })
        .unwrap();
    for (baseline, fits, refused, back, small, dup) in out {
        fits.unwrap();
        assert!(refused.contains("needed"), "{refused}");
        assert!(back <= baseline + 4096, "usage {back} after both windows went, {baseline} before");
        assert_eq!(small.unwrap(), 16);
        assert_eq!(dup.unwrap(), 2);
    }
}

#[test]
fn shared_window_sizes_are_checked() {
    let out = Job::new(2)
        .params(Params::defaults_only())
        .run(|w| {
            let huge = w.shared_window((1 << 61) + 1).map(|_| ()).unwrap_err().to_string();
            let mismatch = w.shared_window(if w.rank() == 0 { 4 } else { 8 }).map(|_| ()).unwrap_err().to_string();
            let fine = w.shared_window(4).map(|win| win.words().len());
            (huge, mismatch, fine)
        })
        .unwrap();
    for (huge, mismatch, fine) in out {
        assert!(huge.contains("do not fit"), "{huge}");
        assert!(mismatch.contains("same length"), "{mismatch}");
        assert_eq!(fine.unwrap(), 4);
    }
}

#[test]
fn the_launcher_reaps_only_its_own_ranks() {
    let _machine = common::one_job_at_a_time();
    // A child of the calling program that ends while the job runs must still be the caller's
    // to wait for.
    let mut mine = std::process::Command::new("sleep").arg("0.2").spawn().unwrap();
    let mut spec = JobSpec::new(2, "sleep");
    spec.args = vec!["0.8".into()];
    let report = launch(&spec).unwrap();
    assert!(report.success());
    let status = mine.wait().expect("the caller's own child was reaped by the launcher");
    assert!(status.success());
}

#[test]
fn the_launcher_removes_its_signal_handlers_when_it_returns() {
    let _machine = common::one_job_at_a_time();
    let handler = || {
        // SAFETY: sigaction with a null new action only reads the current one into `old`.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGINT, std::ptr::null(), &mut old);
            old.sa_sigaction
        }
    };
    let before = handler();
    assert!(launch(&JobSpec::new(1, "true")).unwrap().success());
    assert_eq!(handler(), before);
}

#[test]
fn a_job_that_does_not_fit_the_machine_is_refused_before_anything_starts() {
    let (limit, _) = barrier_launch::proc::max_ranks();
    let start = Instant::now();
    let err = launch(&JobSpec::new(limit + 1, "true")).unwrap_err().to_string();
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(err.contains("more ranks than this machine can hold") && err.contains("at most"), "{err}");
}

mod random_programs {
    //! Random programs of collective calls, the same on every rank except, sometimes, one rank
    //! that deviates (skips a call, returns early, panics). Every run must end (bounded by the
    //! timeout, no hang), every barrier that completes must be correct, and every error must
    //! say what happened.

    use super::*;
    use barrier::{Communicator, SharedWindow};
    use proptest::prelude::*;
    use std::sync::atomic::Ordering;

    /// Words between two ranks' slots in a window: one 128-byte line.
    const STRIDE: usize = 16;

    #[derive(Clone, Copy, Debug)]
    enum Op {
        Barrier,
        IBarrier,
        Split(u32),
        Dup,
        Pop,
        Sleep(u64),
    }

    #[derive(Clone, Copy, Debug)]
    enum Deviation {
        Skip,
        Return,
        Panic,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Barrier),
            3 => Just(Op::IBarrier),
            1 => (1u32..4).prop_map(Op::Split),
            1 => Just(Op::Dup),
            1 => Just(Op::Pop),
            1 => (0u64..300).prop_map(Op::Sleep),
        ]
    }

    /// A barrier on `comm` checked through its window: before barrier e every rank stores e;
    /// after it, every member's value must be e or e + 1 (a lower one is an early release).
    fn checked<T>(
        comm: &Communicator,
        win: &SharedWindow,
        run: impl FnOnce(&Communicator) -> Result<T, Error>,
    ) -> Result<(), String> {
        let words = win.words();
        let e = comm.epoch() + 1;
        words[comm.rank() * STRIDE].store(e, Ordering::Relaxed);
        run(comm).map_err(|err| describe(&err))?;
        for peer in 0..comm.size() {
            let seen = words[peer * STRIDE].load(Ordering::Relaxed);
            if seen < e || seen > e + 1 {
                return Err(format!("VIOLATION: after barrier {e} rank {} saw rank {peer} at {seen}", comm.rank()));
            }
        }
        Ok(())
    }

    /// Every error must be one that says what happened; anything else fails the test.
    fn describe(err: &Error) -> String {
        let msg = err.to_string();
        let named = match err {
            Error::Timeout { missing, missing_world, .. } => {
                !missing.is_empty() && missing.len() == missing_world.len()
            }
            Error::RankLeft { .. } | Error::Broken(_) | Error::Aborted { .. } => true,
            _ => false,
        };
        if named && !msg.is_empty() {
            format!("error: {msg}")
        } else {
            format!("UNEXPLAINED: {err:?}")
        }
    }

    fn with_window(comm: Communicator) -> Result<(Communicator, SharedWindow), String> {
        let win = comm.shared_window(comm.size() * STRIDE).map_err(|e| describe(&e))?;
        Ok((comm, win))
    }

    fn run_rank(
        world: Communicator,
        ops: &[Op],
        seed: u64,
        deviation: Option<(usize, usize, Deviation)>,
    ) -> Result<(), String> {
        let me = world.rank();
        let mut rng = seed ^ (me as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut stack = vec![with_window(world)?];
        for (i, &op) in ops.iter().enumerate() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng.is_multiple_of(4) {
                std::thread::sleep(Duration::from_micros(rng % 200));
            }
            match deviation {
                Some((who, at, Deviation::Skip)) if who == me && at == i => continue,
                Some((who, at, Deviation::Return)) if who == me && at == i => return Ok(()),
                Some((who, at, Deviation::Panic)) if who == me && at == i => panic!("rank {me} deviates by panicking"),
                _ => {}
            }
            let (comm, win) = stack.last().expect("the world stays");
            match op {
                Op::Barrier => checked(comm, win, |c| c.barrier())?,
                Op::IBarrier => checked(comm, win, |c| {
                    let mut req = c.ibarrier()?;
                    while !req.test()? {
                        std::thread::yield_now();
                    }
                    Ok(())
                })?,
                Op::Split(k) => {
                    let sub = comm.split(comm.rank() % k as usize, 0).map_err(|e| describe(&e))?;
                    stack.push(with_window(sub.expect("every rank has a color"))?);
                }
                Op::Dup => {
                    let dup = comm.dup().map_err(|e| describe(&e))?;
                    stack.push(with_window(dup)?);
                }
                Op::Pop => {
                    if stack.len() > 1 {
                        stack.pop();
                    }
                }
                Op::Sleep(us) => std::thread::sleep(Duration::from_micros(us)),
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

        #[test]
        fn random_collective_programs_end_correct_or_explained(
            n in 2usize..=8,
            ops in proptest::collection::vec(op(), 1..24),
            seed in any::<u64>(),
            timeout_ms in 50u64..400,
            deviation in proptest::option::weighted(0.5, (0usize..8, 0usize..24, prop_oneof![
                Just(Deviation::Skip), Just(Deviation::Return), Just(Deviation::Panic)
            ])),
        ) {
            let deviation = deviation.map(|(who, at, how)| (who % n, at % ops.len(), how));
            let p = Params::defaults_only().set("BARRIER_TIMEOUT", format!("{timeout_ms}ms"));
            let program = ops.clone();
            let outcome = within(Duration::from_secs(60), "a random program", move || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    Job::new(n).params(p).run(|w| run_rank(w, &program, seed, deviation))
                }))
            });
            match outcome {
                // Only the deviating rank may panic, and only on purpose.
                Err(_) => prop_assert!(matches!(deviation, Some((_, _, Deviation::Panic))), "unexpected panic"),
                Ok(Err(e)) => prop_assert!(false, "the job itself failed: {e}"),
                Ok(Ok(results)) => {
                    for (rank, r) in results.iter().enumerate() {
                        if let Err(msg) = r {
                            prop_assert!(!msg.starts_with("VIOLATION") && !msg.starts_with("UNEXPLAINED"), "rank {rank}: {msg}");
                        }
                    }
                    if deviation.is_none() {
                        prop_assert!(results.iter().all(|r| r.is_ok()), "a faithful program failed: {results:?}");
                    }
                }
            }
        }
    }
}

/// Issue 40 item 8: the rank that crashed is blamed, not the ranks that failed after seeing it
/// gone, whether it died of a signal or a shell wrapper reported the death as a status.
#[test]
fn a_crashed_rank_is_blamed_not_the_ranks_that_saw_it() {
    for wrapper in [None, Some("\"$@\"; exit $?")] {
        for _ in 0..3 {
            let report = faults(3, wrapper, &["crash", "1"], &[]);
            let f = report.failure.as_ref().expect("the job failed");
            assert_eq!(f.rank, 1, "{wrapper:?}: blamed {f:?}; {:?}", report.stderr);
            match wrapper {
                None => assert_eq!(f.end, barrier_launch::RankEnd::Signaled(libc::SIGABRT)),
                Some(_) => assert_eq!(f.end, barrier_launch::RankEnd::Exited(128 + libc::SIGABRT)),
            }
        }
    }
}
