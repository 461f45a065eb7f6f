/* shmem_faults.c: faults a barrier must name, and a threaded program it must not deadlock, for
 * tests/shmem/run.sh (issue 40 items 3, 4 and 7).
 *
 *   oshrun -np N ./shmem_faults MODE [VICTIM]
 *
 * Every mode makes 20 barriers; PE VICTIM (default 1) misbehaves at the 10th:
 *   stall        the victim sleeps 8 s before the 10th shmem_barrier_all, then goes on: the others
 *                must say who they wait for within the stall report's period, and the job passes;
 *   missing      the victim skips the 10th shmem_barrier_all and calls shmem_finalize: the others
 *                must fail, naming it, rather than wait for ever;
 *   set-stall    as stall, in an active-set barrier of PEs 0 and 1 (one node: served by the
 *                interposer's table) instead of shmem_barrier_all (the other PEs come to the
 *                last shmem_barrier_all 12 s late, so the pair's wait must see the fault itself);
 *   set-missing  as missing, in that active-set barrier;
 *   late         the victim is 300 ms late for the 10th shmem_barrier_all and the 10th pair
 *                barrier: the job must pass (a short BARRIER_TIMEOUT given to another PE alone
 *                must not end it: PE 0's value is the job's);
 *   threads      SHMEM_THREAD_MULTIPLE: on PE 0, thread A calls the pair barrier (PEs 0 and 1)
 *                while thread B calls shmem_barrier_all; PE 1 calls shmem_barrier_all, then the
 *                pair barrier; other PEs shmem_barrier_all. The implementation alone completes it;
 *                an interposer that keeps one lock through a whole wait deadlocks.
 * A PE that finishes prints "shmem_faults: PE p done".
 */
#include <pthread.h>
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 20
#define BAD 10

static long pSync_pair[SHMEM_BARRIER_SYNC_SIZE];

static void pair_barrier(void) { shmem_barrier(0, 0, 2, pSync_pair); }

static void *thread_a(void *arg) {
    (void)arg;
    pair_barrier();
    return NULL;
}

static void *thread_b(void *arg) {
    (void)arg;
    shmem_barrier_all();
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "stall";
    int victim = argc > 2 ? atoi(argv[2]) : 1;
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++) pSync_pair[i] = SHMEM_SYNC_VALUE;
    int threads = strcmp(mode, "threads") == 0;
    if (threads) {
        int provided = -1;
        if (shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) != 0 || provided != SHMEM_THREAD_MULTIPLE) {
            fprintf(stderr, "shmem_faults: no SHMEM_THREAD_MULTIPLE (provided %d)\n", provided);
            return 2;
        }
    } else {
        shmem_init();
    }
    int me = shmem_my_pe();
    int set = strncmp(mode, "set-", 4) == 0;
    if (threads) {
        for (int k = 0; k < ROUNDS; k++) {
            if (me == 0) {
                pthread_t a, b;
                pthread_create(&a, NULL, thread_a, NULL);
                pthread_create(&b, NULL, thread_b, NULL);
                pthread_join(a, NULL);
                pthread_join(b, NULL);
            } else if (me == 1) {
                shmem_barrier_all();
                pair_barrier();
            } else {
                shmem_barrier_all();
            }
        }
    } else {
        for (int k = 1; k <= ROUNDS; k++) {
            int in_pair = me < 2;
            if (k == BAD && me == victim) {
                if (strcmp(mode, "stall") == 0 || strcmp(mode, "set-stall") == 0) sleep(8);
                if (strcmp(mode, "late") == 0) usleep(300000);
                if (strcmp(mode, "missing") == 0 || strcmp(mode, "set-missing") == 0) {
                    fprintf(stderr, "shmem_faults: PE %d skips barrier %d and finalizes\n", me, k);
                    fflush(stderr);
                    shmem_finalize();
                    return 0;
                }
            }
            if (set) {
                if (in_pair) pair_barrier();
            } else {
                shmem_barrier_all();
                if (strcmp(mode, "late") == 0 && in_pair) {
                    if (k == BAD && me == victim) usleep(300000);
                    pair_barrier();
                }
            }
        }
        /* Everybody meets once more before finalize; in the set modes the PEs outside the pair
         * come late, so that the pair's own wait must notice the fault. */
        if (set && me >= 2) sleep(12);
        shmem_barrier_all();
    }
    printf("shmem_faults: PE %d done\n", me);
    fflush(stdout);
    shmem_finalize();
    return 0;
}
