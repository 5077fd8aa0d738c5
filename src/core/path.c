#include "core/path.h"

#include <stdio.h>
#include <string.h>

void cs__path_dir(const char *path, char *dir, size_t dirsz, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, dirsz, ".");
    else if (slash == path)
        snprintf(dir, dirsz, "/");
    else
        snprintf(dir, dirsz, "%.*s", (int)(slash - path), path);
    if (base)
        *base = slash ? slash + 1 : path;
}
