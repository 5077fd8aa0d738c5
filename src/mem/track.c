#include "mem/track.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#define STRIPES 64

struct node {
    struct node *next;
    uint64_t key;
    enum cs_track_kind kind;
    struct cs_tracked t;
};

/* Each stripe's mutex guards its list; nodes are owned by the list. */
static struct stripe {
    pthread_mutex_t lock;
    struct node *head;
} stripes[STRIPES] = {[0 ... STRIPES - 1] = {PTHREAD_MUTEX_INITIALIZER, NULL}};

static struct stripe *stripe_of(enum cs_track_kind kind, uint64_t key)
{
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9e3779b97f4a7c15ull;
    return &stripes[h >> 58];
}

static struct node **find(struct stripe *s, enum cs_track_kind kind, uint64_t key)
{
    struct node **pp = &s->head;
    while (*pp && ((*pp)->key != key || (*pp)->kind != kind))
        pp = &(*pp)->next;
    return pp;
}

int cs__track_put(enum cs_track_kind kind, uint64_t key, const struct cs_tracked *t)
{
    struct node *n = malloc(sizeof *n);
    if (!n)
        return -ENOMEM;
    n->key = key;
    n->kind = kind;
    n->t = *t;
    struct stripe *s = stripe_of(kind, key);
    pthread_mutex_lock(&s->lock);
    struct node **pp = find(s, kind, key);
    struct node *old = *pp;
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
    struct node **pp = find(s, kind, key);
    struct node *n = *pp;
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
        for (struct node *n = stripes[i].head; n; n = n->next)
            if (n->kind == kind)
                fn(n->key, &n->t, ctx);
        pthread_mutex_unlock(&stripes[i].lock);
    }
}

void cs__track_reset(void)
{
    for (int i = 0; i < STRIPES; i++) {
        pthread_mutex_init(&stripes[i].lock, NULL);
        struct node *n = stripes[i].head;
        stripes[i].head = NULL;
        while (n) {
            struct node *next = n->next;
            free(n);
            n = next;
        }
    }
}
