/* test_registry.c — the process-wide cache registry: install/acquire/
 * release/remove, duplicate and unknown keys, a key removed while a runner
 * still holds its kv set (the set must stay usable until released), and
 * threads installing, acquiring, stepping and removing at once. Run under
 * ASan/TSan to catch races and use-after-free; the counts asserted here
 * (every step landed once, in order) catch lost mutual exclusion. */
#include <pthread.h>
#include <sched.h>

#include "okv_test.h"
#include "cache_test_util.h"

static void small_layout(okv_layout *l, int max_ctx) {
    int w[2] = { 0, 4 };
    make_layout(l, 2, w, 1, 1, 1, max_ctx);
}

static void test_basic(void) {
    okv_layout l;
    small_layout(&l, 64);
    okv_error err;
    okv_kv *a = NULL, *b = NULL;
    CHECK(okv_registry_count() == 0);
    CHECK_OK(okv_registry_install("a", &l, NULL, &err), &err);
    CHECK(okv_registry_count() == 1);
    CHECK(okv_registry_install("a", &l, NULL, &err) == OKV_ERR_INVALID && strstr(err.message, "\"a\""));
    CHECK(okv_registry_count() == 1);
    CHECK(okv_registry_install("", &l, NULL, &err) == OKV_ERR_INVALID);
    CHECK_OK(okv_registry_acquire("a", &a, &err), &err);
    CHECK_OK(okv_registry_acquire("a", &b, &err), &err);
    CHECK(a != NULL && a == b && a->n_caches == 2);
    CHECK(okv_registry_acquire("nope", &b, &err) == OKV_ERR_NOT_FOUND && b == NULL && strstr(err.message, "nope"));
    CHECK(okv_registry_remove("nope", &err) == OKV_ERR_NOT_FOUND);
    okv_registry_release(a);
    okv_registry_release(a);
    okv_registry_release(NULL);
    CHECK_OK(okv_registry_remove("a", &err), &err);
    CHECK(okv_registry_count() == 0);
    CHECK(okv_registry_acquire("a", &a, &err) == OKV_ERR_NOT_FOUND);
    CHECK(okv_registry_remove("a", &err) == OKV_ERR_NOT_FOUND);

    l.windows[1] = -1;   /* a bad layout: the error names the key */
    CHECK(okv_registry_install("bad", &l, NULL, &err) == OKV_ERR_INVALID);
    CHECK(strstr(err.message, "cache key \"bad\"") && strstr(err.message, "windows[1]"));
    CHECK(okv_registry_count() == 0);
    okv_layout_free(&l);
}

static void test_remove_while_held(void) {
    okv_layout l;
    small_layout(&l, 64);
    okv_error err;
    okv_kv *held, *fresh;
    CHECK_OK(okv_registry_install("m", &l, NULL, &err), &err);
    CHECK_OK(okv_registry_acquire("m", &held, &err), &err);
    CHECK_OK(okv_registry_remove("m", &err), &err);
    CHECK(okv_registry_count() == 0);
    CHECK(okv_registry_acquire("m", &fresh, &err) == OKV_ERR_NOT_FOUND);
    /* the holder keeps stepping on its set (ASan would flag a freed one) */
    int32_t pos = 0;
    CHECK_OK(okv_kv_begin_step(held, &pos, 1, &err), &err);
    ((float *)held->caches[0].k)[0] = 3.5f;
    okv_kv_commit_step(held);
    CHECK(okv_kv_length(held) == 1);
    /* the key can be reused at once; it names a new set */
    CHECK_OK(okv_registry_install("m", &l, NULL, &err), &err);
    CHECK_OK(okv_registry_acquire("m", &fresh, &err), &err);
    CHECK(fresh != held && okv_kv_length(fresh) == 0);
    okv_registry_release(held);   /* frees the old set */
    okv_registry_release(fresh);
    CHECK(okv_registry_count() == 1);
    CHECK_OK(okv_registry_remove("m", &err), &err);
    CHECK(okv_registry_count() == 0);
    okv_layout_free(&l);
}

#define N_THREADS 4
#define STEPS_PER_THREAD 150

