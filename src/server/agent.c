/* llama-server's built-in agent tools (--tools LIST or all, -ag): GET /tools lists the ones
 * enabled (name, display name, write permission, the OpenAI function definition a client
 * hands to the model), POST /tools {"tool": NAME, "params": {...}, "stream": false} runs one
 * on this host and answers its JSON result. Off by default (403): they read and write any
 * file the server can and run shell commands, so they are for a server on a trusted
 * machine behind an API key; turning them on makes CORS default to localhost (cmd_serve.c).
 *
 *   read_file           a file's lines (start_line..end_line, "N→" prefixes with append_loc),
 *                       at most AG_TEXT_MAX bytes; the whole file as base64 with
 *                       "X-Resp-Type: base64" (at most AG_B64_MAX)
 *   file_glob_search    files (or directories) under a path matching a glob
 *   grep_search         lines matching a regular expression (POSIX extended, glibc's
 *                       \w \s \b, and \d) or a literal, with context lines
 *   exec_shell_command  `sh -c COMMAND` in its own process group, output (stdout and stderr
 *                       together) bounded, killed at its timeout or when the client leaves;
 *                       "stream": true sends the output as it comes (server-sent events)
 *   write_file          creates (parent directories too) or overwrites a file
 *   edit_file           exact text replacements, each unique and not overlapping
 *   get_info            the OS (`uname -a`) and the working directory
 *
 * Paths: a leading ~ is $HOME, a relative path is taken from the X-Tool-Cwd header's
 * directory (else the server's), and "." and ".." are resolved lexically. A tool's own
 * failure (no such file, ...) is a 200 whose object holds "error", as llama-server's; a
 * malformed call is a 400 naming the field, an unknown tool a 404. Every buffer is bounded
 * and charged to the request's working memory (--mem-budget); listings and searches stop
 * at their deadlines and say so. Differences from llama-server (docs/server.md): no tool
 * runtimes (containers, SSH: --tools-runtime and X-Tool-Runtime are refused), edit_file
 * matches exactly (no typographic-quote or trailing-space folding), "**" + "/" in a glob
 * also matches no directory at all. The tools of MCP servers (mcp.c) are listed after these
 * and run there. */
#define _GNU_SOURCE
#include "core/fpguard.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/srv.h"

#define AG_TEXT_MAX (16u << 10)       /* read_file's text */
#define AG_B64_MAX (32u << 20)        /* read_file's file as base64 */
#define AG_RESULTS_MAX 100            /* file_glob_search's and grep_search's results */
#define AG_LIST_S 15                  /* one listing: git ls-files or the walk */
#define AG_LIST_ENTRIES (1u << 18)    /* entries one listing keeps (then: truncated) */
#define AG_LIST_BYTES (16u << 20)     /* their path bytes */
#define AG_GIT_OUT (8u << 20)         /* git ls-files' output */
#define AG_EXEC_OUT (16u << 10)       /* exec_shell_command's output */
#define AG_EXEC_MAX_S 60
#define AG_EXEC_DEFAULT_S 10
#define AG_INFO_S 5
#define AG_GREP_FILE (32u << 20)      /* grep_search skips larger files */
#define AG_GREP_S 60                  /* grep_search's whole run */
#define AG_PATTERN 4096               /* glob and regex pattern bytes */
#define AG_POLL_MS 200                /* how often a running command looks at the client */

enum { AG_READ_FILE, AG_GLOB, AG_GREP, AG_EXEC, AG_WRITE, AG_EDIT, AG_INFO, AG_N };

typedef struct ag_call {
    srv_req *r;
    json_t *params;
    char *cwd;    /* X-Tool-Cwd resolved (malloc'ed), or NULL: the server's */
    int base64;   /* X-Resp-Type: base64 */
    char bad[200]; /* a malformed parameter: the 400's message */
} ag_call;

typedef json_t *(*ag_fn)(ag_call *c);

/* ---- parameters ---- */

static int bad(ag_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(ag_call *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->bad, sizeof c->bad, fmt, ap);
    va_end(ap);
    return -1;
}

static int p_str(ag_call *c, const char *k, int required, const char *def, const char **out)
{
    json_t *v = json_object_get(c->params, k);
    *out = def;
    if (!v || json_is_null(v)) return required ? bad(c, "params.%s: required (a string)", k) : 0;
    if (!json_is_string(v)) return bad(c, "params.%s: must be a string", k);
    if (strlen(json_string_value(v)) != json_string_length(v)) return bad(c, "params.%s: must not hold NUL", k);
    *out = json_string_value(v);
    return 0;
}

static int p_int(ag_call *c, const char *k, long long def, long long *out)
{
    json_t *v = json_object_get(c->params, k);
    *out = def;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return bad(c, "params.%s: must be an integer", k);
    json_int_t x = json_integer_value(v);
    if (x < -(1LL << 31) || x > (1LL << 31) - 1) return bad(c, "params.%s: out of range (a 32-bit integer)", k);
    *out = x;
    return 0;
}

static int p_bool(ag_call *c, const char *k, int *out)
{
    json_t *v = json_object_get(c->params, k);
    *out = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return bad(c, "params.%s: must be true or false", k);
    *out = json_is_true(v);
    return 0;
}

static json_t *tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *tool_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n;
    char *v = srv_utf8_valid(msg, strlen(msg), &n);
    json_t *o = json_pack("{s:s%}", "error", v ? v : "", v ? n : 0);
    free(v);
    return o;
}

/* A JSON string of bytes that may not be UTF-8 (invalid bytes become U+FFFD). */
static json_t *text_value(const char *s, size_t n)
{
    size_t m;
    char *v = srv_utf8_valid(s, n, &m);
    json_t *o = v ? json_stringn(v, m) : NULL;
    free(v);
    return o;
}

/* ---- a growing byte buffer charged to the request (bounded by its caller) ---- */

typedef struct buf {
    char *p;
    size_t n, cap, charged;
    int oom;
} buf;

static int buf_room(buf *b, size_t more)
{
    if (b->oom) return -1;
    if (b->n + more + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1) cap *= 2;
    if (srv_mem_take(NULL, cap - b->charged)) return b->oom = 1, -1;
    char *p = realloc(b->p, cap);
    if (!p) {
        srv_mem_give(NULL, cap - b->charged);
        return b->oom = 1, -1;
    }
    b->charged = cap, b->p = p, b->cap = cap;
    return 0;
}

