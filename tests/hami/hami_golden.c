/*
 * Writes the golden HAMi v1 region: a fixed region filled through our own
 * struct (include/cushare/hami_v1.h), printed as "offset: hex bytes" lines
 * for every nonzero 8-byte word. tests/hami/golden_region_v1.hex holds
 * the expected output; tests/hami/go/hami_test.go decodes the same bytes with
 * a transcription of HAMi's own Go struct and checks the values, so our
 * layout and HAMi's agree byte for byte.
 *   hami_golden hex          print the hex lines
 *   hami_golden file PATH    write the whole region to PATH
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cushare/hami_v1.h"

static struct cs_hami_region r;

static void fill(void)
{
    r.initialized_flag = CS_HAMI_MAGIC;
    r.major_version = CS_HAMI_MAJOR;
    r.minor_version = CS_HAMI_MINOR;
    r.device_num = 2;
    strcpy(r.uuids[0], "GPU-00112233-4455-6677-8899-aabbccddeeff");
    strcpy(r.uuids[1], "GPU-ffeeddcc-bbaa-9988-7766-554433221100");
    r.limit[0] = 1ull << 30;
    r.limit[1] = 2ull << 30;
    r.sm_limit[0] = 25;
    r.sm_limit[1] = 50;
    r.procs[0].pid = 101;
    r.procs[0].hostpid = 40101;
    r.procs[0].status = 1;
    r.procs[0].used[0].context_size = 300ull << 20;
    r.procs[0].used[0].buffer_size = 200ull << 20;
    r.procs[0].used[0].total = 500ull << 20;
    r.procs[0].device_util[0].sm_util = 20;
    r.procs[2].pid = 103;
    r.procs[2].hostpid = 40103;
    r.procs[2].status = 1;
    r.procs[2].used[1].context_size = 300ull << 20;
    r.procs[2].used[1].buffer_size = 700ull << 20;
    r.procs[2].used[1].total = 1000ull << 20;
    r.procs[2].device_util[1].sm_util = 45;
    r.proc_num = 3;
    r.utilization_switch = 1;
    r.recent_kernel = 2;
    r.priority = 1;
    r.last_kernel_time = 1764460800;
}

int main(int argc, char **argv)
{
    fill();
    if (argc == 3 && !strcmp(argv[1], "file")) {
        FILE *f = fopen(argv[2], "wb");
        if (!f || fwrite(&r, sizeof r, 1, f) != 1 || fclose(f))
            return 1;
        return 0;
    }
    if (argc != 2 || strcmp(argv[1], "hex")) {
        fprintf(stderr, "usage: hami_golden hex | file PATH\n");
        return 2;
    }
    const unsigned char *b = (const unsigned char *)&r;
    printf("# HAMi shared region v1, %zu bytes; nonzero 8-byte words\n", sizeof r);
    for (size_t off = 0; off < sizeof r; off += 8) {
        static const unsigned char zero[8];
        if (!memcmp(b + off, zero, 8))
            continue;
        printf("%zu:", off);
        for (int i = 0; i < 8; i++)
            printf(" %02x", b[off + i]);
        printf("\n");
    }
    return 0;
}
