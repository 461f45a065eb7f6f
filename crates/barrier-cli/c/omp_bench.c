/* omp_bench.c: OpenMP's `#pragma omp barrier`, timed the way `barrier bench` times every thread
 * row (embedded in the `barrier` command, built with each OpenMP compiler it finds).
 *
 *   OMP_NUM_THREADS=N ./omp_bench ITERS BATCH
 *
 * Every thread of one parallel region runs a warm-up (a tenth of ITERS, at most 10,000, in whole
 * batches), then ITERS / BATCH batches of BATCH barriers; thread 0 times each batch. Prints the
 * thread count, the process's context switches per barrier (getrusage, every thread), the
 * runtime's name, and the nanoseconds per barrier of each batch:
 *
 *   threads 4
 *   switches 0.0012
 *   runtime libgomp
 *   samples 101.2 99.8 ...
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec * 1e9 + (double) t.tv_nsec;
}

static long switches(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_nvcsw + r.ru_nivcsw;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: OMP_NUM_THREADS=N %s ITERS BATCH\n", argv[0]);
        return 2;
    }
    long iters = atol(argv[1]), batch = atol(argv[2]);
    if (iters < 1 || batch < 1) {
        fprintf(stderr, "omp_bench: ITERS and BATCH must be positive\n");
        return 2;
    }
    long warmup = iters / 10 < 10000 ? iters / 10 : 10000;
    warmup = (warmup + batch - 1) / batch * batch;
    long batches = iters / batch > 0 ? iters / batch : 1;
    double *samples = malloc(sizeof(double) * (size_t) batches);
    if (!samples) {
        return 1;
    }
    int threads = 0;
    long before = 0;
#pragma omp parallel
    {
        int me = omp_get_thread_num();
#pragma omp barrier
        if (me == 0) {
            threads = omp_get_num_threads();
            before = switches();
        }
        for (long i = 0; i < warmup; i++) {
#pragma omp barrier
        }
        for (long b = 0; b < batches; b++) {
            double start = me == 0 ? now_ns() : 0.0;
            for (long i = 0; i < batch; i++) {
#pragma omp barrier
            }
            if (me == 0) {
                samples[b] = (now_ns() - start) / (double) batch;
            }
        }
    }
    long after = switches();
#if defined(__clang__)
    const char *runtime = "libomp";
#else
    const char *runtime = "libgomp";
#endif
    printf("threads %d\nswitches %.4f\nruntime %s\nsamples", threads,
           (double) (after - before) / (double) (warmup + batches * batch), runtime);
    for (long b = 0; b < batches; b++) {
        printf(" %.2f", samples[b]);
    }
    printf("\n");
    free(samples);
    return 0;
}