static void buf_add(buf *b, const char *s, size_t n)
{
    if (buf_room(b, n)) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void buf_str(buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static void buf_fmt(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_fmt(buf *b, const char *fmt, ...)
{
    char t[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    if (k > 0) buf_add(b, t, (size_t)k < sizeof t ? (size_t)k : sizeof t - 1);
}

static void buf_free(buf *b)
{
    free(b->p);
    srv_mem_give(NULL, b->charged);
    *b = (buf){0};
}

/* ---- paths ---- */

/* path as llama-server resolves it: ~ expanded, taken from cwd (NULL: the server's) when
 * relative, "." and ".." dropped lexically; an absolute path (malloc'ed), or NULL. */
static char *resolve(const char *cwd, const char *path)
{
    const char *home = getenv("HOME");
    char here[4096];
    buf b = {0};
    if (path[0] == '~' && (!path[1] || path[1] == '/') && home && *home) {
        buf_str(&b, home);
        buf_str(&b, path + 1);
    } else if (path[0] == '/') {
        buf_str(&b, path);
    } else {
        const char *base = cwd ? cwd : getcwd(here, sizeof here);
        if (!base) return NULL;
        buf_str(&b, base);
        buf_str(&b, "/");
        buf_str(&b, path);
    }
    if (b.oom) {
        buf_free(&b);
        return NULL;
    }
    /* components in place: a stack of kept ones */
    char *out = malloc(b.n + 2);
    size_t n = 0;
    if (out) {
        for (char *p = b.p; *p;) {
            while (*p == '/') p++;
            size_t k = strcspn(p, "/");
            if (!k) break;
            if (k == 1 && p[0] == '.') {
            } else if (k == 2 && p[0] == '.' && p[1] == '.') {
                while (n && out[n - 1] != '/') n--;
                if (n) n--;
            } else {
                out[n++] = '/';
                memcpy(out + n, p, k);
                n += k;
            }
            p += k;
        }
        if (!n) out[n++] = '/';
        out[n] = 0;
    }
    buf_free(&b);
    return out;
}

static char *join(const char *dir, const char *rel)
{
    size_t a = strlen(dir), k = strlen(rel);
    char *p = malloc(a + k + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t at = a && dir[a - 1] == '/' ? a : (p[a] = '/', a + 1);
    memcpy(p + at, rel, k + 1);
    return p;
}

/* ---- globs: "*" any run without '/', "**" any run, "?" one character but '/', "[a-z]" and
 * "[!...]" classes; "**" + "/" also matches nothing. Run as a set of pattern positions
 * stepped over the string: time pattern x string, whatever the pattern. ---- */

/* The end of the class at pat[i] == '[', or 0 when it has no ']' (then '[' is a literal). */
static size_t class_end(const char *pat, size_t i)
{
    size_t j = i + 1;
    if (pat[j] == '!' || pat[j] == '^') j++;
    if (pat[j] == ']' || pat[j] == '-') j++;
    while (pat[j] && pat[j] != ']') j++;
    return pat[j] == ']' ? j : 0;
}

static int class_match(const char *pat, size_t i, size_t end, unsigned char c)
{
    size_t j = i + 1;
    int neg = pat[j] == '!' || pat[j] == '^', hit = 0;
    if (neg) j++;
    for (; j < end; j++) {
        if (j + 2 < end && pat[j + 1] == '-') {
            hit |= c >= (unsigned char)pat[j] && c <= (unsigned char)pat[j + 2];
            j += 2;
        } else {
            hit |= c == (unsigned char)pat[j];
        }
    }
    return hit != neg;
}

/* Adds position i and what it reaches without consuming (stars match nothing). */
static void glob_add(const char *pat, size_t np, unsigned char *set, size_t i)
{
    while (i <= np && !set[i]) {
        set[i] = 1;
        if (pat[i] == '*' && pat[i + 1] == '*') i += pat[i + 2] == '/' ? 3 : 2; /* "**" and "**" "/" */
        else if (pat[i] == '*') i += 1;
        else break;
        if (i > np) break;
        if (set[i]) break;
        /* the position after a "**" + "/" is reached; so is the one after "**" (the '/') */
    }
}

static int glob_match(const char *pat, const char *s, unsigned char *cur, unsigned char *nxt)
{
    size_t np = strlen(pat);
    memset(cur, 0, np + 1);
    glob_add(pat, np, cur, 0);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int any = 0;
        memset(nxt, 0, np + 1);
        for (size_t i = 0; i < np; i++) {
            if (!cur[i]) continue;
            if (pat[i] == '*' && pat[i + 1] == '*') {
                glob_add(pat, np, nxt, i); /* a double star eats any character */
            } else if (pat[i] == '*') {
                if (c != '/') glob_add(pat, np, nxt, i);
            } else if (pat[i] == '?') {
                if (c != '/') glob_add(pat, np, nxt, i + 1);
            } else if (pat[i] == '[' && class_end(pat, i)) {
                size_t e = class_end(pat, i);
                if (class_match(pat, i, e, c)) glob_add(pat, np, nxt, e + 1);
            } else if ((unsigned char)pat[i] == c) {
                glob_add(pat, np, nxt, i + 1);
            }
        }
        for (size_t i = 0; i <= np; i++) any |= nxt[i];
        if (!any) return 0;
        memcpy(cur, nxt, np + 1);
    }
    return cur[np];
}

/* llama-server's rule: a pattern without '/' matches the base name at any depth; one with
 * '/' the whole relative path, "**" + "/" put in front unless it starts with "**" or '/'. */
typedef struct globber {
    char *pat; /* the pattern as matched */
    int base;  /* match the base name */
    unsigned char *cur, *nxt;
} globber;

static int glob_init(globber *g, const char *pattern)
{
    size_t n = strlen(pattern);
    *g = (globber){0};
    g->base = !strchr(pattern, '/');
    int anchor = !g->base && strncmp(pattern, "**", 2) && pattern[0] != '/';
    if (!(g->pat = malloc(n + 4))) return -1;
    snprintf(g->pat, n + 4, "%s%s", anchor ? "**/" : "", pattern);
    if (g->pat[0] == '/') memmove(g->pat, g->pat + 1, strlen(g->pat)); /* relative paths never start with '/' */
    n = strlen(g->pat);
    g->cur = malloc(n + 1), g->nxt = malloc(n + 1);
    return g->cur && g->nxt ? 0 : -1;
}

static int glob_hit(globber *g, const char *rel)
{
    const char *s = rel;
    if (g->base && strrchr(rel, '/')) s = strrchr(rel, '/') + 1;
    return glob_match(g->pat, s, g->cur, g->nxt);
}

static void glob_free(globber *g)
{
    free(g->pat), free(g->cur), free(g->nxt);
}

/* ---- subprocesses: argv in its own process group, stdin /dev/null, stdout and stderr into
 * one pipe, no other descriptor of the server's; bounded output, a deadline, the client
 * looked at every AG_POLL_MS ---- */

typedef struct ag_exec {
    pid_t pid;
    int fd;
    struct timespec deadline;
    size_t max_out, got;
    int truncated, timed_out, gone, status, ended;
} ag_exec;

static int64_t ms_left(const struct timespec *dl)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)(dl->tv_sec - now.tv_sec) * 1000 + (dl->tv_nsec - now.tv_nsec) / 1000000;
}

static void deadline_in(struct timespec *dl, int seconds)
{
    clock_gettime(CLOCK_MONOTONIC, dl);
    dl->tv_sec += seconds;
}

int srv_spawn(pid_t *pid, char *const argv[], char *const envp[], const char *cwd, int in, int out, int err)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    if (in < 0) posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    else posix_spawn_file_actions_adddup2(&fa, in, 0);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    if (cwd) posix_spawn_file_actions_addchdir_np(&fa, cwd);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    int rc = posix_spawnp(pid, argv[0], &fa, &at, argv, envp ? envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    return rc;
}

static int exec_start(ag_exec *e, char *const argv[], const char *cwd, int timeout_s, size_t max_out)
{
    int p[2];
    *e = (ag_exec){.pid = -1, .fd = -1, .max_out = max_out};
    deadline_in(&e->deadline, timeout_s);
    if (pipe2(p, O_CLOEXEC)) return -1;
    int rc = srv_spawn(&e->pid, argv, NULL, cwd, -1, p[1], p[1]);
    close(p[1]);
    if (rc) {
        close(p[0]);
        e->pid = -1;
        return -1;
    }
    e->fd = p[0];
    return 0;
}

/* Reaps the command (killing its group at the deadline or when the client left). */
static void exec_end(ag_exec *e, int (*alive)(void *), void *a)
{
    if (e->fd >= 0) close(e->fd);
    e->fd = -1;
    if (e->pid > 0) {
        int st = 0;
        for (;;) {
            pid_t w = waitpid(e->pid, &st, WNOHANG);
            if (w == e->pid || (w < 0 && errno != EINTR)) break;
            if (e->gone || (alive && !alive(a))) e->gone = 1;
            if (e->gone || ms_left(&e->deadline) <= 0) {
                e->timed_out |= !e->gone;
                kill(-e->pid, SIGKILL);
                while (waitpid(e->pid, &st, 0) < 0 && errno == EINTR) {}
                break;
            }
            struct timespec t = {0, 20 * 1000000L};
            nanosleep(&t, NULL);
        }
        kill(-e->pid, SIGKILL); /* what it left running in the background */
        e->status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
    }
    e->pid = -1;
    e->ended = 1;
}

/* The next output bytes into out (blocking); 0 when the command is over (reaped). */
static size_t exec_read(ag_exec *e, char *out, size_t max, int (*alive)(void *), void *a)
{
    while (e->fd >= 0) {
        int64_t left = ms_left(&e->deadline);
        if (left <= 0) {
            e->timed_out = 1;
            kill(-e->pid, SIGKILL);
            break;
        }
        if (alive && !alive(a)) {
            e->gone = 1;
            kill(-e->pid, SIGKILL);
            break;
        }
        struct pollfd pf = {e->fd, POLLIN, 0};
        int k = poll(&pf, 1, left < AG_POLL_MS ? (int)left : AG_POLL_MS);
        if (k <= 0) continue;
        char scratch[4096];
        size_t room = e->max_out - e->got;
        int keep = room > 0;
        ssize_t n = read(e->fd, keep ? out : scratch, keep ? (room < max ? room : max) : sizeof scratch);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) break;
        if (!keep) {
            e->truncated = 1; /* drained so the command is not stuck on a full pipe */
            continue;
        }
        e->got += (size_t)n;
        return (size_t)n;
    }
    if (!e->ended) exec_end(e, alive, a);
    return 0;
}

/* A whole command's output into b (bounded by max_out), with its exit status. */
static void exec_all(ag_exec *e, buf *b, int (*alive)(void *), void *a)
{
    char chunk[4096];
    size_t n;
    while ((n = exec_read(e, chunk, sizeof chunk, alive, a)) > 0) buf_add(b, chunk, n);
}

static int client_alive(void *a)
{
    srv_req *r = a;
    return !r->sink->alive || r->sink->alive(r);
}

/* ---- listings ---- */

typedef struct entry {
    char *rel; /* '/'-separated, relative to the listing's base */
    int dir;
} entry;

typedef struct listing {
    entry *v;
    size_t n, cap, bytes;
    int truncated, oom;
} listing;

static int list_add(listing *l, const char *rel, int is_dir)
{
    size_t k = strlen(rel) + 1;
    if (l->n >= AG_LIST_ENTRIES || l->bytes + k > AG_LIST_BYTES) return l->truncated = 1, -1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        if (srv_mem_take(NULL, (cap - l->cap) * sizeof *l->v)) return l->oom = 1, -1;
        entry *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            srv_mem_give(NULL, (cap - l->cap) * sizeof *l->v);
            return l->oom = 1, -1;
        }
        l->v = v, l->cap = cap;
    }
    char *s = srv_mem_take(NULL, k) ? NULL : malloc(k);
    if (!s) return l->oom = 1, -1;
    memcpy(s, rel, k);
    l->v[l->n++] = (entry){s, is_dir};
    l->bytes += k;
    return 0;
}

