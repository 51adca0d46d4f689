# tests/install.sh — netc as other builds meet it: `make install DESTDIR=…`
# stages the whole tree (netc, the runtime, netrt.pc, netc.m4, the CMake
# package, the man page), the staged netc finds the staged runtime by
# itself, and the three projects under examples/ — plain make, Autotools,
# CMake — build against the stage and train their models.  A project whose
# tool is missing (cmake, autoreconf) is skipped with a note.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

command -v make > /dev/null 2>&1 || skip "no make"
STAGE=$WORK/stage
make -s -C "$BUILD" install DESTDIR="$STAGE" > "$WORK/install.log" 2>&1
check "[ $? -eq 0 ]" "make install DESTDIR: $(tail -5 "$WORK/install.log")"
prefix=$(sed -n "s/^prefix = //p" "$BUILD/Makefile")
P=$STAGE$prefix
for f in bin/netc include/netc/netrt.h include/netc/philox.h include/netc/lowp.h lib/libnetrt.a \
    lib/pkgconfig/netrt.pc share/aclocal/netc.m4 lib/cmake/netc/netcConfig.cmake \
    lib/cmake/netc/netcConfigVersion.cmake share/man/man1/netc.1 share/doc/netc/README.md; do
    check "[ -f '$P/$f' ]" "not installed: $prefix/$f"
done
if command -v man > /dev/null 2>&1; then
    check "MANWIDTH=80 man -l '$P/share/man/man1/netc.1' 2> /dev/null | grep -q 'emit=KIND'" \
        "netc.1 does not render"
fi
export PATH="$P/bin:$PATH" PKG_CONFIG_PATH="$P/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$STAGE"
unset NETC_INCLUDE_DIR NETC_LIB_DIR NETC_CUDA
check "[ \"\$(command -v netc)\" = '$P/bin/netc' ]" "the staged netc is not first on PATH"

# netc --help and the man page point at the README where it is installed
check "netc --help | grep -qF '$prefix/share/doc/netc/README.md'" \
    "netc --help does not say where README.md is: $(netc --help | tail -n 2)"

# the man page's commands for a library, as written there: with --no-cuda
# and netrt, and (netc with CUDA) without it and netrt-cuda
if command -v pkg-config > /dev/null 2>&1; then
    mkdir -p "$WORK/man"
    printf '#include "model.h"\nint main(void) { model *m = model_create("cpu", 0, NULL); model_destroy(m); return !m; }\n' \
        > "$WORK/man/prog.c"
    (cd "$WORK/man" && netc --emit=lib --no-cuda "$SRC/models/digits_mlp.net" -o model &&
        cc prog.c model.c $(pkg-config --cflags --libs netrt) && ./a.out) > "$WORK/man.log" 2>&1
    check "[ $? -eq 0 ]" "netc.1's netrt command: $(tail -n 5 "$WORK/man.log")"
    if [ "${NETC_HAVE_CUDA:-no}" = yes ]; then
        (cd "$WORK/man" && rm -f a.out && netc --emit=lib "$SRC/models/digits_mlp.net" -o model &&
            cc prog.c model.c $(pkg-config --cflags --libs netrt-cuda) && ./a.out) > "$WORK/man.log" 2>&1
        check "[ $? -eq 0 ]" "netc.1's netrt-cuda command: $(tail -n 5 "$WORK/man.log")"
    fi
fi

# plain make: netc -MD builds the program, which learns XOR
cp -r "$SRC/examples/make" "$WORK/make"
make -C "$WORK/make" check > "$WORK/make.log" 2>&1
check "[ $? -eq 0 ] && grep -q 'xor: learned' '$WORK/make.log'" "examples/make: $(tail -5 "$WORK/make.log")"
check "[ -s '$WORK/make/xor.d' ] && make -q -C '$WORK/make' xor" "examples/make: not up to date after a build"

# Autotools: NETC_PROG_NETC from the staged netc.m4, PKG_CHECK_MODULES
if command -v autoreconf > /dev/null 2>&1 && command -v pkg-config > /dev/null 2>&1; then
    cp -r "$SRC/examples/autotools" "$WORK/at"
    (cd "$WORK/at" && ACLOCAL_PATH="$P/share/aclocal" autoreconf -fi && ./configure &&
        make && ./classify) > "$WORK/at.log" 2>&1
    check "[ $? -eq 0 ] && grep -q 'new points right' '$WORK/at.log'" \
        "examples/autotools: $(tail -5 "$WORK/at.log")"
    check "grep -q 'checking whether .*netc is netc 0.1 or newer... yes' '$WORK/at.log'" \
        "examples/autotools: NETC_PROG_NETC did not find netc"
else
    echo "note: no autoreconf or pkg-config; examples/autotools not built"
fi

# CMake: find_package(netc), netc_add_model
if command -v cmake > /dev/null 2>&1; then
    (cmake -S "$SRC/examples/cmake" -B "$WORK/cm" -DCMAKE_PREFIX_PATH="$P" &&
        cmake --build "$WORK/cm" && cd "$WORK/cm" && ./fit && ./fit_cpu) > "$WORK/cm.log" 2>&1
    check "[ $? -eq 0 ] && [ \$(grep -c 'the reloaded copy agrees' '$WORK/cm.log') -eq 2 ]" \
        "examples/cmake (one model in two targets): $(tail -5 "$WORK/cm.log")"
    # with CUDA, the model got the GPU backend, built without nvcc
    if [ "${NETC_HAVE_CUDA:-no}" = yes ]; then
        check "grep -q 'kernel_source' '$WORK/cm/netc_fit/sine.c' && ! grep -q kernel_source '$WORK/cm/netc_fit_cpu/sine.c' && ! grep -q nvcc '$WORK/cm/CMakeCache.txt'" \
            "examples/cmake: sine.c has no CUDA kernels, or CMake found nvcc"
    fi
    # a version newer than this netc is refused
    mkdir -p "$WORK/cm2"
    printf 'cmake_minimum_required(VERSION 3.16)\nproject(v C)\nfind_package(netc 9.0 REQUIRED)\n' \
        > "$WORK/cm2/CMakeLists.txt"
    cmake -S "$WORK/cm2" -B "$WORK/cm2/b" -DCMAKE_PREFIX_PATH="$P" > "$WORK/cm2.log" 2>&1
    check "[ $? -ne 0 ] && grep -q 'version: 0.1.0' '$WORK/cm2.log'" "find_package(netc 9.0) did not fail"
else
    echo "note: no cmake; examples/cmake not built"
fi

make -s -C "$BUILD" uninstall DESTDIR="$STAGE" > /dev/null 2>&1
check "[ -z \"\$(find '$STAGE' -type f)\" ]" "make uninstall left: $(find "$STAGE" -type f | head -3)"
finish
