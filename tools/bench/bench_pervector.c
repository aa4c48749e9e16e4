/* seqkv bench: the in-memory representations of the exact run's KV cache.
 *
 *   per-vector   f32 f16 q8_0 q4_0 tq2..tq4 tq2p..tq4p tq3.5: bits from skv_kv_position_bytes,
 *                quality from a run with kv_quant (ppl delta, KL vs the exact run), restore =
 *                quantize->dequantize round trip of the real KV + loading it (skv_ctx_kv_write)
 *   generic      zstd -3 on the f32 KV, zstd -3/-19 on the f16 KV: real compressed bytes,
 *                restore = decompress (+ f16->f32) + load, verified by comparing values
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "bench_internal.h"
#include "core/f16.h" /* header-only binary16 conversions (src/): the engine's own rounding */

/* ppl and KL of a run whose KV cache is held in kv_quant, against the exact logits. */
static int quality(const bench_run *r, const char *spec, double *ppl_delta, double *kl)
{
    size_t V = (size_t)r->info.n_vocab;
    float *lq = malloc(r->n * V * sizeof *lq);
    skv_ctx *c = lq ? bench_new_ctx(r, spec) : NULL;
    int rc = c && !skv_ctx_prefill(c, r->tok, r->n, SKV_LOGITS_ALL, lq) ? 0 : -1;
    cli_score ref = {0}, q = {0};
    for (size_t j = 0; !rc && j + 1 < r->n; j++) {
        cli_score_row(r->lf + j * V, r->lf + j * V, r->info.n_vocab, r->tok[j + 1], &ref);
        cli_score_row(r->lf + j * V, lq + j * V, r->info.n_vocab, r->tok[j + 1], &q);
    }
    if (!rc && q.n) {
        *ppl_delta = exp(q.nll / (double)q.n) - exp(ref.nll / (double)ref.n);
        *kl = q.kl / (double)q.n;
    }
    skv_ctx_free(c);
    free(lq);
    return rc;
}

/* Loads kv into the (reused, already warm) load context; 1 if its digest equals the exact
 * run's, 0 if not, -1 error. *secs receives the load time. */
static int load_kv(const bench_run *r, const float *kv, double *secs)
{
    uint8_t d[16];
    double t0 = cli_now();
    int rc = skv_ctx_kv_write(r->load, 0, (int)r->n, kv) ? -1 : 0;
    *secs = cli_now() - t0;
    if (!rc) rc = skv_ctx_kv_digest(r->load, (int)r->n, d) ? -1 : !memcmp(d, r->digest, 16);
    return rc;
}

/* Round trip of the whole canonical KV through the per-vector scheme(s); seconds spent. */
static int roundtrip_kv(const bench_run *r, const char *k_scheme, const char *v_scheme, float *y, double *secs)
{
    size_t hd = (size_t)r->info.head_dim, blk = r->n * hd;
    double t0 = cli_now();
    for (int l = 0; l < r->info.n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int h = 0; h < r->info.n_head_kv; h++) {
                size_t off = (((size_t)l * 2 + (size_t)kind) * (size_t)r->info.n_head_kv + (size_t)h) * blk;
                if (skv_kv_quant_roundtrip(kind ? v_scheme : k_scheme, hd, l, kind, r->kv + off, r->n, y + off, NULL))
                    return -1;
            }
    *secs = cli_now() - t0;
    return 0;
}

/* Best of r->reps round trips + loads: restore speed and whether the exact KV came back. */
static int per_vector_restore(const bench_run *r, bench_row *w, const char *ks, const char *vs, float *y)
{
    double best = 1e30, rt = 0, load = 0;
    int same = 0;
    for (int k = 0; k < r->reps; k++) {
        if (roundtrip_kv(r, ks, vs, y, &rt) || (same = load_kv(r, y, &load)) < 0) return -1;
        best = rt + load < best ? rt + load : best;
    }
    w->restore_tps = (double)r->n / best;
    snprintf(w->measured, sizeof w->measured, "quantize+dequantize round trip + load");
    w->lossless = same == 1;
    w->verified = same == 1 ? "yes" : "no (lossy)";
    return 0;
}

