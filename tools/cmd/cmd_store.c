/* seqkv store: the session store (docs/store.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
    const char *dir, *name, *model, *file, *out, *kv, *prompt;
    long long budget; /* -1: not given */
    long threads, generate;
    int verify, lossy_text;
    int reuse;                  /* get: 0 exact, 1 near (docs/near.md) */
    double recompute, quality;  /* get --reuse near: < 0 = not given */
    double price;               /* gc --price: < 0 = not given */
    long dict_ids;              /* dict --ids */
} store_opts;

#define F(x) offsetof(store_opts, x)
#define STORE_COMMON {"model", 'm', CLI_PATH, "MODEL", 0, 0, F(model), \
                      "model file (GGUF, or llama2.c .bin); default: the one the store\n" \
                      "recorded (init: $SEQKV_MODEL, else the bundled model)"}, \
                     CLI_OPT_THREADS(F(threads))
#define STORE_BUDGET {"budget", 0, CLI_BYTES, "BYTES", 0, 9e18, F(budget), \
                      "bytes of materialised KV the placement policy may keep (default 64M;\n" \
                      "suffixes K, M, G = powers of 1024)"}

static const cli_opt init_opts[] = {STORE_COMMON, STORE_BUDGET, {0}};
static const cli_opt gc_opts[] = {STORE_COMMON, STORE_BUDGET,
    {"price", 0, CLI_FLOAT, "S", 1e-15, 1e6, F(price), "storage price of the tier rule: seconds of restore time one\n"
     "stored byte is worth (default 2e-5; docs/store.md \"Tiers\")"}, {0}};
static const cli_opt dict_opts[] = {STORE_COMMON,
    {"ids", 0, CLI_INT, "N", 1, 1 << 20, F(dict_ids), "dictionary length, ids (default 65536)"}, {0}};
static const cli_opt plain_opts[] = {STORE_COMMON, {0}};
static const cli_opt match_opts[] = {STORE_COMMON, CLI_OPT_FILE(F(file), "TEXT", "the text ('-' = stdin)"), {0}};
static const cli_opt put_opts[] = {
    STORE_COMMON,
    CLI_OPT_FILE(F(file), "TEXT", "the text, tokenized with BOS ('-' = stdin)"),
    CLI_OPT_LOSSY_TEXT(F(lossy_text)),
    {"name", 0, CLI_STR, "NAME", 0, 0, F(name), "the session's name (default: the file's base name)"},
    {"generate", 0, CLI_INT, "N", -1, 1 << 20, F(generate), "store the prompt followed by N greedily generated tokens\n"
                                                            "(-1: until the end-of-sequence token or a full context)"},
    CLI_OPT_PROMPT(F(prompt), "the prompt of --generate"),
    {0},
};
static const cli_opt get_opts[] = {
    STORE_COMMON,
    CLI_OPT_OUTPUT(F(out), "TEXT", "write the session's text ('-' = stdout; the report then goes to stderr)"),
    {"kv", 0, CLI_PATH, "OUT.kv", 0, 0, F(kv), "write the KV cache as a raw dump (docs/kvdump.md; '-' = stdout)"},
    CLI_OPT_VERIFY(F(verify), NULL, "skip checking the restored KV against the session's digest\n"
                                    "(checked by default, as restore does; --verify is accepted too)"),
    {"reuse", 0, CLI_CHOICE, "exact|near", 0, 0, F(reuse),
     "near: NAME is a text file, not a session; build its KV from the nearest stored session\n"
     "(shared spans re-rotated, selective recompute): APPROXIMATE, marked so (docs/near.md)"},
    {"recompute", 0, CLI_FLOAT, "F", 0, 1, F(recompute), "--reuse near: fraction of positions to recompute (default 0.15)"},
    {"quality", 0, CLI_FLOAT, "KL", 1e-12, 100, F(quality),
     "--reuse near: target mean KL (nats); picks the fraction from the measured calibration"},
    {0},
};

#undef F

