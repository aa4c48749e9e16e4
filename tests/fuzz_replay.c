/* Replays a fuzz target's committed corpus (fuzz/corpus/<name>/) as a test:
 * every file must be processed without a crash, a sanitizer report or a leak.
 * Linked with one fuzz/fuzz_<name>.c that defines LLVMFuzzerTestOneInput. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long len;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)len + 1);
        if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) { free(buf); buf = NULL; }
        *n = (size_t)len;
    }
    fclose(f);
    return buf;
}

int main(void)
{
    const char *dir = "fuzz/corpus/" FUZZ_NAME;
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) {
        printf("SKIP fuzz_%s:corpus: no corpus directory %s\n", FUZZ_NAME, dir);
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        char path[4096];
        size_t len = 0;
        unsigned char *buf;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!(buf = slurp(path, &len))) continue;
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
        n++;
    }
    closedir(d);
    /* Reaching here means no input crashed; sanitizers abort otherwise. */
    printf("PASS fuzz_%s:replay_%d_inputs\n", FUZZ_NAME, n);
    return 0;
}
