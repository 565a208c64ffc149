/* Tests the thread pool: every task runs exactly once with a thread index in
 * range, for many tasks, fewer tasks than threads, repeated loops on one pool
 * and create/free cycles (run under ASan/valgrind to catch leaks and races). */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "okv_threadpool.h"
#include "okv_test.h"

typedef struct count_ctx {
    atomic_int *hits;      /* [n_tasks] times each task ran */
    atomic_int bad_thread; /* tasks that saw a thread index out of range */
    int size;
} count_ctx;

static void count_task(void *p, int task, int thread) {
    count_ctx *c = p;
    atomic_fetch_add(&c->hits[task], 1);
    if (thread < 0 || thread >= c->size) atomic_fetch_add(&c->bad_thread, 1);
}

/* Runs n_tasks tasks on tp and checks each ran exactly once. */
static void check_run(okv_threadpool *tp, int n_tasks) {
    atomic_int *hits = calloc((size_t)n_tasks + 1, sizeof *hits);
    count_ctx c = {hits, 0, okv_threadpool_size(tp)};
    okv_threadpool_run(tp, n_tasks, count_task, &c);
    int wrong = 0;
    for (int i = 0; i < n_tasks; i++) wrong += atomic_load(&hits[i]) != 1;
    CHECKF(wrong == 0, "%d of %d tasks did not run exactly once (pool of %d)", wrong, n_tasks, c.size);
    CHECK(atomic_load(&c.bad_thread) == 0);
    free(hits);
}

/* Each task adds its index to the slot of its thread: the sum over threads
 * must be the sum of task indices, whatever the split. */
typedef struct sum_ctx {
    long long per_thread[8][8]; /* padded so threads don't share a line */
} sum_ctx;

static void sum_task(void *p, int task, int thread) {
    sum_ctx *c = p;
    c->per_thread[thread][0] += task;
}

static void test_sizes(void) {
    okv_threadpool *tp1 = okv_threadpool_create(1);
    okv_threadpool *tp2 = okv_threadpool_create(2);
    okv_threadpool *tp4 = okv_threadpool_create(4); /* more threads than cores */
    okv_threadpool *tpa = okv_threadpool_create(0);
    CHECK(tp1 && tp2 && tp4 && tpa);
    CHECK(okv_threadpool_size(tp1) == 1);
    CHECK(okv_threadpool_size(tp2) == 2);
    CHECK(okv_threadpool_size(tp4) == 4);
    CHECK(okv_threadpool_size(tpa) >= 1);
    CHECK(okv_threadpool_size(NULL) == 1);
    okv_threadpool *pools[] = {tp1, tp2, tp4, tpa, NULL};
    for (int p = 0; p < 5; p++) {
        check_run(pools[p], 0);
        check_run(pools[p], 1);
        check_run(pools[p], 3);   /* fewer tasks than threads for tp4 */
        check_run(pools[p], 1000);
    }
    okv_threadpool_free(tp1);
    okv_threadpool_free(tp2);
    okv_threadpool_free(tp4);
    okv_threadpool_free(tpa);
    okv_threadpool_free(NULL);
}

static void test_repeated(void) {
    okv_threadpool *tp = okv_threadpool_create(2);
    int bad = 0;
    for (int rep = 0; rep < 2000; rep++) {
        sum_ctx c = {{{0}}};
        int n = 1 + rep % 17;
        okv_threadpool_run(tp, n, sum_task, &c);
        long long s = c.per_thread[0][0] + c.per_thread[1][0];
        if (s != (long long)n * (n - 1) / 2) bad++;
    }
    CHECKF(bad == 0, "%d of 2000 loops lost or repeated tasks", bad);
    okv_threadpool_free(tp);
}

static void test_create_free_cycles(void) {
    int ok = 1;
    for (int i = 0; i < 50; i++) {
        okv_threadpool *tp = okv_threadpool_create(1 + i % 3);
        if (!tp) { ok = 0; break; }
        if (i % 2) check_run(tp, 7); /* half of them never run a loop */
        okv_threadpool_free(tp);
    }
    CHECK(ok);
}

/* Two caller threads share one pool: their loops must not mix. */
typedef struct caller_arg {
    okv_threadpool *tp;
    int bad;
} caller_arg;

static void *caller_main(void *p) {
    caller_arg *c = p;
    for (int rep = 0; rep < 300; rep++) {
        enum { n = 64 };
        atomic_int hits[n];
        for (int i = 0; i < n; i++) atomic_init(&hits[i], 0);
        count_ctx ctx = {hits, 0, okv_threadpool_size(c->tp)};
        okv_threadpool_run(c->tp, n, count_task, &ctx);
        for (int i = 0; i < n; i++) c->bad += atomic_load(&hits[i]) != 1;
    }
    return NULL;
}

static void test_concurrent_callers(void) {
    okv_threadpool *tp = okv_threadpool_create(2);
    caller_arg a = {tp, 0}, b = {tp, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, caller_main, &a);
    pthread_create(&tb, NULL, caller_main, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECKF(a.bad + b.bad == 0, "%d tasks lost or repeated with two callers", a.bad + b.bad);
    okv_threadpool_free(tp);
}

/* Workers that are slow to wake or slow in a task (here: sleeping inside
 * every task a worker takes, and gaps after which workers have gone to
 * sleep) while the caller finishes loops alone and posts the next ones: no
 * task is lost, repeated, or run with the wrong loop's context, and every
 * loop's tasks are done when run returns. */
typedef struct late_ctx {
    atomic_int hits[9];
    atomic_int stale; /* a task that ran after its loop returned */
    atomic_int finished;
} late_ctx;

static void late_task(void *p, int task, int thread) {
    late_ctx *c = p;
    if (thread != 0) usleep((useconds_t)(50 + 37 * task % 200));
    if (atomic_load(&c->finished)) atomic_fetch_add(&c->stale, 1);
    atomic_fetch_add(&c->hits[task], 1);
}

static void test_late_workers(void) {
    okv_threadpool *tp = okv_threadpool_create(3);
    int bad = 0, stale = 0;
    for (int rep = 0; rep < 300; rep++) {
        late_ctx *c = calloc(1, sizeof *c);
        int n = 1 + rep % 9;
        if (rep % 50 == 0) usleep(2000); /* past the workers' spin: they sleep */
        okv_threadpool_run(tp, n, late_task, c);
        atomic_store(&c->finished, 1);
        for (int i = 0; i < n; i++) bad += atomic_load(&c->hits[i]) != 1;
        for (int i = n; i < 9; i++) bad += atomic_load(&c->hits[i]) != 0;
        stale += atomic_load(&c->stale);
        free(c); /* a task still running on it would be caught by ASan */
    }
    CHECKF(bad == 0, "%d tasks lost or repeated with slow workers", bad);
    CHECKF(stale == 0, "%d tasks ran after their loop returned", stale);
    okv_threadpool_free(tp);
}

/* More tasks than one loop word holds (2^20 - 1): run as several loops,
 * each task index exactly once. */
static void test_many_tasks(void) {
    okv_threadpool *tp = okv_threadpool_create(2);
    check_run(tp, (1 << 20) + 5);
    okv_threadpool_free(tp);
}

int main(void) {
    test_sizes();
    test_late_workers();
    test_many_tasks();
    test_repeated();
    test_create_free_cycles();
    test_concurrent_callers();
    return okv_test_finish();
}