typedef struct worker {
    int id;
    const okv_layout *layout;
    int done_steps, retries, churn_acquired, errors;
} worker;

/* Takes STEPS_PER_THREAD one-token steps on the shared set, each writing its
 * id at its position, retrying when another thread got there first; between
 * steps, churns a key that every thread installs, acquires and removes. */
static void *worker_main(void *arg) {
    worker *w = arg;
    okv_error err;
    char own[32];
    snprintf(own, sizeof own, "own-%d", w->id);
    while (w->done_steps < STEPS_PER_THREAD) {
        okv_kv *kv;
        if (okv_registry_acquire("shared", &kv, &err) != OKV_OK) { w->errors++; break; }
        int32_t pos = okv_kv_length(kv);
        okv_status st = okv_kv_begin_step(kv, &pos, 1, &err);
        if (st == OKV_OK) {
            ((float *)kv->caches[0].k)[kv->plans[0].write[0].slot] = (float)(w->id + 1);
            sched_yield();   /* the graph runs: let others try to step meanwhile */
            okv_kv_commit_step(kv);
            w->done_steps++;
        } else if (st == OKV_ERR_STATE || st == OKV_ERR_INVALID) {
            w->retries++;   /* someone else's step was in flight or landed first */
        } else {
            w->errors++;
        }
        okv_registry_release(kv);

        okv_status s1 = okv_registry_install("churn", w->layout, NULL, &err);
        if (s1 != OKV_OK && s1 != OKV_ERR_INVALID) w->errors++;
        okv_kv *c;
        if (okv_registry_acquire("churn", &c, &err) == OKV_OK) {
            w->churn_acquired++;
            int32_t p0 = 0;
            if (okv_kv_begin_step(c, &p0, 1, &err) == OKV_OK) okv_kv_commit_step(c);
            if (c->n_caches != 2) w->errors++;
            sched_yield();
            okv_registry_release(c);
        }
        okv_status s2 = okv_registry_remove("churn", &err);
        if (s2 != OKV_OK && s2 != OKV_ERR_NOT_FOUND) w->errors++;
        if (okv_registry_install(own, w->layout, NULL, &err) != OKV_OK) w->errors++;
        if (okv_registry_remove(own, &err) != OKV_OK) w->errors++;
    }
    return NULL;
}

static void test_threads(void) {
    okv_layout l;
    small_layout(&l, 4096);
    okv_error err;
    CHECK_OK(okv_registry_install("shared", &l, NULL, &err), &err);
    pthread_t th[N_THREADS];
    worker w[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (worker){ .id = i, .layout = &l };
        CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0);
    }
    int retries = 0, churn = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECKF(w[i].errors == 0 && w[i].done_steps == STEPS_PER_THREAD, "thread %d: %d errors, %d steps", i,
               w[i].errors, w[i].done_steps);
        retries += w[i].retries;
        churn += w[i].churn_acquired;
    }
    okv_kv *kv;
    CHECK_OK(okv_registry_acquire("shared", &kv, &err), &err);
    if (kv) {
        /* every step landed exactly once: the length is the sum and every
         * position holds the id of exactly one thread */
        CHECK(okv_kv_length(kv) == N_THREADS * STEPS_PER_THREAD);
        int per[N_THREADS] = { 0 };
        bool valid = true;
        for (int p = 0; p < N_THREADS * STEPS_PER_THREAD; p++) {
            int id = (int)((float *)kv->caches[0].k)[p] - 1;
            if (id < 0 || id >= N_THREADS) valid = false;
            else per[id]++;
        }
        CHECK(valid);
        for (int i = 0; i < N_THREADS; i++) CHECK(per[i] == STEPS_PER_THREAD);
        okv_registry_release(kv);
    }
    printf("threads: %d retries, %d churn acquisitions\n", retries, churn);
    CHECK(okv_registry_count() == 1);   /* churn and own keys all removed by their last remover */
    CHECK_OK(okv_registry_remove("shared", &err), &err);
    CHECK(okv_registry_count() == 0);
    okv_layout_free(&l);
}

int main(void) {
    test_basic();
    test_remove_while_held();
    test_threads();
    return okv_test_finish();
}
