/* seqkv compress | restore | inspect: .skv session files. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int write_file(const char *path, const void *data, size_t n)
{
    char tmp[4096];
    FILE *f;
    int len = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (len < 0 || (size_t)len >= sizeof tmp) {
        cli_error("output path too long");
        return -1;
    }
    if (!(f = fopen(tmp, "wb"))) {
        cli_error("cannot create '%s': %s", tmp, strerror(errno));
        return -1;
    }
    int ok = fwrite(data, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        cli_error("cannot write '%s': %s", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
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

static const char compress_help[] =
    "usage: seqkv compress [-m MODEL] (-f TEXT | --ids IDS | --kv-in DUMP) -o OUT.skv\n"
    "                      [--codec CODEC] [--kv-quant SPEC] [--segment] [--ctx N] [-t THREADS]\n\n"
    "Stores a session (the KV cache of a text) as a .skv file (docs/format.md).\n"
    "  -f TEXT        text file, tokenized with BOS first ('-' = stdin)\n"
    "  --ids IDS      whitespace-separated token ids instead of text\n"
    "  --kv-in DUMP   the tokens of a KV dump written by 'seqkv kv-dump'\n"
    "  --codec model  arithmetic-code the tokens under the model (default; smallest,\n"
    "                 restored token by token)\n"
    "  --codec tokens raw token ids, zstd-compressed (restored by one parallel prefill)\n"
    "  --codec f16|q8|q4|tq2|tq3|tq4\n"
    "                 the tokens (as 'tokens') plus every position's KV quantized per\n"
    "                 vector (lossy; restored without running the model: docs/format.md 2.3)\n"
    "  --codec kvq --kv-quant SPEC   the same with schemes per kind, e.g. k=tq4,v=tq3 or\n"
    "                 tq3p,seed=7 (schemes f32 f16 q8_0 q4_0 tq1..tq4 tq2p..tq4p)\n"
    "  --ctx N        context (segment capacity) in positions; default: the model's\n"
    "  --segment      allow sessions longer than the context: stored as consecutive\n"
    "                 independent segments, each with a fresh context\n"
    "Prints the size in bits per token position next to the model's cross-entropy and the\n"
    "size of the same KV cache as f16 and as TurboQuant-3.5.\n";

static void print_pct(const char *label, double x)
{
    printf("%-22s %+.2f%% (payload vs the cross-entropy; includes each segment's raw first token and the coder flush)\n",
           label, x);
}

/* Quantized-KV codecs: the token and KV parts separately, the ratio to f16 KV and the
 * quality the writer measured. */
static void print_kv_report(const skv_session *s, size_t n, size_t size, double f16)
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
    printf("KV schemes:            k=%s,v=%s, seed %llu (%llu bytes/position)\n", ki.scheme[0], ki.scheme[1],
           (unsigned long long)ki.seed, (unsigned long long)ki.position_bytes);
    printf("tokens part:           %llu bytes = %.4f bits/position (zstd varints)\n", (unsigned long long)tb,
           (double)tb * 8 / (double)n);
    printf("KV part:               %llu bytes = %.1f bits/position\n", (unsigned long long)kb, (double)kb * 8 / (double)n);
    printf("vs f16 KV:             %.2fx smaller (whole file vs %.0f bytes)\n", f16 * (double)n / (double)size,
           f16 * (double)n);
    printf("KV relative MSE:       K %.3g, V %.3g (sum |x - x~|^2 / sum |x|^2, token-weighted over segments; lossy)\n",
           mse[0] / (double)n, mse[1] / (double)n);
}

