//! Resident set size from /proc/self/statm (Linux): resident pages * page size; the calling
//! thread's CPU time and getrusage counts (minor faults, context switches), which more than one
//! probe reads.

unsafe extern "C" {
    fn sysconf(name: i32) -> i64;
}

/// `_SC_PAGESIZE` on Linux (glibc and musl).
const SC_PAGESIZE: i32 = 30;

pub fn page_size() -> u64 {
    let p = unsafe { sysconf(SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}

/// Resident bytes of this process, or 0 if /proc is unavailable.
pub fn rss_bytes() -> u64 {
    match std::fs::read_to_string("/proc/self/statm") {
        Ok(s) => {
            let resident: u64 = s
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            resident * page_size()
        }
        Err(_) => 0,
    }
}

/// (RssAnon, RssFile) in bytes from /proc/self/status (Linux), or zeros.
pub fn rss_split() -> (u64, u64) {
    let mut anon = 0;
    let mut file = 0;
    if let Ok(s) = std::fs::read_to_string("/proc/self/status") {
        for line in s.lines() {
            let kb = |l: &str| -> u64 {
                l.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0) * 1024
            };
            if line.starts_with("RssAnon:") { anon = kb(line); }
            if line.starts_with("RssFile:") { file = kb(line); }
        }
    }
    (anon, file)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct MallInfo2 {
    pub arena: usize, pub ordblks: usize, pub smblks: usize, pub hblks: usize,
    pub hblkhd: usize, pub usmblks: usize, pub fsmblks: usize, pub uordblks: usize,
    pub fordblks: usize, pub keepcost: usize,
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe extern "C" {
    fn mallinfo2() -> MallInfo2;
}

/// glibc's mallinfo2 (main arena + mmapped), or None elsewhere.
pub fn malloc_info() -> Option<MallInfo2> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    { return Some(unsafe { mallinfo2() }); }
    #[allow(unreachable_code)]
    None
}

/// Mappings of /proc/self/smaps with their resident KiB (PROBE_SMAPS diagnostics).
pub fn smaps_summary() -> String {
    let mut out = String::new();
    let Ok(s) = std::fs::read_to_string("/proc/self/smaps") else { return out };
    let mut head = String::new();
    for line in s.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            head = line.to_string();
        } else if line.starts_with("Rss:") {
            let kb: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
            if kb > 0 {
                let mut it = head.split_whitespace();
                let range = it.next().unwrap_or("");
                let perms = it.next().unwrap_or("");
                let name = head.split_whitespace().nth(5).unwrap_or("[anon]");
                let (a, b) = range.split_once('-').unwrap_or(("0", "0"));
                let size = (u64::from_str_radix(b, 16).unwrap_or(0) - u64::from_str_radix(a, 16).unwrap_or(0)) / 1024;
                let short = name.rsplit('/').next().unwrap_or(name);
                out.push_str(&format!("        {range} {perms} size {size:>6} KiB rss {kb:>6} KiB {short}\n"));
            }
        }
    }
    out
}

/// Resident bytes of this binary's executable (text) mappings, from /proc/self/smaps:
/// the sum of `Rss:` over the mappings with `x` permission whose path is the path of the
/// first mapping (the executable is mapped first). Reads through a stack buffer and
/// allocates nothing, so that measuring does not move the heap or the arena. 0 if /proc
/// is unavailable. Pages come in through file fault-around (64 KiB by default), so the
/// figure moves in steps of up to 16 pages.
pub fn text_rss_bytes() -> u64 {
    smaps_classes_noalloc()[0]
}

/// Resident bytes of /proc/self/smaps by class, read without allocating: [the binary's
/// executable mappings, its other mappings, other files (libraries), [heap], other anonymous].
pub fn smaps_classes_noalloc() -> [u64; 5] {
    use std::io::Read;
    let mut out = [0u64; 5];
    let Ok(mut file) = std::fs::File::open("/proc/self/smaps") else { return out };
    let mut buf = [0u8; 8192];
    let mut line = [0u8; 512];
    let mut len = 0usize;
    let mut exe = [0u8; 256];
    let mut exe_len = usize::MAX;
    let mut cls = 4usize;
    let handle = |l: &[u8], cls: &mut usize, exe: &mut [u8; 256], exe_len: &mut usize, out: &mut [u64; 5]| {
        let s = std::str::from_utf8(l).unwrap_or("");
        let first = s.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let perms = s.split_whitespace().nth(1).unwrap_or("");
            let path = s.split_whitespace().nth(5).unwrap_or("");
            if *exe_len == usize::MAX {
                let n = path.len().min(256);
                exe[..n].copy_from_slice(&path.as_bytes()[..n]);
                *exe_len = n;
            }
            *cls = if !path.is_empty() && path.as_bytes() == &exe[..*exe_len] {
                if perms.contains('x') { 0 } else { 1 }
            } else if path.starts_with('/') { 2 } else if path == "[heap]" { 3 } else { 4 };
        } else if s.starts_with("Rss:") {
            let kb: u64 = s.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
            out[*cls] += kb * 1024;
        }
    };
    loop {
        let n = match file.read(&mut buf) { Ok(0) | Err(_) => break, Ok(n) => n };
        for &b in &buf[..n] {
            if b == b'\n' {
                handle(&line[..len], &mut cls, &mut exe, &mut exe_len, &mut out);
                len = 0;
            } else if len < line.len() {
                line[len] = b;
                len += 1;
            }
        }
    }
    if len > 0 { handle(&line[..len], &mut cls, &mut exe, &mut exe_len, &mut out); }
    out
}

/// Resident bytes from /proc/self/statm read through a stack buffer: allocates nothing,
/// so that sampling inside a loop does not move the heap (0 if /proc is unavailable).
pub fn rss_bytes_noalloc() -> u64 {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open("/proc/self/statm") else { return 0 };
    let mut buf = [0u8; 128];
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) { Ok(0) | Err(_) => break, Ok(k) => n += k }
    }
    let s = std::str::from_utf8(&buf[..n]).unwrap_or("");
    let resident: u64 = s.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    resident * page_size()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe extern "C" {
    fn sbrk(increment: isize) -> *mut u8;
}

/// The program break (end of the main arena's heap segment), or 0 where unknown.
pub fn program_break() -> usize {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    { return unsafe { sbrk(0) } as usize; }
    #[allow(unreachable_code)]
    0
}

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

unsafe extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// `CLOCK_THREAD_CPUTIME_ID` on Linux.
const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

/// CPU seconds the calling thread has run (0 if the clock is unavailable): unlike wall
/// time, it leaves out the time the thread waited for a CPU on a shared machine.
pub fn thread_cpu_secs() -> f64 {
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    if unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The thread's minor page faults so far (getrusage).
pub fn minor_faults() -> i64 {
    thread_rusage()[8]
}

/// getrusage(RUSAGE_THREAD) as 18 longs (utime, stime as two each, then maxrss ..
/// nivcsw): index 8 minflt, 16 nvcsw, 17 nivcsw.
pub fn thread_rusage() -> [i64; 18] {
    unsafe extern "C" {
        fn getrusage(who: i32, usage: *mut [i64; 18]) -> i32;
    }
    let mut r = [0i64; 18];
    unsafe { getrusage(1, &mut r) };
    r
}