static const cli_cmd init_cmd = {"store init", "DIR [-m MODEL] [--budget BYTES]\n",
                                 "Creates the store (or opens an existing one of the same model).\n", init_opts, 1, NULL};
static const cli_cmd put_cmd = {
    "store put", "DIR (-f TEXT | --generate N -p TEXT) [--name NAME] [--lossy-text] [-m MODEL] [-t N]\n",
    "Stores the session of a text under NAME. Prints what was shared with stored sessions\n"
    "and what the placement policy changed.\n", put_opts, 1, NULL};
static const cli_cmd get_cmd = {"store get", "DIR NAME [-o TEXT] [--kv OUT.kv] [--no-verify] [-m MODEL] [-t N]\n"
                                "       DIR TEXT --reuse near [--recompute F | --quality KL] [-o TEXT] [--kv OUT.kv]\n",
                                "Restores a session: loads its longest materialised prefix, recomputes the rest.\n"
                                "Output files are replaced only when the restore succeeds.\n", get_opts, 2, NULL};
static const cli_cmd match_cmd = {"store match", "DIR -f TEXT [-m MODEL]\n",
                                  "The longest stored prefix of the text's tokens, its d_T = -log2 P_M(prefix) in bits,\n"
                                  "and how many positions a restore of that prefix would load vs recompute.\n",
                                  match_opts, 1, NULL};
static const cli_cmd ls_cmd = {"store ls", "DIR [-m MODEL]\n",
                               "Lists sessions: name, tokens, put time (UTC), KV digest.\n", plain_opts, 1, NULL};
static const cli_cmd stats_cmd = {"store stats", "DIR [-m MODEL]\n",
                                  "Sizes, dedup, bits per position, the policy's parameters.\n", plain_opts, 1, NULL};
static const cli_cmd rm_cmd = {"store rm", "DIR NAME [-m MODEL]\n",
                               "Removes a session (and the nodes only it needed).\n", plain_opts, 2, NULL};
static const cli_cmd dict_cmd = {"store dict", "DIR [--ids N] [-m MODEL]\n",
                                 "Trains a cmvd dictionary on the store's sessions; new cheap-coded nodes use it\n"
                                 "(then 'store gc' re-codes the older ones).\n", dict_opts, 1, NULL};
static const cli_cmd gc_cmd = {"store gc", "DIR [--budget BYTES] [--price S] [-m MODEL]\n",
                               "Checks the trie and applies the placement policy now (after changing the budget).\n",
                               gc_opts, 1, NULL};

static int fail(skv_store *st) { cli_error("%s", skv_store_last_error(st)); return CLI_FAIL; }

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The prompt followed by n greedily generated tokens (n = -1: until the end-of-sequence
 * token or a full context). */
static int32_t *generate(skv_model *m, const char *prompt, long n, int threads, size_t *n_out)
{
    skv_model_info info;
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    size_t np = 0, i = 0;
    int until_eos = n < 0;
    skv_model_get_info(m, &info);
    int32_t *p = cli_tokenize(m, prompt, strlen(prompt), 1, &np);
    if (until_eos) n = (long)info.n_ctx_train - (long)np;
    float *lg = malloc((size_t)info.n_vocab * sizeof *lg);
    int32_t *t = p && n > 0 ? realloc(p, (np + (size_t)n) * sizeof *t) : NULL;
    cp.n_threads = threads;
    if (!t || !lg || np + (size_t)n > (size_t)info.n_ctx_train || skv_ctx_create(m, &cp, &c) ||
        skv_ctx_prefill(c, t, np, SKV_LOGITS_LAST, lg)) {
        cli_error("cannot generate %ld tokens after a %zu-token prompt (context %d)", n, np, info.n_ctx_train);
        free(t ? t : p);
        t = NULL;
    }
    for (i = 0; t && i < (size_t)n; i++) {
        int32_t best = 0;
        for (int v = 1; v < info.n_vocab; v++) if (lg[v] > lg[best]) best = v;
        if (until_eos && best == info.eos_id) break;
        t[np + i] = best;
        if (i + 1 < (size_t)n && skv_ctx_decode(c, best, lg)) { free(t); t = NULL; }
    }
    skv_ctx_free(c);
    free(lg);
    *n_out = np + i;
    return t;
}

