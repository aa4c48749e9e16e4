/* seqkv store: the session store (docs/store.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char store_help[] =
    "usage: seqkv store COMMAND DIR [options]   (seqkv store COMMAND --help for each)\n\n"
    "A persistent store of many sessions' KV caches in directory DIR (LMDB). Shared prefixes\n"
    "are stored once (a radix trie over token ids whose nodes carry the model's surprisal);\n"
    "valuable prefixes keep their KV materialised within a byte budget, the rest is\n"
    "recomputed from tokens on restore, bit-identical to a fresh run.\n\n"
    "  init DIR [-m MODEL] [--budget BYTES]      create a store for a model\n"
    "  put DIR -f TEXT [--name NAME]             store a text's session ('-' = stdin)\n"
    "  put DIR --generate N --prompt TEXT --name NAME   store a greedy generation\n"
    "  get DIR NAME [-o TEXT] [--kv OUT.kv] [--verify]  restore a session\n"
    "  match DIR -f TEXT                         longest stored prefix, d_T, load vs compute\n"
    "  ls DIR | stats DIR | rm DIR NAME | gc DIR [--budget BYTES]\n"
    "Every command takes -m MODEL (default: the bundled model) and refuses a store made\n"
    "with another model. BYTES accepts K, M, G suffixes (powers of 1024).\n";

static const char *const sub_help[][2] = {
    {"init", "usage: seqkv store init DIR [-m MODEL] [--budget BYTES]\n"
             "Creates the store (or opens an existing one of the same model). --budget: bytes of\n"
             "materialised KV the placement policy may keep (default 64M).\n"},
    {"put", "usage: seqkv store put DIR (-f TEXT | --generate N --prompt TEXT) [--name NAME] [-m MODEL] [-t THREADS]\n"
            "Stores the session of a text (tokenized with BOS; '-' = stdin) under NAME (default:\n"
            "the file's base name). --generate N stores the prompt followed by N greedily generated\n"
            "tokens. Prints what was shared with stored sessions and what the policy changed.\n"},
    {"get", "usage: seqkv store get DIR NAME [-o TEXT] [--kv OUT.kv] [--verify] [-m MODEL] [-t THREADS]\n"
            "Restores a session: loads its longest materialised prefix, recomputes the rest.\n"
            "-o writes its text, --kv a KV dump (docs/kvdump.md), --verify checks the KV digest.\n"},
    {"match", "usage: seqkv store match DIR -f TEXT [-m MODEL]\n"
              "The longest stored prefix of the text's tokens, its d_T = -log2 P_M(prefix) in bits,\n"
              "and how many positions a restore of that prefix would load vs recompute.\n"},
    {"ls", "usage: seqkv store ls DIR [-m MODEL]\nLists sessions: name, tokens, put time (UTC), KV digest.\n"},
    {"stats", "usage: seqkv store stats DIR [-m MODEL]\nSizes, dedup, bits per position, the policy's parameters.\n"},
    {"rm", "usage: seqkv store rm DIR NAME [-m MODEL]\nRemoves a session (and the nodes only it needed).\n"},
    {"gc", "usage: seqkv store gc DIR [--budget BYTES] [-m MODEL]\n"
           "Checks the trie and applies the placement policy now (after changing the budget).\n"},
};

typedef struct opts {
    const char *cmd, *dir, *name, *model, *file, *out, *kv, *prompt;
    long long budget; /* -1: not given */
    long threads, generate;
    int verify;
} opts;

static int parse_bytes(const char *s, long long *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1048576.0, end++;
    else if (*end == 'G' || *end == 'g') mul = 1073741824.0, end++;
    if (end == s || errno || *end || v < 0 || v * mul > 9e18) {
        cli_error("--budget: '%s' is not a byte count (e.g. 64M)", s);
        return -1;
    }
    *out = (long long)(v * mul);
    return 0;
}

static const char *sub_usage(const char *cmd)
{
    for (size_t i = 0; i < sizeof sub_help / sizeof sub_help[0]; i++)
        if (!strcmp(sub_help[i][0], cmd)) return sub_help[i][1];
    return NULL;
}

