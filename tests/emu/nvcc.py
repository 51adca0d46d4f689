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

As ptxas does, it refuses a kernel whose static shared data exceeds 48 KiB
(check_shared): each source is compiled to assembly, where the __shared__
arrays each kernel refers to, itself or through the functions it calls, are
found and their sizes summed, before the assembly is assembled.

Environment: CXX (default c++), NETC_EMU_CXXFLAGS (default -O2 -g0
-march=native -ffp-contract=off: the host's own instruction set, FMA's
for fmaf among them, the emulator being built and run on one machine; a*b+c
two roundings still, never contracted behind the kernel's back),
NETC_EMU_IMAGE_DIR (where a copy of each fatbin is kept, for
cudaLibraryLoadData to load without writing a file), NETC_EMU_CACHE (a
folder where each source's object is kept, named by a hash of what makes
it: the translated source without its line markers, the compiler's flags
and version, the cpu's instruction sets, this script; a source compiled again, by another test of the
same run, is linked from there, and its compiler's messages repeated).
"""
import hashlib
import os
import re
import shutil
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
    """Launches rewritten, registrations appended; and the names of the
    kernels the text defines, templates included."""
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
    regs, kernels = [], set()
    for m in KERNEL.finditer(text):
        kernels.add(m.group(2))
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
    return text, kernels


# ------------------------------------------------ static shared data (ptxas)
#
# ptxas refuses a kernel whose static __shared__ data exceeds 48 KiB.  Here
# the host compiler's assembly of a source says the same: emu.h puts each
# __shared__ array in section netc_emu_shared and marks it `retain' (flag R;
# GCC drops the section of a template's static, not the mark, and
# shared_sections puts it back), `.size' gives its bytes, and a function's
# body (from its label to its `.size') names the arrays and the functions
# it uses.  A kernel's use is the sum
# over the arrays it names itself or through the functions it calls,
# inlined or not, each array once.

SHARED_MAX = 0xc000
SYMBOL = re.compile(r"[A-Za-z_.$][\w.$]*")
LABEL = re.compile(r"([A-Za-z_.$][\w.$]*):")
SECTION = re.compile(r'\.(?:section|pushsection)\s+("[^"]*"|[^,\s]+)\s*(?:,\s*"([^"]*)")?')
RETAINED = re.compile(r'\s*\.section\s+([^,\s]+)\s*,\s*"[^"]*R[^"]*"')
DIRECTIVE = re.compile(r'(\s*\.section\s+)([^,\s]+)(.*)')


class Assembly:
    """What check_shared needs of GNU assembly (GCC's or Clang's, x86-64):
    shared, the size of each __shared__ array; refs, for each function the
    symbols its body names, a label read as the function it is in."""

    def __init__(self, text):
        self.shared, self.refs = {}, {}
        self.sizes, self.where, self.owner, self.functions = {}, {}, {}, set()
        self.flags, self.section, self.previous, self.stack = {}, ("", ""), ("", ""), []
        self.open = []  # the functions whose body this line is in
        for line in text.splitlines():
            self.read(line.split("#", 1)[0].strip())
        for name, (section, flags) in self.where.items():
            if (section == "netc_emu_shared" or "R" in flags) and name in self.sizes:
                self.shared[name] = self.sizes[name]
        for f, used in self.refs.items():
            self.refs[f] = {self.owner.get(s, s) for s in used}

    def read(self, line):
        label = LABEL.match(line)
        words = [w.strip() for w in line[5:].split(",")]
        if self.switch(line):
            pass
        elif line.startswith(".type"):
            if len(words) == 2 and words[1] in ("@function", "%function"):
                self.functions.add(words[0])
        elif line.startswith(".size"):
            if words[0] in self.open:
                self.open.remove(words[0])
            elif len(words) == 2 and words[1].isdigit():
                self.sizes[words[0]] = int(words[1])
        elif label:
            name = label.group(1)
            self.where[name] = self.section
            if name in self.functions:
                self.open.append(name)
                self.refs.setdefault(name, set())
            elif self.open:
                self.owner[name] = self.open[-1]
        else:
            for f in self.open:
                self.refs[f] |= set(SYMBOL.findall(line))

    def switch(self, line):
        """Follows a directive that changes the section: (name, flags)."""
        m = SECTION.match(line)
        if m:
            name = m.group(1).strip('"')
            if m.group(2) is not None:
                self.flags[name] = m.group(2)
            if line.startswith(".push"):
                self.stack.append(self.section)
            new = (name, self.flags.get(name, ""))
        elif line == ".popsection":
            new = self.stack.pop() if self.stack else self.section
        elif line == ".previous":
            new = self.previous
        elif line in (".text", ".data", ".bss"):
            new = (line, "")
        else:
            return False
        self.section, self.previous = new, self.section
        return True

    def arrays(self, function):
        """The __shared__ arrays FUNCTION uses, itself or through calls."""
        seen, todo, found = {function}, [function], set()
        while todo:
            for s in self.refs[todo.pop()]:
                if s in self.shared:
                    found.add(s)
                elif s in self.refs and s not in seen:
                    seen.add(s)
                    todo.append(s)
        return found


def shared_sections(asm):
    """ASM with every section marked R (emu.h's __shared__ arrays) renamed
    netc_emu_shared, as data, not bss (ld would make two output sections,
    and __start_netc_emu_shared mark one): where GCC gives a template's
    statics a section of their own, and the device would not fill them."""
    renamed = {m.group(1) for m in map(RETAINED.match, asm.splitlines()) if m}
    renamed.discard("netc_emu_shared")
    if not renamed:
        return asm

    def line(text):
        m = DIRECTIVE.match(text)
        if not m or m.group(2) not in renamed:
            return text
        return m.group(1) + "netc_emu_shared" + m.group(3).replace("@nobits", "@progbits")
    return "\n".join(map(line, asm.split("\n")))


def demangle(names):
    """NAMES as c++filt writes them (as they are without c++filt)."""
    names = list(names)
    if not names or not shutil.which("c++filt"):
        return dict(zip(names, names))
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                         text=True).stdout.split("\n")
    return dict(zip(names, out)) if len(out) >= len(names) else dict(zip(names, names))


def unqualified(demangled):
    """A demangled function's name alone: kern for void ns::kern<1>(float*)."""
    d, depth = demangled.replace("(anonymous namespace)", "anon"), 0
    for i, c in enumerate(d):
        depth += {"<": 1, ">": -1}.get(c, 0)
        if c == "(" and depth == 0:
            d = d[:i]
            break
    while d.endswith(">"):  # template arguments
        depth = 0
        for i in range(len(d) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(d[i], 0)
            if depth == 0:
                d = d[:i]
                break
        else:
            break
    return re.split(r"::| ", d)[-1]


def check_shared(src, asm, kernels):
    """Dies, as ptxas does, if a kernel of SRC (its assembly ASM, its
    kernels' names KERNELS) uses more than 48 KiB of static shared data."""
    a = Assembly(asm)
    if not a.shared:
        return
    # a kernel's symbol: its name (extern "C") or a mangled name holding it
    mangled = [f for f in a.refs if f not in kernels and f.startswith("_Z") and
               any(re.search(r"(?<![0-9])%d%s" % (len(k), k), f) for k in kernels)]
    plain = demangle(mangled)
    errors = []
    for f in sorted(a.refs):
        if f not in kernels and unqualified(plain.get(f, f)) not in kernels:
            continue
        arrays = a.arrays(f)
        total = sum(a.shared[s] for s in arrays)
        if total > SHARED_MAX:
            errors.append((f, total, sorted(arrays, key=lambda s: (-a.shared[s], s))))
    if not errors:
        return
    names = demangle([f for f, _, _ in errors] + [s for _, _, arrays in errors for s in arrays])
    for f, total, arrays in errors:
        sys.stderr.write(
            "%s: error: entry function '%s' uses too much shared data (0x%x bytes, 0x%x max): "
            "%d bytes of static __shared__ arrays, more than the 48 KiB ptxas allows a kernel: %s\n"
            % (src, names[f], total, SHARED_MAX, total,
               ", ".join("%s (%d bytes)" % (names[s], a.shared[s]) for s in arrays)))
    sys.exit(1)


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


class Cache:
    """Objects already compiled, in NETC_EMU_CACHE (none if unset): KEY.o
    and KEY.err, the compiler's messages, each written whole and renamed
    into place, so that tests running at once share the folder."""

    LINE_MARKER = re.compile(r"^# \d+ .*\n", re.M)

    def __init__(self, cxx, cxxflags, text):
        self.dir = os.environ.get("NETC_EMU_CACHE")
        if not self.dir:
            return
        h = hashlib.sha256()
        version = subprocess.run(cxx + ["--version"], capture_output=True).stdout
        with open(os.path.abspath(__file__), "rb") as f:
            me = f.read()
        try:  # -march=native's: the cpu's instruction sets
            with open("/proc/cpuinfo", "rb") as f:
                cpu = next((l for l in f if l.startswith(b"flags")), b"")
        except OSError:
            cpu = b""
        for part in (version, me, cpu, "\0".join(cxx + cxxflags).encode(),
                     self.LINE_MARKER.sub("", text).encode()):
            h.update(hashlib.sha256(part).digest())
        self.key = os.path.join(self.dir, h.hexdigest())

    def get(self, obj):
        if not self.dir:
            return False
        try:
            with open(self.key + ".err", "rb") as f:
                err = f.read()
            shutil.copyfile(self.key + ".o", obj)
        except OSError:
            return False
        sys.stderr.buffer.write(err)
        return True

    def put(self, obj, err):
        if not self.dir:
            return
        os.makedirs(self.dir, exist_ok=True)
        for data, ext in ((None, ".o"), (err, ".err")):  # .err last: it marks the entry whole
            fd, tmp = tempfile.mkstemp(dir=self.dir)
            with os.fdopen(fd, "wb") as f:
                if data is None:
                    with open(obj, "rb") as src:
                        shutil.copyfileobj(src, f)
                else:
                    f.write(data)
            os.replace(tmp, self.key + ext)


def main(argv):
    o = parse(argv)
    if not o["srcs"]:
        die("no .cu source given")
    if not o["out"]:
        die("no -o given")
    cxx = os.environ.get("CXX", "c++").split()
    flags = os.environ.get("NETC_EMU_CXXFLAGS",
                           "-O2 -g0 -march=native -ffp-contract=off").split()
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
                text, kernels = translate(f.read())
            obj = o["out"] if o["mode"] == "compile" else os.path.join(tmp, "%d.o" % i)
            cache = Cache(cxx, cxxflags, text)
            if not cache.get(obj):
                cc = os.path.join(tmp, "%d.cc" % i)
                with open(cc, "w") as f:
                    f.write(text)
                asm = os.path.join(tmp, "%d.s" % i)
                cmd = cxx + cxxflags + ["-I" + HERE, "-I" + cuda_inc, "-S", "-x", "c++", cc,
                                        "-o", asm]
                p = subprocess.run(cmd, stderr=subprocess.PIPE)
                sys.stderr.buffer.write(p.stderr)
                if p.returncode != 0:
                    return 1
                with open(asm) as f:
                    text = shared_sections(f.read())
                check_shared(src, text, kernels)
                with open(asm, "w") as f:
                    f.write(text)
                cmd = cxx + [f for f in cxxflags if f.startswith(("-m", "-Wa,"))] + [
                    "-c", "-x", "assembler", asm, "-o", obj]
                if subprocess.call(cmd) != 0:
                    return 1
                cache.put(obj, p.stderr)
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
