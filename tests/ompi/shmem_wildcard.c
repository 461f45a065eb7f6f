/* shmem_wildcard.c: a hybrid MPI + OpenSHMEM program with a wildcard MPI_Irecv on
 * MPI_COMM_WORLD posted across an active set's first barrier (issue 50 item 9), for
 * tests/ompi/run.sh.
 *
 *   oshrun -np 3 ./shmem_wildcard
 *
 * PE 0 posts MPI_Irecv(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD); then PEs 0 and 1 run
 * shmem_barrier on the active set {0, 1}, whose first barrier makes the set's MPI communicator
 * (MPI_Comm_create_group, which sends point-to-point messages on its parent with a tag of its
 * own); then PE 1 sends PE 0 the message the receive is for. The receive must get exactly that
 * message: made on MPI_COMM_WORLD, the set's creation lost a message to the receive and hung
 * (or the receive got a message that is not the program's).
 */
#include <mpi.h>
#include <shmem.h>
#include <stdio.h>

static long pSync[SHMEM_BARRIER_SYNC_SIZE];

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    shmem_init();
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++) pSync[i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();
    int me = shmem_my_pe();
    int in[4] = {0, 0, 0, 0};
    MPI_Request req = MPI_REQUEST_NULL;
    if (me == 0) MPI_Irecv(in, 4, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req);
    if (me < 2) {
        for (int i = 0; i < 10; i++) shmem_barrier(0, 0, 2, pSync);
    }
    if (me == 1) {
        int out[4] = {42, 43, 44, 45};
        MPI_Send(out, 4, MPI_INT, 0, 7, MPI_COMM_WORLD);
    }
    if (me == 0) {
        MPI_Status st;
        MPI_Wait(&req, &st);
        int count = 0;
        MPI_Get_count(&st, MPI_INT, &count);
        if (st.MPI_SOURCE != 1 || st.MPI_TAG != 7 || count != 4 || in[0] != 42 || in[3] != 45) {
            fprintf(stderr, "shmem_wildcard: FAILED: the wildcard receive got %d ints with tag %d from %d (%d ...), "
                    "not the program's message\n", count, st.MPI_TAG, st.MPI_SOURCE, in[0]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    /* The other PEs wait for PE 0's word before their next barrier, so that nothing of theirs
     * (whatever serves shmem_barrier_all) reaches the receive first. */
    int go = 1;
    if (me == 0) {
        for (int pe = 1; pe < shmem_n_pes(); pe++) MPI_Send(&go, 1, MPI_INT, pe, 8, MPI_COMM_WORLD);
    } else {
        MPI_Recv(&go, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    shmem_barrier_all();
    printf("shmem_wildcard: PE %d passed\n", me);
    shmem_finalize();
    /* OSHMEM's shmem_finalize finalizes MPI too. */
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
    return 0;
}
