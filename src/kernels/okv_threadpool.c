/* okv_threadpool.c — a pool of persistent worker threads that runs one
 * parallel loop at a time (okv_threadpool_run).
 *
 * Why this shape: a decode step dispatches hundreds of small loops (one per
 * matmul / attention), so starting threads per loop is far too slow. Workers
 * sleep on a condition variable between loops; a new loop is announced by
 * bumping a generation counter. Tasks are handed out with an atomic counter
 * (dynamic scheduling: a fast thread takes more tasks), and the calling
 * thread works too as thread 0. Before sleeping, a worker spins briefly on
 * the generation, because the next loop usually follows within microseconds;
 * the spin is short so idle workers don't steal a shared 2-core machine.
 * With one thread (or tp == NULL) everything runs inline. Loops from
 * different caller threads are serialised (run_mu); a task must not start a
 * loop on its own pool (it would wait for itself). The pool also carries the
 * kernels' workspace: scratch memory its owner planned once (the runtime:
 * in the activation arena), so kernels run on the pool need not allocate. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "okv_kernels.h"

#define OKV_TP_SPIN 400 /* polls before sleeping (~20 us: a pause is ~50 ns here) */

struct okv_threadpool {
    int n_threads;            /* including the caller (thread 0) */
    pthread_t *workers;       /* [n_threads - 1] */
    pthread_mutex_t run_mu;   /* one loop at a time */
    pthread_mutex_t mu;
    pthread_cond_t wake;      /* a new loop was posted (or shutdown) */
    pthread_cond_t done;      /* the last worker finished the loop */
    atomic_uint generation;   /* bumped once per posted loop */
    bool shutdown;
    /* the loop in flight */
    okv_task_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next_task;
    atomic_int busy_workers;  /* workers still inside the loop */
    /* scratch the pool's owner planned for the kernels run on it */
    void *workspace;
    size_t workspace_bytes;
    uint64_t dispatches;      /* loops posted to the workers (caller side only) */
};

typedef struct worker_arg {
    okv_threadpool *tp;
    int index;
} worker_arg;

/* Takes tasks from the shared counter until none are left. */
static void run_tasks(okv_threadpool *tp, int thread) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&tp->next_task, 1, memory_order_relaxed);
        if (t >= tp->n_tasks) break;
        tp->fn(tp->ctx, t, thread);
    }
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits until the generation differs from seen; returns the new one. */
static unsigned wait_for_loop(okv_threadpool *tp, unsigned seen) {
    for (int i = 0; i < OKV_TP_SPIN; i++) {
        unsigned g = atomic_load_explicit(&tp->generation, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
    }
    pthread_mutex_lock(&tp->mu);
    unsigned g;
    while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen && !tp->shutdown)
        pthread_cond_wait(&tp->wake, &tp->mu);
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
        pthread_mutex_lock(&tp->mu);
        bool stop = tp->shutdown;
        pthread_mutex_unlock(&tp->mu);
        if (stop) break;
        run_tasks(tp, index);
        if (atomic_fetch_sub_explicit(&tp->busy_workers, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&tp->mu); /* the caller may be asleep on done */
            pthread_cond_signal(&tp->done);
            pthread_mutex_unlock(&tp->mu);
        }
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
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->next_task, 0);
    atomic_init(&tp->busy_workers, 0);
    if (n_threads == 1) return tp;
    tp->workers = calloc((size_t)n_threads - 1, sizeof *tp->workers);
    if (!tp->workers) { free(tp); return NULL; }
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
        tp->shutdown = true;
        atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->mu);
        for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->workers[i - 1], NULL);
        pthread_mutex_destroy(&tp->mu);
        pthread_mutex_destroy(&tp->run_mu);
        pthread_cond_destroy(&tp->wake);
        pthread_cond_destroy(&tp->done);
    }
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

void okv_threadpool_run(okv_threadpool *tp, int n_tasks, okv_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!tp || tp->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&tp->run_mu);
    tp->dispatches++;
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_tasks = n_tasks;
    atomic_store_explicit(&tp->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->busy_workers, tp->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);

    run_tasks(tp, 0);

    /* spin a little for the workers, then sleep */
    bool finished = false;
    for (int i = 0; i < OKV_TP_SPIN && !finished; i++) {
        finished = atomic_load_explicit(&tp->busy_workers, memory_order_acquire) == 0;
        if (!finished) cpu_relax();
    }
    if (!finished) {
        pthread_mutex_lock(&tp->mu);
        while (atomic_load_explicit(&tp->busy_workers, memory_order_acquire) > 0)
            pthread_cond_wait(&tp->done, &tp->mu);
        pthread_mutex_unlock(&tp->mu);
    }
    pthread_mutex_unlock(&tp->run_mu);
}
