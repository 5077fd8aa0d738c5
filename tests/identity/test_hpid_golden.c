/*
 * HPID v1 golden frames: the exact bytes both this C code and any other
 * implementation (HAMi's Go device plugin) must produce and accept. The
 * same bytes are printed in docs/broker.md; changing either is a protocol
 * change.
 */
#include "id_test.h"

static const uint8_t golden_request[8] = {0x48, 0x50, 0x49, 0x44, 0x00, 0x01, 0x00, 0x01};
static const uint8_t golden_ok_8011[12] = {0x48, 0x50, 0x49, 0x44, 0x00, 0x01,
                                           0x00, 0x00, 0x00, 0x00, 0x1F, 0x4B};
static const uint8_t golden_bad_magic[12] = {0x48, 0x50, 0x49, 0x44, 0x00, 0x01,
                                             0x00, 0x01, 0x00, 0x00, 0x00, 0x00};
static const uint8_t golden_bad_version[12] = {0x48, 0x50, 0x49, 0x44, 0x00, 0x01,
                                               0x00, 0x02, 0x00, 0x00, 0x00, 0x00};
static const uint8_t golden_bad_command[12] = {0x48, 0x50, 0x49, 0x44, 0x00, 0x01,
                                               0x00, 0x03, 0x00, 0x00, 0x00, 0x00};
static const uint8_t golden_cred_failure[12] = {0x48, 0x50, 0x49, 0x44, 0x00, 0x01,
                                                0x00, 0x04, 0x00, 0x00, 0x00, 0x00};

static void check_bytes(const uint8_t *got, const uint8_t *want, size_t n, const char *what)
{
    if (memcmp(got, want, n) != 0) {
        fprintf(stderr, "%s: bytes differ\n got:", what);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %02x", got[i]);
        fprintf(stderr, "\nwant:");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %02x", want[i]);
        fprintf(stderr, "\n");
        exit(1);
    }
}

static void test_encode_golden(void)
{
    uint8_t b[12];
    cs__hpid_encode_request(b, CS_HPID_VERSION, CS_HPID_CMD_GET_PID);
    check_bytes(b, golden_request, 8, "request");
    cs__hpid_encode_response(b, CS_HPID_OK, 8011);
    check_bytes(b, golden_ok_8011, 12, "ok 8011");
    cs__hpid_encode_response(b, CS_HPID_BAD_MAGIC, 0);
    check_bytes(b, golden_bad_magic, 12, "bad magic");
    cs__hpid_encode_response(b, CS_HPID_BAD_VERSION, 0);
    check_bytes(b, golden_bad_version, 12, "unsupported version");
    cs__hpid_encode_response(b, CS_HPID_BAD_COMMAND, 0);
    check_bytes(b, golden_bad_command, 12, "unsupported command");
    cs__hpid_encode_response(b, CS_HPID_CRED_FAILURE, 0);
    check_bytes(b, golden_cred_failure, 12, "credential failure");
    /* Big-endian across all four PID bytes. */
    cs__hpid_encode_response(b, CS_HPID_OK, 0x01020304u);
    CHECK(b[8] == 1 && b[9] == 2 && b[10] == 3 && b[11] == 4);
}

static void test_decode_request(void)
{
    CHECK_EQ(cs__hpid_decode_request(golden_request, 8), CS_HPID_OK);
    const uint8_t magic[8] = {'H', 'P', 'I', 'X', 0, 1, 0, 1};
    CHECK_EQ(cs__hpid_decode_request(magic, 8), CS_HPID_BAD_MAGIC);
    const uint8_t lower[8] = {'h', 'p', 'i', 'd', 0, 1, 0, 1};
    CHECK_EQ(cs__hpid_decode_request(lower, 8), CS_HPID_BAD_MAGIC);
    const uint8_t v2[8] = {'H', 'P', 'I', 'D', 0, 2, 0, 1};
    CHECK_EQ(cs__hpid_decode_request(v2, 8), CS_HPID_BAD_VERSION);
    const uint8_t v256[8] = {'H', 'P', 'I', 'D', 1, 0, 0, 1};  /* LE-encoded 1 */
    CHECK_EQ(cs__hpid_decode_request(v256, 8), CS_HPID_BAD_VERSION);
    const uint8_t cmd2[8] = {'H', 'P', 'I', 'D', 0, 1, 0, 2};
    CHECK_EQ(cs__hpid_decode_request(cmd2, 8), CS_HPID_BAD_COMMAND);
    const uint8_t cmd0[8] = {'H', 'P', 'I', 'D', 0, 1, 0, 0};
    CHECK_EQ(cs__hpid_decode_request(cmd0, 8), CS_HPID_BAD_COMMAND);
    /* Magic is checked before version, version before command. */
    const uint8_t all_bad[8] = {'X', 'P', 'I', 'D', 0, 9, 0, 9};
    CHECK_EQ(cs__hpid_decode_request(all_bad, 8), CS_HPID_BAD_MAGIC);
    const uint8_t ver_cmd_bad[8] = {'H', 'P', 'I', 'D', 0, 9, 0, 9};
    CHECK_EQ(cs__hpid_decode_request(ver_cmd_bad, 8), CS_HPID_BAD_VERSION);
    /* Only exactly 8 bytes is a request. */
    CHECK_EQ(cs__hpid_decode_request(golden_request, 7), -EMSGSIZE);
    uint8_t nine[9] = {0};
    memcpy(nine, golden_request, 8);
    CHECK_EQ(cs__hpid_decode_request(nine, 9), -EMSGSIZE);
    CHECK_EQ(cs__hpid_decode_request(NULL, 8), -EMSGSIZE);
}