/* 0 ok, 1 help printed, -1 usage error. */
static int parse_opts(int argc, char **argv, opts *o)
{
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(sub_usage(o->cmd), stdout);
            return 1;
        }
        const char **dst = !strcmp(a, "-m") ? &o->model : !strcmp(a, "-f") ? &o->file : !strcmp(a, "--name") ? &o->name
                         : !strcmp(a, "-o") ? &o->out : !strcmp(a, "--kv") ? &o->kv : !strcmp(a, "--prompt") ? &o->prompt
                         : NULL;
        if (dst || !strcmp(a, "--budget") || !strcmp(a, "-t") || !strcmp(a, "--generate")) {
            if (!v) {
                cli_error("option %s needs a value", a);
                return -1;
            }
            i++;
            if (dst) *dst = v;
            else if (!strcmp(a, "--budget") && parse_bytes(v, &o->budget)) return -1;
            else if (!strcmp(a, "-t") && cli_parse_int(a, v, 1, 256, &o->threads)) return -1;
            else if (!strcmp(a, "--generate") && cli_parse_int(a, v, 1, 1 << 20, &o->generate)) return -1;
        } else if (!strcmp(a, "--verify")) {
            o->verify = 1;
        } else if (a[0] == '-' && a[1]) {
            cli_error("unknown option '%s' (see seqkv store %s --help)", a, o->cmd);
            return -1;
        } else if (n_pos < 2) {
            pos[n_pos++] = a;
        } else {
            cli_error("unexpected argument '%s' (see seqkv store %s --help)", a, o->cmd);
            return -1;
        }
    }
    o->dir = pos[0];
    if (pos[1]) o->name = pos[1];
    if (!o->dir) {
        cli_error("seqkv store %s needs the store directory", o->cmd);
        return -1;
    }
    int wants_name = !strcmp(o->cmd, "get") || !strcmp(o->cmd, "rm");
    if ((wants_name && !o->name) || (pos[1] && !wants_name)) {
        cli_error(wants_name ? "seqkv store %s needs DIR NAME" : "seqkv store %s takes only DIR", o->cmd);
        return -1;
    }
    return 0;
}

static skv_store *open_store(const opts *o, skv_model *m, int flags)
{
    skv_store_params p = skv_store_default_params();
    skv_store *st = NULL;
    char err[600];
    p.budget = o->budget;
    p.n_threads = (int)o->threads;
    if (skv_store_open(o->dir, m, flags, &p, &st, err, sizeof err) != SKV_OK) {
        cli_error("%s", err);
        return NULL;
    }
    return st;
}

static int fail(skv_store *st) { cli_error("%s", skv_store_last_error(st)); return CLI_FAIL; }

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The prompt followed by n greedily generated tokens. */
static int32_t *generate(skv_model *m, const char *prompt, long n, int threads, size_t *n_out)
{
    skv_model_info info;
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    size_t np = 0;
    skv_model_get_info(m, &info);
    int32_t *p = cli_tokenize(m, prompt, strlen(prompt), 1, &np);
    float *lg = malloc((size_t)info.n_vocab * sizeof *lg);
    int32_t *t = p ? realloc(p, (np + (size_t)n) * sizeof *t) : NULL;
    cp.n_threads = threads;
    if (!t || !lg || np + (size_t)n > (size_t)info.n_ctx_train || skv_ctx_create(m, &cp, &c) ||
        skv_prefill(c, t, np, SKV_LOGITS_LAST, lg)) {
        cli_error("cannot generate %ld tokens after a %zu-token prompt (context %d)", n, np, info.n_ctx_train);
        free(t ? t : p);
        t = NULL;
    }
    for (long i = 0; t && i < n; i++) {
        int32_t best = 0;
        for (int v = 1; v < info.n_vocab; v++) if (lg[v] > lg[best]) best = v;
        t[np + (size_t)i] = best;
        if (i + 1 < n && skv_decode(c, best, lg)) { free(t); t = NULL; }
    }
    skv_ctx_free(c);
    free(lg);
    *n_out = np + (size_t)n;
    return t;
}

static int do_put(const opts *o, skv_model *m, skv_store *st)
{
    size_t n = 0, len;
    int32_t *tok = NULL;
    const char *name = o->name;
    if (!!o->file == !!o->generate || (o->generate && !o->prompt)) {
        cli_error("store put needs -f TEXT, or --generate N with --prompt TEXT");
        return CLI_USAGE;
    }
    if (!name && (!o->file || !strcmp(o->file, "-"))) {
        cli_error("store put needs --name NAME (no file name to default to)");
        return CLI_USAGE;
    }
    if (!name) name = base_name(o->file);
    if (o->file) {
        char *text = cli_read_file(o->file, &len);
        if (!text) return CLI_FAIL;
        tok = cli_tokenize(m, text, len, 1, &n);
        free(text);
    } else {
        tok = generate(m, o->prompt, o->generate, (int)o->threads, &n);
    }
    if (!tok) return CLI_FAIL;
    skv_store_put_report r;
    int rc = skv_store_put(st, name, tok, n, &r);
    free(tok);
    if (rc) return fail(st);
    printf("stored '%s': %u tokens, %u shared with stored sessions; %u positions loaded + %u computed; "
           "%.1f bits under the model; policy: +%u materialised, %u demoted; %.3f s\n",
           name, r.n_tokens, r.n_shared, r.n_loaded, r.n_computed, r.bits, r.n_materialised, r.n_demoted, r.seconds);
    return CLI_OK;
}

