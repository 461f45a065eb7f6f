//! The emulated node's shared memory: registers, the open-file table and the request mailbox,
//! in lines of [`crate::FLAG_BYTES`] (one writer per line where one is possible).
//!
//! ```text
//! line 0                 header: MAGIC, VERSION, CMGS, PES_PER_CMG, BBS, WINDOWS
//! line 1                 doorbell (a flag the node's agent sleeps on)
//! blades                 per (cmg, bb): a register line [INIT_SYNC_BB, OWNER] and a flips flag
//! PEs                    per (cmg, ppe): a line of ASSIGN_SYNC_W0..3
//! open files             OPEN_SLOTS lines: [pid of the opener, 0 when free]
//! mailbox                MAILBOX_SLOTS × (a state flag line, an argument line of 9 words)
//! ```
//!
//! The flips flag counts LBSY flips (its low bit is LBSY): waiters can sleep on it, which real
//! hardware does not need (every thread owns its PE) but an oversubscribed emulation does.

use crate::layout::FLAG_BYTES;

/// MAGIC of an emulated node ("A64FXHWB").
pub const MAGIC: u64 = u64::from_le_bytes(*b"A64FXHWB");
/// Layout version (2: the caller's pid in every request, the SERVING and ABANDONED states; 3: a
/// flag parks on a futex word of its own, `barrier::wait::Flag`).
pub const VERSION: u64 = 3;
/// Header words.
pub const H_MAGIC: u64 = 0;
/// Layout version word.
pub const H_VERSION: u64 = 8;
/// CMGs.
pub const H_CMGS: u64 = 16;
/// Compute PEs per CMG.
pub const H_PES: u64 = 24;
/// Blades per CMG.
pub const H_BBS: u64 = 32;
/// Windows per PE.
pub const H_WINDOWS: u64 = 40;
/// Open-file table entries (one per process with the device open).
pub const OPEN_SLOTS: usize = 64;
/// Mailbox slots (concurrent driver calls).
pub const MAILBOX_SLOTS: usize = 64;

/// Mailbox slot states (the value of the slot's state flag).
pub mod state {
    /// Free.
    pub const FREE: u64 = 0;
    /// Claimed by a caller writing its request.
    pub const CLAIMED: u64 = 1;
    /// Request posted; the agent may take it (→ SERVING) or the caller withdraw it after
    /// its timeout (→ FREE), whichever compare-and-swap wins.
    pub const POSTED: u64 = 2;
    /// The agent has taken the request: it will answer, and the caller waits for that.
    pub const SERVING: u64 = 3;
    /// Answered; the caller reads the answer and frees the slot.
    pub const DONE: u64 = 4;
    /// The caller stopped waiting for a request the agent had taken (SERVING →
    /// ABANDONED); the agent frees the slot when it finishes instead of answering.
    pub const ABANDONED: u64 = 5;
}

/// Driver calls (the ioctls, plus open).
pub mod op {
    /// BB_ALLOC: arg0 = cpumask; out0 = cmg, out1 = bb.
    pub const BB_ALLOC: u64 = 1;
    /// BB_FREE: arg0 = cmg, arg1 = bb.
    pub const BB_FREE: u64 = 2;
    /// BW_ASSIGN: arg0 = bb, arg1 = window (as i8); out0 = window.
    pub const BW_ASSIGN: u64 = 3;
    /// BW_UNASSIGN: arg0 = bb.
    pub const BW_UNASSIGN: u64 = 4;
    /// GET_PE_INFO: out0 = cmg, out1 = ppe.
    pub const GET_PE_INFO: u64 = 5;
}

/// Words of a mailbox slot's argument line.
pub mod arg {
    /// Operation.
    pub const OP: u64 = 0;
    /// Open-file slot of the caller.
    pub const FILE: u64 = 8;
    /// The caller's CPU, or `NOT_BOUND` when its thread is not bound to exactly one.
    pub const CPU: u64 = 16;
    /// First argument.
    pub const ARG0: u64 = 24;
    /// Second argument.
    pub const ARG1: u64 = 32;
    /// Result: 0 or a negative errno (as i64).
    pub const RESULT: u64 = 40;
    /// First output.
    pub const OUT0: u64 = 48;
    /// Second output.
    pub const OUT1: u64 = 56;
    /// The caller's pid: the agent serves a request only while the open-file entry it names
    /// still belongs to this pid (a dead caller's request must not act for a new opener of
    /// the same entry), and frees the slots of callers that are gone.
    pub const PID: u64 = 64;
}

/// Bytes of a slot's argument words (`arg::*`), in whole lines.
const ARG_BYTES: u64 = (arg::PID + 8).div_ceil(FLAG_BYTES) * FLAG_BYTES;
/// Bytes of one mailbox slot: the state flag's line and the argument lines.
const SLOT_BYTES: u64 = FLAG_BYTES + ARG_BYTES;

