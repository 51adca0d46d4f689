/*
 * error.c — the runtime's one error convention: a failing function formats
 * a one-line message into the caller's nrt_error and returns -1.
 */
#include "netrt.h"

#include <stdarg.h>
#include <stdio.h>

int nrt_errorf(nrt_error *e, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}
