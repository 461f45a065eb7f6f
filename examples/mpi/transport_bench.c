/* transport_bench.c: the two ways the internode phase could move its signals over MPI, timed
 * against each other in alternating chunks in one run. Every rank plays a node root; one
 * barrier is ceil(log2 P) dissemination rounds, round r signalling rank (me + 2^r) mod P.
 *
 *   p2p: one MPI_Isend of the epoch per round; the target keeps one MPI_Irecv(ANY_SOURCE)
 *        posted and raises its slot for the round when a message lands (barrier-mpi's MPI
 *        transport until 2026-11-29; its roots' link now posts a receive from the round's one
 *        sender when a wait finds the slot short: the same messages, matched the same way);
 *   rma: MPI_Accumulate(MPI_REPLACE) of the epoch into the target's window slot for the
 *        round, then MPI_Win_flush; the target polls its own slot after MPI_Win_sync
 *        (passive target, MPI_Win_lock_all for the whole run).
 *
 *   mpicc -O2 -o transport_bench transport_bench.c
 *   mpirun -np 4 ./transport_bench 2000 21                    # default osc (sm on one machine)
 *   mpirun -np 4 --mca osc pt2pt ./transport_bench 2000 21    # RMA over messages, as across nodes
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TAG 0x6261
static int rank, size, rounds;
static volatile uint64_t slots_p2p[64];
static uint64_t *slots_rma;
static MPI_Win win;
static MPI_Request recv_req;
static uint64_t recv_buf[2];

static void p2p_progress(void) {
    int done = 1;
    while (done) {
        MPI_Test(&recv_req, &done, MPI_STATUS_IGNORE);
        if (done) {
            if (slots_p2p[recv_buf[0]] < recv_buf[1]) slots_p2p[recv_buf[0]] = recv_buf[1];
            MPI_Irecv(recv_buf, 2, MPI_UINT64_T, MPI_ANY_SOURCE, TAG, MPI_COMM_WORLD, &recv_req);
        }
    }
}

static void p2p_barrier(uint64_t epoch) {
    for (int r = 0; r < rounds; r++) {
        uint64_t msg[2] = {(uint64_t)r, epoch};
        MPI_Request s;
        MPI_Isend(msg, 2, MPI_UINT64_T, (rank + (1 << r)) % size, TAG, MPI_COMM_WORLD, &s);
        int sent = 0;
        while (slots_p2p[r] < epoch || !sent) {
            p2p_progress();
            if (!sent) MPI_Test(&s, &sent, MPI_STATUS_IGNORE);
        }
    }
}

static void rma_barrier(uint64_t epoch) {
    for (int r = 0; r < rounds; r++) {
        int target = (rank + (1 << r)) % size;
        MPI_Accumulate(&epoch, 1, MPI_UINT64_T, target, r, 1, MPI_UINT64_T, MPI_REPLACE, win);
        MPI_Win_flush(target, win);
        for (;;) {
            MPI_Win_sync(win);
            if (__atomic_load_n(&slots_rma[r], __ATOMIC_ACQUIRE) >= epoch) break;
            int flag;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        }
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double chunk(void (*bar)(uint64_t), uint64_t *epoch, long n) {
    double t, worst;
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    for (long i = 0; i < n; i++) bar(++*epoch);
    t = (MPI_Wtime() - t) / (double)n;
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    int chunks = argc > 2 ? atoi(argv[2]) : 21;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (rounds = 0; (1 << rounds) < size; rounds++) {}
    MPI_Win_allocate(64 * sizeof(uint64_t), sizeof(uint64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &slots_rma, &win);
    for (int i = 0; i < 64; i++) slots_rma[i] = 0;
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    MPI_Irecv(recv_buf, 2, MPI_UINT64_T, MPI_ANY_SOURCE, TAG, MPI_COMM_WORLD, &recv_req);
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t ep_p2p = 0, ep_rma = 0;
    double *p2p = malloc(sizeof(double) * (size_t)chunks), *rma = malloc(sizeof(double) * (size_t)chunks);
    chunk(p2p_barrier, &ep_p2p, iters);
    chunk(rma_barrier, &ep_rma, iters);
    for (int c = 0; c < chunks; c++) {
        if (c % 2 == 0) {
            p2p[c] = chunk(p2p_barrier, &ep_p2p, iters);
            rma[c] = chunk(rma_barrier, &ep_rma, iters);
        } else {
            rma[c] = chunk(rma_barrier, &ep_rma, iters);
            p2p[c] = chunk(p2p_barrier, &ep_p2p, iters);
        }
    }
    if (rank == 0) {
        qsort(p2p, (size_t)chunks, sizeof(double), cmp);
        qsort(rma, (size_t)chunks, sizeof(double), cmp);
        printf("ranks %d (%d rounds), %d chunks of %ld barriers, alternating\n", size, rounds, chunks, iters);
        printf("p2p (Isend + standing Irecv)         median %8.0f ns  best %8.0f ns\n", p2p[chunks / 2] * 1e9, p2p[0] * 1e9);
        printf("rma (Accumulate + flush, poll+sync)  median %8.0f ns  best %8.0f ns\n", rma[chunks / 2] * 1e9, rma[0] * 1e9);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Cancel(&recv_req);
    MPI_Wait(&recv_req, MPI_STATUS_IGNORE);
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    free(p2p);
    free(rma);
    MPI_Finalize();
    return 0;
}
