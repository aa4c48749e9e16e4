/* A chat reply's thoughts split from its content, as llama-server's --reasoning-format does:
 * a thought block the model writes between its template's markers (<think> ... </think>, ...)
 * is the reply's reasoning (OpenAI's reasoning_content, an Anthropic thinking block, a
 * Responses reasoning item), the rest its content.
 *
 * The markers are the first pair of the table whose opening marker the chat template
 * contains; a template with none of them gets no split (its replies are content, as
 * llama-server's). A prompt that ends with the opening marker (a template that opens the
 * thought block itself) starts the reply inside it. The block: the opening marker after
 * optional whitespace, then the thought up to the closing marker; whitespace around the
 * thought and after the closing marker is no one's. A block never closed is thought to the
 * end of the reply. A stream learns the split as the text grows: what could still become a
 * marker (or is trailing whitespace of the thought) is held back until it is decided, so the
 * pieces streamed add up to the final split. */
#include <string.h>
#include "core/fpguard.h"

#include "server/srv.h"

static const struct srv_think_marker {
    const char *open, *close;
} markers[] = {
    {"<think>", "</think>"},                       /* DeepSeek R1, Qwen 3, QwQ, ... */
    {"<seed:think>", "</seed:think>"},             /* Seed-OSS */
    {"<|START_THINKING|>", "<|END_THINKING|>"},    /* Command R7B */
    {"[THINK]", "[/THINK]"},                       /* Magistral */
};

static const char *const formats[] = {"none", "auto", "deepseek", "deepseek-legacy"}; /* SRV_REASON_* */

int srv_think_format(const char *name)
{
    for (int i = 0; name && i < (int)(sizeof formats / sizeof *formats); i++)
        if (!strcmp(name, formats[i])) return i;
    return -1;
}

const char *srv_think_format_name(int f)
{
    return f >= 0 && f < (int)(sizeof formats / sizeof *formats) ? formats[f] : "none";
}