static void list_free(listing *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i].rel);
    srv_mem_give(NULL, l->cap * sizeof *l->v + l->bytes);
    free(l->v);
    *l = (listing){0};
}

static int depth_of(const char *rel)
{
    int d = 1;
    for (; *rel; rel++) d += *rel == '/';
    return d;
}

static int is_junk(const char *name)
{
    static const char *const junk[] = {".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv",
                                       "dist", "build", "target", ".cache", ".idea", ".vscode"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
        if (!strcmp(name, junk[i])) return 1;
    return 0;
}

enum { KIND_FILES = 1, KIND_DIRS = 2, KIND_ALL = 3 };

/* The walk: depth first, links listed but never followed into, junk directories listed
 * but not entered. */
static void walk(const char *base, int max_depth, int kind, const struct timespec *dl, listing *l)
{
    typedef struct frame {
        char *rel;
        int depth;
    } frame;
    frame *stack = malloc(sizeof *stack * 64);
    size_t ns = 0, cs = 64;
    if (!stack) return (void)(l->oom = 1);
    stack[ns++] = (frame){strdup(""), 0};
    while (ns && !l->oom) {
        frame f = stack[--ns];
        char *dir = f.rel && *f.rel ? join(base, f.rel) : strdup(base);
        DIR *d = dir ? opendir(dir) : NULL;
        if (!d) l->truncated |= f.rel && *f.rel ? errno != EACCES : 0;
        for (struct dirent *e; d && (e = readdir(d));) {
            if (ms_left(dl) <= 0) {
                l->truncated = 1;
                break;
            }
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *rel = *f.rel ? join(f.rel, e->d_name) : strdup(e->d_name);
            char *abs = rel ? join(base, rel) : NULL;
            struct stat st, lst;
            if (abs && !stat(abs, &st)) {
                if (S_ISDIR(st.st_mode)) {
                    if (kind & KIND_DIRS) list_add(l, rel, 1);
                    int link = lstat(abs, &lst) || S_ISLNK(lst.st_mode);
                    if (!is_junk(e->d_name) && !link && (max_depth == 0 || f.depth + 1 < max_depth)) {
                        if (ns == cs) {
                            frame *s2 = realloc(stack, sizeof *stack * cs * 2);
                            if (!s2) {
                                l->oom = 1;
                                free(rel), free(abs);
                                break;
                            }
                            stack = s2, cs *= 2;
                        }
                        stack[ns++] = (frame){rel, f.depth + 1};
                        rel = NULL;
                    }
                } else if (S_ISREG(st.st_mode) && (kind & KIND_FILES)) {
                    list_add(l, rel, 0);
                }
            }
            free(rel), free(abs);
            if (l->truncated && (l->n >= AG_LIST_ENTRIES || l->bytes >= AG_LIST_BYTES)) break;
        }
        if (d) closedir(d);
        free(dir), free(f.rel);
        if (ms_left(dl) <= 0) l->truncated = 1;
        if (l->truncated && ms_left(dl) <= 0) break;
    }
    while (ns) free(stack[--ns].rel);
    free(stack);
}

static int cmp_entry(const void *a, const void *b) { return strcmp(((const entry *)a)->rel, ((const entry *)b)->rel); }

/* Entries under base (an absolute directory): git's view (ignored files left out) when only
 * files are asked and base is in a work tree, else the walk; sorted by path. NULL (no
 * error) or why not. */
static const char *list_entries(const char *base, int max_depth, int kind, listing *l)
{
    struct stat st;
    struct timespec dl;
    *l = (listing){0};
    if (stat(base, &st) || !S_ISDIR(st.st_mode)) return "path does not exist or is not a directory";
    deadline_in(&dl, AG_LIST_S);
    int done = 0;
    if (kind == KIND_FILES) {
        char *dir = strdup(base);
        char *argv[] = {"git", "-C", dir, "ls-files", "--cached", "--others", "--exclude-standard", NULL};
        ag_exec e;
        buf out = {0};
        if (dir && !exec_start(&e, argv, NULL, AG_LIST_S, AG_GIT_OUT)) {
            exec_all(&e, &out, NULL, NULL);
            if (e.status == 0 && !e.timed_out && !e.truncated && !out.oom) {
                done = 1;
                for (char *p = out.p; p && *p;) {
                    char *nl = strchr(p, '\n');
                    if (nl) *nl = 0;
                    char *abs = *p && (max_depth == 0 || depth_of(p) <= max_depth) ? join(base, p) : NULL;
                    if (abs && !stat(abs, &st) && S_ISREG(st.st_mode)) list_add(l, p, 0);
                    free(abs);
                    p = nl ? nl + 1 : p + strlen(p);
                }
            }
        }
        buf_free(&out);
        free(dir);
    }
    if (!done) walk(base, max_depth, kind, &dl, l);
    if (l->n) qsort(l->v, l->n, sizeof *l->v, cmp_entry);
    return l->oom ? "out of memory (the request's working memory)" : NULL;
}

/* ---- the tools ---- */

/* A whole file into a charged buffer (at most max bytes); 0, 1 when larger, -2 when its
 * memory is refused, -1 otherwise. */
static int slurp(const char *abs, size_t max, buf *b)
{
    int fd = open(abs, O_RDONLY | O_CLOEXEC);
    struct stat st;
    *b = (buf){0};
    if (fd < 0) return -1;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return -1;
    }
    if ((unsigned long long)st.st_size > max) {
        close(fd);
        return 1;
    }
    int rc = buf_room(b, (size_t)st.st_size) ? -2 : 0;
    for (ssize_t n; !rc && b->n <= max;) {
        if (buf_room(b, 4096)) rc = -2;
        else if ((n = read(fd, b->p + b->n, b->cap - b->n - 1)) < 0) rc = errno == EINTR ? 0 : -1;
        else if (n == 0) break;
        else b->n += (size_t)n;
    }
    close(fd);
    if (!rc && b->n > max) rc = 1; /* it grew meanwhile */
    if (b->p) b->p[b->n] = 0;
    if (rc) buf_free(b);
    return rc;
}