int cmd_compress(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *ids_file = NULL, *kv_in = NULL, *out = NULL, *codec = "model",
               *kvq = NULL;
    long threads = 1, n_ctx = 0;
    int segment = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(compress_help, stdout);
            return CLI_OK;
        }
        const char **dst = !strcmp(a, "-m") ? &model : !strcmp(a, "-f") ? &file : !strcmp(a, "--ids") ? &ids_file
                         : !strcmp(a, "--kv-in") ? &kv_in : !strcmp(a, "-o") ? &out : !strcmp(a, "--codec") ? &codec
                         : !strcmp(a, "--kv-quant") ? &kvq : NULL;
        if (dst) {
            if (!v) {
                cli_error("option %s needs a value", a);
                return CLI_USAGE;
            }
            *dst = v;
            i++;
        } else if (!strcmp(a, "-t")) {
            if (cli_parse_int(a, v, 1, 256, &threads)) return CLI_USAGE;
            i++;
        } else if (!strcmp(a, "--segment")) {
            segment = 1;
        } else if (!strcmp(a, "--ctx")) {
            if (cli_parse_int(a, v, 1, 1 << 24, &n_ctx)) return CLI_USAGE;
            i++;
        } else {
            cli_error("unexpected argument '%s' (see seqkv compress --help)", a);
            return CLI_USAGE;
        }
    }
    if (!!file + !!ids_file + !!kv_in != 1 || !out) {
        cli_error("compress needs exactly one input (-f, --ids or --kv-in) and -o OUT.skv");
        return CLI_USAGE;
    }
    int codec_id = skv_codec_parse(codec);
    char qerr[256];
    if (codec_id < 0) {
        cli_error("--codec must be one of model tokens f16 q8 q4 tq2 tq3 tq4 kvq, not '%s'", codec);
        return CLI_USAGE;
    }
    if ((codec_id == SKV_CODEC_KVQ) != !!kvq) {
        cli_error("--kv-quant SPEC goes with --codec kvq (and --codec kvq needs it)");
        return CLI_USAGE;
    }
    if (kvq && skv_kv_quant_check(kvq, NULL, qerr, sizeof qerr)) {
        cli_error("%s", qerr);
        return CLI_USAGE;
    }
    skv_model *m = cli_load_model(model);
    if (!m) return CLI_FAIL;
    skv_model_info info;
    skv_model_get_info(m, &info);
    int32_t *tok = NULL;
    size_t n = 0, text_len = 0;
    int rc = CLI_FAIL;
    skv_encoder *e = NULL;
    uint8_t *data = NULL;
    size_t size = 0;
    if (file || ids_file) {
        char *text = cli_read_file(file ? file : ids_file, &text_len);
        if (text) tok = file ? cli_tokenize(m, text, text_len, 1, &n) : parse_ids(text, &n);
        free(text);
    } else {
        skv_kvdump *d = NULL;
        char err[512];
        if (skv_kvdump_read(kv_in, &d, err, sizeof err) || skv_kvdump_check_model(d, m, err, sizeof err)) {
            cli_error("%s", err);
        } else if ((tok = malloc((d->n_pos + 1) * sizeof *tok))) {
            memcpy(tok, d->tokens, d->n_pos * sizeof *tok);
            n = d->n_pos;
        }
        skv_kvdump_free(d);
    }
    if (!tok) goto done;
    if (!n) {
        cli_error("the input holds no tokens");
        goto done;
    }
    skv_encoder_params ep = skv_encoder_default_params();
    ep.codec = codec_id;
    ep.kv_quant = kvq;
    ep.n_threads = (int)threads;
    ep.segment = segment;
    ep.n_ctx = (int)n_ctx;
    int st = skv_encoder_create(m, &ep, &e, NULL, 0);
    if (st) {
        cli_error("cannot create the encoder: %s%s", skv_status_str(st),
                  codec_id == SKV_CODEC_KVQ ? " (the spec may give only k=, v=, kv= and seed=, both kinds, with schemes "
                                              "that support the model's head_dim)" : "");
        goto done;
    }
    double t0 = cli_now();
    cli_progress pr;
    cli_progress_start(&pr, "compress");
    for (size_t done = 0; done < n;) {
        size_t k = n - done < 256 ? n - done : 256;
        if ((st = skv_encoder_append(e, tok + done, k, NULL))) {
            cli_progress_end(&pr);
            cli_error("%s", skv_encoder_last_error(e));
            if (st == SKV_ERR_RANGE) fprintf(stderr, "       (the input is %zu tokens; pass --segment to store it as segments)\n", n);
            goto done;
        }
        done += k;
        cli_progress_update(&pr, done, n);
    }
    cli_progress_end(&pr);
    if ((st = skv_encoder_finish(e, &data, &size))) {
        cli_error("%s", skv_encoder_last_error(e));
        goto done;
    }
    double secs = cli_now() - t0;
    if (write_file(out, data, size)) goto done;
    skv_encoder_stats es;
    skv_encoder_get_stats(e, &es);
    double f16 = 0, tq = 0, bits = (double)size * 8.0;
    skv_kv_position_bytes(m, "f16", &f16);
    skv_kv_position_bytes(m, "tq3.5", &tq);
    printf("model:                 %s (%d layers, %d KV heads x %d)\n", info.name, info.n_layer, info.n_head_kv, info.head_dim);
    printf("codec:                 %s%s\n", codec, codec_id >= SKV_CODEC_F16 ? " (tokens + quantized KV)" : "");
    printf("tokens:                %zu\n", n);
    printf("file:                  %s, %zu bytes\n", out, size);
    printf("bits per position:     %.4f (all headers and checksums counted)\n", bits / (double)n);
    uint64_t payload = 0;
    uint32_t n_seg = 0;
    {
        skv_session *s = NULL;
        skv_session_info si;
        if (skv_session_open(data, size, &s, NULL, 0) == SKV_OK) {
            skv_session_get_info(s, &si);
            n_seg = si.n_segments;
            for (uint32_t i = 0; i < si.n_segments; i++) {
                uint64_t pb = 0;
                skv_session_segment_info(s, i, NULL, &pb, NULL);
                payload += pb;
            }
            if (ep.codec >= SKV_CODEC_F16) print_kv_report(s, n, size, f16);
        }
        skv_session_free(s);
    }
    if (es.n_model_coded) {
        printf("model cross-entropy:   %.4f bits/token (%llu tokens predicted by the model: the floor)\n",
               es.model_bits / (double)es.n_model_coded, (unsigned long long)es.n_model_coded);
        printf("payload:               %llu bytes = %.4f bits/position\n", (unsigned long long)payload,
               (double)payload * 8 / (double)n);
        if (ep.codec == SKV_CODEC_MODEL) {
            printf("quantized model:       %.4f bits/token (the same tokens under the integer frequencies)\n",
                   es.coded_bits / (double)es.n_model_coded);
            print_pct("coder overhead:", 100.0 * ((double)payload * 8 - es.model_bits) / es.model_bits);
        }
        printf("container:             %zu bytes (header, %u segment record%s, checksums, KV digests)\n",
               size - (size_t)payload, n_seg, n_seg == 1 ? "" : "s");
    }
    double r16 = f16 * (double)n / (double)size, rtq = tq * (double)n / (double)size;
    printf("KV cache as f16:       %.0f bytes (%.1f bits/position) -> %.*fx smaller\n", f16 * (double)n, f16 * 8,
           r16 < 10 ? 2 : 0, r16);
    printf("KV cache as TQ-3.5:    %.0f bytes (%.1f bits/position) -> %.*fx %s\n", tq * (double)n, tq * 8,
           rtq < 10 ? 2 : 0, rtq, rtq < 1 ? "(this file is larger)" : "smaller");
    printf("encode time:           %.2f s (%.0f tokens/s)\n", secs, (double)n / (secs + 1e-12));
    rc = CLI_OK;
