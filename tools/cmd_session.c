/* seqkv compress | restore | inspect: .skv session files. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Reads and opens a .skv file ("-" = stdin); NULL after a message. */
/* Codecs that store quantized KV (restored without running the model). */
static int is_kv_codec(int codec) { return (codec >= SKV_CODEC_F16 && codec <= SKV_CODEC_KVQ) || codec == SKV_CODEC_PRED; }

static skv_session *open_session(const char *path)
{
    size_t len = 0;
    char *bytes = cli_read_file(path, &len), err[512];
    skv_session *s = NULL;
    if (!bytes) return NULL;
    if (skv_session_open(bytes, len, &s, err, sizeof err)) cli_error("%s: %s", path, err);
    free(bytes);
    return s;
}

/* Whitespace-separated decimal token ids. */
static int32_t *parse_ids(const char *text, size_t *n)
{
    size_t cap = 1024, k = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = text;
    while (ids) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && !isspace((unsigned char)*end))) {
            cli_error("token-id file: '%.20s' is not a token id", p);
            free(ids);
            return NULL;
        }
        if (k == cap) {
            int32_t *nb = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!nb) break;
            ids = nb;
        }
        ids[k++] = (int32_t)v;
        p = end;
    }
    *n = k;
    return ids;
}

/* ---- compress -------------------------------------------------------------------- */

typedef struct {
    const char *model, *file, *ids, *kv_in, *out, *codec, *kv_quant, *cm_dict;
    long threads, ctx;
    int segment, lossy_text;
} compress_opts;

#define F(x) offsetof(compress_opts, x)

static const cli_opt compress_opts_table[] = {
    CLI_OPT_MODEL(F(model)),
    CLI_OPT_FILE(F(file), "TEXT", "text file, tokenized with BOS first ('-' = stdin)"),
    CLI_OPT_LOSSY_TEXT(F(lossy_text)),
    {"ids", 0, CLI_PATH, "IDS", 0, 0, F(ids), "whitespace-separated token ids instead of text ('-' = stdin)"},
    {"kv-in", 0, CLI_PATH, "DUMP", 0, 0, F(kv_in), "the tokens of a KV dump written by 'seqkv kv-dump' ('-' = stdin)"},
    CLI_OPT_OUTPUT(F(out), "OUT.skv", "the session file ('-' = stdout; the report then goes to stderr)"),
    {"codec", 0, CLI_STR, "CODEC", 0, 0, F(codec),
     "model: arithmetic-code the tokens under the model (default; smallest,\n"
     "  restored token by token)\n"
     "tokens: raw token ids, zstd-compressed (restored by one parallel prefill)\n"
     "cm: the ids coded under a cheap context-mixing model of the ids (smaller\n"
     "  than tokens; restored by one parallel prefill too)\n"
     "f16|q8|q4|tq2|tq3|tq4: the tokens (as 'tokens') plus every position's KV\n"
     "  quantized per vector (lossy; restored without running the model:\n"
     "  docs/format.md 2.3)\n"
     "kvq: the same with the schemes of --kv-quant\n"
     "pred: the tokens plus the KV coded predictively across positions (lossy,\n"
     "  restored without the model: docs/format.md 2.5)\n"
     "cmv: cm with the vocabulary's own side information (smaller than cm)\n"
     "cmvd: cmv primed by the dictionary of --cm-dict (smallest of the cheap\n"
     "  codecs; the restore needs the same dictionary)"},
    {"cm-dict", 0, CLI_PATH, "TEXT", 0, 0, F(cm_dict), "with --codec cmvd: the dictionary text (tokenized, BOS first)"},
    {"kv-quant", 0, CLI_STR, "SPEC", 0, 0, F(kv_quant),
     "with --codec kvq: schemes per kind, e.g. k=tq4,v=tq3 or tq3p,seed=7\n"
     "(schemes f32 f16 q8_0 q4_0 tq1..tq4 tq2p..tq4p);\n"
     "with --codec pred: PREDICTOR[,ramp][,surprisal][,step=S][,kstep=S][,vstep=S]\n"
     "[,rate=BITS], predictors none delta lpc lpc2 tok (default tok,ramp,step=1);\n"
     "surprisal: finer steps where the model was surprised; rate: KV bits per position"},
    CLI_OPT_CTX(F(ctx), 1, "context (segment capacity) in positions; default: the model's"),
    {"segment", 0, CLI_FLAG, NULL, 0, 0, F(segment), "allow sessions longer than the context: stored as consecutive\n"
                                                     "independent segments, each with a fresh context"},
    CLI_OPT_THREADS(F(threads)),
    {0},
};

