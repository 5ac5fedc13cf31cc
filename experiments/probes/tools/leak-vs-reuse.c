/* Cost of an untracked op's leaked blocks beyond their page faults (issue 38, drop-release's
 * registration term). Each iteration allocates eight blocks of about the sizes an untracked
 * op leaves behind on unpatched burn (1,110 B: the simulator's heap growth per op-cost
 * untracked/add iteration) and writes them; `leak` keeps them (every request is carved from
 * glibc's top chunk, fresh pages faulted in as the heap grows), `reuse` frees them again
 * (the tcache hands the same chunks back, as under drop-release).
 * Prints the thread-CPU ns per iteration and the minor faults per iteration.
 * Build and run: cc -O2 -o leak-vs-reuse leak-vs-reuse.c
 *                taskset -c 1 nice -n -15 ./leak-vs-reuse leak|reuse ITERATIONS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static const size_t SIZES[8] = {48, 64, 40, 200, 128, 96, 52, 480};

static double cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static long minor_faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

static void step(int reuse) {
    void *blocks[8];
    for (int k = 0; k < 8; k++) {
        blocks[k] = malloc(SIZES[k]);
        memset(blocks[k], 0, SIZES[k]);
    }
    if (reuse)
        for (int k = 0; k < 8; k++) free(blocks[k]);
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "leak") && strcmp(argv[1], "reuse"))) {
        fprintf(stderr, "usage: %s leak|reuse ITERATIONS\n", argv[0]);
        return 2;
    }
    int reuse = !strcmp(argv[1], "reuse");
    long n = atol(argv[2]);
    for (int i = 0; i < 1000; i++) step(reuse);
    long f0 = minor_faults();
    double t0 = cpu_ns();
    for (long i = 0; i < n; i++) step(reuse);
    double t1 = cpu_ns();
    long f1 = minor_faults();
    printf("%s,%ld,%.1f,%.3f\n", argv[1], n, (t1 - t0) / n, (double)(f1 - f0) / n);
    return 0;
}
