//! An emulated A64FX node: the barrier blades and window registers of `cmgs` CMGs, the Fujitsu
//! driver's calls with its checks and error codes, and a fake sysfs tree in the real layout.
//!
//! The node is a shared file in the layout of `barrier_hw::a64fx::node` plus an **agent** (a
//! thread: the emulated kernel driver). The library's seam (`barrier::backends::a64fx`)
//! opens the file, posts driver calls in its mailbox and reads and writes the registers:
//!
//! * **Hardware**: a BST write through a window is a compare-and-swap of the blade's register
//!   word by `barrier_hw::a64fx::write_bst`, in the writer's context (as the chip does it in
//!   the writing PE's), so a barrier never waits for the agent. The write that flips LBSY
//!   counts the flip in the blade's flips flag and wakes parked waiters.
//! * **Driver** (the agent, woken by the doorbell): `BB_ALLOC` takes a cpumask of at least 2
//!   online CPUs of one CMG (else `EINVAL`) and a free blade of that CMG (else `EBUSY`), writes
//!   MASK and clears BST and LBSY; the blade belongs to the caller's open file. `BW_ASSIGN`
//!   needs a caller bound to one CPU (`EPERM`), a blade of the caller's CMG owned by the same
//!   open file and whose MASK names the caller's PE, no window of this PE on the blade already
//!   (each `EINVAL`), and a free window (`EBUSY`; −1 picks the lowest). `BW_UNASSIGN` and
//!   `BB_FREE` undo them (`BB_FREE` with windows still connected: `EPERM`). `GET_PE_INFO`
//!   returns the caller's CMG and physical PE.
//! * **Open files**: an opener holds an OFD lock on its open-file entry. Every 50 ms and on
//!   every doorbell the agent frees the blades and windows of entries whose lock is gone, as
//!   the real driver does when a process exits without cleaning up.
//! * **sysfs**: `hwinfo`, and per `CMG<n>/`: `core_map`, `used_bb_bmap`, `used_bw_bmap` and
//!   `init_sync_bb0..5` (as of the last driver call), rewritten after every change.
//!
//! CPU numbers are virtual (cpuid = cmg × PEs + ppe): the caller's CPU is the one its thread
//! is bound to (`barrier::sys::bound_cpu`), which on this machine may not exist.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use barrier::mmio::Mmio;
use barrier::wait::{Unwatched, WaitConfig, WaitPolicy};
use barrier_hw::a64fx::{assign_sync_w, errno, init_sync_bb, node, sysfs};

/// How often the agent looks for openers that died.
const REAP_EVERY: Duration = Duration::from_millis(50);

/// A running emulated node. Dropping it stops the agent and removes the file and the tree.
#[derive(Debug)]
pub struct Node {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    agent: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    mmio: Mmio,
    layout: node::Layout,
    path: PathBuf,
    sysfs: PathBuf,
    /// Holds the agent's `flock` (drivers refuse a node nobody serves).
    _fd: OwnedFd,
    /// Holds the tree's `.alive` lock (see [`remove_stale_trees`]).
    _alive: std::fs::File,
}

