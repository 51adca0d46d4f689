/*
 * nvrtc.cc — NVRTC for the emulated device, built as libnvrtc.so.13: a
 * program is compiled by the emulated nvcc (nvcc.py -fatbin), so the
 * "cubin" it gives is the shared object the emulated cudart loads, as it
 * loads nvcc.py's fatbins.  The source and its headers are written, under
 * their own names, to a private temporary directory; the compiler's
 * messages become the program's log, each "FILE:LINE:COL: error:" of the
 * host compiler rewritten as NVRTC writes it, "FILE(LINE): error:".
 *
 * NVRTC_ERROR_COMPILATION when the compiler fails, as NVRTC's; options
 * are passed on to nvcc.py, which ignores the architecture ones.  There is
 * no PTX: nvrtcGetPTX gives the same image, with a NUL after it (a
 * program asking for PTX for an architecture NVRTC does not know still
 * gets something the emulated device loads).
 *
 * Environment: NETC_EMU_NVCC, the command that runs nvcc.py (default:
 * "python3 NVCC_PY", NVCC_PY the path it was built with).
 */
#include <cuda.h> /* CUDA_VERSION */
#include <nvrtc.h>

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#ifndef NETC_EMU_NVCC_PY
#define NETC_EMU_NVCC_PY "nvcc.py"
#endif

extern char **environ;

struct _nvrtcProgram {
    std::string name, src;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string log, image;
};

