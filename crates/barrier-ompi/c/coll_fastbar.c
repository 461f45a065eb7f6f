/*
 * coll/fastbar: the Open MPI coll component of the barrier library.
 *
 * This file owns every Open MPI structure the component needs (the component, the module, the
 * saved previous barrier functions, the MCA parameters, the split-phase requests and their
 * progress callback) and calls the Rust side (src/coll.rs) through functions that know nothing
 * of Open MPI's structs: create a barrier for a communicator (at a first MPI_Barrier) or start
 * one in the background (at a first MPI_Ibarrier), advance those, run one, start one, test one,
 * free a started one, free the barrier. See the crate docs for the protocol.
 *
 * Compiled by build.rs against the installed Open MPI headers (`mpicc --showme:incdirs`).
 */
#include "ompi_config.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi.h"
#include "fastbar_glue.h"
#include "ompi/attribute/attribute.h"
#include "ompi/communicator/communicator.h"
#include "ompi/mca/coll/base/base.h"
#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/mca/pml/pml.h"
#include "ompi/proc/proc.h"
#include "ompi/request/request.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/info_subscriber.h"

/* The Rust side (src/coll.rs): its functions and their outcomes. */
#include "coll_fastbar_rs.h"

_Static_assert(sizeof(mca_coll_base_component_2_0_0_t) <= FASTBAR_COMPONENT_BYTES,
               "the Rust storage of the component structure is too small");

#define COMPONENT ((mca_coll_base_component_2_0_0_t *) (void *) mca_coll_fastbar_component)

/* ---- MCA parameters ----------------------------------------------------------------------- */

static int param_priority = 40; /* above tuned (30) and han (35) */
static bool param_disable = false;
static int param_min_comm_size = 2;
static char *param_device_path = NULL;
static char *param_backend = NULL;
static char *param_timeout = NULL;
static char *param_wait_policy = NULL;
static char *param_stall_report = NULL;
static int param_verbose = -1;
static int param_node_block = -1;
static bool param_test_abi_mismatch = false;

/* Why open refused (the ABI guard), for comm_query's silence. */
static bool refused = false;

