/* attr_callbacks.c: our set-up leaves the program's attributes alone (issue 50 item 5).
 *
 * The program puts an attribute with copy and delete callbacks on MPI_COMM_WORLD and on a
 * duplicate, then barriers (the first MPI_Barrier and MPI_Ibarrier build our barrier), then frees
 * the duplicate. Only the program's own calls may run the callbacks: its MPI_Comm_dup copies the
 * world's attribute once, its MPI_Comm_free deletes the duplicate's once. A private duplicate made
 * with MPI_Comm_dup by the library would copy (and later delete) them again.
 *
 * Prints "attr_callbacks: rank R passed" per rank; "attr_callbacks: FAILED ..." and exit 1 otherwise.
 */
#include <mpi.h>
#include <stdio.h>

static int copies, deletes;

static int copy_fn(MPI_Comm comm, int key, void *extra, void *in, void *out, int *flag) {
    (void) comm, (void) key, (void) extra;
    copies++;
    *(void **) out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Comm comm, int key, void *value, void *extra) {
    (void) comm, (void) key, (void) value, (void) extra;
    deletes++;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    int rank, key, bad = 0;
    static int value = 42;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_create_keyval(copy_fn, delete_fn, &key, NULL);
    MPI_Comm_set_attr(MPI_COMM_WORLD, key, &value);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup); /* the program's own copy: 1 */
    for (int i = 0; i < 10; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(dup);
        MPI_Request req;
        MPI_Ibarrier(dup, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    if (copies != 1) {
        fprintf(stderr, "attr_callbacks: FAILED on rank %d: %d copy callbacks after the barriers, expected 1\n", rank,
                copies);
        bad = 1;
    }
    MPI_Comm_free(&dup); /* the program's own delete: 1 */
    MPI_Barrier(MPI_COMM_WORLD);
    if (deletes != 1) {
        fprintf(stderr, "attr_callbacks: FAILED on rank %d: %d delete callbacks after MPI_Comm_free, expected 1\n",
                rank, deletes);
        bad = 1;
    }
    if (!bad) {
        printf("attr_callbacks: rank %d passed\n", rank);
    }
    MPI_Comm_delete_attr(MPI_COMM_WORLD, key);
    MPI_Comm_free_keyval(&key);
    MPI_Finalize();
    return bad;
}
