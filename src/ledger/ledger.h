/*
 * The ledger: a tenant's shared region (include/cushare/ledger.h is the ABI).
 *
 * This is the only code that maps, creates, validates, claims, charges and
 * reaps. Everything returns 0 or a negative errno; messages naming the file
 * and the fix are logged here, once, so callers only propagate the code.
 *
 * Creation is lock-free and crash-safe: the creator builds a complete file in
 * an unnamed temporary (O_TMPFILE, else a unique name) and links it into
 * place; whoever loses the link race opens the winner's file. A creator
 * killed halfway leaves nothing behind at the path.
 *
 * Threads: a struct cs_ledger is owned by one process. Its functions may be
 * called from any thread; the only shared mutable state is the mapping, which
 * is touched with atomics only.
 */
#ifndef CS_LEDGER_LEDGER_H
#define CS_LEDGER_LEDGER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cushare/ledger.h"

/* Which existing ledger a tenant accepts (docs/ledger.md, "Ownership").
 * OWNER: a regular file (no symlink) owned by our effective uid that
 * nobody else can write. DIRECTORY (CUSHARE_LEDGER_TRUST=directory): the
 * ledger's directory is private to the tenant (HAMi's per-container
 * mount), so any owner, mode and symlink is accepted and new ledgers are
 * made 0666 for every user of the container. */
enum cs_ledger_trust { CS_LEDGER_TRUST_OWNER = 0, CS_LEDGER_TRUST_DIRECTORY = 1 };

/* What the creator writes into a new ledger, and how a tenant trusts an
 * existing one. */
struct cs_ledger_params {
    uint32_t device_count;              /* devices named by a per-device setting (>= 1);
                                         * limit/sm_limit are read for every device */
    uint64_t limit[CS_MAX_DEVICES];     /* bytes, 0 = none */
    uint32_t sm_limit[CS_MAX_DEVICES];  /* percent, 0 = none */
    uint32_t policy;                    /* enum cs_policy */
    int32_t priority;
    uint32_t trust;                     /* enum cs_ledger_trust (not written) */
    bool authority;                     /* these limits come from the slice's
                                         * authority (the slice file): they win
                                         * over the file's (not written) */
};

struct cs_ledger_guard;

struct cs_ledger {
    int fd;                             /* owns the open file description */
    struct cs_ledger_header *hdr;       /* owns the MAP_SHARED mapping */
    size_t map_len;
    int slot;                           /* claimed slot index, -1 if none */
    pid_t owner_pid;                    /* getpid() of the process whose open
                                           file description fd is (set at open,
                                           claim, after_fork): detects fork */
    char path[4096];
    bool read_only;                     /* opened read-only (monitors) */
    bool created;                       /* this open created the file (won the
                                           link race) */
    bool tenant;                        /* opened with params: ownership checked,
                                           also when re-opened after fork */
    uint32_t trust;                     /* enum cs_ledger_trust, when tenant */
    struct cs_ledger_guard *guard;      /* SIGBUS guard of the mapping (guard.c),
                                           NULL when unguarded */
    bool pinned;                        /* limits below come from the slice's
                                           authority: set at open, read-only
                                           after; the header's are only shown */
    uint64_t pinned_limit[CS_MAX_DEVICES];
    uint32_t pinned_sm_limit[CS_MAX_DEVICES];
    uint32_t pinned_policy;
};

/* Opens `path`, creating it from `params` if it does not exist. An existing
 * ledger is validated (magic, version, sizes, file length): a mismatch is
 * -EPROTO (foreign/newer/corrupt; message names the file and the fix) and
 * the file is left untouched. A tenant (params given) also checks who can
 * have written it (params->trust): a symlink is -ELOOP, another owner or
 * a file others can write -EPERM, each with one message. If the existing limits differ from `params`,
 * the creator's limits win and a warning names both values; but params
 * from the slice's authority (params->authority: the slice file) always
 * win: they are kept in `out` (pinned) and written back over the header
 * (docs/security.md, "Limits"). Only a call
 * with `params` and !read_only creates; `params` NULL opens an existing
 * ledger (read-only for monitors, read-write for run_request writers).
 * The descriptor is O_CLOEXEC; the file is created mode 0600 in an
 * existing directory. out->created tells whether this call created it. */
/* The limits this process enforces: the slice's (pinned) when it has an
 * authority, else the ledger's. 0 = none. */
uint32_t cs__ledger_sm_limit(const struct cs_ledger *l, int dev);
uint32_t cs__ledger_policy(const struct cs_ledger *l);