static json_t *t_read_file(ag_call *c)
{
    const char *path;
    long long start, end;
    int loc;
    if (p_str(c, "path", 1, NULL, &path) || p_int(c, "start_line", 1, &start) || p_int(c, "end_line", -1, &end) ||
        p_bool(c, "append_loc", &loc))
        return NULL;
    char *abs = resolve(c->cwd, path);
    struct stat st;
    if (!abs || stat(abs, &st) || !S_ISREG(st.st_mode)) {
        free(abs);
        return tool_error("cannot stat file: %s", path);
    }
    buf b = {0}, out = {0};
    json_t *res = NULL;
    if (c->base64) {
        int rc = (unsigned long long)st.st_size > AG_B64_MAX ? 1 : slurp(abs, AG_B64_MAX, &b);
        size_t n = 0;
        char *enc = NULL;
        if (!rc && !srv_mem_take(NULL, b.n / 3 * 4 + 8)) {
            enc = srv_base64((const unsigned char *)b.p, b.n, &n);
            res = enc ? json_pack("{s:s%,s:I}", "base64", enc, n, "size_bytes", (json_int_t)b.n) : NULL;
            free(enc);
            srv_mem_give(NULL, b.n / 3 * 4 + 8);
        }
        if (rc > 0) res = tool_error("file too large (%llu bytes, max %u)", (unsigned long long)st.st_size, AG_B64_MAX);
        else if (rc == -1) res = tool_error("failed to open file: %s", path);
        buf_free(&b);
        free(abs);
        return res;
    }
    if ((unsigned long long)st.st_size > AG_TEXT_MAX && end == -1) {
        free(abs);
        return tool_error("file too large (%llu bytes, max %u). Use start_line/end_line to read a portion.",
                          (unsigned long long)st.st_size, AG_TEXT_MAX);
    }
    FILE *f = fopen(abs, "rb");
    free(abs);
    if (!f) return tool_error("failed to open file: %s", path);
    /* line by line, each kept only while it can still fit the reply */
    long long lineno = 0;
    int ch = 0, full = 0;
    while (!full && ch != EOF) {
        buf line = {0};
        size_t len = 0;
        while ((ch = getc_unlocked(f)) != EOF && ch != '\n') {
            if (len++ <= AG_TEXT_MAX) {
                char cc = (char)ch;
                buf_add(&line, &cc, 1);
            }
        }
        if (ch == EOF && len == 0) {
            buf_free(&line);
            break;
        }
        lineno++;
        if (lineno >= start && (end == -1 || lineno <= end)) {
            char num[32] = "";
            if (loc) snprintf(num, sizeof num, "%lld\xe2\x86\x92", lineno);
            if (out.n + strlen(num) + len + 1 > AG_TEXT_MAX) {
                buf_str(&out, "[output truncated]");
                full = 1;
            } else {
                buf_str(&out, num);
                buf_add(&out, line.p ? line.p : "", len);
                buf_str(&out, "\n");
            }
        }
        buf_free(&line);
        if (end != -1 && lineno >= end) break;
    }
    fclose(f);
    res = out.oom ? NULL : json_pack("{s:o}", "plain_text_response", text_value(out.p ? out.p : "", out.n));
    buf_free(&out);
    return res;
}

static json_t *t_glob(ag_call *c)
{
    const char *path, *include, *exclude, *type;
    long long max_depth, limit;
    if (p_str(c, "path", 1, NULL, &path) || p_str(c, "include", 0, "**", &include) ||
        p_str(c, "exclude", 0, "", &exclude) || p_str(c, "type", 0, "file", &type) ||
        p_int(c, "max_depth", 0, &max_depth) || p_int(c, "limit", AG_RESULTS_MAX, &limit))
        return NULL;
    if (strlen(include) > AG_PATTERN || strlen(exclude) > AG_PATTERN)
        return bad(c, "params.%s: longer than 4096 bytes", strlen(include) > AG_PATTERN ? "include" : "exclude"), NULL;
    if (limit < 1) return tool_error("invalid limit: %lld (expected 1 or more)", limit);
    int kind = !strcmp(type, "file") ? KIND_FILES : !strcmp(type, "dir") ? KIND_DIRS : !strcmp(type, "all") ? KIND_ALL : 0;
    if (!kind) return tool_error("invalid type: %s (expected \"file\", \"dir\" or \"all\")", type);
    char *base = resolve(c->cwd, path);
    listing l = {0};
    globber gi = {0}, ge = {0};
    const char *why = base ? list_entries(base, max_depth > 0 ? (int)max_depth : 0, kind, &l) : "out of memory";
    if (why) {
        free(base);
        return tool_error("%s: %s", why, path);
    }
    json_t *res = NULL, *entries = json_array();
    buf out = {0};
    size_t total = 0, shown = 0;
    if (!glob_init(&gi, include) && !glob_init(&ge, exclude)) {
        struct timespec dl;
        deadline_in(&dl, AG_LIST_S); /* matching is pattern x path per entry: bounded in time too */
        for (size_t i = 0; i < l.n; i++) {
            if ((i & 255) == 0 && ms_left(&dl) <= 0) {
                l.truncated = 1;
                break;
            }
            if (!glob_hit(&gi, l.v[i].rel) || (*exclude && glob_hit(&ge, l.v[i].rel))) continue;
            if (total++ >= (size_t)limit || shown >= AG_RESULTS_MAX) continue;
            shown++;
            buf_str(&out, l.v[i].rel);
            buf_str(&out, l.v[i].dir ? "/\n" : "\n");
            json_array_append_new(entries, json_pack("{s:o,s:s}", "path", text_value(l.v[i].rel, strlen(l.v[i].rel)),
                                                     "type", l.v[i].dir ? "dir" : "file"));
        }
        buf_fmt(&out, "\n---\nTotal matches: %zu\n", total);
        if (total > shown)
            buf_fmt(&out, "[%zu results limit reached (%zu total matches). Narrow the glob pattern to see the rest.]\n",
                    shown, total);
        if (l.truncated) buf_str(&out, "[results truncated: time budget, entry limit or unreadable directory]\n");
        if (!out.oom && entries)
            res = json_pack("{s:o,s:O,s:o}", "plain_text_response", text_value(out.p, out.n), "entries", entries,
                            "base", text_value(base, strlen(base)));
    }
    glob_free(&gi), glob_free(&ge);
    json_decref(entries);
    buf_free(&out);
    list_free(&l);
    free(base);
    return res;
}

/* ECMAScript's \d and \D (which POSIX lacks) as bracket expressions, outside brackets.
 * Back-references are refused (*backref): matching with them can take exponential time. */
static char *posix_regex(const char *src, int *backref)
{
    buf b = {0};
    int in_class = 0;
    *backref = 0;
    for (const char *p = src; *p; p++) {
        if (*p == '\\' && p[1] >= '1' && p[1] <= '9' && !in_class) *backref = 1;
        if (*p == '\\' && p[1]) {
            if (!in_class && (p[1] == 'd' || p[1] == 'D')) buf_str(&b, p[1] == 'd' ? "[0-9]" : "[^0-9]");
            else buf_add(&b, p, 2);
            p++;
            continue;
        }
        if (*p == '[' && !in_class) {
            in_class = 1;
            buf_add(&b, p, 1);
            if (p[1] == '^') buf_add(&b, ++p, 1);
            if (p[1] == ']') buf_add(&b, ++p, 1);
            continue;
        }
        if (*p == ']' && in_class) in_class = 0;
        buf_add(&b, p, 1);
    }
    if (b.oom) {
        buf_free(&b);
        return NULL;
    }
    char *r = strdup(b.p ? b.p : "");
    buf_free(&b);
    return r;
}

