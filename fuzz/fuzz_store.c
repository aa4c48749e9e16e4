/* Fuzz target for the session store's records (src/store/store*.c): a store whose LMDB
 * records were damaged by someone else.
 *
 * Setup (once): a store of four sessions sharing prefixes (nodes in every tier: kv, cmvd,
 * with the dictionary and tier records; docs/store.md "Tiers"), made with the fuzzing model
 * fuzz/models/tiny.gguf ($SEQKV_FUZZ_STORE_MODEL overrides), in a fresh directory
 * under /dev/shm (else $TMPDIR, /tmp), removed at exit; its data file is kept in memory,
 * and every record of every table (meta: header, state, model path; nodes; children;
 * sessions; KV blobs) is listed. With $FUZZ_STORE_SEEDS set to a directory, one seed per
 * record (its index, mode 0, its value unchanged) is written there (fuzz/corpus/store).
 * Input: byte 0 picks a record, byte 1 the mode, the rest is the record's new value.
 *   mode bit 0: write XXH3-64 of the value's other bytes into its last 8 (the checksum
 *               place of the header, state, model and session records), so that mutations
 *               get past the checksums
 *   mode bit 1: delete the record instead
 *   mode bit 2: open the store writable, as a writer would (the version upgrade, the
 *               placement index's build, every get's access record and placement, the
 *               remove's write transaction), and also run gc (check, demote / refill to
 *               the budget); without it the store is opened SKV_STORE_READONLY (no write
 *               transaction, no 2 MiB LMDB dirty-page list: the cheap case)
 * Per input the one record is changed with LMDB directly in an edit copy of the pristine
 * store (kept open for the run, the record put back after), the result copied to work/,
 * and that store is opened and used: list, stats, match, a verified get of every listed
 * session whose get reads the changed record (at least one get per input), remove of a
 * session that does not exist. Which sessions' gets read a record is measured once at
 * set-up: a store with the record deleted, a get of each session; a record whose
 * deletion fails none (meta, children, placement records) is taken to concern all.
 * Checks (abort on violation): open either succeeds or fails with a message; every call
 * that fails leaves a message (skv_store_last_error) and a known status; a verified get
 * that succeeds returns the tokens of one of the four sessions, whole. That holds even
 * for a record forged whole with its checksums recomputed (mode bit 0; libFuzzer learns
 * a digest from the check's memcmp): a session record must end below the root, with
 * tokens, at a node where a session ends, so one changed record can only name another
 * session's end (found 2026-12-04: a record ending at the root with 0 tokens was
 * "verified"; docs/store.md "LMDB layout"). ASan / LSan: no bad access and no leak,
 * whatever the record says. */
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "seqkv.h"

#define N_SES 4
#define MAX_REC 512
#define CTX 64

typedef struct {
    char db[16];         /* "" = the unnamed table */
    uint8_t key[64];
    size_t klen;
    uint8_t *orig;       /* the pristine value */
    size_t olen;
} rec_ref;

static struct {
    skv_model *model;
    skv_ctx *ctx;
    char base[256], work[300], edit[300];
    uint8_t *image;      /* the pristine data.mdb */
    size_t image_len;
    MDB_env *denv;       /* edit/: a copy of the pristine store, open for the whole run */
    rec_ref rec[MAX_REC];
    size_t n_rec;
    int32_t tok[N_SES][40];
    size_t n_tok[N_SES];
    uint8_t dep[MAX_REC]; /* bit k: session k's get reads record i (set-up's probe) */
    int ready;
} g;

static const char *const ses_name[N_SES] = {"alpha", "beta", "gamma", "delta"};

/* $SEQKV_FUZZ_STORE_MODEL, else the fuzzing model fuzz/models/tiny.gguf (2 layers, n_embd
 * 16): a verified get of a session stored without KV recomputes it, and the seeds' record
 * indices are those of a store made with this model. */
static int load_model(void)
{
    const char *env = getenv("SEQKV_FUZZ_STORE_MODEL");
    return skv_model_load(env && *env ? env : "fuzz/models/tiny.gguf", NULL, &g.model, NULL, 0) == SKV_OK ? 0 : -1;
}

