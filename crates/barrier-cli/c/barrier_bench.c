/* barrier_bench.c: the MPI library's barrier (PMPI_Barrier) against this process's MPI_Barrier
 * (the interposer's, when libbarrier_pmpi.so is preloaded), timed in alternating chunks in one
 * run, so that both see the same phases of a machine whose speed changes from second to second.
 * Each chunk's time is the slowest rank's mean per barrier; the medians over the chunks are
 * printed, with their ratio. `barrier bench --mpi` builds and runs it.
 *
 *   mpicc -O2 -o barrier_bench barrier_bench.c
 *   mpirun -np 2 -x LD_PRELOAD=target/release/libbarrier_pmpi.so ./barrier_bench 2000 31 [settle s]
 *
 * With Open MPI's coll component `fastbar` loaded, the argument `component` (after the settle
 * time) adds it as a third variant: PMPI_Barrier on MPI_COMM_WORLD is then the component's, and
 * the library's own is timed on a duplicate whose info (coll_fastbar_disable) keeps it off.
 *
 * Where BARRIER_MPI_NODE_BLOCK=K groups the ranks into nodes of K (and there are several), it
 * first times a ping-pong of 8-byte messages between the first ranks of nodes 0 and 1 (ranks 0
 * and K) in the same chunks, and prints half its round trip: the network's one-way latency,
 * which `barrier model --check-mpi` calibrates its predictions with. Then an exchange between
 * the same two (both send and receive at once, MPI_Sendrecv: one step of a barrier), printed
 * per exchange, which tells what a step costs beyond a one-way message.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Where PMPI_Barrier is the MPI library's own: MPI_COMM_WORLD, or (when Open MPI's coll
 * component `fastbar` is loaded) a duplicate that opted out of it. */
static MPI_Comm own_comm;

/* The coll component (below PMPI): PMPI_Barrier on MPI_COMM_WORLD. */
static int component_barrier(MPI_Comm comm) {
    (void)comm;
    return PMPI_Barrier(MPI_COMM_WORLD);
}

