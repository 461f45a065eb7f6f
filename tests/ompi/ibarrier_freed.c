/* ibarrier_freed.c: an MPI_Ibarrier whose request the program frees, on a communicator it then
 * frees, is not reported pending at MPI_Finalize when it completed (issue 50 item 6).
 *
 * Per round: MPI_Ibarrier on a duplicate, MPI_Request_free, MPI_Comm_free, then blocking
 * barriers on MPI_COMM_WORLD (every rank has entered the Ibarrier before those end, so it
 * completed everywhere). Nothing waits on the freed request: only MPI's progress finds it done.
 * Prints "ibarrier_freed: rank R finished"; tests/ompi/run.sh checks that nothing says "pending".
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int round = 0; round < 5; round++) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        MPI_Barrier(dup); /* builds our barrier on it */
        MPI_Request req;
        MPI_Ibarrier(dup, &req);
        MPI_Request_free(&req);
        MPI_Comm_free(&dup);
        for (int i = 0; i < 3; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    printf("ibarrier_freed: rank %d finished\n", rank);
    MPI_Finalize();
    return 0;
}
