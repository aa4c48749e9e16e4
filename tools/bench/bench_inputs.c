/* seqkv bench: the texts and models measured (given, or the defaults that are present). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_internal.h"

#define FORTUNES_DIR "/usr/share/games/fortunes"
#define STORIES_TEXT "corpus/stories260K_samples.txt"
#define STORIES_MODEL "models/stories260K/stories260K.gguf"

static int text_from_file(bench_text *t, const char *path)
{
    t->bytes = cli_read_file(path, &t->len);
    if (!t->bytes) return -1;
    bench_base_label(path, t->label, sizeof t->label);
    const char *root = bench_repo_root();
    size_t rl = strlen(root);
    /* relative to the repository when inside it, so committed reports do not name this machine */
    if (!strncmp(path, root, rl) && path[rl] == '/') path += rl + 1;
    snprintf(t->source, sizeof t->source, "%.255s", path);
    return 0;
}

/* Appends the lines of one fortunes file to t (at most cap bytes in all), '%' separators dropped. */
static void fortunes_append(bench_text *t, const char *path, size_t cap)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    while (f && t->len < cap && fgets(line, sizeof line, f)) {
        size_t l = strlen(line);
        if (!strcmp(line, "%\n")) continue;
        if (l > cap - t->len) l = cap - t->len;
        memcpy(t->bytes + t->len, line, l);
        t->len += l;
    }
    if (f) fclose(f);
}

/* Debian fortunes (different genre): a few prose files. */
static int text_fortunes(bench_text *t, size_t cap)
{
    static const char *const files[] = {"literature", "wisdom", "science", "people"};
    char path[256];
    t->bytes = malloc(cap + 1);
    t->len = 0;
    if (!t->bytes) return -1;
    snprintf(t->label, sizeof t->label, "fortunes");
    snprintf(t->source, sizeof t->source, FORTUNES_DIR "/{literature,wisdom,science,people} (Debian fortunes)");
    for (size_t i = 0; i < sizeof files / sizeof *files && t->len < cap; i++) {
        snprintf(path, sizeof path, FORTUNES_DIR "/%s", files[i]);
        fortunes_append(t, path, cap);
    }
    t->bytes[t->len] = 0;
    return t->len ? 0 : -1;
}

/* $SEQKV_SHARED/rel when readable, else ../shared/rel (from the repository or here); NULL if neither. */
static const char *shared_path(const char *rel, char *buf, size_t cap)
{
    const char *sh = getenv("SEQKV_SHARED");
    int len = sh && *sh ? snprintf(buf, cap, "%s/%s", sh, rel) : 0;
    if (len > 0 && (size_t)len < cap && access(buf, R_OK) == 0) return buf;
    char up[512];
    snprintf(up, sizeof up, "../shared/%s", rel);
    return bench_find_path(up, buf, cap);
}

/* stories260K's own samples: in distribution for that model. 1 if added. */
static int text_stories(bench_text *t)
{
    char buf[4096];
    const char *p = shared_path(STORIES_TEXT, buf, sizeof buf);
    if (!p || text_from_file(t, p)) return 0;
    snprintf(t->label, sizeof t->label, "stories");
    size_t l = strlen(t->source);
    snprintf(t->source + l, sizeof t->source - l, " (sampled from stories260K itself: in-distribution for that model)");
    return 1;
}

static int default_texts(bench_opts *o, bench_text *tx, int *n)
{
    char buf[4096];
    const char *p = bench_find_path("tests/data/model_ref/heldout.txt", buf, sizeof buf);
    *n = 0;
    if (!p || text_from_file(&tx[(*n)++], p)) {
        cli_error("cannot find tests/data/model_ref/heldout.txt (run from the repository)");
        return -1;
    }
    snprintf(tx[0].label, sizeof tx[0].label, "kjv-heldout");
    if (o->quick) return 0;
    if (access(FORTUNES_DIR "/literature", R_OK) == 0) {
        if (text_fortunes(&tx[*n], 96 * 1024) == 0) (*n)++;
    } else {
        bench_note(o, "fortunes skipped: " FORTUNES_DIR " absent (scripts/install-deps.sh --bench)");
    }
    if (text_stories(&tx[*n])) (*n)++;
    else bench_note(o, "stories samples skipped: ../shared/" STORIES_TEXT " absent");
    return 0;
}

int bench_load_texts(bench_opts *o, bench_text *tx, int *n_tx)
{
    if (!o->files.n) return default_texts(o, tx, n_tx);
    for (*n_tx = 0; *n_tx < o->files.n; (*n_tx)++)
        if (text_from_file(&tx[*n_tx], o->files.v[*n_tx])) return -1;
    return 0;
}

void bench_default_models(bench_opts *o, char *buf, size_t cap)
{
    o->models.v[o->models.n++] = cli_default_model();
    if (o->quick) return;
    const char *p = shared_path(STORIES_MODEL, buf, cap);
    if (p) o->models.v[o->models.n++] = p;
    else bench_note(o, "stories260K model skipped: ../shared/" STORIES_MODEL " absent");
}
