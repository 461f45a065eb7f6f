/* shmem_bench.c: the OpenSHMEM implementation's barriers (pshmem_barrier_all, pshmem_sync_all)
 * against this process's (the interposer's, when libbarrier_shmem.so is preloaded), timed in
 * alternating chunks in one run, so that both see the same phases of a machine whose speed
 * changes from second to second. Each chunk's time is the slowest PE's mean per barrier; the
 * medians over the chunks are printed, with their ratios. `barrier bench --shmem` builds and
 * runs it.
 *
 * Between the barrier_all chunks, PE 0 and PE 1 time a ping-pong through shmem_ptr (plain loads
 * and stores on symmetric memory, no library call): the machine's cache-line round trip at that
 * moment. A VM's speed moves between levels (this one's round trip reads about 100 ns or about
 * 400 ns for seconds at a time), so figures from two launches (an implementation's own barrier
 * against a component's, which one process cannot hold both of) compare only where their
 * round trips read alike, or as barriers per round trip.
 *
 *   oshcc -O2 -o shmem_bench shmem_bench.c
 *   oshrun -np 2 -x LD_PRELOAD=target/release/libbarrier_shmem.so ./shmem_bench 2000 21
 */
#include <shmem.h>
#include <pshmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_PES 1024

static double times[MAX_PES];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Mean seconds per ping-pong round trip between PE 0 and PE 1 over `n` of them, through
 * `ping` (PE 1's word, written by PE 0) and `pong` (PE 0's, written by PE 1); 0 on other PEs. */
static double pingpong(volatile long *ping_at_1, volatile long *pong_at_0, long *ping, long *pong, long n, int me) {
    static long seq;
    pshmem_barrier_all();
    double t = now();
    for (long i = 0; i < n && me < 2; i++) {
        seq++;
        if (me == 0) {
            *ping_at_1 = seq;
            while (*(volatile long *)pong != seq) {}
        } else {
            while (*(volatile long *)ping != seq) {}
            *pong_at_0 = seq;
        }
    }
    t = (now() - t) / (double)n;
    pshmem_barrier_all();
    return me == 0 ? t : 0;
}

/* Mean seconds per barrier over `n` barriers, the slowest PE's (gathered on PE 0). */
static double chunk(void (*bar)(void), long n, int me, int npes) {
    pshmem_barrier_all();
    double t = now();
    for (long i = 0; i < n; i++) bar();
    t = (now() - t) / (double)n;
    pshmem_double_p(&times[me], t, 0);
    pshmem_barrier_all();
    double worst = 0;
    if (me == 0)
        for (int p = 0; p < npes; p++)
            if (times[p] > worst) worst = times[p];
    return worst;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    int rounds = argc > 2 ? atoi(argv[2]) : 21;
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    if (npes > MAX_PES || rounds < 1) {
        if (me == 0) fprintf(stderr, "shmem_bench: at most %d PEs, at least 1 round\n", MAX_PES);
        shmem_global_exit(2);
    }
    void (*theirs[2])(void) = {pshmem_barrier_all, pshmem_sync_all};
    void (*ours[2])(void) = {shmem_barrier_all, shmem_sync_all};
    const char *names[2] = {"barrier_all", "sync_all"};
    double *t_theirs = malloc(sizeof(double) * (size_t)rounds), *t_ours = malloc(sizeof(double) * (size_t)rounds);
    double *t_pingpong = malloc(sizeof(double) * (size_t)rounds);
    /* PE 1's ping word and PE 0's pong word, each on a line of its own, reached by plain loads
     * and stores where shmem_ptr maps them (no ping-pong where it cannot). */
    long *words = shmem_align(128, 256);
    words[0] = words[16] = 0;
    pshmem_barrier_all();
    long *ping = &words[0], *pong = &words[16];
    volatile long *ping_at_1 = npes > 1 ? shmem_ptr(ping, 1) : NULL, *pong_at_0 = shmem_ptr(pong, 0);
    static long mapped;
    mapped = ping_at_1 != NULL && pong_at_0 != NULL;
    pshmem_barrier_all();
    int calibrate = npes > 1 && pshmem_long_g(&mapped, 0) && pshmem_long_g(&mapped, 1);
    /* Warm up both for a second: processes started together begin crowded on a few cores. */
    double start = now();
    long more = 1;
    static long flag;
    while (more) {
        chunk(theirs[0], iters, me, npes);
        chunk(ours[0], iters, me, npes);
        if (me == 0) flag = now() - start < 1.0;
        pshmem_barrier_all();
        more = pshmem_long_g(&flag, 0);
        pshmem_barrier_all();
    }
    for (int kind = 0; kind < 2; kind++) {
        for (int r = 0; r < rounds; r++) {
            if (r % 2 == 0) {
                t_theirs[r] = chunk(theirs[kind], iters, me, npes);
                t_ours[r] = chunk(ours[kind], iters, me, npes);
            } else {
                t_ours[r] = chunk(ours[kind], iters, me, npes);
                t_theirs[r] = chunk(theirs[kind], iters, me, npes);
            }
            if (kind == 0 && calibrate) t_pingpong[r] = pingpong(ping_at_1, pong_at_0, ping, pong, iters, me);
        }
        if (me == 0) {
            qsort(t_theirs, (size_t)rounds, sizeof(double), cmp);
            qsort(t_ours, (size_t)rounds, sizeof(double), cmp);
            double mt = t_theirs[rounds / 2] * 1e9, mo = t_ours[rounds / 2] * 1e9;
            if (kind == 0) {
                /* Which implementation was timed: its own name and version. */
                char name[SHMEM_MAX_NAME_LEN];
                int major = 0, minor = 0;
                shmem_info_get_name(name);
                shmem_info_get_version(&major, &minor);
                printf("OpenSHMEM implementation: %s (OpenSHMEM %d.%d)\n", name, major, minor);
                printf("PEs %d, %d chunks of %ld barriers each, alternating\n", npes, rounds, iters);
            }
            printf("pshmem_%-12s (the implementation's) median %9.0f ns   best %9.0f ns\n", names[kind], mt, t_theirs[0] * 1e9);
            printf("shmem_%-13s (this process's)       median %9.0f ns   best %9.0f ns\n", names[kind], mo, t_ours[0] * 1e9);
            printf("ratio shmem_%s / pshmem_%s: %.3f\n", names[kind], names[kind], mo / mt);
            if (kind == 0 && calibrate) {
                qsort(t_pingpong, (size_t)rounds, sizeof(double), cmp);
                double rt = t_pingpong[rounds / 2] * 1e9;
                printf("ping-pong PE 0 <-> PE 1 (shmem_ptr loads and stores): median %.0f ns a round trip; "
                       "barrier_all per round trip: pshmem %.2f, shmem %.2f\n", rt, mt / rt, mo / rt);
            }
            fflush(stdout);
        }
    }
    free(t_theirs);
    free(t_ours);
    free(t_pingpong);
    shmem_free(words);
    pshmem_barrier_all();
    shmem_finalize();
    return 0;
}
