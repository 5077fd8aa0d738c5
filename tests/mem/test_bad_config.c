/*
 * A malformed knob fails CUDA initialisation (fail closed) with one clear
 * message naming the variable and the fix; the program itself goes on.
 * CS_EXPECT lists, '|'-separated, what that message must contain
 * (tests/mem.cmake runs one case per knob).
 */
#include "mem_test.h"

/* Lines of `buf` that contain `s`. */
static int count_lines(const char *buf, const char *s)
{
    int n = 0;
    for (const char *line = buf; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *hit = strstr(line, s);
        if (hit && hit < line + len)
            n++;
        line = end ? end + 1 : NULL;
    }
    return n;
}

int main(void)
{
    const char *expect = getenv("CS_EXPECT");
    CHECK(expect != NULL);
    int err[2];
    CHECK_EQ(pipe(err), 0);
    int saved = dup(2);
    dup2(err[1], 2);
    CUresult r = cuInit(0);
    CUresult r2 = cuInit(0);
    fflush(stderr);
    dup2(saved, 2);
    close(err[1]);
    char buf[4096] = "";
    ssize_t n = read(err[0], buf, sizeof buf - 1);
    CHECK_GT(n, 0);
    CHECK_EQ(r, CUDA_ERROR_NOT_INITIALIZED);
    CHECK_EQ(r2, CUDA_ERROR_NOT_INITIALIZED);
    char want[512];
    snprintf(want, sizeof want, "%s", expect);
    for (char *save = NULL, *w = strtok_r(want, "|", &save); w; w = strtok_r(NULL, "|", &save))
        CHECK_CONTAINS(buf, w);
    CHECK_EQ(count_lines(buf, "cushare: config:"), 1); /* one message, not a flood */
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 1), CUDA_ERROR_NOT_INITIALIZED);
    printf("bad configuration refused: %s", buf);
    return 0;
}
