#ifndef CS_CORE_PATH_H
#define CS_CORE_PATH_H

#include <stddef.h>

/* Splits `path` at its last '/': writes the directory to dir ("." when
 * there is no slash, "/" for a file in the root) and points *base (when
 * not NULL) at the last component inside `path`. The one place that knows
 * how ledgers, the board, the broker socket and the CLI find a parent. */
void cs__path_dir(const char *path, char *dir, size_t dirsz, const char **base);

#endif
