/*
 * ledger_status_{human,json,errors,top}: the built `cushare status` and
 * `cushare top` ($CS_BUILD_DIR/cushare) on ledgers crafted through the
 * ledger API: one live process with charges on two devices, a known UUID,
 * host pid, identity tier, GPU time and a suspension, plus one dead slot.
 * With --no-reap the dead slot is shown and left alone; without it the
 * view reaps it first (else status would show dead slots and their
 * bytes as used).
 */
#include "ledger_test.h"

#include <errno.h>

static char cli[4200];
static char *outbuf, *errbuf;

/* Runs cushare with `args` (NULL-terminated, without argv[0]); the ledger
 * variable is set to `env_ledger` or removed. Returns the exit status, or
 * 128 + signal; stdout/stderr land in outbuf/errbuf. */
static int run_cli(const char *env_ledger, const char *const *args)
{
    const char *o = lt_path(".out"), *e = lt_path(".err");
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int fo = open(o, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fe = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
            _exit(126);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        if (env_ledger)
            setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", env_ledger, 1);
        else
            unsetenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
        const char *argv[16] = {cli};
        for (int i = 0; args[i] && i < 14; i++)
            argv[i + 1] = args[i];
        execv(cli, (char **)argv);
        _exit(127);
    }
    int st = lt_wait(pid, 20);
    free(outbuf);
    free(errbuf);
    outbuf = lt_read_file(o, NULL);
    errbuf = lt_read_file(e, NULL);
    CHECK(outbuf && errbuf);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    CHECK(WEXITSTATUS(st) != 127);
    return WEXITSTATUS(st);
}

static struct cs_ledger l;
static int dead_slot;
static char uuid[] = "GPU-01020304-0506-0708-090a-0b0c0d0e0f10";

static const char *craft(void)
{
    const char *path = strdup(lt_path("status"));
    CHECK(path != NULL);
    struct cs_ledger_params p;
    memset(&p, 0, sizeof p);
    p.device_count = 2;
    p.limit[0] = 4096 * MiB;
    p.sm_limit[0] = 25;
    p.policy = CS_POLICY_FORCE;
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
    uint8_t u[16], other[16];
    for (int i = 0; i < 16; i++)
        u[i] = (uint8_t)(i + 1), other[i] = 0xee;
    CHECK_EQ(cs__ledger_set_device_info(&l, 0, u, 0), 0);
    CHECK_EQ(l.hdr->uuid_state[0], 2);
    lt_capture_begin();
    CHECK_EQ(cs__ledger_set_device_info(&l, 0, other, 0), 0); /* first writer wins */
    char *err = lt_capture_end();
    CHECK_CONTAINS(err, "device 0 is a different GPU");
    free(err);
    CHECK_EQ(cs__ledger_set_device_info(&l, CS_MAX_DEVICES, u, 0), -EINVAL);

    /* Claimed before the dead slot exists: a claim reaps dead slots. */
    CHECK_EQ(cs__ledger_claim(&l), 0);

    /* A dead slot: claimed and charged, then gone without leaving. */
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(cs__ledger_after_fork(&l), 0);
        CHECK_EQ(cs__ledger_claim(&l), 0);
        CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 8 * MiB), 0);
        lt_write_full(fds[1], &l.slot, sizeof l.slot);
        _exit(0);
    }
    cs_read_full(fds[0], &dead_slot, sizeof dead_slot, 10000);
    cs_wait_ok(pid, 10000);
    CHECK_EQ(cs__ledger_slot(&l, dead_slot)->state, CS_SLOT_LIVE);

    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 256 * MiB), 0);
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_CONTEXT, 64 * MiB), 0);
    CHECK_EQ(cs__ledger_charge(&l, 1, CS_MEM_VMM, 16 * MiB), 0);
    /* Tier 0 answered after the broker failed with ENOENT; 3 lock waits. */
    CHECK_EQ(cs__ledger_set_identity(&l, 424242, CS_IDENTITY_NVML_NS, ENOENT), 0);
    __atomic_store_n(&cs__ledger_my_slot(&l)->lock_waits, 3, __ATOMIC_RELAXED);
    struct cs_ledger_slot *s = cs__ledger_my_slot(&l);
    s->gpu_ns[0] = 1500000000ull;
    s->run_state = 1;
    return path;
}

/* The view reaps the dead slot first: its 8 MiB are no longer used. */
static void check_reaped_by_view(void)
{
    CHECK_EQ(cs__ledger_slot(&l, dead_slot)->state, CS_SLOT_FREE);
    CHECK_EQ_U(l.hdr->reaped, 1);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 320 * MiB);
}

