/* okv_threadpool.h — the pool of worker threads the kernels (and the
 * export's quantizer) run their loops on, with the workspace its owner
 * plans for them. In src/common so every layer that runs loops reaches it
 * without seeing the kernels. */
#ifndef OKV_THREADPOOL_H
#define OKV_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct okv_threadpool okv_threadpool;
/* n_threads <= 0: number of online CPUs. n_threads == 1 runs inline. */
okv_threadpool *okv_threadpool_create(int n_threads);
void okv_threadpool_free(okv_threadpool *tp);
int okv_threadpool_size(const okv_threadpool *tp);
/* Loops handed to the workers so far (inline runs of one task or one
 * thread are not counted): what a step's dispatch overhead scales with. */
uint64_t okv_threadpool_dispatches(okv_threadpool *tp);
/* Calls fn(ctx, task, thread) for task in [0, n_tasks) spread over the
 * threads and returns when all are done. thread is in [0, size); the caller
 * runs tasks too, as thread 0. tp may be NULL (runs inline, size 1). Calls
 * from several threads are serialised; a task must not call run on its own
 * pool. */
typedef void (*okv_task_fn)(void *ctx, int task, int thread);
void okv_threadpool_run(okv_threadpool *tp, int n_tasks, okv_task_fn fn, void *ctx);
/* The kernels' workspace: scratch memory (64-byte aligned) the pool's owner
 * planned for every kernel it runs on this pool, sized with the
 * okv_*_scratch_bytes functions below; kernels take their scratch from it
 * instead of allocating (a step must not fail after admission). One kernel
 * call at a time uses it. mem == NULL detaches it. The pool does not own
 * mem. */
void okv_threadpool_set_workspace(okv_threadpool *tp, void *mem, size_t bytes);
/* The workspace if it has at least `bytes`, else NULL (none planned, or
 * planned too small: the kernel then allocates its own). */
void *okv_threadpool_workspace(const okv_threadpool *tp, size_t bytes);
/* A small record of static strings per slot (slot < OKV_TP_NOTE_SLOTS), kept
 * distinct in first-noted order, at most OKV_TP_NOTES each (later ones are
 * dropped): the kernel router notes which variant ran per op. tp NULL:
 * nothing. _notes copies up to max of slot's into out and returns their
 * number. */
enum { OKV_TP_NOTE_SLOTS = 4, OKV_TP_NOTES = 8 };
void okv_threadpool_note(okv_threadpool *tp, int slot, const char *s);
int okv_threadpool_notes(const okv_threadpool *tp, int slot, const char **out, int max);

#endif
