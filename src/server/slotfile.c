/* POST /slots/{id}?action=save|restore|erase, as llama-server: a slot's KV saved to, or
 * restored from, a file in --slot-save-path, or erased. A server with --store and no
 * --slot-save-path keeps the saves in its store instead, as sessions named "slot:NAME",
 * so every server on that store restores them (a fleet's shared records); without either
 * every action is 501.
 *
 * The file is a .skv session (docs/format.md), codec "cm": the slot's tokens range-coded
 * plus the digest of their KV, so n_written is a few bits per token where llama-server
 * writes the whole KV; a restore regenerates the KV with one batched prefill and checks
 * the digest, so the slot holds bit for bit the KV it had (a file of another model is
 * refused). A store save is a put of the slot's tokens (its prefix shared with what the
 * store holds), a store restore a verified get. A file name is one path component of
 * [A-Za-z0-9._-], 1..255 bytes (250 in the store), not starting with a dot: no separator,
 * no "..", nothing outside the directory.
 *
 * The action runs as a job on its slot (the slot's thread, between two completions), so
 * it never races the slot's decoding; the HTTP thread waits for it like a completion. */
#include <errno.h>
#include "core/fpguard.h"
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/srv.h"

static double ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#define SLOT_PREFIX "slot:" /* a store save's session name: SLOT_PREFIX + the file name */

/* Slot saves go to the store (no --slot-save-path, a --store). */
static int in_store(const srv *s)
{
    return !s->p.slot_save_path && s->store;
}