impl Node {
    /// Starts a node of this shape, private to this process and its children: the file is
    /// unlinked at once and reached through `/proc/<pid>/fd/<n>`; the sysfs tree is a
    /// temporary directory.
    pub fn start(layout: node::Layout) -> std::io::Result<Node> {
        layout.validate().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        // A node whose process was killed (kill -9 of `barrier run --emulate a64fx`) could not
        // remove its tree: the next node removes it.
        remove_stale_trees(&std::env::temp_dir());
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let tag = format!("{TREE_PREFIX}{}-{nanos:x}", std::process::id());
        let tmp = PathBuf::from(format!("/dev/shm/{tag}"));
        let fd = crate::device::create_file(&tmp, layout.size())?;
        std::fs::remove_file(&tmp)?;
        if !barrier::sys::flock_exclusive(fd.as_raw_fd())? {
            return Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, "the new node file is locked"));
        }
        let path = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd()));
        let mmio = Mmio::from_fd(fd.as_raw_fd(), layout.size())?;
        let sysfs = std::env::temp_dir().join(tag);
        std::fs::create_dir_all(&sysfs)?;
        // Locked while this node lives: how a later node tells a dead one's tree (kill -9).
        let alive = std::fs::File::create(sysfs.join(TREE_LOCK))?;
        barrier::sys::flock_exclusive(alive.as_raw_fd())?;
        let shared = Arc::new(Shared { mmio, layout, path, sysfs, _fd: fd, _alive: alive });
        shared.power_on()?;
        let stop = Arc::new(AtomicBool::new(false));
        let agent = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::Builder::new().name("emu-a64fx".into()).spawn(move || shared.serve(&stop))?
        };
        Ok(Node { shared, stop, agent: Some(agent) })
    }

    /// The device file drivers open (`BARRIER_A64FX_DEVICE_PATH`).
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The fake sysfs tree (`BARRIER_A64FX_SYSFS`).
    pub fn sysfs(&self) -> &Path {
        &self.shared.sysfs
    }

    /// The node's shape.
    pub fn layout(&self) -> node::Layout {
        self.shared.layout
    }

    /// `params` pointing the backend at this node.
    pub fn params(&self, params: barrier::Params) -> barrier::Params {
        params
            .set(barrier::backends::a64fx::DEVICE_PATH, self.path().display().to_string())
            .set(barrier::backends::a64fx::SYSFS, self.sysfs().display().to_string())
    }

    /// The environment that points a rank's backend at this node.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (barrier::backends::a64fx::DEVICE_PATH.into(), self.path().display().to_string()),
            (barrier::backends::a64fx::SYSFS.into(), self.sysfs().display().to_string()),
        ]
    }

    /// Blades in use, over all CMGs (tests).
    pub fn blades_in_use(&self) -> usize {
        let l = self.shared.layout;
        (0..l.cmgs).flat_map(|c| (0..l.bbs).map(move |b| (c, b))).filter(|&(c, b)| self.shared.owner(c, b) != 0).count()
    }

    /// Windows connected, over all PEs (tests).
    pub fn windows_in_use(&self) -> usize {
        let l = self.shared.layout;
        (0..l.cmgs)
            .flat_map(|c| (0..l.pes).flat_map(move |p| (0..l.windows).map(move |w| (c, p, w))))
            .filter(|&(c, p, w)| assign_sync_w::blade(self.shared.assign(c, p, w).load(Ordering::Acquire)).is_some())
            .count()
    }
}

/// The start of the name of every emulated node's sysfs tree: `<prefix><pid>-<ns>`.
const TREE_PREFIX: &str = "barrier-emu-a64fx-";

/// The file in a node's tree that its process holds locked (`flock`) while the node lives.
const TREE_LOCK: &str = ".alive";

/// Removes the sysfs trees under `dir` of this user's emulated nodes whose process is gone:
/// nobody holds the lock of `.alive` in them (a lock the kernel drops with the process, so a
/// live node of another PID namespace or machine sharing the directory keeps its tree).
pub fn remove_stale_trees(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if !entry.file_name().to_str().is_some_and(|n| n.starts_with(TREE_PREFIX)) {
            continue;
        }
        // Never follow a link; only this user's directories.
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
        if !meta.is_dir() || meta.uid() != me {
            continue;
        }
        let alive = std::fs::File::open(entry.path().join(TREE_LOCK))
            .ok()
            .is_some_and(|f| !barrier::sys::flock_exclusive(f.as_raw_fd()).unwrap_or(false));
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.shared.mmio.flag(self.shared.layout.doorbell()).bump(true);
        if let Some(a) = self.agent.take() {
            let _ = a.join();
        }
        let _ = std::fs::remove_dir_all(&self.shared.sysfs);
    }
}

impl Shared {
    fn word(&self, offset: u64) -> &std::sync::atomic::AtomicU64 {
        self.mmio.word(offset)
    }

    fn register(&self, cmg: usize, bb: usize) -> &std::sync::atomic::AtomicU64 {
        self.word(self.layout.blade(cmg, bb))
    }

    /// The blade's owner: open-file entry + 1, 0 when free.
    fn owner(&self, cmg: usize, bb: usize) -> u64 {
        self.word(self.layout.blade(cmg, bb) + 8).load(Ordering::Acquire)
    }

