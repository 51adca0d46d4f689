/*
 * check.h — the unit tests' harness, included by each test_*.c (after
 * netrt.h):
 *   CHECK(cond, fmt, ...)   counts a check; when cond is false, prints
 *                           "FILE:LINE: FAIL: message" to stderr
 *   check(cond, line, fmt, ...)  the same for a helper that reports its
 *                           caller's line
 *   check_summary(name)     prints "NAME: N checks, N failed" to stdout
 *                           and returns the exit status (0 or 1)
 */
#ifndef NETC_TESTS_CHECK_H
#define NETC_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int checks, failures;

#define CHECK(cond, ...) check_at((cond) != 0, __FILE__, __LINE__, __VA_ARGS__)
#define check(cond, line, ...) check_at((cond) != 0, __FILE__, (line), __VA_ARGS__)

static void check_at(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void check_at(int ok, const char *file, int line, const char *fmt, ...)
{
    checks++;
    if (ok)
        return;
    failures++;
    const char *base = strrchr(file, '/');
    fprintf(stderr, "%s:%d: FAIL: ", base ? base + 1 : file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int check_summary(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, checks, failures);
    return failures ? 1 : 0;
}

#endif
