/* okv_threadpool.c — a pool of persistent worker threads that runs one
 * parallel loop at a time (okv_threadpool_run).
 *
 * Why this shape: a decode step dispatches ~130 small loops (one per matmul
 * / attention; a Llama-3.2-1B step: 7 matmuls + 1 attention per layer + the
 * LM head), so starting threads per loop is far too slow. Workers sleep on
 * a condition variable between loops, after spinning briefly (the next loop
 * usually follows within microseconds; the spin is short so idle workers
 * don't steal a shared 2-core machine). The calling thread works too, as
 * thread 0. Tasks are claimed one at a time (dynamic: a fast thread takes
 * more) by a CAS on one word holding the loop's generation, task count and
 * next task, and the caller waits only for tasks a worker actually claimed:
 * a worker that has not woken up yet (asleep, or descheduled on a loaded
 * machine) is never waited for, the caller just runs the tasks itself.
 * (Before, the caller waited for every worker to check in, i.e. for a
 * futex wake-up and a time slice, per loop, even for loops it had finished
 * alone.) Loops alternate between two slots for fn/ctx so a late worker
 * never sees a half-written loop. With one thread (or tp == NULL)
 * everything runs inline. Loops from different caller threads are
 * serialised (run_mu); a task must not start a loop on its own pool (it
 * would wait for itself). The pool also carries the kernels' workspace:
 * scratch memory its owner planned once (the runtime: in the activation
 * arena), so kernels run on the pool need not allocate.
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (common/okv_threadpool.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "okv_threadpool.h"

#define OKV_TP_SPIN_NS 20000 /* how long a waiter polls before it sleeps (see the file head) */
#define OKV_TP_POLLS 16      /* pauses between clock reads (a vDSO clock read is ~20 ns) */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* After poll number i of a spin begun at t0: whether to stop spinning
 * (the clock read once per OKV_TP_POLLS polls). */
static inline bool spin_over(uint64_t t0, uint64_t i) {
    return i % OKV_TP_POLLS == 0 && now_ns() - t0 > OKV_TP_SPIN_NS;
}

/* The loop word: generation (24 bits) | n_tasks (20) | next task (20). A
 * task is claimed by a CAS that checks the generation and next < n_tasks in
 * one step, so a worker that wakes after its loop is over claims nothing
 * (and never a task of a later loop through a stale view). */
#define TP_TASK_BITS 20
#define TP_TASK_MASK ((1u << TP_TASK_BITS) - 1)
#define TP_MAX_TASKS TP_TASK_MASK
#define TP_GEN_MASK ((1u << 24) - 1)
static inline unsigned word_gen(uint64_t w) { return (unsigned)(w >> (2 * TP_TASK_BITS)) & TP_GEN_MASK; }
static inline int word_n(uint64_t w) { return (int)((w >> TP_TASK_BITS) & TP_TASK_MASK); }
static inline int word_next(uint64_t w) { return (int)(w & TP_TASK_MASK); }
static inline uint64_t word_pack(unsigned gen, int n) {
    return (uint64_t)(gen & TP_GEN_MASK) << (2 * TP_TASK_BITS) | (uint64_t)n << TP_TASK_BITS;
}

/* What one loop runs; loops alternate between two slots, so a loop's slot
 * stays intact while any of its claimed tasks runs. */
typedef struct tp_slot {
    okv_task_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int done;          /* tasks finished */
} tp_slot;

struct okv_threadpool {
    int n_threads;            /* including the caller (thread 0) */
    pthread_t *workers;       /* [n_threads - 1] */
    pthread_mutex_t run_mu;   /* one loop at a time */
    pthread_mutex_t mu;
    pthread_cond_t wake;      /* a new loop was posted (or shutdown) */
    pthread_cond_t done;      /* a worker finished a loop's last task */
    _Atomic uint64_t word;    /* see word_pack */
    atomic_int sleepers;      /* workers asleep (or about to be) on wake */
    atomic_bool shutdown;
    tp_slot slot[2];          /* loop g uses slot[g & 1] */
    /* scratch the pool's owner planned for the kernels run on it */
    void *workspace;
    size_t workspace_bytes;
    uint64_t dispatches;      /* loops posted to the workers (caller side only) */
    /* okv_threadpool_note's record: notes[slot][0 .. n_notes[slot]) */
    pthread_mutex_t note_mu;
    const char *notes[OKV_TP_NOTE_SLOTS][OKV_TP_NOTES];
    int n_notes[OKV_TP_NOTE_SLOTS];
};