done:
    free(tok);
    free(data);
    skv_encoder_free(e);
    skv_model_free(m);
    return rc;
}

/* ---- restore -------------------------------------------------------------------- */

static const char restore_help[] =
    "usage: seqkv restore [-m MODEL] IN.skv [-o TEXT] [--kv OUT.kv] [--no-verify] [-t THREADS]\n"
    "                     [--draft none|ngram] [--draft-max N] [--batch N]\n\n"
    "Regenerates a session's tokens and KV cache from a .skv file. Quantized-KV codecs\n"
    "(f16 q8 q4 tq2 tq3 tq4 kvq) decode the stored, lossy KV without running the model\n"
    "(the model is still loaded: its fingerprint is checked and it renders the text).\n"
    "  -o TEXT     write the session's text ('-' = stdout)\n"
    "  --kv OUT    write the regenerated KV cache as a raw dump (single-segment sessions)\n"
    "  --no-verify skip checking each segment's regenerated KV against the stored digest\n"
    "              (checked by default; any mismatch exits 1; --verify is accepted too)\n"
    "  --draft D   codec model: 'none' (default) decodes token by token; 'ngram' verifies\n"
    "              blocks of drafted tokens in one batched pass (speculative decoding: faster\n"
    "              only on sessions that repeat themselves).\n"
    "              Both restore exactly the same tokens and KV; only the speed differs.\n"
    "  --draft-max N  most tokens verified per pass, 1..256 (default 16)\n"
    "  --batch N   codec model, several segments: decode up to N segments together, one\n"
    "              forward pass per step for all of them (default 1: one at a time; not\n"
    "              combined with --draft). Same tokens and KV; memory: N contexts. Pays\n"
    "              when reading the weights bounds a pass (large models), not when they\n"
    "              fit in cache (bench/results/restore.md).\n"
    "The model must be the one the session was written with (checked by fingerprint).\n";

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
            if (tf) cli_write_tokens(tf, m, jobs[k].tokens, nt, after_bos);
            rp->base += nt;
        }
    }
    for (uint32_t k = 0; jobs && k < width; k++) skv_ctx_free(jobs[k].ctx);
    free(jobs);
    free(tok);
    return rc;
}