int cs__ledger_open(const char *path, const struct cs_ledger_params *params,
                    bool read_only, struct cs_ledger *out);

/* Unmaps and closes; drops the slot lock with it (the slot itself is freed
 * by cs__ledger_leave first when the process exits normally). */
void cs__ledger_close(struct cs_ledger *l);

/* Claims a slot: takes its OFD lock, reaps it first if a dead process left
 * it LIVE, marks it LIVE with our pid. No global lock; O(1) expected.
 * 0 (also when already claimed), -ENOSPC when every slot is held, -EBADF
 * read-only or closed, -ECHILD in a fork child before after_fork. */
int cs__ledger_claim(struct cs_ledger *l);

/* Normal exit: returns this slot's bytes and marks it FREE. Idempotent. */
void cs__ledger_leave(struct cs_ledger *l);

/* In a fork child, with one thread: the ledger code's own locks (slot.c,
 * guard.c) are free again. The library's one fork handler calls it (a
 * child may re-run a first initialisation that a parent thread held them
 * in); cs__ledger_after_fork calls it too. */
void cs__ledger_atfork_child(void);

/* In a fork child: forgets the parent's slot without touching it (the
 * parent still owns it) and re-opens the file so the child gets its own
 * open file description, hence its own locks. Then claim again. The caller
 * may already have closed the inherited descriptor (fd = -1, e.g. in an
 * atfork handler): the path is then opened and validated again. */
int cs__ledger_after_fork(struct cs_ledger *l);

/* Admission: atomically charges `bytes` on `dev` if used + bytes <= limit
 * (no limit: always). One attempt: -ENOMEM when over budget, and nothing
 * is charged then (src/account reaps and retries before a refusal
 * stands). -EOVERFLOW, -EINVAL (bad dev/cat), -ENOTCONN (no slot),
 * -ECHILD (fork child before after_fork). */
int cs__ledger_charge(struct cs_ledger *l, int dev, enum cs_mem_category cat,
                      uint64_t bytes);

/* Uncharges what a charge charged. Never underflows (clamps, logs). */
void cs__ledger_uncharge(struct cs_ledger *l, int dev, enum cs_mem_category cat,
                         uint64_t bytes);

/* Reaps every dead slot (lock free, state LIVE), then heals the aggregates
 * (returns what dead processes left charged beyond their slots) unless
 * another process of the tenant is healing right now. Never waits for
 * another process. Returns how many slots it reaped, or -errno. Claims do
 * the same by themselves when no other process is healing; views, refused
 * admissions and `cushare status` call this. docs/ledger.md, "Reaping" and
 * "Healing". */
int cs__ledger_reap(struct cs_ledger *l);

/* Read helpers for views and monitors. */
uint64_t cs__ledger_used(const struct cs_ledger *l, int dev);
/* Bytes our own slot holds on `dev`, every category (0 without a slot). */
uint64_t cs__ledger_my_device_bytes(const struct cs_ledger *l, int dev);
/* The smallest nonzero `cat` charge on `dev` of a LIVE slot other than
 * ours, or 0: a size hint from the tenant's other processes (the context
 * estimate), never an admission figure. */
uint64_t cs__ledger_min_peer_charge(const struct cs_ledger *l, int dev,
                                    enum cs_mem_category cat);
uint64_t cs__ledger_limit(const struct cs_ledger *l, int dev);
/* The tenant's compute clock of `dev` (header dev[dev].pace_vt_ns, an
 * atomic the limiter's law advances; docs/limiter.md). l must be open. */
int64_t *cs__ledger_pace_clock(const struct cs_ledger *l, int dev);
struct cs_ledger_slot *cs__ledger_slot(const struct cs_ledger *l, int idx);
struct cs_ledger_slot *cs__ledger_my_slot(const struct cs_ledger *l);

/* True when slot `idx` is LIVE and its owner is alive (lock held). */
bool cs__ledger_slot_alive(const struct cs_ledger *l, int idx);

/* Publishes what the driver says about device `dev` once known (after
 * cuInit): its UUID, first writer wins (uuid_state 0 -> 1 -> 2; a later
 * process seeing a different UUID for the same index gets a warning), and
 * its physical total. -EINVAL for a bad index, -EBADF if read-only. */
int cs__ledger_set_device_info(struct cs_ledger *l, int dev, const uint8_t uuid[16],
                               uint64_t physical_total);

/* Records in our slot how NVML identifies this process (host_pid 0 =
 * unknown; tier enum cs_identity_tier; reason an errno-style code of the
 * last fallback). -ENOTCONN without a slot. */
