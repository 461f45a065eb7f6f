//! The seam over an emulated A64FX node (`barrier_emu::a64fx`): a shared file that holds the
//! node's registers, its open-file table and a mailbox through which the node's agent (the
//! emulated kernel driver) serves the driver calls.
//!
//! * **Open**: the process takes an OFD lock on a free open-file entry's byte, then writes its
//!   pid into the entry; the entry (and the blades allocated through it) belong to this open.
//!   The node frees a dead opener's blades and windows once its lock is gone, as the real
//!   driver does when the process's last fd closes.
//! * **Driver calls**: claim a free mailbox slot (FREE → CLAIMED), write the arguments, the
//!   calling thread's CPU and this process's pid, post it (→ POSTED) and ring the doorbell;
//!   the agent takes it (→ SERVING) and answers (→ DONE), the caller reads the answer and
//!   frees the slot. A call not taken in time is withdrawn (POSTED → FREE, racing the agent's
//!   compare-and-swap), so it either never runs or its answer is read.
//! * **Windows**: the hardware's part runs in the writer's context, as on the chip: a BST write
//!   is one compare-and-swap of the blade's register word by [`barrier_hw::a64fx::write_bst`];
//!   the write that flips LBSY also counts the flip in the blade's flips flag and wakes
//!   parked waiters.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use barrier_hw::a64fx::{errno, node};

use super::driver::{Driver, Errno};
use super::window::{EmulatedWindow, Window};
use crate::mmio::Mmio;
use crate::wait::{Unwatched, WaitConfig, WaitPolicy};

/// How long a driver call waits for the node's agent.
const ANSWER: Duration = Duration::from_secs(5);

/// An emulated node opened by this process.
#[derive(Debug)]
pub(crate) struct EmulatedDriver {
    mmio: Arc<Mmio>,
    layout: node::Layout,
    file: usize,
    path: String,
}

impl EmulatedDriver {
    /// Maps the node at `path`, checks that an agent serves it, and opens it.
    pub fn open(path: &Path) -> Result<EmulatedDriver, String> {
        let shown = path.display().to_string();
        let head = Mmio::open(path, barrier_hw::FLAG_BYTES).map_err(|e| format!("cannot map {shown}: {e}"))?;
        if head.word(node::H_MAGIC).load(Ordering::Acquire) != node::MAGIC {
            return Err(format!("{shown} is not an emulated A64FX node (MAGIC differs)"));
        }
        let version = head.word(node::H_VERSION).load(Ordering::Relaxed);
        if version != node::VERSION {
            return Err(format!("{shown} has node layout version {version}, this driver {}", node::VERSION));
        }
        let word = |o| head.word(o).load(Ordering::Relaxed) as usize;
        let layout = node::Layout {
            cmgs: word(node::H_CMGS),
            pes: word(node::H_PES),
            bbs: word(node::H_BBS),
            windows: word(node::H_WINDOWS),
        };
        layout.validate().map_err(|e| format!("{shown}: {e}"))?;
        let mmio = Mmio::open(path, layout.size()).map_err(|e| format!("cannot map {shown}: {e}"))?;
        let fd = mmio.file().expect("opened from a path").as_raw_fd();
        if !crate::sys::flock_held(fd) {
            return Err(format!("nobody serves the emulated A64FX node at {shown} (its agent has exited)"));
        }
        let me = u64::from(std::process::id());
        let file = (0..node::OPEN_SLOTS)
            .find(|&i| {
                let entry = mmio.word(layout.file(i));
                if entry.load(Ordering::Acquire) != 0 || !crate::sys::ofd_lock(fd, layout.file_lock(i)).unwrap_or(false)
                {
                    return false;
                }
                // The lock first, then the pid: the node frees an entry only when it sees a
                // pid without a lock, so it cannot free one being taken.
                if entry.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    true
                } else {
                    crate::sys::ofd_unlock(fd, layout.file_lock(i));
                    false
                }
            })
            .ok_or_else(|| {
                format!("the emulated A64FX node at {shown} has {} processes open already", node::OPEN_SLOTS)
            })?;
        Ok(EmulatedDriver { mmio: Arc::new(mmio), layout, file, path: shown })
    }

    /// One driver call through the mailbox: (out0, out1) or the errno.
    fn call(&self, op: u64, arg0: u64, arg1: u64) -> Result<(u64, u64), Errno> {
        let l = &self.layout;
        let cpu = crate::sys::bound_cpu().map_or(node::NOT_BOUND, |c| c as u64);
        let waiter =
            WaitConfig { policy: WaitPolicy::Park, spin: 64, yields: 16, timeout: Some(ANSWER), progress: None };
        let deadline = std::time::Instant::now() + ANSWER;
        let slot = loop {
            let free = (0..node::MAILBOX_SLOTS).find(|&i| {
                self.mmio.flag(l.slot_state(i)).compare_swap(node::state::FREE, node::state::CLAIMED, false)
                    == node::state::FREE
            });
            match free {
                Some(i) => break i,
                None if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
                None => return Err(errno::ETIMEDOUT),
            }
        };
        let args = l.slot_args(slot);
        let put = |at: u64, v: u64| self.mmio.word(args + at).store(v, Ordering::Relaxed);
        put(node::arg::OP, op);
        put(node::arg::FILE, self.file as u64);
        put(node::arg::CPU, cpu);
        put(node::arg::ARG0, arg0);
        put(node::arg::ARG1, arg1);
        put(node::arg::PID, u64::from(std::process::id()));
        let state = self.mmio.flag(l.slot_state(slot));
        state.signal(node::state::POSTED, false);
        self.mmio.flag(l.doorbell()).bump(true);
        if waiter.wait(state, node::state::DONE, &Unwatched).is_err() {
            // Withdraw the request if the agent has not taken it: then it never runs.
            match state.compare_swap(node::state::POSTED, node::state::FREE, false) {
                node::state::POSTED => return Err(errno::ETIMEDOUT),
                // Taken: it runs, and its effect (a blade, a window) must be known to the
                // caller, so wait for the answer once more.
                node::state::SERVING | node::state::DONE => {
                    if waiter.wait(state, node::state::DONE, &Unwatched).is_err()
                        && state.compare_swap(node::state::SERVING, node::state::ABANDONED, false)
                            == node::state::SERVING
                    {
                        // The agent frees the slot when it finishes; the call's effect is lost.
                        return Err(errno::ETIMEDOUT);
                    }
                }
                // Not ours any more (the agent judged this process gone): touch nothing.
                _ => return Err(errno::EFAULT),
            }
        }
        let get = |at: u64| self.mmio.word(args + at).load(Ordering::Relaxed);
        let out = (get(node::arg::RESULT) as i64, get(node::arg::OUT0), get(node::arg::OUT1));
        state.signal(node::state::FREE, false);
        match out.0 {
            0 => Ok((out.1, out.2)),
            e => Err((-e) as Errno),
        }
    }
}