static void case_human(const char *path)
{
    const char *args[] = {"status", "--no-reap", path, NULL};
    CHECK_EQ(run_cli(NULL, args), 0);
    printf("%s", outbuf);
    char pid[32], slot[32];
    snprintf(pid, sizeof pid, " %d ", (int)getpid());
    snprintf(slot, sizeof slot, "%5d ", dead_slot);
    CHECK_CONTAINS(outbuf, path);
    CHECK_CONTAINS(outbuf, uuid);
    CHECK_CONTAINS(outbuf, "4096.0");  /* limit */
    CHECK_CONTAINS(outbuf, "328.0");   /* used: 256 + 64 + 8 (dead, not reaped) */
    CHECK_CONTAINS(outbuf, "3768.0");  /* free */
    CHECK_CONTAINS(outbuf, "policy force");
    CHECK_CONTAINS(outbuf, pid);
    CHECK_CONTAINS(outbuf, "424242");
    CHECK_CONTAINS(outbuf, "live  nvml-namespace(ENOENT) w3");
    CHECK_CONTAINS(outbuf, "dead  unknown");
    CHECK_CONTAINS(outbuf, "context=64.0 data=256.0");
    CHECK_CONTAINS(outbuf, "vmm=16.0");
    CHECK_CONTAINS(outbuf, "1.500 yes");
    CHECK_CONTAINS(outbuf, slot);
    /* --no-reap: the dead slot is shown, not reaped. */
    CHECK_EQ(cs__ledger_slot(&l, dead_slot)->state, CS_SLOT_LIVE);
    CHECK_EQ_U(l.hdr->reaped, 0);
    /* The variable is the default LEDGER; by default the view reaps. */
    const char *args2[] = {"status", NULL};
    CHECK_EQ(run_cli(path, args2), 0);
    printf("%s", outbuf);
    CHECK_CONTAINS(outbuf, "1 processes (0 dead, not yet reaped); 1 reaped so far");
    CHECK_CONTAINS(outbuf, "320.0");
    CHECK_CONTAINS(outbuf, "3776.0"); /* free */
    CHECK(strstr(outbuf, "dead  unknown") == NULL);
    check_reaped_by_view();
}

static void case_json(const char *path)
{
    const char *args[] = {"status", "--json", "--no-reap", path, NULL};
    CHECK_EQ(run_cli(NULL, args), 0);
    printf("%s", outbuf);
    CHECK_EQ(lt_count_lines(outbuf), 1);
    CHECK_CONTAINS(outbuf, "{\"ledger\":\"");
    CHECK_CONTAINS(outbuf, "\"version\":3");
    CHECK_CONTAINS(outbuf, "\"index\":0,\"uuid\":\"GPU-01020304-0506-0708-090a-0b0c0d0e0f10\","
                           "\"limit\":4294967296,\"used\":343932928,\"free\":3951034368");
    CHECK_CONTAINS(outbuf, "\"index\":1,\"uuid\":null,\"limit\":0,\"used\":16777216,"
                           "\"free\":null");
    CHECK_CONTAINS(outbuf, "\"sm_limit\":25");
    CHECK_CONTAINS(outbuf, "\"host_pid\":424242,\"state\":\"live\",\"identity\":"
                           "\"nvml-namespace\",\"identity_reason\":2,\"lock_waits\":3,"
                           "\"suspended\":true");
    CHECK_CONTAINS(outbuf, "\"state\":\"dead\"");
    CHECK_CONTAINS(outbuf, "\"dev0\":{\"context\":67108864,\"data\":268435456,");
    CHECK_CONTAINS(outbuf, "\"gpu_ns\":{\"dev0\":1500000000,\"dev1\":0}");

    /* A real JSON parser, when there is one. */
    const char *json = lt_path("status.json");
    lt_write_file(json, outbuf, strlen(outbuf));
    char script[2048];
    snprintf(script, sizeof script,
             "import json,sys\n"
             "d=json.load(open(sys.argv[1]))\n"
             "dev={x['index']:x for x in d['devices']}\n"
             "assert d['version']==3 and d['ledger']==sys.argv[2]\n"
             "assert dev[0]['limit']==4294967296 and dev[0]['used']==343932928\n"
             "assert dev[0]['free']==3951034368 and dev[0]['sm_limit']==25\n"
             "assert dev[1]['free'] is None and dev[1]['uuid'] is None\n"
             "p={x['pid']:x for x in d['processes'] if x['state']=='live'}[%d]\n"
             "assert p['bytes']['dev0']['data']==268435456, p\n"
             "assert p['bytes']['dev1']['vmm']==16777216, p\n"
             "assert p['identity']=='nvml-namespace' and p['suspended'] is True\n"
             "dead=[x for x in d['processes'] if x['state']=='dead']\n"
             "assert len(dead)==1 and dead[0]['slot']==%d, dead\n",
             (int)getpid(), dead_slot);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execlp("python3", "python3", "-c", script, json, path, (char *)NULL);
        _exit(127);
    }
    int st = lt_wait(pid, 30);
    CHECK(WIFEXITED(st));
    if (WEXITSTATUS(st) == 127)
        printf("python3 not found: JSON checked by substrings only\n");
    else
        CHECK_EQ(WEXITSTATUS(st), 0);

    const char *reaping[] = {"status", "--json", path, NULL};
    CHECK_EQ(run_cli(NULL, reaping), 0);
    printf("%s", outbuf);
    CHECK_CONTAINS(outbuf, "\"live\":1,\"reaped\":1,");
    CHECK_CONTAINS(outbuf, "\"used\":335544320,\"free\":3959422976");
    CHECK(strstr(outbuf, "\"state\":\"dead\"") == NULL);
    check_reaped_by_view();
}

