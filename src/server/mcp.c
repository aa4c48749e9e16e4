/* MCP servers (--mcp-servers-config PATH, --mcp-servers-json JSON): tools from other programs
 * next to the built-in ones of agent.c, as llama-server exposes them. Each server is a child
 * process speaking JSON-RPC 2.0 one message per line on its stdin and stdout (MCP's stdio
 * transport). At start every server is spawned once, asked for its tools (initialize,
 * notifications/initialized, tools/list; MCP_WARMUP_MS each) and stopped; its tools are
 * listed by GET /tools as "<server>_<tool>" (type "mcp"). A call spawns the server again
 * when it is not running (a server that fails to start is not tried again for
 * MCP_COOLDOWN_S), sends tools/call and answers {"plain_text_response": the text parts
 * joined by newlines} or {"error": ...} (an isError result, a JSON-RPC error, the call's
 * timeout, the client gone, the server dead).
 *
 * Config (Cursor's format, as llama-server): {"mcpServers": {NAME: {"command": PROGRAM,
 * "args": [...], "env": {K: V}, "cwd": DIR, "timeout_ms": N}}}; an entry without a command
 * is skipped with a warning, any other malformed field stops the start with a message.
 *
 * Bounds (a server is another program: it may hang, flood, crash or print garbage): one
 * message at most MCP_LINE_MAX bytes (longer lines are dropped, the bytes read charged to
 * the request's working memory), lines that are not JSON or not the reply awaited skipped
 * until the call's deadline, the child's stderr drained by a thread that keeps its last
 * MCP_TAIL bytes for the log, a child that does not leave within a second of its stdin
 * closing killed with its process group. One call at a time per server (a server's replies
 * come back in one stream); calls to different servers run in parallel. */
#define _GNU_SOURCE
#include "core/fpguard.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/srv.h"

#define MCP_PROTOCOL "2024-11-05"
#define MCP_CONFIG_MAX (1u << 20)    /* a config file's bytes */
#define MCP_MAX_SERVERS 64
#define MCP_MAX_TOOLS 1024          /* of all servers together */
#define MCP_NAME_MAX 64             /* a server's name (tool names are "<server>_<tool>") */
#define MCP_TOOL_NAME_MAX 128
#define MCP_TIMEOUT_DEFAULT 30000   /* ms, one call */
#define MCP_TIMEOUT_MAX 600000
#define MCP_WARMUP_MS 10000         /* listing one server's tools at start */
#define MCP_COOLDOWN_S 5
#define MCP_LINE_MAX (4u << 20)     /* one message from a server */
#define MCP_READ 65536              /* the read-ahead of a server's stdout */
#define MCP_TAIL 1024               /* the last bytes of its stderr, for the log */
#define MCP_POLL_MS 200             /* how often a call looks at its client */

extern char **environ;

typedef struct mcp_conf {
    char *name, **argv, **envp, *cwd; /* argv: command + args, NULL-terminated; envp: merged */
    int timeout_ms;
} mcp_conf;

typedef struct mcp_tool {
    char *name;         /* "<server>_<tool>" */
    char *tool;         /* the server's own name of it */
    char *about;
    json_t *schema;     /* its inputSchema (an object), owned */
    int server;
} mcp_tool;

typedef struct mcp_proc {
    pid_t pid;                  /* -1: not running */
    int reaped;                 /* it exited and was waited for (pid kept: its process group) */
    int in, out, err;           /* the child's stdin (ours to write), stdout, stderr */
    pthread_t drain;
    int draining;
    atomic_int drain_stop;      /* set before the join: a grandchild may keep stderr open */
    atomic_int drain_done;      /* the thread saw stderr's end */
    pthread_mutex_t tail_mu;
    char tail[MCP_TAIL];
    size_t tail_n;
    char *rd;                   /* stdout read ahead: rd[rd_at..rd_n) not yet taken */
    size_t rd_at, rd_n;
    long long next_id;
    int ready;                  /* initialize done */
} mcp_proc;

typedef struct mcp_server {
    mcp_conf c;
    pthread_mutex_t mu;         /* one call at a time; guards p and retry_at */
    mcp_proc p;
    time_t retry_at;            /* a failed start: not before */
} mcp_server;