    fn set_owner(&self, cmg: usize, bb: usize, owner: u64) {
        self.word(self.layout.blade(cmg, bb) + 8).store(owner, Ordering::Release);
    }

    fn assign(&self, cmg: usize, ppe: usize, w: usize) -> &std::sync::atomic::AtomicU64 {
        self.word(self.layout.assign(cmg, ppe, w))
    }

    fn power_on(&self) -> std::io::Result<()> {
        let l = self.layout;
        for (at, v) in [
            (node::H_VERSION, node::VERSION),
            (node::H_CMGS, l.cmgs as u64),
            (node::H_PES, l.pes as u64),
            (node::H_BBS, l.bbs as u64),
            (node::H_WINDOWS, l.windows as u64),
        ] {
            self.word(at).store(v, Ordering::Relaxed);
        }
        std::fs::create_dir_all(&self.sysfs)?;
        // The assistant core has a physical PE number but no CPU here: maxPE counts it.
        write_file(self.sysfs.join("hwinfo"), sysfs::format_hwinfo(l.cmgs, l.bbs, l.windows, l.pes + 1))?;
        for c in 0..l.cmgs {
            let dir = self.sysfs.join(format!("CMG{c}"));
            std::fs::create_dir_all(&dir)?;
            let pes: Vec<(usize, usize)> = (0..l.pes).map(|p| (c * l.pes + p, p)).collect();
            write_file(dir.join("core_map"), sysfs::format_core_map(&pes))?;
        }
        self.write_sysfs()?;
        self.word(node::H_MAGIC).store(node::MAGIC, Ordering::Release);
        Ok(())
    }

    /// The agent: serves posted calls, reaps dead openers, keeps the sysfs tree current.
    fn serve(&self, stop: &AtomicBool) {
        let doorbell = self.mmio.flag(self.layout.doorbell());
        let nap =
            WaitConfig { policy: WaitPolicy::Park, spin: 0, yields: 0, timeout: Some(REAP_EVERY), progress: None };
        while !stop.load(Ordering::Acquire) {
            let seen = doorbell.load();
            // Openers that are gone first: a request they left must not act for whoever
            // takes their open-file entry next.
            let mut changed = self.reap();
            let mut taken = Vec::new();
            for slot in 0..node::MAILBOX_SLOTS {
                let state = self.mmio.flag(self.layout.slot_state(slot));
                match state.load() {
                    // Take it first (unless the caller withdrew it): its arguments cannot
                    // change after that, so the caller check below reads the real ones.
                    node::state::POSTED
                        if state.compare_swap(node::state::POSTED, node::state::SERVING, false)
                            == node::state::POSTED =>
                    {
                        if self.caller_alive(slot) {
                            changed |= self.answer(slot);
                            taken.push(slot);
                        } else {
                            // A request of a process that is gone: nobody waits for it.
                            state.signal(node::state::FREE, false);
                        }
                    }
                    // An answer nobody will read: its caller is gone. Only this agent makes
                    // DONE, so the compare-and-swap cannot free a slot a new caller claimed.
                    node::state::DONE if !self.caller_alive(slot) => {
                        state.compare_swap(node::state::DONE, node::state::FREE, false);
                    }
                    _ => {}
                }
            }
            if changed {
                if let Err(e) = self.write_sysfs() {
                    tracing::warn!("emulated A64FX node: writing {}: {e}", self.sysfs.display());
                }
            }
            // Answers go out after the tree is current: a caller that reads sysfs next sees
            // its own change.
            for slot in taken {
                let state = self.mmio.flag(self.layout.slot_state(slot));
                if state.compare_swap(node::state::SERVING, node::state::DONE, true) == node::state::ABANDONED {
                    tracing::warn!(slot, "emulated A64FX node: a caller stopped waiting for its answer");
                    state.signal(node::state::FREE, false);
                }
            }
            let _ = nap.wait(doorbell, seen + 1, &Unwatched);
        }
    }

    /// Whether the caller of a posted or answered slot still holds the open-file entry it
    /// named (a dead caller's entry is reaped, and may be someone else's by now).
    fn caller_alive(&self, slot: usize) -> bool {
        let args = self.layout.slot_args(slot);
        let file = self.word(args + node::arg::FILE).load(Ordering::Relaxed) as usize;
        let pid = self.word(args + node::arg::PID).load(Ordering::Relaxed);
        file < node::OPEN_SLOTS && pid != 0 && self.word(self.layout.file(file)).load(Ordering::Acquire) == pid
    }