static int write_text(const skv_model *m, const int32_t *tok, size_t n, const char *path)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "wb") : stdout;
    int after_bos = 0;
    if (!f) {
        cli_error("cannot create '%s': %s", path, strerror(errno));
        return -1;
    }
    cli_write_tokens(f, m, tok, n, &after_bos);
    if (f != stdout && fclose(f) != 0) {
        cli_error("cannot write '%s'", path);
        return -1;
    }
    return 0;
}

static int do_get(const opts *o, skv_model *m, skv_store *st)
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_model_info info;
    skv_ctx *c = NULL;
    skv_store_get_report r;
    size_t n = 0;
    int ret = CLI_FAIL;
    skv_model_get_info(m, &info);
    int32_t *tok = malloc((size_t)info.n_ctx_train * sizeof *tok);
    cp.n_threads = (int)o->threads;
    if (!tok || skv_ctx_create(m, &cp, &c)) {
        cli_error("out of memory");
        goto done;
    }
    if (skv_store_get(st, o->name, c, o->verify ? SKV_STORE_VERIFY : 0, tok, (size_t)info.n_ctx_train, &n, &r)) {
        ret = fail(st);
        goto done;
    }
    printf("restored '%s': %u tokens: %u positions loaded from materialised KV (%.1f ms), %u recomputed (%.1f ms)%s\n",
           o->name, r.n_tokens, r.n_loaded, r.load_seconds * 1e3, r.n_computed, r.compute_seconds * 1e3,
           r.verified ? "; KV digest verified" : "");
    if (r.n_materialised) printf("policy: materialised %u nodes of its path from this restore\n", r.n_materialised);
    if (o->out && write_text(m, tok, n, o->out)) goto done;
    if (o->kv) {
        char err[512];
        if (skv_kvdump_write(c, tok, n, SKV_KVDUMP_F32, o->kv, err, sizeof err)) {
            cli_error("%s", err);
            goto done;
        }
    }
    ret = CLI_OK;
done:
    skv_ctx_free(c);
    free(tok);
    return ret;
}

static int do_match(const opts *o, skv_model *m, skv_store *st)
{
    size_t n = 0, len;
    skv_store_match_result r;
    if (!o->file) {
        cli_error("store match needs -f TEXT");
        return CLI_USAGE;
    }
    char *text = cli_read_file(o->file, &len);
    int32_t *tok = text ? cli_tokenize(m, text, len, 1, &n) : NULL;
    free(text);
    if (!tok) return CLI_FAIL;
    int rc = skv_store_match(st, tok, n, &r);
    free(tok);
    if (rc) return fail(st);
    printf("longest stored prefix: %u of %zu tokens\n", r.n_matched, n);
    printf("d_T: %.2f bits (-log2 P_M(prefix); %.3f bits/token)\n", r.bits,
           r.n_matched > 1 ? r.bits / (r.n_matched - 1) : 0.0);
    printf("restore of that prefix: %u positions loaded, %u recomputed\n", r.n_load, r.n_compute);
    return CLI_OK;
}

static int print_session(void *user, const skv_store_session_info *s)
{
    char when[32];
    time_t t = (time_t)s->put_time;
    struct tm tm;
    (void)user;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    printf("%s\t%u\t%s\t", s->name, s->n_tokens, when);
    for (int i = 0; i < 16; i++) printf("%02x", s->digest[i]);
    printf("\n");
    return 0;
}

