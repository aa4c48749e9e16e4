/* What a loaded model does to its weights before use: packed copies for the integer
 * kernels and, for large models, a resident copy on huge pages. */
#include "core/fpguard.h"
#include "engine/model_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/cpu.h"
#include "core/log.h"
#include "quant/repack.h"

/* ---- repacked weights (quant/repack.h) ----------------------------------------------
 * Where the CPU has AVX2, matrices of a type with a packed form (repack.h: every type with
 * an integer dot, and f16 / bf16 for the float kernels) get a packed copy at load for the
 * decode kernels
 * (SEQKV_REPACK=0: none); the file's pages they came from are dropped from the process
 * (madvise: they read back from the file if touched again, e.g. by the fingerprint), so
 * memory stays about one copy of the weights. */

void skv_weight_drop_pages(const uint8_t *p, size_t n)
{
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p, lo, hi;
    if (ps <= 0) return;
    lo = (a + (uintptr_t)ps - 1) / (uintptr_t)ps * (uintptr_t)ps;
    hi = (a + n) / (uintptr_t)ps * (uintptr_t)ps;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

#define HUGE_PAGE ((size_t)2 << 20)
#define PACK_CHUNK_ROWS 1024 /* packed and dropped a chunk at a time: the file pages never pile up */

/* n bytes aligned to huge pages (fewer faults at load, fewer TLB misses in decode), or NULL. */
static uint8_t *packed_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, n)) return NULL;
#ifdef MADV_HUGEPAGE
    if (n >= HUGE_PAGE) (void)madvise(p, n / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);
#endif
    return p;
}

static void repack_weight(skv_weight *w)
{
    size_t prb = skv_pack_row_bytes(w->type, w->K);
    uint8_t *p;
    if (!w->data || !prb || w->N % SKV_PACK_ROWS || w->packed || !(p = packed_alloc(prb * w->N))) return; /* keeps the file's rows */
    for (size_t r = 0; r < w->N; r += PACK_CHUNK_ROWS) {
        size_t n = w->N - r < PACK_CHUNK_ROWS ? w->N - r : PACK_CHUNK_ROWS;
        skv_pack_rows(w->type, w->data + r * w->row_bytes, w->row_bytes, w->K, n, p + r * prb);
        skv_weight_drop_pages(w->data + r * w->row_bytes, n * w->row_bytes);
    }
    w->packed = p;
    w->packed_row_bytes = prb;
    skv_weight_drop_pages(w->data, w->row_bytes * w->N); /* the pages the chunks shared */
}

/* ---- resident weights ------------------------------------------------------------------
 * Matrices read as they are (f16, f32, q8_0, ...) are copied at load out of the file's
 * mapping into anonymous memory on huge pages when the model is large, and the file's
 * pages dropped as for the repacked ones: a 1.1B F16 model's prefill pass of 33 tokens
 * took 0.73 s reading its weights from the page cache's 4 KiB pages and ~0.55 s from an
 * anonymous copy (2026-12-04, AMD EPYC; the same kernel over 2 GB of either kind: 44 vs
 * 33 ns per 2048-column row and token). SEQKV_RESIDENT=0 keeps the file's pages, =1
 * copies whatever the size. */
#define RESIDENT_MIN_BYTES ((size_t)256 << 20) /* below this the page cache's pages measured as fast */

static size_t matrix_bytes(const skv_weight *w) { return w->data && !w->packed ? w->row_bytes * w->N : 0; }

static int resident_weight(skv_weight *w)
{
    size_t n = matrix_bytes(w);
    uint8_t *p;
    if (!n || !(p = packed_alloc(n))) return 0; /* keeps the file's rows */
    for (size_t o = 0; o < n; o += HUGE_PAGE) {
        size_t k = n - o < HUGE_PAGE ? n - o : HUGE_PAGE;
        memcpy(p + o, w->data + o, k);
        skv_weight_drop_pages(w->data + o, k);
    }
    skv_weight_drop_pages(w->data, n); /* the pages the pieces shared */
    w->data = p;
    w->resident = 1;
    return 1;
}

/* The bytes of the matrices that were copied (after skv_model_resident_weights). */
static uint64_t resident_total(skv_weight *const *w, size_t n)
{
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++)
        if (w[i]->resident) t += (uint64_t)w[i]->row_bytes * (uint64_t)w[i]->N;
    return t;
}

/* The matrices to copy, in order, and how the copying is shared: the first thread takes
 * them until about half the bytes, the second the rest (each faults in and the kernel
 * clears its own pages: that, not the copy, is most of the time). */
typedef struct {
    skv_weight **w;
    size_t n, split;
} resident_job;

static void *resident_tail(void *arg)
{
    resident_job *j = arg;
    for (size_t i = j->split; i < j->n; i++) resident_weight(j->w[i]);
    return NULL;
}

void skv_model_resident_weights(skv_model *m)
{
    const char *e = getenv("SEQKV_RESIDENT");
    size_t total = 0, n = 0, cap = (size_t)m->info.n_layer * SKV_LT_COUNT + 1;
    if (e && !strcmp(e, "0")) return;
    resident_job j = {malloc(cap * sizeof(skv_weight *)), 0, 0};
    if (!j.w) return; /* keeps the file's rows */
    for (int l = 0; l < m->info.n_layer; l++)
        for (int t = 0; t < SKV_LT_COUNT; t++)
            if (!skv_tensor_is_vector(&skv_layer_tensors[t])) {
                skv_weight *w = skv_layer_matrix(&m->layers[l], &skv_layer_tensors[t]);
                if (matrix_bytes(w)) j.w[n++] = w, total += matrix_bytes(w);
            }
    if (!m->info.tied_output && matrix_bytes(&m->output)) /* tied: the token rows' copy stays the file's */
        j.w[n++] = &m->output, total += matrix_bytes(&m->output);
    j.n = n;
    if (total >= RESIDENT_MIN_BYTES || (e && !strcmp(e, "1"))) {
        size_t half = 0;
        while (j.split < n && half < total / 2) half += matrix_bytes(j.w[j.split++]);
        pthread_t th;
        int two = sysconf(_SC_NPROCESSORS_ONLN) > 1 && j.split < n && pthread_create(&th, NULL, resident_tail, &j) == 0;
        for (size_t i = 0; i < (two ? j.split : n); i++) resident_weight(j.w[i]);
        if (two) pthread_join(th, NULL);
        m->info.resident_bytes = resident_total(j.w, n);
    }
    free(j.w);
}

void skv_model_repack_weights(skv_model *m)
{
    const char *e = getenv("SEQKV_REPACK");
    if ((e && !strcmp(e, "0")) || !skv_cpu_has(SKV_CPU_AVX2_SET)) return;
    for (int l = 0; l < m->info.n_layer; l++)
        for (int t = 0; t < SKV_LT_COUNT; t++)
            if (!skv_tensor_is_vector(&skv_layer_tensors[t])) repack_weight(skv_layer_matrix(&m->layers[l], &skv_layer_tensors[t]));
    repack_weight(&m->output); /* tied: token rows still read from the file's copy */
}