static int register_params(void)
{
    const mca_base_component_t *c = &COMPONENT->collm_version;
    mca_base_component_var_register(c, "priority",
        "Priority of the fastbar coll component (default 40: above tuned and han; 0 turns it off)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_READONLY, &param_priority);
    mca_base_component_var_register(c, "disable",
        "Do not serve any communicator (MPI_Barrier stays the next component's)",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_READONLY, &param_disable);
    mca_base_component_var_register(c, "min_comm_size",
        "Serve only communicators of at least this many ranks",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_READONLY, &param_min_comm_size);
    mca_base_component_var_register(c, "device_path",
        "The barrier device file (switch or GBA); unset: BARRIER_SWITCH_DEVICE_PATH and BARRIER_GBA_DEVICE_PATH, "
        "else each device's default path",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_READONLY, &param_device_path);
    mca_base_component_var_register(c, "backend",
        "Backends to use, in order (switch, gba, a64fx, dissemination, hierarchical, mpi, ...); unset: "
        "BARRIER_BACKEND, else chosen by priority",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &param_backend);
    mca_base_component_var_register(c, "timeout",
        "Fail a barrier that waits longer than this (30s, 500ms, none), naming the ranks that did not arrive; "
        "unset: BARRIER_TIMEOUT",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &param_timeout);
    mca_base_component_var_register(c, "wait_policy",
        "How a waiting rank waits: spin (then yield, never sleep), park (then sleep on a futex) or auto (park when "
        "ranks outnumber cores); unset: BARRIER_WAIT_POLICY",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &param_wait_policy);
    mca_base_component_var_register(c, "stall_report",
        "Say every this often who a long wait waits for (10s, none); unset: BARRIER_STALL_REPORT",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &param_stall_report);
    mca_base_component_var_register(c, "verbose",
        "1: the first rank of each communicator says which barrier it got; -1: BARRIER_VERBOSE",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &param_verbose);
    mca_base_component_var_register(c, "node_block",
        "Treat every K consecutive ranks of a machine as one node (tests of the path across nodes on one "
        "machine); -1: BARRIER_MPI_NODE_BLOCK",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY, &param_node_block);
    mca_base_component_var_register(c, "test_abi_mismatch",
        "Tests only: act as if the running Open MPI did not match the headers the component was built with",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY, &param_test_abi_mismatch);
    return OMPI_SUCCESS;
}

/* ---- the ABI guard (the Rust side decides and says why) ------------------------------------ */

static int fastbar_open(void)
{
    const struct fastbar_struct_size sizes[] = {
        {"communicator", ompi_communicator_t_class.cls_sizeof, sizeof(ompi_communicator_t)},
        {"coll module", mca_coll_base_module_t_class.cls_sizeof, sizeof(mca_coll_base_module_t)},
        {"request", ompi_request_t_class.cls_sizeof, sizeof(ompi_request_t)},
    };
    const struct fastbar_built_for built = {OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION,
                                            sizes, sizeof sizes / sizeof sizes[0], param_test_abi_mismatch};
    refused = !fastbar_rs_open(&built);
    return refused ? OMPI_ERROR : OMPI_SUCCESS;
}

/* ---- the module ------------------------------------------------------------------------- */

enum { UNBUILT, SERVED, DECLINED };

typedef struct fastbar_module_t {
    mca_coll_base_module_t super;
    /* The functions this module replaces (the next component's), kept for the fall back. */
    mca_coll_base_module_barrier_fn_t previous_barrier;
    mca_coll_base_module_t *previous_barrier_module;
    mca_coll_base_module_ibarrier_fn_t previous_ibarrier;
    mca_coll_base_module_t *previous_ibarrier_module;
    /* UNBUILT until the communicator's first MPI_Barrier (collective, as the set-up is). */
    int state;
    fastbar_rs *rs;
} fastbar_module_t;

static void module_construct(fastbar_module_t *m)
{
    m->previous_barrier = NULL;
    m->previous_barrier_module = NULL;
    m->previous_ibarrier = NULL;
    m->previous_ibarrier_module = NULL;
    m->state = UNBUILT;
    m->rs = NULL;
}

static void module_destruct(fastbar_module_t *m)
{
    if (m->rs) {
        fastbar_rs_free(m->rs);
        m->rs = NULL;
    }
    if (m->previous_barrier_module) {
        OBJ_RELEASE(m->previous_barrier_module);
    }
    if (m->previous_ibarrier_module) {
        OBJ_RELEASE(m->previous_ibarrier_module);
    }
}

OBJ_CLASS_DECLARATION(fastbar_module_t);
OBJ_CLASS_INSTANCE(fastbar_module_t, mca_coll_base_module_t, module_construct, module_destruct);

/* Set while this thread builds a barrier: any barrier this thread calls then (on the
 * communicators the Rust side makes for itself: its private duplicate, the node's and the roots'
 * communicators) is the previous module's, so nothing comes back here. The same calls are made
 * on every rank, so every rank agrees. */
static __thread int building = 0;

static void finish_earlier(fastbar_module_t *m);

/* The component's MCA values, as the Rust side reads them. */
static struct fastbar_mca_values mca_values(void)
{
    const struct fastbar_mca_values values = {param_device_path, param_backend,    param_timeout,
                                              param_wait_policy, param_stall_report, param_verbose,
                                              param_node_block,  param_disable,      param_min_comm_size};
    return values;
}

/* The first MPI_Barrier of a communicator builds its barrier on every rank (collective). */
static void build(fastbar_module_t *m, struct ompi_communicator_t *comm)
{
    const struct fastbar_mca_values values = mca_values();
    building++;
    int served = fastbar_rs_create(comm, &values, &m->rs);
    building--;
    m->state = served ? SERVED : DECLINED;
}

static int fastbar_barrier(struct ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    fastbar_module_t *m = (fastbar_module_t *) module;
    if (OPAL_UNLIKELY(building)) {
        /* A communicator of the build itself (or any, while this thread builds): never ours. */
        return m->previous_barrier(comm, m->previous_barrier_module);
    }
    if (OPAL_UNLIKELY(UNBUILT == m->state)) {
        build(m, comm);
    }
    if (OPAL_LIKELY(SERVED == m->state)) {
        int outcome = fastbar_rs_barrier(m->rs);
        if (OPAL_UNLIKELY(FASTBAR_BUILD == outcome)) {
            /* Built in the background no further (the ranks span several nodes): as a first
             * MPI_Barrier, on every rank at this call. */
            fastbar_rs_free(m->rs);
            m->rs = NULL;
            build(m, comm);
            outcome = SERVED == m->state ? fastbar_rs_barrier(m->rs) : FASTBAR_PREVIOUS;
        }
        switch (outcome) {
        case FASTBAR_DONE:
            finish_earlier(m);
            return MPI_SUCCESS;
        case FASTBAR_FAILED:
            return MPI_ERR_OTHER;
        default: /* gone at MPI_Finalize, or still building in the background */
            break;
        }
    }
    return m->previous_barrier(comm, m->previous_barrier_module);
}

/* ---- split-phase requests ----------------------------------------------------------------- */

typedef struct fastbar_request_t {
    ompi_request_t super;
    fastbar_module_t *module;
    fastbar_rs_req *rs;
    struct fastbar_request_t *next;
    bool freed; /* MPI_Request_free'd before it completed: released when it completes */
    /* Retained while the request lives: MPI lets a program free the communicator first, and an
     * error is raised through the communicator's handler. */
    struct ompi_communicator_t *comm;
} fastbar_request_t;

static void request_construct(fastbar_request_t *r)
{
    r->module = NULL;
    r->rs = NULL;
    r->next = NULL;
    r->freed = false;
    r->comm = NULL;
}

static void request_destruct(fastbar_request_t *r)
{
    OMPI_REQUEST_FINI(&r->super);
    if (r->comm) {
        OBJ_RELEASE(r->comm);
    }
}

OBJ_CLASS_DECLARATION(fastbar_request_t);
OBJ_CLASS_INSTANCE(fastbar_request_t, ompi_request_t, request_construct, request_destruct);

/* Requests not complete yet, advanced by `fastbar_progress`, in the order they started. The
 * flag guards the list; a thread that finds it taken in the progress callback leaves the round
 * to the thread that holds it. */
static fastbar_request_t *in_flight = NULL;
static atomic_flag in_flight_lock = ATOMIC_FLAG_INIT;
static atomic_int in_flight_count = 0;
static atomic_int progress_registered = 0;
/* Barriers building in the background (fastbar_rs_start), advanced by the progress callback: a
 * start counter in the high half, how many are still building in the low half. A start adds one
 * to both, so that a progress round that counted before it (another thread's) cannot write its
 * count over it. */
static _Atomic uint64_t builds = 0;
#define BUILDS_STARTED_ONE ((uint64_t) 1 << 32)

static int fastbar_progress(void);

static void register_progress(void)
{
    if (0 == atomic_exchange(&progress_registered, 1)) {
        opal_progress_register(fastbar_progress);
    }
}

static void list_lock(void)
{
    while (atomic_flag_test_and_set_explicit(&in_flight_lock, memory_order_acquire)) {
        sched_yield();
    }
}

static void list_unlock(void)
{
    atomic_flag_clear_explicit(&in_flight_lock, memory_order_release);
}

/* Takes `*link` off the list onto `done` (the list lock is held); `complete_all` completes
 * them after the lock is released, since completing can run callbacks and free a module. */
static void unlink_to(fastbar_request_t **link, int outcome, fastbar_request_t **done)
{
    fastbar_request_t *r = *link;
    *link = r->next;
    atomic_fetch_sub_explicit(&in_flight_count, 1, memory_order_release);
    r->super.req_status.MPI_ERROR = FASTBAR_DONE == outcome ? MPI_SUCCESS : MPI_ERR_OTHER;
    r->next = *done;
    *done = r;
}

static int complete_all(fastbar_request_t *done)
{
    int n = 0;
    while (done) {
        fastbar_request_t *r = done;
        done = r->next;
        fastbar_rs_request_free(r->rs);
        r->rs = NULL;
        fastbar_module_t *m = r->module;
        r->module = NULL;
        /* Read before completing: once complete, MPI_Wait may free it. A freed request was
         * MPI_Request_free'd while active and is released here. */
        list_lock();
        bool freed = r->freed;
        r->freed = false;
        if (!freed) {
            ompi_request_complete(&r->super, true);
        }
        list_unlock();
        if (freed) {
            r->super.req_complete = REQUEST_COMPLETED;
            OBJ_RELEASE(r);
        }
        OBJ_RELEASE(m);
        n++;
    }
    return n;
}

/* Registered with opal_progress: MPI_Wait, MPI_Test and every other call that progresses MPI
 * advance our requests, without blocking. Entered again from inside the Rust side (whose waits
 * progress MPI), it finds the list or that communicator busy and leaves them for a later round. */
static int fastbar_progress(void)
{
    uint64_t seen = atomic_load_explicit(&builds, memory_order_relaxed);
    if (OPAL_UNLIKELY((uint32_t) seen > 0)) {
        int left = fastbar_rs_advance_all();
        /* Only if no build started meanwhile (another thread's first MPI_Ibarrier): its count
         * must not be lost, or progress would stop advancing it. */
        if (left >= 0) {
            uint64_t now = (seen & ~(uint64_t) UINT32_MAX) | (uint32_t) left;
            atomic_compare_exchange_strong(&builds, &seen, now);
        }
    }
    if (0 == atomic_load_explicit(&in_flight_count, memory_order_acquire)) {
        return 0;
    }
    if (atomic_flag_test_and_set_explicit(&in_flight_lock, memory_order_acquire)) {
        return 0;
    }
    fastbar_request_t *done = NULL;
    fastbar_request_t **link = &in_flight;
    while (*link) {
        int outcome = fastbar_rs_test((*link)->module->rs, (*link)->rs, opal_progress_yield_when_idle);
        if (FASTBAR_PENDING == outcome) {
            link = &(*link)->next;
        } else {
            unlink_to(link, outcome, &done);
        }
    }
    list_unlock();
    return complete_all(done);
}

/* A blocking barrier completed every split-phase barrier started before it on the communicator
 * (barrier-mpi's order): their requests complete now, freed ones included. Those of other
 * communicators are looked at once too: a request the program freed (on a communicator it may
 * have freed as well) is found complete by progress alone, and a program whose later barriers
 * are all ours might otherwise never make the progress call that finds it (issue 50 item 6). */
static void finish_earlier(fastbar_module_t *m)
{
    if (0 == atomic_load_explicit(&in_flight_count, memory_order_acquire)) {
        return;
    }
    fastbar_request_t *done = NULL;
    list_lock();
    fastbar_request_t **link = &in_flight;
    while (*link) {
        if ((*link)->module == m) {
            unlink_to(link, FASTBAR_DONE, &done);
        } else {
            link = &(*link)->next;
        }
    }
    list_unlock();
    complete_all(done);
    fastbar_progress();
}

/* MPI_Finalize begins (the Rust side's finalize hook calls this before it frees every barrier):
 * requests still in flight are advanced until they complete, for up to a second, so that one
 * that completed everywhere is not reported pending; what is left then is. */
void fastbar_drain_in_flight(void)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (atomic_load_explicit(&in_flight_count, memory_order_acquire) > 0) {
        opal_progress();
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) > 1000000000L) {
            break;
        }
        sched_yield();
    }
}