struct srv_mcp {
    mcp_server *sv;
    int n_sv;
    mcp_tool *tools;
    int n_tools;
};

/* ---- config ---- */

static void conf_free(mcp_conf *c)
{
    free(c->name);
    for (char **a = c->argv; a && *a; a++) free(*a);
    free(c->argv);
    for (char **e = c->envp; e && *e; e++) free(*e);
    free(c->envp);
    free(c->cwd);
    *c = (mcp_conf){0};
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > MCP_NAME_MAX) return 0;
    for (; *s; s++)
        if (*s <= ' ' || *s == 0x7f || *s == '"' || *s == '\\') return 0;
    return 1;
}

/* The child's environment: ours with env's keys replaced or added. */
static char **merge_env(json_t *env, const char *server)
{
    size_t n = 0, k = json_object_size(env), at = 0;
    while (environ[n]) n++;
    char **out = calloc(n + k + 1, sizeof *out);
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t kl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        int replaced = 0;
        const char *key;
        json_t *v;
        json_object_foreach(env, key, v) if (strlen(key) == kl && !strncmp(key, environ[i], kl)) replaced = 1;
        if (!replaced && !(out[at++] = strdup(environ[i]))) goto oom;
    }
    const char *key;
    json_t *v;
    json_object_foreach(env, key, v)
    {
        if (!*key || strchr(key, '=') || !json_is_string(v)) {
            srv_log("MCP server '%s': \"env\": keys must be names without '=' and values strings", server);
            goto fail;
        }
        size_t a = strlen(key), b = json_string_length(v);
        if (memchr(json_string_value(v), 0, b)) {
            srv_log("MCP server '%s': \"env\": %s holds a NUL byte", server, key);
            goto fail;
        }
        char *e = malloc(a + b + 2);
        if (!e) goto oom;
        memcpy(e, key, a);
        e[a] = '=';
        memcpy(e + a + 1, json_string_value(v), b + 1);
        out[at++] = e;
    }
    return out;
oom:
    srv_log("MCP server '%s': out of memory", server);
fail:
    for (size_t i = 0; i < at; i++) free(out[i]);
    free(out);
    return NULL;
}

/* One "mcpServers" entry into c: 0, 1 when it has no command (skipped), -1 after a message. */
static int conf_parse(const char *name, json_t *o, mcp_conf *c)
{
    *c = (mcp_conf){.timeout_ms = MCP_TIMEOUT_DEFAULT};
    if (!json_is_object(o)) return srv_log("MCP server '%.64s': its entry must be an object", name), -1;
    if (!name_ok(name))
        return srv_log("MCP server '%.64s': a name is 1 to %d printable characters without spaces or quotes", name,
                       MCP_NAME_MAX), -1;
    json_t *cmd = json_object_get(o, "command"), *args = json_object_get(o, "args"), *env = json_object_get(o, "env");
    json_t *cwd = json_object_get(o, "cwd"), *tmo = json_object_get(o, "timeout_ms");
    if (cmd && !json_is_string(cmd)) return srv_log("MCP server '%s': \"command\" must be a string", name), -1;
    if (!cmd || !json_string_length(cmd)) {
        srv_log("warning: MCP server '%s' has no command, skipping it", name);
        return 1;
    }
    if (args && !json_is_array(args)) return srv_log("MCP server '%s': \"args\" must be an array of strings", name), -1;
    if (env && !json_is_object(env)) return srv_log("MCP server '%s': \"env\" must be an object of strings", name), -1;
    if (cwd && !json_is_string(cwd)) return srv_log("MCP server '%s': \"cwd\" must be a string", name), -1;
    if (tmo && (!json_is_integer(tmo) || json_integer_value(tmo) < 1 || json_integer_value(tmo) > MCP_TIMEOUT_MAX))
        return srv_log("MCP server '%s': \"timeout_ms\" must be an integer from 1 to %d", name, MCP_TIMEOUT_MAX), -1;
    if (tmo) c->timeout_ms = (int)json_integer_value(tmo);
    size_t na = json_array_size(args);
    if (!(c->name = strdup(name)) || !(c->argv = calloc(na + 2, sizeof *c->argv))) goto oom;
    if (!(c->argv[0] = strdup(json_string_value(cmd)))) goto oom;
    for (size_t i = 0; i < na; i++) {
        json_t *a = json_array_get(args, i);
        if (!json_is_string(a) || memchr(json_string_value(a), 0, json_string_length(a))) {
            srv_log("MCP server '%s': \"args\" must be an array of strings (without NUL bytes)", name);
            conf_free(c);
            return -1;
        }
        if (!(c->argv[i + 1] = strdup(json_string_value(a)))) goto oom;
    }
    if (cwd && json_string_length(cwd) && !(c->cwd = strdup(json_string_value(cwd)))) goto oom;
    if (!(c->envp = merge_env(env, name))) {
        conf_free(c);
        return -1;
    }
    return 0;
oom:
    srv_log("MCP server '%s': out of memory", name);
    conf_free(c);
    return -1;
}