static int do_put(const store_opts *o, skv_model *m, skv_store *st)
{
    size_t n = 0, len;
    int32_t *tok = NULL;
    const char *name = o->name;
    if (!!o->file == !!o->generate || (o->generate && !o->prompt))
        return cli_usage(&put_cmd, "needs -f TEXT, or --generate N with -p TEXT");
    if (!name && (!o->file || !strcmp(o->file, "-")))
        return cli_usage(&put_cmd, "needs --name NAME (no file name to default to)");
    if (!name) name = base_name(o->file);
    if (o->file) {
        char *text = cli_read_file(o->file, &len);
        if (!text) return CLI_FAIL;
        tok = cli_text_tokens(m, o->file, text, len, o->lossy_text, &n);
        free(text);
    } else {
        tok = generate(m, o->prompt, o->generate, (int)o->threads, &n);
    }
    if (!tok) return CLI_FAIL;
    skv_store_put_report r;
    cli_progress pr;
    cli_progress_start(&pr, "store put");
    skv_store_set_progress(st, cli_progress_cb, &pr);
    int rc = skv_store_put(st, name, tok, n, &r);
    cli_progress_end(&pr);
    skv_store_set_progress(st, NULL, NULL);
    free(tok);
    if (rc) return fail(st);
    if (r.existed) {
        printf("'%s' is stored already with these %u tokens: nothing to do\n", name, r.n_tokens);
        return CLI_OK;
    }
    printf("stored '%s': %u tokens, %u shared with stored sessions; %u positions loaded + %u computed; "
           "%.1f bits under the model; policy: +%u materialised, %u demoted; %.3f s\n",
           name, r.n_tokens, r.n_shared, r.n_loaded, r.n_computed, r.bits, r.n_materialised, r.n_demoted, r.seconds);
    cli_resident_note(stdout, m);
    return CLI_OK;
}

/* Writes the restored session's text and KV dump (opened before the restore), then commits both. */
static int get_outputs(const skv_model *m, const skv_ctx *c, const int32_t *tok, size_t n, cli_out *text, cli_out *kv)
{
    char err[512];
    const char *path = NULL;
    int after_bos = 0;
    if (text->dest && cli_write_tokens(text->f, m, tok, n, &after_bos)) return -1;
    if (kv->dest && !(path = cli_out_path(kv))) return -1;
    if (kv->dest && skv_kvdump_write(c, tok, n, SKV_KVDUMP_F32, path, err, sizeof err)) {
        cli_error("%s", err);
        return -1;
    }
    return cli_out_commit(text) || cli_out_commit(kv) ? -1 : 0;
}

/* Discards unfinished outputs and frees a get's context and tokens; returns ret. */
static int get_done(cli_out *text, cli_out *kv, skv_ctx *c, int32_t *tok, int ret)
{
    cli_out_discard(text);
    cli_out_discard(kv);
    skv_ctx_free(c);
    free(tok);
    return ret;
}

