/*
 * HPID v1 frames. Pure functions: no I/O, no allocation, no logging, so the
 * same code runs in the client, the server and the fuzzer. Integers are
 * big-endian and assembled with shifts; a struct cast would import the
 * compiler's padding and the host's byte order into the protocol.
 */
#define _GNU_SOURCE
#include "identity/identity.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

_Static_assert(sizeof(CS_HPID_MAGIC) - 1 == 4, "HPID magic is 4 bytes");

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void cs__hpid_encode_request(uint8_t out[CS_HPID_REQUEST_SIZE], uint16_t version,
                             uint16_t command)
{
    memcpy(out, CS_HPID_MAGIC, 4);
    put_u16(out + 4, version);
    put_u16(out + 6, command);
}

void cs__hpid_encode_response(uint8_t out[CS_HPID_RESPONSE_SIZE], uint16_t status,
                              uint32_t pid)
{
    memcpy(out, CS_HPID_MAGIC, 4);
    put_u16(out + 4, CS_HPID_VERSION);
    put_u16(out + 6, status);
    put_u32(out + 8, pid);
}

int cs__hpid_decode_request(const uint8_t *buf, size_t len)
{
    if (!buf || len != CS_HPID_REQUEST_SIZE)
        return -EMSGSIZE;
    if (memcmp(buf, CS_HPID_MAGIC, 4) != 0)
        return CS_HPID_BAD_MAGIC;
    if (get_u16(buf + 4) != CS_HPID_VERSION)
        return CS_HPID_BAD_VERSION;
    if (get_u16(buf + 6) != CS_HPID_CMD_GET_PID)
        return CS_HPID_BAD_COMMAND;
    return CS_HPID_OK;
}

int cs__hpid_decode_response(const uint8_t *buf, size_t len, struct cs_hpid_response *out)
{
    if (!buf || !out || len != CS_HPID_RESPONSE_SIZE)
        return -EMSGSIZE;
    if (memcmp(buf, CS_HPID_MAGIC, 4) != 0 || get_u16(buf + 4) != CS_HPID_VERSION)
        return -EBADMSG;
    uint16_t status = get_u16(buf + 6);
    uint32_t pid = get_u32(buf + 8);
    if (status >= CS_HPID_NSTATUS)
        return -EBADMSG;
    if (status != CS_HPID_OK) {
        /* An error reply carrying a PID is not a frame our server writes:
         * treat it as garbage rather than guess which half to believe. */
        if (pid != 0)
            return -EBADMSG;
        *out = (struct cs_hpid_response){CS_HPID_VERSION, status, 0};
        return -EREMOTEIO;
    }
    if (pid == 0 || pid > INT32_MAX)
        return -ERANGE;
    *out = (struct cs_hpid_response){CS_HPID_VERSION, status, pid};
    return 0;
}

const char *cs__hpid_status_name(unsigned status)
{
    static const char *const names[] = {
#define CS_X_NAME(id, value, label) [value] = label,
        CS_HPID_STATUSES(CS_X_NAME)
#undef CS_X_NAME
    };
    return status < CS_HPID_NSTATUS ? names[status] : "invalid";
}
