/* Fuzz target for the KV dump reader (src/engine/kvdump.c, docs/kvdump.md).
 *
 * Writes the input to a private temporary file and reads it with
 * skv_kvdump_read. A refusal must leave *out NULL with a message. An accepted
 * dump must satisfy (abort otherwise):
 *   - dtype 0 (f32) or 1 (f16); n_layer, n_head_kv, head_dim in [1, 4096];
 *   - the file size is exactly 64 + 4 n_pos + values + 8;
 *   - every token and every value can be read (ASan checks the allocations);
 *   - f16 dumps hold only values that survive an f32 -> f16 -> f32 round trip. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/f16.h"
#include "seqkv.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static char g_path[512];
static volatile uint64_t sink;

static void remove_file(void) { unlink(g_path); }

static int init_path(void)
{
    const char *t = getenv("TMPDIR");
    int fd;
    if (g_path[0]) return 1;
    if (!t || !*t) t = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_path, sizeof g_path, "%s/fuzz_kvdump_XXXXXX", t);
    if ((fd = mkstemp(g_path)) < 0) {
        g_path[0] = 0;
        return 0;
    }
    close(fd);
    atexit(remove_file);
    return 1;
}

static void check_dump(const skv_kvdump *d, size_t size)
{
    size_t vsz = d->dtype == SKV_KVDUMP_F16 ? 2 : 4, nval;
    uint64_t acc = 0;
    CHECK(d->dtype == SKV_KVDUMP_F32 || d->dtype == SKV_KVDUMP_F16);
    CHECK(d->n_layer >= 1 && d->n_layer <= 4096 && d->n_head_kv >= 1 && d->n_head_kv <= 4096 && d->head_dim >= 1 &&
          d->head_dim <= 4096);
    nval = (size_t)d->n_layer * 2 * (size_t)d->n_head_kv * (size_t)d->head_dim * d->n_pos;
    CHECK(size == 64 + 4 * (size_t)d->n_pos + nval * vsz + 8);
    for (uint32_t i = 0; i < d->n_pos; i++) acc += (uint32_t)d->tokens[i];
    for (size_t i = 0; i < nval; i++) {
        float v = d->kv[i];
        uint32_t u;
        memcpy(&u, &v, 4);
        acc += u;
        if (vsz == 2 && v == v) CHECK(skv_f16_to_f32(skv_f32_to_f16(v)) == v);
    }
    for (int i = 0; i < 16; i++) acc += d->fingerprint[i];
    sink += acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    skv_kvdump *d = (skv_kvdump *)&size;
    char err[256] = "";
    FILE *f;
    int rc;
    if (!init_path() || !(f = fopen(g_path, "wb"))) return 0;
    if (fwrite(data, 1, size, f) != size) {
        fclose(f);
        return 0;
    }
    if (fclose(f) != 0) return 0;
    rc = skv_kvdump_read(g_path, &d, err, sizeof err);
    if (rc != SKV_OK) {
        CHECK(d == NULL && rc < 0 && rc >= SKV_ERR_INTERNAL && err[0]);
        return 0;
    }
    check_dump(d, size);
    skv_kvdump_free(d);
    return 0;
}
