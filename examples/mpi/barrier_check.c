/* barrier_check.c: MPI_Barrier in a loop, checked. Every rank publishes its arrival count in
 * memory shared by the ranks of its machine (MPI_Win_allocate_shared); after every barrier each
 * rank reads every count: one below the barrier's number means a rank was let through before
 * everyone arrived, one above the next means a rank passed two barriers at once.
 *
 * Runs the same with the MPI library's barrier and under the interposer:
 *   mpicc -O2 -o barrier_check barrier_check.c
 *   mpirun -np 4 ./barrier_check 2000
 *   mpirun -np 4 -x LD_PRELOAD=target/release/libbarrier_pmpi.so -x BARRIER_VERBOSE=1 ./barrier_check 2000
 *
 * BARRIER_CHECK_ABSENT_RANK=r makes world rank r stay away from the last barriers for 60 s: with
 * BARRIER_TIMEOUT set, the others must fail with a report that names it, not hang.
 * BARRIER_CHECK_LATE_RANK=r:s makes world rank r late for them by s seconds, then it comes: with
 * BARRIER_STALL_REPORT below s, the others' stall reports must name it (or the root they wait for).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int world_rank;

static void check(uint64_t *const *counts, int n, uint64_t expect, const char *what) {
    for (int p = 0; p < n; p++) {
        uint64_t seen = __atomic_load_n(counts[p], __ATOMIC_ACQUIRE);
        if (seen < expect || seen > expect + 1) {
            fprintf(stderr, "barrier_check: FAILED on %s: rank %d sees machine rank %d at %llu after barrier %llu\n",
                    what, world_rank, p, (unsigned long long)seen, (unsigned long long)expect);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

/* `iters` checked barriers on `comm` (every rank of the machine is in it), counting on from `base`. */
static void run(MPI_Comm comm, uint64_t *mine, uint64_t *const *counts, int n, uint64_t base, long iters,
                const char *what) {
    for (long i = 1; i <= iters; i++) {
        /* Now and then a rank is late: the others must wait for it. */
        if (((uint64_t)(world_rank + 1) * 2654435761u ^ (uint64_t)i) % 97 == 0) usleep(50 + world_rank * 20);
        __atomic_store_n(mine, base + (uint64_t)i, __ATOMIC_RELEASE);
        if (MPI_Barrier(comm) != MPI_SUCCESS) {
            fprintf(stderr, "barrier_check: MPI_Barrier failed on rank %d\n", world_rank);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        check(counts, n, base + (uint64_t)i, what);
    }
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 1000;
    int size, mrank, msize;
    MPI_Comm machine, dup;
    MPI_Win win;
    uint64_t *mine;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &machine);
    MPI_Comm_rank(machine, &mrank);
    MPI_Comm_size(machine, &msize);
    if (msize != size) {
        if (world_rank == 0) fprintf(stderr, "barrier_check: all ranks must run on one machine\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Win_allocate_shared(sizeof(uint64_t), sizeof(uint64_t), MPI_INFO_NULL, machine, &mine, &win);
    uint64_t **counts = malloc(sizeof(uint64_t *) * (size_t)msize);
    for (int p = 0; p < msize; p++) {
        MPI_Aint bytes;
        int unit;
        MPI_Win_shared_query(win, p, &bytes, &unit, &counts[p]);
    }
    MPI_Win_lock_all(0, win);
    __atomic_store_n(mine, 0, __ATOMIC_RELEASE);
    MPI_Barrier(machine);

    run(MPI_COMM_WORLD, mine, counts, msize, 0, iters, "MPI_COMM_WORLD");
    /* A duplicate gets a barrier of its own; freeing it frees ours or keeps it for the next
     * duplicate (the attribute's delete callback; barrier_mpi::reuse). */
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    run(dup, mine, counts, msize, (uint64_t)iters, iters / 2, "a duplicate of MPI_COMM_WORLD");
    MPI_Comm_free(&dup);
    /* Freed handles come back (MPICH reuses them last in, first out): every new duplicate's
     * barrier is looked up anew (the freed one's may serve it, kept for reuse), never through a
     * lookup remembered from the freed communicator. */
    uint64_t base = (uint64_t)(iters + iters / 2);
    for (int k = 0; k < 20; k++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        run(dup, mine, counts, msize, base, 5, "a reused duplicate");
        MPI_Comm_free(&dup);
        base += 5;
    }
    const char *absent = getenv("BARRIER_CHECK_ABSENT_RANK");
    if (absent && atoi(absent) == world_rank) sleep(60);
    /* RANK:SECONDS: that rank is late for the last barriers, then comes (stall reports). */
    const char *late = getenv("BARRIER_CHECK_LATE_RANK");
    if (late && strchr(late, ':') && atoi(late) == world_rank) sleep((unsigned)atoi(strchr(late, ':') + 1));
    run(MPI_COMM_WORLD, mine, counts, msize, base, 10, "MPI_COMM_WORLD again");

    printf("barrier_check: rank %d of %d: %ld checked barriers passed\n", world_rank, size, iters + iters / 2 + 110);
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    free(counts);
    MPI_Comm_free(&machine);
    MPI_Finalize();
    return 0;
}
