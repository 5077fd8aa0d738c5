/*
 * ledger_abi: the layout of include/cushare/ledger.h is pinned twice: every
 * field's offset and size against golden numbers, and the first 256 bytes
 * a creator writes against tests/ledger/golden_header_v3.hex (creation time
 * and pid zeroed). A layout change must bump CS_LEDGER_VERSION and update
 * both (docs/ledger.md). CS_UPDATE_GOLDEN=1 rewrites the hex file.
 */
#include "ledger_test.h"

#include <stddef.h>

#define OFF(type, field, want) CHECK_EQ(offsetof(struct type, field), want)
#define SZ(type, field, want) CHECK_EQ(sizeof(((struct type *)0)->field), want)

static void check_layout(void)
{
    CHECK_EQ(sizeof(struct cs_ledger_header), 4096);
    CHECK_EQ(sizeof(struct cs_ledger_slot), 2048);
    CHECK_EQ(CS_LEDGER_FILE_SIZE, 4096 + 1024 * 2048 + 256 * 64);
    CHECK_EQ(CS_LEDGER_SHARE_BASE, 4096 + 1024 * 2048);
    CHECK_EQ(CS_LEDGER_VERSION, 3);
    CHECK_EQ(CS_LEDGER_SHARES, 256);
    CHECK_EQ(CS_LEDGER_SHARE_LOCK(0), (1ull << 40) - 1024);
    CHECK_EQ(CS_LEDGER_SHARE_LOCK(255), (1ull << 40) - 1279);
    CHECK_EQ(sizeof(struct cs_ledger_share), 64);
    OFF(cs_ledger_share, state, 0);
    OFF(cs_ledger_share, dev, 4);
    OFF(cs_ledger_share, cat, 8);
    OFF(cs_ledger_share, bytes, 16);
    OFF(cs_ledger_share, charged, 24);
    OFF(cs_ledger_share, key, 32);
    SZ(cs_ledger_share, key, 24);
    CHECK_EQ(CS_LEDGER_LOCK_BASE, 1ull << 40);
    CHECK_EQ(CS_LEDGER_CTX_LOCK(0), (1ull << 40) - 2);
    CHECK_EQ(CS_LEDGER_CTX_LOCK(15), (1ull << 40) - 17);
    CHECK_EQ(CS_LEDGER_HEAL_LOCK, (1ull << 40) - 18);
    CHECK_EQ(CS_LEDGER_KEEP_LOCK, (1ull << 40) - 19);
    CHECK_EQ(CS_MAX_DEVICES, 16);
    CHECK_EQ(CS_LEDGER_SLOTS, 1024);
    CHECK_EQ(CS_MEM_CATEGORY_SLOTS, 12);
    CHECK_EQ(CS_MEM_NCATEGORIES, 9);
    CHECK_EQ(CS_IDENTITY_NTIERS, 6);
    CHECK_EQ(strlen(CS_LEDGER_MAGIC), 8);

    OFF(cs_ledger_header, magic, 0);
    OFF(cs_ledger_header, version, 8);
    OFF(cs_ledger_header, header_size, 12);
    OFF(cs_ledger_header, slot_size, 16);
    OFF(cs_ledger_header, slot_count, 20);
    OFF(cs_ledger_header, device_count, 24);
    OFF(cs_ledger_header, policy, 28);
    OFF(cs_ledger_header, priority, 32);
    OFF(cs_ledger_header, flags, 36);
    OFF(cs_ledger_header, created_ns, 40);
    OFF(cs_ledger_header, creator_pid, 48);
    OFF(cs_ledger_header, reserved0, 52);
    OFF(cs_ledger_header, limit, 56);
    SZ(cs_ledger_header, limit, 128);
    OFF(cs_ledger_header, sm_limit, 184);
    SZ(cs_ledger_header, sm_limit, 64);
    OFF(cs_ledger_header, reserved1, 248);
    OFF(cs_ledger_header, uuid, 256);
    SZ(cs_ledger_header, uuid, 256);
    OFF(cs_ledger_header, uuid_state, 512);
    SZ(cs_ledger_header, uuid_state, 64);
    OFF(cs_ledger_header, physical_total, 576);
    SZ(cs_ledger_header, physical_total, 128);
    OFF(cs_ledger_header, reserved2, 704);
    OFF(cs_ledger_header, dev, 1024);
    SZ(cs_ledger_header, dev[0], 64);
    OFF(cs_ledger_header, dev[0].used, 1024);
    OFF(cs_ledger_header, dev[0].peak, 1032);
    OFF(cs_ledger_header, dev[0].pace_vt_ns, 1040);
    OFF(cs_ledger_header, dev[0].share_state, 1048);
    OFF(cs_ledger_header, dev[1].used, 1088);
    OFF(cs_ledger_header, dev[15].used, 1984);
    OFF(cs_ledger_header, claim_hint, 2048);
    OFF(cs_ledger_header, reaped, 2056);
    OFF(cs_ledger_header, live, 2064);
    OFF(cs_ledger_header, reserved3, 2072);
    OFF(cs_ledger_header, park, 2112);
    OFF(cs_ledger_header, park.state, 2112);
    OFF(cs_ledger_header, park.seq, 2116);
    OFF(cs_ledger_header, park.host_bytes, 2120);
    OFF(cs_ledger_header, park.parks, 2128);
    OFF(cs_ledger_header, park.wakes, 2136);
    OFF(cs_ledger_header, park.since_ns, 2176);
    OFF(cs_ledger_header, park.performer_pid, 2184);
    OFF(cs_ledger_header, park.refusals, 2192);
    OFF(cs_ledger_header, reserved4, 2240);

    OFF(cs_ledger_slot, state, 0);
    OFF(cs_ledger_slot, pid, 4);
    OFF(cs_ledger_slot, host_pid, 8);
    OFF(cs_ledger_slot, identity_tier, 12);
    OFF(cs_ledger_slot, identity_reason, 16);
    OFF(cs_ledger_slot, lock_waits, 20);
    OFF(cs_ledger_slot, run_request, 24);
    OFF(cs_ledger_slot, run_state, 28);
    OFF(cs_ledger_slot, start_ns, 32);
    OFF(cs_ledger_slot, pidns_ino, 40);
    OFF(cs_ledger_slot, generation, 48);
    OFF(cs_ledger_slot, throttled_ns, 56);
    OFF(cs_ledger_slot, bytes, 64);
    SZ(cs_ledger_slot, bytes, 16 * 12 * 8);
    OFF(cs_ledger_slot, bytes[1][0], 64 + 96);
    OFF(cs_ledger_slot, gpu_ns, 1600);
    OFF(cs_ledger_slot, last_launch_ns, 1728);
    OFF(cs_ledger_slot, pending, 1856);
    SZ(cs_ledger_slot, pending, 16 * 8);
    OFF(cs_ledger_slot, op_seq, 1984);
    OFF(cs_ledger_slot, in_call, 1992);
    OFF(cs_ledger_slot, last_call_ns, 2000);
    OFF(cs_ledger_slot, reserved1, 2008);

    /* Values other languages hard-code. */
    CHECK_EQ(CS_SLOT_FREE, 0);
    CHECK_EQ(CS_SLOT_LIVE, 1);
    CHECK_EQ(CS_MEM_CONTEXT, 0);
    CHECK_EQ(CS_MEM_DATA, 1);
    CHECK_EQ(CS_MEM_GRAPH, 8);
    CHECK_EQ(CS_IDENTITY_FAILED, 5);
    CHECK_EQ(CS_POLICY_DISABLE, 2);
    CHECK_EQ(CS_SUSPEND, 1);
    CHECK_STREQ(cs__ledger_category_name(CS_MEM_DATA), "data");
    CHECK_STREQ(cs__ledger_category_name(CS_MEM_NCATEGORIES), "?");
    CHECK_STREQ(cs__ledger_identity_name(CS_IDENTITY_NVML_NS), "nvml-namespace");
}

