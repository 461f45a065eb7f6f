/* shmem_bench.c: the OpenSHMEM implementation's barriers (pshmem_barrier_all, pshmem_sync_all)
 * against this process's (the interposer's, when libbarrier_shmem.so is preloaded), timed in
 * alternating chunks in one run, so that both see the same phases of a machine whose speed
 * changes from second to second. Each chunk's time is the slowest PE's mean per barrier; the
 * medians over the chunks are printed, with their ratios. `barrier bench --shmem` builds and
 * runs it.
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
            fflush(stdout);
        }
    }
    free(t_theirs);
    free(t_ours);
    pshmem_barrier_all();
    shmem_finalize();
    return 0;
}
