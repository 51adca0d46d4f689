/*
 * diag.c — diagnostics, and the arena every pass allocates from.
 *
 * Errors are the compiler's face.  Each is printed in GNU format, followed
 * by the source line and a caret under the span, the way gcc does it:
 *
 *   models/x.net:12:5: error: linear expects a flat input, got [64, 6, 6]
 *      12 |     linear(64)
 *         |     ^~~~~~~~~~
 *   models/x.net:12:5: note: insert 'flatten' before this layer
 *
 * Passes report and go on, so one run shows every error it can find; the
 * driver writes no output when d->errors is not zero.  Errors are held and
 * printed in the order of their lines by diag_flush, each with its notes,
 * since the passes find them in an order of their own.  An error found
 * again (the same line, the same words: a mistake in a block used N times)
 * is reported once.
 */
#include "netc.h"

#include <stdlib.h>
#include <string.h>

/* After this many errors the rest would only be noise. */
#define MAX_ERRORS 50

/* ------------------------------------------------------------------ arena */

struct Block {
    struct Block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

struct Arena {
    struct Block *head;
};

Arena *arena_new(void)
{
    Arena *a = calloc(1, sizeof *a);
    if (!a) {
        fputs("netc: out of memory\n", stderr);
        exit(1);
    }
    return a;
}

void *arena_alloc(Arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct Block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + cap);
        if (!b) {
            fputs("netc: out of memory\n", stderr);
            exit(1);
        }
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strdup(Arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(arena_alloc(a, n), s, n);
}

char *arena_printf(Arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = arena_alloc(a, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void arena_free(Arena *a)
{
    if (!a)
        return;
    for (struct Block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

/* ------------------------------------------------------------ diagnostics */

/* The text of line `line` (1-based) and its length, without the newline. */
static const char *line_text(const Diag *d, int line, int *len)
{
    const char *p = d->src, *end = d->src + d->len;
    for (int l = 1; l < line && p < end; p++)
        if (*p == '\n')
            l++;
    const char *q = p;
    while (q < end && *q != '\n' && *q != '\r')
        q++;
    *len = (int)(q - p);
    return p;
}

/* A UTF-8 continuation byte: it takes no column on the screen. */
static bool continuation(char c)
{
    return ((unsigned char)c & 0xc0) == 0x80;
}

/* The source line, control characters shown as '?', then a caret under the
 * span; columns are bytes, the screen counts characters. */
static void show_line(const Diag *d, FILE *out, Loc loc)
{
    if (!d->src || loc.first_line < 1)
        return;
    int len;
    const char *text = line_text(d, loc.first_line, &len);
    fprintf(out, "%5d | ", loc.first_line);
    for (int i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        fputc(c < 0x20 && c != '\t' ? '?' : c == 0x7f ? '?' : c, out);
    }
    fprintf(out, "\n      | ");
    int col = loc.first_column < 1 ? 1 : loc.first_column;
    for (int i = 1; i < col && i <= len; i++)
        if (!continuation(text[i - 1]))
            fputc(text[i - 1] == '\t' ? '\t' : ' ', out);
    int last = loc.last_line == loc.first_line ? loc.last_column : len + 1;
    if (last > len + 1)
        last = len + 1;
    fputc('^', out);
    for (int i = col + 1; i < last; i++)
        if (!continuation(text[i - 1]))
            fputc('~', out);
    fputc('\n', out);
}

struct Report {
    int line;     /* 0: about the whole file */
    int order;    /* when it was found, to keep equal lines in order */
    char *text;   /* the error, its source line and caret, its notes */
    size_t len;
};

static void out_of_memory(void)
{
    fputs("netc: out of memory\n", stderr);
    exit(1);
}

/* Whether a report begins with the line `text` (len bytes, its '\n'
 * included) already: the same error found again, in another use of the
 * block it is written in. */
static bool reported(const Diag *d, const char *text, size_t len)
{
    for (int i = 0; i < d->nreports; i++)
        if (d->reports[i].len >= len && !memcmp(d->reports[i].text, text, len))
            return true;
    return false;
}

/* Appends the formatted message (and for errors the source line) to the
 * current report, or to a new one; a report made before (and its notes)
 * is left out.  Returns whether the message was kept. */
static bool add(Diag *d, bool new_report, int line, Loc loc, bool located,
                const char *kind, const char *fmt, va_list ap)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        out_of_memory();
    if (located)
        fprintf(m, "%s:%d:%d: %s: ", d->file, loc.first_line, loc.first_column, kind);
    else
        fprintf(m, "%s: %s: ", d->file, kind);
    vfprintf(m, fmt, ap);
    fputc('\n', m);
    if (fflush(m) != 0)
        out_of_memory();
    if (new_report)
        d->muted = reported(d, buf, len);
    if (d->muted) {
        fclose(m);
        free(buf);
        return false;
    }
    if (new_report && located)
        show_line(d, m, loc);
    if (fclose(m) != 0)
        out_of_memory();
    if (new_report || d->nreports == 0) {
        if (d->nreports == d->cap) {
            d->cap = d->cap ? 2 * d->cap : 16;
            d->reports = realloc(d->reports, sizeof *d->reports * (size_t)d->cap);
            if (!d->reports)
                out_of_memory();
        }
        d->reports[d->nreports] = (Report){line, d->nreports, NULL, 0};
        d->nreports++;
    }
    Report *r = &d->reports[d->nreports - 1];
    char *text = realloc(r->text, r->len + len + 1);
    if (!text)
        out_of_memory();
    memcpy(text + r->len, buf, len + 1);
    r->text = text;
    r->len += len;
    free(buf);
    return true;
}

void diag_error(Diag *d, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool kept = add(d, true, loc.first_line, loc, true, "error", fmt, ap);
    va_end(ap);
    if (kept && ++d->errors >= MAX_ERRORS) {
        diag_flush(d);
        fprintf(d->out, "%s: too many errors; stopping\n", d->file);
        exit(1);
    }
}

void diag_warning(Diag *d, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add(d, true, loc.first_line, loc, true, "warning", fmt, ap);
    va_end(ap);
}

void diag_note(Diag *d, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add(d, false, 0, loc, true, "note", fmt, ap);
    va_end(ap);
}

void diag_file_error(Diag *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    Loc none = {0, 0, 0, 0};
    if (add(d, true, 0, none, false, "error", fmt, ap))
        d->errors++;
    va_end(ap);
}

static int by_line(const void *a, const void *b)
{
    const Report *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

void diag_flush(Diag *d)
{
    if (d->nreports)
        qsort(d->reports, (size_t)d->nreports, sizeof *d->reports, by_line);
    for (int i = 0; i < d->nreports; i++) {
        fputs(d->reports[i].text, d->out);
        free(d->reports[i].text);
    }
    free(d->reports);
    d->reports = NULL;
    d->nreports = d->cap = 0;
}

/* Length of the UTF-8 sequence at s (at most n bytes), or 0 if invalid:
 * overlong forms, surrogates and code points above U+10FFFF are refused. */
static int utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    int len;
    unsigned min;
    if (c < 0x80)
        return c == 0 ? 0 : 1;
    else if ((c & 0xe0) == 0xc0)
        len = 2, min = 0x80, c &= 0x1f;
    else if ((c & 0xf0) == 0xe0)
        len = 3, min = 0x800, c &= 0x0f;
    else if ((c & 0xf8) == 0xf0)
        len = 4, min = 0x10000, c &= 0x07;
    else
        return 0;
    if ((size_t)len > n)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    return len;
}

bool diag_check_utf8(Diag *d)
{
    const unsigned char *s = (const unsigned char *)d->src;
    int line = 1, col = 1;
    for (size_t i = 0; i < d->len;) {
        int n = utf8_len(s + i, d->len - i);
        if (n == 0) {
            Loc loc = {line, col, line, col + 1};
            if (s[i] == 0)
                diag_error(d, loc, "NUL byte in the model file");
            else
                diag_error(d, loc, "invalid UTF-8 byte 0x%02x", s[i]);
            diag_note(d, loc, "model files are UTF-8 text; is this the right file?");
            return false;
        }
        if (s[i] == '\n')
            line++, col = 1;
        else
            col += n;
        i += (size_t)n;
    }
    return true;
}
