/* ibarrier_errors.c: a failed MPI_Ibarrier of the component reaches the handler of the
 * communicator it ran on, as a failed MPI_Barrier does, not MPI_COMM_WORLD's.
 *
 * A duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN; rank 1 comes to its second barrier 4 s
 * late, so rank 0's MPI_Ibarrier times out (run with coll_fastbar_timeout 1s). Rank 0's MPI_Wait
 * must return an error of class MPI_ERR_OTHER; under MPI_COMM_WORLD's default fatal handler the
 * job would end there instead. Every rank then meets on MPI_COMM_WORLD and says "finished".
 */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    MPI_Barrier(dup); /* builds the component's barrier */
    if (1 == rank) sleep(4);
    MPI_Request request;
    int rc = MPI_Ibarrier(dup, &request);
    if (MPI_SUCCESS == rc) rc = MPI_Wait(&request, MPI_STATUS_IGNORE);
    int class = MPI_SUCCESS;
    MPI_Error_class(rc, &class);
    if (0 == rank) {
        if (MPI_ERR_OTHER != class) {
            fprintf(stderr, "ibarrier_errors: FAILED: rank 0's MPI_Wait returned %d (class %d), not MPI_ERR_OTHER\n", rc,
                    class);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        printf("ibarrier_errors: rank 0's MPI_Wait returned MPI_ERR_OTHER to the program\n");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    printf("ibarrier_errors: rank %d finished\n", rank);
    MPI_Comm_free(&dup);
    MPI_Finalize();
    return 0;
}