static int line_hit(const char *line, size_t n, const char *lit, size_t nlit, int icase, const regex_t *re)
{
    if (!lit) return regexec(re, line, 0, NULL, 0) == 0;
    if (!icase) return memmem(line, n, lit, nlit) != NULL;
    for (size_t i = 0; i + nlit <= n; i++)
        if (!strncasecmp(line + i, lit, nlit)) return 1;
    return 0;
}

static json_t *t_grep(ag_call *c)
{
    const char *path, *pattern, *include, *exclude;
    int lineno, literal, icase;
    long long ctx;
    if (p_str(c, "path", 1, NULL, &path) || p_str(c, "pattern", 1, NULL, &pattern) ||
        p_str(c, "include", 0, "**", &include) || p_str(c, "exclude", 0, "", &exclude) ||
        p_bool(c, "return_line_numbers", &lineno) || p_bool(c, "literal", &literal) ||
        p_bool(c, "ignore_case", &icase) || p_int(c, "context_lines", 0, &ctx))
        return NULL;
    if (strlen(pattern) > AG_PATTERN || strlen(include) > AG_PATTERN || strlen(exclude) > AG_PATTERN)
        return bad(c, "params.%s: longer than 4096 bytes", "pattern"), NULL;
    if (ctx < 0) ctx = 0;
    if (ctx > 1000) ctx = 1000;
    regex_t re;
    if (!literal) {
        int backref;
        char *src = posix_regex(pattern, &backref), msg[256];
        if (backref) {
            free(src);
            return tool_error("invalid regex: back-references (\\1 ...) are not supported");
        }
        int rc = src ? regcomp(&re, src, REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0)) : REG_ESPACE;
        free(src);
        if (rc) {
            regerror(rc, &re, msg, sizeof msg);
            return tool_error("invalid regex: %s", msg);
        }
    }
    char *abs = resolve(c->cwd, path);
    struct stat st;
    listing l = {0};
    globber gi = {0}, ge = {0};
    json_t *res = NULL;
    buf out = {0};
    int single = abs && !stat(abs, &st) && S_ISREG(st.st_mode);
    const char *why = single ? NULL : !abs || stat(abs, &st) || !S_ISDIR(st.st_mode) ? "" :
                      list_entries(abs, 0, KIND_FILES, &l);
    if (why) {
        res = *why ? tool_error("%s: %s", why, path) : tool_error("path does not exist: %s", path);
        goto done;
    }
    if (glob_init(&gi, include) || glob_init(&ge, exclude)) goto done;
    size_t total = 0;
    int limit = 0, late = 0;
    struct timespec dl;
    deadline_in(&dl, AG_GREP_S);
    for (size_t f = 0; f < (single ? 1 : l.n) && !limit && !late; f++) {
        const char *shown = single ? path : l.v[f].rel;
        if ((f & 255) == 0 && ms_left(&dl) <= 0) {
            late = 1;
            break;
        }
        if (!single && (!glob_hit(&gi, shown) || (*exclude && glob_hit(&ge, shown)))) continue;
        char *fp = single ? abs : join(abs, shown);
        buf text = {0};
        int rc = fp ? slurp(fp, AG_GREP_FILE, &text) : -1;
        if (!single) free(fp);
        if (rc) continue;
        /* lines in place: each ends at a NUL where its '\n' was */
        size_t nl = 0, cap = 0, *starts = NULL;
        for (size_t i = 0; i < text.n;) {
            if (nl == cap) {
                size_t *s2 = srv_mem_take(NULL, (cap ? cap : 64) * sizeof *s2) ? NULL
                             : realloc(starts, (cap ? cap * 2 : 64) * sizeof *s2);
                if (!s2) break;
                starts = s2, cap = cap ? cap * 2 : 64;
            }
            starts[nl++] = i;
            char *e = memchr(text.p + i, '\n', text.n - i);
            size_t j = e ? (size_t)(e - text.p) : text.n;
            text.p[j] = 0;
            i = j + 1;
        }
        for (size_t i = 0; i < nl; i++) {
            if (total >= AG_RESULTS_MAX) {
                limit = 1;
                break;
            }
            if ((i & 1023) == 0 && ms_left(&dl) <= 0) {
                late = 1;
                break;
            }
            const char *line = text.p + starts[i];
            if (!line_hit(line, strlen(line), literal ? pattern : NULL, strlen(pattern), icase, &re)) continue;
            size_t a = ctx ? (i > (size_t)ctx ? i - (size_t)ctx : 0) : i;
            size_t z = ctx ? (i + (size_t)ctx < nl ? i + (size_t)ctx : nl - 1) : i;
            for (size_t k = a; k <= z; k++) {
                char sep = k == i ? ':' : '-';
                buf_str(&out, shown);
                buf_add(&out, &sep, 1);
                if (lineno || ctx) buf_fmt(&out, "%zu%c", k + 1, sep);
                buf_str(&out, text.p + starts[k]);
                buf_str(&out, "\n");
            }
            if (ctx) buf_str(&out, "--\n");
            total++;
        }
        free(starts);
        srv_mem_give(NULL, cap * sizeof *starts);
        buf_free(&text);
    }
    buf_fmt(&out, "\n---\nTotal matches: %zu\n", total);
    if (limit) buf_fmt(&out, "[%d matches limit reached. Narrow the path, pattern or include to see more.]\n",
                       AG_RESULTS_MAX);
    if (late) buf_fmt(&out, "[search stopped after %d s: narrow the path or include]\n", AG_GREP_S);
    if (l.truncated) buf_str(&out, "[file list truncated: time budget, entry limit or unreadable directory]\n");
    if (!out.oom) res = json_pack("{s:o}", "plain_text_response", text_value(out.p, out.n));
done:
    glob_free(&gi), glob_free(&ge);
    if (!literal) regfree(&re);
    list_free(&l);
    buf_free(&out);
    free(abs);
    return res;
}

static int exec_params(ag_call *c, const char **cmd, int *timeout, size_t *max_out)
{
    long long t, m;
    if (p_str(c, "command", 1, NULL, cmd) || p_int(c, "timeout", AG_EXEC_DEFAULT_S, &t) ||
        p_int(c, "max_output_size", AG_EXEC_OUT, &m))
        return -1;
    if (t < 1) return bad(c, "params.%s: must be 1 or more (seconds)", "timeout");
    if (m < 0) return bad(c, "params.%s: must be 0 or more (bytes)", "max_output_size");
    *timeout = t < AG_EXEC_MAX_S ? (int)t : AG_EXEC_MAX_S;
    *max_out = m < AG_EXEC_OUT ? (size_t)m : AG_EXEC_OUT;
    return 0;
}

static void exec_tail(buf *b, const ag_exec *e)
{
    buf_fmt(b, "\n[exit code: %d]%s", e->status, e->timed_out ? " [exit due to timed out]" : "");
}

static json_t *t_exec(ag_call *c)
{
    const char *cmd;
    int timeout;
    size_t max_out;
    if (exec_params(c, &cmd, &timeout, &max_out)) return NULL;
    char *line = strdup(cmd);
    char *argv[] = {"sh", "-c", line, NULL};
    ag_exec e;
    buf out = {0};
    if (!line || exec_start(&e, argv, c->cwd, timeout, max_out)) {
        buf_str(&out, "failed to spawn process");
        e.status = -1;
    } else {
        exec_all(&e, &out, client_alive, c->r);
        if (e.truncated) buf_str(&out, "\n[output truncated]");
    }
    exec_tail(&out, &e);
    json_t *res = out.oom ? NULL : json_pack("{s:o}", "plain_text_response", text_value(out.p, out.n));
    buf_free(&out);
    free(line);
    return res;
}

/* mkdir -p of path's parent directories. */
static int make_parents(char *path)
{
    for (char *p = strchr(path + 1, '/'); p; p = strchr(p + 1, '/')) {
        *p = 0;
        int rc = mkdir(path, 0777) && errno != EEXIST;
        *p = '/';
        if (rc) return -1;
    }
    return 0;
}