static void test_decode_response(void)
{
    struct cs_hpid_response r = {9, 9, 9};
    CHECK_EQ(cs__hpid_decode_response(golden_ok_8011, 12, &r), 0);
    CHECK_EQ(r.version, 1);
    CHECK_EQ(r.status, CS_HPID_OK);
    CHECK_EQ(r.pid, 8011);

    /* Well-formed error statuses: -EREMOTEIO with the status reported. */
    const uint8_t *errs[] = {golden_bad_magic, golden_bad_version, golden_bad_command,
                             golden_cred_failure};
    for (unsigned i = 0; i < 4; i++) {
        r = (struct cs_hpid_response){9, 9, 9};
        CHECK_EQ(cs__hpid_decode_response(errs[i], 12, &r), -EREMOTEIO);
        CHECK_EQ(r.status, i + 1);
        CHECK_EQ(r.pid, 0);
    }

    uint8_t b[13];
    /* PID 0 in an OK reply. */
    cs__hpid_encode_response(b, CS_HPID_OK, 0);
    r = (struct cs_hpid_response){9, 9, 9};
    CHECK_EQ(cs__hpid_decode_response(b, 12, &r), -ERANGE);
    CHECK_EQ(r.pid, 9);                  /* untouched */
    /* PID above INT32_MAX; INT32_MAX itself is fine. */
    cs__hpid_encode_response(b, CS_HPID_OK, 0x80000000u);
    CHECK_EQ(cs__hpid_decode_response(b, 12, &r), -ERANGE);
    cs__hpid_encode_response(b, CS_HPID_OK, 0xFFFFFFFFu);
    CHECK_EQ(cs__hpid_decode_response(b, 12, &r), -ERANGE);
    cs__hpid_encode_response(b, CS_HPID_OK, 0x7FFFFFFFu);
    CHECK_EQ(cs__hpid_decode_response(b, 12, &r), 0);
    CHECK_EQ(r.pid, 0x7FFFFFFF);
    /* Unknown status, error status carrying a PID. */
    cs__hpid_encode_response(b, 5, 0);
    CHECK_EQ(cs__hpid_decode_response(b, 12, &r), -EBADMSG);
    cs__hpid_encode_response(b, CS_HPID_CRED_FAILURE, 42);
    CHECK_EQ(cs__hpid_decode_response(b, 12, &r), -EBADMSG);
    /* Wrong magic, wrong version. */
    memcpy(b, golden_ok_8011, 12);
    b[3] = 'X';
    CHECK_EQ(cs__hpid_decode_response(b, 12, &r), -EBADMSG);
    memcpy(b, golden_ok_8011, 12);
    b[5] = 2;
    CHECK_EQ(cs__hpid_decode_response(b, 12, &r), -EBADMSG);
    /* Lengths: short, long, NULL. */
    memcpy(b, golden_ok_8011, 12);
    CHECK_EQ(cs__hpid_decode_response(b, 11, &r), -EMSGSIZE);
    CHECK_EQ(cs__hpid_decode_response(b, 13, &r), -EMSGSIZE);
    CHECK_EQ(cs__hpid_decode_response(NULL, 12, &r), -EMSGSIZE);
    CHECK_EQ(cs__hpid_decode_response(b, 12, NULL), -EMSGSIZE);
}

static void test_names(void)
{
    CHECK_STREQ(cs__hpid_status_name(0), "ok");
    CHECK_STREQ(cs__hpid_status_name(1), "bad_magic");
    CHECK_STREQ(cs__hpid_status_name(2), "unsupported_version");
    CHECK_STREQ(cs__hpid_status_name(3), "unsupported_command");
    CHECK_STREQ(cs__hpid_status_name(4), "credential_failure");
    CHECK_STREQ(cs__hpid_status_name(5), "invalid");
    CHECK_STREQ(cs__broker_reason(0), "ok");
    CHECK_STREQ(cs__broker_reason(-ENOENT), "missing");
    CHECK_STREQ(cs__broker_reason(-ERANGE), "bad_pid");
    CHECK_STREQ(cs__broker_reason(-ENOSPC), "other");

    /* Every failure reason has its own errno and its own name. */
    static const int codes[] = {
#define X_CODE(e, name) e,
        CS_BROKER_REASONS(X_CODE)
#undef X_CODE
    };
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        CHECK(strcmp(cs__broker_reason(-codes[i]), "other") != 0);
        for (size_t j = i + 1; j < n; j++) {
            CHECK_NE(codes[i], codes[j]);
            CHECK(strcmp(cs__broker_reason(-codes[i]), cs__broker_reason(-codes[j])) != 0);
        }
    }
}

int main(void)
{
    test_encode_golden();
    test_decode_request();
    test_decode_response();
    test_names();
    printf("hpid golden frames ok\n");
    return 0;
}
