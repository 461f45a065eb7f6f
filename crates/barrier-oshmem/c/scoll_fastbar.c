/*
 * scoll/fastbar: the OSHMEM scoll component of the barrier library.
 *
 * Owns every OSHMEM structure the component needs (the component, the module per group with the
 * previous barrier it replaces, the MCA parameters) and calls the Rust side (src/scoll.rs)
 * through three functions: find the barrier of a set of PEs (collective over them the first
 * time), run one, say whether it is gone. See the crate docs for the protocol.
 *
 * Compiled by build.rs against the installed headers, with a shim directory that maps the
 * source-tree paths the installed OSHMEM headers include (oshmem/include/shmem.h,
 * ompi/include/mpi.h) to the installed files.
 */
#include "oshmem_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "fastbar_glue.h"
#include "ompi/version.h"
#include "oshmem/mca/scoll/scoll.h"
#include "oshmem/proc/proc.h"
#include "opal/mca/base/mca_base_var.h"
#include "oshmem/runtime/runtime.h"
#include "pshmem.h"

/* ---- the Rust side (src/scoll.rs) --------------------------------------------------------- */

typedef struct fastbar_set fastbar_set; /* the barrier of one set of PEs */

/* 1: the component may open; 0: refused (said once per node). */
extern int fastbar_scoll_rs_open(const struct fastbar_built_for *built);
/* Collective over the PEs in `pes` (world ranks, in the set's order) the first time a set is
 * seen: 1 and *out set when every member serves it, 0 when every member declines. */
extern int fastbar_scoll_rs_find(const int *pes, int count, const struct fastbar_mca_values *values,
                                 fastbar_set **out);
/* FASTBAR_DONE, FASTBAR_FAILED (said on stderr) or FASTBAR_GONE (finalized: the previous serves). */
extern int fastbar_scoll_rs_barrier(fastbar_set *set);
/* The component closes: free every barrier now (MPI still works) and take the MPI_Finalize hook
 * away (this library is unloaded before OSHMEM finalizes MPI). */
extern void fastbar_scoll_rs_close(void);
/* Queried for a group of every PE (shmem_init): starts the private parent of active sets. */
extern void fastbar_scoll_rs_whole_job(void);
extern char mca_scoll_fastbar_component[];

enum { FASTBAR_DONE = 1, FASTBAR_FAILED = 2, FASTBAR_GONE = 3 };

_Static_assert(sizeof(mca_scoll_base_component_1_0_0_t) <= FASTBAR_COMPONENT_BYTES,
               "the Rust storage of the component structure is too small");

#define COMPONENT ((mca_scoll_base_component_1_0_0_t *) (void *) mca_scoll_fastbar_component)

/* ---- MCA parameters ----------------------------------------------------------------------- */

static int param_priority = 90; /* above scoll/mpi and scoll/basic */
static bool param_disable = false;
static char *param_backend = NULL;
static char *param_timeout = NULL;
static char *param_wait_policy = NULL;
static int param_verbose = -1;
static int param_node_block = -1;
static bool param_test_abi_mismatch = false;
static bool refused = false;

