#!/usr/bin/env python3
"""nvcc for netc's emulated CUDA device: compiles CUDA C++ with the host
C++ compiler.  Understands what netc's build and tests ask of nvcc:

  nvcc [flags] -fatbin -o OUT.fatbin SRC.cu   the "fatbin": a shared object
  nvcc [flags] -c -o OUT.o SRC.cu              an object with its kernels
  nvcc [flags] SRC.cu [objs, -l, -L] -o EXE    compiled and linked against
                                               the emulated libcudart

A source is preprocessed with tests/emu/emu.h included first; each
`kernel<<<grid, block, shared, stream>>>(args)` becomes a call of
netc_emu::launch, and every __global__ function defined in the source is
registered (netc_emu::Registrar) so that cudaGetKernel, cudaLibraryGetKernel
and cudaLaunchKernel find it.  Architecture flags (-arch, -gencode, -code)
are accepted and ignored: there is one emulated architecture.

Environment: CXX (default c++), NETC_EMU_CXXFLAGS (default -O2 -g0),
NETC_EMU_IMAGE_DIR (where a copy of each fatbin is kept, for
cudaLibraryLoadData to load without writing a file).
"""
import os
import re
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
# the emulated libraries: beside this script, or in NETC_EMU_LIBDIR
LIBDIR = os.environ.get("NETC_EMU_LIBDIR", HERE)


def die(msg):
    sys.stderr.write("nvcc (netc emulated): error: %s\n" % msg)
    sys.exit(1)


def parse(argv):
    o = {"out": None, "mode": "link", "srcs": [], "objs": [], "cpp": [], "cxx": [], "ld": []}
    it = iter(argv)
    for a in it:
        if a in ("-o", "--output-file"):
            o["out"] = next(it)
        elif a in ("-fatbin", "--fatbin", "-cubin", "--cubin"):
            o["mode"] = "fatbin"
        elif a in ("-c", "--compile"):
            o["mode"] = "compile"
        elif a in ("-ptx", "--ptx"):
            die("PTX is not emulated (use -fatbin)")
        elif a in ("-Xcompiler", "--compiler-options"):
            o["cxx"] += [w for w in next(it).split(",") if w]
        elif a.startswith("-Xcompiler="):
            o["cxx"] += [w for w in a.split("=", 1)[1].split(",") if w]
        elif a in ("-I", "-D", "-U", "-include"):
            o["cpp"] += [a, next(it)]
        elif a.startswith(("-I", "-D", "-U")):
            o["cpp"].append(a)
        elif a in ("-L", "-l"):
            o["ld"] += [a, next(it)]
        elif a.startswith(("-L", "-l", "-Wl,")):
            o["ld"].append(a)
        elif a.startswith(("-std=", "--std=")):
            o["cxx"].append("-std=" + a.split("=", 1)[1])
        elif a in ("-arch", "-gencode", "-code", "--gpu-architecture", "-ccbin", "--ccbin",
                   "-maxrregcount", "-Xptxas", "-Xnvlink", "-rdc", "--threads", "-t"):
            next(it)
        elif a.startswith(("-arch=", "-gencode=", "--generate-code=", "-code=",
                           "--gpu-architecture=", "-lineinfo", "-G", "-O", "--use_fast_math",
                           "-use_fast_math", "-Xptxas=", "-ccbin=", "--expt-", "-w",
                           "--resource-usage", "-Wno-deprecated-gpu-targets", "-g",
                           "--threads=")):
            if a.startswith("-O"):
                o["cxx"].append(a)
        elif a.endswith(".cu"):
            o["srcs"].append(a)
        elif a.endswith((".o", ".a", ".so", ".c", ".cc", ".cpp")):
            o["objs"].append(a)
        else:
            die("option %s is not understood by the emulated nvcc" % a)
    return o


LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:\s*<[^<>;{}]*>)?)\s*<<<")
KERNEL = re.compile(
    r"__attribute__\(\(netc_global\)\)\s*void\s*"
    r"(?:\[\[netc::launch_bounds\((.*?)\)\]\]\s*)?([A-Za-z_]\w*)\s*\(", re.S)


