#include "mem/track.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/fork.h"

#define STRIPES 64

/* A record in a stripe's list, or (taken out) in a batch. */
struct cs_track_node {
    struct cs_track_node *next;
    uint64_t key;
    enum cs_track_kind kind;
    struct cs_tracked t;
};

/* Each stripe's mutex guards its list; nodes are owned by the list. */
static struct stripe {
    pthread_mutex_t lock;
    struct cs_track_node *head;
} stripes[STRIPES] = {[0 ... STRIPES - 1] = {PTHREAD_MUTEX_INITIALIZER, NULL}};

static struct stripe *stripe_of(enum cs_track_kind kind, uint64_t key)
{
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9e3779b97f4a7c15ull;
    return &stripes[h >> 58];
}

static struct cs_track_node **find(struct stripe *s, enum cs_track_kind kind, uint64_t key)
{
    struct cs_track_node **pp = &s->head;
    while (*pp && ((*pp)->key != key || (*pp)->kind != kind))
        pp = &(*pp)->next;
    return pp;
}

int cs__track_put(enum cs_track_kind kind, uint64_t key, const struct cs_tracked *t)
{
    struct cs_track_node *n = malloc(sizeof *n);
    if (!n)
        return -ENOMEM;
    n->key = key;
    n->kind = kind;
    n->t = *t;
    struct stripe *s = stripe_of(kind, key);
    pthread_mutex_lock(&s->lock);
    struct cs_track_node **pp = find(s, kind, key);
    struct cs_track_node *old = *pp;
    if (old) {
        n->next = old->next;
        *pp = n;
    } else {
        n->next = s->head;
        s->head = n;
    }
    pthread_mutex_unlock(&s->lock);
    free(old);
    return 0;
}

static int lookup(enum cs_track_kind kind, uint64_t key, struct cs_tracked *out, int remove)
{
    struct stripe *s = stripe_of(kind, key);
    pthread_mutex_lock(&s->lock);
    struct cs_track_node **pp = find(s, kind, key);
    struct cs_track_node *n = *pp;
    if (n) {
        if (out)
            *out = n->t;
        if (remove)
            *pp = n->next;
    }
    pthread_mutex_unlock(&s->lock);
    if (n && remove)
        free(n);
    return n ? 0 : -ENOENT;
}

int cs__track_take(enum cs_track_kind kind, uint64_t key, struct cs_tracked *out)
{
    return lookup(kind, key, out, 1);
}

int cs__track_get(enum cs_track_kind kind, uint64_t key, struct cs_tracked *out)
{
    return lookup(kind, key, out, 0);
}

void cs__track_each(enum cs_track_kind kind, void (*fn)(uint64_t, struct cs_tracked *, void *),
                    void *ctx)
{
    for (int i = 0; i < STRIPES; i++) {
        pthread_mutex_lock(&stripes[i].lock);
        for (struct cs_track_node *n = stripes[i].head; n; n = n->next)
            if (n->kind == kind)
                fn(n->key, &n->t, ctx);
        pthread_mutex_unlock(&stripes[i].lock);
    }
}

/* What cuCtxDestroy frees with its context (cuda.h; the fake driver does
 * the same). Pools and VMM handles outlive every context of the process:
 * measured on the H200, driver 580.159.04. */
static bool context_owned(enum cs_track_kind kind)
{
    switch (kind) {
    case CS_TRACK_PTR:
    case CS_TRACK_ARRAY:
    case CS_TRACK_MIPMAP:
    case CS_TRACK_EXTMEM:
        return true;
    case CS_TRACK_VMM:
    case CS_TRACK_POOL:
        return false;
    }
    return false;
}

void cs__track_take_ctx(uint64_t ctx, struct cs_track_batch *out)
{
    out->head = NULL;
    if (!ctx)
        return;
    for (int i = 0; i < STRIPES; i++) {
        pthread_mutex_lock(&stripes[i].lock);
        for (struct cs_track_node **pp = &stripes[i].head; *pp;) {
            struct cs_track_node *n = *pp;
            if (n->t.ctx == ctx && context_owned(n->kind)) {
                *pp = n->next;
                n->next = out->head;
                out->head = n;
            } else {
                pp = &n->next;
            }
        }
        pthread_mutex_unlock(&stripes[i].lock);
    }
}

void cs__track_batch_each(const struct cs_track_batch *b,
                          void (*fn)(const struct cs_tracked *t, void *arg), void *arg)
{
    for (const struct cs_track_node *n = b->head; n; n = n->next)
        fn(&n->t, arg);
}

/* Re-inserts a node taken out earlier. A record stored under the same key
 * meanwhile is newer and wins. */
static void reinsert(struct cs_track_node *n)
{
    struct stripe *s = stripe_of(n->kind, n->key);
    pthread_mutex_lock(&s->lock);
    bool newer = *find(s, n->kind, n->key) != NULL;
    if (!newer) {
        n->next = s->head;
        s->head = n;
    }
    pthread_mutex_unlock(&s->lock);
    if (newer)
        free(n);
}

void cs__track_batch_restore(struct cs_track_batch *b)
{
    while (b->head) {
        struct cs_track_node *n = b->head;
        b->head = n->next;
        reinsert(n);
    }
}

static void free_list(struct cs_track_node *n)
{
    while (n) {
        struct cs_track_node *next = n->next;
        free(n);
        n = next;
    }
}

void cs__track_batch_free(struct cs_track_batch *b)
{
    free_list(b->head);
    b->head = NULL;
}

void cs__track_reset(void)
{
    for (int i = 0; i < STRIPES; i++) {
        cs__mutex_reset(&stripes[i].lock);
        free_list(stripes[i].head);
        stripes[i].head = NULL;
    }
}
