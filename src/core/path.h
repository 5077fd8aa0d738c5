#ifndef CS_CORE_PATH_H
#define CS_CORE_PATH_H

#include <stddef.h>
#include <sys/stat.h>

/* The node-wide directory HAMi's device plugin mounts into every container
 * (world-writable and sticky, like /tmp): the node board and the broker's
 * socket directory live in it. Whoever creates it makes it 1777. */
#define CS_NODE_DIR "/tmp/vgpulock"
#define CS_NODE_DIR_MODE 01777

/* Splits `path` at its last '/': writes the directory to dir ("." when
 * there is no slash, "/" for a file in the root) and points *base (when
 * not NULL) at the last component inside `path`. The one place that knows
 * how ledgers, the board, the broker socket and the CLI find a parent. */
void cs__path_dir(const char *path, char *dir, size_t dirsz, const char **base);

/* Opens a node-wide directory (the board's, the share directory),
 * creating it one level deep, 1777 like /tmp, if it is missing (the mode
 * set on the descriptor, never left to the umask). A symlink is -ELOOP.
 * Returns an O_DIRECTORY descriptor or -errno. */
int cs__node_dir_open(const char *dir);

/* Whether a directory every user writes may hold our shared files: owned
 * by root or by us (its owner could remove or replace any file in it) and,
 * when others may write it, sticky (else anyone could). 0 when trusted,
 * -EPERM for the owner, -EACCES for the missing sticky bit. */
int cs__node_dir_trust(const struct stat *st);

#endif
