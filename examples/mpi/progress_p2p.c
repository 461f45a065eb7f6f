/* progress_p2p.c: a large message crossing a barrier.
 *
 * Pairs of ranks (0 with 1, 2 with 3, ...): the even rank posts a 16 MiB MPI_Irecv from its
 * partner and calls MPI_Barrier; the odd rank sleeps 200 ms, sends 16 MiB with MPI_Send (a
 * rendezvous at that size: it completes only once the receiver's MPI progresses), then calls
 * MPI_Barrier. MPI's progress rule makes this run: the receiver is blocked in an MPI call (the
 * barrier), so its MPI progresses the receive. A barrier that never lets MPI progress deadlocks.
 * An odd rank out (odd sizes) only takes part in the barriers.
 *
 *   mpicc -O2 -o progress_p2p progress_p2p.c
 *   mpirun -np 2 -x LD_PRELOAD=target/release/libbarrier_pmpi.so ./progress_p2p 3
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define WORDS (2u * 1024 * 1024) /* 16 MiB of uint64_t */

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t *buf = malloc(WORDS * sizeof(uint64_t));
    int partner = rank ^ 1;
    if (partner >= size) partner = -1;
    /* The first barrier sets the communicator up; the crossing happens in the later ones. */
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int r = 0; r < rounds; r++) {
        if (partner < 0) {
            MPI_Barrier(MPI_COMM_WORLD);
        } else if (rank % 2 == 0) {
            MPI_Request req;
            MPI_Irecv(buf, WORDS, MPI_UINT64_T, partner, r, MPI_COMM_WORLD, &req);
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            if (buf[0] != (uint64_t)r + 1 || buf[WORDS - 1] != (uint64_t)r + 7) {
                fprintf(stderr, "progress_p2p: FAILED: rank %d received the wrong data in round %d\n", rank, r);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        } else {
            for (uint32_t w = 0; w < WORDS; w++) buf[w] = (uint64_t)r + 1;
            buf[WORDS - 1] = (uint64_t)r + 7;
            usleep(200000);
            MPI_Send(buf, WORDS, MPI_UINT64_T, partner, r, MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    double took = MPI_Wtime() - start;
    if (rank == 0)
        printf("progress_p2p: %d ranks: %d rounds of a 16 MiB message crossing a barrier in %.3f s\n", size, rounds,
               took);
    free(buf);
    MPI_Finalize();
    return 0;
}
