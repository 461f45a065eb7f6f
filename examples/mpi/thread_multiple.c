/* thread_multiple.c: two threads of every rank call MPI_Barrier at once, each on its own
 * communicator (MPI_THREAD_MULTIPLE), checked.
 *
 * Each thread has a duplicate of MPI_COMM_WORLD and a count per rank in memory shared by the
 * machine's ranks (MPI_Win_allocate_shared); after every barrier it reads every rank's count for
 * its own communicator: one below the barrier's number means a rank was let through early.
 * All ranks must share one machine.
 *
 *   mpicc -O2 -pthread -o thread_multiple thread_multiple.c
 *   mpirun -np 3 -x LD_PRELOAD=target/release/libbarrier_pmpi.so ./thread_multiple 2000
 */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 2

static int rank, size;
static long iters;
static MPI_Comm comms[THREADS];
static uint64_t *counts[64];

static void *run(void *arg) {
    int t = (int)(intptr_t)arg;
    for (long i = 1; i <= iters; i++) {
        __atomic_store_n(&counts[rank][t], (uint64_t)i, __ATOMIC_RELEASE);
        if (MPI_Barrier(comms[t]) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
        for (int p = 0; p < size; p++) {
            uint64_t seen = __atomic_load_n(&counts[p][t], __ATOMIC_ACQUIRE);
            if (seen < (uint64_t)i || seen > (uint64_t)i + 1) {
                fprintf(stderr, "thread_multiple: FAILED: rank %d thread %d sees rank %d at %llu after barrier %ld\n",
                        rank, t, p, (unsigned long long)seen, i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    iters = argc > 1 ? atol(argv[1]) : 2000;
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) printf("thread_multiple: this MPI gives no MPI_THREAD_MULTIPLE (%d); nothing to check\n", provided);
        MPI_Finalize();
        return 0;
    }
    if (size > 64) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Comm machine;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &machine);
    int msize;
    MPI_Comm_size(machine, &msize);
    if (msize != size) MPI_Abort(MPI_COMM_WORLD, 2);
    uint64_t *mine;
    MPI_Win win;
    MPI_Win_allocate_shared(THREADS * sizeof(uint64_t), sizeof(uint64_t), MPI_INFO_NULL, machine, &mine, &win);
    for (int p = 0; p < size; p++) {
        MPI_Aint bytes;
        int unit;
        MPI_Win_shared_query(win, p, &bytes, &unit, &counts[p]);
    }
    for (int t = 0; t < THREADS; t++) {
        mine[t] = 0;
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
    }
    MPI_Win_lock_all(0, win);
    MPI_Barrier(machine);
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, run, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    for (int t = 0; t < THREADS; t++) MPI_Comm_free(&comms[t]);
    MPI_Comm_free(&machine);
    if (rank == 0) printf("thread_multiple: %d ranks, %d threads each: %ld checked barriers per thread passed\n", size,
                          THREADS, iters);
    MPI_Finalize();
    return 0;
}
