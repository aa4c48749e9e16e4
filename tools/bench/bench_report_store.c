/* seqkv bench: the store workload section of report.md and store_workload.csv. */
#include "bench_internal.h"

typedef struct {
    const char *name;
    double bytes;
} size_row;

enum { N_COMPUTED = 6 };

/* The computed sizes of the workload's sessions; [0] (f16 per session) is what the ratios compare with. */
static void computed_rows(const bench_case *bc, size_row *rows)
{
    double pos = (double)bc->wl_positions, uq = (double)bc->wl_unique, f16 = bc->f16_bits / 8, tq = bc->tq35_bits / 8;
    const size_row r[N_COMPUTED] = {
        {"f16 KV per session", pos * f16},
        {"TQ-3.5 KV per session", pos * tq},
        {"exact prefix sharing, f16 KV", uq * f16},
        {"exact prefix sharing, TQ-3.5 KV", uq * tq},
        {"model-coded per session (token floor, no sharing)", bc->wl_floor_all / 8},
        {"prefix sharing at the token floor", bc->wl_floor_unique / 8},
    };
    for (int k = 0; k < N_COMPUTED; k++) rows[k] = r[k];
}

/* One line of the table and of the CSV: bytes over `positions` session positions (`unique` in the trie). */
static void size_line(FILE *f, FILE *csv, const bench_case *bc, const char *name, const char *csv_name, double bytes,
                      double positions, double unique, double f16_bytes)
{
    char a[32];
    bench_fmt_ratio(a, sizeof a, f16_bytes / bytes);
    fprintf(f, "| %s | %.0f | %.3f | %s |\n", name, bytes, bytes * 8 / positions, a);
    bench_csv_str(csv, bc->model, ",");
    bench_csv_str(csv, bc->text, ",");
    fprintf(csv, "%zu,%.0f,%.0f,", bc->wl_sessions, positions, unique);
    bench_csv_str(csv, csv_name, ",");
    fprintf(csv, "%.0f,%.4f,%.6g\n", bytes, bytes * 8 / positions, f16_bytes / bytes);
}

/* The real store's rows ([0] budget 0, [1] default budget), or a line saying why there are none. */
static void store_lines(FILE *f, FILE *csv, const bench_case *bc, double f16_bytes)
{
    for (int b = 0; b < 2; b++) {
        const bench_store_run *s = &bc->store[b];
        if (!s->ok) continue;
        char name[160];
        snprintf(name, sizeof name, "`seqkv store`, %s: bytes on disk (%.0f session tokens, %.0f unique)",
                 b ? "default budget (materialised KV)" : "budget 0 (tokens only)", s->tokens, s->unique);
        size_line(f, csv, bc, name,
                  b ? "seqkv store, default budget (bytes on disk)" : "seqkv store, budget 0 (bytes on disk)", s->bytes,
                  s->tokens, s->unique, f16_bytes);
    }
    if (!bc->store[0].ok && !bc->store[1].ok)
        fprintf(f, "| `seqkv store` bytes on disk | not measured (--quick, --no-store, or the store failed) | | |\n");
}

static void store_case(FILE *f, FILE *csv, const bench_case *bc)
{
    size_row rows[N_COMPUTED];
    double pos = (double)bc->wl_positions, uq = (double)bc->wl_unique;
    computed_rows(bc, rows);
    fprintf(f, "**%s on %s**: %zu sessions = one %d-token system prompt (BOS + text) + one of %zu %d-token turns + "
               "a %d-token reply each (all taken from the text in order); %zu session positions, %zu unique trie positions "
               "(sort + longest common prefix).\n\n",
            bc->model, bc->text, bc->wl_sessions, bc->wl_prompt, (size_t)bc->wl_groups, bc->wl_turn, bc->wl_reply,
            bc->wl_positions, bc->wl_unique);
    fprintf(f, "| representation | total bytes | bits per session position | vs f16 per session |\n|---|---:|---:|---:|\n");
    for (int k = 0; k < N_COMPUTED; k++)
        size_line(f, csv, bc, rows[k].name, rows[k].name, rows[k].bytes, pos, uq, rows[0].bytes);
    store_lines(f, csv, bc, rows[0].bytes);
    fprintf(f, "\n");
}

void bench_report_store(FILE *f, FILE *csv, const bench_case *cs, int n_cases)
{
    fprintf(f, "\n## Store workload (computed)\n\n");
    fprintf(csv, "model,text,sessions,session_positions,unique_positions,representation,total_bytes,"
                 "bits_per_session_position,ratio_vs_f16_per_session\n");
    for (int i = 0; i < n_cases; i++)
        if (cs[i].wl_ok) store_case(f, csv, &cs[i]);
    fprintf(f, "The token-floor rows are sums of the model's surprisal (computed, not files). The `seqkv store` rows "
               "(when present) are a real store (issue 5, LMDB) holding the same sessions, written out as text and "
               "re-tokenized by `store put` (so its token counts can differ slightly); its bytes on disk are LMDB pages "
               "in use, as its `stats` reports them, index and free pages included.\n");
}
