/* info_keys.c: the coll component adds no info key of its own to a communicator's info, and a
 * key the program sets (coll_fastbar_disable=true) is kept and obeyed.
 *
 * Prints "info_keys: rank R passed" per rank; "info_keys: FAILED: ..." and exit 1 otherwise.
 * Run with the component loaded and coll_fastbar_verbose 1: the communicator with the key says
 * "Open MPI's own" (checked by tests/ompi/run.sh).
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int rank;

static int failed(const char *what, const char *key, const char *value) {
    fprintf(stderr, "info_keys: FAILED on rank %d: %s: %s=%s\n", rank, what, key, value);
    return 1;
}

/* 1 when `comm`'s info has a key naming fastbar other than `allowed` (NULL: none allowed). */
static int stray_keys(MPI_Comm comm, const char *allowed) {
    MPI_Info info;
    int n = 0, bad = 0;
    MPI_Comm_get_info(comm, &info);
    MPI_Info_get_nkeys(info, &n);
    for (int i = 0; i < n; i++) {
        char key[MPI_MAX_INFO_KEY + 1], value[MPI_MAX_INFO_VAL + 1];
        int flag = 0;
        MPI_Info_get_nthkey(info, i, key);
        MPI_Info_get(info, key, MPI_MAX_INFO_VAL, value, &flag);
        if (strstr(key, "fastbar") && !(allowed && 0 == strcmp(key, allowed))) {
            bad |= failed("a key the program never set", key, value);
        }
    }
    MPI_Info_free(&info);
    return bad;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int bad = 0;

    MPI_Comm plain;
    MPI_Comm_dup(MPI_COMM_WORLD, &plain);
    MPI_Barrier(plain);
    bad |= stray_keys(plain, NULL);
    bad |= stray_keys(MPI_COMM_WORLD, NULL);

    MPI_Info set;
    MPI_Info_create(&set);
    MPI_Info_set(set, "coll_fastbar_disable", "true");
    MPI_Comm kept;
    MPI_Comm_dup_with_info(MPI_COMM_WORLD, set, &kept);
    MPI_Info_free(&set);
    MPI_Barrier(kept);
    bad |= stray_keys(kept, "coll_fastbar_disable");
    MPI_Info info;
    char value[MPI_MAX_INFO_VAL + 1] = "";
    int flag = 0;
    MPI_Comm_get_info(kept, &info);
    MPI_Info_get(info, "coll_fastbar_disable", MPI_MAX_INFO_VAL, value, &flag);
    MPI_Info_free(&info);
    if (!flag || strcmp(value, "true")) bad |= failed("the program's own key is lost", "coll_fastbar_disable", value);

    MPI_Comm_free(&kept);
    MPI_Comm_free(&plain);
    if (!bad) printf("info_keys: rank %d passed\n", rank);
    MPI_Finalize();
    return bad;
}