namespace {

/* The architectures it "compiles for": the emulated device is an sm_90. */
const int ARCHS[] = {75, 80, 86, 89, 90};

bool write_file(const std::string &path, const std::string &text)
{
    std::ofstream f(path, std::ios::binary);
    f << text;
    return bool(f.flush());
}

bool read_file(const std::string &path, std::string *out)
{
    std::ifstream f(path, std::ios::binary);
    if (!f)
        return false;
    std::ostringstream s;
    s << f.rdbuf();
    *out = s.str();
    return true;
}

/* Runs argv with its stdout and stderr in the file log; its exit status,
 * or -1. */
int run(const std::vector<std::string> &args, const std::string &log)
{
    std::vector<char *> argv;
    for (const std::string &a : args)
        argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The host compiler's "DIR/FILE:LINE:COL: error: ..." as NVRTC's
 * "FILE(LINE): error: ...". */
std::string nvrtc_style(const std::string &log, const std::string &dir)
{
    std::string out;
    std::istringstream in(log);
    std::string line;
    static const std::regex diag(R"(^([^:\s]+):(\d+):\d+: (error|warning|fatal error): (.*)$)");
    while (std::getline(in, line)) {
        if (line.compare(0, dir.size() + 1, dir + "/") == 0)
            line = line.substr(dir.size() + 1);
        std::smatch m;
        if (std::regex_match(line, m, diag))
            line = m[1].str() + "(" + m[2].str() + "): " +
                   (m[3] == "fatal error" ? "catastrophic error" : m[3].str()) + ": " + m[4].str();
        out += line + "\n";
    }
    return out;
}

/* A name safe to write in the directory: its last component. */
std::string base_name(const std::string &name)
{
    size_t slash = name.rfind('/');
    return slash == std::string::npos ? name : name.substr(slash + 1);
}

nvrtcResult compile(nvrtcProgram p, int nopts, const char *const *opts)
{
    char dir[] = "/tmp/netc-emu-nvrtc.XXXXXX";
    if (!mkdtemp(dir))
        return NVRTC_ERROR_OUT_OF_MEMORY;
    std::string d = dir;
    std::string src = base_name(p->name.empty() ? "default_program" : p->name);
    if (src.size() < 3 || src.compare(src.size() - 3, 3, ".cu") != 0)
        src += ".cu"; /* nvcc.py compiles .cu files */
    std::vector<std::string> written = {d + "/" + src};
    bool ok = write_file(written[0], p->src);
    for (const auto &h : p->headers) {
        written.push_back(d + "/" + base_name(h.first));
        ok = ok && write_file(written.back(), h.second);
    }
    std::vector<std::string> args;
    const char *nvcc = getenv("NETC_EMU_NVCC");
    std::istringstream words(nvcc && *nvcc ? nvcc : "python3 " NETC_EMU_NVCC_PY);
    for (std::string w; words >> w;)
        args.push_back(w);
    args.push_back("-fatbin");
    args.push_back("-I" + d);
    for (int i = 0; i < nopts; i++)
        args.push_back(opts[i]);
    args.push_back(written[0]);
    args.push_back("-o");
    args.push_back(d + "/image.so");
    std::string log_path = d + "/log";
    int rc = ok ? run(args, log_path) : -1;
    std::string log;
    read_file(log_path, &log);
    p->log = nvrtc_style(log, d);
    nvrtcResult r = NVRTC_SUCCESS;
    if (rc != 0 || !read_file(d + "/image.so", &p->image)) {
        p->image.clear();
        if (p->log.empty())
            p->log = ok ? "the emulated nvcc could not be run\n" : "cannot write the source\n";
        r = NVRTC_ERROR_COMPILATION;
    }
    for (const std::string &f : {log_path, d + "/image.so"})
        unlink(f.c_str());
    for (const std::string &f : written)
        unlink(f.c_str());
    rmdir(dir);
    return r;
}

nvrtcResult size_of(nvrtcProgram p, const std::string &s, size_t *n)
{
    if (!p || !n)
        return NVRTC_ERROR_INVALID_INPUT;
    *n = s.size() + 1;
    return NVRTC_SUCCESS;
}

nvrtcResult copy_of(nvrtcProgram p, const std::string &s, char *out)
{
    if (!p || !out)
        return NVRTC_ERROR_INVALID_INPUT;
    memcpy(out, s.data(), s.size());
    out[s.size()] = '\0';
    return NVRTC_SUCCESS;
}

} // namespace

extern "C" {

const char *nvrtcGetErrorString(nvrtcResult r)
{
    switch (r) {
    case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
    case NVRTC_ERROR_OUT_OF_MEMORY: return "NVRTC_ERROR_OUT_OF_MEMORY";
    case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    default: return "NVRTC_ERROR unknown";
    }
}

nvrtcResult nvrtcVersion(int *major, int *minor)
{
    if (!major || !minor)
        return NVRTC_ERROR_INVALID_INPUT;
    *major = CUDA_VERSION / 1000;
    *minor = CUDA_VERSION % 1000 / 10;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetNumSupportedArchs(int *n)
{
    if (!n)
        return NVRTC_ERROR_INVALID_INPUT;
    *n = int(sizeof ARCHS / sizeof ARCHS[0]);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetSupportedArchs(int *archs)
{
    if (!archs)
        return NVRTC_ERROR_INVALID_INPUT;
    memcpy(archs, ARCHS, sizeof ARCHS);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int nheaders, const char *const *headers,
                               const char *const *include_names)
{
    if (!prog || !src || nheaders < 0 || (nheaders > 0 && (!headers || !include_names)))
        return NVRTC_ERROR_INVALID_INPUT;
    nvrtcProgram p = new _nvrtcProgram;
    p->name = name ? name : "default_program";
    p->src = src;
    for (int i = 0; i < nheaders; i++) {
        if (!headers[i] || !include_names[i]) {
            delete p;
            return NVRTC_ERROR_INVALID_INPUT;
        }
        p->headers.emplace_back(include_names[i], headers[i]);
    }
    *prog = p;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
{
    if (!prog || !*prog)
        return NVRTC_ERROR_INVALID_PROGRAM;
    delete *prog;
    *prog = nullptr;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int nopts, const char *const *opts)
{
    if (!prog)
        return NVRTC_ERROR_INVALID_PROGRAM;
    if (nopts < 0 || (nopts > 0 && !opts))
        return NVRTC_ERROR_INVALID_INPUT;
    return compile(prog, nopts, opts);
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n) { return size_of(p, p ? p->log : "", n); }
nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char *out) { return copy_of(p, p ? p->log : "", out); }

/* The image; as "PTX", with a NUL after it. */
static nvrtcResult image_of(nvrtcProgram p, const void *arg)
{
    if (!p || !arg)
        return NVRTC_ERROR_INVALID_INPUT;
    return p->image.empty() ? NVRTC_ERROR_INVALID_PROGRAM : NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *n)
{
    nvrtcResult r = image_of(p, n);
    if (r == NVRTC_SUCCESS)
        *n = p->image.size();
    return r;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *out)
{
    nvrtcResult r = image_of(p, out);
    if (r == NVRTC_SUCCESS)
        memcpy(out, p->image.data(), p->image.size());
    return r;
}

nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t *n)
{
    nvrtcResult r = image_of(p, n);
    return r == NVRTC_SUCCESS ? size_of(p, p->image, n) : r;
}

nvrtcResult nvrtcGetPTX(nvrtcProgram p, char *out)
{
    nvrtcResult r = image_of(p, out);
    return r == NVRTC_SUCCESS ? copy_of(p, p->image, out) : r;
}

} // extern "C"