static int write_all(const char *abs, const char *data, size_t n)
{
    int fd = open(abs, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return -1;
    for (size_t at = 0; at < n;) {
        ssize_t k = write(fd, data + at, n - at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            close(fd);
            return -1;
        }
        at += (size_t)k;
    }
    return close(fd);
}

static json_t *t_write(ag_call *c)
{
    const char *path;
    json_t *content = json_object_get(c->params, "content");
    if (p_str(c, "path", 1, NULL, &path)) return NULL;
    if (!json_is_string(content)) return bad(c, "params.%s: required (a string)", "content"), NULL;
    char *abs = resolve(c->cwd, path);
    size_t n = json_string_length(content);
    int ok = abs && !make_parents(abs) && !write_all(abs, json_string_value(content), n);
    free(abs);
    if (!ok) return tool_error("failed to write file: %s", path);
    return json_pack("{s:s,s:s,s:I}", "result", "file written successfully", "path", path, "bytes", (json_int_t)n);
}

typedef struct edit {
    const char *old_text, *new_text;
    size_t nold, nnew, at, index;
} edit;

static int cmp_edit(const void *a, const void *b)
{
    const edit *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

static size_t occurrences(const char *hay, size_t n, const char *needle, size_t k, size_t *first)
{
    size_t count = 0;
    for (const char *p = hay, *hit; (hit = memmem(p, n - (size_t)(p - hay), needle, k)); p = hit + k) {
        if (!count) *first = (size_t)(hit - hay);
        count++;
    }
    return count;
}

static json_t *t_edit(ag_call *c)
{
    const char *path;
    json_t *edits = json_object_get(c->params, "edits");
    if (p_str(c, "path", 1, NULL, &path)) return NULL;
    if (!json_is_array(edits) || !json_array_size(edits)) return tool_error("\"edits\" must be a non-empty array");
    size_t ne = json_array_size(edits);
    if (ne > 4096) return bad(c, "params.%s: at most 4096 edits", "edits"), NULL;
    edit *v = calloc(ne, sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < ne; i++) {
        json_t *e = json_array_get(edits, i), *o = json_object_get(e, "old_text"), *nw = json_object_get(e, "new_text");
        if (!json_is_string(o) || !json_is_string(nw)) {
            free(v);
            snprintf(c->bad, sizeof c->bad, "params.edits[%zu]: needs old_text and new_text (strings)", i);
            return NULL;
        }
        v[i] = (edit){json_string_value(o), json_string_value(nw), json_string_length(o), json_string_length(nw), 0, i};
        if (!v[i].nold) {
            free(v);
            return tool_error("edits[%zu].old_text must not be empty", i);
        }
    }
    char *abs = resolve(c->cwd, path);
    buf text = {0}, out = {0};
    json_t *res = NULL;
    int rc = abs ? slurp(abs, SRV_MAX_BODY * 4ull, &text) : -2;
    if (rc) {
        if (rc != -2) res = rc > 0 ? tool_error("file too large to edit: %s", path)
                                   : tool_error("failed to open file: %s", path);
        goto done;
    }
    for (size_t i = 0; i < ne; i++) {
        size_t k = occurrences(text.p ? text.p : "", text.n, v[i].old_text, v[i].nold, &v[i].at);
        if (k == 0) {
            res = tool_error("could not find edits[%zu].old_text in %s: it must match the file's current content "
                             "exactly", i, path);
            goto done;
        }
        if (k > 1) {
            res = tool_error("found %zu occurrences of edits[%zu].old_text in %s: it must be unique", k, i, path);
            goto done;
        }
    }
    qsort(v, ne, sizeof *v, cmp_edit);
    for (size_t i = 1; i < ne; i++)
        if (v[i - 1].at + v[i - 1].nold > v[i].at) {
            res = tool_error("edits[%zu] and edits[%zu] overlap in %s; merge them into one edit or target disjoint "
                             "regions", v[i - 1].index, v[i].index, path);
            goto done;
        }
    size_t from = 0;
    for (size_t i = 0; i < ne; i++) {
        buf_add(&out, text.p + from, v[i].at - from);
        buf_add(&out, v[i].new_text, v[i].nnew);
        from = v[i].at + v[i].nold;
    }
    buf_add(&out, text.p + from, text.n - from);
    if (out.oom) goto done;
    if (out.n == text.n && !memcmp(out.p, text.p, text.n)) {
        res = tool_error("no changes made: the replacement(s) produced identical content");
    } else if (write_all(abs, out.p, out.n)) {
        res = tool_error("failed to write file: %s", path);
    } else {
        res = json_pack("{s:s,s:s,s:I}", "result", "file edited successfully", "path", path, "edits_applied",
                        (json_int_t)ne);
    }
done:
    buf_free(&text);
    buf_free(&out);
    free(abs);
    free(v);
    return res;
}

static json_t *t_info(ag_call *c)
{
    char *argv[] = {"uname", "-a", NULL};
    ag_exec e;
    buf out = {0};
    char here[4096];
    const char *os = "unknown";
    if (!exec_start(&e, argv, NULL, AG_INFO_S, 4096)) {
        exec_all(&e, &out, NULL, NULL);
        while (out.n && (out.p[out.n - 1] == '\n' || out.p[out.n - 1] == ' ')) out.p[--out.n] = 0;
        if (e.status == 0 && !e.timed_out && out.p) os = out.p;
    }
    const char *cwd = c->cwd ? c->cwd : getcwd(here, sizeof here) ? here : "unknown";
    json_t *res = json_pack("{s:o,s:o}", "os", text_value(os, strlen(os)), "cwd", text_value(cwd, strlen(cwd)));
    buf_free(&out);
    return res;
}

/* ---- the table, the routes ---- */

typedef struct ag_tool {
    const char *name, *display;
    int write, stream;
    ag_fn fn;
    const char *params; /* the JSON schema of its parameters */
    const char *about;  /* the function's description, for the model */
} ag_tool;

static const ag_tool k_tools[AG_N] = {
    [AG_READ_FILE] = {"read_file", "Read file", 0, 0, t_read_file,
                      "{\"type\":\"object\",\"properties\":{"
                      "\"path\":{\"type\":\"string\",\"description\":\"The file to read\"},"
                      "\"start_line\":{\"type\":\"integer\",\"description\":\"First line, counted from 1 (default 1)\"},"
                      "\"end_line\":{\"type\":\"integer\",\"description\":\"Last line, included (default: the last)\"},"
                      "\"append_loc\":{\"type\":\"boolean\",\"description\":\"Put each line's number before it\"}},"
                      "\"required\":[\"path\"]}",
                      "Returns a text file's lines, all of them or a range (1-based, inclusive). With append_loc "
                      "each line starts with its number and an arrow (\"12\xe2\x86\x92...\"). Files over 16 KB "
                      "need a line range."},
    [AG_GLOB] = {"file_glob_search", "File search", 0, 0, t_glob,
                 "{\"type\":\"object\",\"properties\":{"
                 "\"path\":{\"type\":\"string\",\"description\":\"The directory to search under\"},"
                 "\"include\":{\"type\":\"string\",\"description\":\"Glob of the entries wanted (default **)\"},"
                 "\"exclude\":{\"type\":\"string\",\"description\":\"Glob of entries to leave out\"},"
                 "\"type\":{\"type\":\"string\",\"description\":\"file (default), dir or all\"},"
                 "\"max_depth\":{\"type\":\"integer\",\"description\":\"Levels to descend (0, the default: all; "
                 "1: the directory's own entries)\"},"
                 "\"limit\":{\"type\":\"integer\",\"description\":\"Results to return, at most 100 (the default)\"}},"
                 "\"required\":[\"path\"]}",
                 "Lists the files (or directories) under a directory whose paths match a glob: * matches within "
                 "one path component, ** across components, ? one character, [a-z] a class. A glob without '/' "
                 "matches the base name at any depth; one with '/' the path relative to the directory. Files git "
                 "ignores, and directories such as .git, node_modules and build, are skipped. Directories end in "
                 "'/' in the output."},
    [AG_GREP] = {"grep_search", "Grep search", 0, 0, t_grep,
                 "{\"type\":\"object\",\"properties\":{"
                 "\"path\":{\"type\":\"string\",\"description\":\"A file, or a directory to search under\"},"
                 "\"pattern\":{\"type\":\"string\",\"description\":\"A regular expression (POSIX extended), or "
                 "text when literal is true\"},"
                 "\"include\":{\"type\":\"string\",\"description\":\"Glob of the files to search (default **)\"},"
                 "\"exclude\":{\"type\":\"string\",\"description\":\"Glob of files to leave out\"},"
                 "\"return_line_numbers\":{\"type\":\"boolean\",\"description\":\"Give each line's number\"},"
                 "\"literal\":{\"type\":\"boolean\",\"description\":\"The pattern is plain text (default false)\"},"
                 "\"ignore_case\":{\"type\":\"boolean\",\"description\":\"Ignore case (default false)\"},"
                 "\"context_lines\":{\"type\":\"integer\",\"description\":\"Lines shown before and after each "
                 "match (default 0)\"}},"
                 "\"required\":[\"path\",\"pattern\"]}",
                 "Finds the lines matching a pattern in a file or in the files under a directory (at most 100 "
                 "matches), as path:line, with line numbers and context lines when asked. Globs as in "
                 "file_glob_search; files git ignores and directories such as .git and node_modules are skipped."},
    [AG_EXEC] = {"exec_shell_command", "Execute shell command", 1, 1, t_exec,
                 "{\"type\":\"object\",\"properties\":{"
                 "\"command\":{\"type\":\"string\",\"description\":\"The command line, run by sh -c\"},"
                 "\"timeout\":{\"type\":\"integer\",\"description\":\"Seconds before it is killed (default 10, "
                 "at most 60)\"},"
                 "\"max_output_size\":{\"type\":\"integer\",\"description\":\"Output bytes kept (default and "
                 "most: 16384)\"}},"
                 "\"required\":[\"command\"]}",
                 "Runs a shell command and returns what it printed (standard output and error together) and its "
                 "exit code."},
    [AG_WRITE] = {"write_file", "Write file", 1, 0, t_write,
                  "{\"type\":\"object\",\"properties\":{"
                  "\"path\":{\"type\":\"string\",\"description\":\"The file to write\"},"
                  "\"content\":{\"type\":\"string\",\"description\":\"Its whole new content\"}},"
                  "\"required\":[\"path\",\"content\"]}",
                  "Writes a whole file, creating it and its directories when missing, replacing it otherwise. "
                  "For changes to part of a file, edit_file."},
    [AG_EDIT] = {"edit_file", "Edit file", 1, 0, t_edit,
                 "{\"type\":\"object\",\"properties\":{"
                 "\"path\":{\"type\":\"string\",\"description\":\"The file to edit\"},"
                 "\"edits\":{\"type\":\"array\",\"description\":\"The replacements\",\"items\":{\"type\":\"object\","
                 "\"properties\":{\"old_text\":{\"type\":\"string\",\"description\":\"Text found exactly once in "
                 "the file\"},\"new_text\":{\"type\":\"string\",\"description\":\"What replaces it\"}},"
                 "\"required\":[\"old_text\",\"new_text\"]}}},"
                 "\"required\":[\"path\",\"edits\"]}",
                 "Replaces text in a file: each old_text must occur exactly once in the file as it is now, and "
                 "the edits must not overlap (merge neighbouring changes into one). write_file replaces a whole "
                 "file."},
    [AG_INFO] = {"get_info", "Get Runtime Info", 0, 0, t_info, "{\"type\":\"object\",\"properties\":{}}",
                 "Returns the operating system (uname -a) and the working directory."},
};

_Static_assert(AG_N == 7, "skv_server_tools_parse's message names every tool");

int skv_server_tools_parse(const char *list, unsigned *mask, skv_err *err)
{
    *mask = 0;
    for (const char *p = list; *p;) {
        p += strspn(p, " ,");
        size_t k = strcspn(p, ",");
        size_t m = k;
        while (m && p[m - 1] == ' ') m--;
        if (!m) break;
        int found = m == 3 && !strncmp(p, "all", 3);
        if (found) *mask = (1u << AG_N) - 1;
        for (int i = 0; i < AG_N && !found; i++)
            if (strlen(k_tools[i].name) == m && !strncmp(p, k_tools[i].name, m)) *mask |= 1u << i, found = 1;
        if (!found)
            return skv_fail(err, SKV_ERR_INVALID_ARG, "unknown tool \"%.*s\"; the tools: all, %s, %s, %s, %s, %s, %s, %s",
                            (int)(m < 64 ? m : 64), p, k_tools[0].name, k_tools[1].name, k_tools[2].name,
                            k_tools[3].name, k_tools[4].name, k_tools[5].name, k_tools[6].name);
        p += k;
    }
    if (!*mask) return skv_fail(err, SKV_ERR_INVALID_ARG, "no tool named (all, or some of read_file, file_glob_search, ...)");
    return 0;
}

int srv_tools_builtin(const srv *s, const char *name)
{
    for (int i = 0; i < AG_N; i++)
        if ((s->p.agent_tools & (1u << i)) && !strcmp(k_tools[i].name, name)) return 1;
    return 0;
}

static int tools_off(srv_req *r)
{
    json_t *e = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", 403, "message",
                          "this feature is disabled: start the server with --tools all (or a list of tools) to "
                          "enable the built-in agent tools, or with --mcp-servers-config for MCP servers' tools",
                          "type", "feature_disabled");
    return e ? srv_reply_json(r, 403, e) : srv_reply_error(r, 500, "out of memory");
}

int srv_rt_tools_get(srv_req *r)
{
    if (!r->s->p.agent_tools && !r->s->mcp) return tools_off(r);
    json_t *a = json_array();
    for (int i = 0; a && i < AG_N; i++) {
        if (!(r->s->p.agent_tools & (1u << i))) continue;
        const ag_tool *t = &k_tools[i];
        json_t *params = json_loads(t->params, 0, NULL);
        json_t *o = params ? json_pack("{s:s,s:s,s:s,s:{s:b},s:b,s:{s:s,s:{s:s,s:s,s:o}}}", "display_name", t->display,
                                       "tool", t->name, "type", "server", "permissions", "write", t->write,
                                       "uses_cwd", 1, "definition", "type", "function", "function", "name", t->name,
                                       "description", t->about, "parameters", params)
                           : NULL;
        if (!o || json_array_append_new(a, o)) {
            json_decref(a);
            a = NULL;
        }
    }
    for (int i = 0; a && i < srv_mcp_n_tools(r->s->mcp); i++) {
        json_t *o = srv_mcp_tool_json(r->s->mcp, i);
        if (!o || json_array_append_new(a, o)) {
            json_decref(a);
            a = NULL;
        }
    }
    return a ? srv_reply_json(r, 200, a) : srv_reply_error(r, 500, "out of memory");
}

static const char *header(const srv_req *r, const char *name)
{
    for (size_t i = 0; i < r->n_headers; i++)
        if (!strcasecmp(r->headers[i].name, name)) return r->headers[i].value;
    return NULL;
}

/* exec_shell_command with "stream": true: its output as server-sent events as it comes
 * ({"chunk": TEXT}), then the exit code's line as a chunk, then {"done": true}. */
typedef struct ag_stream {
    ag_exec e;
    char hold[4];      /* a UTF-8 character cut at a chunk's end */
    size_t nhold;
    int state;         /* 0 output, 1 tail sent, 2 done sent */
    char *ev;          /* the event being sent */
    size_t len, pos;
} ag_stream;

static char *event(json_t *o, size_t *len)
{
    size_t n;
    char *t = o ? srv_json_text(o, &n, 0) : NULL, *e = t ? malloc(n + 9) : NULL;
    if (e) *len = (size_t)snprintf(e, n + 9, "data: %s\n\n", t);
    free(t);
    json_decref(o);
    return e;
}

static size_t stream_read(void *cls, char *out, size_t max, int *end, int (*alive)(void *), void *a)
{
    ag_stream *st = cls;
    *end = 0;
    while (st->pos == st->len) {
        free(st->ev);
        st->ev = NULL, st->len = st->pos = 0;
        if (st->state == 2) {
            *end = 1;
            return 0;
        }
        if (st->state == 0) {
            char chunk[4096 + 4];
            memcpy(chunk, st->hold, st->nhold);
            size_t n = exec_read(&st->e, chunk + st->nhold, 4096, alive, a), have = st->nhold + n;
            if (st->e.gone) {
                *end = -1;
                return 0;
            }
            if (n) {
                size_t whole = srv_utf8_complete(chunk, have);
                if (have - whole > 3) whole = have; /* not a cut character: invalid bytes, sent as such */
                st->nhold = have - whole;
                memcpy(st->hold, chunk + whole, st->nhold);
                if (whole) st->ev = event(json_pack("{s:o}", "chunk", text_value(chunk, whole)), &st->len);
                else continue;
            } else {
                buf tail = {0};
                buf_add(&tail, st->hold, st->nhold);
                exec_tail(&tail, &st->e);
                st->ev = tail.oom ? NULL : event(json_pack("{s:o}", "chunk", text_value(tail.p, tail.n)), &st->len);
                buf_free(&tail);
                st->state = 1;
            }
        } else {
            st->ev = event(json_pack("{s:b}", "done", 1), &st->len);
            st->state = 2;
        }
        if (!st->ev) {
            *end = -1;
            return 0;
        }
    }
    return srv_source_copy(out, max, st->ev, st->len, &st->pos);
}

static void stream_close(void *cls)
{
    ag_stream *st = cls;
    if (!st->e.ended) {
        st->e.gone = 1;
        exec_end(&st->e, NULL, NULL);
    }
    free(st->ev);
    free(st);
}

static int exec_stream(srv_req *r, ag_call *c)
{
    const char *cmd;
    int timeout;
    size_t max_out;
    if (exec_params(c, &cmd, &timeout, &max_out)) return srv_reply_error(r, 400, "%s", c->bad);
    if (!r->sink->source) return srv_reply_error(r, 501, "no streamed replies on this path");
    ag_stream *st = calloc(1, sizeof *st);
    char *line = strdup(cmd);
    char *argv[] = {"sh", "-c", line, NULL};
    if (!st || !line) {
        free(st), free(line);
        return srv_reply_error(r, 500, "out of memory");
    }
    if (exec_start(&st->e, argv, c->cwd, timeout, max_out)) {
        /* as llama-server: the failure is the output, the exit code -1 */
        st->e = (ag_exec){.pid = -1, .fd = -1, .status = -1, .ended = 1};
    }
    free(line);
    return r->sink->source(r, 200, "text/event-stream", (srv_source){stream_read, stream_close, st});
}

/* Whether s[0..n) is a name llama-server accepts after "ssh:" (extra '@') or
 * "<engine>-container:": one that cannot pass for an option of ssh or the engine. */
static int runtime_name_ok(const char *s, int ssh)
{
    if (!*s || *s == '-' || (!ssh && !isalnum((unsigned char)*s))) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr(ssh ? ".-_@" : ".-_", *s)) return 0;
    return 1;
}