/* Mean seconds per barrier over `n` barriers, the slowest rank's. */
static double chunk(int (*bar)(MPI_Comm), long n) {
    double t, worst;
    PMPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm comm = bar == PMPI_Barrier ? own_comm : MPI_COMM_WORLD;
    t = MPI_Wtime();
    for (long i = 0; i < n; i++) bar(comm);
    t = (MPI_Wtime() - t) / (double)n;
    PMPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

/* Mean seconds per one-way message over `n` round trips between ranks 0 and `peer` (the others
 * wait), rank 0's. */
static double pingpong(int rank, int peer, long n) {
    double t, payload = 0.0;
    PMPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    for (long i = 0; i < n && (rank == 0 || rank == peer); i++) {
        if (rank == 0) {
            PMPI_Send(&payload, 1, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD);
            PMPI_Recv(&payload, 1, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            PMPI_Recv(&payload, 1, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            PMPI_Send(&payload, 1, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD);
        }
    }
    t = (MPI_Wtime() - t) / (2.0 * (double)n);
    PMPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return t;
}

/* Mean seconds per exchange over `n` exchanges between ranks 0 and `peer` (each sends to the
 * other and receives from it at once), rank 0's. */
static double exchange(int rank, int peer, long n) {
    double t, out = 0.0, in = 0.0;
    int other = rank == 0 ? peer : 0;
    PMPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    for (long i = 0; i < n && (rank == 0 || rank == peer); i++)
        PMPI_Sendrecv(&out, 1, MPI_DOUBLE, other, 8, &in, 1, MPI_DOUBLE, other, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    t = (MPI_Wtime() - t) / (double)n;
    PMPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return t;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    int rounds = argc > 2 ? atoi(argv[2]) : 31;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rounds < 1) rounds = 1;
    /* "component": the coll component is loaded; time it too (PMPI_Barrier on MPI_COMM_WORLD),
     * and the library's own on a duplicate whose info keeps it off the component. */
    int component = argc > 4 && strcmp(argv[4], "component") == 0;
    own_comm = MPI_COMM_WORLD;
    if (component) {
        MPI_Info info;
        MPI_Info_create(&info);
        MPI_Info_set(info, "coll_fastbar_disable", "true");
        PMPI_Comm_dup(MPI_COMM_WORLD, &own_comm);
        MPI_Comm_set_info(own_comm, info);
        MPI_Info_free(&info);
    }
    double *lib = malloc(sizeof(double) * (size_t)rounds), *ours = malloc(sizeof(double) * (size_t)rounds);
    double *comp = malloc(sizeof(double) * (size_t)rounds);
    /* Warm up both (the first MPI_Barrier on a communicator sets up the interposer's), for a
     * second at least: processes that mpirun starts together begin crowded on a few cores, and
     * the kernel spreads them one migration at a time over up to a second, during which an
     * oversubscribed barrier (either one) waits for its most crowded core. Rank 0's clock
     * decides, for everyone. */
    double settle = argc > 3 ? atof(argv[3]) : 1.0, start = MPI_Wtime();
    int more = 1;
    while (more) {
        chunk(PMPI_Barrier, iters);
        chunk(MPI_Barrier, iters);
        if (component) chunk(component_barrier, iters);
        more = MPI_Wtime() - start < settle;
        PMPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    /* The network's one-way latency between the first ranks of two nodes. */
    /* Rank 0's setting, for everyone: ranks that read different values would make different
     * collective calls and hang. */
    const char *block = getenv("BARRIER_MPI_NODE_BLOCK");
    int peer = block ? atoi(block) : 0;
    PMPI_Bcast(&peer, 1, MPI_INT, 0, MPI_COMM_WORLD);
    double *oneway = malloc(sizeof(double) * (size_t)rounds), *step = malloc(sizeof(double) * (size_t)rounds);
    if (peer > 0 && peer < size) {
        pingpong(rank, peer, iters);
        exchange(rank, peer, iters);
        for (int r = 0; r < rounds; r++) {
            oneway[r] = pingpong(rank, peer, iters);
            step[r] = exchange(rank, peer, iters);
        }
    } else {
        peer = 0;
    }
    for (int r = 0; r < rounds; r++) {
        /* Alternate which goes first. */
        if (r % 2 == 0) {
            lib[r] = chunk(PMPI_Barrier, iters);
            ours[r] = chunk(MPI_Barrier, iters);
            if (component) comp[r] = chunk(component_barrier, iters);
        } else {
            if (component) comp[r] = chunk(component_barrier, iters);
            ours[r] = chunk(MPI_Barrier, iters);
            lib[r] = chunk(PMPI_Barrier, iters);
        }
    }
    if (rank == 0) {
        qsort(lib, (size_t)rounds, sizeof(double), cmp);
        qsort(ours, (size_t)rounds, sizeof(double), cmp);
        double ml = lib[rounds / 2] * 1e9, mo = ours[rounds / 2] * 1e9;
        /* Which MPI was timed: the first line of its own version string. */
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(version, &len);
        version[strcspn(version, "\n")] = 0;
        printf("MPI library: %s\n", version);
        printf("ranks %d, %d chunks of %ld barriers each, alternating\n", size, rounds, iters);
        printf("%-34s median %10.0f ns   best %10.0f ns\n", "PMPI_Barrier (the MPI library)", ml, lib[0] * 1e9);
        printf("%-34s median %10.0f ns   best %10.0f ns\n", "MPI_Barrier (this process's)", mo, ours[0] * 1e9);
        printf("ratio MPI_Barrier / PMPI_Barrier: %.3f\n", mo / ml);
        if (peer) {
            qsort(oneway, (size_t)rounds, sizeof(double), cmp);
            printf("ping-pong rank 0 - rank %d: one way median %10.0f ns   best %10.0f ns\n", peer,
                   oneway[rounds / 2] * 1e9, oneway[0] * 1e9);
            qsort(step, (size_t)rounds, sizeof(double), cmp);
            printf("exchange rank 0 - rank %d: per exchange median %10.0f ns   best %10.0f ns\n", peer,
                   step[rounds / 2] * 1e9, step[0] * 1e9);
        }
        if (component) {
            qsort(comp, (size_t)rounds, sizeof(double), cmp);
            double mc = comp[rounds / 2] * 1e9;
            printf("%-34s median %10.0f ns   best %10.0f ns\n", "coll/fastbar (the component)", mc, comp[0] * 1e9);
            printf("ratio coll/fastbar / PMPI_Barrier: %.3f\n", mc / ml);
        }
    }
    if (own_comm != MPI_COMM_WORLD) MPI_Comm_free(&own_comm);
    free(oneway);
    free(step);
    free(comp);
    free(lib);
    free(ours);
    MPI_Finalize();
    return 0;
}
