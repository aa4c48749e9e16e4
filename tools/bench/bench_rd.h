/* seqkv kv-rd: rate-distortion of stored KV caches (tools/bench/bench_rd.c, bench_rd_topk.c). */
#ifndef SKV_BENCH_RD_H
#define SKV_BENCH_RD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"

enum { RD_PERVEC = 0, RD_PRED = 1, RD_TOPK = 2, RD_KVTC = 3 };
enum { RD_LV_NONE = 0, RD_LV_SURPRISAL = 1, RD_LV_SINK = 2, RD_LV_RECENT = 3, RD_LV_RAMP = 4 };

#define RD_MAX_POINTS 256
#define RD_GREEDY 32 /* tokens of the greedy continuations compared */

/* The options of kv-rd (and of bench's rate-distortion section). */
typedef struct {
    const char *model, *file, *steps, *topk_steps, *csv, *label, *preds, *pervec, *kl_targets;
    const char *kvtc, *kvtc_steps; /* kvtc: the calibration file (kvtc-<id>.cal) and its relative steps */
    long ctx, prefix, max_tok, threads;
    double ratio, kvtc_theta;
} rd_opts;

/* One point of a curve: how the prefix's KV is stored, and what it cost. */
typedef struct rd_point {
    char name[48];
    int family;       /* RD_* */
    int scheme[2];    /* RD_PERVEC: skv_quant ids of K and V */
    int window;       /* RD_PERVEC: the last `window` prefix positions kept as f16 */
    int pred;         /* RD_PRED: SKV_KVP_* */
    float step;       /* RD_PRED / RD_TOPK: relative step */
    float kv_ratio;   /* RD_PRED: K step = step * kv_ratio, V step = step / kv_ratio */
    int levels;       /* RD_PRED: RD_LV_* per-position levels */
    int l0;           /* RD_PRED: layer 0 regenerated from the model (0 bits) */
    int rot;          /* RD_PRED: residuals rotated (TurboQuant's rotation, SKVP flag bit 2) */
    float kl;         /* RD_PRED: 0, or the writer's target KL (skv_kvp_encode_quality: step searched) */
    double kl_writer; /* RD_PRED with kl: the KL the writer measured, summed over windows */
    double enc_cpu;   /* encode CPU seconds, all windows */
    double bits;      /* stored bits, all windows */
    double dec_cpu;   /* restore CPU seconds, all windows */
    double passes;    /* RD_TOPK: forward passes the restore needs */
    size_t positions; /* prefix positions stored, all windows */
    size_t windows;   /* windows evaluated */
    double greedy;    /* greedy match lengths (tools/bench/bench_rd_greedy.c), summed over windows */
    cli_score s;
} rd_point;

/* One window: exact logits, tokens, exact KV of the prefix, scratch. */
typedef struct rd_window {
    skv_model *m;
    skv_model_info mi;
    skv_ctx *c, *cq;
    int32_t *win;     /* [k + 1] BOS + tokens */
    float *lf, *lq;   /* [k + 1][V] exact and restored logits */
    float *kv, *out;  /* [floats of P positions] exact and restored */
    size_t k, P, nf;  /* tokens after BOS, prefix positions, floats of the prefix */
    struct skv_kvtc_calib *tc;       /* RD_KVTC points: the calibration */
    float tc_theta;   /* RD_KVTC: water level (0: the codec's default) */
    int32_t greedy[RD_GREEDY]; /* the exact cache's greedy continuation of this window */
    int g_len;        /* greedy tokens compared: min(RD_GREEDY, positions of the window from P on) */
} rd_window;

double rd_cpu_now(void);
/* The curves of o over tok[0..n) (BOS not included; windows of o->ctx): up to RD_MAX_POINTS
 * points into pts (*n_pts), the markdown table to md, the CSV appended to o->csv when set.
 * 0, or -1 after a message. */
int rd_run(const rd_opts *o, skv_model *m, const int32_t *tok, size_t n, rd_point *pts, int *n_pts, FILE *md);
/* Surprisal in bits of win[t] under the exact logits row t - 1 (0 for t = 0); *top1 its
 * argmax row's probability and whether win[t] is that argmax. */
double rd_surprisal(const rd_window *w, size_t t, double *p_top1, int *is_top1);
/* The paper's top-k predictor for point pt on window w: restored KV into w->out. */
int rd_topk_restore(rd_window *w, rd_point *pt, int k, double thr);

/* tools/bench/bench_kvtc.c: the transform codec's points (kvtc, kvtc+ramp, kvtc+tok+ramp at each
 * step of the list), their restore into w->out, and the calibration file of o->kvtc. */
void rd_kvtc_points(rd_point *pts, int *n, const char *steps, double ratio);
int rd_kvtc_restore(rd_window *w, rd_point *pt);

/* tools/bench/bench_rd_greedy.c: c holds the window's prefix (positions 0 .. P-1, maybe more after):
 * truncated to P, it runs win[P] and then w->g_len greedy tokens into out (the last at
 * position P + g_len - 1, inside the window); 0 or -1. */
int rd_greedy(rd_window *w, skv_ctx *c, int32_t *out);
/* Leading tokens of got equal to w->greedy (0 .. w->g_len). */
int rd_greedy_match(const rd_window *w, const int32_t *got);
struct skv_kvtc_calib *rd_kvtc_load(const char *path);

#endif