/* The servers of one config text (file or inline) appended to m; -1 after a message. */
static int conf_add(srv_mcp *m, const char *text, size_t len, const char *what)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return srv_log("%s: not JSON: %s (line %d)", what, je.text, je.line), -1;
    json_t *list = json_object_get(root, "mcpServers");
    int rc = 0, found = 0;
    if (!json_is_object(list)) {
        srv_log("warning: %s: no \"mcpServers\" object, no MCP server", what);
        json_decref(root);
        return 0;
    }
    const char *name;
    json_t *o;
    json_object_foreach(list, name, o)
    {
        found = 1;
        int dup = 0;
        for (int i = 0; i < m->n_sv; i++) dup |= !strcmp(m->sv[i].c.name, name);
        if (dup) {
            srv_log("warning: %s: MCP server '%.64s' is declared twice, skipping the second", what, name);
            continue;
        }
        if (m->n_sv == MCP_MAX_SERVERS) {
            srv_log("%s: more than %d MCP servers", what, MCP_MAX_SERVERS);
            rc = -1;
            break;
        }
        mcp_conf c;
        int k = conf_parse(name, o, &c);
        if (k < 0) {
            rc = -1;
            break;
        }
        if (k > 0) continue;
        mcp_server *s = &m->sv[m->n_sv++];
        *s = (mcp_server){.c = c, .p = {.pid = -1, .in = -1, .out = -1, .err = -1}};
        pthread_mutex_init(&s->mu, NULL);
        pthread_mutex_init(&s->p.tail_mu, NULL);
    }
    if (!found) srv_log("warning: %s: \"mcpServers\" is empty", what);
    json_decref(root);
    return rc;
}

/* ---- one child ---- */

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void *drain_main(void *arg)
{
    mcp_proc *p = arg;
    char b[4096];
    ssize_t n;
    while (!atomic_load(&p->drain_stop)) {
        struct pollfd pf = {p->err, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) continue;
        if ((n = read(p->err, b, sizeof b)) == 0) break;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            break;
        }
        pthread_mutex_lock(&p->tail_mu);
        size_t k = (size_t)n >= MCP_TAIL ? MCP_TAIL : (size_t)n;
        if (p->tail_n + k > MCP_TAIL) {
            size_t drop = p->tail_n + k - MCP_TAIL;
            memmove(p->tail, p->tail + drop, p->tail_n - drop);
            p->tail_n -= drop;
        }
        memcpy(p->tail + p->tail_n, b + (size_t)n - k, k);
        p->tail_n += k;
        pthread_mutex_unlock(&p->tail_mu);
    }
    atomic_store(&p->drain_done, 1);
    return NULL;
}

/* The last line of the child's stderr (printable bytes only) into out. */
static void tail_line(mcp_proc *p, char *out, size_t cap)
{
    pthread_mutex_lock(&p->tail_mu);
    size_t e = p->tail_n;
    while (e && (p->tail[e - 1] == '\n' || p->tail[e - 1] == '\r')) e--;
    size_t b = e;
    while (b && p->tail[b - 1] != '\n') b--;
    size_t n = 0;
    for (size_t i = b; i < e && n + 1 < cap; i++) out[n++] = (unsigned char)p->tail[i] >= ' ' ? p->tail[i] : '?';
    out[n] = 0;
    pthread_mutex_unlock(&p->tail_mu);
}

