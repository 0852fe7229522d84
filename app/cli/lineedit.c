/*
 * lineedit.c — reading `mzcache chat` input lines.
 *
 * On a terminal, with libedit (Debian libedit-dev) found at build time: line
 * editing (arrows, Home/End, Ctrl-A/E/K/W, ...) and a history of this
 * session's lines (up/down arrows). Otherwise plain fgets. Either way a
 * Ctrl-C while waiting for a line (cli_interrupted set by chat's SIGINT
 * handler, installed without SA_RESTART so the read returns EINTR) ends the
 * input like end of file, and the caller tells the two apart by the flag.
 */
#define _GNU_SOURCE
#include "lineedit.h"

#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#ifdef MZ_HAVE_LIBEDIT
#include <histedit.h>
#endif

struct cli_lines {
    bool tty;
    const char *prompt;
#ifdef MZ_HAVE_LIBEDIT
    EditLine *el;
    History *hist;
#endif
};

#ifdef MZ_HAVE_LIBEDIT
static const char *g_prompt = "> ";

static char *prompt_fn(EditLine *el)
{
    (void)el;
    return (char *)(uintptr_t)g_prompt;
}

/* libedit's own reader retries a read interrupted by a signal; this one
 * returns -1 (el_gets gives NULL) when Ctrl-C was pressed, so one Ctrl-C at
 * the prompt is enough. Bytes are decoded to wide characters in the
 * locale's encoding (UTF-8 under a UTF-8 locale). */
static int getc_fn(EditLine *el, wchar_t *out)
{
    (void)el;
    mbstate_t mbs;
    memset(&mbs, 0, sizeof mbs);
    char buf[MB_LEN_MAX];
    size_t n = 0;
    for (;;) {
        if (cli_interrupted) return -1;
        char ch;
        ssize_t r = read(STDIN_FILENO, &ch, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) return 0;
        buf[n++] = ch;
        wchar_t wc;
        size_t k = mbrtowc(&wc, buf, n, &mbs);
        if (k == (size_t)-2 && n < sizeof buf) continue; /* incomplete sequence */
        if (k == (size_t)-1 || k == (size_t)-2) {
            *out = (wchar_t)(unsigned char)buf[0]; /* not valid here: pass the first byte */
            return 1;
        }
        *out = wc;
        return 1;
    }
}
#endif

cli_lines *cli_lines_open(const char *prompt)
{
    cli_lines *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    r->prompt = prompt;
#ifdef MZ_HAVE_LIBEDIT
    if (r->tty) {
        g_prompt = prompt;
        r->el = el_init("mzcache", stdin, stdout, stderr);
        r->hist = history_init();
        if (r->el && r->hist) {
            HistEvent ev;
            history(r->hist, &ev, H_SETSIZE, 1000);
            history(r->hist, &ev, H_SETUNIQUE, 1);
            el_set(r->el, EL_EDITOR, "emacs");
            el_set(r->el, EL_PROMPT, prompt_fn);
            el_set(r->el, EL_HIST, history, r->hist);
            el_set(r->el, EL_GETCFN, getc_fn);
            /* Bound whatever the terminal database says (TERM may be unknown). */
            el_set(r->el, EL_BIND, "\033[A", "ed-prev-history", NULL);
            el_set(r->el, EL_BIND, "\033[B", "ed-next-history", NULL);
            el_set(r->el, EL_BIND, "\033[C", "ed-next-char", NULL);
            el_set(r->el, EL_BIND, "\033[D", "ed-prev-char", NULL);
            el_set(r->el, EL_BIND, "\033OA", "ed-prev-history", NULL);
            el_set(r->el, EL_BIND, "\033OB", "ed-next-history", NULL);
            el_set(r->el, EL_BIND, "\033OC", "ed-next-char", NULL);
            el_set(r->el, EL_BIND, "\033OD", "ed-prev-char", NULL);
            el_set(r->el, EL_BIND, "\033[H", "ed-move-to-beg", NULL);
            el_set(r->el, EL_BIND, "\033[F", "ed-move-to-end", NULL);
            el_set(r->el, EL_BIND, "\033[3~", "ed-delete-next-char", NULL);
        } else {
            if (r->el) el_end(r->el);
            if (r->hist) history_end(r->hist);
            r->el = NULL;
            r->hist = NULL;
        }
    }
#endif
    return r;
}

bool cli_lines_editing(const cli_lines *r)
{
#ifdef MZ_HAVE_LIBEDIT
    return r->el != NULL;
#else
    (void)r;
    return false;
#endif
}

char *cli_lines_read(cli_lines *r)
{
#ifdef MZ_HAVE_LIBEDIT
    if (r->el) {
        int n = 0;
        const char *line = el_gets(r->el, &n);
        if (!line || n <= 0) {
            /* The terminal is back in its normal mode; end the prompt line. */
            fputc('\n', stdout);
            fflush(stdout);
            return NULL;
        }
        char *copy = strdup(line);
        if (copy) copy[strcspn(copy, "\r\n")] = '\0';
        return copy;
    }
#endif
    if (r->tty) {
        fputs(r->prompt, stdout);
        fflush(stdout);
    }
    size_t cap = 0;
    char *line = NULL;
    errno = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        clearerr(stdin);
        if (r->tty) fputc('\n', stdout);
        return NULL;
    }
    line[strcspn(line, "\r\n")] = '\0';
    return line;
}

void cli_lines_remember(cli_lines *r, const char *line)
{
#ifdef MZ_HAVE_LIBEDIT
    if (r->hist && line[0]) {
        HistEvent ev;
        history(r->hist, &ev, H_ENTER, line);
    }
#else
    (void)r;
    (void)line;
#endif
}

void cli_lines_close(cli_lines *r)
{
    if (!r) return;
#ifdef MZ_HAVE_LIBEDIT
    if (r->el) el_end(r->el);
    if (r->hist) history_end(r->hist);
#endif
    free(r);
}
