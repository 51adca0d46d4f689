/*
 * atomic.c — a file written whole or not at all, the one way netc and
 * the programs it makes write their outputs (netc's sources, programs and
 * dependency files; weights, checkpoints, predictions; the JIT's cache).
 *
 * The data goes to a temporary file beside the destination,
 * PATH.tmp.PID.XXXXXX (mkstemp's letters), made with the mode a plain
 * fopen would give it; the file is flushed, synced and closed, and only
 * then renamed over PATH, the directory synced after.  A reader sees the
 * old file or the new one, never a part; a process killed half way leaves
 * its temporary, which the next write of PATH removes once no process of
 * that pid is alive (the pid in the name says whose it is).
 *
 * Compiled into libnetrt and into netc itself (the compiler links no
 * runtime library).
 */
#include "netrt.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether name is base.tmp.PID.XXXXXX with PID a process gone from this
 * machine.  A process in its place, even an unrelated one that was given
 * its pid, keeps the file. */
static int stale_temp(const char *name, const char *base)
{
    size_t n = strlen(base);
    if (strncmp(name, base, n) || strncmp(name + n, ".tmp.", 5))
        return 0;
    const char *s = name + n + 5, *p = s;
    while (isdigit((unsigned char)*p))
        p++;
    if (p == s || p - s > 9 || *p != '.' || strlen(p + 1) != 6)
        return 0;
    for (const char *x = p + 1; *x; x++)
        if (!isalnum((unsigned char)*x))
            return 0;
    const long pid = strtol(s, NULL, 10);
    return pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* path's directory ("." for a bare name), malloc'd; NULL: out of memory. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return !slash ? strdup(".") : strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

static void remove_stale_temps(const char *path)
{
    char *dir = dir_of(path);
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    DIR *d = dir && *base ? opendir(dir) : NULL;
    if (d) {
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            if (stale_temp(e->d_name, base))
                (void)unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    free(dir);
}

static void sync_dir_of(const char *path)
{
    char *dir = dir_of(path);
    int fd = dir ? open(dir, O_RDONLY) : -1;
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

int nrt_atomic_target(const char *path, nrt_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode))
        return 0;
    if (S_ISDIR(st.st_mode))
        return nrt_errorf(err, "%s: cannot write: %s", path, strerror(EISDIR));
    return nrt_errorf(err, "%s: not a regular file; the file written replaces what is there, "
                      "so give the path of a file", path);
}

int nrt_atomic_open(nrt_atomic *w, const char *path, nrt_error *err)
{
    *w = (nrt_atomic){.path = path};
    if (!path || !*path)
        return nrt_errorf(err, "no file name to write to");
    if (nrt_atomic_target(path, err))
        return -1;
    remove_stale_temps(path);
    size_t len = strlen(path) + 32;
    if (!(w->tmp = malloc(len)))
        return nrt_errorf(err, "%s: out of memory", path);
    snprintf(w->tmp, len, "%s.tmp.%ld.XXXXXX", path, (long)getpid());
    int fd = mkstemp(w->tmp);
    if (fd < 0) {
        nrt_errorf(err, "%s: cannot write: %s", path, strerror(errno));
        free(w->tmp);
        w->tmp = NULL;
        return -1;
    }
    /* mkstemp makes the file 0600; give it a plain fopen's mode (the umask
     * can only be read by setting it, so set it back) */
    const mode_t mask = umask(022);
    umask(mask);
    (void)fchmod(fd, (mode_t)0666 & ~mask);
    if (!(w->f = fdopen(fd, "wb"))) {
        nrt_errorf(err, "%s: cannot write: %s", path, strerror(errno));
        close(fd);
        nrt_atomic_abort(w);
        return -1;
    }
    return 0;
}

int nrt_atomic_close(nrt_atomic *w, nrt_error *err)
{
    if (!w->f)
        return 0;
    errno = 0;
    int e = ferror(w->f) || fflush(w->f) != 0 ? (errno ? errno : EIO) : 0;
    if (!e && fsync(fileno(w->f)) != 0)
        e = errno;
    if (fclose(w->f) != 0 && !e)
        e = errno ? errno : EIO;
    w->f = NULL;
    if (e) {
        nrt_errorf(err, "%s: cannot write: %s", w->path, strerror(e));
        nrt_atomic_abort(w);
        return -1;
    }
    return 0;
}

int nrt_atomic_commit(nrt_atomic *w, nrt_error *err)
{
    if (nrt_atomic_close(w, err))
        return -1;
    if (!w->tmp)
        return nrt_errorf(err, "%s: cannot write: no file was made", w->path);
    if (rename(w->tmp, w->path) != 0) {
        nrt_errorf(err, "%s: cannot write: %s", w->path, strerror(errno));
        nrt_atomic_abort(w);
        return -1;
    }
    free(w->tmp);
    w->tmp = NULL;
    sync_dir_of(w->path);
    return 0;
}

void nrt_atomic_abort(nrt_atomic *w)
{
    if (w->f)
        fclose(w->f);
    if (w->tmp)
        unlink(w->tmp);
    free(w->tmp);
    w->f = NULL;
    w->tmp = NULL;
}