#undef F

static const cli_cmd compress_cmd = {
    "compress", "[-m MODEL] (-f TEXT | --ids IDS | --kv-in DUMP) -o OUT.skv\n"
                "[--codec CODEC] [--kv-quant SPEC] [--segment] [--lossy-text] [-c N] [-t N]\n",
    "Stores a session (the KV cache of a text) as a .skv file (docs/format.md).\n", compress_opts_table, 0,
    "Prints the size in bits per token position next to the model's cross-entropy and the\n"
    "size of the same KV cache as f16 and as TurboQuant-3.5.\n"};

/* The codec id, or CLI_USAGE after a message. */
static int compress_check(const compress_opts *o, int *codec)
{
    char qerr[256];
    if (!!o->file + !!o->ids + !!o->kv_in != 1 || !o->out)
        return cli_usage(&compress_cmd, "needs exactly one input (-f, --ids or --kv-in) and -o OUT.skv");
    if ((*codec = skv_codec_parse(o->codec)) < 0)
        return cli_usage(&compress_cmd, "--codec must be one of model tokens cm cmv cmvd f16 q8 q4 tq2 tq3 tq4 kvq pred, not '%s'",
                         o->codec);
    if ((*codec == SKV_CODEC_CMVD) != !!o->cm_dict)
        return cli_usage(&compress_cmd, "--cm-dict TEXT goes with --codec cmvd (and --codec cmvd needs it)");
    if (*codec == SKV_CODEC_PRED) return CLI_CONTINUE; /* --kv-quant optional (the encoder checks it) */
    if ((*codec == SKV_CODEC_KVQ) != !!o->kv_quant)
        return cli_usage(&compress_cmd, "--kv-quant SPEC goes with --codec kvq (and --codec kvq needs it)");
    if (o->kv_quant && skv_kv_quant_check(o->kv_quant, NULL, qerr, sizeof qerr))
        return cli_usage(&compress_cmd, "%s", qerr);
    return CLI_CONTINUE;
}

/* The tokens of a KV dump. Dumps are read by name: stdin ("-") is spooled to a scratch file. */
static int32_t *dump_tokens(const char *path, skv_model *m, size_t *n)
{
    cli_out spool = {0};
    size_t len = 0;
    char err[512], *bytes = NULL;
    skv_kvdump *d = NULL;
    int32_t *tok = NULL;
    if (!strcmp(path, "-") && !cli_out_open(&spool, "-") && (bytes = cli_read_file("-", &len)))
        path = cli_out_path(&spool);
    if (bytes && path && cli_write_file(path, bytes, len)) path = NULL;
    free(bytes);
    if (path && (skv_kvdump_read(path, &d, err, sizeof err) || skv_kvdump_check_model(d, m, err, sizeof err)))
        cli_error("%s", err);
    else if (d && (tok = malloc((d->n_pos + 1) * sizeof *tok))) {
        memcpy(tok, d->tokens, d->n_pos * sizeof *tok);
        *n = d->n_pos;
    }
    skv_kvdump_free(d);
    cli_out_discard(&spool);
    return tok;
}

/* --cm-dict TEXT: the dictionary's ids (BOS first); NULL after a message. */
static int32_t *cli_dict_tokens(skv_model *m, const char *path, size_t *n)
{
    size_t len = 0;
    char *text = cli_read_file(path, &len);
    int32_t *tok = text ? cli_text_tokens(m, path, text, len, 0, n) : NULL;
    free(text);
    return tok;
}

/* The input's tokens (-f, --ids or --kv-in); NULL after a message. */
static int32_t *compress_input(const compress_opts *o, skv_model *m, size_t *n)
{
    int32_t *tok = NULL;
    size_t len = 0;
    if (o->kv_in) {
        tok = dump_tokens(o->kv_in, m, n);
    } else {
        char *text = cli_read_file(o->file ? o->file : o->ids, &len);
        if (text && o->file) tok = cli_text_tokens(m, o->file, text, len, o->lossy_text, n);
        else if (text) tok = parse_ids(text, n);
        free(text);
    }
    if (tok && !*n) {
        cli_error("the input holds no tokens: nothing to store (give a non-empty input)");
        free(tok);
        tok = NULL;
    }
    return tok;
}

