/* shmem_check.c: every barrier of OpenSHMEM checked, for tests/shmem/run.sh.
 *
 *   oshrun -np N ./shmem_check ITERATIONS [static-only]
 *
 * Iteration k: every PE puts k into its slot of its right neighbour's heap array and of its
 * static array, adds 1 to a static counter on PE 0 (an atomic), stores k into its own symmetric
 * word, then a barrier (rotating over shmem_barrier_all, shmem_sync_all after a shmem_quiet,
 * and the active-set shmem_barrier over the whole job). After it every PE checks that its left
 * neighbour's puts landed, that PE 0's counter holds n*k, and that its right neighbour's word
 * (read with shmem_long_g) is k: a barrier that let a PE through early fails the check. Every
 * 16th iteration the even PEs also meet in an active-set barrier of their own, and PEs 0 and 1
 * in one of theirs, checked by a put to each other (the interposer serves a set whose PEs share
 * a node, and passes any other through). One PE in turn sleeps a little before some barriers.
 * SHMEM_CHECK_ABSENT_PE=p: PE p is 30 s late for the last barrier (a timeout test).
 * `static-only`: only the put to the static array before shmem_barrier_all, made after PE 0 is
 * already waiting in the barrier (the negative control: with the interposer's progress turned
 * off, a put that needs its target to call into the implementation never completes).
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PES 64

static long static_slots[MAX_PES];
static long static_counter;
static long pSync[SHMEM_BARRIER_SYNC_SIZE];
static long pSync_even[SHMEM_BARRIER_SYNC_SIZE];
static long pSync_pair[SHMEM_BARRIER_SYNC_SIZE];
static long pair[2];

static void fail(const char *what, int me, long k, long got, long want) {
    fprintf(stderr, "shmem_check: FAILED on PE %d at iteration %ld: %s is %ld, expected %ld\n", me, k, what, got, want);
    fflush(stderr);
    shmem_global_exit(1);
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 500;
    int static_only = argc > 2 && strcmp(argv[2], "static-only") == 0;
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++) {
        pSync[i] = SHMEM_SYNC_VALUE;
        pSync_even[i] = SHMEM_SYNC_VALUE;
        pSync_pair[i] = SHMEM_SYNC_VALUE;
    }
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    if (n > MAX_PES) {
        if (me == 0) fprintf(stderr, "shmem_check: at most %d PEs\n", MAX_PES);
        shmem_global_exit(2);
    }
    long *heap_slots = shmem_malloc(MAX_PES * sizeof(long));
    long *word = shmem_malloc(sizeof(long));
    memset(heap_slots, 0, MAX_PES * sizeof(long));
    *word = 0;
    shmem_barrier_all();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    for (long k = 1; k <= iters; k++) {
        /* static-only: the others are already waiting in the barrier when the put arrives. */
        if (static_only && me != 0) usleep(2000);
        shmem_long_p(&static_slots[me], k, right);
        if (!static_only) {
            shmem_long_p(&heap_slots[me], k, right);
            shmem_long_atomic_add(&static_counter, 1, 0);
            *word = k;
        }
        if (k % n == me && k % 7 == 0) usleep(200);
        if (static_only || k % 3 == 0) {
            shmem_barrier_all();
        } else if (k % 3 == 1) {
            shmem_quiet();
            shmem_sync_all();
        } else {
            shmem_barrier(0, 0, n, pSync);
        }
        /* static-only has no second barrier: the neighbour may already have put k + 1. */
        long got = static_slots[left];
        if (got != k && !(static_only && got == k + 1)) fail("the static slot", me, k, got, k);
        if (static_only) continue;
        if (heap_slots[left] != k) fail("the heap slot", me, k, heap_slots[left], k);
        if (me == 0 && static_counter != (long)n * k) fail("the static counter", me, k, static_counter, (long)n * k);
        long seen = shmem_long_g(word, right);
        if (seen != k) fail("the neighbour's word", me, k, seen, k);
        /* Nobody changes the counter or the word again before every PE has checked them. */
        shmem_barrier_all();
        if (k % 16 == 0 && me % 2 == 0 && n > 1) shmem_barrier(0, 1, (n + 1) / 2, pSync_even);
        /* PEs 0 and 1 alone: checked like the whole job's, for their two slots. */
        if (k % 16 == 8 && me < 2 && n > 2) {
            shmem_long_p(&pair[me], k, 1 - me);
            shmem_barrier(0, 0, 2, pSync_pair);
            if (pair[1 - me] != k) fail("the pair's slot", me, k, pair[1 - me], k);
        }
    }
    if (me == 0) {
        printf("shmem_check: %d PEs passed %ld iterations%s\n", n, iters, static_only ? " (static puts only)" : "");
        fflush(stdout);
    }
    /* SHMEM_CHECK_ABSENT_PE=p: PE p stays away from the last barrier for 30 s; with a barrier
     * timeout the others must fail (the job ends), never pass it without p. */
    const char *absent = getenv("SHMEM_CHECK_ABSENT_PE");
    if (absent && atoi(absent) == me) sleep(30);
    shmem_barrier_all();
    if (absent) {
        fprintf(stderr, "shmem_check: PE %d passed the last barrier\n", me);
        fflush(stderr);
    }
    shmem_finalize();
    return 0;
}
