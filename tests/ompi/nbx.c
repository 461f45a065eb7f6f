/* nbx.c: a program whose only barrier is MPI_Ibarrier (issue 50 item 8): the NBX pattern of
 * sparse data exchange (Hoefler et al.; PETSc's two-sided set-up). Each round, every rank sends
 * a message to a few ranks with MPI_Issend, then probes for messages to it until its sends have
 * completed, starts MPI_Ibarrier, and goes on probing until the barrier completes. The barrier
 * must not block inside MPI_Ibarrier (a rank's send completes only once its partner, in its own
 * probe loop, receives it), and must not let a rank through early: a rank that leaves before
 * every sender has entered the barrier misses a message, which the count at the end of the round
 * catches (every rank knows who sends to it: the targets are a function of round and sender).
 *
 *   mpicc -O2 -o nbx nbx.c && mpirun -np 4 ./nbx 300        (on MPI_COMM_WORLD and a duplicate,
 *                                                            then 10 MPI_Barrier on the duplicate)
 *   mpirun -np 2 ./nbx --latency 20000                        (MPI_Ibarrier + MPI_Wait, mean us;
 *                                                            --after-barrier: an MPI_Barrier first)
 *   mpirun -np 3 ./nbx --threads 300     (MPI_THREAD_MULTIPLE: two threads, each on a duplicate of
 *                                         its own, at once)
 *
 * NBX_LATE=r:s makes world rank r start round 100 of the exchange on MPI_COMM_WORLD s seconds
 * late: the others wait in that round's barrier (a stall report below s must name whom they
 * wait for).
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int world_rank;

static void ok(int rc, const char *call) {
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "nbx: %s failed on rank %d\n", call, world_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* Whether `from` sends to `to` in `round` (never to itself; about two targets each). */
static int sends_to(long round, int from, int to, int n) {
    if (from == to) return 0;
    unsigned long h = (unsigned long)round * 2654435761u ^ (unsigned long)from * 40503u ^ (unsigned long)to * 97u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return n <= 3 ? (int)(h % 3) != 0 : (int)(h % (unsigned long)n) < 2;
}

static long exchange(MPI_Comm comm, long rounds, const char *what) {
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    MPI_Request *sends = malloc(sizeof(MPI_Request) * (size_t)n);
    long messages = 0;
    int late_rank = -1, late_seconds = 0;
    const char *late = getenv("NBX_LATE");
    if (late && comm == MPI_COMM_WORLD) sscanf(late, "%d:%d", &late_rank, &late_seconds);
    for (long round = 0; round < rounds; round++) {
        if (round == 100 && world_rank == late_rank) sleep((unsigned)late_seconds);
        int tag = (int)(round % 30000);
        int nsends = 0, expect = 0, got = 0;
        long payload = round * 1000 + me;
        for (int to = 0; to < n; to++) {
            if (sends_to(round, me, to, n)) {
                ok(MPI_Issend(&payload, 1, MPI_LONG, to, tag, comm, &sends[nsends++]), "MPI_Issend");
            }
            if (sends_to(round, to, me, n)) expect++;
        }
        MPI_Request barrier = MPI_REQUEST_NULL;
        int started = 0, done = 0;
        while (!done) {
            int flag = 0;
            MPI_Status st;
            ok(MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &flag, &st), "MPI_Iprobe");
            if (flag) {
                long in;
                ok(MPI_Recv(&in, 1, MPI_LONG, st.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE), "MPI_Recv");
                if (in != round * 1000 + st.MPI_SOURCE || !sends_to(round, st.MPI_SOURCE, me, n)) {
                    fprintf(stderr, "nbx: FAILED on %s: rank %d got %ld from %d in round %ld\n", what, me, in,
                            st.MPI_SOURCE, round);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
                got++;
            }
            if (!started) {
                int sent = 0;
                ok(MPI_Testall(nsends, sends, &sent, MPI_STATUSES_IGNORE), "MPI_Testall");
                if (sent) {
                    ok(MPI_Ibarrier(comm, &barrier), "MPI_Ibarrier");
                    started = 1;
                }
            } else {
                ok(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE), "MPI_Test");
            }
        }
        if (got != expect) {
            fprintf(stderr, "nbx: FAILED on %s: rank %d left round %ld with %d of its %d messages (the barrier let it "
                    "through early)\n", what, me, round, got, expect);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        messages += got;
    }
    free(sends);
    return messages;
}

struct job {
    MPI_Comm comm;
    long rounds;
    long messages;
};

static void *exchange_thread(void *arg) {
    struct job *j = arg;
    j->messages = exchange(j->comm, j->rounds, "a thread's duplicate");
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--threads") == 0) {
        int level;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        int n;
        MPI_Comm_size(MPI_COMM_WORLD, &n);
        if (level < MPI_THREAD_MULTIPLE) {
            if (world_rank == 0) printf("nbx: MPI_THREAD_MULTIPLE not provided; skipped\n");
            MPI_Finalize();
            return 0;
        }
        struct job jobs[2];
        pthread_t threads[2];
        for (int t = 0; t < 2; t++) {
            MPI_Comm_dup(MPI_COMM_WORLD, &jobs[t].comm);
            jobs[t].rounds = atol(argv[2]);
        }
        for (int t = 0; t < 2; t++) pthread_create(&threads[t], NULL, exchange_thread, &jobs[t]);
        for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
        for (int t = 0; t < 2; t++) MPI_Comm_free(&jobs[t].comm);
        printf("nbx: rank %d of %d: two threads, %ld rounds each on a duplicate of its own, %ld messages, every one "
               "received\n", world_rank, n, jobs[0].rounds, jobs[0].messages + jobs[1].messages);
        MPI_Finalize();
        return 0;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc > 2 && strcmp(argv[1], "--latency") == 0) {
        long iters = atol(argv[2]);
        MPI_Request r;
        /* --after-barrier: a blocking barrier first (where ours is then built at once). */
        if (argc > 3 && strcmp(argv[3], "--after-barrier") == 0) MPI_Barrier(MPI_COMM_WORLD);
        /* Warm-up: the switch to ours happens within the first calls. */
        for (long i = 0; i < 1000; i++) {
            MPI_Ibarrier(MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        double t0 = now();
        for (long i = 0; i < iters; i++) {
            MPI_Ibarrier(MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        double us = (now() - t0) * 1e6 / (double)iters;
        if (world_rank == 0) printf("nbx: MPI_Ibarrier + MPI_Wait at %d ranks: %.2f us\n", n, us);
        MPI_Finalize();
        return 0;
    }
    long rounds = argc > 1 ? atol(argv[1]) : 300;
    double t0 = now();
    long on_world = exchange(MPI_COMM_WORLD, rounds, "MPI_COMM_WORLD");
    double per_round = (now() - t0) * 1e6 / (double)rounds;
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    long on_dup = exchange(dup, rounds, "a duplicate");
    /* Blocking barriers after split-phase ones: where ours could not be built in the background
     * (node blocks: several nodes), the first of them builds it. */
    for (int i = 0; i < 10; i++) ok(MPI_Barrier(dup), "MPI_Barrier");
    MPI_Comm_free(&dup);
    printf("nbx: rank %d of %d: %ld rounds on MPI_COMM_WORLD and a duplicate, %ld messages, every one received\n",
           world_rank, n, rounds, on_world + on_dup);
    if (world_rank == 0) printf("nbx: a round on MPI_COMM_WORLD took %.2f us (mean)\n", per_round);
    MPI_Finalize();
    return 0;
}
