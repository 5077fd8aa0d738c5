/* Private to src/node: the registry file format helpers shared by the
 * writer (registry.c) and the reader (discover.c). */
#ifndef CS_NODE_INTERNAL_H
#define CS_NODE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "node/node.h"

uint32_t cs__reg_check(const struct cs_reg_record *r);
bool cs__reg_record_intact(const struct cs_reg_record *r);
void cs__reg_init_header(struct cs_reg_header *h, uint32_t uid);
bool cs__reg_header_ok(const struct cs_reg_header *h, uint32_t uid);
off_t cs__reg_offset(unsigned i);
/* The node directory `dir`, checked as the board's (root's or ours,
 * sticky if others may write); created 1777 one level when `create`.
 * A descriptor or -errno (-EPERM: refused). */
int cs__node_open_dir(const char *dir, bool create);

#endif