static void case_errors(const char *path)
{
    /* Neither LEDGER nor the variable: the node view, as `status --json`
     * gives it without LEDGER, for people. */
    const char *none[] = {"status", "--no-scan", NULL};
    CHECK_EQ(run_cli(NULL, none), 0);
    CHECK_CONTAINS(outbuf, "cushare top  ");
    /* Without LEDGER, top is the node view (tests/node): a bad option of
     * it is still a usage error naming the fix. */
    const char *top_bad[] = {"top", "--once", "--interval", "5", NULL};
    CHECK_EQ(run_cli(NULL, top_bad), 2);
    CHECK_CONTAINS(errbuf, "--interval needs milliseconds from 100 to 60000");
    const char *badopt[] = {"status", "--frobnicate", path, NULL};
    CHECK_EQ(run_cli(NULL, badopt), 2);
    const char *two[] = {"status", path, path, NULL};
    CHECK_EQ(run_cli(NULL, two), 2);

    /* Missing: an error, and nothing created. */
    const char *absent = lt_path("absent");
    const char *a[] = {"status", absent, NULL};
    CHECK_EQ(run_cli(NULL, a), 1);
    CHECK_CONTAINS(errbuf, "does not exist");
    CHECK(access(absent, F_OK) != 0);

    /* Newer layout and truncated: refused, unchanged. */
    size_t len;
    char *good = lt_read_file(path, &len);
    CHECK(good != NULL);
    uint32_t v4 = 4;
    memcpy(good + 8, &v4, 4);
    const char *newer = lt_path("newer");
    lt_write_file(newer, good, len);
    const char *n[] = {"status", "--json", newer, NULL};
    CHECK_EQ(run_cli(NULL, n), 1);
    CHECK_CONTAINS(errbuf, newer);
    CHECK_CONTAINS(errbuf, "newer layout version 4, this build understands 3");
    CHECK_CONTAINS(errbuf, "remove it or point CUDA_DEVICE_MEMORY_SHARED_CACHE at a fresh path");
    CHECK_STREQ(outbuf, "");
    size_t len2;
    char *after = lt_read_file(newer, &len2);
    CHECK(len2 == len && memcmp(after, good, len) == 0);
    free(after);
    uint32_t v3 = 3;
    memcpy(good + 8, &v3, 4);
    const char *trunc = lt_path("trunc");
    lt_write_file(trunc, good, 1000);
    const char *t[] = {"top", trunc, NULL};
    CHECK_EQ(run_cli(NULL, t), 1);
    CHECK_CONTAINS(errbuf, "truncated: size 1000 bytes");
    free(good);
}

static void case_top(const char *path)
{
    const char *once[] = {"top", "--once", "--no-reap", path, NULL};
    CHECK_EQ(run_cli(NULL, once), 0);
    printf("%s", outbuf);
    CHECK_CONTAINS(outbuf, "GPU 0 ");
    CHECK_CONTAINS(outbuf, uuid);
    CHECK_CONTAINS(outbuf, "328.0 / 4096.0 MiB");
    CHECK_CONTAINS(outbuf, "sm 25%");
    CHECK_CONTAINS(outbuf, "[#");
    CHECK_CONTAINS(outbuf, "live suspended");
    CHECK_CONTAINS(outbuf, "dead");
    CHECK(strchr(outbuf, '\033') == NULL);
    /* stdout is not a terminal: one frame, then exit (no --once needed). */
    const char *plain[] = {"top", path, NULL};
    CHECK_EQ(run_cli(NULL, plain), 0);
    printf("%s", outbuf);
    CHECK_CONTAINS(outbuf, "320.0 / 4096.0 MiB");
    CHECK(strstr(outbuf, "dead") == NULL);
    CHECK(strchr(outbuf, '\033') == NULL);
    check_reaped_by_view();
}

int main(int argc, char **argv)
{
    const char *b = getenv("CS_BUILD_DIR");
    CHECK(b != NULL);
    snprintf(cli, sizeof cli, "%s/cushare", b);
    CHECK(access(cli, X_OK) == 0);
    CHECK(argc == 2);
    char *path = (char *)craft();
    if (!strcmp(argv[1], "human"))
        case_human(path);
    else if (!strcmp(argv[1], "json"))
        case_json(path);
    else if (!strcmp(argv[1], "errors"))
        case_errors(path);
    else if (!strcmp(argv[1], "top"))
        case_top(path);
    else
        CHECK(!"unknown case");
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
    free(outbuf);
    free(errbuf);
    free(path);
    printf("ledger_status_%s: ok\n", argv[1]);
    return 0;
}
