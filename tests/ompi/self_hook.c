/*
 * A library's own MPI_COMM_SELF callback that runs a barrier at MPI_Finalize (issue 50 item 9).
 *
 * MPI deletes MPI_COMM_SELF's attributes first thing in MPI_Finalize, in the reverse order of
 * their setting. The library sets its attribute before the program's first barrier on even
 * ranks and after it on odd ones; its callback runs a barrier on the library's communicator.
 * The barrier library's own finalize hook (which frees its barriers) must run after every such
 * callback on every rank, or the callback's barrier is ours on some ranks and Open MPI's on
 * others: a hang (or, with a timeout, a failed barrier).
 *
 *   mpirun -np 3 self_hook      prints "self_hook: rank R finished" on every rank
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static MPI_Comm library;
static int rank;

static int at_finalize(MPI_Comm comm, int key, void *value, void *extra)
{
    (void) comm;
    (void) key;
    (void) value;
    (void) extra;
    int rc = MPI_Barrier(library);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "self_hook: rank %d: the library's finalize barrier failed (%d)\n", rank, rc);
        return rc;
    }
    printf("self_hook: rank %d: the library's finalize barrier passed\n", rank);
    fflush(stdout);
    return MPI_Comm_free(&library);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_dup(MPI_COMM_WORLD, &library);
    MPI_Comm_set_errhandler(library, MPI_ERRORS_RETURN);
    int key;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &key, NULL);
    if (rank % 2 == 0) {
        MPI_Comm_set_attr(MPI_COMM_SELF, key, NULL);
    }
    /* The first barriers: ours is built here (on the library's communicator and the world). */
    MPI_Barrier(library);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank % 2 == 1) {
        MPI_Comm_set_attr(MPI_COMM_SELF, key, NULL);
    }
    for (int i = 0; i < 100; i++) {
        if (MPI_Barrier(library) != MPI_SUCCESS) {
            fprintf(stderr, "self_hook: rank %d: barrier %d failed\n", rank, i);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    printf("self_hook: rank %d: before MPI_Finalize\n", rank);
    fflush(stdout);
    if (MPI_Finalize() != MPI_SUCCESS) {
        fprintf(stderr, "self_hook: rank %d: MPI_Finalize failed\n", rank);
        return 1;
    }
    printf("self_hook: rank %d finished\n", rank);
    return 0;
}