typedef struct worker_arg {
    okv_threadpool *tp;
    int index;
} worker_arg;

/* Claims the next task of loop gen into *task; false when the loop has no
 * unclaimed task left (or is over). */
static bool claim_task(okv_threadpool *tp, unsigned gen, int *task) {
    uint64_t w = atomic_load_explicit(&tp->word, memory_order_acquire);
    while (word_gen(w) == gen && word_next(w) < word_n(w))
        if (atomic_compare_exchange_weak_explicit(&tp->word, &w, w + 1, memory_order_acq_rel, memory_order_acquire)) {
            *task = word_next(w);
            return true;
        }
    return false;
}

/* Runs tasks of loop gen until none are left unclaimed. A worker that
 * finishes the loop's last task wakes the caller if it sleeps. */
static void run_tasks(okv_threadpool *tp, unsigned gen, int thread) {
    tp_slot *sl = &tp->slot[gen & 1];
    int t;
    while (claim_task(tp, gen, &t)) {
        okv_task_fn fn = sl->fn;
        void *ctx = sl->ctx;
        int n = sl->n_tasks; /* read before our task counts as done: the slot may be reused after */
        fn(ctx, t, thread);
        if (atomic_fetch_add_explicit(&sl->done, 1, memory_order_acq_rel) + 1 == n && thread != 0) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits until the generation differs from seen; returns the new one. The
 * sleeper count and the word are both seq_cst, so either the poster sees
 * this worker counted as a sleeper (and broadcasts under mu) or this worker
 * sees the new word before it sleeps. */
static unsigned wait_for_loop(okv_threadpool *tp, unsigned seen) {
    for (uint64_t t0 = now_ns(), i = 1;; i++) {
        unsigned g = word_gen(atomic_load_explicit(&tp->word, memory_order_acquire));
        if (g != seen) return g;
        cpu_relax();
        if (spin_over(t0, i)) break;
    }
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add(&tp->sleepers, 1);
    unsigned g;
    while ((g = word_gen(atomic_load(&tp->word))) == seen && !atomic_load(&tp->shutdown))
        pthread_cond_wait(&tp->wake, &tp->mu);
    atomic_fetch_sub(&tp->sleepers, 1);
    pthread_mutex_unlock(&tp->mu);
    return g;
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    okv_threadpool *tp = wa->tp;
    int index = wa->index;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        seen = wait_for_loop(tp, seen);
        if (atomic_load(&tp->shutdown)) break;
        run_tasks(tp, seen, index);
    }
    return NULL;
}

okv_threadpool *okv_threadpool_create(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    okv_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n_threads = n_threads;
    atomic_init(&tp->word, 0);
    atomic_init(&tp->sleepers, 0);
    atomic_init(&tp->shutdown, false);
    for (int i = 0; i < 2; i++) atomic_init(&tp->slot[i].done, 0);
    pthread_mutex_init(&tp->note_mu, NULL);
    if (n_threads == 1) return tp;
    tp->workers = calloc((size_t)n_threads - 1, sizeof *tp->workers);
    if (!tp->workers) {
        pthread_mutex_destroy(&tp->note_mu);
        free(tp);
        return NULL;
    }
    pthread_mutex_init(&tp->run_mu, NULL);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->done, NULL);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) { wa->tp = tp; wa->index = i; }
        if (!wa || pthread_create(&tp->workers[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n_threads = i; /* keep the workers that started; free joins them */
            okv_threadpool_free(tp);
            return NULL;
        }
    }
    return tp;
}

void okv_threadpool_free(okv_threadpool *tp) {
    if (!tp) return;
    if (tp->n_threads > 1) {
        pthread_mutex_lock(&tp->mu);
        atomic_store(&tp->shutdown, true);
        atomic_store(&tp->word, word_pack(word_gen(atomic_load(&tp->word)) + 1, 0));
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->mu);
        for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->workers[i - 1], NULL);
        pthread_mutex_destroy(&tp->mu);
        pthread_mutex_destroy(&tp->run_mu);
        pthread_cond_destroy(&tp->wake);
        pthread_cond_destroy(&tp->done);
    }
    pthread_mutex_destroy(&tp->note_mu);
    free(tp->workers);
    free(tp);
}

