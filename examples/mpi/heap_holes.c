/* heap_holes.c: does our library's set-up leave holes in the program's heap?
 *
 * ISx (the integer sort) ran 1.7x slower with the interposer or the coll component loaded. Every
 * iteration it takes three 4 MB buffers from the heap and two small blocks between them that it
 * never frees; the first iteration's free of its mmapped buffers set glibc's trim threshold to
 * 8 MB. Run plainly, the small blocks are carved from the top of the heap, above a buffer, and
 * pin it; with holes lower down (blocks freed earlier), they land in the holes, nothing pins,
 * and glibc gives the 12 MB back to the kernel every iteration and faults it in again. Our
 * set-up, which runs in the first barrier, left such holes: blocks of its own, and MPI's, freed
 * on its behalf when it freed the communicators it made on the way.
 *
 * This program wraps malloc and free (its own definitions come first for every library) and
 * counts, during its first MPI_Barrier, the blocks freed and not handed out again before the
 * barrier returns: the holes that barrier left. The test runs it with MPI's own barrier and with
 * ours and requires no more holes with ours. It prints, per rank: "heap_holes: rank R: H holes
 * (F freed, of them O by our library) in the first barrier".
 *
 *   mpicc -O2 -o heap_holes heap_holes.c && mpirun -np 2 ./heap_holes
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

/* The addresses freed during the first barrier and not yet handed out again: an open-addressing
 * set (no allocation of its own). */
#define SLOTS 65536
static uintptr_t freed[SLOTS];
static int counting;
/* The thread that counts: MPI's own threads (progress, PMIx) allocate at any time, and only this
 * thread's barrier is being measured. */
static pthread_t counter;
static long frees, ours;

static size_t slot_of(uintptr_t p) { return (size_t)((p >> 4) * 0x9e3779b97f4a7c15ull >> 48) & (SLOTS - 1); }

static void remember(uintptr_t p) {
    for (size_t i = slot_of(p), n = 0; n < SLOTS; i = (i + 1) & (SLOTS - 1), n++) {
        if (freed[i] == p) return;
        if (freed[i] == 0 || freed[i] == 1) {
            freed[i] = p;
            return;
        }
    }
}

static void forget(uintptr_t p) {
    for (size_t i = slot_of(p), n = 0; n < SLOTS && freed[i] != 0; i = (i + 1) & (SLOTS - 1), n++) {
        if (freed[i] == p) {
            freed[i] = 1; /* a tombstone */
            return;
        }
    }
}

/* Whether `caller` is code of our library (the interposer or a component), by its file's name. */
static int by_our_library(void *caller) {
    Dl_info info;
    if (!dladdr(caller, &info) || !info.dli_fname) return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    return strstr(base, "barrier") || strstr(base, "fastbar");
}

static int counted(void) { return counting && pthread_equal(pthread_self(), counter); }

static void *got(void *p) {
    if (p && counted()) forget((uintptr_t)p);
    return p;
}

void *malloc(size_t n) { return got(__libc_malloc(n)); }
void *calloc(size_t a, size_t b) { return got(__libc_calloc(a, b)); }
void *memalign(size_t a, size_t n) { return got(__libc_memalign(a, n)); }
void *aligned_alloc(size_t a, size_t n) { return got(__libc_memalign(a, n)); }
int posix_memalign(void **out, size_t a, size_t n) {
    void *p = __libc_memalign(a, n);
    if (!p) return 12; /* ENOMEM */
    *out = got(p);
    return 0;
}
void free(void *p) {
    if (p && counted()) {
        frees++;
        if (by_our_library(__builtin_return_address(0))) ours++;
        remember((uintptr_t)p);
    }
    __libc_free(p);
}
void *realloc(void *p, size_t n) {
    void *q = __libc_realloc(p, n);
    if (p && q != p && counted()) {
        frees++;
        if (by_our_library(__builtin_return_address(0))) ours++;
        remember((uintptr_t)p);
    }
    return got(q);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* Resolve dladdr's own needs before counting. */
    by_our_library((void *)main);
    counter = pthread_self();
    counting = 1;
    MPI_Barrier(MPI_COMM_WORLD);
    counting = 0;
    long holes = 0;
    for (size_t i = 0; i < SLOTS; i++) holes += freed[i] > 1;
    printf("heap_holes: rank %d: %ld holes (%ld freed, of them %ld by our library) in the first barrier\n", rank,
           holes, frees, ours);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
