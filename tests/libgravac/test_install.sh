#!/usr/bin/env bash
# test_install.sh BUILD_DIR: gravac installed and packaged as a user gets it.
#  - cmake --install into a temporary prefix: the programs, libgravac, gravac.h, gravac.pc, the
#    Python package, the examples;
#  - a C program built with `pkg-config --cflags --libs gravac` against the installed copy runs;
#  - the installed Python package loads the installed library (not the build tree's);
#  - cpack -G DEB builds gravac_<version>_<arch>.deb holding the same, with its dependencies.
set -euo pipefail
build=$(cd "$1" && pwd)
tmp=$(mktemp -d /tmp/gv_test_install_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fails=$((fails + 1)); fi; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
libdir=$(dirname "$(find "$prefix" -name 'libgravac.so.0' | head -1)")
for f in bin/gravac-server bin/gravac-worker bin/gravac-launch bin/gravac-bench include/gravac.h \
         lib/python3/dist-packages/gravac/__init__.py lib/python3/dist-packages/gravac/torch.py \
         lib/python3/dist-packages/gravac/_lib.py lib/python3/dist-packages/gravac/_install.py \
         share/doc/gravac/examples/fmnist_resnet18.py; do
    check "[ -e '$prefix/$f' ]" "installed $f"
done
check "[ -n '$libdir' ] && [ -e '$libdir/libgravac.so' ] && [ -e '$libdir/pkgconfig/gravac.pc' ]" \
      "installed libgravac.so, .so.0 and gravac.pc in ${libdir#$prefix/}"
check "[ \$(nm -D --defined-only '$libdir/libgravac.so.0' | grep -c ' T ') -eq 16 ]" \
      "libgravac exports exactly gravac.h's 16 functions"

cat > "$tmp/prog.c" <<'C'
#include <gravac.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    struct gravac *g = NULL;
    const char *argv[] = {"prog", "--no-such-option"};
    int st = gravac_create(2, argv, &g);
    printf("api %d, create: %s: %s\n", gravac_api_version(), gravac_status_str(st),
           gravac_last_error());
    return gravac_api_version() == GRAVAC_API_VERSION && st == GRAVAC_ERR_INVAL ? 0 : 1;
}
C
export PKG_CONFIG_PATH=$libdir/pkgconfig
# a sanitized library needs a program built with the same runtime (GV_TEST_CFLAGS)
check "cc -Wall -Werror ${GV_TEST_CFLAGS:-} \$(pkg-config --cflags gravac) '$tmp/prog.c' \
       -o '$tmp/prog' \$(pkg-config --libs gravac) 2> '$tmp/cc.log'" \
      "a C program builds with pkg-config gravac"
check "LD_LIBRARY_PATH='$libdir' '$tmp/prog' > '$tmp/prog.log' 2>&1 && \
       grep -q 'unknown option' '$tmp/prog.log'" "it runs against the installed library"

if [ "${GV_TEST_SANITIZED:-0}" != 1 ]; then
    py=$(cd / && env -u GRAVAC_LIBRARY PYTHONPATH="$prefix/lib/python3/dist-packages" \
         /usr/bin/python3 -c 'import gravac; l = gravac.lib(); print(l.gv_path)' 2>&1 || true)
    check "[ '$py' = '$libdir/libgravac.so.0' ]" "the installed Python package loads it ($py)"
fi

(cd "$tmp" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/pkg" > "$tmp/cpack.log" 2>&1) \
    || { cat "$tmp/cpack.log"; }
deb=$(ls "$tmp"/pkg/gravac_*.deb 2> /dev/null | head -1)
check "[ -n '$deb' ]" "cpack -G DEB built $(basename "${deb:-none}")"
if [ -n "$deb" ]; then
    dpkg-deb -c "$deb" > "$tmp/deb.txt"
    for f in ./usr/bin/gravac-launch ./usr/include/gravac.h gravac/torch.py libgravac.so.0 \
             pkgconfig/gravac.pc; do
        check "grep -q '$f' '$tmp/deb.txt'" "the package holds $f"
    done
    dep=$(dpkg-deb -f "$deb" Depends)
    check "echo '$dep' | grep -q libprotobuf-c && echo '$dep' | grep -q python3" \
          "its dependencies: $dep"
fi
[ $fails -eq 0 ] && echo "install: OK" || { echo "install: $fails FAILED"; exit 1; }