/* Three sessions: 30 tokens, its first 12 plus 10 others, its first 20 (splits, an end
 * inside a node). */
static int make_store(void)
{
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    skv_model_info mi;
    skv_model_get_info(g.model, &mi);
    for (int i = 0; i < 30; i++) g.tok[0][i] = (int32_t)((i * 37 + 11) % mi.n_vocab);
    memcpy(g.tok[1], g.tok[0], 12 * sizeof(int32_t));
    for (int i = 12; i < 22; i++) g.tok[1][i] = (int32_t)((i * 53 + 5) % mi.n_vocab);
    memcpy(g.tok[2], g.tok[0], 20 * sizeof(int32_t));
    memcpy(g.tok[3], g.tok[0], 8 * sizeof(int32_t));
    for (int i = 8; i < 18; i++) g.tok[3][i] = (int32_t)((i * 71 + 3) % mi.n_vocab);
    g.n_tok[0] = 30, g.n_tok[1] = 22, g.n_tok[2] = 20, g.n_tok[3] = 18;
    /* the default budget: every node keeps its KV, so a get reads blobs and runs no model */
    if (skv_store_open(g.base, g.model, SKV_STORE_CREATE, &p, &st, NULL, 0)) return -1;
    for (int i = 0; i < N_SES - 1; i++)
        if (skv_store_put(st, ses_name[i], g.tok[i], g.n_tok[i], NULL)) return -1;
    /* every record kind of docs/store.md "Tiers": a dictionary and the tier record, then a put
     * with budget 0 codes every node (cmvd); a get of alpha materialises its path again */
    int32_t tk[CTX];
    size_t nt;
    if (skv_store_set_price(st, 1.0) || skv_store_train_dict(st, 0, NULL, NULL) || skv_store_set_budget(st, 0) ||
        skv_store_put(st, ses_name[3], g.tok[3], g.n_tok[3], NULL) || skv_store_set_budget(st, 64u << 20) ||
        skv_store_get(st, ses_name[0], g.ctx, SKV_STORE_VERIFY, tk, CTX, &nt, NULL))
        return -1;
    skv_store_close(st);
    return 0;
}

static int write_file(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f)) ok = 0;
    return ok ? 0 : -1;
}

static void write_seed(const MDB_val *v)
{
    const char *dir = getenv("FUZZ_STORE_SEEDS");
    char path[400];
    uint8_t buf[2 + 4096];
    if (!dir || v->mv_size > sizeof buf - 2) return;
    snprintf(path, sizeof path, "%s/rec_%03zu", dir, g.n_rec);
    buf[0] = (uint8_t)g.n_rec, buf[1] = 0;
    memcpy(buf + 2, v->mv_data, v->mv_size);
    if (write_file(path, buf, 2 + v->mv_size)) return;
}

static void list_table(MDB_txn *txn, const char *db)
{
    MDB_dbi dbi;
    MDB_cursor *c;
    MDB_val k, v;
    if (mdb_dbi_open(txn, db[0] ? db : NULL, 0, &dbi) || mdb_cursor_open(txn, dbi, &c)) return;
    for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); !rc && g.n_rec < MAX_REC;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        rec_ref *r = &g.rec[g.n_rec];
        if (k.mv_size > sizeof r->key) continue;
        snprintf(r->db, sizeof r->db, "%s", db);
        memcpy(r->key, k.mv_data, k.mv_size);
        r->klen = k.mv_size;
        if (!(r->orig = malloc(v.mv_size ? v.mv_size : 1))) break;
        memcpy(r->orig, v.mv_data, v.mv_size);
        r->olen = v.mv_size;
        write_seed(&v);
        g.n_rec++;
    }
    mdb_cursor_close(c);
}

static int open_env(const char *dir, unsigned flags, MDB_env **env)
{
    if (mdb_env_create(env)) return -1;
    if (mdb_env_set_maxdbs(*env, 8) || mdb_env_set_mapsize(*env, 64u << 20) || mdb_env_open(*env, dir, flags, 0664)) {
        mdb_env_close(*env);
        return -1;
    }
    return 0;
}

