/* seqkv bench: representations.csv and corollary5.csv (columns: docs/bench.md). */
#include <string.h>

#include "bench_internal.h"

/* A CSV field: quoted (with "" escapes) when it holds a comma or a quote. */
void bench_csv_str(FILE *f, const char *s, const char *sep)
{
    if (!strpbrk(s, ",\"\n")) {
        fprintf(f, "%s%s", s, sep);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fprintf(f, "\"%s", sep);
}

static void representation_line(FILE *f, const bench_case *bc, const bench_row *w)
{
    bench_csv_str(f, bc->model, ",");
    bench_csv_str(f, bc->text, ",");
    fprintf(f, "%zu,", bc->n);
    bench_csv_str(f, w->repr, ",");
    fprintf(f, "%s,%.4f,%.6g,%.6g,%s,", w->family, w->bits, bc->f16_bits / w->bits, bc->tq35_bits / w->bits,
            w->lossless ? "yes" : "no");
    if (w->has_quality || w->lossless) fprintf(f, "%.6f,%.6f,", w->ppl_delta, w->kl);
    else fprintf(f, ",,");
    fprintf(f, "%.1f,", w->restore_tps);
    bench_csv_str(f, w->measured, ",");
    bench_csv_str(f, w->verified, "\n");
}

static void c5_line(FILE *f, const bench_case *bc, const c5_point *p)
{
    bench_csv_str(f, bc->model, ",");
    bench_csv_str(f, bc->text, ",");
    fprintf(f, "%d,%d,%.5f,%.5f,%.1f,%.1f,%.4f,%.4f\n", bc->c5_windows, p->L, p->p_bits, p->run_mean, bc->f16_bits,
            bc->tq35_bits, bc->tq35_bits / p->run_mean, bc->tq35_bits / p->p_bits);
}

void bench_write_csvs(FILE *rep, FILE *c5, const bench_case *cs, int n_cases)
{
    fprintf(rep, "model,text,tokens,representation,family,bits_per_position,ratio_vs_f16,ratio_vs_tq3.5,lossless,"
                 "ppl_delta,kl_nats_per_token,restore_tokens_per_s,restore_measures,verified_bit_exact\n");
    fprintf(c5, "model,text,windows,L,bucket_mean_bits,running_mean_bits,f16_bits,tq3.5_bits,ratio_tq3.5_running,"
                "ratio_tq3.5_bucket\n");
    for (int i = 0; i < n_cases; i++) {
        for (int k = 0; k < cs[i].n_rows; k++) representation_line(rep, &cs[i], &cs[i].rows[k]);
        for (int k = 0; k < cs[i].n_c5; k++) c5_line(c5, &cs[i], &cs[i].c5[k]);
    }
}