static int proc_alive(mcp_proc *p)
{
    if (p->pid <= 0 || p->reaped) return 0;
    int st;
    pid_t w = waitpid(p->pid, &st, WNOHANG);
    if (w == 0) return 1;
    p->reaped = 1; /* proc_stop still closes the pipes and kills what it left */
    return 0;
}

/* Closes its stdin, gives it a second to leave (none: now), then kills its process group. */
static void proc_stop(mcp_proc *p, int now)
{
    if (p->in >= 0) close(p->in);
    if (p->out >= 0) close(p->out);
    p->in = p->out = -1;
    if (p->pid > 0 && !p->reaped) {
        int st;
        int64_t end = now_ms() + (now ? 0 : 1000);
        pid_t w;
        while ((w = waitpid(p->pid, &st, WNOHANG)) == 0 && now_ms() < end) {
            struct timespec t = {0, 10 * 1000000L};
            nanosleep(&t, NULL);
        }
        if (w == 0) {
            kill(-p->pid, SIGKILL);
            while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {}
        }
    }
    if (p->pid > 0) kill(-p->pid, SIGKILL); /* what it left behind */
    p->pid = -1, p->reaped = 0;
    for (int i = 0; p->draining && i < 30 && !atomic_load(&p->drain_done); i++) {
        struct timespec t = {0, 10 * 1000000L}; /* its last words, for the log */
        nanosleep(&t, NULL);
    }
    atomic_store(&p->drain_stop, 1);
    if (p->draining) pthread_join(p->drain, NULL);
    p->draining = 0;
    if (p->err >= 0) close(p->err);
    p->err = -1;
    free(p->rd);
    p->rd = NULL;
    p->rd_at = p->rd_n = 0;
    p->ready = 0;
}

static int proc_start(mcp_proc *p, const mcp_conf *c)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || !(p->rd = malloc(MCP_READ))) {
        srv_log("MCP server '%s': %s", c->name, strerror(errno ? errno : ENOMEM));
        for (int i = 0; i < 2; i++) {
            if (in[i] >= 0) close(in[i]);
            if (out[i] >= 0) close(out[i]);
            if (err[i] >= 0) close(err[i]);
        }
        free(p->rd);
        p->rd = NULL;
        return -1;
    }
    int rc = srv_spawn(&p->pid, c->argv, c->envp, c->cwd, in[0], out[1], err[1]);
    close(in[0]), close(out[1]), close(err[1]);
    p->in = in[1], p->out = out[0], p->err = err[0];
    p->rd_at = p->rd_n = 0, p->next_id = 1, p->ready = 0, p->tail_n = 0;
    if (rc) {
        p->pid = -1;
        srv_log("MCP server '%s': cannot run %s: %s", c->name, c->argv[0], strerror(rc));
        proc_stop(p, 0);
        return -1;
    }
    fcntl(p->in, F_SETFL, fcntl(p->in, F_GETFL) | O_NONBLOCK);
    atomic_store(&p->drain_stop, 0);
    atomic_store(&p->drain_done, 0);
    p->draining = !pthread_create(&p->drain, NULL, drain_main, p);
    return 0;
}

/* ---- JSON-RPC over the pipes ---- */

typedef struct mcp_wait {
    int64_t deadline;
    int (*alive)(void *);
    void *a;
    const char *why; /* set when the wait ended early */
} mcp_wait;

/* 0 while the call may go on; else w->why says why not. */
static int wait_over(mcp_wait *w)
{
    if (w->why) return 1;
    if (now_ms() >= w->deadline) w->why = "the MCP server did not answer in time (timeout_ms)";
    else if (w->alive && !w->alive(w->a)) w->why = "the client went away";
    return w->why != NULL;
}

static int poll_ms(const mcp_wait *w)
{
    int64_t left = w->deadline - now_ms();
    return left <= 0 ? 0 : left < MCP_POLL_MS ? (int)left : MCP_POLL_MS;
}

