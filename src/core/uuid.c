#include "core/uuid.h"

#include <stdio.h>

void cs__format_uuid(const uint8_t b[16], char out[CS_UUID_STRLEN])
{
    snprintf(out, CS_UUID_STRLEN,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}