static skv_encoder *make_encoder(const compress_opts *o, int codec, skv_model *m)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    ep.codec = codec;
    ep.kv_quant = o->kv_quant;
    ep.n_threads = (int)o->threads;
    ep.segment = o->segment;
    ep.n_ctx = (int)o->ctx;
    int32_t *dict = NULL;
    if (o->cm_dict && !(dict = cli_dict_tokens(m, o->cm_dict, &ep.n_cm_dict))) return NULL;
    ep.cm_dict = dict;
    char err[256] = "";
    int st = skv_encoder_create(m, &ep, &e, err, sizeof err);
    free(dict);
    if (st)
        cli_error("cannot create the encoder: %s%s", err[0] ? err : skv_status_str(st),
                  codec == SKV_CODEC_KVQ ? " (the spec may give only k=, v=, kv= and seed=, both kinds, with schemes "
                                           "that support the model's head_dim)" : "");
    return e;
}

/* Appends the tokens in chunks, with a progress line. */
static int encode(skv_encoder *e, const int32_t *tok, size_t n)
{
    cli_progress pr;
    int st = 0;
    cli_progress_start(&pr, "compress");
    for (size_t done = 0; done < n && !st;) {
        size_t k = n - done < 256 ? n - done : 256;
        st = skv_encoder_append(e, tok + done, k, NULL);
        done += st ? 0 : k;
        cli_progress_update(&pr, done, n);
    }
    cli_progress_end(&pr);
    if (!st) return 0;
    cli_error("%s", skv_encoder_last_error(e));
    if (st == SKV_ERR_RANGE) fprintf(stderr, "       (the input is %zu tokens; pass --segment to store it as segments)\n", n);
    return -1;
}

/* Quantized-KV codecs: the token and KV parts separately, the ratio to f16 KV and the
 * quality the writer measured. */
static void print_kv_report(FILE *rep, const skv_session *s, size_t n, size_t size, double f16)
{
    skv_session_info si;
    skv_session_kv_info ki;
    uint64_t tb = 0, kb = 0;
    double mse[2] = {0, 0};
    skv_session_get_info(s, &si);
    for (uint32_t i = 0; i < si.n_segments; i++) {
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        skv_session_segment_kv_info(s, i, &ki);
        tb += ki.tokens_bytes;
        kb += ki.kv_bytes;
        for (int k = 0; k < 2; k++) mse[k] += (double)ki.rel_mse[k] * nt;
    }
    fprintf(rep, "KV schemes:            k=%s,v=%s, seed %llu (%llu bytes/position)\n", ki.scheme[0], ki.scheme[1],
            (unsigned long long)ki.seed, (unsigned long long)ki.position_bytes);
    fprintf(rep, "tokens part:           %llu bytes = %.4f bits/position (zstd varints)\n", (unsigned long long)tb,
            (double)tb * 8 / (double)n);
    fprintf(rep, "KV part:               %llu bytes = %.1f bits/position\n", (unsigned long long)kb,
            (double)kb * 8 / (double)n);
    fprintf(rep, "vs f16 KV:             %.2fx smaller (whole file vs %.0f bytes)\n", f16 * (double)n / (double)size,
            f16 * (double)n);
    fprintf(rep, "KV relative MSE:       K %.3g, V %.3g (sum |x - x~|^2 / sum |x|^2, token-weighted over segments; lossy)\n",
            mse[0] / (double)n, mse[1] / (double)n);
}

/* What compress wrote, for the report. */
typedef struct {
    const compress_opts *o;
    int codec;
    size_t n, size;
    const uint8_t *data;
    double secs, f16;
    skv_encoder_stats es;
} compress_result;