static int send_line(mcp_proc *p, json_t *msg, mcp_wait *w)
{
    size_t n;
    char *s = srv_json_text(msg, &n, 1);
    if (!s) return w->why = "out of memory", -1;
    s[n] = '\n'; /* srv_json_text leaves room for its NUL: the newline takes it */
    size_t off = 0;
    n++;
    while (off < n) {
        if (wait_over(w)) break;
        ssize_t k = write(p->in, s + off, n - off);
        if (k > 0) {
            off += (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EINTR) {
            w->why = "the MCP server closed its input (it exited?)";
            break;
        }
        struct pollfd pf = {p->in, POLLOUT, 0};
        poll(&pf, 1, poll_ms(w));
    }
    free(s);
    return off == n ? 0 : -1;
}

/* The next whole line of the child's stdout into *line (malloc'ed, *charged bytes charged to
 * the request: the caller frees it and gives them back): 1, or 0 when the wait ended
 * (w->why) or the child closed its stdout. Lines longer than MCP_LINE_MAX are skipped. */
static int read_line(mcp_proc *p, char **line, size_t *charged_out, mcp_wait *w)
{
    char *b = NULL;
    size_t n = 0, charged = 0;
    int skipping = 0;
    *line = NULL;
    for (;;) {
        if (p->rd_at < p->rd_n) {
            char *s = p->rd + p->rd_at, *nl = memchr(s, '\n', p->rd_n - p->rd_at);
            size_t k = nl ? (size_t)(nl - s) : p->rd_n - p->rd_at;
            if (!skipping && n + k > MCP_LINE_MAX) {
                skipping = 1; /* a message too long: dropped up to its newline */
                srv_log("warning: an MCP server sent a line over %u bytes: skipped", MCP_LINE_MAX);
            }
            if (!skipping) {
                if (n + k + 1 > charged) {
                    size_t want = (n + k + 1) * 2 < MCP_LINE_MAX + 1 ? (n + k + 1) * 2 : MCP_LINE_MAX + 1;
                    char *t;
                    if (srv_mem_take(NULL, want - charged)) {
                        w->why = "the MCP server's reply needs more working memory than the request may have";
                        break;
                    }
                    if (!(t = realloc(b, want))) {
                        srv_mem_give(NULL, want - charged);
                        w->why = "out of memory";
                        break;
                    }
                    b = t, charged = want;
                }
                memcpy(b + n, s, k);
                n += k;
            }
            p->rd_at += k + (nl != NULL);
            if (nl) {
                if (!skipping) {
                    b[n] = 0;
                    *line = b, *charged_out = charged;
                    return 1;
                }
                skipping = 0, n = 0;
            }
            continue;
        }
        if (wait_over(w)) break;
        struct pollfd pf = {p->out, POLLIN, 0};
        if (poll(&pf, 1, poll_ms(w)) <= 0) continue;
        ssize_t k = read(p->out, p->rd, MCP_READ);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) {
            w->why = "the MCP server closed its output (it exited?)";
            break;
        }
        p->rd_at = 0, p->rd_n = (size_t)k;
    }
    free(b);
    srv_mem_give(NULL, charged);
    return 0;
}

/* Sends a request (id) or a notification (id < 0) of method with params (stolen; NULL: {}). */
static int send_msg(mcp_proc *p, const char *method, json_t *params, long long id, mcp_wait *w)
{
    json_t *msg = json_pack("{s:s,s:s}", "jsonrpc", "2.0", "method", method);
    if (!params) params = json_object();
    if (!msg || !params || json_object_set_new(msg, "params", params) ||
        (id >= 0 && json_object_set_new(msg, "id", json_integer(id)))) {
        if (!msg) json_decref(params);
        json_decref(msg);
        w->why = "out of memory";
        return -1;
    }
    int rc = send_line(p, msg, w);
    json_decref(msg);
    return rc;
}

/* method(params) and its reply (the message with its id and a result or an error), or NULL
 * with w->why. Anything else the server prints meanwhile (notifications, its own requests,
 * replies to calls that timed out, lines that are not JSON) is skipped. */
static json_t *rpc(mcp_proc *p, const char *method, json_t *params, mcp_wait *w)
{
    long long id = p->next_id++;
    if (send_msg(p, method, params, id, w)) return NULL;
    for (;;) {
        char *line;
        size_t charged;
        if (!read_line(p, &line, &charged, w)) return NULL;
        json_t *o = json_loads(line, 0, NULL);
        free(line);
        srv_mem_give(NULL, charged);
        json_t *rid = json_object_get(o, "id");
        if (json_is_integer(rid) && json_integer_value(rid) == id && !json_object_get(o, "method") &&
            (json_object_get(o, "result") || json_object_get(o, "error")))
            return o;
        json_decref(o);
        if (wait_over(w)) return NULL;
    }
}

