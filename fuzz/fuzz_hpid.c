/*
 * libFuzzer target for the HPID v1 decoders. Beyond "no crash", it checks
 * the decoders' contracts on arbitrary bytes: an accepted response
 * re-encodes to exactly the input, an accepted PID is in 1..INT32_MAX, and
 * the request classifier only ever returns a v1 status.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "identity/identity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int st = cs__hpid_decode_request(data, size);
    if (size == CS_HPID_REQUEST_SIZE) {
        if (st < 0 || st > CS_HPID_BAD_COMMAND)
            abort();
        if (st == CS_HPID_OK) {
            uint8_t again[CS_HPID_REQUEST_SIZE];
            cs__hpid_encode_request(again, CS_HPID_VERSION, CS_HPID_CMD_GET_PID);
            if (memcmp(again, data, sizeof again) != 0)
                abort();
        }
    } else if (st != -EMSGSIZE) {
        abort();
    }

    struct cs_hpid_response r = {0};
    int rc = cs__hpid_decode_response(data, size, &r);
    if (rc == 0 || rc == -EREMOTEIO) {
        if (size != CS_HPID_RESPONSE_SIZE)
            abort();
        if (rc == 0 && (r.pid == 0 || r.pid > INT32_MAX || r.status != CS_HPID_OK))
            abort();
        if (rc != 0 && (r.status == CS_HPID_OK || r.status >= CS_HPID_NSTATUS || r.pid != 0))
            abort();
        uint8_t again[CS_HPID_RESPONSE_SIZE];
        cs__hpid_encode_response(again, r.status, r.pid);
        if (memcmp(again, data, sizeof again) != 0)
            abort();
    }
    return 0;
}
