/* malloc-log: an LD_PRELOAD library that records every malloc-family call of a
 * process's main thread, with the addresses glibc returned, for
 * experiments/probes/arena_replay.py (which replays the calls on the simulator's
 * model of glibc's main arena, sim/platform/ptmalloc.py, and compares addresses).
 *
 *   gcc -O2 -shared -fPIC -o malloc_log.so malloc_log.c
 *   MALLOC_LOG=/tmp/log.bin LD_PRELOAD=./malloc_log.so PROGRAM ...
 *
 * A MALLOC_LOG ending in '.' gets each process's pid appended (a probe that runs
 * every variant in a fresh child process leaves one log per process).
 *
 * Each call is forwarded to glibc's own entry points (__libc_malloc & co.), so
 * placement is glibc's. Records are kept in a static buffer (no allocation while
 * logging) and written at exit with write(2), one 48-byte record per call:
 *   u64 kind (1 malloc, 2 free, 3 calloc, 4 realloc, 5 memalign, 6 brk-at-first-call,
 *            7 the buffer overflowed, 8 a mark: its number in the size field)
 *   u64 size, u64 align, u64 result pointer, u64 argument pointer (free / realloc),
 *   u64 the program break after the call (sbrk(0): growth and trims of the heap).
 * Calls from other threads (other arenas) are not recorded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

struct rec { uint64_t kind, size, align, ptr, arg, brk; };
/* records kept: 4 Mi by default (192 MiB); -DCAP=N for a longer run */
#ifndef CAP
#define CAP (1u << 22)
#endif
static struct rec log_buf[CAP];
static size_t log_len;
static int overflow;
static pid_t main_pid;

/* the break before the process's first malloc-family call: where the main arena starts */
static inline void first(void) {
    if (main_pid == 0) {
        main_pid = getpid();
        log_buf[log_len++] = (struct rec){6, 0, 0, (uint64_t)(uintptr_t)sbrk(0), 0, 0};
    }
}

static void put(uint64_t kind, uint64_t size, uint64_t align, void *ptr, void *arg) {
    if ((pid_t)syscall(SYS_gettid) != main_pid) return;
    if (log_len >= CAP) { overflow = 1; return; }
    log_buf[log_len++] = (struct rec){kind, size, align, (uint64_t)(uintptr_t)ptr,
                                      (uint64_t)(uintptr_t)arg, (uint64_t)(uintptr_t)sbrk(0)};
}

/* requests of MARK_BASE + i are marks (burn-probes script, PROBE_SCRIPT_MARKS): recorded
 * as kind 8 with i in the size field, answered with NULL, never passed to glibc */
#define MARK_BASE ((size_t)1 << 46)

void *malloc(size_t n) {
    first();
    if (n >= MARK_BASE && n < MARK_BASE + ((size_t)1 << 24)) {
        put(8, n - MARK_BASE, 0, 0, 0);
        return NULL;
    }
    void *p = __libc_malloc(n);
    put(1, n, 0, p, 0);
    return p;
}
void free(void *p) { if (!p) return; first(); __libc_free(p); put(2, 0, 0, 0, p); }
void *calloc(size_t a, size_t b) { first(); void *p = __libc_calloc(a, b); put(3, a * b, 0, p, 0); return p; }
void *realloc(void *q, size_t n) { first(); void *p = __libc_realloc(q, n); put(4, n, 0, p, q); return p; }
void *memalign(size_t al, size_t n) { first(); void *p = __libc_memalign(al, n); put(5, n, al, p, 0); return p; }
void *aligned_alloc(size_t al, size_t n) { return memalign(al, n); }
int posix_memalign(void **out, size_t al, size_t n) {
    void *p = memalign(al, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

__attribute__((destructor)) static void dump(void) {
    const char *path = getenv("MALLOC_LOG");
    if (!path) return;
    char name[4096];
    size_t n = 0;
    while (path[n] && n < sizeof name - 24) { name[n] = path[n]; n++; }
    if (n && name[n - 1] == '.') {
        char digits[24];
        int k = 0;
        for (unsigned long v = (unsigned long)getpid(); v; v /= 10) digits[k++] = (char)('0' + v % 10);
        while (k) name[n++] = digits[--k];
    }
    name[n] = 0;
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    if (overflow) log_buf[CAP - 1] = (struct rec){7, 0, 0, 0, 0, 0};
    const char *at = (const char *)log_buf;
    size_t left = log_len * sizeof(struct rec);
    while (left) {
        ssize_t w = write(fd, at, left);
        if (w <= 0) break;
        at += w; left -= (size_t)w;
    }
    close(fd);
}
