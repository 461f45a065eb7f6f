/* reuse.c: a library that duplicates a communicator per call and frees it on return (issue 50
 * item 3): the next duplicate's first MPI_Barrier may reuse the barrier of the freed one. Every
 * barrier is checked: each rank publishes its arrival count in memory shared by the machine's
 * ranks (MPI_Win_allocate_shared); once a barrier completes, every count of the communicator's
 * ranks must have reached its number.
 *
 *   mpicc -O2 -o reuse reuse.c && mpirun -np 3 -x OMPI_MCA_coll_fastbar_verbose=1 ./reuse 200
 *   mpirun -np 3 -x LD_PRELOAD=libbarrier_pmpi.so -x BARRIER_VERBOSE=1 ./reuse 200 mpi-ibarrier
 *
 * Per call i: a duplicate of MPI_COMM_WORLD (every fourth call: a split of it with the ranks in
 * reverse order, which must never get a barrier of the world's order; every fifth: a duplicate
 * that opts out with the info key, which must stay Open MPI's), its first barrier, then
 * i % 3 more barriers and an MPI_Ibarrier completed by MPI_Wait; every seventh call (on ours),
 * rank 0 frees the communicator while its MPI_Ibarrier is still in flight and waits afterwards
 * (not with `mpi-ibarrier`, where MPI_Ibarrier is the MPI library's: Open MPI 4.1.4's libnbc
 * crashes in MPI_Wait when the communicator was freed first, and refuses MPI_Request_free on
 * its requests, so they are waited for instead).
 * Then calls / 4 communicators of all ranks but the last, each freed after an MPI_Ibarrier
 * released with MPI_Request_free. Prints the mean time of the first barriers and "reuse: rank R passed".
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int world_rank, world_size;
static uint64_t **counts;
static uint64_t *mine;
static uint64_t count;

static void ok(int rc, const char *call) {
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "reuse: %s failed on rank %d\n", call, world_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* Every rank of the communicator (world ranks 0 to `members` - 1) has reached `count`. */
static void check_members(int members, const char *what, long call) {
    for (int p = 0; p < members; p++) {
        uint64_t seen = __atomic_load_n(counts[p], __ATOMIC_ACQUIRE);
        if (seen < count) {
            fprintf(stderr, "reuse: FAILED in call %ld (%s): rank %d sees rank %d at %llu after barrier %llu\n", call,
                    what, world_rank, p, (unsigned long long)seen, (unsigned long long)count);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

static void check(const char *what, long call) { check_members(world_size, what, call); }

static void arrive(long call) {
    if (((uint64_t)(world_rank + 1) * 2654435761u ^ (uint64_t)call) % 11 == 0) usleep(100 + world_rank * 40);
    __atomic_store_n(mine, ++count, __ATOMIC_RELEASE);
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 200;
    int mpi_ibarrier = argc > 2 && strcmp(argv[2], "mpi-ibarrier") == 0;
    MPI_Comm machine;
    MPI_Win win;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &machine);
    int msize;
    MPI_Comm_size(machine, &msize);
    if (msize != world_size) {
        fprintf(stderr, "reuse: run every rank on one machine\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    ok(MPI_Win_allocate_shared(64, 1, MPI_INFO_NULL, machine, &mine, &win), "MPI_Win_allocate_shared");
    counts = malloc(sizeof(uint64_t *) * (size_t)world_size);
    for (int p = 0; p < world_size; p++) {
        MPI_Aint len;
        int unit;
        MPI_Win_shared_query(win, p, &len, &unit, &counts[p]);
    }
    __atomic_store_n(mine, 0, __ATOMIC_RELEASE);
    MPI_Barrier(MPI_COMM_WORLD);

    double first = 0.0;
    for (long i = 0; i < calls; i++) {
        MPI_Comm comm;
        const char *what = "a duplicate";
        if (i % 4 == 3) {
            ok(MPI_Comm_split(MPI_COMM_WORLD, 0, world_size - world_rank, &comm), "MPI_Comm_split");
            what = "a split in reverse order";
        } else {
            ok(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
        }
        if (i % 5 == 4) {
            MPI_Info info;
            MPI_Info_create(&info);
            MPI_Info_set(info, "coll_fastbar_disable", "true");
            MPI_Comm_set_info(comm, info);
            MPI_Info_free(&info);
            what = "an opted-out duplicate";
        }
        arrive(i);
        double t = MPI_Wtime();
        ok(MPI_Barrier(comm), "MPI_Barrier");
        first += MPI_Wtime() - t;
        check(what, i);
        for (long b = 0; b < i % 3; b++) {
            arrive(i);
            ok(MPI_Barrier(comm), "MPI_Barrier");
            check(what, i);
        }
        MPI_Request r;
        arrive(i);
        ok(MPI_Ibarrier(comm, &r), "MPI_Ibarrier");
        /* (Not on an opted-out one: Open MPI 4.1.4's libnbc crashes in MPI_Wait when its
         * communicator was freed first, with or without this component.) */
        if (i % 7 == 6 && i % 5 != 4 && !mpi_ibarrier && world_rank == 0) {
            ok(MPI_Comm_free(&comm), "MPI_Comm_free");
            ok(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
        } else {
            ok(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
            ok(MPI_Comm_free(&comm), "MPI_Comm_free");
        }
        check(what, i);
    }
    /* Then communicators of all ranks but the last (their reports say one rank fewer), each
     * freed right after an MPI_Ibarrier released with MPI_Request_free: its barrier is kept when
     * the released one completes, in a later call's progress (the component: inside Open MPI's
     * progress callback), so whether the next one reuses it is a matter of timing and is not
     * counted. Every first barrier is checked. */
    int members = world_size - 1;
    for (long i = 0; members >= 2 && i < calls / 4; i++) {
        MPI_Comm comm;
        ok(MPI_Comm_split(MPI_COMM_WORLD, world_rank < members ? 0 : MPI_UNDEFINED, world_rank, &comm), "MPI_Comm_split");
        if (comm == MPI_COMM_NULL) continue;
        arrive(i);
        ok(MPI_Barrier(comm), "MPI_Barrier");
        check_members(members, "a communicator of all but the last", i);
        MPI_Request r;
        arrive(i);
        ok(MPI_Ibarrier(comm, &r), "MPI_Ibarrier");
        /* (Open MPI 4.1.4 refuses MPI_Request_free on its own MPI_Ibarrier's request.) */
        ok(mpi_ibarrier ? MPI_Wait(&r, MPI_STATUS_IGNORE) : MPI_Request_free(&r), "MPI_Request_free");
        ok(MPI_Comm_free(&comm), "MPI_Comm_free");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank == 0) {
        printf("reuse: %ld communicators, first barrier %.3f ms each on average\n", calls, first * 1e3 / calls);
    }
    printf("reuse: rank %d passed\n", world_rank);
    MPI_Win_free(&win);
    MPI_Comm_free(&machine);
    free(counts);
    MPI_Finalize();
    return 0;
}