int cs__ledger_set_identity(struct cs_ledger *l, int32_t host_pid, uint32_t tier,
                            uint32_t reason);

/* Private ledgers (src/ledger/sweep.c; docs/ledger.md, "Private ledgers").
 *
 * params_from_config: the parameters a creator writes, from a parsed
 * configuration (the library and `cushare run` create alike).
 * keep: takes a shared lock on the keep byte, so that no sweep removes the
 * file while this open file description lives, then checks the path still
 * names our file. 0; -EAGAIN (a remover holds the byte) or -ESTALE (the
 * name is gone): make another file.
 * remove_if_unused: unlinks the path if it names our file and nobody else
 * keeps it or holds a slot in it; true if it did.
 * unname: unlinks the path (if it still names our file) once fork children
 * can reach the file through /proc/self/fd; 0, or -errno and the name
 * stays (no /proc).
 * reopen_fd: a new open file description of what fd is open on, through
 * /proc/self/fd (O_CLOEXEC added); async-signal-safe; -1 with errno.
 * sweep: removes every unused file of dir whose name is prefix followed by
 * pid/clock digits (and maybe ".ledger") and that the caller's uid owns;
 * returns how many, or -errno. */
struct cs_config;
void cs__ledger_params_from_config(const struct cs_config *c, struct cs_ledger_params *p);
int cs__ledger_keep(struct cs_ledger *l);
bool cs__ledger_remove_if_unused(struct cs_ledger *l);
int cs__ledger_unname(struct cs_ledger *l);
int cs__ledger_reopen_fd(int fd, int flags);
int cs__ledger_sweep(const char *dir, const char *prefix);

/* Names from the X-macro lists of the ABI ("data", "nvml-namespace"), or
 * "?" when out of range (a newer writer). */
const char *cs__ledger_category_name(int cat);
const char *cs__ledger_identity_name(uint32_t tier);

/* A ledger damaged in use (guard.c, docs/ledger.md): truncated (SIGBUS in
 * its mapping) or its header overwritten. Its mapping is then private,
 * keeps the limits and shows every budget as used; every charge, claim and
 * reap answers -ENOTRECOVERABLE, uncharges are ignored. usable() checks the
 * header and loses the mapping (one error message) when it is damaged. */
bool cs__ledger_usable(const struct cs_ledger *l);
struct cs_ledger_guard *cs__ledger_guard_add(void *base, size_t len, const char *path);
/* The same guard for a shared mapping that is not a ledger (the node
 * board's launch stamps): a fault in it turns it into private zeros and
 * writes `msg` (one line, no newline) the first time. Its slots are not
 * the ledgers'. NULL when none is free: then the caller must not keep a
 * shared mapping that a truncation could fault. */
struct cs_ledger_guard *cs__ledger_guard_add_plain(void *base, size_t len, const char *msg);
/* Whether g's mapping was replaced (zeros) and no replacement is under
 * way: its owner may map the file over it again (MAP_FIXED, same range)
 * and then rearm g, which guards the new mapping from then on; a fault in
 * between finds g still replaced and is retried until the rearm. */
bool cs__ledger_guard_replaced(const struct cs_ledger_guard *g);
void cs__ledger_guard_rearm(struct cs_ledger_guard *g);
void cs__ledger_guard_remove(struct cs_ledger_guard *g);
bool cs__ledger_guard_lost(const struct cs_ledger_guard *g);
void cs__ledger_guard_atfork_child(void);

/* Test hooks, all off (zero) in production. before_link runs in the creator
 * once the complete temporary file exists and before it is linked at the
 * path (tests pause or kill the creator there); force_named_temp skips
 * O_TMPFILE to exercise the named-temporary fallback. */
struct cs_ledger_test_hooks {
    void (*before_link)(void);
    bool force_named_temp;
};
extern struct cs_ledger_test_hooks cs__ledger_test_hooks;

/* Private to src/ledger. slots_atfork_child resets the per-process state of
 * the slot code in a fork child (called by cs__ledger_after_fork);
 * sub_clamped atomically subtracts up to v from *p, never below zero, and
 * returns what it subtracted. */
void cs__ledger_slots_atfork_child(void);
void cs__ledger_shares_atfork_child(void);
uint64_t cs__ledger_sub_clamped(uint64_t *p, uint64_t v);

/* Private to src/ledger: the announce protocol (docs/ledger.md,
 * "Healing"). The owner of slot s announces `bytes` on `dev` before it
 * changes dev[dev].used or s->bytes[dev][*] and withdraws them after both
 * changes. return_bytes is such a bracketed return of up to `bytes` of
 * category cat: slot first, aggregate second; it returns what the slot
 * held (and, if wanted, what the aggregate gave up). */
