//! The engine's loop: construction, the counters it holds back, the scan of every group,
//! configuration changes from the doorbell.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier::wait::{Unwatched, WaitConfig, WaitPolicy};
use barrier_hw::{control, global, status};

use crate::config::{Claim, Config, Faults, Latency, Taken};
use crate::dev::{doorbell, Dev};

use super::state::*;

impl Drop for Engine {
    fn drop(&mut self) {
        self.flush_tally();
    }
}

impl Engine {
    pub(crate) fn new(dev: Dev, config: Config, stop: Arc<AtomicBool>) -> Self {
        let map = config.map;
        let rng = config.faults.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let plain = config.faults == Faults { seed: config.faults.seed, ..Faults::default() }
            && config.latency == Latency::default();
        Engine {
            tally: Tally::default(),
            plain,
            regs: (0..map.max_groups).map(|g| RegsAt::of(map, g)).collect(),
            dev,
            map,
            config,
            stop,
            groups: vec![Group::default(); map.max_groups],
            active: Vec::new(),
            rng,
            vanished: false,
            error_stuck: false,
            last_gc: Instant::now(),
        }
    }

    pub(crate) fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    #[inline]
    pub(crate) fn reg(&self, g: usize, r: &barrier_hw::Register) -> u64 {
        self.dev.group_load(self.map, g, r)
    }

    #[inline]
    pub(crate) fn set_reg(&self, g: usize, r: &barrier_hw::Register, v: u64) {
        self.dev.group_store(self.map, g, r, v)
    }

    pub(crate) fn count(&self, reg: &barrier_hw::Register, n: u64) {
        self.dev.word(reg.offset).fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a completed barrier (its arrivals, its release stores) and device time. The
    /// engine thread writes the counters at once; an inline engine adds up in this process
    /// and writes every [`TALLY_BARRIERS`] barriers, at every full pass and when a driver is
    /// done with the device (`InlineWork::Flush`): the counters share one line, which would
    /// otherwise move between the completing ranks at every barrier.
    pub(crate) fn tally(&mut self, arrivals: u64, releases: u64, barriers: u64, busy_ns: u64) {
        let t = &mut self.tally;
        t.arrivals += arrivals;
        t.releases += releases;
        t.barriers += barriers;
        t.busy_ns += busy_ns;
        if !self.config.inline || t.barriers >= TALLY_BARRIERS {
            self.flush_tally();
        }
    }

    /// Writes the counts [`Engine::tally`] holds back.
    pub(crate) fn flush_tally(&mut self) {
        let t = std::mem::take(&mut self.tally);
        for (reg, n) in [
            (&global::ARRIVALS, t.arrivals),
            (&global::RELEASES, t.releases),
            (&global::BARRIERS, t.barriers),
            (&global::ENGINE_BUSY_NS, t.busy_ns),
        ] {
            if n != 0 {
                self.count(reg, n);
            }
        }
    }

    pub(crate) fn run(mut self) {
        let mut seen = doorbell(&self.dev).load();
        let config_seq = |dev: &barrier::mmio::Mmio| dev.word(global::CONFIG_SEQ.offset).load(Ordering::Acquire);
        let mut config_seen = config_seq(&self.dev);
        self.refresh();
        let idle_wait = WaitConfig {
            policy: WaitPolicy::Park,
            spin: 2000,
            yields: 8,
            timeout: Some(Duration::from_millis(200)),
            progress: None,
        };
        while !self.stop.load(Ordering::Acquire) {
            if !self.vanished {
                let start = Instant::now();
                seen = doorbell(&self.dev).load();
                let config = config_seq(&self.dev);
                if config != config_seen {
                    config_seen = config;
                    self.refresh();
                }
                self.dev.word(global::CONFIG_SEEN.offset).store(config_seen, Ordering::Release);
                let worked = self.serve();
                if worked {
                    self.count(&global::ENGINE_BUSY_NS, start.elapsed().as_nanos() as u64);
                    continue;
                }
                if self.last_gc.elapsed() > Duration::from_secs(1) {
                    self.collect_garbage();
                }
            }
            // Idle: sleep until a doorbell (or 200 ms, to notice `stop` and collect garbage).
            let _ = idle_wait.wait(doorbell(&self.dev), seen + 1, &Unwatched);
        }
    }

    /// Re-reads which groups are owned and (re)configures groups whose CONTROL changed.
    pub(crate) fn refresh(&mut self) {
        self.active.clear();
        let mut in_use = 0;
        for g in 0..self.map.max_groups {
            let owner = self.reg(g, &self.map.group.owner);
            if owner != 0 {
                in_use += 1;
            }
            let ctl = self.reg(g, &self.map.group.control);
            if ctl & control::RESET != 0 {
                self.reset(g);
            }
            if owner != 0 && ctl & control::ENABLE != 0 {
                if !self.groups[g].enabled && !self.groups[g].failed {
                    self.configure(g);
                }
                if self.groups[g].enabled {
                    self.active.push(g);
                }
            } else if self.groups[g].enabled || owner == 0 {
                self.groups[g] = Group::default();
                if !self.error_stuck {
                    self.set_reg(g, &self.map.group.status, 0);
                }
            }
        }
        self.dev.word(global::GROUPS_IN_USE.offset).store(in_use, Ordering::Relaxed);
    }

    /// One pass over the active groups; true if anything happened.
    pub(crate) fn serve(&mut self) -> bool {
        self.dev.word(global::HEARTBEAT.offset).fetch_add(1, Ordering::Release);
        let mut worked = false;
        for idx in 0..self.active.len() {
            let g = self.active[idx];
            if !self.groups[g].enabled {
                continue;
            }
            if self.reg(g, &self.map.group.control) & control::ARM == 0 {
                continue;
            }
            worked |= self.serve_group(g);
        }
        worked
    }

    /// Takes the arrivals waiting in group `g`'s slots (the scan of the engine thread, and of
    /// an inline device's doorbell rings); the arrival that completes the epoch releases it.
    pub(crate) fn serve_group(&mut self, g: usize) -> bool {
        let m = self.map;
        let mut worked = false;
        let mut completed = false;
        for w in 0..self.groups[g].mask.len() {
            let arrived = self.dev.group_word(m, g, &m.group.arrived_mask, w).load(Ordering::Acquire);
            let mut pending = self.groups[g].mask[w] & !arrived;
            while pending != 0 && self.groups[g].enabled {
                let member = w * 64 + pending.trailing_zeros() as usize;
                pending &= pending - 1;
                match self.take_arrival(g, member, Claim::Swap) {
                    Taken::Nothing => {}
                    Taken::Arrival => worked = true,
                    Taken::Completed => {
                        worked = true;
                        completed = true;
                    }
                }
            }
        }
        if worked && !completed && self.groups[g].enabled {
            let st = self.reg(g, &m.group.status);
            let active = (st | status::ACTIVE) & !status::COMPLETE;
            // Only if it changes: STATUS shares its line with registers every pass reads.
            if active != st {
                self.set_reg(g, &m.group.status, active);
            }
        }
        worked
    }
}