static int valid_filename(const srv *s, const char *f)
{
    size_t n = f ? strlen(f) : 0, max = SRV_MAX_FILENAME - (in_store(s) ? strlen(SLOT_PREFIX) : 0);
    if (!n || n > max || f[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = f[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                 c == '-';
        if (!ok) return 0;
    }
    return 1;
}

/* The slot id of "/slots/ID": 0..parallel-1, else -1. */
static int slot_of(const srv *s, const char *url)
{
    const char *d = url + strlen("/slots/");
    int id = 0;
    if (!*d || strlen(d) > 3) return -1;
    for (; *d; d++) {
        if (*d < '0' || *d > '9') return -1;
        id = id * 10 + (*d - '0');
    }
    return id < s->p.parallel ? id : -1;
}

static int action_of(const char *a)
{
    if (!a) return SRV_ACT_NONE;
    if (!strcmp(a, "save")) return SRV_ACT_SAVE;
    if (!strcmp(a, "restore")) return SRV_ACT_RESTORE;
    return strcmp(a, "erase") ? SRV_ACT_NONE : SRV_ACT_ERASE;
}

static json_t *action_reply(const srv_job *j)
{
    json_int_t t = (json_int_t)j->act_tokens, b = (json_int_t)j->act_bytes;
    if (j->action == SRV_ACT_ERASE) return json_pack("{s:i,s:I}", "id_slot", j->id_slot, "n_erased", t);
    if (j->action == SRV_ACT_SAVE)
        return json_pack("{s:i,s:s,s:I,s:I,s:{s:f}}", "id_slot", j->id_slot, "filename", j->filename, "n_saved", t,
                         "n_written", b, "timings", "save_ms", j->t_act_ms);
    return json_pack("{s:i,s:s,s:I,s:I,s:{s:f}}", "id_slot", j->id_slot, "filename", j->filename, "n_restored", t,
                     "n_read", b, "timings", "restore_ms", j->t_act_ms);
}

/* Queues the action on its slot, waits, replies. Takes j. */
static int run_action(srv_req *r, srv_job *j)
{
    int code = srv_pool_submit(r->s->pool, j);
    if (code) {
        srv_job_unref(j);
        return srv_reply_error(r, code, "%s", code == 503 ? "the queue is full: retry later" : "Invalid slot ID");
    }
    srv_job_wait(j, NULL, NULL); /* a slot action runs to its end */
    int rc = j->status ? srv_reply_error(r, j->status, "%s", j->err) : srv_reply_json(r, 200, action_reply(j));
    srv_job_unref(j);
    return rc;
}

int srv_rt_slot_action(srv_req *r)
{
    const srv *s = r->s;
    if (!s->p.slot_save_path && !s->store)
        return srv_reply_error(r, 501, "This server does not support slots action. Start it with `--slot-save-path` "
                                       "(files) or `--store` (sessions in the store)");
    int id = slot_of(s, r->url), act = action_of(r->action);
    if (id < 0) return srv_reply_error(r, 400, "Invalid slot ID");
    if (act == SRV_ACT_NONE) return srv_reply_error(r, 400, "Invalid action");
    const char *f = json_string_value(json_object_get(r->body, "filename"));
    if (act != SRV_ACT_ERASE && !valid_filename(s, f))
        return srv_reply_error(r, 400, "Invalid filename: 1..%d bytes of [A-Za-z0-9._-], not starting with '.'",
                               SRV_MAX_FILENAME - (in_store(s) ? (int)strlen(SLOT_PREFIX) : 0));
    srv_job *j = srv_job_new();
    if (!j) return srv_reply_error(r, 500, "out of memory");
    j->action = act, j->id_slot = id;
    if (f && act != SRV_ACT_ERASE) snprintf(j->filename, sizeof j->filename, "%s", f);
    return run_action(r, j);
}

/* ---- on the slot ---- */

static int fail(srv_job *j, int code, const char *what, const char *why)
{
    snprintf(j->err, sizeof j->err, "%s %.64s: %.160s", what, j->filename, why);
    return code;
}

static int path_of(const srv *s, const srv_job *j, char *out, size_t cap)
{
    return snprintf(out, cap, "%s/%s", s->p.slot_save_path, j->filename) < (int)cap ? 0 : -1;
}

/* Writes data to path atomically (a temp file, fsync, rename). */
static int write_file(const char *path, const uint8_t *data, size_t n)
{
    char tmp[4210];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644), rc = fd < 0 ? -1 : 0;
    for (size_t at = 0; !rc && at < n;) {
        ssize_t w = write(fd, data + at, n - at);
        if (w <= 0) rc = -1;
        else at += (size_t)w;
    }
    if (!rc) rc = fsync(fd);
    if (fd >= 0) close(fd);
    if (!rc) rc = rename(tmp, path);
    if (rc) unlink(tmp);
    return rc;
}

static int slot_save(srv *s, srv_job *j, const int32_t *tokens, size_t n)
{
    char path[4200], err[256];
    skv_encoder *e = NULL;
    uint8_t *data = NULL;
    size_t size = 0;
    if (!n) return fail(j, 400, "save", "the slot holds no tokens");
    if (path_of(s, j, path, sizeof path)) return fail(j, 400, "save", "path too long");
    skv_encoder_params ep = skv_encoder_default_params();
    ep.codec = SKV_CODEC_CM, ep.n_ctx = s->n_ctx, ep.n_threads = s->p.n_threads, ep.skip_entropy = 1;
    int rc = skv_encoder_create(s->model, &ep, &e, err, sizeof err);
    if (!rc && (rc = skv_encoder_append(e, tokens, n, NULL))) snprintf(err, sizeof err, "%s", skv_encoder_last_error(e));
    if (!rc && (rc = skv_encoder_finish(e, &data, &size))) snprintf(err, sizeof err, "%s", skv_encoder_last_error(e));
    skv_encoder_free(e);
    if (!rc && write_file(path, data, size)) rc = -1, snprintf(err, sizeof err, "%s", strerror(errno));
    free(data);
    if (rc) return fail(j, 500, "save", err);
    j->act_tokens = n, j->act_bytes = size;
    return 0;
}

/* The file's bytes, at most SRV_MAX_SLOT_FILE; NULL with a message. */
static uint8_t *read_slot_file(const char *path, size_t *size, skv_err *err)
{
    struct stat sb;
    int fd = open(path, O_RDONLY);
    uint8_t *buf = NULL;
    size_t got = 0;
    if (fd < 0) return skv_fail(err, SKV_ERR_INVALID_ARG, "%s", strerror(errno)), NULL;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_size <= 0 || (uint64_t)sb.st_size > SRV_MAX_SLOT_FILE)
        skv_fail(err, SKV_ERR_INVALID_ARG, "not a regular file of 1..%u bytes", SRV_MAX_SLOT_FILE);
    else if (!(buf = malloc((size_t)sb.st_size)))
        skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    for (ssize_t r = 1; buf && got < (size_t)sb.st_size && r > 0; got += r > 0 ? (size_t)r : 0)
        r = read(fd, buf + got, (size_t)sb.st_size - got);
    close(fd);
    if (buf && got != (size_t)sb.st_size) free(buf), buf = NULL, skv_fail(err, SKV_ERR_INVALID_ARG, "short read");
    *size = got;
    return buf;
}

