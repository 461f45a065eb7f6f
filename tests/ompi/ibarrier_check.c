/* ibarrier_check.c: MPI_Ibarrier (and MPI_Barrier beside it) checked, on MPI_COMM_WORLD and on
 * a split communicator. Every rank publishes its arrival count in memory shared by the ranks of
 * the machine; once a barrier completes, every count of the communicator's ranks must have
 * reached its number (one below: a rank was let through early).
 *
 *   mpicc -O2 -o ibarrier_check ibarrier_check.c && mpirun -np 4 ./ibarrier_check 500
 *
 * Per round on each communicator: MPI_Ibarrier completed by an MPI_Test loop; two outstanding at
 * once, the second waited for first (they complete in order); one completed by MPI_Wait after
 * some MPI_Allreduce traffic; one released with MPI_Request_free and followed by MPI_Barrier.
 *
 *   mpirun -np 4 ./ibarrier_check 500 --ibarrier-first
 *
 * The same, with each communicator's first barrier an MPI_Ibarrier completed by MPI_Wait (a
 * communicator across nodes is then ours from its second call on, set up in the background).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int world_rank;
static uint64_t *const *counts;
static uint64_t *mine;
static int ibarrier_first;

/* Every member of `comm` (by world rank, `members`) has reached `expect`. */
static void check(const int *members, int n, uint64_t expect, const char *what) {
    for (int i = 0; i < n; i++) {
        uint64_t seen = __atomic_load_n(counts[members[i]], __ATOMIC_ACQUIRE);
        if (seen < expect) {
            fprintf(stderr, "ibarrier_check: FAILED on %s: rank %d sees world rank %d at %llu after barrier %llu\n",
                    what, world_rank, members[i], (unsigned long long)seen, (unsigned long long)expect);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

static void ok(int rc, const char *call) {
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "ibarrier_check: %s failed on rank %d\n", call, world_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static void maybe_late(uint64_t i) {
    if (((uint64_t)(world_rank + 1) * 2654435761u ^ i) % 53 == 0) usleep(100 + world_rank * 30);
}

static long rounds_on(MPI_Comm comm, long iters, const char *what) {
    int n;
    MPI_Comm_size(comm, &n);
    int *members = malloc(sizeof(int) * (size_t)n);
    MPI_Allgather(&world_rank, 1, MPI_INT, members, 1, MPI_INT, comm);
    uint64_t count = __atomic_load_n(mine, __ATOMIC_RELAXED);
    long barriers = 0;
    /* The first barrier call on a communicator builds ours (collective), or, an MPI_Ibarrier,
     * starts building it in the background. */
    __atomic_store_n(mine, ++count, __ATOMIC_RELEASE);
    if (ibarrier_first) {
        MPI_Request first;
        ok(MPI_Ibarrier(comm, &first), "MPI_Ibarrier");
        ok(MPI_Wait(&first, MPI_STATUS_IGNORE), "MPI_Wait");
    } else {
        ok(MPI_Barrier(comm), "MPI_Barrier");
    }
    check(members, n, count, what);
    barriers++;
    for (long i = 0; i < iters; i++) {
        MPI_Request r, r2;
        int done = 0;
        /* A test loop. */
        maybe_late(count);
        __atomic_store_n(mine, ++count, __ATOMIC_RELEASE);
        ok(MPI_Ibarrier(comm, &r), "MPI_Ibarrier");
        while (!done) ok(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test");
        check(members, n, count, what);
        /* Two at once: completing the second completes the first. */
        maybe_late(count);
        __atomic_store_n(mine, ++count, __ATOMIC_RELEASE);
        ok(MPI_Ibarrier(comm, &r), "MPI_Ibarrier");
        __atomic_store_n(mine, ++count, __ATOMIC_RELEASE);
        ok(MPI_Ibarrier(comm, &r2), "MPI_Ibarrier");
        ok(MPI_Wait(&r2, MPI_STATUS_IGNORE), "MPI_Wait");
        check(members, n, count, what);
        ok(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (!done) {
            fprintf(stderr, "ibarrier_check: FAILED on %s: an earlier MPI_Ibarrier is pending after a later one completed\n", what);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        /* Other traffic while one is outstanding, then MPI_Wait. */
        __atomic_store_n(mine, ++count, __ATOMIC_RELEASE);
        ok(MPI_Ibarrier(comm, &r), "MPI_Ibarrier");
        long sum = 0, one = 1;
        ok(MPI_Allreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, comm), "MPI_Allreduce");
        ok(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
        check(members, n, count, what);
        /* Freed while active, then a blocking barrier (which completes it first). */
        __atomic_store_n(mine, ++count, __ATOMIC_RELEASE);
        ok(MPI_Ibarrier(comm, &r), "MPI_Ibarrier");
        ok(MPI_Request_free(&r), "MPI_Request_free");
        __atomic_store_n(mine, ++count, __ATOMIC_RELEASE);
        ok(MPI_Barrier(comm), "MPI_Barrier");
        check(members, n, count, what);
        barriers += 6;
    }
    free(members);
    return barriers;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200;
    ibarrier_first = argc > 2 && strcmp(argv[2], "--ibarrier-first") == 0;
    int size, msize;
    MPI_Comm machine, half;
    MPI_Win win;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &machine);
    MPI_Comm_size(machine, &msize);
    if (msize != size) {
        if (world_rank == 0) fprintf(stderr, "ibarrier_check: all ranks must run on one machine\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Win_allocate_shared(sizeof(uint64_t), sizeof(uint64_t), MPI_INFO_NULL, machine, &mine, &win);
    uint64_t **all = malloc(sizeof(uint64_t *) * (size_t)size);
    for (int p = 0; p < size; p++) {
        MPI_Aint bytes;
        int unit;
        MPI_Win_shared_query(win, p, &bytes, &unit, &all[p]);
    }
    counts = all;
    MPI_Win_lock_all(0, win);
    __atomic_store_n(mine, 0, __ATOMIC_RELEASE);
    PMPI_Barrier(machine);

    long total = rounds_on(MPI_COMM_WORLD, iters, "MPI_COMM_WORLD");
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
    total += rounds_on(half, iters / 2, "a split communicator");
    MPI_Comm_free(&half);
    ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    total++;

    printf("ibarrier_check: rank %d of %d: %ld checked barriers passed\n", world_rank, size, total);
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    free(all);
    MPI_Comm_free(&machine);
    MPI_Finalize();
    return 0;
}
