//! What a user meets: errors that name the right thing, memory that comes back, the API an MPI
//! user reaches for. (The launcher's and the bench's habits are in crates/barrier-cli/tests.)

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use barrier::{threads::Job, Error, Params, Request};
use common::faults;

#[test]
fn a_bad_software_setting_is_reported_as_that_setting() {
    for (name, value) in [
        ("BARRIER_SW_ALGORITHM", "bubble"),
        ("BARRIER_TREE_ARITY", "1"),
        ("BARRIER_SW_TAIL_SPIN", "briefly"),
        ("BARRIER_SW_TAIL_SPIN", "2s"),
    ] {
        let err = Job::new(2).params(Params::defaults_only().set(name, value)).run(|_| ()).unwrap_err().to_string();
        assert!(err.contains(name) && err.contains(value), "{err}");
        assert!(!err.contains("BARRIER_BACKEND"), "the internal communicator's settings leaked: {err}");
    }
    // A minimum size the base communicator does not meet is the world's business, not the base's.
    let err = Job::new(2)
        .params(Params::defaults_only().set("BARRIER_DISSEMINATION_MIN_COMM_SIZE", "4"))
        .run(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("MIN_COMM_SIZE=4") && !err.contains("BARRIER_BACKEND="), "{err}");
}

#[test]
fn a_backend_list_set_on_one_rank_only_is_named_as_such() {
    let script = "[ \"$BARRIER_RANK\" = 1 ] && export BARRIER_BACKEND=gba; exec \"$@\"";
    let report = faults(3, Some(script), &["stall", "0", "0"], &[]);
    let first = report.failure.as_ref().expect("the job fails").rank;
    let err = &report.stderr[first];
    assert!(err.contains("BARRIER_BACKEND is not the same on every rank: world ranks [1]"), "rank {first}: {err}");
    assert!(!err.contains("enable the dissemination backend"), "{err}");
}

#[test]
fn a_timeout_on_a_split_communicator_names_world_ranks() {
    let p = Params::defaults_only().set("BARRIER_TIMEOUT", "200ms");
    let out = Job::new(6)
        .params(p)
        .run(|w| {
            let odd = w.split(w.rank() % 2, w.rank()).unwrap().unwrap();
            if w.rank() == 5 {
                std::thread::sleep(Duration::from_millis(800));
                return None;
            }
            (w.rank() % 2 == 1).then(|| odd.barrier().unwrap_err())
        })
        .unwrap();
    for e in out.into_iter().flatten() {
        let msg = e.to_string();
        assert!(
            msg.contains("barrier 1 timed out") && msg.contains("world ranks [5] (communicator ranks [2])"),
            "{msg}"
        );
    }
}

#[test]
fn a_timeout_inside_split_names_the_call() {
    let p = Params::defaults_only().set("BARRIER_TIMEOUT", "200ms");
    let out = Job::new(2)
        .params(p)
        .run(|w| {
            if w.rank() == 1 {
                std::thread::sleep(Duration::from_millis(800));
                return String::new();
            }
            w.split(0usize, 0).unwrap_err().to_string()
        })
        .unwrap();
    assert!(out[0].contains("the collective call split timed out") && out[0].contains("world ranks [1]"), "{}", out[0]);
    assert!(!out[0].contains("epoch"), "no internal control epoch in the message: {}", out[0]);
}

#[test]
fn main_returning_a_report_prints_the_message() {
    let e: barrier::Report = Error::InvalidArgument("three is not two".into()).into();
    assert_eq!(format!("{e:?}"), "invalid argument: three is not two");
}

#[test]
fn the_world_is_a_cheap_handle_and_split_takes_plain_integers() {
    let out = Job::new(5)
        .params(Params::defaults_only())
        .run(|w| {
            // usize colors and keys: no casts.
            let sub = w.split(w.rank() % 2, w.size() - w.rank()).unwrap().unwrap();
            sub.barrier().unwrap();
            (sub.size(), sub.rank())
        })
        .unwrap();
    // Keys descend with the world rank: the highest world rank comes first.
    assert_eq!(out, vec![(3, 2), (2, 1), (3, 1), (2, 0), (3, 0)]);
    let u = barrier::init_with(Params::defaults_only()).unwrap();
    let (a, b) = (u.world(), u.world());
    assert!(std::ptr::eq(a, b), "world() hands out the same communicator");
}

#[test]
fn many_requests_may_be_outstanding_and_complete_in_order() {
    let out = Job::new(4)
        .params(Params::defaults_only().set("BARRIER_TIMEOUT", "30s"))
        .run(|w| {
            let win = w.shared_window(w.size() * 16).unwrap();
            let mine = &win.words()[w.rank() * 16];
            for round in 0..50u64 {
                // Three barriers in flight; each rank records the round before starting them.
                mine.store(round, Ordering::Relaxed);
                if w.rank() == round as usize % 4 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                let reqs: Vec<Request<'_>> = (0..3).map(|_| w.ibarrier().unwrap()).collect();
                let epochs: Vec<u64> = reqs.iter().map(|r| r.epoch()).collect();
                assert_eq!(epochs, vec![3 * round + 1, 3 * round + 2, 3 * round + 3]);
                Request::wait_all(reqs).unwrap();
                for peer in 0..w.size() {
                    let seen = win.words()[peer * 16].load(Ordering::Relaxed);
                    assert!(seen >= round, "after round {round} rank {peer} was still at {seen}");
                }
            }
            // test_any, and a blocking barrier with requests outstanding completes them first.
            let mut reqs = vec![w.ibarrier().unwrap(), w.ibarrier().unwrap()];
            w.barrier().unwrap();
            assert_eq!(Request::test_any(&mut reqs).unwrap(), Some(0));
            assert!(reqs.iter_mut().all(|r| r.test().unwrap()));
            w.epoch()
        })
        .unwrap();
    assert_eq!(out, vec![153; 4]);
}