/* Every record of the named tables (the unnamed table lists their names). */
static int list_records(void)
{
    static const char *const dbs[] = {"meta", "nodes", "children", "sessions", "kv"};
    MDB_env *env;
    MDB_txn *txn;
    if (open_env(g.base, MDB_RDONLY, &env)) return -1;
    if (mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) {
        mdb_env_close(env);
        return -1;
    }
    for (size_t i = 0; i < sizeof dbs / sizeof *dbs; i++) list_table(txn, dbs[i]);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return g.n_rec ? 0 : -1;
}

static int read_image(void)
{
    char path[400];
    snprintf(path, sizeof path, "%s/data.mdb", g.base);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n <= 0 || !(g.image = malloc((size_t)n)) || fread(g.image, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    g.image_len = (size_t)n;
    return n > 0 ? 0 : -1;
}

static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g.base);
    if (system(cmd) != 0) return;
}

static int probe_deps(void);

static void setup(void)
{
    const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR"); /* no fsync cost */
    skv_ctx_params cp = skv_ctx_default_params();
    g.ready = -1;
    snprintf(g.base, sizeof g.base, "%s/skv_fuzz_store_%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    snprintf(g.work, sizeof g.work, "%s/work", g.base);
    snprintf(g.edit, sizeof g.edit, "%s/edit", g.base);
    cp.n_ctx = CTX;
    if (load_model() || skv_ctx_create(g.model, &cp, &g.ctx)) return;
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' '%s'", g.base, g.work, g.edit);
    if (system(cmd) != 0) return;
    atexit(cleanup);
    if (make_store() || list_records() || read_image()) return;
    char path[400];
    snprintf(path, sizeof path, "%s/data.mdb", g.edit);
    if (write_file(path, g.image, g.image_len) || open_env(g.edit, MDB_NOSYNC, &g.denv) || probe_deps()) return;
    g.ready = 1;
}

/* One record of the edit environment set to val[0..n) (del: deleted) in one transaction. */
static int edit(rec_ref *r, int del, uint8_t *val, size_t n)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {r->klen, r->key}, v = {n, val};
    int rc = mdb_txn_begin(g.denv, NULL, 0, &txn);
    if (rc) return -1;
    rc = mdb_dbi_open(txn, r->db[0] ? r->db : NULL, 0, &dbi);
    if (!rc) rc = del ? mdb_del(txn, dbi, &k, NULL) : mdb_put(txn, dbi, &k, &v, 0);
    if (!rc) return mdb_txn_commit(txn) ? -1 : 0;
    mdb_txn_abort(txn);
    return -1;
}

/* work/data.mdb := the pristine store with the one record changed (or deleted). The edit
 * environment stays open (opening an LMDB environment under ASan, its 2 MiB dirty-page
 * list, was a quarter of the time per input): the record is changed there, the store
 * copied to work/ (mdb_env_copy2: the same records; page numbers may differ from the
 * pristine file's), and the record put back. */
static int damage(rec_ref *r, int del, uint8_t *val, size_t n)
{
    char path[400];
    snprintf(path, sizeof path, "%s/data.mdb", g.work);
    if ((unlink(path) && access(path, F_OK) == 0) || edit(r, del, val, n)) return -1;
    int rc = mdb_env_copy2(g.denv, g.work, 0);
    if (edit(r, 0, r->orig, r->olen)) abort(); /* the next input must start from the pristine records */
    return rc ? -1 : 0;
}

/* g.dep[i]: the sessions whose verified get fails once record i is deleted (the ones that
 * read it); none: all (a record every get may read, or whose loss a get survives). */
static int probe_deps(void)
{
    int32_t tok[CTX];
    size_t nt;
    for (size_t i = 0; i < g.n_rec; i++) {
        skv_store *st;
        uint8_t mask = 0;
        if (damage(&g.rec[i], 1, NULL, 0)) return -1;
        if (skv_store_open(g.work, g.model, SKV_STORE_READONLY, NULL, &st, NULL, 0) == SKV_OK) {
            for (int k = 0; k < N_SES; k++)
                if (skv_store_get(st, ses_name[k], g.ctx, SKV_STORE_VERIFY, tok, CTX, &nt, NULL)) mask |= (uint8_t)(1u << k);
            skv_store_close(st);
        }
        g.dep[i] = mask ? mask : (uint8_t)((1u << N_SES) - 1);
    }
    return 0;
}

