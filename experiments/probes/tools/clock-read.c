/* What one read of the probes' CPU clock costs inside a timed window (session 57).
 *
 * With PROBE_CPU_TIME set, burn-probes' Instant (src/clock.rs) reads the thread's CPU
 * time, clock_gettime(CLOCK_THREAD_CPUTIME_ID): a system call (no vDSO path for a thread
 * clock). A window from one read to the next holds the end of the first call and the start
 * of the second, about one call; two reads back to back measure exactly that. Prints the
 * median (and p10, p90) of 20,001 back-to-back pairs and the mean per call of a loop of
 * 100,000 reads.
 *
 *     gcc -O2 -o clock-read clock-read.c
 *     flock /work/notes/timing.lock taskset -c 1 nice -n -15 ./clock-read
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    enum { N = 20001 };
    static double d[N];
    double s = 0;
    for (int i = 0; i < 1000; i++)
        s += now();
    for (int i = 0; i < N; i++) {
        double a = now();
        double b = now();
        d[i] = b - a;
    }
    qsort(d, N, sizeof d[0], cmp);
    double t0 = now();
    for (int i = 0; i < 100000; i++)
        s += now();
    double t1 = now();
    printf("back-to-back read delta: median %.0f ns p10 %.0f p90 %.0f; per call (100k loop) %.0f ns\n",
           d[N / 2], d[N / 10], d[9 * N / 10], (t1 - t0) / 100000);
    return s < 0;
}