int cmd_restore(int argc, char **argv)
{
    const char *model = NULL, *in = NULL, *out = NULL, *kv = NULL;
    long threads = 1, draft_max = 0, batch = 1;
    int verify = 1, draft = SKV_DRAFT_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(restore_help, stdout);
            return CLI_OK;
        }
        const char **dst = !strcmp(a, "-m") ? &model : !strcmp(a, "-o") ? &out : !strcmp(a, "--kv") ? &kv : NULL;
        if (dst) {
            if (!v) {
                cli_error("option %s needs a value", a);
                return CLI_USAGE;
            }
            *dst = v;
            i++;
        } else if (!strcmp(a, "-t")) {
            if (cli_parse_int(a, v, 1, 256, &threads)) return CLI_USAGE;
            i++;
        } else if (!strcmp(a, "--draft-max")) {
            if (cli_parse_int(a, v, 1, 256, &draft_max)) return CLI_USAGE;
            i++;
        } else if (!strcmp(a, "--batch")) {
            if (cli_parse_int(a, v, 1, 64, &batch)) return CLI_USAGE;
            i++;
        } else if (!strcmp(a, "--draft")) {
            if (v && !strcmp(v, "none")) draft = SKV_DRAFT_NONE;
            else if (v && !strcmp(v, "ngram")) draft = SKV_DRAFT_NGRAM;
            else {
                cli_error("--draft needs 'none' or 'ngram'");
                return CLI_USAGE;
            }
            i++;
        } else if (!strcmp(a, "--verify")) {
            verify = 1;
        } else if (!strcmp(a, "--no-verify")) {
            verify = 0;
        } else if (a[0] != '-' && !in) {
            in = a;
        } else {
            cli_error("unexpected argument '%s' (see seqkv restore --help)", a);
            return CLI_USAGE;
        }
    }
    if (!in) {
        cli_error("restore needs an input .skv file");
        return CLI_USAGE;
    }
    size_t len = 0;
    char *bytes = cli_read_file(in, &len), err[512];
    if (!bytes) return CLI_FAIL;
    skv_session *s = NULL;
    if (skv_session_open(bytes, len, &s, err, sizeof err)) {
        cli_error("%s: %s", in, err);
        free(bytes);
        return CLI_FAIL;
    }
    free(bytes);
    skv_session_info si;
    skv_session_get_info(s, &si);
    if (kv && si.n_segments != 1) {
        cli_error("--kv needs a single-segment session (this one has %u segments)", si.n_segments);
        skv_session_free(s);
        return CLI_USAGE;
    }
    skv_model *m = cli_load_model(model);
    skv_ctx *c = NULL;
    /* size the context by the largest segment actually present, not the header's n_ctx */
    uint32_t longest = 1;
    for (uint32_t i = 0; i < si.n_segments; i++) {
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        longest = nt > longest ? nt : longest;
    }
    int32_t *tok = malloc(((size_t)longest + 1) * sizeof *tok);
    FILE *tf = NULL;
    int rc = CLI_FAIL, after_bos = 1;
    skv_model_info info;
    if (!m || !tok) goto done;
    skv_model_get_info(m, &info);
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = (int)longest;
    cp.n_threads = (int)threads;
    if (skv_ctx_create(m, &cp, &c)) {
        cli_error("cannot create a context of %u positions", longest);
        goto done;
    }
    if (out && !(tf = strcmp(out, "-") ? fopen(out, "wb") : stdout)) {
        cli_error("cannot create '%s': %s", out, strerror(errno));
        goto done;
    }
    restore_progress rp = {.total = si.n_tokens};
    skv_restore_stats rs = {0, 0, 0, 0};
    skv_restore_params p = {.verify = verify, .progress = on_progress, .user = &rp, .draft = draft,
                            .draft_max = (int)draft_max, .stats = &rs};
    cli_progress_start(&rp.pr, "restore");
    double t0 = cli_now();
    /* several model-coded segments and --batch N > 1: decoded together */
    int batched = si.codec == SKV_CODEC_MODEL && si.n_segments > 1 && batch > 1 && draft == SKV_DRAFT_AUTO && !kv;
    if (batched && restore_waves(s, m, &cp, (uint32_t)batch, &p, tf, &after_bos)) {
        cli_progress_end(&rp.pr);
        goto done;
    }
    for (uint32_t i = 0; !batched && i < si.n_segments; i++) {
        uint32_t nt;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        int st = skv_session_restore_segment(s, m, i, c, &p, tok, longest);
        if (st) {
            cli_progress_end(&rp.pr);
            cli_error("%s", skv_ctx_last_error(c));
            goto done;
        }
        if (tf) cli_write_tokens(tf, m, tok, nt, &after_bos);
        if (kv && skv_kvdump_write(c, tok, nt, SKV_KVDUMP_F32, kv, err, sizeof err)) {
            cli_progress_end(&rp.pr);
            cli_error("%s", err);
            goto done;
        }
        rp.base += nt;
    }
    cli_progress_end(&rp.pr);
    double secs = cli_now() - t0;
    FILE *rep = tf == stdout ? stderr : stdout;
    int lossy = si.codec >= SKV_CODEC_F16;
    fprintf(rep, "restored %llu tokens (%u segment%s, codec %s) in %.2f s (%.0f tokens/s)%s\n",
            (unsigned long long)si.n_tokens, si.n_segments, si.n_segments == 1 ? "" : "s", skv_codec_name(si.codec), secs,
            (double)si.n_tokens / (secs + 1e-12),
            !verify ? "" : lossy ? "; decoded KV verified against the stored digest" : "; KV verified bit-exact against the stored digest");
    if (lossy && si.n_segments) {
        skv_session_kv_info ki;
        skv_session_segment_kv_info(s, 0, &ki);
        fprintf(rep, "the KV is lossy: decoded from the stored k=%s,v=%s payload without running the model "
                     "(relative MSE K %.3g, V %.3g in segment 0)%s\n",
                ki.scheme[0], ki.scheme[1], ki.rel_mse[0], ki.rel_mse[1], kv ? "" : "; not written (use --kv OUT)");
    }
    if (si.codec == SKV_CODEC_MODEL && rs.n_passes)
        fprintf(rep, "%llu forward passes (%.2f tokens/pass); drafts: %llu proposed, %llu accepted (%.0f%%)\n",
                (unsigned long long)rs.n_passes, (double)rs.n_tokens / (double)rs.n_passes,
                (unsigned long long)rs.n_drafted, (unsigned long long)rs.n_accepted,
                rs.n_drafted ? 100.0 * (double)rs.n_accepted / (double)rs.n_drafted : 0.0);
    rc = CLI_OK;
