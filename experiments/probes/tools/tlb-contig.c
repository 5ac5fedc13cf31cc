/* Does this host's data TLB read physically contiguous 4-KiB pages as fewer entries (issue 43)?
 *
 * AMD's cores since Zen coalesce the translations of neighbouring 4-KiB pages whose page
 * frames are neighbours too into one TLB entry; whether that holds in this KVM guest, at
 * which grain, and how much it moves the orphan sweep's TLB misses past the reach, is what
 * this measures. Regions of PAGES key pages each, the same keys (R a page, one a line) read
 * through the same shape of table (32-B buckets in a random order, as hashbrown's `nodes`
 * map of burn's EMA chain is read by `maybe_useful`), every key each pass; a region per
 * GRAIN in MODES:
 *   512  faulted as transparent huge pages (MADV_HUGEPAGE), then split to 4-KiB page-table
 *        entries by mprotect of the first page of each 2 MiB (left without keys): every key
 *        page's frame neighbours the next page's
 *   G    (1-256) the same huge-page frames, moved (mremap) in chunks of G pages to places
 *        in a random order: frames consecutive within each aligned G-page chunk only
 *   0    the region's pages faulted one by one in a random order (MADV_NOHUGEPAGE)
 * The frames are read from /proc/self/pagemap (root): for each region, the share of
 * neighbouring key pages on consecutive frames and of 16-KiB-aligned groups of four on four
 * consecutive aligned frames (session 58's two counts for real burn's heap).
 * Rows alternate over the regions ROUNDS times; each row: thread-CPU ns per key read.
 *
 * Build and run: cc -O2 -o tlb-contig tlb-contig.c
 *   flock /work/notes/timing.lock taskset -c 1 nice -n -15 \
 *       ./tlb-contig PAGES [R=8] [PASSES=40] [ROUNDS=4] [MODES=512,0]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define HUGE (2UL << 20)

struct bucket { volatile uint64_t *key; uint64_t pad[3]; };

static double cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static void shuffle(size_t *a, size_t n) {
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = next() % (i + 1), t = a[i];
        a[i] = a[j]; a[j] = t;
    }
}

/* the key pages of a region: every page but the first of each 2 MiB */
static size_t key_page(size_t i) { return i + i / (HUGE / PAGE - 1) + 1; }

