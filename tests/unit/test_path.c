/*
 * cs__path_dir (src/core/path.c): the parent directory and last component
 * of the paths ledgers, the board, the broker socket and the CLI use.
 */
#include <stdio.h>

#include "check.h"
#include "core/path.h"

static void expect(const char *path, const char *dir, const char *base)
{
    char d[64];
    const char *b = NULL;
    cs__path_dir(path, d, sizeof d, &b);
    CHECK_STREQ(d, dir);
    CHECK_STREQ(b, base);
}

int main(void)
{
    expect("/tmp/vgpulock/cushare-board", "/tmp/vgpulock", "cushare-board");
    expect("/board", "/", "board");
    expect("relative.ledger", ".", "relative.ledger");
    expect("a/b", "a", "b");
    expect("/run/dir/", "/run/dir", "");
    char small[4];
    cs__path_dir("/long/dir/x", small, sizeof small, NULL); /* truncated, terminated */
    CHECK_STREQ(small, "/lo");
    printf("paths split at their last slash\n");
    return 0;
}