done:
    if (tf && tf != stdout && fclose(tf) != 0) rc = CLI_FAIL;
    free(tok);
    skv_ctx_free(c);
    skv_model_free(m);
    skv_session_free(s);
    return rc;
}

/* ---- inspect ------------------------------------------------------------------------ */

int cmd_inspect(int argc, char **argv)
{
    if (argc != 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs("usage: seqkv inspect IN.skv\n\nPrints a .skv file's header, segments and sizes (no model needed).\n",
              argc == 2 ? stdout : stderr);
        return argc == 2 ? CLI_OK : CLI_USAGE;
    }
    size_t len = 0;
    char *bytes = cli_read_file(argv[1], &len), err[512];
    skv_session *s = NULL;
    if (!bytes) return CLI_FAIL;
    int st = skv_session_open(bytes, len, &s, err, sizeof err);
    free(bytes);
    if (st) {
        cli_error("%s: %s", argv[1], err);
        return CLI_FAIL;
    }
    skv_session_info si;
    skv_session_get_info(s, &si);
    printf("file:         %s (%llu bytes)\nformat:       .skv version %d\n", argv[1], (unsigned long long)si.file_bytes,
           si.version);
    skv_session_kv_info ki;
    int kvc = si.n_segments && skv_session_segment_kv_info(s, 0, &ki) == SKV_OK;
    printf("codec:        %s", si.codec == SKV_CODEC_MODEL ? "model (arithmetic-coded under the model)"
                               : si.codec == SKV_CODEC_TOKENS ? "tokens (zstd varints)" : skv_codec_name(si.codec));
    if (si.codec == SKV_CODEC_MODEL) printf(", frequency total 2^%u", si.total_bits);
    if (si.codec >= SKV_CODEC_F16) printf(" (zstd varints + quantized KV, lossy; restored without the model)");
    if (kvc)
        printf("\nKV scheme:    k=%s,v=%s, seed %llu; %d layers x %d KV heads x head_dim %d; %llu bytes/position "
               "(%.1f bits)",
               ki.scheme[0], ki.scheme[1], (unsigned long long)ki.seed, ki.n_layer, ki.n_head_kv, ki.head_dim,
               (unsigned long long)ki.position_bytes, (double)ki.position_bytes * 8);
    printf("\nmodel:        %s\nfingerprint:  ", si.model_name);
    for (int i = 0; i < 16; i++) printf("%02x", si.fingerprint[i]);
    printf("\nvocabulary:   %u (BOS %d)\ncontext:      %u per segment\ntokens:       %llu\n", si.n_vocab, si.bos_id,
           si.n_ctx, (unsigned long long)si.n_tokens);
    printf("bits/token:   %.4f\nsegments:     %u%s\n", si.n_tokens ? (double)si.file_bytes * 8 / (double)si.n_tokens : 0.0,
           si.n_segments, si.segmented ? " (segmented session)" : "");
    for (uint32_t i = 0; i < si.n_segments && i < 64; i++) {
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
    if (si.n_segments > 64) printf("  ... %u more\n", si.n_segments - 64);
    skv_session_free(s);
    return CLI_OK;
}