#[test]
fn freed_communicators_and_windows_are_reused() {
    // A 1 MiB pool: without reuse, a few hundred duplicates fill it.
    let p = Params::defaults_only().set("BARRIER_SHM_POOL_BYTES", "1048576");
    let out = Job::new(2)
        .params(p)
        .run(|w| {
            let baseline = w.segment_usage().0;
            let mut alive = std::collections::VecDeque::new();
            for i in 0..5_000 {
                let c = w.dup().unwrap();
                let win = c.shared_window(64).unwrap();
                win.words()[c.rank()].store(i, Ordering::Relaxed);
                c.barrier().unwrap();
                alive.push_back((c, win));
                if alive.len() > 40 {
                    alive.pop_front();
                }
            }
            alive.clear();
            w.barrier().unwrap();
            (baseline, w.segment_usage().0)
        })
        .unwrap();
    let (baseline, after) = out[0];
    assert_eq!(after, baseline, "every freed region and window went back to the pool");
}

#[test]
fn abort_ends_the_job_with_its_code() {
    let report = faults(3, None, &["abort", "1"], &[]);
    let failure = report.failure.as_ref().expect("abort fails the job");
    assert_eq!((failure.rank, failure.end.clone()), (1, barrier_launch::RankEnd::Exited(7)));
    assert!(report.stderr[1].contains("world rank 1 called abort(7)"), "{}", report.stderr[1]);
}

#[test]
fn the_launcher_honours_the_pool_size() {
    let report = faults(2, None, &["usage"], &[("BARRIER_SHM_POOL_BYTES", "1048576")]);
    assert!(report.success(), "{:?}", report.stderr);
    let total: usize = report.stderr[0]
        .split("segment ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", report.stderr[0]));
    assert!(total < 2 << 20, "a 1 MiB pool made a {total}-byte segment");
}

#[test]
fn a_collective_call_with_a_request_outstanding_completes_it_first() {
    // Rank 0 calls dup() with an ibarrier outstanding; rank 1 is in a plain barrier, which needs
    // rank 0's later dissemination rounds. The dup must drive the request, not deadlock.
    let p = Params::defaults_only().set("BARRIER_SW_ALGORITHM", "dissemination").set("BARRIER_TIMEOUT", "20s");
    let out = Job::new(3)
        .params(p)
        .run(|w| {
            if w.rank() == 0 {
                let r = w.ibarrier().unwrap();
                let d = w.dup().unwrap();
                r.wait().unwrap();
                d.size()
            } else {
                w.barrier().unwrap();
                w.dup().unwrap().size()
            }
        })
        .unwrap();
    assert_eq!(out, vec![3, 3, 3]);
}

#[test]
fn a_request_queued_behind_another_does_not_time_out_while_it_waits_its_turn() {
    let p = Params::defaults_only().set("BARRIER_TIMEOUT", "300ms");
    let out = Job::new(2)
        .params(p)
        .run(|w| {
            let _first = w.ibarrier().unwrap();
            let mut second = w.ibarrier().unwrap();
            // Longer than the timeout, on both ranks: nobody is missing, nobody is late.
            std::thread::sleep(Duration::from_millis(500));
            while !second.test().unwrap() {
                std::thread::yield_now();
            }
            w.epoch()
        })
        .unwrap();
    assert_eq!(out, vec![2, 2]);
}

#[test]
fn a_window_of_half_the_pool_fits() {
    let out = Job::new(2)
        .params(Params::defaults_only())
        .run(|w| w.shared_window(1 << 22).map(|win| win.words().len()))
        .unwrap();
    for r in out {
        assert_eq!(r.unwrap(), 1 << 22);
    }
}

#[test]
fn init_under_an_mpi_launcher_says_what_to_use_instead_of_running_worlds_of_one() {
    let hello = common::example("hello");
    let run = |env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(&hello);
        for var in ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "BARRIER_SHM_FD"]
        {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        cmd.output().expect("running the hello example")
    };
    // What `mpirun -np 2` and Hydra's `mpiexec -n 2` put in each process's environment.
    for (var, who) in [("OMPI_COMM_WORLD_SIZE", "Open MPI"), ("PMI_SIZE", "PMI launcher")] {
        let out = run(&[(var, "2")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{var}=2: hello ran as a world of 1: {err}");
        assert!(err.contains(who) && err.contains("barrier-mpi") && err.contains("libbarrier_pmpi.so"), "{err}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("rank 0 of 1"));
    }
    // Alone, or asked for on purpose: a world of 1.
    for env in [&[][..], &[("OMPI_COMM_WORLD_SIZE", "2"), ("BARRIER_SINGLETON", "1")][..]] {
        let out = run(env);
        assert!(out.status.success(), "{env:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("rank 0 of 1"));
    }
}
