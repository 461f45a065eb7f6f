/* many_comms.c: a program that keeps many communicators, each served, under a descriptor
 * limit (issue 50 item 3).
 *
 *   ulimit -n 1024; mpirun -np 2 ./many_comms 1100
 *
 * Makes COUNT duplicates of MPI_COMM_WORLD, keeps them all, and runs a barrier on each (its
 * first builds our barrier on it), then opens a file (the program's own fopen must still
 * work), then a barrier on each again, then frees them. Prints the time of the first barriers
 * per communicator and "many_comms: rank R passed".
 *
 *   mpirun -np 2 ./many_comms 500 free
 *
 * With `free`, a library's pattern instead: a duplicate per call, one barrier, freed on return
 * (the next duplicate may reuse the freed one's barrier); the same time is printed.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int count = argc > 1 ? atoi(argv[1]) : 1100;
    double first = 0.0;
    if (argc > 2 && strcmp(argv[2], "free") == 0) {
        for (int i = 0; i < count; i++) {
            MPI_Comm comm;
            MPI_Comm_dup(MPI_COMM_WORLD, &comm);
            double t = MPI_Wtime();
            MPI_Barrier(comm);
            first += MPI_Wtime() - t;
            MPI_Comm_free(&comm);
        }
        if (rank == 0) {
            printf("many_comms: %d communicators, each freed after one barrier, first barrier %.3f ms each on average\n",
                   count, first * 1e3 / count);
        }
        printf("many_comms: rank %d passed\n", rank);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm *comms = malloc(sizeof(MPI_Comm) * (size_t) count);
    for (int i = 0; i < count; i++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[i]);
        double t = MPI_Wtime();
        MPI_Barrier(comms[i]);
        first += MPI_Wtime() - t;
    }
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) {
        fprintf(stderr, "many_comms: FAILED on rank %d: fopen after %d communicators\n", rank, count);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fclose(f);
    for (int i = 0; i < count; i++) {
        MPI_Barrier(comms[i]);
    }
    for (int i = 0; i < count; i++) {
        MPI_Comm_free(&comms[i]);
    }
    free(comms);
    if (rank == 0) {
        printf("many_comms: %d communicators, first barrier %.3f ms each on average\n", count, first * 1e3 / count);
    }
    printf("many_comms: rank %d passed\n", rank);
    MPI_Finalize();
    return 0;
}