impl Drop for EmulatedDriver {
    fn drop(&mut self) {
        // Closing the device: the node frees the blades and windows this open still holds,
        // and then the entry, once it sees the lock gone (as the real driver does on release
        // of the file). The entry is not cleared here: a new opener must not inherit blades.
        if let Some(f) = self.mmio.file() {
            crate::sys::ofd_unlock(f.as_raw_fd(), self.layout.file_lock(self.file));
        }
        self.mmio.flag(self.layout.doorbell()).bump(true);
    }
}

impl Driver for EmulatedDriver {
    fn describe(&self) -> String {
        format!(
            "emulated A64FX node at {} ({} CMGs x {} PEs, {} blades per CMG, {} windows per PE)",
            self.path, self.layout.cmgs, self.layout.pes, self.layout.bbs, self.layout.windows
        )
    }

    fn alloc_blade(&self, cpus: &[usize]) -> Result<(u8, u8), Errno> {
        let mut mask = 0u64;
        for &c in cpus {
            if c >= 64 {
                return Err(errno::EINVAL);
            }
            mask |= 1 << c;
        }
        self.call(node::op::BB_ALLOC, mask, 0).map(|(cmg, bb)| (cmg as u8, bb as u8))
    }

    fn free_blade(&self, cmg: u8, bb: u8) -> Result<(), Errno> {
        self.call(node::op::BB_FREE, u64::from(cmg), u64::from(bb)).map(|_| ())
    }

    fn assign(&self, bb: u8, window: i8) -> Result<u8, Errno> {
        self.call(node::op::BW_ASSIGN, u64::from(bb), window as i64 as u64).map(|(w, _)| w as u8)
    }

    fn unassign(&self, bb: u8) -> Result<(), Errno> {
        self.call(node::op::BW_UNASSIGN, u64::from(bb), 0).map(|_| ())
    }

    fn caller_cpu(&self) -> Option<usize> {
        // The node's CPUs are virtual: the recorded binding counts.
        crate::sys::bound_cpu()
    }

    fn pe_info(&self) -> Result<(u8, u8), Errno> {
        self.call(node::op::GET_PE_INFO, 0, 0).map(|(cmg, ppe)| (cmg as u8, ppe as u8))
    }

    fn window(&self, cmg: u8, bb: u8, ppe: u8, window: u8) -> Result<Window, String> {
        let l = &self.layout;
        let (cmg, bb, ppe, window) = (cmg as usize, bb as usize, ppe as usize, window as usize);
        if cmg >= l.cmgs || bb >= l.bbs || ppe >= l.pes || window >= l.windows {
            return Err(format!("window {window} of PE {ppe} on blade {bb} of CMG {cmg} is outside the node"));
        }
        // The hardware routes the window to its blade through ASSIGN_SYNC_W; check that the
        // node connected it where the driver said.
        let assign = self.mmio.word(l.assign(cmg, ppe, window)).load(Ordering::Acquire);
        if barrier_hw::a64fx::assign_sync_w::blade(assign) != Some(bb as u8) {
            return Err(format!("window {window} of PE {ppe} (CMG {cmg}) is not connected to blade {bb}"));
        }
        Ok(Window::emulated(EmulatedWindow::new(Arc::clone(&self.mmio), l.blade(cmg, bb), l.flips(cmg, bb), ppe)))
    }
}