/* Payload and container sizes; the KV parts of quantized-KV codecs. */
static void report_payload(FILE *rep, const compress_result *r)
{
    uint64_t payload = 0;
    skv_session_info si = {0};
    skv_session *s = NULL;
    if (skv_session_open(r->data, r->size, &s, NULL, 0) == SKV_OK) {
        skv_session_get_info(s, &si);
        for (uint32_t i = 0; i < si.n_segments; i++) {
            uint64_t pb = 0;
            skv_session_segment_info(s, i, NULL, &pb, NULL);
            payload += pb;
        }
        if (is_kv_codec(r->codec)) print_kv_report(rep, s, r->n, r->size, r->f16);
    }
    skv_session_free(s);
    if (!r->es.n_model_coded) return;
    fprintf(rep, "model cross-entropy:   %.4f bits/token (%llu tokens predicted by the model: the floor)\n",
            r->es.model_bits / (double)r->es.n_model_coded, (unsigned long long)r->es.n_model_coded);
    fprintf(rep, "payload:               %llu bytes = %.4f bits/position\n", (unsigned long long)payload,
            (double)payload * 8 / (double)r->n);
    if (r->codec == SKV_CODEC_MODEL) {
        fprintf(rep, "quantized model:       %.4f bits/token (the same tokens under the integer frequencies)\n",
                r->es.coded_bits / (double)r->es.n_model_coded);
        fprintf(rep, "%-22s %+.2f%% (payload vs the cross-entropy; includes each segment's raw first token and the "
                     "coder flush)\n", "coder overhead:", 100.0 * ((double)payload * 8 - r->es.model_bits) / r->es.model_bits);
    }
    fprintf(rep, "container:             %zu bytes (header, %u segment record%s, checksums, KV digests)\n",
            r->size - (size_t)payload, si.n_segments, si.n_segments == 1 ? "" : "s");
}

static void compress_report(const skv_model *m, const compress_result *r)
{
    FILE *rep = cli_report_stream(r->o->out, NULL);
    skv_model_info info;
    double tq = 0, n = (double)r->n, size = (double)r->size;
    skv_model_get_info(m, &info);
    skv_kv_position_bytes(m, "tq3.5", &tq);
    fprintf(rep, "model:                 %s (%d layers, %d KV heads x %d)\n", info.name, info.n_layer, info.n_head_kv,
            info.head_dim);
    fprintf(rep, "codec:                 %s%s\n", r->o->codec, is_kv_codec(r->codec) ? " (tokens + quantized KV)" : "");
    fprintf(rep, "tokens:                %zu\n", r->n);
    fprintf(rep, "file:                  %s, %zu bytes\n", r->o->out, r->size);
    fprintf(rep, "bits per position:     %.4f (all headers and checksums counted)\n", size * 8.0 / n);
    report_payload(rep, r);
    double r16 = r->f16 * n / size, rtq = tq * n / size;
    fprintf(rep, "KV cache as f16:       %.0f bytes (%.1f bits/position) -> %.*fx smaller\n", r->f16 * n, r->f16 * 8,
            r16 < 10 ? 2 : 0, r16);
    fprintf(rep, "KV cache as TQ-3.5:    %.0f bytes (%.1f bits/position) -> %.*fx %s\n", tq * n, tq * 8, rtq < 10 ? 2 : 0,
            rtq, rtq < 1 ? "(this file is larger)" : "smaller");
    fprintf(rep, "encode time:           %.2f s (%.0f tokens/s)\n", r->secs, n / (r->secs + 1e-12));
}

static int compress_run(const compress_opts *o, int codec, skv_model *m, const int32_t *tok, size_t n, cli_out *out)
{
    compress_result r = {.o = o, .codec = codec, .n = n};
    uint8_t *data = NULL;
    skv_encoder *e = make_encoder(o, codec, m);
    int rc = CLI_FAIL;
    double t0 = cli_now();
    if (!e || encode(e, tok, n)) goto done;
    if (skv_encoder_finish(e, &data, &r.size)) {
        cli_error("%s", skv_encoder_last_error(e));
        goto done;
    }
    r.secs = cli_now() - t0;
    if (fwrite(data, 1, r.size, out->f) != r.size) cli_error("cannot write '%s': %s", o->out, strerror(errno));
    else if (!cli_out_commit(out)) rc = CLI_OK;
    if (rc) goto done;
    r.data = data;
    skv_encoder_get_stats(e, &r.es);
    skv_kv_position_bytes(m, "f16", &r.f16);
    compress_report(m, &r);
done:
    free(data);
    skv_encoder_free(e);
    return rc;
}

