//! Cost of the locator's two BTreeMap inserts per untracked op (issue 38, drop-release's
//! registration term): `graphs: BTreeMap<NodeId, Arc<Graph>>` and `keys: BTreeMap<NodeId,
//! HashSet<NodeId>>` get one entry each under an ascending id. `keep` leaves them in (the
//! maps grow by one graph per op, as on unpatched burn); `release` removes both again
//! (drop-release's release: the maps stay at 0-1 entries), so its time includes the removals.
//! Half of ITERATIONS are run first untimed (a map of 1.5 ITERATIONS entries at the end).
//! Prints `mode,iterations,ns per op (thread CPU clock),entries left`.
//! Build and run: rustc -O btree-grow.rs && taskset -c 1 nice -n -15 ./btree-grow keep|release N
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, t: *mut Timespec) -> i32;
}

const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn cpu_ns() -> f64 {
    let mut t = Timespec { sec: 0, nsec: 0 };
    unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.sec as f64 * 1e9 + t.nsec as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 || (args[1] != "keep" && args[1] != "release") {
        eprintln!("usage: {} keep|release ITERATIONS", args[0]);
        std::process::exit(2);
    }
    let keep = args[1] == "keep";
    let n: u64 = args[2].parse().expect("ITERATIONS: a number");
    let mut graphs: BTreeMap<u64, Arc<[u64; 4]>> = BTreeMap::new();
    let mut keys: BTreeMap<u64, HashSet<u64>> = BTreeMap::new();
    let graph = Arc::new([0u64; 4]);
    let mut op = |id: u64| {
        graphs.insert(id, graph.clone());
        keys.insert(id, HashSet::new());
        if !keep {
            graphs.remove(&id);
            keys.remove(&id);
        }
    };
    for id in 0..n / 2 {
        op(id);
    }
    let t0 = cpu_ns();
    for id in n / 2..n / 2 + n {
        op(id);
    }
    let t1 = cpu_ns();
    drop(op);
    println!("{},{},{:.1},{}", args[1], n, (t1 - t0) / n as f64, graphs.len());
}
