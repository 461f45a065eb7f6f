/* pmpi_count.c: a PMPI tool of the kind profilers are (mpiP, Score-P and TAU's MPI layers):
 * it defines MPI_Barrier, MPI_Ibarrier and MPI_Finalize, counts, calls the PMPI_ entry points,
 * and says its counts in MPI_Finalize. Preloaded beside the coll component it must count every
 * barrier the program makes, while the component serves them below PMPI.
 *
 *   mpicc -shared -fPIC -o libpmpi_count.so pmpi_count.c
 */
#include <mpi.h>
#include <stdio.h>

static long barriers, ibarriers;

int MPI_Barrier(MPI_Comm comm) {
    barriers++;
    return PMPI_Barrier(comm);
}

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request) {
    ibarriers++;
    return PMPI_Ibarrier(comm, request);
}

int MPI_Finalize(void) {
    int rank;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("pmpi_count: rank %d counted %ld MPI_Barrier and %ld MPI_Ibarrier calls\n", rank, barriers, ibarriers);
    fflush(stdout);
    return PMPI_Finalize();
}