int cmd_compress(int argc, char **argv)
{
    compress_opts o = {.codec = "model", .threads = 1};
    int codec = 0, rc = cli_parse(&compress_cmd, argc, argv, &o, NULL, NULL);
    if (rc == CLI_CONTINUE) rc = compress_check(&o, &codec);
    if (rc != CLI_CONTINUE) return rc;
    cli_out out;
    skv_model *m = NULL;
    int32_t *tok = NULL;
    size_t n = 0;
    rc = CLI_FAIL;
    if (!cli_out_open(&out, o.out) && (m = cli_load_model(o.model)) && (tok = compress_input(&o, m, &n)))
        rc = compress_run(&o, codec, m, tok, n, &out);
    cli_out_discard(&out);
    free(tok);
    skv_model_free(m);
    return rc;
}

/* ---- restore -------------------------------------------------------------------- */

typedef struct {
    const char *model, *out, *kv, *cm_dict;
    long threads, draft_max, batch;
    int verify, draft;
} restore_opts;

#define F(x) offsetof(restore_opts, x)

static const cli_opt restore_opts_table[] = {
    CLI_OPT_MODEL(F(model)),
    CLI_OPT_OUTPUT(F(out), "TEXT", "write the session's text ('-' = stdout; the report then goes to stderr)"),
    {"kv", 0, CLI_PATH, "OUT.kv", 0, 0, F(kv), "write the regenerated KV cache as a raw dump (docs/kvdump.md;\n"
                                                "single-segment sessions; '-' = stdout)"},
    CLI_OPT_VERIFY(F(verify), NULL, "skip checking each segment's regenerated KV against the stored digest\n"
                                    "(checked by default; any mismatch exits 1; --verify is accepted too)"),
    {"draft", 0, CLI_CHOICE, "auto|none|ngram", 0, 0, F(draft),
     "codec model: 'none' decodes token by token (what 'auto', the default,\n"
     "does now); 'ngram' verifies blocks of drafted tokens in one batched\n"
     "pass (speculative decoding: faster only on sessions that repeat\n"
     "themselves). Both restore exactly the same tokens and KV."},
    {"draft-max", 0, CLI_INT, "N", 1, 256, F(draft_max), "most tokens verified per pass, 1..256 (default 16)"},
    {"cm-dict", 0, CLI_PATH, "TEXT", 0, 0, F(cm_dict), "codec cmvd: the dictionary text the file was written with"},
    {"batch", 0, CLI_INT, "N", 1, 64, F(batch),
     "codec model, several segments: decode up to N segments together, one\n"
     "forward pass per step for all of them (default 1: one at a time; not\n"
     "combined with --draft). Same tokens and KV; memory: N contexts. Pays\n"
     "when reading the weights bounds a pass (large models), not when they\n"
     "fit in cache (bench/results/restore.md)."},
    CLI_OPT_THREADS(F(threads)),
    {0},
};

#undef F

static const cli_cmd restore_cmd = {
    "restore", "[-m MODEL] IN.skv [-o TEXT] [--kv OUT.kv] [--no-verify] [-t N]\n"
               "[--draft auto|none|ngram] [--draft-max N] [--batch N]\n",
    "Regenerates a session's tokens and KV cache from a .skv file ('-' = stdin). Quantized-KV\n"
    "codecs (f16 q8 q4 tq2 tq3 tq4 kvq pred) decode the stored, lossy KV without running the model\n"
    "(the model is still loaded: its fingerprint is checked and it renders the text).\n",
    restore_opts_table, 1,
    "The model must be the one the session was written with (checked by fingerprint).\n"
    "Output files are replaced only when the restore succeeds.\n"};

typedef struct {
    cli_progress pr;
    uint64_t base, total;
} restore_progress;

static void on_progress(void *user, uint64_t done, uint64_t total)
{
    restore_progress *rp = user;
    (void)total;
    cli_progress_update(&rp->pr, (size_t)(rp->base + done), (size_t)rp->total);
}

/* Restores every segment of s in waves of up to `width` segments decoded together
 * (skv_session_restore_batch), writing the text in order. Prints its own errors. */