/* One per-vector scheme: "tq3.5" is k=tq4,v=tq3 (the same bytes as half the vectors at each). */
int bench_per_vector_row(const bench_run *r, bench_case *bc, const char *scheme, float *y)
{
    int split = !strcmp(scheme, "tq3.5");
    const char *ks = split ? "tq4" : scheme, *vs = split ? "tq3" : scheme;
    char spec[64], label[48];
    double bytes = 0;
    snprintf(spec, sizeof spec, "k=%s,v=%s", ks, vs);
    snprintf(label, sizeof label, "%s%s", scheme, split ? " (k=tq4,v=tq3)" : "");
    bench_row *w = bench_new_row(bc, label, "per-vector");
    if (skv_kv_position_bytes(r->m, scheme, &bytes)) {
        cli_error("scheme %s does not fit this model", scheme);
        return -1;
    }
    w->bits = bytes * 8.0;
    if (strcmp(scheme, "f32") && quality(r, spec, &w->ppl_delta, &w->kl)) return -1;
    w->has_quality = 1;
    return per_vector_restore(r, w, ks, vs, y);
}

/* The bytes zstd is given: the f32 KV as it is, or its f16 conversion (malloc'ed into *h). */
typedef struct {
    const void *src;
    size_t nb;
    uint16_t *h;
    int f16;
} zstd_input;

static int zstd_input_make(const bench_run *r, int f16, zstd_input *in)
{
    in->f16 = f16;
    in->nb = r->kv_len * (f16 ? 2 : 4);
    in->h = f16 ? malloc(in->nb) : NULL;
    in->src = f16 ? (const void *)in->h : (const void *)r->kv;
    for (size_t i = 0; in->h && i < r->kv_len; i++) in->h[i] = skv_f32_to_f16(r->kv[i]);
    return f16 && !in->h ? -1 : 0;
}

/* One timed decompression (+ f16 -> f32) of z into back, then the load; 1 exact, 0 not, -1 error. */
static int zstd_restore_once(const bench_run *r, const zstd_input *in, const uint8_t *z, size_t zn, uint8_t *back,
                             float *y, double *secs)
{
    double t0 = cli_now(), load = 0;
    size_t got = ZSTD_decompress(back, in->nb, z, zn);
    if (ZSTD_isError(got) || got != in->nb || memcmp(back, in->src, in->nb)) return -1;
    const uint16_t *hb = (const uint16_t *)(const void *)back;
    for (size_t i = 0; in->f16 && i < r->kv_len; i++) y[i] = skv_f16_to_f32(hb[i]);
    double t = cli_now() - t0;
    int same = load_kv(r, in->f16 ? y : (const float *)(const void *)back, &load);
    *secs = t + load;
    return same;
}

/* Compresses in at level, then restores it r->reps times into the row. */
static int zstd_measure(const bench_run *r, bench_row *w, const zstd_input *in, int level, float *y)
{
    size_t cap = ZSTD_compressBound(in->nb);
    uint8_t *z = malloc(cap), *back = malloc(in->nb);
    size_t zn = z && back ? ZSTD_compress(z, cap, in->src, in->nb, level) : 0;
    double best = 1e30, t = 0;
    int same = !z || !back || ZSTD_isError(zn) ? -1 : 0;
    for (int k = 0; same >= 0 && k < r->reps; k++) {
        same = zstd_restore_once(r, in, z, zn, back, y, &t);
        best = t < best ? t : best;
    }
    free(z);
    free(back);
    if (same < 0) return -1;
    w->bits = (double)zn * 8.0 / (double)r->n;
    w->restore_tps = (double)r->n / best;
    w->lossless = same == 1;
    w->verified = same == 1 ? "yes" : "yes (f16 bytes); no (f32 KV)";
    return 0;
}

/* zstd over the KV as f32 or f16 bytes. */
int bench_zstd_row(const bench_run *r, bench_case *bc, int f16, int level, float *y)
{
    char label[48];
    zstd_input in;
    snprintf(label, sizeof label, "zstd -%d (%s KV)", level, f16 ? "f16" : "f32");
    bench_row *w = bench_new_row(bc, label, "generic");
    int rc = zstd_input_make(r, f16, &in) || zstd_measure(r, w, &in, level, y) ? -1 : 0;
    free(in.h);
    if (rc) {
        cli_error("%s failed", label);
        return -1;
    }
    snprintf(w->measured, sizeof w->measured, "decompress%s + load", f16 ? " + f16->f32" : "");
    /* quality of the f16 KV = the f16 row's, measured there */
    const bench_row *q = f16 ? bench_find_row(bc, "f16") : NULL;
    if (q) w->has_quality = 1, w->ppl_delta = q->ppl_delta, w->kl = q->kl;
    return 0;
}