/* X-Tool-Runtime: a spec llama-server would refuse gets its answer (500, its message: an
 * unknown scheme, a name that could inject an option); one it would run, a 400 saying that
 * seqkv serve runs the tools on its own host only. */
static int runtime_refused(srv_req *r, const char *rt)
{
    static const char *const engines[] = {"docker", "podman"};
    for (int e = 0; e < 2; e++) {
        size_t k = strlen(engines[e]);
        if (strncmp(rt, engines[e], k)) continue;
        if (!strncmp(rt + k, "-container:", 11) && !runtime_name_ok(rt + k + 11, 0))
            return srv_reply_error(r, 500, "invalid container id: %.200s", rt + k + 11);
        if (!strncmp(rt + k, "-container:", 11)) goto unsupported;
        if (rt[k] == ':') return srv_reply_error(r, 500, "tool runtime must name a running container: %.200s", rt);
    }
    if (!strncmp(rt, "ssh:", 4)) {
        if (!runtime_name_ok(rt + 4, 1)) return srv_reply_error(r, 500, "invalid ssh target: %.200s", rt + 4);
        goto unsupported;
    }
    return srv_reply_error(r, 500, "unknown tool runtime: %.200s", rt);
unsupported:
    return srv_reply_error(r, 400, "X-Tool-Runtime: tool runtimes (containers, SSH) are not supported by seqkv "
                                   "serve; run the server where the tools should act");
}