static const char *rpc_error(json_t *reply)
{
    json_t *e = json_object_get(reply, "error");
    const char *m = json_string_value(json_is_object(e) ? json_object_get(e, "message") : e);
    return m ? m : "the MCP server answered an error without a message";
}

/* initialize and notifications/initialized, once per child; -1 with w->why. */
static int handshake(mcp_proc *p, mcp_wait *w)
{
    if (p->ready) return 0;
    json_t *params = json_pack("{s:s,s:{},s:{s:s,s:s}}", "protocolVersion", MCP_PROTOCOL, "capabilities",
                               "clientInfo", "name", "seqkv", "version", SEQKV_VERSION_STRING);
    json_t *r = params ? rpc(p, "initialize", params, w) : NULL;
    if (!params) w->why = "out of memory";
    if (!r) return -1;
    int ok = json_is_object(json_object_get(r, "result"));
    if (!ok) {
        static __thread char why[256];
        snprintf(why, sizeof why, "initialize failed: %.200s", rpc_error(r));
        w->why = why;
    }
    json_decref(r);
    if (!ok || send_msg(p, "notifications/initialized", NULL, -1, w)) return -1;
    p->ready = 1;
    return 0;
}

/* The server's child running and initialised (s->mu held): its proc, or NULL with w->why. */
static mcp_proc *server_up(mcp_server *s, mcp_wait *w)
{
    mcp_proc *p = &s->p;
    if (p->pid > 0 && !proc_alive(p)) {
        char last[200];
        proc_stop(p, 0);
        tail_line(p, last, sizeof last);
        srv_log("MCP server '%s' exited%s%s", s->c.name, *last ? "; its last words: " : "", last);
    }
    if (p->pid == -1) {
        if (time(NULL) < s->retry_at) {
            w->why = "the MCP server failed to start a moment ago (retried after a few seconds; see the log)";
            return NULL;
        }
        if (proc_start(p, &s->c)) {
            s->retry_at = time(NULL) + MCP_COOLDOWN_S;
            w->why = "the MCP server cannot be started (see the log)";
            return NULL;
        }
    }
    if (handshake(p, w)) {
        char last[200];
        proc_stop(p, 0);
        tail_line(p, last, sizeof last);
        srv_log("MCP server '%s': %s%s%s", s->c.name, w->why, *last ? "; its last words: " : "", last);
        s->retry_at = time(NULL) + MCP_COOLDOWN_S;
        return NULL;
    }
    return p;
}

/* s->mu, waiting at most until w's deadline (and while the client is there): 0, or -1. */
static int server_lock(mcp_server *s, mcp_wait *w)
{
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += MCP_POLL_MS * 1000000L;
        if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
        if (!pthread_mutex_timedlock(&s->mu, &t)) return 0;
        if (wait_over(w)) return -1;
    }
}

/* ---- the tools ---- */

static int tool_name_ok(json_t *v)
{
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (!s || !n || n > MCP_TOOL_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < ' ' || s[i] == 0x7f) return 0;
    return 1;
}

static int add_tool(srv_mcp *m, const srv *sv, int server, json_t *t)
{
    json_t *name = json_object_get(t, "name"), *about = json_object_get(t, "description");
    json_t *schema = json_object_get(t, "inputSchema");
    const char *sn = m->sv[server].c.name;
    if (!tool_name_ok(name)) {
        srv_log("warning: MCP server '%s' lists a tool without a usable name (1 to %d printable bytes): skipped", sn,
                MCP_TOOL_NAME_MAX);
        return 0;
    }
    char full[MCP_NAME_MAX + 1 + MCP_TOOL_NAME_MAX + 1];
    snprintf(full, sizeof full, "%s_%s", sn, json_string_value(name));
    int taken = srv_tools_builtin(sv, full);
    for (int i = 0; i < m->n_tools && !taken; i++) taken = !strcmp(m->tools[i].name, full);
    if (taken) {
        srv_log("warning: MCP tool \"%s\" of server '%s' has the name of another tool: skipped", full, sn);
        return 0;
    }
    if (m->n_tools == MCP_MAX_TOOLS) {
        srv_log("warning: more than %d MCP tools: \"%s\" and later ones skipped", MCP_MAX_TOOLS, full);
        return 0;
    }
    mcp_tool *o = &m->tools[m->n_tools];
    *o = (mcp_tool){.server = server};
    o->name = strdup(full);
    o->tool = strdup(json_string_value(name));
    o->about = strdup(json_is_string(about) ? json_string_value(about) : "");
    o->schema = json_is_object(schema) ? json_deep_copy(schema) : json_object();
    if (!o->name || !o->tool || !o->about || !o->schema) {
        free(o->name), free(o->tool), free(o->about), json_decref(o->schema);
        srv_log("MCP: out of memory");
        return -1;
    }
    m->n_tools++;
    return 0;
}