/// The CPU word of a caller whose thread is not bound to exactly one CPU.
pub const NOT_BOUND: u64 = u64::MAX;

/// The node's shape and where everything lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// CMGs.
    pub cmgs: usize,
    /// Compute PEs per CMG.
    pub pes: usize,
    /// Blades per CMG.
    pub bbs: usize,
    /// Windows per PE.
    pub windows: usize,
}

impl Layout {
    /// The A64FX: 4 CMGs × 12 PEs, 6 blades per CMG, 4 windows per PE.
    pub const A64FX: Layout =
        Layout { cmgs: super::CMGS, pes: super::PES_PER_CMG, bbs: super::BBS_PER_CMG, windows: super::WINDOWS_PER_PE };

    /// Checks the shape against the hardware's field widths.
    pub fn validate(&self) -> Result<(), String> {
        if self.cmgs == 0 || self.cmgs > 8 {
            return Err(format!("{} CMGs: a node has 1 to 8", self.cmgs));
        }
        if self.pes < 2 || self.pes > super::MAX_PES_PER_CMG {
            return Err(format!("{} PEs per CMG: MASK has room for 2 to {}", self.pes, super::MAX_PES_PER_CMG));
        }
        if self.bbs == 0 || self.bbs > 8 {
            return Err(format!("{} blades per CMG: ASSIGN_SYNC_W names blades 0 to 7", self.bbs));
        }
        if self.windows == 0 || self.windows > 4 {
            return Err(format!("{} windows per PE: a PE has 1 to 4", self.windows));
        }
        if self.cmgs * self.pes > 64 {
            return Err(format!(
                "{} CPUs, more than 64: the emulated cpumask is one word (lower the CMGs or the PEs per CMG)",
                self.cmgs * self.pes
            ));
        }
        Ok(())
    }

    /// CPUs of the node (cpuid = cmg * pes + ppe).
    pub fn cpus(&self) -> usize {
        self.cmgs * self.pes
    }

    /// (CMG, physical PE) of a cpuid.
    pub fn pe_of(&self, cpu: usize) -> Option<(usize, usize)> {
        (cpu < self.cpus()).then(|| (cpu / self.pes, cpu % self.pes))
    }

    /// The doorbell flag line.
    pub fn doorbell(&self) -> u64 {
        FLAG_BYTES
    }

    fn blades_base(&self) -> u64 {
        2 * FLAG_BYTES
    }

    /// The register line of blade `bb` of CMG `cmg`: [INIT_SYNC_BB, OWNER].
    pub fn blade(&self, cmg: usize, bb: usize) -> u64 {
        self.blades_base() + ((cmg * self.bbs + bb) * 2) as u64 * FLAG_BYTES
    }

    /// The flips flag of a blade (counts LBSY flips).
    pub fn flips(&self, cmg: usize, bb: usize) -> u64 {
        self.blade(cmg, bb) + FLAG_BYTES
    }

    fn pes_base(&self) -> u64 {
        self.blades_base() + (self.cmgs * self.bbs * 2) as u64 * FLAG_BYTES
    }

    /// `ASSIGN_SYNC_W<window>` of PE `ppe` of CMG `cmg`.
    pub fn assign(&self, cmg: usize, ppe: usize, window: usize) -> u64 {
        self.pes_base() + (cmg * self.pes + ppe) as u64 * FLAG_BYTES + 8 * window as u64
    }

    fn files_base(&self) -> u64 {
        self.pes_base() + (self.cmgs * self.pes) as u64 * FLAG_BYTES
    }

    /// Open-file table entry `i` (the opener's pid, 0 when free).
    pub fn file(&self, i: usize) -> u64 {
        self.files_base() + i as u64 * FLAG_BYTES
    }

    fn mailbox_base(&self) -> u64 {
        self.files_base() + OPEN_SLOTS as u64 * FLAG_BYTES
    }

    /// Mailbox slot `i`'s state flag.
    pub fn slot_state(&self, i: usize) -> u64 {
        self.mailbox_base() + i as u64 * SLOT_BYTES
    }

    /// Mailbox slot `i`'s argument line.
    pub fn slot_args(&self, i: usize) -> u64 {
        self.slot_state(i) + FLAG_BYTES
    }

    /// Bytes of the node file.
    pub fn size(&self) -> u64 {
        self.mailbox_base() + MAILBOX_SLOTS as u64 * SLOT_BYTES
    }

    /// The byte of the node file an opener holds an OFD lock on while open-file entry `i` is
    /// its: the node frees a dead opener's blades and windows when the lock is gone.
    pub fn file_lock(&self, i: usize) -> u64 {
        self.file(i)
    }
}