static void print_stats(const skv_store_stats *s)
{
    double mib = 1048576.0;
    printf("model:                     %s\n", s->model_name);
    printf("sessions:                  %llu\n", (unsigned long long)s->n_sessions);
    printf("session tokens:            %llu\n", (unsigned long long)s->session_tokens);
    printf("unique stored positions:   %llu in %llu trie nodes\n", (unsigned long long)s->unique_positions,
           (unsigned long long)s->n_nodes);
    printf("dedup ratio:               %.2fx (session tokens / unique positions)\n", s->dedup_ratio);
    printf("bytes on disk:             %llu (%.2f MiB; LMDB pages in use)\n", (unsigned long long)s->disk_bytes,
           (double)s->disk_bytes / mib);
    printf("bits per session position: %.1f (bytes on disk x 8 / session tokens)\n", s->bits_per_position);
    printf("materialised KV:           %llu bytes (%.2f MiB), %llu positions in %llu nodes (exact f32, zstd)\n",
           (unsigned long long)s->mat_bytes, (double)s->mat_bytes / mib, (unsigned long long)s->mat_positions,
           (unsigned long long)s->mat_nodes);
    printf("model-coded token floor:   %.0f bits = %.0f bytes (%.3f bits per session position)\n",
           s->token_floor_bits, s->token_floor_bits / 8,
           s->session_tokens ? s->token_floor_bits / (double)s->session_tokens : 0.0);
    printf("same sessions as f16 KV:   %.0f bytes (%.2f MiB) = %.1fx bytes on disk\n", s->f16_bytes, s->f16_bytes / mib,
           s->disk_bytes ? s->f16_bytes / (double)s->disk_bytes : 0.0);
    printf("same sessions as TQ-3.5:   %.0f bytes (%.2f MiB) = %.1fx bytes on disk\n", s->tq35_bytes,
           s->tq35_bytes / mib, s->disk_bytes ? s->tq35_bytes / (double)s->disk_bytes : 0.0);
    printf("policy: budget %llu bytes; recompute %.0f tokens/s; load %.1f MB/s; prior weight %.1f; clock %llu\n",
           (unsigned long long)s->budget, s->prefill_tps, s->load_bps / 1e6, s->prior_weight,
           (unsigned long long)s->clock);
    printf("policy: score = reuse x max(0, len/recompute - bytes/load) / bytes,\n"
           "        reuse = (hits + refcount + prior_weight x 2^-d_T) / (clock + prior_weight)\n");
}

static int run_cmd(const opts *o, skv_model *m, skv_store *st)
{
    const char *c = o->cmd;
    if (!strcmp(c, "init")) {
        skv_store_stats s;
        if (skv_store_get_stats(st, &s)) return fail(st);
        printf("store '%s' ready for model '%s' (%llu sessions, budget %llu bytes)\n", o->dir, s.model_name,
               (unsigned long long)s.n_sessions, (unsigned long long)s.budget);
        return CLI_OK;
    }
    if (!strcmp(c, "put")) return do_put(o, m, st);
    if (!strcmp(c, "get")) return do_get(o, m, st);
    if (!strcmp(c, "match")) return do_match(o, m, st);
    if (!strcmp(c, "ls")) return skv_store_list(st, print_session, NULL) ? fail(st) : CLI_OK;
    if (!strcmp(c, "rm")) {
        if (skv_store_remove(st, o->name)) return fail(st);
        printf("removed '%s'\n", o->name);
        return CLI_OK;
    }
    if (!strcmp(c, "gc")) {
        skv_store_gc_report g;
        if (skv_store_gc(st, &g)) return fail(st);
        printf("trie checked; demoted %u nodes to tokens, freed %llu bytes; materialised KV now %llu bytes\n",
               g.n_demoted, (unsigned long long)g.bytes_freed, (unsigned long long)g.mat_bytes);
        return CLI_OK;
    }
    skv_store_stats s;
    if (skv_store_get_stats(st, &s)) return fail(st);
    print_stats(&s);
    return CLI_OK;
}

int cmd_store(int argc, char **argv)
{
    opts o = {.budget = -1, .threads = 1};
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(store_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    o.cmd = argv[1];
    if (!sub_usage(o.cmd)) {
        cli_error("unknown store command '%s' (see seqkv store --help)", o.cmd);
        return CLI_USAGE;
    }
    int pr = parse_opts(argc, argv, &o);
    if (pr) return pr > 0 ? CLI_OK : CLI_USAGE;
    if (o.budget >= 0 && strcmp(o.cmd, "init") && strcmp(o.cmd, "gc")) {
        cli_error("--budget goes with store init or store gc");
        return CLI_USAGE;
    }
    skv_model *m = cli_load_model(o.model);
    if (!m) return CLI_FAIL;
    int ro = !strcmp(o.cmd, "ls") || !strcmp(o.cmd, "stats") || !strcmp(o.cmd, "match");
    skv_store *st = open_store(&o, m, !strcmp(o.cmd, "init") ? SKV_STORE_CREATE : ro ? SKV_STORE_READONLY : 0);
    int rc = st ? run_cmd(&o, m, st) : CLI_FAIL;
    skv_store_close(st);
    skv_model_free(m);
    return rc;
}
