//! The stall reports of `barrier::sync`: a binary of its own with one test, because it points
//! this process's stderr (where the library says its reports) at a file while it runs.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::time::Duration;

use barrier::sync::{Barrier, Team};
use barrier::WaitPolicy;

/// Runs `f` with file descriptor 2 pointing at a temporary file; returns what was written.
fn stderr_of(f: impl FnOnce()) -> String {
    let path = std::env::temp_dir().join(format!("barrier-sync-reports-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    // SAFETY: plain descriptor calls on descriptors this process owns; 2 is restored below.
    let saved = unsafe { libc::dup(2) };
    // SAFETY: as above.
    assert!(unsafe { libc::dup2(file.as_raw_fd(), 2) } == 2);
    f();
    // SAFETY: as above.
    unsafe {
        libc::dup2(saved, 2);
        libc::close(saved);
    }
    let mut text = String::new();
    std::fs::File::open(&path).unwrap().read_to_string(&mut text).unwrap();
    let _ = std::fs::remove_file(&path);
    text
}

#[test]
fn long_waits_say_who_has_arrived_and_whom_they_wait_for() {
    // Read by Barrier::new (this binary runs this one test: nothing else reads the environment).
    std::env::set_var("BARRIER_STALL_REPORT", "100ms");
    std::env::set_var("BARRIER_WAIT_POLICY", "park");
    let text = stderr_of(|| {
        let barrier = Barrier::new(3);
        let team = Team::with(2, WaitPolicy::Park, None, Some(Duration::from_millis(100)));
        let (mut m0, mut m1) = (team.join().unwrap(), team.join().unwrap());
        // A team of three that parks runs the central barrier: its report lists who is missing.
        let central = Team::with(3, WaitPolicy::Park, None, Some(Duration::from_millis(100)));
        let [mut c0, mut c1, mut c2] = [central.join().unwrap(), central.join().unwrap(), central.join().unwrap()];
        std::thread::scope(|s| {
            // Two of three arrive at generation 0; the third comes 400 ms later.
            s.spawn(|| barrier.wait());
            s.spawn(|| barrier.wait());
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(400));
                barrier.wait()
            });
            // Member 0 waits for member 1, 400 ms late, in barrier 1.
            s.spawn(move || m0.wait().unwrap());
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(400));
                m1.wait().unwrap()
            });
            s.spawn(move || c0.wait().unwrap());
            s.spawn(move || c1.wait().unwrap());
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(400));
                c2.wait().unwrap()
            });
        });
    });
    let drop_in: Vec<&str> = text.lines().filter(|l| l.starts_with("barrier::sync::Barrier:")).collect();
    assert_eq!(drop_in.len(), 1, "one report per generation:\n{text}");
    assert!(
        drop_in[0].contains("in generation 0 of a barrier of 3 threads: 2 of 3 have arrived; still waiting"),
        "{text}"
    );
    assert!(
        text.contains("barrier::sync::Team: member 0 of a team of 2 has waited")
            && text.contains("in barrier 1 (central): members [2] have not arrived")
            && text.contains("in barrier 1 (round 0): member 1 has not arrived"),
        "{text}"
    );
}