static int restore_waves(const skv_session *s, skv_model *m, const skv_ctx_params *cp, uint32_t width,
                         const skv_restore_params *p, FILE *tf, int *after_bos)
{
    skv_session_info si;
    skv_session_get_info(s, &si);
    if (width > si.n_segments) width = si.n_segments;
    skv_restore_job *jobs = calloc(width, sizeof *jobs);
    int32_t *tok = malloc((size_t)width * (size_t)cp->n_ctx * sizeof *tok);
    int rc = jobs && tok ? SKV_OK : SKV_ERR_NOMEM;
    restore_progress *rp = p->user;
    for (uint32_t k = 0; k < width && !rc; k++) rc = skv_ctx_create(m, cp, &jobs[k].ctx);
    if (rc) cli_error("cannot create %u contexts of %d positions", width, cp->n_ctx);
    for (uint32_t w = 0; w < si.n_segments && !rc; w += width) {
        uint32_t nw = si.n_segments - w < width ? si.n_segments - w : width;
        for (uint32_t k = 0; k < nw; k++) {
            jobs[k].session = s;
            jobs[k].segment = w + k;
            jobs[k].tokens = tok + (size_t)k * (size_t)cp->n_ctx;
            jobs[k].cap = (size_t)cp->n_ctx;
        }
        if ((rc = skv_session_restore_batch(m, jobs, nw, p))) {
            for (uint32_t k = 0; k < nw; k++)
                if (jobs[k].status) cli_error("segment %u: %s", w + k, skv_ctx_last_error(jobs[k].ctx));
            break;
        }
        for (uint32_t k = 0; k < nw; k++) {
            uint32_t nt = 0;
            skv_session_segment_info(s, w + k, &nt, NULL, NULL);
            if (tf && cli_write_tokens(tf, m, jobs[k].tokens, nt, after_bos)) rc = SKV_ERR_IO;
            rp->base += nt;
        }
    }
    for (uint32_t k = 0; jobs && k < width; k++) skv_ctx_free(jobs[k].ctx);
    free(jobs);
    free(tok);
    return rc;
}

/* Restores the segments one after another into c (capacity cap), writing the text to tf
 * and, for a single segment, the KV dump to kv. Prints its own errors. */
static int restore_each(const skv_session *s, skv_model *m, skv_ctx *c, const skv_restore_params *p, uint32_t cap,
                        FILE *tf, cli_out *kv, int *after_bos)
{
    skv_session_info si;
    restore_progress *rp = p->user;
    int32_t *tok = malloc(((size_t)cap + 1) * sizeof *tok);
    char err[512];
    int rc = tok ? 0 : -1;
    skv_session_get_info(s, &si);
    for (uint32_t i = 0; !rc && i < si.n_segments; i++) {
        uint32_t nt = 0;
        const char *path = NULL;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        if ((rc = skv_session_restore_segment(s, m, i, c, p, tok, cap))) {
            cli_error("%s", skv_ctx_last_error(c));
            break;
        }
        if (tf && cli_write_tokens(tf, m, tok, nt, after_bos)) rc = -1;
        if (kv->dest && (!(path = cli_out_path(kv)) ||
                         (rc = skv_kvdump_write(c, tok, nt, SKV_KVDUMP_F32, path, err, sizeof err)))) {
            if (path) cli_error("%s", err);
            rc = -1;
        }
        rp->base += nt;
    }
    free(tok);
    return rc;
}

static void restore_report(const restore_opts *o, const skv_session *s, const skv_restore_stats *rs, double secs)
{
    FILE *rep = cli_report_stream(o->out, o->kv);
    skv_session_info si;
    skv_session_get_info(s, &si);
    int lossy = is_kv_codec(si.codec);
    fprintf(rep, "restored %llu tokens (%u segment%s, codec %s) in %.2f s (%.0f tokens/s)%s\n",
            (unsigned long long)si.n_tokens, si.n_segments, si.n_segments == 1 ? "" : "s", skv_codec_name(si.codec), secs,
            (double)si.n_tokens / (secs + 1e-12),
            !o->verify ? "" : lossy ? "; decoded KV verified against the stored digest" : "; KV verified bit-exact against the stored digest");
    if (lossy && si.n_segments) {
        skv_session_kv_info ki;
        skv_session_segment_kv_info(s, 0, &ki);
        fprintf(rep, "the KV is lossy: decoded from the stored k=%s,v=%s payload without running the model "
                     "(relative MSE K %.3g, V %.3g in segment 0)%s\n",
                ki.scheme[0], ki.scheme[1], ki.rel_mse[0], ki.rel_mse[1], o->kv ? "" : "; not written (use --kv OUT)");
    }
    if (si.codec != SKV_CODEC_MODEL || !rs->n_passes) return;
    fprintf(rep, "%llu forward passes (%.2f tokens/pass)", (unsigned long long)rs->n_passes,
            (double)rs->n_tokens / (double)rs->n_passes);
    if (o->draft == SKV_DRAFT_NGRAM) /* drafting off: no drafts to count */
        fprintf(rep, "; drafts: %llu proposed, %llu accepted (%.0f%%)", (unsigned long long)rs->n_drafted,
                (unsigned long long)rs->n_accepted,
                rs->n_drafted ? 100.0 * (double)rs->n_accepted / (double)rs->n_drafted : 0.0);
    fputc('\n', rep);
}

