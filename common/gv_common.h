/* gv_common.h: what every gravac module shares: status codes, logging, allocation (with a
 * failure-injection hook for tests), buffers that carry their memory kind, monotonic time.
 * Depends on nothing but libc. Deliberately holds no configuration and no I/O policy. */
#ifndef GV_COMMON_H
#define GV_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */

/* Every fallible function returns one of these; never a raw errno, never mixed signs. */
typedef enum {
    GV_OK = 0,
    GV_INPROGRESS = 1, /* accepted; completion is reported later by callback */
    GV_ERR_NOMEM = -1,
    GV_ERR_INVAL = -2, /* bad argument, option or value (caller's fault) */
    GV_ERR_IO = -3,    /* syscall or file error (logged with strerror where detected) */
    GV_ERR_PROTO = -4, /* malformed or oversized input from the network or a file */
    GV_ERR_AGAIN = -5, /* resource busy (send queue full): progress, then retry */
    GV_ERR_TIMEOUT = -6,
    GV_ERR_CLOSED = -7,      /* peer closed or connection already closed */
    GV_ERR_UNSUPPORTED = -8, /* not built in, or not offered by this backend */
    GV_ERR_NODEV = -9,       /* no GPU / no RDMA device */
    GV_ERR_CUDA = -10,
    GV_ERR_AUTH = -11,    /* authentication failed */
    GV_ERR_VERSION = -12, /* peer speaks another protocol or file version */
    GV_ERR_CKPT = -13,    /* a checkpoint could not be written everywhere (job not resumable) */
} gv_status_t;

/* Static string naming the status ("ok", "out of memory", ...). Unknown values give "unknown". */
const char *gv_status_str(gv_status_t status);

/* ---------------------------------------------------------------- logging */

enum gv_log_level {
    GV_LOG_ERROR = 0,
    GV_LOG_WARN = 1,
    GV_LOG_INFO = 2,
    GV_LOG_DEBUG = 3,
    GV_LOG_TRACE = 4,
};

/* Sink: receives one formatted line without the trailing newline. May be called from any
 * thread; the default sink writes "gravac[tag] L hh:mm:ss.mmm message\n" to stderr. */
typedef void (*gv_log_cb)(enum gv_log_level level, const char *line, void *arg);

/* Threshold from the environment variable GV_LOG_LEVEL (error|warn|info|debug|trace or 0-4),
 * default info. gv_log_set_level overrides it. */
