/*
 * ledger_refuse_bad: a file that is not a ledger of this layout is refused
 * with -EPROTO and exactly one error line naming the file, what is wrong
 * and the fix; the file is never modified (bytes and size unchanged), both
 * for tenants (read-write, with parameters) and monitors (read-only).
 * Also: a missing parent directory is named; a symbolic link is refused;
 * a limit mismatch warns once per differing value and the creator's
 * values win.
 */
#include "ledger_test.h"

static char *valid_ledger(const char *name, size_t *len)
{
    const char *path = lt_path(name);
    struct cs_ledger_params p = lt_params(1 * MiB);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
    cs__ledger_close(&l);
    char *b = lt_read_file(path, len);
    CHECK(b != NULL);
    return b;
}

/* Opens `path` both ways; expects -EPROTO, one message with `what`. */
static void expect_refused(const char *path, const char *what)
{
    size_t len0;
    char *before = lt_read_file(path, &len0);
    CHECK(before != NULL);
    struct stat st0;
    CHECK(stat(path, &st0) == 0);
    struct cs_ledger_params p = lt_params(1 * MiB);
    for (int ro = 0; ro < 2; ro++) {
        struct cs_ledger l;
        lt_capture_begin();
        int r = cs__ledger_open(path, ro ? NULL : &p, ro, &l);
        char *err = lt_capture_end();
        if (r != -EPROTO) {
            fprintf(stderr, "open of %s (%s) returned %d, expected -EPROTO; stderr: %s\n",
                    path, what, r, err);
            exit(1);
        }
        CHECK(l.hdr == NULL && l.fd == -1);
        CHECK_EQ(lt_count_lines(err), 1);
        CHECK_CONTAINS(err, "cushare: ledger: error: ");
        CHECK_CONTAINS(err, path);
        CHECK_CONTAINS(err, what);
        CHECK_CONTAINS(err, "remove it or point CUDA_DEVICE_MEMORY_SHARED_CACHE at a fresh path");
        if (ro)
            printf("  %s", err);
        free(err);
    }
    size_t len1;
    char *after = lt_read_file(path, &len1);
    CHECK_EQ(len1, len0);
    CHECK(memcmp(before, after, len0) == 0);
    struct stat st1;
    CHECK(stat(path, &st1) == 0);
    CHECK_EQ(st1.st_size, st0.st_size);
    CHECK_EQ(st1.st_mtim.tv_sec, st0.st_mtim.tv_sec);
    CHECK_EQ(st1.st_mtim.tv_nsec, st0.st_mtim.tv_nsec);
    free(before);
    free(after);
}

