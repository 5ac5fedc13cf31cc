/* fixed-getrandom.c: an LD_PRELOAD shim for diagnostics (not used by the probes' runs).
 *
 * Replaces glibc's getrandom() with a deterministic byte pattern, so that every
 * std::collections::HashMap/HashSet created with RandomState (burn-autodiff's server and
 * memory management use them) gets the same hash keys in every run. The keys decide the
 * order in which the autodiff cleanup visits nodes and frees their buffers, and with it
 * glibc's heap layout; with this shim a probe run is repeatable (ASLR only shifts the
 * baseline), and SEED selects another layout.
 *
 *   gcc -shared -fPIC -O2 -DSEED=1 -o /tmp/fixed-getrandom-1.so fixed-getrandom.c
 *   LD_PRELOAD=/tmp/fixed-getrandom-1.so target/release/burn-probes p10-ema --variant without
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/types.h>

#ifndef SEED
#define SEED 11
#endif

ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
    unsigned char *p = buf;
    (void)flags;
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(i * 37 + SEED);
    return (ssize_t)len;
}