static int slot_restore(srv *s, srv_job *j, skv_ctx *ctx, int32_t *tokens, size_t *n)
{
    char path[4200], err[256];
    size_t size = 0;
    skv_session *ss = NULL;
    skv_session_info info;
    if (path_of(s, j, path, sizeof path)) return fail(j, 400, "restore", "path too long");
    skv_err rerr = {0};
    uint8_t *data = read_slot_file(path, &size, &rerr);
    if (!data) return fail(j, 400, "restore", rerr.msg);
    int rc = skv_session_open(data, size, &ss, err, sizeof err);
    free(data);
    if (!rc && (skv_session_get_info(ss, &info) || info.n_segments != 1 || info.n_tokens > (uint64_t)s->n_ctx))
        rc = -1, snprintf(err, sizeof err, "one segment of at most %d tokens expected", s->n_ctx);
    skv_restore_params rp = {.verify = 1};
    *n = 0; /* the slot is cleared whatever happens below */
    if (!rc && (rc = skv_session_restore_segment(ss, s->model, 0, ctx, &rp, tokens, (size_t)s->n_ctx)))
        snprintf(err, sizeof err, "%s", skv_ctx_last_error(ctx));
    skv_session_free(ss);
    if (rc) {
        skv_ctx_truncate(ctx, 0);
        return fail(j, 400, "restore", err);
    }
    *n = (size_t)info.n_tokens;
    j->act_tokens = *n, j->act_bytes = size;
    return 0;
}

/* ---- in the store: sessions named SLOT_PREFIX + file name ---- */

/* The information content of tokens[0, n) in bytes (ceil(-log2 P / 8)): what a store
 * save or restore reports as n_written / n_read (the store shares its prefix with what it
 * holds, so the bytes it writes are fewer). 0 when the store cannot say. */
static size_t info_bytes(srv *s, const int32_t *tokens, size_t n)
{
    skv_store_match_result m;
    if (skv_store_match(s->store, tokens, n, &m) || m.n_matched != n) return 0;
    return (size_t)ceil(m.bits / 8.0);
}

/* A save replaces an earlier one of the same name, as a file would be (a name holding
 * other tokens is removed, then put again: a crash between loses that name's old save,
 * never another record). */
static int store_save(srv *s, srv_job *j, const int32_t *tokens, size_t n)
{
    char name[SRV_MAX_FILENAME + sizeof SLOT_PREFIX]; /* valid_filename keeps it to SRV_MAX_FILENAME bytes */
    skv_store_put_report r;
    if (!n) return fail(j, 400, "save", "the slot holds no tokens");
    snprintf(name, sizeof name, SLOT_PREFIX "%s", j->filename);
    int rc = skv_store_put(s->store, name, tokens, n, &r);
    /* the name is valid and the tokens are the model's: INVALID_ARG says the name holds others */
    if (rc == SKV_ERR_INVALID_ARG && !skv_store_remove(s->store, name)) rc = skv_store_put(s->store, name, tokens, n, &r);
    if (rc) return fail(j, rc == SKV_ERR_RANGE ? 400 : 500, "save", skv_store_last_error(s->store));
    j->act_tokens = n, j->act_bytes = (size_t)ceil(r.bits / 8.0);
    return 0;
}

static int store_restore(srv *s, srv_job *j, skv_ctx *ctx, int32_t *tokens, size_t *n)
{
    char name[SRV_MAX_FILENAME + sizeof SLOT_PREFIX]; /* valid_filename keeps it to SRV_MAX_FILENAME bytes */
    size_t got = 0;
    snprintf(name, sizeof name, SLOT_PREFIX "%s", j->filename);
    *n = 0; /* the slot is cleared whatever happens below */
    int rc = skv_store_get(s->store, name, ctx, SKV_STORE_VERIFY, tokens, (size_t)s->n_ctx, &got, NULL);
    if (rc) {
        skv_ctx_truncate(ctx, 0);
        if (rc == SKV_ERR_RANGE)
            return fail(j, 400, "restore", "the saved session is longer than the slot's context");
        return fail(j, rc == SKV_ERR_INVALID_ARG || rc == SKV_ERR_MISMATCH ? 400 : 500, "restore",
                    skv_store_last_error(s->store));
    }
    *n = got;
    j->act_tokens = got, j->act_bytes = info_bytes(s, tokens, got);
    return 0;
}

int srv_slot_action(srv *s, srv_job *j, skv_ctx *ctx, int32_t *tokens, size_t *n)
{
    double t0 = ms_now();
    int rc = 0;
    if (j->action == SRV_ACT_SAVE) {
        rc = in_store(s) ? store_save(s, j, tokens, *n) : slot_save(s, j, tokens, *n);
    } else if (j->action == SRV_ACT_RESTORE) {
        rc = in_store(s) ? store_restore(s, j, ctx, tokens, n) : slot_restore(s, j, ctx, tokens, n);
    } else {
        j->act_tokens = *n;
        *n = 0;
        skv_ctx_truncate(ctx, 0);
    }
    j->t_act_ms = ms_now() - t0;
    return rc;
}
