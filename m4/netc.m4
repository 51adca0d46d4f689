# netc.m4 — netc in a project built with Autotools (installed to
# $(datadir)/aclocal by netc's `make install`).
#
# NETC_PROG_NETC([MIN-VERSION], [ACTION-IF-FOUND], [ACTION-IF-NOT-FOUND])
#
# Looks for netc on PATH (or takes the NETC variable the user gives),
# checks that `netc --version` is MIN-VERSION or newer, and substitutes
# NETC.  Without ACTION-IF-NOT-FOUND, a missing or older netc is an error.
# The runtime's flags come from pkg-config: PKG_CHECK_MODULES([NETRT],
# [netrt]).  A suffix rule then turns models into C libraries:
#
#   SUFFIXES = .net
#   .net.c:
#           $(NETC) --emit=lib --no-cuda $< -o $*
#
# serial 1

AC_DEFUN([NETC_PROG_NETC],
[AC_ARG_VAR([NETC], [netc, the model compiler])dnl
AC_PATH_PROG([NETC], [netc])
netc_min=m4_default([$1], [0])
netc_ok=no
AS_IF([test -n "$NETC"], [
  AC_MSG_CHECKING([whether $NETC is netc $netc_min or newer])
  netc_version=`"$NETC" --version 2>/dev/null | sed -n 's/^netc //p'`
  AS_IF([test -n "$netc_version"],
    [AS_VERSION_COMPARE([$netc_version], [$netc_min], [netc_ok=no], [netc_ok=yes], [netc_ok=yes])])
  AC_MSG_RESULT([$netc_ok (${netc_version:-not netc})])
])
AS_IF([test "x$netc_ok" = xyes], [$2],
  [m4_default([$3],
    [AC_MSG_ERROR([netc $netc_min or newer is needed: install it, or give its path in NETC=])])])
])
