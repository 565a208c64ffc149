/* okv_cache_registry.c — the process-wide table binding cache keys to kv
 * sets, so a runtime can bind programs to caches by name.
 *
 * One mutex guards a singly linked list of entries (few keys, looked up once
 * per binding, so a list is enough). Each entry counts the references handed
 * out by okv_registry_acquire. Removing a key unlinks it from lookups at once
 * (the key can be installed again) but the kv set itself is freed only when
 * its last reference is released, so a runner holding it is never left with
 * a dangling pointer. kv sets are built and freed outside the lock. */
#include <stdlib.h>

#include "okv_cache_internal.h"
#include "okv_common.h"

typedef struct registry_entry {
    char *key;
    okv_kv *kv;
    int refs;          /* references held by acquirers */
    bool removed;      /* key removed: invisible to lookups, freed at refs == 0 */
    struct registry_entry *next;
} registry_entry;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static registry_entry *registry_head;

/* The live (not removed) entry for key, or NULL. Caller holds the lock. */
static registry_entry *find_key(const char *key) {
    for (registry_entry *e = registry_head; e; e = e->next)
        if (!e->removed && strcmp(e->key, key) == 0) return e;
    return NULL;
}

/* Unlinks e from the list. Caller holds the lock. */
static void unlink_entry(registry_entry *e) {
    registry_entry **pp = &registry_head;
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
}

static void free_entry(registry_entry *e) {
    okv_kv_free(e->kv);
    free(e->key);
    free(e);
}

okv_status okv_registry_install(const char *key, const okv_layout *layout, const okv_kv_options *opt, okv_error *err) {
    if (!key || !*key) return okv_fail(err, OKV_ERR_INVALID, "cache registry: empty key");
    registry_entry *e = calloc(1, sizeof *e);
    if (!e) return okv_fail(err, OKV_ERR_NOMEM, "cache registry: out of memory");
    e->key = okv_strdup(key);
    if (!e->key) {
        free(e);
        return okv_fail(err, OKV_ERR_NOMEM, "cache registry: out of memory");
    }
    okv_status st = okv_kv_create(layout, opt, &e->kv, err);
    if (st != OKV_OK) {
        okv_fail_prefix(err, "cache key \"%s\"", key);
        free_entry(e);
        return st;
    }
    pthread_mutex_lock(&registry_lock);
    bool taken = find_key(key) != NULL;
    if (!taken) {
        e->next = registry_head;
        registry_head = e;
    }
    pthread_mutex_unlock(&registry_lock);
    if (taken) {
        free_entry(e);
        return okv_fail(err, OKV_ERR_INVALID, "cache registry: key \"%s\" is already installed", key);
    }
    return OKV_OK;
}

okv_status okv_registry_acquire(const char *key, okv_kv **out, okv_error *err) {
    *out = NULL;
    if (!key) return okv_fail(err, OKV_ERR_INVALID, "cache registry: no key");
    pthread_mutex_lock(&registry_lock);
    registry_entry *e = find_key(key);
    if (e) {
        e->refs++;
        *out = e->kv;
    }
    pthread_mutex_unlock(&registry_lock);
    if (!e) return okv_fail(err, OKV_ERR_NOT_FOUND, "cache registry: no cache under key \"%s\"", key);
    return OKV_OK;
}

void okv_registry_release(okv_kv *kv) {
    if (!kv) return;
    registry_entry *dead = NULL;
    pthread_mutex_lock(&registry_lock);
    for (registry_entry *e = registry_head; e; e = e->next) {
        if (e->kv != kv || e->refs == 0) continue;
        e->refs--;
        if (e->refs == 0 && e->removed) {
            unlink_entry(e);
            dead = e;
        }
        break;
    }
    pthread_mutex_unlock(&registry_lock);
    if (dead) free_entry(dead);
}

okv_status okv_registry_remove(const char *key, okv_error *err) {
    if (!key) return okv_fail(err, OKV_ERR_INVALID, "cache registry: no key");
    registry_entry *dead = NULL;
    pthread_mutex_lock(&registry_lock);
    registry_entry *e = find_key(key);
    if (e) {
        e->removed = true;
        if (e->refs == 0) {
            unlink_entry(e);
            dead = e;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (!e) return okv_fail(err, OKV_ERR_NOT_FOUND, "cache registry: no cache under key \"%s\"", key);
    if (dead) free_entry(dead);
    return OKV_OK;
}

int okv_registry_count(void) {
    int n = 0;
    pthread_mutex_lock(&registry_lock);
    for (registry_entry *e = registry_head; e; e = e->next) n += !e->removed;
    pthread_mutex_unlock(&registry_lock);
    return n;
}