/* A tool of an MCP server: its params are the call's arguments (the headers are not). */
static int mcp_post(srv_req *r, int i, json_t *params, json_t *stream)
{
    if (json_is_true(stream))
        return srv_reply_error(r, 404, "tool \"%s\" does not support stream = true (MCP tools answer whole)",
                               json_string_value(json_object_get(r->body, "tool")));
    json_t *empty = params ? NULL : json_object();
    json_t *res = params || empty ? srv_mcp_call(r->s->mcp, i, params ? params : empty, client_alive, r) : NULL;
    json_decref(empty);
    if (res) return srv_reply_json(r, 200, res);
    const srv_mem_scope *sc = srv_mem_current();
    int code = sc && sc->refused ? sc->refused : 500;
    return code == 413 ? srv_reply_error(r, 413, "the tool's reply needs more working memory than one request may "
                                                 "have (--mem-budget)")
           : code == 503 ? srv_reply_error(r, 503, "server busy: its working memory (--mem-budget) is in use by "
                                                   "other requests; retry")
                         : srv_reply_error(r, 500, "out of memory");
}

int srv_rt_tools_post(srv_req *r)
{
    if (!r->s->p.agent_tools && !r->s->mcp) return tools_off(r);
    json_t *b = r->body, *params = json_object_get(b, "params"), *stream = json_object_get(b, "stream");
    const char *name = json_string_value(json_object_get(b, "tool"));
    const char *rt = header(r, "X-Tool-Runtime"), *cwd = header(r, "X-Tool-Cwd"), *rtype = header(r, "X-Resp-Type");
    if (!name) return srv_reply_error(r, 400, "\"tool\": required (a tool's name, as GET /tools lists them)");
    if (params && !json_is_object(params)) return srv_reply_error(r, 400, "\"params\": must be an object");
    if (stream && !json_is_boolean(stream)) return srv_reply_error(r, 400, "\"stream\": must be true or false");
    int i = 0;
    while (i < AG_N && (strcmp(k_tools[i].name, name) || !(r->s->p.agent_tools & (1u << i)))) i++;
    int m = i == AG_N ? srv_mcp_find(r->s->mcp, name) : -1;
    if (m >= 0) return mcp_post(r, m, params, stream);
    if (i == AG_N) return srv_reply_error(r, 404, "unknown tool \"%.100s\"", name);
    if (rt && *rt) return runtime_refused(r, rt);
    if (json_is_true(stream) && !k_tools[i].stream)
        return srv_reply_error(r, 404, "tool \"%s\" does not support stream = true", name);
    json_t *empty = params ? NULL : json_object();
    ag_call c = {.r = r, .params = params ? params : empty, .base64 = rtype && !strcmp(rtype, "base64")};
    if (cwd && *cwd && !(c.cwd = resolve(NULL, cwd))) {
        json_decref(empty);
        return srv_reply_error(r, 500, "out of memory");
    }
    int rc;
    if (json_is_true(stream)) {
        rc = exec_stream(r, &c);
    } else {
        json_t *res = c.params ? k_tools[i].fn(&c) : NULL;
        const srv_mem_scope *sc = srv_mem_current();
        int code = sc && sc->refused ? sc->refused : 500;
        rc = res ? srv_reply_json(r, 200, res)
             : c.bad[0] ? srv_reply_error(r, 400, "%s", c.bad)
             : code == 413 ? srv_reply_error(r, 413, "the tool needs more working memory than one request may have "
                                                     "(--mem-budget)")
             : code == 503 ? srv_reply_error(r, 503, "server busy: its working memory (--mem-budget) is in use by "
                                                     "other requests; retry")
                           : srv_reply_error(r, 500, "out of memory");
    }
    free(c.cwd);
    json_decref(empty);
    return rc;
}