    /// Serves one call; true if it changed the node.
    fn answer(&self, slot: usize) -> bool {
        let args = self.layout.slot_args(slot);
        let get = |at: u64| self.word(args + at).load(Ordering::Relaxed);
        let (op, file, cpu, a0, a1) =
            (get(node::arg::OP), get(node::arg::FILE), get(node::arg::CPU), get(node::arg::ARG0), get(node::arg::ARG1));
        let outcome = match op {
            node::op::BB_ALLOC => self.alloc(file, a0),
            node::op::BB_FREE => self.free(file, a0 as usize, a1 as usize).map(|()| (0, 0)),
            node::op::BW_ASSIGN => self.bw_assign(file, cpu, a0 as usize, a1 as i64).map(|w| (w, 0)),
            node::op::BW_UNASSIGN => self.bw_unassign(file, cpu, a0 as usize).map(|()| (0, 0)),
            node::op::GET_PE_INFO => self.pe(cpu).map(|(c, p)| (c as u64, p as u64)),
            _ => Err(errno::EINVAL),
        };
        let put = |at: u64, v: u64| self.word(args + at).store(v, Ordering::Relaxed);
        match outcome {
            Ok((o0, o1)) => {
                put(node::arg::OUT0, o0);
                put(node::arg::OUT1, o1);
                put(node::arg::RESULT, 0);
                op != node::op::GET_PE_INFO
            }
            Err(e) => {
                put(node::arg::RESULT, (-i64::from(e)) as u64);
                false
            }
        }
    }

    /// The caller's (CMG, PE): `EPERM` if its thread is not bound to one CPU.
    fn pe(&self, cpu: u64) -> Result<(usize, usize), i32> {
        if cpu == node::NOT_BOUND {
            return Err(errno::EPERM);
        }
        self.layout.pe_of(cpu as usize).ok_or(errno::EINVAL)
    }

    fn owned(&self, file: u64, cmg: usize, bb: usize) -> Result<(), i32> {
        if file as usize >= node::OPEN_SLOTS || bb >= self.layout.bbs || self.owner(cmg, bb) != file + 1 {
            return Err(errno::EINVAL);
        }
        Ok(())
    }

    fn alloc(&self, file: u64, cpumask: u64) -> Result<(u64, u64), i32> {
        let l = self.layout;
        if file as usize >= node::OPEN_SLOTS || cpumask.count_ones() < 2 {
            return Err(errno::EINVAL);
        }
        let cpus: Vec<usize> = (0..64).filter(|c| cpumask >> c & 1 == 1).collect();
        let pes: Option<Vec<(usize, usize)>> = cpus.iter().map(|&c| l.pe_of(c)).collect();
        let pes = pes.ok_or(errno::EINVAL)?;
        let cmg = pes[0].0;
        if pes.iter().any(|&(c, _)| c != cmg) {
            return Err(errno::EINVAL);
        }
        let bb = (0..l.bbs).find(|&b| self.owner(cmg, b) == 0).ok_or(errno::EBUSY)?;
        let mask = pes.iter().fold(0u64, |m, &(_, p)| m | 1 << p);
        self.register(cmg, bb).store(init_sync_bb::initial(mask), Ordering::Release);
        self.set_owner(cmg, bb, file + 1);
        Ok((cmg as u64, bb as u64))
    }

    fn free(&self, file: u64, cmg: usize, bb: usize) -> Result<(), i32> {
        if cmg >= self.layout.cmgs {
            return Err(errno::EINVAL);
        }
        self.owned(file, cmg, bb)?;
        if self.connected(cmg, bb).next().is_some() {
            return Err(errno::EPERM);
        }
        self.release(cmg, bb);
        Ok(())
    }

    /// Windows (ppe, window) of CMG `cmg` connected to blade `bb`.
    fn connected(&self, cmg: usize, bb: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let l = self.layout;
        (0..l.pes).flat_map(move |p| (0..l.windows).map(move |w| (p, w))).filter(move |&(p, w)| {
            assign_sync_w::blade(self.assign(cmg, p, w).load(Ordering::Acquire)) == Some(bb as u8)
        })
    }