void cs__ledger_announce(struct cs_ledger_slot *s, int dev, uint64_t bytes);
void cs__ledger_withdraw(struct cs_ledger_slot *s, int dev, uint64_t bytes);
uint64_t cs__ledger_uncharge_slot(struct cs_ledger *l, struct cs_ledger_slot *s, int dev, int cat,
                                  uint64_t bytes, uint64_t *from_aggregate);

/* Shares (share.c; docs/ledger.md, "Shares"): device memory that several
 * processes of the tenant hold (VMM exports, legacy IPC). A share's bytes
 * are counted in dev[].used and in no slot, and stay until no process
 * holds the share, however the holders end. Each process holds a share at
 * most once (its caller counts its own references) through an OFD read
 * lock on CS_LEDGER_SHARE_LOCK(j).
 *
 * share_make: a new share identified by key, held by us, into which
 * `bytes` of category cat that our slot holds on dev move (from_slot), or
 * that carries nothing yet (another tenant pays: standing by): its index,
 * -ENOSPC (no free share: the charge stays in our slot), or the usual
 * errors.
 * share_adopt: share j (held by us, carrying nothing) takes the charge of
 * its bytes over, whatever the limit: 0, -EALREADY, -ENOENT.
 * share_add_key: one more identity of share j (a second export); the
 * oldest is replaced when all are used.
 * share_join: holds the LIVE share carrying key; its index with *dev and
 * *bytes, or -ENOENT, or -ESTALE when the share was freed while we came
 * (its last holder let go after our import: *dev and *bytes say what our
 * import alone now holds).
 * share_leave: drops our hold of j; if nobody else holds it, frees it and
 * returns its bytes to dev[].used.
 * share_sweep: frees every share nobody holds (its holders died); called
 * with the reap. Returns how many. */
int cs__ledger_share_make(struct cs_ledger *l, uint64_t key, int dev, enum cs_mem_category cat,
                          uint64_t bytes, bool from_slot);
int cs__ledger_share_adopt(struct cs_ledger *l, int j);
int cs__ledger_share_add_key(struct cs_ledger *l, int j, uint64_t key);
int cs__ledger_share_join(struct cs_ledger *l, uint64_t key, int *dev, uint64_t *bytes);
/* The LIVE share carrying key, held or not: its index or -ENOENT. */
int cs__ledger_share_find(const struct cs_ledger *l, uint64_t key);
void cs__ledger_share_leave(struct cs_ledger *l, int j);
int cs__ledger_share_sweep(struct cs_ledger *l);
struct cs_ledger_share *cs__ledger_share(const struct cs_ledger *l, int j);

/* Payer files (payer.c; docs/accounting.md, "Across tenants"): one per
 * allocation shared across tenants, in `dir` ("" = CS_NODE_DIR), saying
 * through OFD locks whether a tenant pays for it.
 * open: the file of key (created with *dev, *bytes when create; else
 * read into them), held standing by: its descriptor, or -ENOENT (nobody
 * published it), -EPERM (not ours), -EPROTO, -errno.
 * unpaid: no process holds it paying. pay: we do now (our share carries
 * the bytes). elect: 0 when we may take the charge over (then adopt and
 * call elected), -EAGAIN when somebody pays or is taking it over.
 * close: lets go; removes the file when nobody holds it any more. */
int cs__payer_open(const char *dir, uint64_t key, bool create, int *dev, uint64_t *bytes);
bool cs__payer_unpaid(int fd);
int cs__payer_pay(int fd);
int cs__payer_elect(int fd);
void cs__payer_elected(int fd);
void cs__payer_close(const char *dir, uint64_t key, int fd);
/* In a fork child, before it closes its copies of payer descriptors:
 * it vouches for none (POSIX locks are not inherited). */
void cs__payer_atfork_child(void);

/* Private to src/ledger: one OFD lock operation on byte `byte` of the
 * ledger file: 0, -EAGAIN (held by another description) or -errno. */
int cs__ledger_lock_byte(const struct cs_ledger *l, uint64_t byte, int cmd, short type);

/* Private to src/ledger (heal.c): returns to each device's aggregate what
 * no slot holds or has in flight. The caller holds the tenant's heal lock
 * (CS_LEDGER_HEAL_LOCK, so no other process heals) and this process's slot
 * mutex (so no other thread does). Gives up, changing nothing, while the
 * tenant's slots keep changing under its scan. Returns bytes returned. */
uint64_t cs__ledger_heal(struct cs_ledger *l);

#endif
