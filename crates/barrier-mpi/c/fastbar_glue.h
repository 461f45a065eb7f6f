/* fastbar_glue.h: what the Open MPI components' C glues (barrier-ompi's coll, barrier-oshmem's
 * scoll) hand to their Rust side, declared once beside the Rust structures they must match
 * (barrier-mpi's src/glue.rs: McaValues, StructSize, BuiltFor, field for field, #[repr(C)]).
 * The components' build scripts find this directory through barrier-mpi's `links` metadata
 * (DEP_FASTBAR_GLUE_INCLUDE). */
#ifndef FASTBAR_GLUE_H
#define FASTBAR_GLUE_H

#include <stdbool.h>
#include <stddef.h>

/* The component's MCA values, handed to the Rust side as they are: it names, formats and checks
 * them (barrier-mpi's glue::McaValues, field for field). A string null or empty, or a number
 * below 0, is unset. */
struct fastbar_mca_values {
    const char *device_path, *backend, *timeout, *wait_policy, *stall_report;
    int verbose, node_block;
    int disable, min_comm_size; /* agreed by the Rust side among the ranks (below 0: none) */
};

/* What the glue was built for, for the ABI guard on the Rust side (barrier-mpi's glue::BuiltFor
 * and glue::StructSize, field for field): it compares the running library with them. */
struct fastbar_struct_size {
    const char *name;
    size_t running, built;
};
struct fastbar_built_for {
    int major, minor, release;
    const struct fastbar_struct_size *sizes;
    size_t count;
    bool test_mismatch;
};

/* glue.rs asserts the same sizes. */
#if defined(__LP64__)
_Static_assert(sizeof(struct fastbar_mca_values) == 56, "fastbar_mca_values differs from glue.rs's McaValues");
_Static_assert(sizeof(struct fastbar_struct_size) == 24, "fastbar_struct_size differs from glue.rs's StructSize");
_Static_assert(sizeof(struct fastbar_built_for) == 40, "fastbar_built_for differs from glue.rs's BuiltFor");
#endif

#endif
