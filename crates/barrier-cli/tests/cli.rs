//! The `barrier` command as users run it: the launcher, `info`, the emulated devices (`bench`
//! and `model` are in `bench.rs`, the settings in `settings.rs`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn barrier() -> Command {
    Command::new(env!("CARGO_BIN_EXE_barrier"))
}

#[test]
fn run_passes_rank_environment_and_succeeds() {
    let out = barrier()
        .args([
            "run",
            "-n",
            "3",
            "--nodes",
            "2",
            "--",
            "sh",
            "-c",
            "echo rank=$BARRIER_RANK size=$BARRIER_SIZE nodes=$BARRIER_NODES",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for r in 0..3 {
        assert!(text.contains(&format!("rank={r} size=3 nodes=2")), "{text}");
    }
}

#[test]
fn unpinned_ranks_keep_the_launchers_whole_cpu_mask() {
    // The launcher starts unpinned ranks spread over its cores, but every rank (and anything it
    // starts, like this shell's grep) must end up free to run on all of them, as without us.
    let mask =
        |text: &str| text.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|m| m.trim().to_string());
    let ours = mask(&std::fs::read_to_string("/proc/self/status").unwrap()).unwrap();
    let out = barrier()
        .args(["run", "-n", "5", "--", "sh", "-c", "grep Cpus_allowed_list /proc/self/status"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let masks: Vec<String> = text.lines().filter_map(mask).collect();
    assert_eq!(masks.len(), 5, "{text}");
    assert!(masks.iter().all(|m| *m == ours), "the test runs on {ours}, the ranks on {masks:?}");
}

#[test]
fn a_failing_rank_fails_the_job_with_its_status() {
    let out = barrier()
        .args(["run", "-n", "3", "--", "sh", "-c", "[ $BARRIER_RANK = 1 ] && exit 7; sleep 20"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 1") && err.contains("exited with status 7"), "{err}");
}

#[test]
fn kill_dash_nine_of_a_rank_ends_the_job_within_seconds() {
    let start = Instant::now();
    let out = barrier()
        .args(["run", "-n", "4", "--", "sh", "-c", "[ $BARRIER_RANK = 2 ] && kill -9 $$; sleep 30"])
        .output()
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    assert_eq!(out.status.code(), Some(128 + 9));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 2") && err.contains("signal 9 (SIGKILL)"), "{err}");
}

#[test]
fn sigterm_to_the_launcher_is_forwarded_to_the_ranks() {
    let child = barrier().args(["run", "-n", "2", "--", "sleep", "30"]).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
    assert_eq!(out.status.code(), Some(128 + 15));
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted by signal 15"));
}

#[test]
fn a_missing_program_is_a_clear_error() {
    let out = barrier().args(["run", "-n", "2", "--", "/nonexistent/program"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start /nonexistent/program"));
}

#[test]
fn info_lists_backends_parameters_and_the_choice() {
    let out = barrier().args(["info", "-n", "3"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "dissemination",
        "BARRIER_TIMEOUT",
        "BARRIER_SW_ALGORITHM",
        "BARRIER_DISSEMINATION_PRIORITY",
        "chosen: dissemination",
    ] {
        assert!(text.contains(needle), "info lacks {needle}:\n{text}");
    }
    let forced = barrier().args(["info", "-n", "2"]).env("BARRIER_BACKEND", "nosuch").output().unwrap();
    assert!(!forced.status.success());
    assert!(String::from_utf8_lossy(&forced.stderr).contains("unknown backend \"nosuch\""));
}

#[test]
fn tag_output_passes_a_line_without_newline_on_in_bounded_pieces() {
    // 5 MB without a newline: the launcher must not hold it all; it goes out in tagged pieces
    // of at most barrier_launch::TAG_LINE_BOUND bytes.
    let out = barrier()
        .args(["run", "-n", "1", "--tag-output", "--", "sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let pieces: Vec<&str> = text.lines().collect();
    let bound = barrier_launch::TAG_LINE_BOUND;
    assert!(pieces.len() >= 5_000_000 / bound, "{} pieces", pieces.len());
    assert!(pieces.iter().all(|p| p.starts_with("[0] ") && p.len() <= bound + 4), "a piece past the bound");
    assert_eq!(pieces.iter().map(|p| p.len() - 4).sum::<usize>(), 5_000_000);
}

#[test]
fn a_full_dev_shm_is_an_error_or_nothing_at_all_never_sigbus() {
    // A private mount namespace with an 8 KiB /dev/shm (stale files of other programs fill a
    // container's 64 MiB one): the job segment is a memfd, not on /dev/shm, so the job runs; an
    // emulated device's file, which is on /dev/shm, is refused with the size and the place.
    let exe = env!("CARGO_BIN_EXE_barrier");
    let script = format!(
        "mount -t tmpfs -o size=8k tmpfs /dev/shm || exit 77; \
         {exe} run -n 2 -- {exe} bench-rank --iters 200 --batch 20 || exit 10; \
         {exe} run -n 2 --emulate gba -- {exe} bench-rank --iters 200 --batch 20; echo status=$?"
    );
    let out = match Command::new("unshare").args(["-m", "sh", "-c", &script]).output() {
        Ok(out) if out.status.code() != Some(77) && out.status.code() != Some(1) || out.status.success() => out,
        other => {
            println!("skipped: no private mount namespace with its own /dev/shm here (unshare -m: {other:?})");
            return;
        }
    };
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_ne!(out.status.code(), Some(10), "the job failed with a full /dev/shm: {err}");
    assert!(text.contains("RESULT"), "the job ran: {text} {err}");
    assert!(!err.contains("SIGBUS") && !err.contains("signal 7"), "{err}");
    assert!(err.contains("no room for the emulated device") && err.contains("/dev/shm"), "{err}");
    assert!(text.contains("status=") && !text.contains("status=0"), "{text}");
}

#[test]
fn an_emulated_a64fx_nodes_files_go_away_even_after_kill_9_of_the_launcher() {
    let tmp = std::env::temp_dir().join(format!("barrier-a64fx-kill-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let trees = || -> Vec<String> {
        std::fs::read_dir(&tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("barrier-emu-a64fx-"))
            .collect()
    };
    let mut job = barrier()
        .args(["run", "-n", "1", "--emulate", "a64fx", "--", "sleep", "30"])
        .env("TMPDIR", &tmp)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while trees().is_empty() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(trees().len(), 1, "the node's tree while the job runs");
    job.kill().unwrap(); // SIGKILL: no destructor runs
    job.wait().unwrap();
    assert_eq!(trees().len(), 1, "kill -9 leaves the tree (nothing can remove it then)");
    // The next job's node removes what a dead launcher left, then its own at its end.
    let out =
        barrier().args(["run", "-n", "1", "--emulate", "a64fx", "--", "true"]).env("TMPDIR", &tmp).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(trees(), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn libraries_are_loaded_only_from_places_nobody_else_can_write() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("barrier-trusted-{}", std::process::id()));
    let lib = dir.join("libbarrier_emu_inline.so");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&lib, b"not really a library").unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(barrier_launch::trusted(&dir) && barrier_launch::trusted(&lib));
    // A build tree others may write (a shared or world-writable directory): not trusted.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(!barrier_launch::trusted(&dir));
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(!barrier_launch::trusted(&lib));
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A link, and (as root) another user's file: not trusted.
    let link = dir.join("link.so");
    std::os::unix::fs::symlink(&lib, &link).unwrap();
    assert!(!barrier_launch::trusted(&link));
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&lib, Some(65534), None).unwrap();
        assert!(!barrier_launch::trusted(&lib));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn rank_program() -> Vec<&'static str> {
    vec![env!("CARGO_BIN_EXE_barrier"), "bench-rank", "--iters", "400", "--batch", "20"]
}

#[test]
fn run_with_emulate_gives_the_ranks_a_device() {
    let mut args = vec!["run", "-n", "3", "--emulate", "switch", "--counters", "--"];
    args.extend(rank_program());
    let out = barrier().args(&args).env("BARRIER_BACKEND", "switch").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("RESULT\tswitch\toffload"), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("emulated switch") && err.contains("errors: 0") && err.contains("groups_in_use: 0"), "{err}");
}

#[test]
fn run_emulates_devices_inline_unless_asked_for_a_thread_or_the_library_is_missing() {
    let mut args = vec!["run", "-n", "2", "--emulate", "gba", "--"];
    args.extend(rank_program());
    let inline = barrier().args(&args).env("BARRIER_BACKEND", "gba").env("BARRIER_VERBOSE", "1").output().unwrap();
    let err = String::from_utf8_lossy(&inline.stderr);
    assert!(inline.status.success(), "{err}");
    assert!(err.contains("emulated gba inline") && err.contains("libbarrier_emu_inline.so"), "{err}");
    // Without the library: a thread, said once, and the job still runs.
    let missing = barrier()
        .args(&args)
        .env("BARRIER_BACKEND", "gba")
        .env("BARRIER_EMU_INLINE_LIB", "/nonexistent/libbarrier_emu_inline.so")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(missing.status.success(), "{err}");
    assert!(err.contains("runs on an engine thread of its own") && err.contains("/nonexistent/"), "{err}");
    assert_eq!(err.matches("engine thread").count(), 1, "{err}");
    // Asked for: a thread, without a word.
    let mut args = vec!["run", "-n", "2", "--emulate", "gba", "--threaded-emulator", "--"];
    args.extend(rank_program());
    let threaded = barrier().args(&args).env("BARRIER_BACKEND", "gba").env("BARRIER_VERBOSE", "1").output().unwrap();
    let err = String::from_utf8_lossy(&threaded.stderr);
    assert!(threaded.status.success(), "{err}");
    assert!(!err.contains("inline") && !err.contains("engine thread"), "{err}");
}

#[test]
fn info_says_a64fx_declines_more_ranks_than_the_node_has_pes() {
    let out = barrier().args(["info", "-n", "49", "--emulate", "a64fx"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("declined: the communicator has 49 ranks and the node 48 PEs"), "{text}");
    assert!(!text.contains("not bound to one CPU"), "{text}");
}

#[test]
fn info_with_emulated_devices_chooses_the_gba() {
    let out = barrier().args(["info", "-n", "4", "--emulate", "switch,gba"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("chosen: gba (offload group") && text.contains("BARRIER_SWITCH_WATCHDOG"), "{text}");
    let none = barrier()
        .args(["info", "-n", "4"])
        .env("BARRIER_GBA_DEVICE_PATH", "/nonexistent/gba0")
        .env("BARRIER_SWITCH_DEVICE_PATH", "/nonexistent/sw")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&none.stdout);
    assert!(text.contains("no device at /nonexistent/gba0") && text.contains("chosen: dissemination"), "{text}");
}

/// A daemon's device file in /dev/shm that a failing test must not leave behind (CI checks
/// that none is left): on drop, this process's children that were started with exactly that
/// path as an argument (its daemons) are killed, and the file is removed.
struct DeviceFileGuard(String);

impl Drop for DeviceFileGuard {
    fn drop(&mut self) {
        let me = std::process::id().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
            let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else { continue };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            // stat: "pid (comm) state ppid ...", where comm may hold spaces: after the last ')'.
            let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
            if parent == Some(me.as_str()) && cmd.split(|&b| b == 0).any(|arg| arg == self.0.as_bytes()) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_emu_daemon_serves_several_jobs_and_removes_its_device() {
    let path = format!("/dev/shm/barrier-cli-test-gba-{}", std::process::id());
    let _cleanup = DeviceFileGuard(path.clone());
    let daemon = barrier().args(["emu", "--kind", "gba", "--device", &path]).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    while !std::path::Path::new(&path).exists() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..2 {
        let mut args = vec!["run", "-n", "2", "--"];
        args.extend(rank_program());
        let out =
            barrier().args(&args).env("BARRIER_BACKEND", "gba").env("BARRIER_GBA_DEVICE_PATH", &path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("RESULT\tgba\toffload"), "{out:?}");
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let out = daemon.wait_with_output().unwrap();
    assert!(out.status.success());
    // Each job: 40 warm-up, 400 timed and 1 closing barrier.
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("barriers: 882,"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!std::path::Path::new(&path).exists(), "the daemon must remove its device file");
}

/// Process `pid`'s command line, arguments separated (and ended) by spaces.
fn cmdline(pid: u32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmd).replace('\0', " ")
}

/// Processes whose command line contains `needle` (their pids).
fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmd = cmdline(pid);
        if cmd.contains(needle) && !cmd.contains("sh -c") {
            found.push(pid);
        }
    }
    found
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

#[test]
fn a_rank_that_reads_the_terminal_is_not_stopped() {
    // `script` gives the launcher a terminal, in whose foreground it runs. Rank 0 reads what is
    // typed (forwarded by the launcher); the other ranks read an empty input. Ranks that read
    // the terminal from their own (background) process groups would be stopped by SIGTTIN.
    let cmd =
        format!("{} run -n 2 -- sh -c 'read x; echo rank $BARRIER_RANK read [$x]'", env!("CARGO_BIN_EXE_barrier"));
    let mut child = Command::new("timeout")
        .args(["20", "script", "-qec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}: {text}", out.status);
    assert!(text.contains("rank 0 read [hello]") && text.contains("rank 1 read []"), "{text}");
}

#[test]
fn the_launcher_learns_how_ranks_ended_even_when_sigchld_is_ignored() {
    let mut cmd = barrier();
    cmd.args(["run", "-n", "2", "--", "sh", "-c", "sleep 0.5; exit 3"]);
    // SAFETY: the closure runs between fork and exec and only calls signal(2).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            Ok(())
        });
    }
    let start = Instant::now();
    let out = cmd.output().unwrap();
    assert!(start.elapsed() >= Duration::from_millis(450), "the launcher ended before its ranks");
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_job_too_large_for_the_machine_is_refused_with_the_limit() {
    for args in [&["run", "-n", "100000", "--", "true"][..], &["info", "-n", "100000"][..]] {
        let start = Instant::now();
        let out = barrier().args(args).output().unwrap();
        assert!(start.elapsed() < Duration::from_secs(10), "{args:?} took {:?}", start.elapsed());
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("more ranks than this machine can hold") && err.contains("at most"), "{err}");
    }
}

#[test]
fn sigterm_stops_a_large_start_up_at_once() {
    let (limit, _) = barrier_launch::proc::max_ranks();
    let n = limit.saturating_sub(64).min(5000).to_string();
    // A duration no other process on the machine has (a shell's `sleep 295` matched "sleep 29"
    // once and failed this test).
    let nap = format!("29.{:06}", std::process::id() % 1_000_000);
    let ours = format!("sleep {nap} ");
    let left_running = || processes_with(&ours).into_iter().filter(|&pid| cmdline(pid) == ours).collect::<Vec<_>>();
    let child = barrier().args(["run", "-n", &n, "--", "sleep", &nap]).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The start-up is under way (else this test would pass without testing anything).
    assert!(wait_until(Duration::from_secs(10), || !left_running().is_empty()), "no rank started");
    let start = Instant::now();
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?} after SIGTERM", start.elapsed());
    assert_eq!(out.status.code(), Some(128 + 15));
    // Killed ranks are gone at once; the margin is for a loaded machine (other tests run
    // beside this one). Any left are described, for whoever meets a failure here.
    if !wait_until(Duration::from_secs(10), || left_running().is_empty()) {
        let left: Vec<String> = left_running()
            .iter()
            .map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                format!("{pid}: stat {stat:.120} cmdline {:?}", cmdline(*pid))
            })
            .collect();
        panic!(
            "ranks left running 10 s after the launcher ended: {left:#?}\nlauncher stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn ranks_behind_a_wrapper_end_when_the_launcher_is_killed() {
    // The wrapper shell is the launcher's child; the rank is its child, which the kernel's
    // parent-death signal does not reach. The lifeline does.
    let marker = format!("{}", 900_000_000 + std::process::id());
    let script = format!("\"$0\" bench-rank --iters {marker} --batch 100; exit $?");
    let mut launcher = barrier()
        .args(["run", "-n", "2", "--", "sh", "-c", &script, env!("CARGO_BIN_EXE_barrier")])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || processes_with(&marker).len() == 2), "ranks did not start");
    launcher.kill().unwrap();
    let _ = launcher.wait();
    assert!(
        wait_until(Duration::from_secs(5), || processes_with(&marker).is_empty()),
        "ranks still running after the launcher died: {:?}",
        processes_with(&marker)
    );
}

#[test]
fn a_killed_daemon_is_a_device_fault_and_a_new_daemon_replaces_its_file() {
    let path = format!("/dev/shm/barrier-cli-test-dies-{}", std::process::id());
    let _cleanup = DeviceFileGuard(path.clone());
    // Started once it says so: a stale file is already at the path before the new daemon has
    // replaced it (and the file's device memory is allocated in full first).
    let start_daemon = || {
        use std::io::BufRead;
        let mut d =
            barrier().args(["emu", "--kind", "switch", "--device", &path]).stderr(Stdio::piped()).spawn().unwrap();
        let mut first = String::new();
        let mut said = std::io::BufReader::new(d.stderr.take().unwrap());
        said.read_line(&mut first).unwrap();
        assert!(first.contains("switch device at") && std::path::Path::new(&path).exists(), "{first}");
        // The rest is read too: a daemon whose stderr is closed fails its last words.
        std::thread::spawn(move || std::io::copy(&mut said, &mut std::io::sink()));
        d
    };
    let mut daemon = start_daemon();
    let job = barrier()
        .args(["run", "-n", "2", "--timeout", "60s", "--", env!("CARGO_BIN_EXE_barrier"), "bench-rank"])
        .args(["--iters", "400000", "--batch", "100"])
        .env("BARRIER_BACKEND", "switch")
        .env("BARRIER_SWITCH_DEVICE_PATH", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    daemon.kill().unwrap();
    let _ = daemon.wait();
    let out = job.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("RESULT\tswitch\tfallback"), "{text}");
    // The file is still there (kill -9); a new daemon replaces it instead of failing.
    assert!(std::path::Path::new(&path).exists());
    let mut daemon = start_daemon();
    let mut args = vec!["run", "-n", "2", "--"];
    args.extend(rank_program());
    let out = barrier()
        .args(&args)
        .env("BARRIER_BACKEND", "switch")
        .env("BARRIER_SWITCH_DEVICE_PATH", &path)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("RESULT\tswitch\toffload"), "{out:?}");
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let _ = daemon.wait();
    assert!(!std::path::Path::new(&path).exists());
}

#[test]
fn launcher_options_and_settings_are_checked_before_anything_starts() {
    /// Arguments, an environment variable, and what the error must say.
    type Case<'a> = (&'a [&'a str], Option<(&'a str, &'a str)>, &'a str);
    let cases: [Case<'_>; 4] = [
        (
            &["run", "-n", "2", "--timeout", "abc", "--", "true"],
            None,
            "barrier run: invalid value \"abc\" for --timeout: a duration",
        ),
        (
            &["run", "-n", "2", "--", "true"],
            Some(("BARRIER_WAIT_POLICY", "bogus")),
            "BARRIER_WAIT_POLICY: one of auto, spin, park",
        ),
        (&["run", "-n", "2", "--nodes", "0", "--", "true"], None, "invalid value '0' for '--nodes"),
        (&["emu", "--device", "/tmp/never-created", "--drop-arrival", "2.0"], None, "2.0 is not a probability"),
    ];
    for (args, env, needle) in cases {
        let mut cmd = barrier();
        cmd.args(args);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "nothing may start: {args:?}");
    }
    let out = barrier().args(["run", "-n", "2", "--nodes", "5", "--", "true"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nodes 5 is more than the 2 ranks: using 2 nodes"));
}

#[test]
fn tag_output_prefixes_whole_lines_and_keeps_the_streams_apart() {
    let out = barrier()
        .args([
            "run",
            "-n",
            "3",
            "--tag-output",
            "--",
            "sh",
            "-c",
            "echo out $BARRIER_RANK; echo err $BARRIER_RANK >&2; printf tail",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    for r in 0..3 {
        assert!(stdout.lines().any(|l| l == format!("[{r}] out {r}")), "{stdout}");
        assert!(stdout.lines().any(|l| l == format!("[{r}] tail")), "an unterminated last line is a line: {stdout}");
        assert!(stderr.lines().any(|l| l == format!("[{r}] err {r}")), "{stderr}");
    }
    assert!(!stdout.contains("err") && !stderr.contains("out"), "streams mixed:\n{stdout}\n{stderr}");
}

#[test]
fn a_large_start_up_shows_progress_on_a_terminal() {
    let cmd = format!("{} run -n 200 -- true", env!("CARGO_BIN_EXE_barrier"));
    let out = Command::new("timeout").args(["60", "script", "-qec", &cmd, "/dev/null"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("barrier run: started 200 ranks in"), "{text}");
    // Not on a pipe: logs stay clean.
    let plain = barrier().args(["run", "-n", "200", "--", "true"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&plain.stderr).contains("starting ranks"));
}

#[test]
fn emulate_names_and_shapes_are_checked_with_the_parameter_to_change() {
    for command in ["run", "info"] {
        let mut args = vec![command, "--emulate", "gba,nonesuch"];
        if command == "run" {
            args.extend(["--", "/bin/true"]);
        }
        let out = barrier().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--emulate nonesuch: unknown device; use switch, gba, a64fx"), "{err}");
    }
    let out = barrier()
        .args(["info", "--emulate", "a64fx"])
        .env("BARRIER_A64FX_EMU_CMGS", "8")
        .env("BARRIER_A64FX_EMU_PES", "12")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("BARRIER_A64FX_EMU_CMGS=8 x BARRIER_A64FX_EMU_PES=12: 96 CPUs, more than 64"), "{err}");
}

/// `barrier run` of twice as many `bench-rank`s as this test may use cores, every rank first
/// moving itself to the mask's first CPU; returns the launcher's standard error.
fn uneven_start(rebalance: &str) -> Option<String> {
    // The launcher counts the CPUs of its affinity mask (not a cgroup's quota).
    let cores = barrier::sys::affinity_cores().len();
    if cores < 2 {
        eprintln!("skipped: placement needs two CPUs or more");
        return None;
    }
    let mask = std::fs::read_to_string("/proc/self/status").unwrap();
    let first = mask
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|m| m.trim().split([',', '-']).next().and_then(|c| c.parse::<usize>().ok()))
        .unwrap();
    let ranks = (2 * cores).to_string();
    let cpu = first.to_string();
    let exe = env!("CARGO_BIN_EXE_barrier");
    let args =
        ["run", "-n", &ranks, "--", exe, "bench-rank", "--iters", "20000", "--batch", "100", "--start-on-cpu", &cpu];
    let out = barrier().args(args).env("BARRIER_VERBOSE", "1").env("BARRIER_REBALANCE", rebalance).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn an_uneven_start_ends_evenly_placed_and_rebalance_0_leaves_it_alone() {
    let Some(err) = uneven_start("1") else { return };
    // "placement even at E of L looks (the last S in a row), M moves; ..."
    let summary = err.lines().find(|l| l.contains("placement even at")).unwrap_or_else(|| panic!("{err}"));
    let numbers: Vec<usize> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .take(4)
        .map(|w| w.parse().unwrap())
        .collect();
    let [even, looks, _settled, moves] = numbers[..] else { panic!("{summary}") };
    // The ranks measure 20,000 barriers after 20,000 of warm-up: about a quarter of a second at
    // two ranks a CPU, a look every 5 ms at first (looks before every rank joined, or after
    // one ended, do not count). All of them started on one CPU: the balancer must have found
    // them even most of the time, or have moved ranks. (With other tests loading the other
    // CPU, the kernel balances the whole load and may undo the moves: that is its right.)
    assert!(looks >= 4, "{summary}");
    assert!(even * 2 >= looks || moves >= 1, "{summary}");
    for line in err.lines().filter(|l| l.contains(" moved from CPU ")) {
        assert!(line.contains("BARRIER_REBALANCE=0 turns this off"), "{line}");
    }

    let err = uneven_start("0").unwrap();
    assert!(!err.contains("moved from CPU") && !err.contains("placement even at"), "{err}");
}