static void hexdump(FILE *f, const unsigned char *b, size_t n)
{
    fprintf(f, "# First 256 bytes of a ledger (layout version %u) created with\n"
               "# device_count 2, limit {4 GiB, 2 GiB}, sm_limit {25, 50}, policy force,\n"
               "# priority -1; created_ns and creator_pid zeroed. See docs/ledger.md.\n",
            CS_LEDGER_VERSION);
    for (size_t i = 0; i < n; i += 16) {
        fprintf(f, "%04zx:", i);
        for (size_t j = i; j < i + 16 && j < n; j++)
            fprintf(f, " %02x", b[j]);
        fprintf(f, "\n");
    }
}

/* Parses "offset: xx xx ..." lines; '#' starts a comment line. */
static size_t parse_hex(const char *s, unsigned char *out, size_t cap)
{
    size_t n = 0;
    while (*s) {
        const char *eol = strchr(s, '\n');
        size_t len = eol ? (size_t)(eol - s) : strlen(s);
        if (len && s[0] != '#') {
            const char *p = memchr(s, ':', len);
            CHECK(p != NULL);
            for (p++; p < s + len;) {
                if (*p == ' ') {
                    p++;
                    continue;
                }
                unsigned v;
                CHECK(sscanf(p, "%2x", &v) == 1);
                CHECK(n < cap);
                out[n++] = (unsigned char)v;
                p += 2;
            }
        }
        s += len + (eol ? 1 : 0);
    }
    return n;
}

