#ifndef CS_CORE_UUID_H
#define CS_CORE_UUID_H

#include <stddef.h>
#include <stdint.h>

/* NVML's spelling of a GPU UUID: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
 * (41 bytes with the terminator) from the driver's 16 raw bytes. */
#define CS_UUID_STRLEN 41
void cs__format_uuid(const uint8_t bytes[16], char out[CS_UUID_STRLEN]);

#endif
