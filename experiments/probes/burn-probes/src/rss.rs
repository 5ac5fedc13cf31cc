//! Resident set size from /proc/self/statm (Linux): resident pages * page size.

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
