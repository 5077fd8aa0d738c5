#ifndef CS_CORE_POD_H
#define CS_CORE_POD_H

/*
 * Pods: where every container runs as root with the node directory
 * mounted in (Kubernetes' common case), a uid says nothing about who wrote
 * a shared file. What a container cannot fake is what the kernel says
 * about a process: the POSIX locks it holds (/proc/locks and F_GETLK name
 * the holder's pid, as the reader's pid namespace sees it) and the mount
 * namespace it lives in (/proc/<pid>/ns/mnt). A pod here is a mount
 * namespace; a shared file speaks for a pod only while a process of that
 * pod holds a POSIX lock on the file's vouch byte (docs/security.md,
 * "Kubernetes: every pod is root").
 */
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* This process's pod (the inode of its mount namespace); 0 if /proc does
 * not say. Read once. */
uint64_t cs_pod_self(void);

/* The pod of process pid as this process sees it; 0 when it cannot tell
 * (pid 0: a holder in a pid namespace we cannot see; no such process;
 * no right to look). */
uint64_t cs_pod_of(pid_t pid);

/* One line of /proc/locks that holds a lock (not a waiter). */
struct cs_lock_line {
    bool posix;          /* a POSIX (fcntl, per process) lock */
    bool write;          /* WRITE, else READ */
    pid_t pid;           /* the holder, 0 when not visible to the reader */
    unsigned major, minor;
    uint64_t ino;
    uint64_t start, end; /* inclusive; end UINT64_MAX for EOF */
};

/* Parses one line of /proc/locks; false for a waiter ("->") or a line it
 * does not understand. Pure. */
bool cs_lock_line_parse(const char *line, struct cs_lock_line *out);

/* Whether a process of `pod` holds a POSIX lock that covers `byte` of the
 * file open at fd. Asks F_GETLK first (the usual holder), then reads
 * /proc/locks (bounded) so that a stranger's lock on the same byte cannot
 * hide the pod's own. False when it cannot tell. */
bool cs_pod_vouches(int fd, uint64_t byte, uint64_t pod);

/* Who vouches for a file claiming to be `pod`'s, as far as this process
 * can see: a process of the pod (CS_VOUCH_POD); only processes whose pid
 * namespace we cannot see (CS_VOUCH_UNSEEN: some pod, which one we cannot
 * tell); only visible processes of other pods (CS_VOUCH_OTHER: a file
 * made to pass for the pod's); nobody (CS_VOUCH_NONE). */
enum cs_vouch { CS_VOUCH_NONE, CS_VOUCH_OTHER, CS_VOUCH_UNSEEN, CS_VOUCH_POD };
enum cs_vouch cs_pod_vouch_state(int fd, uint64_t byte, uint64_t pod);

/* Takes (type F_RDLCK or F_WRLCK) or drops (F_UNLCK) this process's POSIX
 * vouch on `byte` of fd, without waiting. 0 or -errno. */
int cs_pod_vouch(int fd, uint64_t byte, short type);

/* Our pod's file `name` in dirfd, open at fd, vouched for by this
 * process: when a stranger holds a write lock on the vouch byte (to make
 * the file look like nobody's, or another pod's), the file is replaced by
 * a fresh one (O_TMPFILE, vouched, then linked at the name), as share
 * markers are published (src/mem/vmm_fdid.c). Returns the descriptor to
 * use (fd, or the new one, fd closed), or -errno (fd closed). */
int cs_pod_claim(int dirfd, const char *name, int fd, uint64_t byte);

#endif