int main(void)
{
    size_t len;
    char *good = valid_ledger("good", &len);
    CHECK_EQ(len, CS_LEDGER_FILE_SIZE);

    /* Truncated: a valid header, slots cut short. */
    const char *trunc = lt_path("truncated");
    lt_write_file(trunc, good, 4096 + 100);
    expect_refused(trunc, "truncated: size 4196 bytes, expected 2117632");

    /* Empty (what `touch` or an O_CREAT-only opener leaves). */
    const char *empty = lt_path("empty");
    lt_write_file(empty, "", 0);
    expect_refused(empty, "truncated: size 0 bytes");

    /* Foreign: random bytes of the right size. */
    char *junk = malloc(len);
    CHECK(junk != NULL);
    unsigned rng = 12345;
    for (size_t i = 0; i < len; i++) {
        rng = rng * 1103515245u + 12345u;
        junk[i] = (char)(rng >> 16);
    }
    const char *foreign = lt_path("foreign");
    lt_write_file(foreign, junk, len);
    expect_refused(foreign, "foreign file: bad magic");

    /* Wrong magic, otherwise valid. */
    char *copy = malloc(len);
    CHECK(copy != NULL);
    memcpy(copy, good, len);
    memcpy(copy, "HAMICORE", 8);
    const char *magic = lt_path("magic");
    lt_write_file(magic, copy, len);
    expect_refused(magic, "foreign file: bad magic");

    /* Newer layout version. */
    memcpy(copy, good, len);
    uint32_t v4 = 4;
    memcpy(copy + 8, &v4, 4);
    const char *newer = lt_path("newer");
    lt_write_file(newer, copy, len);
    expect_refused(newer, "newer layout version 4, this build understands 3");

    /* Same version, different slot size (a corrupt or hand-built file). */
    memcpy(copy, good, len);
    uint32_t ss = 1024;
    memcpy(copy + 16, &ss, 4);
    const char *sizes = lt_path("sizes");
    lt_write_file(sizes, copy, len);
    expect_refused(sizes, "corrupt: header_size 4096, slot_size 1024");

    /* Not a regular file. */
    const char *dir = lt_path("adir");
    CHECK(mkdir(dir, 0700) == 0);
    struct cs_ledger l;
    lt_capture_begin();
    int r = cs__ledger_open(dir, NULL, true, &l);
    char *err = lt_capture_end();
    CHECK_EQ(r, -EPROTO);
    CHECK_CONTAINS(err, "is not a regular file");
    free(err);

    /* Missing parent directory: named, nothing created. */
    const char *nodir = lt_path("missing/ledger");
    struct cs_ledger_params p = lt_params(1 * MiB);
    lt_capture_begin();
    r = cs__ledger_open(nodir, &p, false, &l);
    err = lt_capture_end();
    CHECK_EQ(r, -ENOENT);
    CHECK_CONTAINS(err, "directory ");
    CHECK_CONTAINS(err, "/missing does not exist");
    free(err);

    /* A tenant never follows a symbolic link to its ledger, dangling or
     * not (whoever made the link would choose the file): named as such,
     * nothing created where it points. */
    const char *dangling = lt_path("dangling");
    CHECK(symlink(lt_path("nowhere"), dangling) == 0);
    lt_capture_begin();
    r = cs__ledger_open(dangling, &p, false, &l);
    err = lt_capture_end();
    CHECK_EQ(r, -ELOOP);
    CHECK_CONTAINS(err, "is a symbolic link: refused");
    CHECK_EQ(lt_count_lines(err), 1);
    CHECK(access(lt_path("nowhere"), F_OK) != 0);
    free(err);

    /* Monitors never create. */
    lt_capture_begin();
    r = cs__ledger_open(lt_path("absent"), NULL, true, &l);
    err = lt_capture_end();
    CHECK_EQ(r, -ENOENT);
    CHECK_CONTAINS(err, "does not exist");
    CHECK(access(lt_path("absent"), F_OK) != 0);
    free(err);

    /* Mode 0600: tenant-private. */
    struct stat st;
    CHECK(stat(lt_path("good"), &st) == 0);
    CHECK_EQ(st.st_mode & 0777, 0600);

    /* The creator's limits win, with one warning per differing value. */
    struct cs_ledger_params q = lt_params(2 * MiB);
    q.sm_limit[0] = 30;
    lt_capture_begin();
    r = cs__ledger_open(lt_path("good"), &q, false, &l);
    err = lt_capture_end();
    CHECK_EQ(r, 0);
    CHECK(!l.created);
    CHECK_EQ_U(cs__ledger_limit(&l, 0), 1 * MiB);
    CHECK_EQ(lt_count_lines(err), 2);
    CHECK_CONTAINS(err, "limit for device 0 is 1048576 bytes (set by its creator); this "
                        "process asked for 2097152; using the ledger's");
    CHECK_CONTAINS(err, "sm limit for device 0 is 0% (set by its creator); this process "
                        "asked for 30%");
    CHECK_CONTAINS(err, lt_path("good"));
    cs__ledger_close(&l);
    free(err);

    free(copy);
    free(junk);
    free(good);
    printf("ledger_refuse_bad: ok\n");
    return 0;
}