/* Spawns server i, lists its tools (following nextCursor), stops it. */
static int warm_up(srv_mcp *m, const srv *sv, int i)
{
    mcp_server *s = &m->sv[i];
    mcp_wait w = {.deadline = now_ms() + MCP_WARMUP_MS};
    pthread_mutex_lock(&s->mu);
    mcp_proc *p = server_up(s, &w);
    int rc = 0, n0 = m->n_tools;
    json_t *cursor = NULL;
    for (int page = 0; p && page < 64 && !rc; page++) {
        json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL;
        json_t *r = rpc(p, "tools/list", params, &w), *res = json_object_get(r, "result");
        if (!r) break;
        if (!json_is_object(res)) {
            srv_log("warning: MCP server '%s': tools/list failed: %s", s->c.name, rpc_error(r));
            json_decref(r);
            break;
        }
        json_t *list = json_object_get(res, "tools"), *t;
        size_t k;
        json_array_foreach(list, k, t) if (!rc) rc = add_tool(m, sv, i, t);
        json_decref(cursor);
        cursor = json_incref(json_object_get(res, "nextCursor"));
        json_decref(r);
        if (!json_is_string(cursor)) break;
    }
    json_decref(cursor);
    if (w.why && p) srv_log("warning: MCP server '%s': %s (at start)", s->c.name, w.why);
    srv_log("MCP server '%s': %d tools", s->c.name, m->n_tools - n0);
    proc_stop(&s->p, 0);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static char *slurp_config(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    char *b = NULL;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > MCP_CONFIG_MAX) {
        srv_log("--mcp-servers-config %s: %s", path,
                fd < 0 ? strerror(errno) : !S_ISREG(st.st_mode) ? "not a regular file" : "larger than 1 MiB");
        if (fd >= 0) close(fd);
        return NULL;
    }
    size_t n = 0;
    if ((b = malloc((size_t)st.st_size + 1))) {
        ssize_t k;
        while (n < (size_t)st.st_size && (k = read(fd, b + n, (size_t)st.st_size - n)) > 0) n += (size_t)k;
        b[n] = 0;
    }
    close(fd);
    if (!b) srv_log("--mcp-servers-config: out of memory");
    return b;
}

void srv_mcp_free(srv_mcp *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_sv; i++) {
        mcp_server *s = &m->sv[i];
        pthread_mutex_lock(&s->mu);
        proc_stop(&s->p, 0);
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->p.tail_mu);
        conf_free(&s->c);
    }
    for (int i = 0; i < m->n_tools; i++) {
        free(m->tools[i].name), free(m->tools[i].tool), free(m->tools[i].about);
        json_decref(m->tools[i].schema);
    }
    free(m->sv);
    free(m->tools);
    free(m);
}

int srv_mcp_start(srv *s)
{
    const char *file = s->p.mcp_config, *inline_json = s->p.mcp_json;
    if (!file && !inline_json) return 0;
    srv_mcp *m = calloc(1, sizeof *m);
    if (!m || !(m->sv = calloc(MCP_MAX_SERVERS, sizeof *m->sv)) ||
        !(m->tools = calloc(MCP_MAX_TOOLS, sizeof *m->tools))) {
        srv_log("MCP: out of memory");
        srv_mcp_free(m);
        return -1;
    }
    int rc = 0;
    if (file) {
        char *text = slurp_config(file);
        char what[300];
        snprintf(what, sizeof what, "--mcp-servers-config %.256s", file);
        rc = !text || conf_add(m, text, strlen(text), what);
        free(text);
    }
    if (!rc && inline_json) rc = conf_add(m, inline_json, strlen(inline_json), "--mcp-servers-json");
    for (int i = 0; !rc && i < m->n_sv; i++) rc = warm_up(m, s, i);
    if (rc || !m->n_sv) {
        srv_mcp_free(m);
        return rc ? -1 : 0;
    }
    s->mcp = m;
    return 0;
}