static char *reserve(size_t span) {
    char *raw = mmap(NULL, span + HUGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) { perror("mmap"); exit(1); }
    return (char *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
}

static char *huge_region(size_t span) {
    char *base = reserve(span);
    if (madvise(base, span, MADV_HUGEPAGE)) perror("madvise(MADV_HUGEPAGE)");
    for (size_t off = 0; off < span; off += PAGE) base[off] = 1;
    return base;
}

static char *region(size_t span, size_t grain) {
    if (grain >= HUGE / PAGE) {
        char *base = huge_region(span);
        for (size_t off = 0; off < span; off += HUGE)   /* split each huge page's mapping */
            if (mprotect(base + off, PAGE, PROT_READ)) perror("mprotect");
        return base;
    }
    if (grain) {
        char *src = huge_region(span), *dst = reserve(span);
        size_t chunk = grain * PAGE, n = span / chunk, *order = malloc(n * sizeof *order);
        for (size_t i = 0; i < n; i++) order[i] = i;
        shuffle(order, n);
        for (size_t i = 0; i < n; i++)
            if (mremap(src + i * chunk, chunk, chunk, MREMAP_MAYMOVE | MREMAP_FIXED,
                       dst + order[i] * chunk) == MAP_FAILED) { perror("mremap"); exit(1); }
        free(order);
        return dst;
    }
    char *base = reserve(span);
    if (madvise(base, span, MADV_NOHUGEPAGE)) perror("madvise(MADV_NOHUGEPAGE)");
    size_t n = span / PAGE, *order = malloc(n * sizeof *order);
    for (size_t i = 0; i < n; i++) order[i] = i;
    shuffle(order, n);
    for (size_t i = 0; i < n; i++) base[order[i] * PAGE] = 1;
    free(order);
    return base;
}

static uint64_t frame(int fd, char *base, size_t page) {
    uint64_t e = 0;
    off_t at = (off_t)(((uintptr_t)base / PAGE + page) * 8);
    if (pread(fd, &e, sizeof e, at) != sizeof e || !(e >> 63)) return 0;
    return e & ((1ULL << 55) - 1);
}

/* shares of neighbouring key pages on consecutive frames, and of 16-KiB-aligned groups of
 * four key pages on four consecutive frames from a 16-KiB-aligned one (-1: no pagemap) */
static void contiguity(char *base, size_t pages, double *pairs, double *groups) {
    int fd = open("/proc/self/pagemap", O_RDONLY);
    *pairs = *groups = -1.0;
    if (fd < 0) return;
    size_t np = 0, gp = 0, ng = 0, gg = 0;
    for (size_t i = 0; i + 1 < pages; i++) {
        size_t p = key_page(i);
        uint64_t f0 = frame(fd, base, p);
        if (key_page(i + 1) == p + 1) {
            np++;
            gp += f0 && frame(fd, base, p + 1) == f0 + 1;
        }
        if (p % 4 == 0 && i + 3 < pages && key_page(i + 3) == p + 3) {
            int ok = f0 && f0 % 4 == 0;
            for (size_t k = 1; k < 4 && ok; k++) ok = frame(fd, base, p + k) == f0 + k;
            ng++;
            gg += ok;
        }
    }
    close(fd);
    if (np) *pairs = (double)gp / np;
    if (ng) *groups = (double)gg / ng;
}

static struct bucket *table_for(char *base, size_t pages, size_t r) {
    size_t n = pages * r, *order = malloc(n * sizeof *order);
    struct bucket *t = aligned_alloc(64, n * sizeof *t);
    for (size_t i = 0; i < n; i++) order[i] = i;
    shuffle(order, n);
    for (size_t i = 0; i < n; i++) {
        size_t k = order[i], page = key_page(k / r), line = (k % r) * (PAGE / r) / 64 * 64;
        t[i].key = (volatile uint64_t *)(base + page * PAGE + line);
        *t[i].key = 1;
        t[i].pad[0] = t[i].pad[1] = t[i].pad[2] = 0;
    }
    free(order);
    return t;
}

static double scan(const struct bucket *t, size_t n, size_t passes) {
    uint64_t live = 0;
    double t0 = cpu_ns();
    for (size_t p = 0; p < passes; p++)
        for (size_t i = 0; i < n; i++)
            live += *t[i].key > 1;     /* Arc::strong_count(key) > 1: never, every key read */
    double ns = cpu_ns() - t0;
    if (live) printf("live %lu\n", (unsigned long)live);
    return ns / ((double)passes * n);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PAGES [R=8] [PASSES=40] [ROUNDS=4] [MODES=512,0]\n", argv[0]);
        return 2;
    }
    size_t pages = strtoul(argv[1], NULL, 10);
    size_t r = argc > 2 ? strtoul(argv[2], NULL, 10) : 8;
    size_t passes = argc > 3 ? strtoul(argv[3], NULL, 10) : 40;
    int rounds = argc > 4 ? atoi(argv[4]) : 4;
    char *modes = strdup(argc > 5 ? argv[5] : "512,0");
    if (!pages || !r || r > 64 || !passes || rounds < 1) {
        fprintf(stderr, "tlb-contig: PAGES, R (1-64), PASSES and ROUNDS must be positive\n");
        return 2;
    }
    size_t span = (key_page(pages - 1) + 1) * PAGE;
    span = (span + HUGE - 1) & ~(HUGE - 1);
    char *base[16];
    struct bucket *t[16];
    size_t grain[16];
    int m = 0;
    for (char *tok = strtok(modes, ","); tok && m < 16; tok = strtok(NULL, ",")) {
        char *end;
        grain[m] = strtoul(tok, &end, 10);
        if (*end || (grain[m] > 256 && grain[m] != 512) || (grain[m] & (grain[m] - 1))) {
            fprintf(stderr, "tlb-contig: a mode is 0, 512 or a power of two up to 256, not '%s'\n", tok);
            return 2;
        }
        base[m] = region(span, grain[m]);
        t[m] = table_for(base[m], pages, r);
        double pairs, groups;
        contiguity(base[m], pages, &pairs, &groups);
        printf("grain %zu pages %zu keys/page %zu consecutive-pairs %.3f coalescible-16k %.3f\n",
               grain[m], pages, r, pairs, groups);
        m++;
    }
    for (int i = 0; i < m; i++) scan(t[i], pages * r, 2);     /* warm */
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < m; i++)
            printf("row grain %zu pages %zu reads/page %zu ns/read %.3f\n", grain[i], pages, r,
                   scan(t[i], pages * r, passes));
    return 0;
}
