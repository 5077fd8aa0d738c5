/*
 * Replays corpus files through a fuzz target without libFuzzer, so the
 * targets' invariants run under ASan/UBSan with any compiler:
 *   replay DIR_OR_FILE...
 * Exits non-zero if a target aborts (the sanitizer reports it) or if no
 * input was found (an empty corpus must not pass silently).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *buf = malloc(1 << 20);
    if (!buf) {
        fclose(f);
        return -1;
    }
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    /* An exact-size copy, so ASan sees reads past the input's end. */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 1;
}

static int run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return run_file(path);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char child[4096];
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        int r = run_file(child);
        if (r < 0) {
            closedir(d);
            return -1;
        }
        count += r;
    }
    closedir(d);
    return count;
}

int main(int argc, char **argv)
{
    int total = 0;
    for (int i = 1; i < argc; i++) {
        int r = run_path(argv[i]);
        if (r < 0)
            return 1;
        total += r;
    }
    printf("replayed %d inputs\n", total);
    return total > 0 ? 0 : 1;
}
