#ifndef CS_CORE_USERDIR_H
#define CS_CORE_USERDIR_H

#include <stddef.h>

/* The per-user directory `<base>/cushare-<uid>` that private ledgers and
 * benchmark runs live in: created 0700 if missing, and refused unless it
 * is a real directory (no symlink) owned by us with no group/other access.
 * Writes its path to out. 0, or -errno after one message naming the
 * directory and `who` ("run", "bench init", "init"). */
int cs__user_dir(const char *who, const char *base, char *out, size_t len);

#endif
