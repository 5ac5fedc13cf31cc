//! The probes' clock: wall time, or with `PROBE_CPU_TIME` set in the environment the
//! calling thread's CPU time (`rss::thread_cpu_secs`). On a machine whose cores other jobs
//! share, a wall-time interval includes the slices the probe waited for its CPU; the CPU
//! clock leaves them out (a page fault's kernel time is the thread's, and counts). The
//! probes run burn's Flex backend on one thread, so on an idle core the two agree.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::time::Duration;

/// 0: not read yet, 1: wall time, 2: the thread's CPU time
static MODE: AtomicU8 = AtomicU8::new(0);

/// Whether the probes time with the thread's CPU clock (`PROBE_CPU_TIME` set).
pub fn cpu_time() -> bool {
    let mode = match MODE.load(Relaxed) {
        0 => {
            // read once; the lookup's allocations are not the probe's
            let on = crate::alloc::exclude(|| std::env::var_os("PROBE_CPU_TIME").is_some());
            let mode = if on { 2 } else { 1 };
            MODE.store(mode, Relaxed);
            mode
        }
        mode => mode,
    };
    mode == 2
}

/// A point in time on the probes' clock (`std::time::Instant`'s `now` and `elapsed`).
#[derive(Clone, Copy)]
pub enum Instant {
    Wall(std::time::Instant),
    Cpu(f64),
}

impl Instant {
    pub fn now() -> Self {
        if cpu_time() {
            Instant::Cpu(crate::rss::thread_cpu_secs())
        } else {
            Instant::Wall(std::time::Instant::now())
        }
    }

    pub fn elapsed(&self) -> Duration {
        match self {
            Instant::Wall(t) => t.elapsed(),
            Instant::Cpu(c) => Duration::from_secs_f64((crate::rss::thread_cpu_secs() - c).max(0.0)),
        }
    }
}