static int known(int rc)
{
    return rc == SKV_ERR_FORMAT || rc == SKV_ERR_MISMATCH || rc == SKV_ERR_RANGE || rc == SKV_ERR_UNSUPPORTED ||
           rc == SKV_ERR_NOMEM || rc == SKV_ERR_IO || rc == SKV_ERR_INTERNAL || rc == SKV_ERR_INVALID_ARG;
}

/* A failed call says why; a successful one leaves no message. */
static void said(const skv_store *st, int rc)
{
    const char *e = skv_store_last_error(st);
    if (rc < 0 ? !known(rc) || !e[0] : e[0] != 0) abort();
}

typedef struct {
    char name[N_SES + 1][256];
    size_t n;
} names;

static int collect(void *u, const skv_store_session_info *s)
{
    names *nm = u;
    snprintf(nm->name[nm->n++], sizeof nm->name[0], "%s", s->name);
    return nm->n == N_SES + 1;
}

/* A verified get that succeeds gives one of the stored sessions, whole. */
static void get_one(skv_store *st, const char *name)
{
    int32_t tok[CTX];
    size_t n = 0;
    int rc = skv_store_get(st, name, g.ctx, SKV_STORE_VERIFY, tok, CTX, &n, NULL);
    said(st, rc);
    if (rc != SKV_OK) return;
    for (int i = 0; i < N_SES; i++)
        if (n == g.n_tok[i] && !memcmp(tok, g.tok[i], n * sizeof *tok)) return;
    abort();
}

static int session_of(const char *name)
{
    for (int k = 0; k < N_SES; k++)
        if (!strcmp(name, ses_name[k])) return k;
    return -1;
}

/* A verified get of every listed session whose get reads the changed record (dep), and
 * of the first listed one when none does (its record deleted, say). */
static void get_some(skv_store *st, const names *nm, uint8_t dep)
{
    size_t n = 0;
    for (size_t i = 0; i < nm->n; i++) {
        int k = session_of(nm->name[i]);
        if (k < 0 || (dep >> k & 1)) get_one(st, nm->name[i]), n++;
    }
    if (!n && nm->n) get_one(st, nm->name[0]);
}

static void use_store(skv_store *st, int gc, uint8_t dep)
{
    names nm = {.n = 0};
    skv_store_stats ss;
    skv_store_match_result mr;
    skv_store_gc_report gr;
    int rc = skv_store_list(st, collect, &nm);
    said(st, rc);
    said(st, skv_store_get_stats(st, &ss));
    said(st, skv_store_match(st, g.tok[0], g.n_tok[0], &mr));
    get_some(st, &nm, dep);
    if ((rc = skv_store_remove(st, "no such session")) == SKV_OK) abort();
    said(st, rc);
    if (gc) said(st, skv_store_gc(st, &gr));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t val[1 << 16];
    skv_store *st = NULL;
    char err[512];
    if (!g.ready) setup();
    if (g.ready < 0 || size < 2 || size - 2 > sizeof val) return 0;
    uint8_t mode = data[1];
    size_t n = size - 2;
    memcpy(val, data + 2, n);
    if ((mode & 1) && n >= 8) {
        uint64_t h = XXH3_64bits(val, n - 8);
        for (int i = 0; i < 8; i++) val[n - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
    }
    size_t ri = data[0] % g.n_rec;
    if (damage(&g.rec[ri], mode & 2, val, n)) return 0;
    err[0] = 0;
    int rc = skv_store_open(g.work, g.model, mode & 4 ? 0 : SKV_STORE_READONLY, NULL, &st, err, sizeof err);
    if (rc != SKV_OK) {
        if (!known(rc) || !err[0] || st) abort();
        return 0;
    }
    use_store(st, mode & 4, g.dep[ri]);
    skv_store_close(st);
    return 0;
}