int srv_mcp_n_tools(const srv_mcp *m) { return m ? m->n_tools : 0; }

int srv_mcp_find(const srv_mcp *m, const char *name)
{
    for (int i = 0; m && i < m->n_tools; i++)
        if (!strcmp(m->tools[i].name, name)) return i;
    return -1;
}

json_t *srv_mcp_tool_json(const srv_mcp *m, int i)
{
    const mcp_tool *t = &m->tools[i];
    json_t *schema = json_deep_copy(t->schema);
    return schema ? json_pack("{s:s,s:s,s:s,s:{s:b},s:b,s:{s:s,s:{s:s,s:s,s:o}}}", "display_name", t->name, "tool",
                              t->name, "type", "mcp", "permissions", "write", 0, "uses_cwd", 0, "definition", "type",
                              "function", "function", "name", t->name, "description", t->about, "parameters", schema)
                  : NULL;
}

/* The text parts of a tools/call result joined by newlines, as /tools answers them. */
static json_t *call_result(json_t *res)
{
    json_t *content = json_object_get(res, "content"), *part;
    size_t i, n = 0;
    json_array_foreach(content, i, part)
    {
        json_t *tx = json_object_get(part, "text");
        const char *ty = json_string_value(json_object_get(part, "type"));
        if (ty && !strcmp(ty, "text") && json_is_string(tx)) n += json_string_length(tx) + 1;
    }
    if (srv_mem_take(NULL, n + 1)) return NULL;
    char *b = malloc(n + 1);
    size_t at = 0;
    json_array_foreach(content, i, part)
    {
        json_t *tx = json_object_get(part, "text");
        const char *ty = json_string_value(json_object_get(part, "type"));
        if (!b || !ty || strcmp(ty, "text") || !json_is_string(tx)) continue;
        if (at) b[at++] = '\n';
        memcpy(b + at, json_string_value(tx), json_string_length(tx));
        at += json_string_length(tx);
    }
    json_t *o = NULL;
    if (b) {
        int err = json_is_true(json_object_get(res, "isError"));
        json_t *v = err && !at ? json_string("MCP tool returned an error") : json_stringn_nocheck(b, at);
        o = v ? json_pack("{s:o}", err ? "error" : "plain_text_response", v) : NULL;
    }
    free(b);
    srv_mem_give(NULL, n + 1);
    return o;
}

static json_t *call_error(const char *why, const char *server)
{
    char t[512];
    snprintf(t, sizeof t, "%s (MCP server '%s')", why, server);
    return json_pack("{s:s}", "error", t);
}

json_t *srv_mcp_call(srv_mcp *m, int i, json_t *args, int (*alive)(void *), void *a)
{
    const mcp_tool *t = &m->tools[i];
    mcp_server *s = &m->sv[t->server];
    mcp_wait w = {.deadline = now_ms() + s->c.timeout_ms, .alive = alive, .a = a};
    if (server_lock(s, &w)) return call_error(w.why, s->c.name);
    json_t *out = NULL, *params = NULL, *r = NULL;
    mcp_proc *p = server_up(s, &w);
    if (p && (params = json_pack("{s:s,s:O}", "name", t->tool, "arguments", args))) r = rpc(p, "tools/call", params, &w);
    else if (p) w.why = "out of memory";
    if (p && !r && now_ms() >= w.deadline) {
        srv_log("MCP server '%s': %s did not answer in %d ms: stopped (the next call starts it again)", s->c.name,
                t->tool, s->c.timeout_ms);
        proc_stop(p, 1); /* a server stuck in one call would time every later call out */
    }
    pthread_mutex_unlock(&s->mu);
    if (!r) return call_error(w.why, s->c.name);
    json_t *res = json_object_get(r, "result");
    out = json_is_object(res) ? call_result(res) : call_error(rpc_error(r), s->c.name);
    json_decref(r);
    return out;
}
