/*
 * coll/fastbar: the functions of the Rust side (src/coll.rs) that coll_fastbar.c calls, and the
 * outcomes they return. They know nothing of Open MPI's structs: create a barrier for a
 * communicator (at a first MPI_Barrier) or start one in the background (at a first
 * MPI_Ibarrier), advance those, run one, start one, test one, free a started one, free the
 * barrier. Included by coll_fastbar.c only, after mpi.h and fastbar_glue.h.
 */

#ifndef COLL_FASTBAR_RS_H
#define COLL_FASTBAR_RS_H

typedef struct fastbar_rs fastbar_rs;         /* one communicator's barrier */
typedef struct fastbar_rs_req fastbar_rs_req; /* one split-phase barrier */

/* Called by the Rust side at MPI_Finalize (defined below). */
void fastbar_drain_in_flight(void);
/* 1: the component may open; 0: refused (said once per node). */
extern int fastbar_rs_open(const struct fastbar_built_for *built);
/* Collective over `comm`'s ranks: 1 and *out set when every rank serves the communicator, 0 when
 * every rank declines (the reason was printed where one must be). */
extern int fastbar_rs_create(MPI_Comm comm, const struct fastbar_mca_values *values, fastbar_rs **out);
/* A first MPI_Ibarrier (it must not block): starts building in the background (collective, not
 * blocking): 1 and *out set. A rank that cannot start it ends the job, saying why (the others
 * started the exchange: it cannot decline alone); 0 is never returned, DECLINED is a guard. */
extern int fastbar_rs_start(MPI_Comm comm, const struct fastbar_mca_values *values, fastbar_rs **out);
/* Advances the barriers building in the background without blocking: how many still are, or -1
 * when another call of it is under way. */
extern int fastbar_rs_advance_all(void);
/* FASTBAR_DONE, FASTBAR_FAILED (the error was printed), FASTBAR_GONE (MPI_Finalize took the
 * barrier) or FASTBAR_PREVIOUS (still building: the previous module serves this call), or
 * FASTBAR_BUILD (build now, as a first MPI_Barrier does: every rank gets it at this call). */
extern int fastbar_rs_barrier(fastbar_rs *b);
/* FASTBAR_DONE with *out set, FASTBAR_FAILED, FASTBAR_GONE or FASTBAR_PREVIOUS. */
extern int fastbar_rs_ibarrier(fastbar_rs *b, fastbar_rs_req **out);
/* Never blocks: FASTBAR_PENDING, FASTBAR_DONE or FASTBAR_FAILED. `mpi_yields`: Open MPI's
 * progress loop yields the core itself when idle, so the Rust side does not. */
extern int fastbar_rs_test(fastbar_rs *b, fastbar_rs_req *r, int mpi_yields);
extern void fastbar_rs_request_free(fastbar_rs_req *r);
extern void fastbar_rs_free(fastbar_rs *b);
/* MPI_Finalize: drains the split-phase barriers in flight, then frees every barrier. */
extern void fastbar_rs_at_finalize(void);
/* The component structure's storage: a Rust static, so that the cdylib exports it (rustc
 * exports only Rust items); filled from `fastbar_component_template` when the library loads. */
extern char mca_coll_fastbar_component[];

enum { FASTBAR_PENDING = 0, FASTBAR_DONE = 1, FASTBAR_FAILED = 2, FASTBAR_GONE = 3, FASTBAR_PREVIOUS = 4, FASTBAR_BUILD = 5 };

#endif