/* store get DIR TEXT --reuse near: the text's KV from the nearest stored session. */
static int do_get_near(const store_opts *o, skv_model *m, skv_store *st)
{
    skv_store_near_params np = skv_store_near_default_params();
    skv_store_near_report r;
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    cli_out text = {0}, kv = {0};
    size_t n = 0, len;
    int ret = CLI_FAIL;
    char *src = cli_read_file(o->name, &len);
    int32_t *tok = src ? cli_text_tokens(m, o->name, src, len, o->lossy_text, &n) : NULL;
    free(src);
    np.recompute = o->recompute, np.kl_target = o->quality > 0 ? o->quality : 0;
    cp.n_threads = (int)o->threads;
    if (!tok || cli_out_open(&text, o->out) || cli_out_open(&kv, o->kv) || skv_ctx_create(m, &cp, &c)) goto done;
    if (skv_store_get_near(st, tok, n, c, &np, NULL, &r)) {
        ret = fail(st);
        goto done;
    }
    if (get_outputs(m, c, tok, n, &text, &kv)) goto done;
    FILE *rep = cli_report_stream(o->out, o->kv);
    fprintf(rep, "%s near restore of '%s': %u tokens from '%s': %u exact (common prefix), %u reused from other "
            "positions (%u spans, K re-rotated), %u recomputed (%u at seams, %u by the deviation estimate); "
            "recompute fraction %.2f; %.1f ms donor restore, %.1f ms reuse, %.1f ms compute\n",
            r.approximate ? "APPROXIMATE" : "exact", o->name, r.n_tokens, r.donor[0] ? r.donor : "(none)", r.n_exact,
            r.n_approx, r.n_spans, r.n_recomputed, r.n_seam, r.n_extra, r.fraction, r.donor_seconds * 1e3,
            r.reuse_seconds * 1e3, r.compute_seconds * 1e3);
    if (r.approximate) fprintf(rep, "APPROXIMATE: the KV is not what a fresh prefill gives (docs/near.md)\n");
    ret = CLI_OK;
done:
    return get_done(&text, &kv, c, tok, ret);
}

static int do_get(const store_opts *o, skv_model *m, skv_store *st)
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_model_info info;
    skv_ctx *c = NULL;
    skv_store_get_report r;
    cli_out text = {0}, kv = {0};
    size_t n = 0;
    int ret = CLI_FAIL;
    if (o->recompute >= 0 && o->quality > 0) return cli_usage(&get_cmd, "give --recompute F or --quality KL, not both");
    if (!o->reuse && (o->recompute >= 0 || o->quality > 0))
        return cli_usage(&get_cmd, "--recompute and --quality need --reuse near");
    if (o->reuse) return do_get_near(o, m, st);
    skv_model_get_info(m, &info);
    int32_t *tok = malloc((size_t)info.n_ctx_train * sizeof *tok);
    cp.n_threads = (int)o->threads;
    if (cli_out_open(&text, o->out) || cli_out_open(&kv, o->kv)) goto done;
    if (!tok || skv_ctx_create(m, &cp, &c)) {
        cli_error("out of memory");
        goto done;
    }
    cli_progress pr;
    cli_progress_start(&pr, "store get");
    skv_store_set_progress(st, cli_progress_cb, &pr);
    int grc = skv_store_get(st, o->name, c, o->verify ? SKV_STORE_VERIFY : 0, tok, (size_t)info.n_ctx_train, &n, &r);
    cli_progress_end(&pr);
    skv_store_set_progress(st, NULL, NULL);
    if (grc) {
        ret = fail(st);
        goto done;
    }
    if (get_outputs(m, c, tok, n, &text, &kv)) goto done;
    FILE *rep = cli_report_stream(o->out, o->kv);
    fprintf(rep, "restored '%s': %u tokens: %u positions loaded from materialised KV (%.1f ms), %u recomputed (%.1f ms)%s\n",
            o->name, r.n_tokens, r.n_loaded, r.load_seconds * 1e3, r.n_computed, r.compute_seconds * 1e3,
            r.verified ? "; KV digest verified" : "");
    if (r.n_materialised) fprintf(rep, "policy: materialised %u nodes of its path from this restore\n", r.n_materialised);
    cli_resident_note(rep, m);
    ret = CLI_OK;
done:
    return get_done(&text, &kv, c, tok, ret);
}

