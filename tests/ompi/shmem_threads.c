/* shmem_threads.c: two threads of a PE run active-set barriers of two overlapping sets, for
 * tests/ompi/run.sh (issue 50 item 1).
 *
 *   oshrun -np 4 ./shmem_threads ITERATIONS
 *
 * Under SHMEM_THREAD_MULTIPLE, thread A of PEs 0 and 1 barriers on the set {0, 1} and thread B
 * of PEs 0, 1 and 2 on {0, 1, 2} (neither set is the whole job, whose barrier was built before),
 * ITERATIONS times each. PE 0 starts A first and B 200 ms later; PE 1
 * starts B first and A later: the first barrier of each set (where the component builds the
 * set's barrier) happens in opposite orders on the two PEs. Each barrier is checked: before it
 * a thread stores its iteration into its own word of the set's array on every member (puts),
 * after it every member's word must be at least that iteration (a barrier that let a thread
 * through early fails the check). The set-up of one set must not wait for the other's.
 */
#include <pthread.h>
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long pSync_pair[SHMEM_BARRIER_SYNC_SIZE];
static long pSync_all[SHMEM_BARRIER_SYNC_SIZE];
static long seen_pair[3];
static long seen_all[3];
static long iterations;

struct set {
    const char *name;
    int size;
    long *pSync;
    long *seen;
    int first_on; /* the PE that starts this set's thread first */
};

static void *run(void *arg) {
    const struct set *s = arg;
    int me = shmem_my_pe();
    if (me != s->first_on) {
        usleep(200 * 1000);
    }
    for (long k = 1; k <= iterations; k++) {
        for (int pe = 0; pe < s->size; pe++) {
            shmem_long_p(&s->seen[me], k, pe);
        }
        shmem_quiet();
        shmem_barrier(0, 0, s->size, s->pSync);
        for (int pe = 0; pe < s->size; pe++) {
            long got = __atomic_load_n(&s->seen[pe], __ATOMIC_ACQUIRE);
            if (got < k) {
                fprintf(stderr, "shmem_threads: FAILED on PE %d, set %s, iteration %ld: PE %d's word is %ld\n", me,
                        s->name, k, pe, got);
                fflush(stderr);
                shmem_global_exit(1);
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    iterations = argc > 1 ? atol(argv[1]) : 100;
    int provided = 0;
    shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided);
    int me = shmem_my_pe(), n = shmem_n_pes();
    if (provided != SHMEM_THREAD_MULTIPLE || n != 4) {
        if (me == 0) {
            fprintf(stderr, "shmem_threads: needs SHMEM_THREAD_MULTIPLE (got %d) and 4 PEs (got %d)\n", provided, n);
        }
        shmem_finalize();
        return 2;
    }
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++) {
        pSync_pair[i] = SHMEM_SYNC_VALUE;
        pSync_all[i] = SHMEM_SYNC_VALUE;
    }
    shmem_barrier_all();
    struct set pair = {"{0,1}", 2, pSync_pair, seen_pair, 0};
    struct set all = {"{0,1,2}", 3, pSync_all, seen_all, 1};
    pthread_t a, b;
    if (me < 2) {
        pthread_create(&a, NULL, run, &pair);
    }
    if (me < 3) {
        pthread_create(&b, NULL, run, &all);
    }
    if (me < 2) {
        pthread_join(a, NULL);
    }
    if (me < 3) {
        pthread_join(b, NULL);
    }
    shmem_barrier_all();
    if (me == 0) {
        printf("shmem_threads: %d PEs, two sets in two threads, passed %ld iterations each\n", n, iterations);
    }
    shmem_finalize();
    return 0;
}