/* The largest segment actually present (the context is sized by it, not the header's n_ctx). */
static uint32_t longest_segment(const skv_session *s)
{
    skv_session_info si;
    uint32_t longest = 1;
    skv_session_get_info(s, &si);
    for (uint32_t i = 0; i < si.n_segments; i++) {
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        longest = nt > longest ? nt : longest;
    }
    return longest;
}

/* Restores every segment, commits the outputs, reports; 0 or -1 after a message. */
static int restore_run(const restore_opts *o, const skv_session *s, skv_model *m, cli_out *text, cli_out *kv)
{
    skv_session_info si;
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    skv_session_get_info(s, &si);
    cp.n_ctx = (int)longest_segment(s);
    cp.n_threads = (int)o->threads;
    if (skv_ctx_create(m, &cp, &c)) {
        cli_error("cannot create a context of %d positions", cp.n_ctx);
        return -1;
    }
    restore_progress rp = {.total = si.n_tokens};
    skv_restore_stats rs = {0, 0, 0, 0};
    skv_restore_params p = {.verify = o->verify, .progress = on_progress, .user = &rp, .draft = o->draft,
                            .draft_max = (int)o->draft_max, .stats = &rs};
    int32_t *dict = NULL;
    if (o->cm_dict && !(dict = cli_dict_tokens(m, o->cm_dict, &p.n_cm_dict))) {
        skv_ctx_free(c);
        return -1;
    }
    p.cm_dict = dict;
    int after_bos = 1, rc;
    /* several model-coded segments and --batch N > 1: decoded together */
    int batched = si.codec == SKV_CODEC_MODEL && si.n_segments > 1 && o->batch > 1 && o->draft == SKV_DRAFT_AUTO && !o->kv;
    cli_progress_start(&rp.pr, "restore");
    double t0 = cli_now();
    if (batched) rc = restore_waves(s, m, &cp, (uint32_t)o->batch, &p, text->f, &after_bos);
    else rc = restore_each(s, m, c, &p, (uint32_t)cp.n_ctx, text->f, kv, &after_bos);
    cli_progress_end(&rp.pr);
    double secs = cli_now() - t0;
    skv_ctx_free(c);
    free(dict);
    if (rc || cli_out_commit(text) || cli_out_commit(kv)) return -1;
    restore_report(o, s, &rs, secs);
    return 0;
}

int cmd_restore(int argc, char **argv)
{
    restore_opts o = {.threads = 1, .batch = 1, .verify = 1, .draft = SKV_DRAFT_AUTO};
    const char *in = NULL;
    int n_pos = 0, rc = cli_parse(&restore_cmd, argc, argv, &o, &in, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!n_pos) return cli_usage(&restore_cmd, "needs an input .skv file");
    if (cli_stdout_clash(&restore_cmd, "-o", o.out, "--kv", o.kv)) return CLI_USAGE;
    cli_out text = {0}, kv = {0};
    skv_session *s = NULL;
    skv_model *m = NULL;
    skv_session_info si;
    rc = CLI_FAIL;
    if (cli_out_open(&text, o.out) || cli_out_open(&kv, o.kv) || !(s = open_session(in))) goto done;
    skv_session_get_info(s, &si);
    if (o.kv && si.n_segments != 1) {
        cli_error("--kv needs a single-segment session (this one has %u segments)", si.n_segments);
        rc = CLI_USAGE;
    } else if ((m = cli_load_model(o.model)) && !restore_run(&o, s, m, &text, &kv)) {
        rc = CLI_OK;
    }
done:
    cli_out_discard(&text);
    cli_out_discard(&kv);
    skv_model_free(m);
    skv_session_free(s);
    return rc;
}