static void check_golden(void)
{
    struct cs_ledger_params p;
    memset(&p, 0, sizeof p);
    p.device_count = 2;
    p.limit[0] = 4ull << 30;
    p.limit[1] = 2ull << 30;
    p.sm_limit[0] = 25;
    p.sm_limit[1] = 50;
    p.policy = CS_POLICY_FORCE;
    p.priority = -1;
    struct cs_ledger l;
    const char *path = lt_path("golden");
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
    CHECK(l.created);
    CHECK_EQ(l.hdr->creator_pid, getpid());
    CHECK(l.hdr->created_ns > 0);
    cs__ledger_close(&l);

    size_t len;
    unsigned char *file = (unsigned char *)lt_read_file(path, &len);
    CHECK(file != NULL);
    CHECK_EQ(len, CS_LEDGER_FILE_SIZE);
    for (size_t i = 256; i < len; i++)
        if (file[i]) {
            fprintf(stderr, "byte %zu of a fresh ledger is %u, expected 0\n", i, file[i]);
            exit(1);
        }
    memset(file + 40, 0, 8);  /* created_ns */
    memset(file + 48, 0, 4);  /* creator_pid */

    const char *src = getenv("CS_SOURCE_DIR");
    CHECK(src != NULL);
    char gpath[4200];
    snprintf(gpath, sizeof gpath, "%s/tests/ledger/golden_header_v%u.hex", src,
             CS_LEDGER_VERSION);
    const char *upd = getenv("CS_UPDATE_GOLDEN");
    if (upd && !strcmp(upd, "1")) {
        FILE *f = fopen(gpath, "w");
        CHECK(f != NULL);
        hexdump(f, file, 256);
        CHECK(fclose(f) == 0);
        fprintf(stderr, "rewrote %s\n", gpath);
    }
    char *text = lt_read_file(gpath, NULL);
    if (!text) {
        fprintf(stderr, "%s missing; CS_UPDATE_GOLDEN=1 writes it\n", gpath);
        exit(1);
    }
    unsigned char golden[256];
    CHECK_EQ(parse_hex(text, golden, sizeof golden), 256);
    for (int i = 0; i < 256; i++)
        if (golden[i] != file[i]) {
            fprintf(stderr, "header byte %d is 0x%02x, golden 0x%02x: the layout changed; "
                    "bump CS_LEDGER_VERSION and update %s and docs/ledger.md\n", i, file[i],
                    golden[i], gpath);
            hexdump(stderr, file, 256);
            exit(1);
        }
    free(text);
    free(file);
}

int main(void)
{
    check_layout();
    check_golden();
    printf("ledger_abi: ok\n");
    return 0;
}