static int request_free(struct ompi_request_t **request)
{
    fastbar_request_t *r = (fastbar_request_t *) *request;
    list_lock();
    bool release = REQUEST_COMPLETE(&r->super);
    if (!release) {
        /* MPI lets a program free an active request: it completes later, unseen. */
        r->freed = true;
    }
    list_unlock();
    if (release) {
        OBJ_RELEASE(r);
    }
    *request = MPI_REQUEST_NULL;
    return OMPI_SUCCESS;
}

static int request_cancel(struct ompi_request_t *request, int complete)
{
    (void) request;
    (void) complete;
    /* A barrier cannot be cancelled (MPI says cancelling a collective is erroneous). */
    return OMPI_SUCCESS;
}

static int fastbar_ibarrier(struct ompi_communicator_t *comm, ompi_request_t **request,
                            mca_coll_base_module_t *module)
{
    fastbar_module_t *m = (fastbar_module_t *) module;
    if (OPAL_UNLIKELY(building)) {
        return m->previous_ibarrier(comm, request, m->previous_ibarrier_module);
    }
    if (OPAL_UNLIKELY(UNBUILT == m->state)) {
        /* MPI_Ibarrier must not block, and building is collective: the first one starts the
         * build in the background (every rank makes the same barrier calls in the same order,
         * so every rank starts it in this call); the previous module serves until every rank
         * switches, at the same call. */
        const struct fastbar_mca_values values = mca_values();
        building++;
        int started = fastbar_rs_start(comm, &values, &m->rs);
        building--;
        m->state = started ? SERVED : DECLINED;
        if (started) {
            atomic_fetch_add_explicit(&builds, BUILDS_STARTED_ONE + 1, memory_order_relaxed);
            register_progress();
        }
    }
    if (SERVED != m->state) {
        return m->previous_ibarrier(comm, request, m->previous_ibarrier_module);
    }
    fastbar_rs_req *started = NULL;
    int outcome = fastbar_rs_ibarrier(m->rs, &started);
    if (FASTBAR_GONE == outcome || FASTBAR_PREVIOUS == outcome) {
        return m->previous_ibarrier(comm, request, m->previous_ibarrier_module);
    }
    if (FASTBAR_DONE != outcome) {
        return MPI_ERR_OTHER;
    }
    fastbar_request_t *r = OBJ_NEW(fastbar_request_t);
    if (NULL == r) {
        fastbar_rs_request_free(started);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    OMPI_REQUEST_INIT(&r->super, false);
    /* A failed request's error goes to its communicator's handler only for the PML type in
     * Open MPI 4.1 (ompi_errhandler_request_invoke sends every other type, COLL included, to
     * MPI_COMM_WORLD's; 5.0 treats both alike): PML, so that an MPI_Ibarrier of ours fails as
     * the blocking barrier does, through the communicator's handler. */
    r->super.req_type = OMPI_REQUEST_PML;
    r->super.req_state = OMPI_REQUEST_ACTIVE;
    r->super.req_mpi_object.comm = comm;
    r->super.req_status = ompi_status_empty;
    r->super.req_free = request_free;
    r->super.req_cancel = request_cancel;
    r->module = m;
    r->rs = started;
    r->freed = false;
    r->comm = comm;
    OBJ_RETAIN(comm);
    OBJ_RETAIN(m);
    register_progress();
    list_lock();
    /* Appended: the list keeps the order they started in. */
    fastbar_request_t **link = &in_flight;
    while (*link) {
        link = &(*link)->next;
    }
    r->next = NULL;
    *link = r;
    atomic_fetch_add_explicit(&in_flight_count, 1, memory_order_release);
    list_unlock();
    *request = &r->super;
    return OMPI_SUCCESS;
}

/* ---- the private channel of a barrier set up ahead across nodes (barrier-mpi's channel.rs) -- */

/* Reserves `count` tags on `comm` as Open MPI's non-blocking collectives reserve theirs (the
 * same steps as ompi_coll_base_nbc_reserve_tags, whose header needs Fortran headers Debian does
 * not ship), and returns the first (they go down from it): every rank that calls it in the same
 * collective call gets the same tags, and libnbc takes the next ones after them. */
int fastbar_reserve_tags(MPI_Comm comm, int count)
{
    int32_t tag, old;
    do {
        tag = old = comm->c_nbc_tag;
        if (tag - count < MCA_COLL_BASE_TAG_NONBLOCKING_END) {
            tag = MCA_COLL_BASE_TAG_NONBLOCKING_BASE;
        }
    } while (!__atomic_compare_exchange_n(&comm->c_nbc_tag, &old, tag - count, false, __ATOMIC_SEQ_CST,
                                          __ATOMIC_SEQ_CST));
    return tag;
}

/* Point-to-point on the PML with a reserved (negative) tag: no program's receive matches it,
 * MPI_ANY_TAG included. */
int fastbar_pml_isend(const uint64_t *buf, int words, int dest, int tag, MPI_Comm comm, MPI_Request *req)
{
    return MCA_PML_CALL(isend((void *) buf, (size_t) words, MPI_UINT64_T, dest, tag, MCA_PML_BASE_SEND_STANDARD,
                              comm, req));
}

int fastbar_pml_irecv(uint64_t *buf, int words, int source, int tag, MPI_Comm comm, MPI_Request *req)
{
    return MCA_PML_CALL(irecv(buf, (size_t) words, MPI_UINT64_T, source, tag, comm, req));
}

/* 1 when rank `rank` of `comm` runs on this machine, as Open MPI placed it. */
int fastbar_on_this_machine(MPI_Comm comm, int rank)
{
    ompi_proc_t *proc = ompi_comm_peer_lookup(comm, rank);
    return NULL != proc && OPAL_PROC_ON_LOCAL_NODE(proc->super.proc_flags);
}

/* ---- the component ------------------------------------------------------------------------ */

/* The info key that keeps one communicator on the previous module (the Rust side reads it at
 * the first MPI_Barrier). Open MPI keeps only the info keys somebody subscribed to, and stores
 * what this callback returns: the program's own value, and nothing where the program set none
 * (the subscription's default, "false", is the absence of the key: a communicator's info lists
 * no key of ours the program did not set). */
static const char *OPT_OUT_DEFAULT = "false";

static char *keep_info_value(opal_infosubscriber_t *object, char *key, char *value)
{
    (void) object;
    (void) key;
    if (NULL == value || value == OPT_OUT_DEFAULT) {
        return NULL;
    }
    return value;
}

static int fastbar_module_enable(mca_coll_base_module_t *module, struct ompi_communicator_t *comm)
{
    opal_infosubscribe_subscribe(&comm->super, "coll_fastbar_disable", (char *) OPT_OUT_DEFAULT, keep_info_value);
    fastbar_module_t *m = (fastbar_module_t *) module;
    /* The components below this one (lower priority) have filled the table already. */
    if (NULL == comm->c_coll->coll_barrier_module || NULL == comm->c_coll->coll_ibarrier_module) {
        return OMPI_ERROR;
    }
    m->previous_barrier = comm->c_coll->coll_barrier;
    m->previous_barrier_module = comm->c_coll->coll_barrier_module;
    OBJ_RETAIN(m->previous_barrier_module);
    m->previous_ibarrier = comm->c_coll->coll_ibarrier;
    m->previous_ibarrier_module = comm->c_coll->coll_ibarrier_module;
    OBJ_RETAIN(m->previous_ibarrier_module);
    return OMPI_SUCCESS;
}

/* The finalize hook: an MPI_COMM_SELF attribute, deleted first thing in MPI_Finalize while MPI
 * still works. MPI deletes MPI_COMM_SELF's attributes in the reverse order of their setting, so
 * ours is set at the first comm_query of an open component: MPI_COMM_WORLD's, inside MPI_Init,
 * before the program (or a library) can set one. Their callbacks then run first, with ours
 * still serving on every rank; set at a rank's first barrier, as it was, it ran before the
 * callbacks set earlier on that rank only, and a callback's barrier met ours on some ranks and
 * Open MPI's on others (issue 50 item 9). Through Open MPI's attribute functions: the MPI_
 * ones refuse to run before MPI_Init has returned. */
static int at_finalize(MPI_Comm comm, int key, void *value, void *extra)
{
    (void) comm;
    (void) key;
    (void) value;
    (void) extra;
    fastbar_rs_at_finalize();
    return MPI_SUCCESS;
}

static void hook_finalize(void)
{
    static atomic_int hooked;
    if (atomic_exchange(&hooked, 1)) {
        return;
    }
    ompi_attribute_fn_ptr_union_t copy, delete;
    copy.attr_communicator_copy_fn = (MPI_Comm_internal_copy_attr_function *) MPI_COMM_NULL_COPY_FN;
    delete.attr_communicator_delete_fn = at_finalize;
    int key = MPI_KEYVAL_INVALID;
    if (OMPI_SUCCESS != ompi_attr_create_keyval(COMM_ATTR, copy, delete, &key, NULL, 0, NULL)
        || OMPI_SUCCESS != ompi_attr_set_c(COMM_ATTR, &ompi_mpi_comm_self.comm,
                                           &ompi_mpi_comm_self.comm.c_keyhash, key, NULL, false)) {
        fprintf(stderr, "coll/fastbar: could not set the MPI_COMM_SELF attribute that frees the barriers at "
                        "MPI_Finalize; they are freed with their communicators\n");
    }
}

static mca_coll_base_module_t *fastbar_comm_query(struct ompi_communicator_t *comm, int *priority)
{
    /* `building` is not asked here: Open MPI may select for a communicator from inside another
     * thread's (or another communicator's) progress, so the answer would differ between ranks;
     * the module checks it when called instead. Neither are `disable` and `min_comm_size`: one
     * rank's could differ from another's, and a rank whose module is not here runs another
     * barrier while the others wait in ours; the first barrier agrees them instead (issue 50
     * item 2). A communicator of one rank has nobody to disagree with. */
    if (refused || param_priority <= 0) {
        return NULL;
    }
    /* Before the size test: MPI_COMM_SELF's query inside MPI_Init hooks a process whose world
     * has one rank too (its later communicators, after a spawn, are served). */
    hook_finalize();
    if (OMPI_COMM_IS_INTER(comm) || ompi_comm_size(comm) < 2) {
        return NULL;
    }
    fastbar_module_t *m = OBJ_NEW(fastbar_module_t);
    if (NULL == m) {
        return NULL;
    }
    m->super.coll_module_enable = fastbar_module_enable;
    m->super.coll_barrier = fastbar_barrier;
    m->super.coll_ibarrier = fastbar_ibarrier;
    *priority = param_priority;
    return &m->super;
}

static int fastbar_init_query(bool enable_progress_threads, bool enable_mpi_threads)
{
    (void) enable_progress_threads;
    (void) enable_mpi_threads;
    return OMPI_SUCCESS;
}

static int fastbar_close(void)
{
    if (atomic_exchange(&progress_registered, 0)) {
        opal_progress_unregister(fastbar_progress);
    }
    return OMPI_SUCCESS;
}

static const mca_coll_base_component_2_0_0_t fastbar_component_template = {
    .collm_version = {
        MCA_COLL_BASE_VERSION_2_0_0,
        .mca_component_name = "fastbar",
        MCA_BASE_MAKE_VERSION(component, OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION),
        .mca_open_component = fastbar_open,
        .mca_close_component = fastbar_close,
        .mca_register_component_params = register_params,
    },
    .collm_data = {
        MCA_BASE_METADATA_PARAM_CHECKPOINT
    },
    .collm_init_query = fastbar_init_query,
    .collm_comm_query = fastbar_comm_query,
};

/* Runs when the library is loaded (dlopen returns after it), before Open MPI reads the
 * component structure. */
__attribute__((constructor)) static void fill_component(void)
{
    memcpy(mca_coll_fastbar_component, &fastbar_component_template, sizeof fastbar_component_template);
}