/* ---- inspect ------------------------------------------------------------------------ */

static const cli_opt inspect_opts[] = {{0}};

static const cli_cmd inspect_cmd = {"inspect", "IN.skv\n",
                                    "Prints a .skv file's header, segments and sizes (no model needed; '-' = stdin).\n",
                                    inspect_opts, 1, NULL};

static void inspect_header(const char *path, const skv_session_info *si, int kvc, const skv_session_kv_info *ki)
{
    printf("file:         %s (%llu bytes)\nformat:       .skv version %d\n", path, (unsigned long long)si->file_bytes,
           si->version);
    printf("codec:        %s", si->codec == SKV_CODEC_MODEL ? "model (arithmetic-coded under the model)"
                               : si->codec == SKV_CODEC_TOKENS ? "tokens (zstd varints)"
                               : si->codec == SKV_CODEC_CM ? "cm (context-mixing coded ids)" : skv_codec_name(si->codec));
    if (si->codec == SKV_CODEC_MODEL) printf(", frequency total 2^%u", si->total_bits);
    if (is_kv_codec(si->codec)) printf(" (zstd varints + quantized KV, lossy; restored without the model)");
    if (kvc)
        printf("\nKV scheme:    k=%s,v=%s, seed %llu; %d layers x %d KV heads x head_dim %d; %llu bytes/position "
               "(%.1f bits)",
               ki->scheme[0], ki->scheme[1], (unsigned long long)ki->seed, ki->n_layer, ki->n_head_kv, ki->head_dim,
               (unsigned long long)ki->position_bytes, (double)ki->position_bytes * 8);
    printf("\nmodel:        %s\nfingerprint:  ", si->model_name);
    for (int i = 0; i < 16; i++) printf("%02x", si->fingerprint[i]);
    printf("\nvocabulary:   %u (BOS %d)\ncontext:      %u per segment\ntokens:       %llu\n", si->n_vocab, si->bos_id,
           si->n_ctx, (unsigned long long)si->n_tokens);
    printf("bits/token:   %.4f\nsegments:     %u%s\n",
           si->n_tokens ? (double)si->file_bytes * 8 / (double)si->n_tokens : 0.0, si->n_segments,
           si->segmented ? " (segmented session)" : "");
}

static void inspect_segments(const skv_session *s, const skv_session_info *si, int kvc)
{
    skv_session_kv_info ki;
    for (uint32_t i = 0; i < si->n_segments && i < 64; i++) {
        uint32_t nt;
        uint64_t pb;
        uint8_t d[16];
        skv_session_segment_info(s, i, &nt, &pb, d);
        printf("  [%u] %u tokens, payload %llu bytes (%.3f bits/token), KV digest ", i, nt, (unsigned long long)pb,
               (double)pb * 8 / nt);
        for (int k = 0; k < 16; k++) printf("%02x", d[k]);
        printf("\n");
        if (kvc && skv_session_segment_kv_info(s, i, &ki) == SKV_OK)
            printf("      tokens %llu bytes (%.3f bits/token), KV %llu bytes (%.1f bits/token), relative MSE K %.3g V %.3g\n",
                   (unsigned long long)ki.tokens_bytes, (double)ki.tokens_bytes * 8 / nt, (unsigned long long)ki.kv_bytes,
                   (double)ki.kv_bytes * 8 / nt, ki.rel_mse[0], ki.rel_mse[1]);
    }
    if (si->n_segments > 64) printf("  ... %u more\n", si->n_segments - 64);
}

int cmd_inspect(int argc, char **argv)
{
    const char *in = NULL;
    int n_pos = 0, rc = cli_parse(&inspect_cmd, argc, argv, NULL, &in, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!n_pos) return cli_usage(&inspect_cmd, "needs a .skv file");
    skv_session *s = open_session(in);
    if (!s) return CLI_FAIL;
    skv_session_info si;
    skv_session_kv_info ki;
    skv_session_get_info(s, &si);
    int kvc = si.n_segments && skv_session_segment_kv_info(s, 0, &ki) == SKV_OK;
    inspect_header(in, &si, kvc, &ki);
    inspect_segments(s, &si, kvc);
    skv_session_free(s);
    return CLI_OK;
}
