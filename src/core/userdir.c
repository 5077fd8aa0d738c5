#include "core/userdir.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

int cs__user_dir(const char *who, const char *base, char *out, size_t len)
{
    if ((size_t)snprintf(out, len, "%s/cushare-%u", base, (unsigned)getuid()) >= len) {
        cs_err(who, "%s/cushare-%u: path too long", base, (unsigned)getuid());
        return -ENAMETOOLONG;
    }
    if (mkdir(out, 0700) && errno != EEXIST) {
        int e = errno;
        cs_err(who, "cannot create %s: %s", out, strerror(e));
        return -e;
    }
    struct stat st;
    if (lstat(out, &st) || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
        cs_err(who, "%s must be a directory owned by uid %u with mode 0700", out,
               (unsigned)getuid());
        return -EPERM;
    }
    return 0;
}