int okv_threadpool_size(const okv_threadpool *tp) { return tp ? tp->n_threads : 1; }

uint64_t okv_threadpool_dispatches(okv_threadpool *tp) {
    if (!tp || tp->n_threads == 1) return 0;
    pthread_mutex_lock(&tp->run_mu);
    uint64_t n = tp->dispatches;
    pthread_mutex_unlock(&tp->run_mu);
    return n;
}

void okv_threadpool_set_workspace(okv_threadpool *tp, void *mem, size_t bytes) {
    if (!tp) return;
    tp->workspace = mem;
    tp->workspace_bytes = mem ? bytes : 0;
}

void *okv_threadpool_workspace(const okv_threadpool *tp, size_t bytes) {
    return tp && tp->workspace && bytes <= tp->workspace_bytes ? tp->workspace : NULL;
}

/* A loop of more tasks than the word holds runs as several loops. */
typedef struct tp_chunk { okv_task_fn fn; void *ctx; int base; } tp_chunk;
static void chunk_task(void *ctx, int task, int thread) {
    tp_chunk *c = ctx;
    c->fn(c->ctx, c->base + task, thread);
}

void okv_threadpool_run(okv_threadpool *tp, int n_tasks, okv_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!tp || tp->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    if (n_tasks > (int)TP_MAX_TASKS) {
        for (int base = 0; base < n_tasks; base += (int)TP_MAX_TASKS) {
            tp_chunk c = {fn, ctx, base};
            int n = n_tasks - base < (int)TP_MAX_TASKS ? n_tasks - base : (int)TP_MAX_TASKS;
            okv_threadpool_run(tp, n, chunk_task, &c);
        }
        return;
    }
    pthread_mutex_lock(&tp->run_mu);
    tp->dispatches++;
    unsigned gen = (word_gen(atomic_load_explicit(&tp->word, memory_order_relaxed)) + 1) & TP_GEN_MASK;
    tp_slot *sl = &tp->slot[gen & 1];
    sl->fn = fn;
    sl->ctx = ctx;
    sl->n_tasks = n_tasks;
    atomic_store_explicit(&sl->done, 0, memory_order_relaxed);
    atomic_store(&tp->word, word_pack(gen, n_tasks)); /* seq_cst: see wait_for_loop */
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->mu);
    }

    run_tasks(tp, gen, 0);

    /* wait only for tasks a worker claimed: a worker that has not woken yet
     * finds nothing left and is not waited for */
    bool finished = false;
    for (uint64_t t0 = now_ns(), i = 1; !finished; i++) {
        finished = atomic_load_explicit(&sl->done, memory_order_acquire) == n_tasks;
        if (!finished) cpu_relax();
        if (spin_over(t0, i)) break;
    }
    if (!finished) {
        pthread_mutex_lock(&tp->mu);
        while (atomic_load_explicit(&sl->done, memory_order_acquire) < n_tasks) pthread_cond_wait(&tp->done, &tp->mu);
        pthread_mutex_unlock(&tp->mu);
    }
    pthread_mutex_unlock(&tp->run_mu);
}

void okv_threadpool_note(okv_threadpool *tp, int slot, const char *s) {
    if (!tp || slot < 0 || slot >= OKV_TP_NOTE_SLOTS || !s) return;
    pthread_mutex_lock(&tp->note_mu);
    int n = tp->n_notes[slot], i = 0;
    while (i < n && tp->notes[slot][i] != s) i++;
    if (i == n && n < OKV_TP_NOTES) tp->notes[slot][tp->n_notes[slot]++] = s;
    pthread_mutex_unlock(&tp->note_mu);
}

int okv_threadpool_notes(const okv_threadpool *tp, int slot, const char **out, int max) {
    if (!tp || slot < 0 || slot >= OKV_TP_NOTE_SLOTS) return 0;
    okv_threadpool *m = (okv_threadpool *)tp; /* the mutex only */
    pthread_mutex_lock(&m->note_mu);
    int n = tp->n_notes[slot] < max ? tp->n_notes[slot] : max;
    for (int i = 0; i < n; i++) out[i] = tp->notes[slot][i];
    pthread_mutex_unlock(&m->note_mu);
    return n;
}