static int do_match(const store_opts *o, skv_model *m, skv_store *st)
{
    size_t n = 0, len;
    skv_store_match_result r;
    if (!o->file) return cli_usage(&match_cmd, "needs -f TEXT");
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

static void print_tiers(const skv_store_stats *s)
{
    static const char *names[4] = {"kv (materialised)", "tokens (raw)", "cmv", "cmvd"};
    printf("tiers: price %.3g s/byte; cheap coding %.0f positions/s, %.2f bytes/position (measured);\n"
           "       cost = price x bytes + (hits + refcount + prior_weight x 2^-d_T) x decode seconds; dictionary ",
           s->price, s->cm_tps, s->cm_bpp);
    if (s->dict_id) printf("%016llx (%u ids)\n", (unsigned long long)s->dict_id, s->dict_ids);
    else printf("none\n");
    for (int i = 0; i < 4; i++)
        printf("  %-18s %8llu nodes %10llu positions %12llu bytes (%.2f bytes/position)\n", names[i],
               (unsigned long long)s->tier_nodes[i], (unsigned long long)s->tier_positions[i],
               (unsigned long long)s->tier_bytes[i],
               s->tier_positions[i] ? (double)s->tier_bytes[i] / (double)s->tier_positions[i] : 0.0);
}

/* A Redis store ("redis://...", "unix://..."): its bytes are Redis's, its gc checks less. */
static int is_url(const char *dir) { return strstr(dir, "://") != NULL; }

static void print_stats(const skv_store_stats *s, int redis)
{
    double mib = 1048576.0;
    printf("model:                     %s\n", s->model_name);
    printf("sessions:                  %llu\n", (unsigned long long)s->n_sessions);
    printf("session tokens:            %llu\n", (unsigned long long)s->session_tokens);
    printf("unique stored positions:   %llu in %llu trie nodes\n", (unsigned long long)s->unique_positions,
           (unsigned long long)s->n_nodes);
    printf("dedup ratio:               %.2fx (session tokens / unique positions)\n", s->dedup_ratio);
    printf("bytes on disk:             %llu (%.2f MiB; %s)\n", (unsigned long long)s->disk_bytes,
           (double)s->disk_bytes / mib, redis ? "Redis MEMORY USAGE of the store's keys" : "LMDB pages in use");
    printf("bits per session position: %.1f (bytes on disk x 8 / session tokens)\n", s->bits_per_position);
    if (s->kv_misses || s->node_misses) /* a Redis store whose maxmemory policy evicted records */
        printf("evicted records found:     %llu KV blobs (recomputed), %llu trie nodes / sessions (misses)\n",
               (unsigned long long)s->kv_misses, (unsigned long long)s->node_misses);
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
    print_tiers(s);
}

static int do_init(const store_opts *o, skv_model *m, skv_store *st)
{
    skv_store_stats s;
    (void)m;
    if (skv_store_get_stats(st, &s)) return fail(st);
    printf("store '%s' ready for model '%s' (%llu sessions, budget %llu bytes)\n", o->dir, s.model_name,
           (unsigned long long)s.n_sessions, (unsigned long long)s.budget);
    return CLI_OK;
}

static int do_ls(const store_opts *o, skv_model *m, skv_store *st)
{
    (void)o, (void)m;
    return skv_store_list(st, print_session, NULL) ? fail(st) : CLI_OK;
}

static int do_stats(const store_opts *o, skv_model *m, skv_store *st)
{
    skv_store_stats s;
    (void)o, (void)m;
    skv_store_near_stats ns;
    if (skv_store_get_stats(st, &s) || skv_store_get_near_stats(st, &ns)) return fail(st);
    print_stats(&s, is_url(o->dir));
    printf("near reuse (APPROXIMATE):  %llu near gets, %llu approximate; positions %llu exact, %llu reused "
           "approximately, %llu recomputed\n", (unsigned long long)ns.n_gets, (unsigned long long)ns.n_approximate,
           (unsigned long long)ns.positions_exact, (unsigned long long)ns.positions_approx,
           (unsigned long long)ns.positions_recomputed);
    return CLI_OK;
}

static int do_rm(const store_opts *o, skv_model *m, skv_store *st)
{
    (void)m;
    if (skv_store_remove(st, o->name)) return fail(st);
    printf("removed '%s'\n", o->name);
    return CLI_OK;
}

static int do_gc(const store_opts *o, skv_model *m, skv_store *st)
{
    skv_store_gc_report g;
    (void)m;
    if (o->price > 0 && skv_store_set_price(st, o->price)) return fail(st);
    if (skv_store_gc(st, &g)) return fail(st);
    printf("%s; demoted %u nodes to tokens, freed %llu bytes; re-materialised %u nodes; "
           "materialised KV now %llu bytes; %u token-only nodes changed tier\n",
           is_url(o->dir) ? "KV blobs checked (Redis: not the trie, which evictions may cut)" : "trie and KV blobs checked",
           g.n_demoted, (unsigned long long)g.bytes_freed, g.n_materialised, (unsigned long long)g.mat_bytes,
           g.n_retiered);
    return CLI_OK;
}

static int do_dict(const store_opts *o, skv_model *m, skv_store *st)
{
    uint64_t id;
    size_t n;
    (void)m;
    if (skv_store_train_dict(st, (size_t)o->dict_ids, &id, &n)) return fail(st);
    printf("dictionary %016llx: %zu ids from the store's sessions; new cheap-coded nodes use it\n",
           (unsigned long long)id, n);
    return CLI_OK;
}

static const struct {
    const cli_cmd *cmd;
    int (*run)(const store_opts *o, skv_model *m, skv_store *st);
    int flags; /* skv_store_open's */
    const char *what;
} subs[] = {
    {&init_cmd, do_init, SKV_STORE_CREATE, "create a store for a model"},
    {&put_cmd, do_put, 0, "store a text's session, or a greedy generation"},
    {&get_cmd, do_get, 0, "restore a session"},
    {&match_cmd, do_match, SKV_STORE_READONLY, "longest stored prefix, d_T, load vs compute"},
    {&ls_cmd, do_ls, SKV_STORE_READONLY, "list the sessions"},
    {&stats_cmd, do_stats, SKV_STORE_READONLY, "sizes, dedup, bits per position, policy"},
    {&rm_cmd, do_rm, 0, "remove a session"},
    {&gc_cmd, do_gc, 0, "check the trie, apply the placement policy"},
    {&dict_cmd, do_dict, 0, "train the store's cmvd dictionary on its sessions"},
};

static void store_help(FILE *f)
{
    fprintf(f, "usage: seqkv store COMMAND DIR [options]   (seqkv store COMMAND --help for each)\n\n"
               "A persistent store of many sessions' KV caches in directory DIR (LMDB). Shared prefixes\n"
               "are stored once (a radix trie over token ids whose nodes carry the model's surprisal);\n"
               "valuable prefixes keep their KV materialised within a byte budget, the rest is\n"
               "recomputed from tokens on restore, bit-identical to a fresh run.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof subs / sizeof *subs; i++)
        fprintf(f, "  %s %.*s\n      %s\n", subs[i].cmd->name + 6, (int)strcspn(subs[i].cmd->usage, "\n"),
                subs[i].cmd->usage, subs[i].what);
    fprintf(f, "\nA store records the model it was made with (file path and fingerprint): the commands\n"
               "load that file when -m is not given, and refuse a store made with another model.\n"
               "'init' without -m uses $SEQKV_MODEL, else the bundled model.\n"
               "\nDIR may instead be a Redis store shared by processes and machines:\n"
               "  redis://HOST:PORT/PREFIX, unix:///path.sock?prefix=PREFIX,\n"
               "  redis+sentinel://HOST:PORT,.../MASTER/PREFIX, redis+cluster://HOST:PORT,.../PREFIX\n"
               "  (add ?shards=N to spread one store over a cluster's masters; docs/store.md).\n");
}

static void hex16(char out[33], const uint8_t fp[16])
{
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", fp[i]);
}

/* The model file a store command loads: -m, else the one the store recorded, else (init,
 * or a store that records no file) the default. NULL after a message that says what to do. */
static const char *store_model_path(size_t k, const store_opts *o)
{
    static skv_store_model sm;
    char err[600], fp[33];
    if (o->model) return o->model;
    if (subs[k].flags & SKV_STORE_CREATE) return cli_default_model();
    int rc = skv_store_model_info(o->dir, &sm, err, sizeof err);
    if (rc) {
        /* a refused connection is no missing store: only a store that is not there gets the hint */
        int hint = rc == SKV_ERR_IO && !strstr(err, "store init") && !is_url(o->dir);
        cli_error("%s%s", err, hint ? " (create one with 'seqkv store init DIR [-m MODEL]')" : "");
        return NULL;
    }
    if (!sm.path[0]) return cli_default_model(); /* opening checks it is the right one */
    if (access(sm.path, R_OK) == 0) return sm.path;
    hex16(fp, sm.fingerprint);
    cli_error("store '%s' was made with model '%s' (fingerprint %s) from '%s', which cannot be read (%s): "
              "pass that model with -m MODEL", o->dir, sm.name, fp, sm.path, strerror(errno));
    return NULL;
}

/* The open's message for a store of another model, and the model to pass instead. */
static void mismatch_hint(const char *dir, const char *err)
{
    skv_store_model sm;
    char fp[33];
    if (skv_store_model_info(dir, &sm, NULL, 0) != SKV_OK) {
        cli_error("%s: pass the store's model with -m MODEL", err);
        return;
    }
    hex16(fp, sm.fingerprint);
    cli_error("%s: pass the store's model ('%s', fingerprint %s%s%s) with -m MODEL", err, sm.name, fp,
              sm.path[0] ? ", recorded at " : "", sm.path);
}

uint64_t cli_store_map_size(void)
{
    const char *s = getenv("SEQKV_STORE_MAP_SIZE");
    char *end = NULL;
    unsigned long long v = s && *s ? strtoull(s, &end, 10) : 0;
    return end && *end == 0 ? (uint64_t)v : 0;
}

/* About how many forward passes the command runs (cli_load_model_sweeps): none for those
 * that read the store's records only; put's bounded from its text file; get, gc and dict
 * unknown before the store is open (UINT64_MAX: the engine's default). */
static uint64_t store_sweeps(size_t k, const store_opts *o)
{
    int (*run)(const store_opts *, skv_model *, skv_store *) = subs[k].run;
    if (run == do_init || run == do_match || run == do_ls || run == do_stats || run == do_rm) return 0;
    if (run == do_put && o->file && !o->generate) return cli_text_sweeps(o->file, 0, 0);
    return UINT64_MAX;
}

static int open_and_run(size_t k, const store_opts *o)
{
    skv_store_params p = skv_store_default_params();
    skv_store *st = NULL;
    char err[600];
    const char *path = store_model_path(k, o);
    skv_model *m = path ? cli_load_model_sweeps(path, store_sweeps(k, o)) : NULL;
    int rc = CLI_FAIL;
    p.budget = o->budget;
    p.map_size = cli_store_map_size();
    p.n_threads = (int)o->threads;
    p.model_path = path;
    int orc = m ? skv_store_open(o->dir, m, subs[k].flags, &p, &st, err, sizeof err) : SKV_OK;
    if (orc == SKV_ERR_MISMATCH) mismatch_hint(o->dir, err);
    else if (orc) cli_error("%s", err);
    else if (m) rc = subs[k].run(o, m, st);
    skv_store_close(st);
    skv_model_free(m);
    return rc;
}

int cmd_store(int argc, char **argv)
{
    store_opts o = {.budget = -1, .threads = 1, .verify = 1, .recompute = -1, .quality = -1, .price = -1};
    const char *pos[2] = {NULL, NULL};
    size_t k = 0, n_subs = sizeof subs / sizeof *subs;
    int n_pos = 0;
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        store_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    while (k < n_subs && strcmp(subs[k].cmd->name + 6, argv[1])) k++;
    if (k == n_subs) {
        cli_error("unknown store command '%s' (see seqkv store --help)", argv[1]);
        return CLI_USAGE;
    }
    const cli_cmd *cmd = subs[k].cmd;
    int rc = cli_parse(cmd, argc - 1, argv + 1, &o, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (n_pos < cmd->max_pos) return cli_usage(cmd, cmd->max_pos == 2 ? "needs DIR NAME" : "needs the store directory");
    o.dir = pos[0];
    o.name = n_pos == 2 ? pos[1] : o.name;
    return open_and_run(k, &o);
}
