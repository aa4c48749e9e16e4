/* The C side of bench/python_overhead.py: the time of one verified restore of a .skv
 * file, done exactly as the Python binding's seqkv.restore() does it (session open,
 * context of the file's n_ctx, skv_session_restore_segment of the last segment with
 * verify, then both freed), REPEAT times; prints one line per restore:
 *     seconds <wall s> cpu <process CPU s>
 * (CPU time: on a shared machine it varies far less than the wall time.)
 * Usage: bench_restore_call MODEL FILE.skv [REPEAT=5] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "seqkv.h"

static double now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One restore as the binding does it; SKV_OK or the status (message on stderr). */
static int restore_once(skv_model *m, const char *data, size_t size)
{
    char err[512] = "";
    skv_session *s = NULL;
    skv_session_info si;
    skv_ctx *c = NULL;
    int32_t *tok = NULL;
    int rc = skv_session_open(data, size, &s, err, sizeof err);
    if (rc) goto done;
    skv_session_get_info(s, &si);
    skv_ctx_params p = skv_ctx_default_params();
    p.n_ctx = (int)si.n_ctx;
    p.n_threads = 1;
    p.kv_cache_type = si.kv_cache_type;
    if ((rc = skv_ctx_create(m, &p, &c))) {
        snprintf(err, sizeof err, "%s", skv_model_last_error(m));
        goto done;
    }
    tok = malloc((size_t)si.n_ctx * sizeof *tok + 1);
    skv_restore_params rp = {.verify = 1};
    if (!tok) rc = SKV_ERR_NOMEM;
    else if ((rc = skv_session_restore_segment(s, m, si.n_segments - 1, c, &rp, tok, si.n_ctx)))
        snprintf(err, sizeof err, "%s", skv_ctx_last_error(c));
done:
    if (rc) fprintf(stderr, "bench_restore_call: %s\n", err);
    free(tok);
    skv_ctx_free(c);
    skv_session_free(s);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_restore_call MODEL FILE.skv [REPEAT=5]\n");
        return 2;
    }
    int repeat = argc > 3 ? atoi(argv[3]) : 5;
    char err[512] = "";
    skv_model *m = NULL;
    size_t size = 0;
    char *data = bench_slurp(argv[2], 0, &size);
    if (!data || skv_model_load(argv[1], NULL, &m, err, sizeof err)) {
        fprintf(stderr, "bench_restore_call: %s\n", data ? err : "cannot read the .skv file");
        return 1;
    }
    uint8_t fp[16];
    skv_model_fingerprint(m, fp); /* as the binding's model, computed before the timing */
    for (int i = 0; i < repeat; i++) {
        double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        if (restore_once(m, data, size)) return 1;
        double c1 = now(CLOCK_PROCESS_CPUTIME_ID);
        printf("seconds %.6f cpu %.6f\n", now(CLOCK_MONOTONIC) - t0, c1 - c0);
    }
    skv_model_free(m);
    free(data);
    return 0;
}