int srv_think_marker(const char *tmpl)
{
    for (int i = 0; tmpl && i < (int)(sizeof markers / sizeof *markers); i++) {
        const char *at = strstr(tmpl, markers[i].open);
        /* "<think>" inside "<seed:think>" is not the same marker: only whole ones count */
        while (at && i == 0 && at > tmpl && at[-1] == ':') at = strstr(at + 1, markers[i].open);
        if (at) return i;
    }
    return -1;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

int srv_think_opened(int marker, const char *prompt, size_t n)
{
    if (marker < 0 || !prompt) return 0;
    const char *o = markers[marker].open;
    size_t k = strlen(o);
    while (n && is_ws(prompt[n - 1])) n--;
    return n >= k && !memcmp(prompt + n - k, o, k);
}

/* The length of the longest proper prefix of m that t[0, n) ends with. */
static size_t partial_tail(const char *t, size_t n, const char *m)
{
    size_t k = strlen(m);
    for (size_t l = k - 1 < n ? k - 1 : n; l; l--)
        if (!memcmp(t + n - l, m, l)) return l;
    return 0;
}

const char *srv_think_close_marker(int marker)
{
    return marker >= 0 && marker < (int)(sizeof markers / sizeof *markers) ? markers[marker].close : NULL;
}

void srv_think_split(int marker, int opened, const char *t, size_t n, int final, srv_think_parts *p)
{
    memset(p, 0, sizeof *p);
    p->c1 = n;
    p->state = SRV_THINK_OUT;
    if (marker < 0) return; /* all content */
    const char *open = markers[marker].open, *close = markers[marker].close;
    size_t ko = strlen(open), kc = strlen(close), i = 0;
    if (!opened) {
        while (i < n && is_ws(t[i])) i++;
        size_t rest = n - i;
        if (rest >= ko && !memcmp(t + i, open, ko)) {
            i += ko;
        } else if (!final && rest < ko && !memcmp(t + i, open, rest)) {
            p->c1 = 0; /* it may still open: nothing is decided */
            p->state = SRV_THINK_UNDECIDED;
            return;
        } else {
            return; /* no thought block: all content */
        }
    }
    while (i < n && is_ws(t[i])) i++;
    p->r0 = i;
    const char *end = NULL;
    for (size_t k = i; k + kc <= n && !end; k++)
        if (t[k] == close[0] && !memcmp(t + k, close, kc)) end = t + k;
    size_t r1 = end ? (size_t)(end - t) : final ? n : n - partial_tail(t + i, n - i, close);
    while (r1 > i && is_ws(t[r1 - 1])) r1--;
    p->r1 = r1;
    p->c0 = p->c1 = n;
    if (!end) {
        p->state = SRV_THINK_IN;
        return;
    }
    size_t c = (size_t)(end - t) + kc;
    while (c < n && is_ws(t[c])) c++;
    p->c0 = c;
}

/* 1 when t[0, n) ends at a character boundary (its last UTF-8 sequence is whole). */
static int utf8_whole(const char *t, size_t n)
{
    size_t k = 0;
    while (k < 4 && k < n && ((unsigned char)t[n - 1 - k] & 0xC0) == 0x80) k++; /* continuation bytes */
    if (k == n) return k == 0;
    unsigned char lead = (unsigned char)t[n - 1 - k];
    size_t want = lead < 0x80 ? 0 : lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : 1;
    return k == want;
}

/* The first k in [from, n) where t holds s (sl bytes), else SIZE_MAX; *next: where the
 * next search may start (a partial match at the end kept). */
static size_t find_from(const char *t, size_t n, size_t from, const char *s, size_t sl, size_t *next)
{
    for (size_t k = from; k + sl <= n; k++)
        if (t[k] == s[0] && !memcmp(t + k, s, sl)) return k;
    *next = n >= sl ? (n - sl + 1 > from ? n - sl + 1 : from) : from;
    return SIZE_MAX;
}

/* As llama-server's reasoning budget: the tokens of a thought are counted from its opening
 * (the prompt's, or an opening marker the reply writes); when the count reaches the budget
 * at a character boundary, the budget message and the closing marker are forced token by
 * token, and the rest of the reply is the model's again. Another opening marker later in
 * the reply starts another thought with a budget of its own (llama-server re-arms too). A
 * budget of 0 closes a thought at once. The text is scanned once: think_scan is where the
 * next marker may start. */
int srv_think_budget_next(srv_job *j, int32_t *tok)
{
    if (j->think_budget < 0 || !j->think_mark) return 0;
    if (j->force_at && j->force_at < j->n_force) return *tok = j->think_force[j->force_at++], 1;
    const struct srv_think_marker *mk = &markers[j->think_mark - 1];
    const char *t = j->text ? j->text : "";
    size_t ko = strlen(mk->open), kc = strlen(mk->close), at;
    if (j->force_at) /* a forced closing marker just ended its thought */
        j->force_at = 0, j->think_state = SRV_THINK_OUT, j->think_scan = j->len;
    for (;;) {
        if (j->think_state != SRV_THINK_IN) { /* outside: a thought opens? */
            if (!j->think_started && j->think_opened) {
                at = 0; /* the prompt opened it */
            } else if ((at = find_from(t, j->len, j->think_scan, mk->open, ko, &j->think_scan)) == SIZE_MAX) {
                return 0;
            } else {
                at += ko;
            }
            j->think_started = 1, j->think_state = SRV_THINK_IN, j->think_count = 0, j->think_scan = at;
        }
        if ((at = find_from(t, j->len, j->think_scan, mk->close, kc, &j->think_scan)) == SIZE_MAX) break;
        j->think_state = SRV_THINK_OUT, j->think_scan = at + kc; /* closed by the model: look on */
    }
    if (j->think_count < (size_t)j->think_budget || !utf8_whole(t, j->len)) {
        j->think_count++; /* the token sampled now is the thought's */
        return 0;
    }
    if (!j->n_force) return j->think_state = SRV_THINK_OUT, j->think_scan = j->len, 0;
    return *tok = j->think_force[j->force_at++], 1;
}