    fn release(&self, cmg: usize, bb: usize) {
        self.register(cmg, bb).store(0, Ordering::Release);
        self.set_owner(cmg, bb, 0);
    }

    fn bw_assign(&self, file: u64, cpu: u64, bb: usize, window: i64) -> Result<u64, i32> {
        let (cmg, ppe) = self.pe(cpu)?;
        self.owned(file, cmg, bb)?;
        let reg = self.register(cmg, bb).load(Ordering::Acquire);
        if init_sync_bb::mask(reg) >> ppe & 1 == 0 {
            return Err(errno::EINVAL);
        }
        let windows = 0..self.layout.windows;
        let words: Vec<u64> = windows.clone().map(|w| self.assign(cmg, ppe, w).load(Ordering::Acquire)).collect();
        if words.iter().any(|&v| assign_sync_w::blade(v) == Some(bb as u8)) {
            return Err(errno::EINVAL);
        }
        let w = match window {
            -1 => windows.clone().find(|&w| assign_sync_w::blade(words[w]).is_none()).ok_or(errno::EBUSY)?,
            w if w >= 0 && (w as usize) < self.layout.windows => {
                if assign_sync_w::blade(words[w as usize]).is_some() {
                    return Err(errno::EBUSY);
                }
                w as usize
            }
            _ => return Err(errno::EINVAL),
        };
        self.assign(cmg, ppe, w).store(assign_sync_w::connect(bb as u8), Ordering::Release);
        Ok(w as u64)
    }

    fn bw_unassign(&self, file: u64, cpu: u64, bb: usize) -> Result<(), i32> {
        let (cmg, ppe) = self.pe(cpu)?;
        self.owned(file, cmg, bb)?;
        let w = (0..self.layout.windows)
            .find(|&w| assign_sync_w::blade(self.assign(cmg, ppe, w).load(Ordering::Acquire)) == Some(bb as u8))
            .ok_or(errno::EINVAL)?;
        self.assign(cmg, ppe, w).store(0, Ordering::Release);
        Ok(())
    }

    /// Frees what openers that are gone (their lock released) still hold; true if anything.
    fn reap(&self) -> bool {
        let l = self.layout;
        let fd = self._fd.as_raw_fd();
        let mut changed = false;
        for i in 0..node::OPEN_SLOTS {
            let entry = self.word(l.file(i));
            if entry.load(Ordering::Acquire) == 0 || barrier::sys::ofd_held(fd, l.file_lock(i), 1) {
                continue;
            }
            for c in 0..l.cmgs {
                for b in (0..l.bbs).filter(|&b| self.owner(c, b) == i as u64 + 1) {
                    let windows: Vec<(usize, usize)> = self.connected(c, b).collect();
                    for (p, w) in windows {
                        self.assign(c, p, w).store(0, Ordering::Release);
                    }
                    self.release(c, b);
                    tracing::info!(cmg = c, bb = b, "emulated A64FX node: freed a blade of a process that is gone");
                }
            }
            entry.store(0, Ordering::Release);
            changed = true;
        }
        changed
    }

    fn write_sysfs(&self) -> std::io::Result<()> {
        let l = self.layout;
        for c in 0..l.cmgs {
            let dir = self.sysfs.join(format!("CMG{c}"));
            let used_bb = (0..l.bbs).filter(|&b| self.owner(c, b) != 0).fold(0u64, |m, b| m | 1 << b);
            write_file(dir.join("used_bb_bmap"), sysfs::format_used_bb(used_bb))?;
            let used_bw: Vec<(usize, u64)> = (0..l.pes)
                .map(|p| {
                    let bits = (0..l.windows)
                        .filter(|&w| assign_sync_w::blade(self.assign(c, p, w).load(Ordering::Acquire)).is_some())
                        .fold(0u64, |m, w| m | 1 << w);
                    (c * l.pes + p, bits)
                })
                .collect();
            write_file(dir.join("used_bw_bmap"), sysfs::format_used_bw(&used_bw))?;
            for b in 0..l.bbs {
                let reg = self.register(c, b).load(Ordering::Acquire);
                write_file(
                    dir.join(format!("init_sync_bb{b}")),
                    sysfs::format_init_sync_bb(init_sync_bb::mask(reg), init_sync_bb::bst(reg)),
                )?;
            }
        }
        Ok(())
    }
}

