/* busy_ranks.c: a pair of ranks times barriers while the job's other ranks are busy.
 *
 * World ranks 0 and 1 split off a communicator of their own and time barriers on it; every
 * other rank waits meanwhile in MPI_Allreduce on MPI_COMM_WORLD (busy, polling MPI's progress
 * engine, as MPI benchmark suites leave their idle processes). The pair alternates chunks of
 * PMPI_Barrier (the MPI library's) and MPI_Barrier (the interposer's, when preloaded; MPI's
 * otherwise) and prints the median of each, so both are measured in the same launch. With more
 * ranks than cores, a waiter that spins on a core its partner needs makes MPI_Barrier slow here.
 *
 * With a second argument `barrier`, the other ranks wait in MPI_Barrier on MPI_COMM_WORLD
 * instead, the job's first (Intel MPI Benchmarks' layout: its idle processes wait there, while
 * the active ones run the benchmark on a communicator of their own).
 *
 *   mpicc -O2 -o busy_ranks busy_ranks.c
 *   mpirun -np 4 --oversubscribe -x LD_PRELOAD=target/release/libbarrier_pmpi.so ./busy_ranks 2000 [barrier]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNKS 21

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long per_chunk = argc > 1 ? atol(argv[1]) : 2000;
    int wait_in_barrier = argc > 2 && 0 == strcmp(argv[2], "barrier");
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm pair;
    MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : 1, rank, &pair);
    if (rank < 2) {
        double plain[CHUNKS], ours[CHUNKS];
        /* Sets our communicator up and warms both barriers. */
        for (long i = 0; i < per_chunk; i++) {
            MPI_Barrier(pair);
            PMPI_Barrier(pair);
        }
        for (int c = 0; c < CHUNKS; c++) {
            double t0 = MPI_Wtime();
            for (long i = 0; i < per_chunk; i++) PMPI_Barrier(pair);
            double t1 = MPI_Wtime();
            for (long i = 0; i < per_chunk; i++) MPI_Barrier(pair);
            double t2 = MPI_Wtime();
            plain[c] = (t1 - t0) / (double)per_chunk;
            ours[c] = (t2 - t1) / (double)per_chunk;
        }
        qsort(plain, CHUNKS, sizeof(double), cmp);
        qsort(ours, CHUNKS, sizeof(double), cmp);
        if (rank == 0)
            printf("busy_ranks: %d ranks, 2 timing, %d waiting in %s: PMPI_Barrier %.0f ns, MPI_Barrier %.0f ns, ratio %.3f\n",
                   size, size - 2, wait_in_barrier ? "MPI_Barrier" : "MPI_Allreduce", plain[CHUNKS / 2] * 1e9, ours[CHUNKS / 2] * 1e9,
                   ours[CHUNKS / 2] / plain[CHUNKS / 2]);
    }
    /* The busy ranks wait here for the whole measurement. */
    if (wait_in_barrier) MPI_Barrier(MPI_COMM_WORLD);
    int one = 1, all = 0;
    MPI_Allreduce(&one, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (all != size) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Comm_free(&pair);
    MPI_Finalize();
    return 0;
}