static int register_params(void)
{
    const mca_base_component_t *c = &COMPONENT->scoll_version;
    mca_base_component_var_register(c, "priority",
        "Priority of the fastbar scoll component (default 90: above mpi and basic; 0 turns it off)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_READONLY, &param_priority);
    mca_base_component_var_register(c, "disable", "Serve no group (shmem barriers stay the next component's)",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_READONLY, &param_disable);
    mca_base_component_var_register(c, "backend", "Backends to use, in order; unset: BARRIER_BACKEND",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &param_backend);
    mca_base_component_var_register(c, "timeout",
        "Fail a barrier that waits longer than this (30s, 500ms, none); unset: BARRIER_TIMEOUT",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &param_timeout);
    mca_base_component_var_register(c, "wait_policy", "spin (then yield, never sleep), park (then sleep) or auto (park when PEs outnumber cores); unset: "
        "BARRIER_WAIT_POLICY",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &param_wait_policy);
    mca_base_component_var_register(c, "verbose",
        "1: the first PE of each set says which barrier it got; -1: BARRIER_VERBOSE",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &param_verbose);
    mca_base_component_var_register(c, "node_block",
        "Treat every K consecutive PEs of a machine as one node (tests); -1: BARRIER_MPI_NODE_BLOCK",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY, &param_node_block);
    mca_base_component_var_register(c, "test_abi_mismatch",
        "Tests only: act as if the running OSHMEM did not match the headers the component was built with",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY, &param_test_abi_mismatch);
    return OSHMEM_SUCCESS;
}

/* ---- the ABI guard (the Rust side decides and says why) ------------------------------------ */

static int fastbar_open(void)
{
    const struct fastbar_struct_size sizes[] = {
        {"group", oshmem_group_t_class.cls_sizeof, sizeof(oshmem_group_t)},
        {"scoll module", mca_scoll_base_module_t_class.cls_sizeof, sizeof(mca_scoll_base_module_t)},
    };
    const struct fastbar_built_for built = {OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION,
                                            sizes, sizeof sizes / sizeof sizes[0], param_test_abi_mismatch};
    refused = !fastbar_scoll_rs_open(&built);
    return refused ? OSHMEM_ERROR : OSHMEM_SUCCESS;
}

/* ---- the module --------------------------------------------------------------------------- */

enum { UNBUILT, SERVED, DECLINED };

typedef struct fastbar_module_t {
    mca_scoll_base_module_t super;
    /* The barrier of the component below this one, kept for the fall back (inside the module:
     * in scoll a failed enable would leave the group with no barrier at all). */
    mca_scoll_base_module_barrier_fn_t previous_barrier;
    mca_scoll_base_module_t *previous_barrier_module;
    int state;
    fastbar_set *set;
} fastbar_module_t;

static void module_construct(fastbar_module_t *m)
{
    m->previous_barrier = NULL;
    m->previous_barrier_module = NULL;
    m->state = UNBUILT;
    m->set = NULL;
}

static void module_destruct(fastbar_module_t *m)
{
    /* The set's barrier is cached by the Rust side (active sets come back as new groups). */
    if (m->previous_barrier_module) {
        OBJ_RELEASE(m->previous_barrier_module);
    }
}

OBJ_CLASS_DECLARATION(fastbar_module_t);
OBJ_CLASS_INSTANCE(fastbar_module_t, mca_scoll_base_module_t, module_construct, module_destruct);

/* Set while this thread finds (builds) a set's barrier: a barrier called meanwhile is the
 * previous module's, on every PE alike. */
static __thread int building = 0;

/* The previous component's barrier. Like every scoll component it finds its own module in the
 * group's table, so the table names it for the call (as OSHMEM's own components do). */
static int previous(fastbar_module_t *m, struct oshmem_group_t *group, long *pSync, int alg)
{
    group->g_scoll.scoll_barrier_module = m->previous_barrier_module;
    int rc = m->previous_barrier(group, pSync, alg);
    group->g_scoll.scoll_barrier_module = &m->super;
    return rc;
}

static int fastbar_barrier(struct oshmem_group_t *group, long *pSync, int alg)
{
    fastbar_module_t *m = (fastbar_module_t *) group->g_scoll.scoll_barrier_module;
    if (OPAL_UNLIKELY(building)) {
        return previous(m, group, pSync, alg);
    }
    if (OPAL_UNLIKELY(UNBUILT == m->state)) {
        /* The set's PEs on the stack where they fit (a set of up to 1024 PEs), else on the heap. */
        int on_stack[1024];
        int *pes = group->proc_count <= 1024 ? on_stack : malloc(sizeof(int) * (size_t) group->proc_count);
        /* scoll has no device path or stall report of its own (the environment's hold). */
        const struct fastbar_mca_values values = {NULL, param_backend, param_timeout, param_wait_policy, NULL,
                                                  param_verbose, param_node_block, param_disable, -1};
        int served = 0;
        if (pes) {
            for (int i = 0; i < group->proc_count; i++) {
                pes[i] = oshmem_proc_pe_vpid(group, i);
            }
            building++;
            served = fastbar_scoll_rs_find(pes, group->proc_count, &values, &m->set);
            building--;
        }
        if (!pes) {
            /* The set's other members are building: this one cannot decline alone. */
            fprintf(stderr, "scoll/fastbar: out of memory at the first barrier of a set; aborting the job\n");
            oshmem_shmem_abort(-1);
        }
        if (pes != on_stack) {
            free(pes);
        }
        m->state = served ? SERVED : DECLINED;
    }
    if (OPAL_LIKELY(SERVED == m->state)) {
#if OSHMEM_SPEC_COMPAT != 1
        /* shmem_barrier and shmem_barrier_all complete this PE's puts first only in the
         * specification-compatible build: otherwise the barrier does. */
        pshmem_quiet();
#endif
        switch (fastbar_scoll_rs_barrier(m->set)) {
        case FASTBAR_DONE:
            return OSHMEM_SUCCESS;
        case FASTBAR_FAILED:
            /* OSHMEM's barrier calls only print an error and return: this PE would run on
             * before the others arrived, and the set's barrier is broken from here on. The
             * error was said; the job ends (as MPI's default error handler ends it). */
            fprintf(stderr, "scoll/fastbar: a barrier failed (the reason is above); aborting the job\n");
            oshmem_shmem_abort(-1);
            return OSHMEM_ERROR;
        default:
            break;
        }
    }
    return previous(m, group, pSync, alg);
}

static int fastbar_module_enable(mca_scoll_base_module_t *module, struct oshmem_group_t *group)
{
    fastbar_module_t *m = (fastbar_module_t *) module;
    m->previous_barrier = group->g_scoll.scoll_barrier;
    m->previous_barrier_module = group->g_scoll.scoll_barrier_module;
    if (NULL == m->previous_barrier || NULL == m->previous_barrier_module) {
        /* Nothing to fall back on: serve nothing rather than fail enable (which, in scoll,
         * wipes the group's other modules too). */
        m->previous_barrier = NULL;
        m->previous_barrier_module = NULL;
        m->super.scoll_barrier = NULL;
        return OSHMEM_SUCCESS;
    }
    OBJ_RETAIN(m->previous_barrier_module);
    return OSHMEM_SUCCESS;
}

static mca_scoll_base_module_t *fastbar_query(struct oshmem_group_t *group, int *priority)
{
    /* `disable` is agreed by the set's first barrier instead (issue 50 item 2): a PE whose
     * module is not here would run another barrier while the others wait in ours. */
    if (refused || param_priority <= 0 || group->proc_count < 2) {
        return NULL;
    }
    if (group->proc_count == oshmem_num_procs()) {
        /* Every PE makes this query (shmem_init's group of all, or an active set of all). */
        fastbar_scoll_rs_whole_job();
    }
    fastbar_module_t *m = OBJ_NEW(fastbar_module_t);
    if (NULL == m) {
        return NULL;
    }
    m->super.scoll_module_enable = fastbar_module_enable;
    m->super.scoll_barrier = fastbar_barrier;
    *priority = param_priority;
    return &m->super;
}

static int fastbar_init(bool enable_progress_threads, bool enable_threads)
{
    (void) enable_progress_threads;
    (void) enable_threads;
    return OSHMEM_SUCCESS;
}

static int fastbar_close(void)
{
    fastbar_scoll_rs_close();
    return OSHMEM_SUCCESS;
}

static const mca_scoll_base_component_1_0_0_t fastbar_component_template = {
    .scoll_version = {
        MCA_SCOLL_BASE_VERSION_2_0_0,
        .mca_component_name = "fastbar",
        MCA_BASE_MAKE_VERSION(component, OSHMEM_MAJOR_VERSION, OSHMEM_MINOR_VERSION, OSHMEM_RELEASE_VERSION),
        .mca_open_component = fastbar_open,
        .mca_close_component = fastbar_close,
        .mca_register_component_params = register_params,
    },
    .scoll_data = {
        MCA_BASE_METADATA_PARAM_CHECKPOINT
    },
    .scoll_init = fastbar_init,
    .scoll_query = fastbar_query,
};

__attribute__((constructor)) static void fill_component(void)
{
    memcpy(mca_scoll_fastbar_component, &fastbar_component_template, sizeof fastbar_component_template);
}