def translate(text):
    """Launches rewritten, registrations appended."""
    out, pos = [], 0
    for m in LAUNCH.finditer(text):
        end = text.find(">>>", m.end())
        if end < 0:
            die("a <<< without >>>")
        name = m.group(1)
        out.append(text[pos:m.start()])
        out.append("netc_emu::launch(%s, \"%s\", %s)" % (name, re.sub(r"\s+", "", name),
                                                           text[m.end():end]))
        pos = end + 3
    out.append(text[pos:])
    text = "".join(out)
    regs = []
    for m in KERNEL.finditer(text):
        # a template kernel is registered where it is launched, not here
        before = text[max(0, m.start() - 200):m.start()]
        if re.search(r"template\s*<[^;{}]*>\s*(static\s+)?$", before):
            continue
        bound = (m.group(1) or "0").split(",")[0]
        name = m.group(2)
        if name not in [r[0] for r in regs]:
            regs.append((name, bound))
    text += "\n/* netc emulated nvcc: the kernels of this source */\n"
    text += "extern \"C\" __attribute__((weak, visibility(\"default\"))) const int netc_emu_image = 1;\n"
    for name, bound in regs:
        text += ("static netc_emu::Registrar<decltype(&%s)> netc_emu_reg_%s(&%s, \"%s\", %s);\n"
                 % (name, name, name, name, bound))
    return text


def stage(fatbin):
    """A copy of the image in NETC_EMU_IMAGE_DIR, named SIZE-CRC32.so, for
    the emulated cudaLibraryLoadData to dlopen without writing a file."""
    d = os.environ.get("NETC_EMU_IMAGE_DIR")
    if not d:
        return 0
    with open(fatbin, "rb") as f:
        image = f.read()
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d)
    with os.fdopen(fd, "wb") as f:
        f.write(image)
    os.replace(tmp, os.path.join(d, "%d-%08x.so" % (len(image), zlib.crc32(image))))
    return 0


def main(argv):
    o = parse(argv)
    if not o["srcs"]:
        die("no .cu source given")
    if not o["out"]:
        die("no -o given")
    cxx = os.environ.get("CXX", "c++").split()
    flags = os.environ.get("NETC_EMU_CXXFLAGS", "-O2 -g0").split()
    std = [f for f in o["cxx"] if f.startswith("-std=")] or ["-std=c++17"]
    cxxflags = flags + [f for f in o["cxx"] if not f.startswith(("-std=", "-W"))] + std + [
        "-fPIC", "-Wno-attributes", "-fno-strict-aliasing"]
    cuda_inc = os.environ.get("NETC_EMU_CUDA_INCLUDE", "/usr/local/cuda/include")
    with tempfile.TemporaryDirectory(prefix="netc-emu-nvcc.") as tmp:
        objs = []
        for i, src in enumerate(o["srcs"]):
            ii = os.path.join(tmp, "%d.ii" % i)
            cmd = cxx + std + ["-E", "-x", "c++", "-include", os.path.join(HERE, "emu.h"),
                               "-I" + HERE, "-I" + cuda_inc] + o["cpp"] + [src, "-o", ii]
            if subprocess.call(cmd) != 0:
                return 1
            with open(ii) as f:
                text = translate(f.read())
            cc = os.path.join(tmp, "%d.cc" % i)
            with open(cc, "w") as f:
                f.write(text)
            obj = o["out"] if o["mode"] == "compile" else os.path.join(tmp, "%d.o" % i)
            cmd = cxx + cxxflags + ["-I" + HERE, "-I" + cuda_inc, "-c", "-x", "c++", cc, "-o", obj]
            if subprocess.call(cmd) != 0:
                return 1
            objs.append(obj)
        if o["mode"] == "compile":
            return 0
        rpath = ["-L" + LIBDIR, "-Wl,-rpath," + LIBDIR]
        if o["mode"] == "fatbin":
            cmd = cxx + ["-shared", "-o", o["out"]] + objs + rpath + ["-lcudart"]
            return subprocess.call(cmd) or stage(o["out"])
        cmd = cxx + ["-o", o["out"]] + objs + o["objs"] + rpath + o["ld"] + [
            "-lcudart", "-lcublas", "-ldl", "-lpthread"]
        return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
