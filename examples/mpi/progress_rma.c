/* progress_rma.c: passive-target one-sided reads between barriers, checked.
 *
 * Every rank keeps its barrier count in an MPI window (MPI_Win_allocate, MPI_Win_lock_all) and,
 * after every MPI_Barrier, reads every other rank's count with MPI_Get_accumulate (MPI_NO_OP)
 * and MPI_Win_flush. A read is answered by the target's MPI progress engine whenever the window
 * is not plain shared memory (MPICH; Open MPI with `--mca osc pt2pt`), and the target may be
 * waiting in its next MPI_Barrier: a barrier that never lets MPI progress deadlocks here.
 * A count below the barrier's number means a rank was let through early.
 *
 *   mpicc -O2 -o progress_rma progress_rma.c
 *   mpirun -np 3 --mca osc pt2pt -x LD_PRELOAD=target/release/libbarrier_pmpi.so ./progress_rma 200
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t *count;
    MPI_Win win;
    MPI_Win_allocate(sizeof(uint64_t), sizeof(uint64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &count, &win);
    MPI_Win_lock_all(0, win);
    uint64_t zero = 0, ignored = 0;
    MPI_Accumulate(&zero, 1, MPI_UINT64_T, rank, 0, 1, MPI_UINT64_T, MPI_REPLACE, win);
    MPI_Win_flush(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 1; i <= iters; i++) {
        uint64_t mine = (uint64_t)i;
        /* This rank's count, through the window (so that it is ordered with the others' reads). */
        MPI_Accumulate(&mine, 1, MPI_UINT64_T, rank, 0, 1, MPI_UINT64_T, MPI_REPLACE, win);
        MPI_Win_flush(rank, win);
        if (((uint64_t)(rank + 1) * 2654435761u ^ (uint64_t)i) % 13 == 0) usleep(200);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int k = 1; k < size; k++) {
            int target = (rank + k) % size;
            uint64_t seen = 0;
            MPI_Get_accumulate(&ignored, 1, MPI_UINT64_T, &seen, 1, MPI_UINT64_T, target, 0, 1, MPI_UINT64_T, MPI_NO_OP,
                               win);
            MPI_Win_flush(target, win);
            if (seen < (uint64_t)i || seen > (uint64_t)i + 1) {
                fprintf(stderr, "progress_rma: FAILED: rank %d reads rank %d's count %llu after barrier %ld\n", rank,
                        target, (unsigned long long)seen, i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    if (rank == 0) printf("progress_rma: %d ranks: %ld barriers with one-sided reads between them passed\n", size, iters);
    MPI_Finalize();
    return 0;
}