void gv_log_set_level(enum gv_log_level level);
enum gv_log_level gv_log_get_level(void);
/* Parse "warn", "3", ...; GV_ERR_INVAL for anything else. */
gv_status_t gv_log_parse_level(const char *s, enum gv_log_level *level_p);
/* Replace the sink; NULL restores the default. */
void gv_log_set_cb(gv_log_cb cb, void *arg);
/* Short process tag printed in every default line, e.g. "server0"; copied (max 31 chars). */
void gv_log_set_tag(const char *tag);
void gv_log(enum gv_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gv_vlog(enum gv_log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

#define gv_log_enabled(lvl) ((lvl) <= gv_log_get_level())

/* Rate-limited logging, for every place where one error can repeat without bound (accept
 * failing with EMFILE, a peer sending garbage in a loop, a library's own error log). One
 * limiter per call site, or per family of call sites that share a budget; static, initialised
 * with GV_LOG_LIMIT_INIT(burst, interval_ms). At most `burst` lines pass per window of
 * `interval_ms` (a window opens with the first line that passes); the others are counted, and
 * the next line that passes ends with " (N similar messages suppressed in the last X.X s)".
 * The state is guarded by the logger's lock, so a limiter may be shared between threads.
 *
 *     static struct gv_log_limit accept_lim = GV_LOG_LIMIT_INIT(5, 1000);
 *     GV_LOG_LIMITED(GV_LOG_WARN, &accept_lim, "accept: %s", strerror(errno));
 *
 * A line below the log threshold neither passes nor counts. Times are nanoseconds on the
 * monotonic clock (gv_now_ns); the *_at forms take the time so tests can inject a fake clock. */
struct gv_log_limit {
    uint64_t interval_ns;   /* window length */
    uint32_t burst;         /* lines let through per window (0 acts as 1) */
    uint32_t passed;        /* lines let through in the current window */
    bool open;              /* a window has been opened */
    uint64_t window_ns;     /* when the current window opened */
    uint64_t suppressed;    /* lines dropped since the last one reported them */
    uint64_t suppressed_ns; /* start of the window in which the first of them fell */
};
#define GV_LOG_LIMIT_INIT(burst_, interval_ms_)                                                    \
    {                                                                                              \
        .interval_ns = (uint64_t)(interval_ms_)*1000000u, .burst = (burst_)                        \
    }

/* The decision alone: true when a line may pass at now_ns; then *suppressed_p and *span_ns_p
 * get how many lines were dropped before it and the time since the window the first of them
 * fell in (0 and 0 when none), and the count restarts. False counts one more dropped line. */
bool gv_log_limit_pass(struct gv_log_limit *lim, uint64_t now_ns, uint64_t *suppressed_p,
                       uint64_t *span_ns_p);
/* gv_log through the limiter at now_ns. */
void gv_log_limited_at(enum gv_log_level level, struct gv_log_limit *lim, uint64_t now_ns,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* gv_log with " (N similar messages suppressed in the last X.X s)" appended when n > 0. */
void gv_log_suppressed(enum gv_log_level level, uint64_t n, uint64_t span_ns, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The arguments are evaluated only for a line that passes: a dropped line costs a lock and a
 * clock read. */
#define GV_LOG_LIMITED(level, lim, ...)                                                            \
    do {                                                                                           \
        uint64_t gv_n_, gv_span_;                                                                  \
        if (gv_log_enabled(level) && gv_log_limit_pass((lim), gv_now_ns(), &gv_n_, &gv_span_))     \
            gv_log_suppressed((level), gv_n_, gv_span_, __VA_ARGS__);                              \
    } while (0)
/* For callers with a periodic tick: once the window holding dropped lines has ended and no
 * line came to carry their count, logs "<what>: N similar messages suppressed in the last
 * X.X s" (counted as a line of a new window). Otherwise does nothing. */
void gv_log_limit_flush_at(enum gv_log_level level, struct gv_log_limit *lim, uint64_t now_ns,
                           const char *what);
/* Data-path tracing compiles out of release builds. */
#ifdef NDEBUG
#define GV_TRACE(...) ((void)0)
#else
#define GV_TRACE(...)                                                                              \
    do {                                                                                           \
        if (gv_log_enabled(GV_LOG_TRACE))                                                          \
            gv_log(GV_LOG_TRACE, __VA_ARGS__);                                                     \
    } while (0)
#endif

/* ---------------------------------------------------------------- assertions */

/* Internal invariants only; never for data from the network, a file or argv. */
void gv_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define GV_ASSERT(e) ((e) ? (void)0 : gv_assert_fail(#e, __FILE__, __LINE__))

#define GV_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define GV_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GV_MAX(a, b) ((a) > (b) ? (a) : (b))
#define gv_container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* ---------------------------------------------------------------- allocation */

/* All project allocations go through these so that tests can fail the N-th one.
 * gv_aligned_alloc: align is a power of two >= sizeof(void *); free with gv_free. */
void *gv_malloc(size_t size);
void *gv_calloc(size_t nmemb, size_t size);
void *gv_realloc(void *ptr, size_t size);
void *gv_aligned_alloc(size_t align, size_t size);
char *gv_strdup(const char *s);
void gv_free(void *ptr);

/* Test hook: the n-th allocation from now fails (n >= 1), and every later one succeeds again.
 * n = 0 disarms. Returns how many allocations were made since the last call (to size a sweep).
 * Thread-safe (atomic counter). */
uint64_t gv_alloc_fail_nth(uint64_t n);

/* ---------------------------------------------------------------- buffers */

enum gv_mem {
    GV_MEM_HOST = 0,   /* pageable host memory, page-aligned */
    GV_MEM_PINNED = 1, /* page-locked host memory (cudaMallocHost) */
    GV_MEM_DEVICE = 2, /* GPU memory; never dereference on the host */
};
const char *gv_mem_str(enum gv_mem mem);

/* A pointer that knows what kind of memory it points to. mr is the transport's registration
 * handle (NULL when unregistered); the buffer does not own it. */
struct gv_buf {
    void *ptr;
    size_t len;
    enum gv_mem mem;
    void *mr;
};

/* Allocator for pinned and device memory, provided by a CUDA-aware module at start-up
 * (host memory needs none). Without one, those kinds return GV_ERR_UNSUPPORTED. */
struct gv_mem_ops {
    gv_status_t (*alloc)(size_t len, void **ptr_p);
    void (*free)(void *ptr);
};
void gv_mem_set_ops(enum gv_mem mem, const struct gv_mem_ops *ops);

/* Allocates len bytes of kind mem into *buf (host memory is page-aligned and zeroed).
 * On failure *buf is left as {NULL, 0}. */
gv_status_t gv_buf_alloc(struct gv_buf *buf, size_t len, enum gv_mem mem);
/* Frees and resets; accepts a zeroed or already freed buffer. */
void gv_buf_free(struct gv_buf *buf);

/* ---------------------------------------------------------------- plugins
 * One loader for what gravac maps only when a process asks for it: its own plugins (the CUDA
 * code of compress/ and nn/, shared objects that link nothing of gravac) and system libraries
 * looked up by soname (the CUDA driver, for transport/). A process that never asks maps none. */

/* What the host gives a gravac plugin at load. The common/ functions compiled into every
 * plugin (common/plugin_shim.c: gv_log, gv_calloc, gv_free) forward to these, so the plugin's
 * logs keep the process's sink, level and tag, and its allocations the failure hook. */
#define GV_PLUGIN_HOST_ABI 1u
struct gv_plugin_host {
    uint32_t abi;  /* GV_PLUGIN_HOST_ABI */
    uint32_t size; /* sizeof(struct gv_plugin_host) */
    void (*vlog)(enum gv_log_level level, const char *fmt, va_list ap);
    void *(*calloc)(size_t nmemb, size_t size);
    void (*free)(void *ptr);
};

/* The first member of every plugin's table of functions. */
struct gv_plugin_api_hdr {
    uint32_t abi;  /* the version of that table's interface (e.g. GV_CUDA_PLUGIN_ABI) */
    uint32_t size; /* sizeof the whole table */
};

/* The one symbol a gravac plugin exports (everything else is hidden). It hands host to the
 * shim (gv_plugin_shim_init) and fills api (api_size bytes, starting with struct
 * gv_plugin_api_hdr) when abi and api_size are those it was built with; GV_ERR_UNSUPPORTED
 * otherwise (a plugin of another build), api untouched. Defined by each plugin, with
 * GV_PLUGIN_EXPORT. */
#define GV_PLUGIN_ENTRY "gv_plugin_entry"
#define GV_PLUGIN_EXPORT __attribute__((visibility("default")))
typedef gv_status_t (*gv_plugin_entry_fn)(const struct gv_plugin_host *host, uint32_t abi,
                                          void *api, size_t api_size);
gv_status_t gv_plugin_entry(const struct gv_plugin_host *host, uint32_t abi, void *api,
                            size_t api_size);
/* Plugin side, in common/plugin_shim.c (compiled into each plugin, never into gv_common):
 * installs host (copied) as the target of the plugin's gv_log, gv_calloc and gv_free.
 * GV_ERR_UNSUPPORTED when host is NULL or its abi or size differ. */
gv_status_t gv_plugin_shim_init(const struct gv_plugin_host *host);

/* A symbol to resolve when loading (system libraries, whose functions are called directly). */
struct gv_plugin_sym {
    const char *name;
    void **addr_p; /* receives the address; NULL when optional and absent */
    int optional;  /* 1: absence is not an error */
};

/* What to load, and how to check it. */
struct gv_plugin_spec {
    /* A gravac plugin's file name ("libgravac_nn_cuda.so"), looked for in $GV_CUDA_PLUGIN_DIR
     * (only there when set), the executable's directory (/proc/self/exe), its ../lib/gravac,
     * then build_dir; or, with system set, a system library's soname ("libcuda.so.1") left to
     * the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache). */
    const char *file;
    int system;
    const char *build_dir; /* gravac plugins: the build tree's directory (may be NULL) */
    /* gravac plugins: its GV_PLUGIN_ENTRY is called with the host table, abi and api (api_size
     * bytes, zeroed first), and must give back a table whose header says abi and api_size.
     * api NULL: no entry point (system libraries). */
    uint32_t abi;
    void *api;
    size_t api_size;
    const struct gv_plugin_sym *syms; /* symbols to resolve, n_syms of them (may be NULL) */
    size_t n_syms;
};

#define GV_PLUGIN_PATH_LEN 4096
#define GV_PLUGIN_WHY_LEN 1536

/* A loaded library. */
struct gv_plugin {
    void *lib;                     /* the dlopen handle; NULL while not loaded */
    char path[GV_PLUGIN_PATH_LEN]; /* where it was loaded from (a system library: its soname) */
    char why[GV_PLUGIN_WHY_LEN];   /* after a failure: every place tried, and why it failed */
};

/* Finds and dlopens spec->file (RTLD_NOW | RTLD_LOCAL), resolves spec->syms, and for a gravac
 * plugin calls its entry point and checks the table's interface version and size. On success
 * pl->lib and pl->path are set (and spec->api filled); on failure GV_ERR_UNSUPPORTED, nothing
 * stays mapped, and pl->why says why: "dir/name (No such file or directory)" for each place
 * tried, dlerror() for a file that does not load, the missing symbol, or "... is not a plugin
 * of this build of gravac". Logs nothing: the caller decides how loud a missing library is.
 * Not thread-safe for one pl; callers load once (pthread_once). */
gv_status_t gv_plugin_load(const struct gv_plugin_spec *spec, struct gv_plugin *pl);
/* dlcloses a loaded library; accepts one that failed to load or was never loaded. */
void gv_plugin_close(struct gv_plugin *pl);

/* ---------------------------------------------------------------- time */

/* Monotonic clock. Only I/O-owning code reads it; adapt/ takes times as inputs. */
uint64_t gv_now_ns(void);
static inline double gv_now_s(void)
{
    return (double)gv_now_ns() * 1e-9;
}

/* ---------------------------------------------------------------- timeline (trace.c)
 * A thread's phases as spans in the Chrome trace event format (the JSON array format, one
 * "complete" event, ph "X", per span) that Perfetto and chrome://tracing open; gravac-trace
 * (ops/) merges the files of a job and draws them. One tracer belongs to one thread: it is not
 * thread-safe. Spans go into events preallocated at open; the span that finds them all used
 * writes them out first (formatted into a stdio buffer also allocated at open) and records that
 * write as a "trace-flush" span: nothing is dropped and nothing is allocated after open, and
 * the cost of a full buffer is visible in the timeline itself. Times are gv_now_ns() values the
 * caller read (CLOCK_MONOTONIC), written as microseconds since the tracer's anchor, whose
 * CLOCK_REALTIME value the file's "gravac_clock" metadata event gives (t0_s, t0_ns): the merge
 * aligns files on it. Tracing off is a NULL tracer, and gv_trace_span is then one branch. A
 * write error is logged once and ends the file's writing (training goes on); a process that
 * dies leaves the array unclosed, which the format allows and gravac-trace reads. */

struct gv_trace;

struct gv_trace_config {
    const char *path;         /* the file (truncated); NULL: no file, only the totals */
    const char *process;      /* the lane's name in viewers ("worker 2"), copied */
    int sort_index;           /* the lane's place in viewers (lower first) */
    const char *category;     /* every span's "cat" ("worker", "server"), static */
    const char *const *kinds; /* [n_kinds] span names, static; like category and peer_arg,
                                 written as given (nothing in them may need JSON escaping) */
    uint32_t n_kinds;
    const char *peer_arg; /* the name of the peer argument ("server", "worker"), static */
    uint32_t capacity;    /* events kept between writes (0: 16384) */
    uint64_t totals_from; /* the totals count spans of iterations >= this */
};

/* GV_ERR_INVAL (no kinds), GV_ERR_IO (the file, logged), GV_ERR_NOMEM. */
gv_status_t gv_trace_open(const struct gv_trace_config *cfg, struct gv_trace **tr_p);
/* Writes the events left, closes the array and the file. Accepts NULL. */
void gv_trace_close(struct gv_trace *tr);
/* One span of kind (< n_kinds) from t0 to t1 (gv_now_ns values) in iteration iter, with the
 * compression factor and bytes of the phase and a peer (its rank; < 0: none) as arguments. */
void gv_trace_record(struct gv_trace *tr, uint32_t kind, uint64_t t0, uint64_t t1, uint64_t iter,
                     double cf, uint64_t bytes, int32_t peer);
static inline void gv_trace_span(struct gv_trace *tr, uint32_t kind, uint64_t t0, uint64_t t1,
                                 uint64_t iter, double cf, uint64_t bytes, int32_t peer)
{
    if (tr != NULL)
        gv_trace_record(tr, kind, t0, t1, iter, cf, bytes, peer);
}
/* The clock, read only when tracing (0 otherwise). */
static inline uint64_t gv_trace_now(const struct gv_trace *tr)
{
    return tr != NULL ? gv_now_ns() : 0;
}
/* Spans and nanoseconds per kind since open, of iterations >= totals_from; index n_kinds is
 * the tracer's own writes. count and ns: [n] (n <= n_kinds + 1). */
void gv_trace_totals(const struct gv_trace *tr, uint64_t *count, uint64_t *ns, uint32_t n);

#ifdef __cplusplus
}
#endif
#endif /* GV_COMMON_H */