/// Writes a sysfs file as one change (a temporary file renamed over it): a reader never sees
/// it empty or half written, as with the real sysfs.
fn write_file(path: impl AsRef<Path>, text: impl AsRef<[u8]>) -> std::io::Result<()> {
    let path = path.as_ref();
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text)?;
    // Writable by this user alone whatever the umask: drivers trust only such a tree.
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use barrier_hw::a64fx::errno::{EBUSY, EINVAL, EPERM};
    use barrier_hw::a64fx::node::Layout;

    const FILE: u64 = 0;
    const OTHER: u64 = 1;

    fn cpus(list: &[u64]) -> u64 {
        list.iter().fold(0, |m, c| m | 1 << c)
    }

    #[test]
    fn alloc_checks_the_mask_like_the_driver() {
        let node = Node::start(Layout::A64FX).unwrap();
        let s = &node.shared;
        assert_eq!(s.alloc(FILE, cpus(&[3])), Err(EINVAL), "one PE");
        assert_eq!(s.alloc(FILE, cpus(&[11, 12])), Err(EINVAL), "across CMGs");
        assert_eq!(s.alloc(FILE, cpus(&[47, 48])), Err(EINVAL), "an offline CPU");
        for bb in 0..6 {
            assert_eq!(s.alloc(FILE, cpus(&[12, 13])), Ok((1, bb)));
        }
        assert_eq!(s.alloc(FILE, cpus(&[14, 15])), Err(EBUSY), "the seventh blade of CMG 1");
        assert_eq!(s.alloc(FILE, cpus(&[0, 1])), Ok((0, 0)), "CMG 0 still has blades");
        let reg = s.register(1, 0).load(Ordering::Relaxed);
        assert_eq!((init_sync_bb::mask(reg), init_sync_bb::bst(reg)), (0b11, 0));
    }

    #[test]
    fn windows_follow_the_drivers_rules() {
        let node = Node::start(Layout::A64FX).unwrap();
        let s = &node.shared;
        let (_, bb) = s.alloc(FILE, cpus(&[24, 25])).unwrap();
        let bb = bb as usize;
        assert_eq!(s.bw_assign(FILE, node::NOT_BOUND, bb, -1), Err(EPERM), "caller not bound to one PE");
        assert_eq!(s.bw_assign(OTHER, 24, bb, -1), Err(EINVAL), "another process's blade");
        assert_eq!(s.bw_assign(FILE, 26, bb, -1), Err(EINVAL), "a PE outside the mask");
        assert_eq!(s.bw_assign(FILE, 1, bb, -1), Err(EINVAL), "a PE of another CMG");
        assert_eq!(s.bw_assign(FILE, 24, bb, 4), Err(EINVAL), "no window 4");
        assert_eq!(s.bw_assign(FILE, 24, bb, 2), Ok(2));
        assert_eq!(s.bw_assign(FILE, 24, bb, -1), Err(EINVAL), "the PE already has a window on this blade");
        assert_eq!(s.free(FILE, 2, bb), Err(EPERM), "windows still connected");
        // Fill PE 25's windows from other blades, then ask for one more.
        for _ in 0..4 {
            let (_, b) = s.alloc(FILE, cpus(&[25, 26])).unwrap();
            s.bw_assign(FILE, 25, b as usize, -1).unwrap();
        }
        assert_eq!(s.bw_assign(FILE, 25, bb, -1), Err(EBUSY), "the fifth window of a PE");
        assert_eq!(s.bw_unassign(FILE, 25, bb), Err(EINVAL), "no window of PE 25 on this blade");
        assert_eq!(s.bw_unassign(FILE, 24, bb), Ok(()));
        assert_eq!(s.free(OTHER, 2, bb), Err(EINVAL), "another process's blade");
        assert_eq!(s.free(FILE, 2, bb), Ok(()));
        assert_eq!(s.pe(30), Ok((2, 6)));
        assert_eq!(s.pe(node::NOT_BOUND), Err(EPERM));
    }
}
