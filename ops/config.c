/* config.c: option tables filled from built-in defaults, an INI config file (read by inih),
 * environment variables and the command line, in that order of precedence; --help text and
 * the effective-configuration listing. The value parsers are in config_parse.c. Every refusal
 * names the option and the source in one sentence. */
#include "ops_internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define CFG_NAME_MAX 48
#define CFG_FILE_MAX (1u << 20) /* a config file is small; refuse anything bigger */

struct cfg_slot {
    const struct gv_opt *opt;
    void *dst; /* the table's destination struct */
    enum gv_cfg_source src;
    char *raw;            /* the text of the value in force */
    char *where;          /* where that text came from */
    struct cfg_value val; /* owns the strings and lists the destination points to */
};

struct gv_cfg {
    const struct gv_cfg_spec *spec;
    struct cfg_slot *slots;
    size_t n;
    char *file;
    bool help;
    char err[1024];
};

static gv_status_t cfg_fail(struct gv_cfg *cfg, gv_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static gv_status_t cfg_fail(struct gv_cfg *cfg, gv_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cfg->err, sizeof(cfg->err), fmt, ap);
    va_end(ap);
    gv_log(GV_LOG_ERROR, "%s", cfg->err);
    return status;
}

static struct cfg_slot *cfg_find(struct gv_cfg *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n; i++)
        if (strcmp(cfg->slots[i].opt->name, name) == 0)
            return &cfg->slots[i];
    return NULL;
}

/* The closest option name within edit distance 2, for "did you mean". */
static const char *cfg_suggest(const struct gv_cfg *cfg, const char *name)
{
    const char *best = NULL;
    unsigned best_d = 3;
    for (size_t i = 0; i < cfg->n; i++) {
        unsigned d = cfg_edit_distance(name, cfg->slots[i].opt->name);
        if (d < best_d) {
            best_d = d;
            best = cfg->slots[i].opt->name;
        }
    }
    return best;
}

static void cfg_env_name(const char *name, char *buf, size_t len)
{
    size_t j = (size_t)snprintf(buf, len, "GV_");
    for (size_t i = 0; name[i] != '\0' && j + 1 < len; i++)
        buf[j++] = name[i] == '-' ? '_' : (char)toupper((unsigned char)name[i]);
    buf[j] = '\0';
}

/* Parses text for slot and, if it is good, makes it the value in force. */
static gv_status_t cfg_apply(struct gv_cfg *cfg, struct cfg_slot *slot, const char *text,
                             enum gv_cfg_source src, const char *where)
{
    char problem[CFG_PROBLEM_MAX];
    struct cfg_value v;
    gv_status_t status = cfg_parse_value(slot->opt, text, &v, problem, sizeof(problem));
    if (status == GV_ERR_NOMEM)
        return cfg_fail(cfg, status, "--%s: out of memory", slot->opt->name);
    if (status != GV_OK) {
        if (src == GV_CFG_SRC_DEFAULT)
            return cfg_fail(cfg, status, "--%s: the built-in default %s", slot->opt->name, problem);
        return cfg_fail(cfg, status, "--%s: %s (%s)", slot->opt->name, problem, where);
    }
    char *raw = gv_strdup(text);
    char *w = gv_strdup(where);
    if (raw == NULL || w == NULL) {
        gv_free(raw);
        gv_free(w);
        cfg_value_free(&v);
        return cfg_fail(cfg, GV_ERR_NOMEM, "--%s: out of memory", slot->opt->name);
    }
    cfg_value_free(&slot->val);
    gv_free(slot->raw);
    gv_free(slot->where);
    slot->val = v;
    slot->raw = raw;
    slot->where = w;
    slot->src = src;
    cfg_value_store(slot->opt, &slot->val, slot->dst);
    return GV_OK;
}

/* ---------------------------------------------------------------- create */

static gv_status_t cfg_check_opt(struct gv_cfg *cfg, const struct gv_opt *o)
{
    size_t len = o->name ? strlen(o->name) : 0;
    bool ok = len > 0 && len <= CFG_NAME_MAX && islower((unsigned char)o->name[0]);
    for (size_t i = 0; ok && i < len; i++)
        ok = islower((unsigned char)o->name[i]) || isdigit((unsigned char)o->name[i]) ||
             o->name[i] == '-';
    if (!ok || strcmp(o->name, "help") == 0 || strcmp(o->name, "config") == 0 ||
        strncmp(o->name, "no-", 3) == 0)
        return cfg_fail(cfg, GV_ERR_INVAL, "option table: invalid option name '%s'",
                        o->name ? o->name : "(null)");
    if ((unsigned)o->type > GV_OPT_HOSTLIST)
        return cfg_fail(cfg, GV_ERR_INVAL, "--%s: invalid type %d in the option table", o->name,
                        (int)o->type);
    if (o->type == GV_OPT_ENUM && (o->choices == NULL || o->choices[0] == NULL))
        return cfg_fail(cfg, GV_ERR_INVAL, "--%s: an enum option needs choices", o->name);
    if ((o->flags & GV_OPT_RANGE) && !(o->min <= o->max))
        return cfg_fail(cfg, GV_ERR_INVAL, "--%s: min > max in the option table", o->name);
    if (cfg_find(cfg, o->name) != NULL)
        return cfg_fail(cfg, GV_ERR_INVAL, "option table: --%s is defined twice", o->name);
    return GV_OK;
}

gv_status_t gv_cfg_create(const struct gv_cfg_spec *spec, struct gv_cfg **cfg_p)
{
    gv_status_t status = GV_ERR_NOMEM;
    size_t total = 0;
    struct gv_cfg *cfg = gv_calloc(1, sizeof(*cfg));
    if (cfg == NULL)
        return GV_ERR_NOMEM;
    cfg->spec = spec;
    for (size_t t = 0; t < spec->n_tables; t++)
        total += spec->tables[t].n;
    cfg->slots = gv_calloc(total ? total : 1, sizeof(*cfg->slots));
    if (cfg->slots == NULL)
        goto err_destroy;
    for (size_t t = 0; t < spec->n_tables; t++) {
        for (size_t i = 0; i < spec->tables[t].n; i++) {
            const struct gv_opt *o = &spec->tables[t].opts[i];
            status = cfg_check_opt(cfg, o);
            if (status != GV_OK)
                goto err_destroy;
            struct cfg_slot *slot = &cfg->slots[cfg->n++];
            slot->opt = o;
            slot->dst = spec->tables[t].dst;
            if (o->flags & GV_OPT_REQUIRED)
                continue;
            status =
                cfg_apply(cfg, slot, o->def ? o->def : "", GV_CFG_SRC_DEFAULT, "built-in default");
            if (status != GV_OK)
                goto err_destroy;
        }
    }
    cfg->err[0] = '\0';
    *cfg_p = cfg;
    return GV_OK;

err_destroy:
    if (status == GV_ERR_NOMEM && cfg->err[0] == '\0')
        gv_log(GV_LOG_ERROR, "config: out of memory");
    gv_cfg_destroy(cfg);
    return status;
}

void gv_cfg_destroy(struct gv_cfg *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; cfg->slots != NULL && i < cfg->n; i++) {
        cfg_value_free(&cfg->slots[i].val);
        gv_free(cfg->slots[i].raw);
        gv_free(cfg->slots[i].where);
    }
    gv_free(cfg->slots);
    gv_free(cfg->file);
    gv_free(cfg);
}

/* ---------------------------------------------------------------- config file */

struct ini_entry {
    struct cfg_slot *slot;
    int scope; /* CFG_SCOPE_COMMON or CFG_SCOPE_OWN */
    int line;
    char *value;
};

struct ini_ctx {
    struct gv_cfg *cfg;
    const char *buf; /* the whole file, NUL-free */
    size_t len, pos;
    int line;        /* lines handed to inih so far: the handler runs on line `line` */
    const char *cur; /* start of that line */
    int err_line;    /* first problem found by the reader or handler, 0 if none */
    gv_status_t err_status;
    char err[768];
    struct ini_entry *entries;
    size_t n, cap;
    char last_section[64]; /* section and key of the previous handler call, for continuations */
    char last_name[64];
    int last_skipped;
};

static void ini_error(struct ini_ctx *x, gv_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void ini_error(struct ini_ctx *x, gv_status_t status, const char *fmt, ...)
{
    if (x->err_line != 0)
        return; /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err, sizeof(x->err), fmt, ap);
    va_end(ap);
    x->err_line = x->line;
    x->err_status = status;
}

/* fgets-like reader over the buffer: one line per call, so that x->line is the line inih is
 * on. A line that does not fit inih's buffer is an error (inih would split it silently). */
static char *cfg_ini_read(char *str, int num, void *stream)
{
    struct ini_ctx *x = stream;
    if (x->pos >= x->len || x->err_line != 0)
        return NULL;
    const char *s = x->buf + x->pos;
    const char *nl = memchr(s, '\n', x->len - x->pos);
    size_t line_len = nl ? (size_t)(nl - s) + 1 : x->len - x->pos;
    x->line++;
    if (num < 2 || line_len > (size_t)num - 1) {
        ini_error(x, GV_ERR_INVAL,
                  "is longer than %d bytes (continue a long value on indented "
                  "lines)",
                  num - 2);
        return NULL;
    }
    memcpy(str, s, line_len);
    str[line_len] = '\0';
    x->cur = s;
    x->pos += line_len;
    return str;
}

static int ini_scope(const struct gv_cfg *cfg, const char *section)
{
    if (section[0] == '\0' || strcasecmp(section, "gravac") == 0)
        return CFG_SCOPE_COMMON;
    if (cfg->spec->section != NULL && strcasecmp(section, cfg->spec->section) == 0)
        return CFG_SCOPE_OWN;
    for (const char *const *s = cfg->spec->other_sections; s != NULL && *s != NULL; s++)
        if (strcasecmp(section, *s) == 0)
            return CFG_SCOPE_NONE;
    return -1;
}

static int cfg_ini_key(void *user, const char *section, const char *name, const char *value)
{
    struct ini_ctx *x = user;
    bool indented = x->cur != NULL && (x->cur[0] == ' ' || x->cur[0] == '\t');
    bool cont =
        indented && strcmp(section, x->last_section) == 0 && strcmp(name, x->last_name) == 0;
    snprintf(x->last_section, sizeof(x->last_section), "%s", section);
    snprintf(x->last_name, sizeof(x->last_name), "%s", name);
    int scope = ini_scope(x->cfg, section);
    if (scope == -1) {
        char q[80];
        cfg_quote(section, q, sizeof(q));
        ini_error(x, GV_ERR_INVAL, "unknown section [%s]", q);
        return 1;
    }
    if (scope == CFG_SCOPE_NONE)
        return 1;
    if (cont) {
        if (x->n == 0 || x->last_skipped)
            return 1;
        struct ini_entry *e = &x->entries[x->n - 1];
        size_t a = strlen(e->value), b = strlen(value);
        char *joined = gv_realloc(e->value, a + b + 2);
        if (joined == NULL) {
            ini_error(x, GV_ERR_NOMEM, "out of memory");
            return 1;
        }
        joined[a] = ' ';
        memcpy(joined + a + 1, value, b + 1);
        e->value = joined;
        return 1;
    }
    char canon[CFG_NAME_MAX + 2], q[80];
    snprintf(canon, sizeof(canon), "%s", name);
    for (char *p = canon; *p; p++)
        *p = *p == '_' ? '-' : *p;
    cfg_quote(name, q, sizeof(q));
    struct cfg_slot *slot = strlen(name) <= CFG_NAME_MAX ? cfg_find(x->cfg, canon) : NULL;
    x->last_skipped = slot == NULL;
    if (slot == NULL) {
        const char *hint = cfg_suggest(x->cfg, canon);
        ini_error(x, GV_ERR_INVAL, "unknown key '%s'%s%s%s", q, hint ? "; did you mean '" : "",
                  hint ? hint : "", hint ? "'?" : "");
        return 1;
    }
    for (size_t i = 0; i < x->n; i++) {
        if (x->entries[i].slot == slot && x->entries[i].scope == scope) {
            ini_error(x, GV_ERR_INVAL, "duplicate key '%s' (first set on line %d)", q,
                      x->entries[i].line);
            return 1;
        }
    }
    if (x->n == x->cap) {
        size_t ncap = x->cap ? x->cap * 2 : 16;
        struct ini_entry *ne = gv_realloc(x->entries, ncap * sizeof(*ne));
        if (ne == NULL) {
            ini_error(x, GV_ERR_NOMEM, "out of memory");
            return 1;
        }
        x->entries = ne;
        x->cap = ncap;
    }
    char *v = gv_strdup(value);
    if (v == NULL) {
        ini_error(x, GV_ERR_NOMEM, "out of memory");
        return 1;
    }
    x->entries[x->n++] =
        (struct ini_entry){.slot = slot, .scope = scope, .line = x->line, .value = v};
    return 1;
}

static gv_status_t cfg_read_file(struct gv_cfg *cfg, const char *path, char **buf_p, size_t *len_p)
{
    gv_status_t status = GV_ERR_IO;
    struct stat st;
    char *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    if (fd < 0)
        return cfg_fail(cfg, GV_ERR_IO, "config file %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        cfg_fail(cfg, GV_ERR_IO, "config file %s: %s", path, strerror(errno));
        goto err_close;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > (off_t)CFG_FILE_MAX) {
        cfg_fail(cfg, GV_ERR_IO, "config file %s: %s", path,
                 S_ISREG(st.st_mode) ? "larger than 1 MiB" : "not a regular file");
        goto err_close;
    }
    size_t len = 0, cap = (size_t)st.st_size + 1;
    buf = gv_malloc(cap);
    if (buf == NULL) {
        status = cfg_fail(cfg, GV_ERR_NOMEM, "config file %s: out of memory", path);
        goto err_close;
    }
    for (;;) {
        ssize_t ret = read(fd, buf + len, cap - len);
        if (ret < 0 && errno == EINTR)
            continue;
        if (ret < 0) {
            cfg_fail(cfg, GV_ERR_IO, "config file %s: %s", path, strerror(errno));
            goto err_free;
        }
        if (ret == 0)
            break;
        len += (size_t)ret;
        if (len == cap) {
            cfg_fail(cfg, GV_ERR_IO, "config file %s: it grew while being read", path);
            goto err_free;
        }
    }
    if (memchr(buf, '\0', len) != NULL) {
        status = cfg_fail(cfg, GV_ERR_INVAL,
                          "config file %s: contains a NUL byte (not a text "
                          "file)",
                          path);
        goto err_free;
    }
    buf[len] = '\0';
    close(fd);
    *buf_p = buf;
    *len_p = len;
    return GV_OK;

err_free:
    gv_free(buf);
err_close:
    close(fd);
    return status;
}

/* Strips one pair of double quotes around a whole value. */
static const char *ini_unquote(char *v)
{
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v[n - 1] = '\0';
        return v + 1;
    }
    return v;
}

static gv_status_t cfg_load_file(struct gv_cfg *cfg, const char *path)
{
    struct ini_ctx x = {.cfg = cfg};
    char *buf = NULL;
    gv_status_t status = cfg_read_file(cfg, path, &buf, &x.len);
    if (status != GV_OK)
        return status;
    x.buf = buf;
    int ret = ini_parse_stream(cfg_ini_read, &x, cfg_ini_key, &x);
    if (ret == -2) {
        status = cfg_fail(cfg, GV_ERR_NOMEM, "config file %s: out of memory", path);
        goto out;
    }
    if (ret > 0 && (x.err_line == 0 || ret < x.err_line)) {
        status = cfg_fail(cfg, GV_ERR_INVAL,
                          "config file %s line %d: expected 'key = value' or "
                          "'[section]'",
                          path, ret);
        goto out;
    }
    if (x.err_line != 0) {
        status = cfg_fail(cfg, x.err_status, "config file %s line %d: %s", path, x.err_line, x.err);
        goto out;
    }
    /* The program's own section wins over the common one, wherever each appears. */
    for (int scope = CFG_SCOPE_COMMON; scope <= CFG_SCOPE_OWN && status == GV_OK; scope++) {
        for (size_t i = 0; i < x.n && status == GV_OK; i++) {
            if (x.entries[i].scope != scope)
                continue;
            char where[512];
            snprintf(where, sizeof(where), "config file %s line %d", path, x.entries[i].line);
            status = cfg_apply(cfg, x.entries[i].slot, ini_unquote(x.entries[i].value),
                               GV_CFG_SRC_FILE, where);
        }
    }
out:
    for (size_t i = 0; i < x.n; i++)
        gv_free(x.entries[i].value);
    gv_free(x.entries);
    gv_free(buf);
    return status;
}

/* ---------------------------------------------------------------- environment and argv */

static const char *cfg_getenv(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++)
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
            return envp[i] + n + 1;
    return NULL;
}

static gv_status_t cfg_load_env(struct gv_cfg *cfg, char *const *envp)
{
    for (size_t i = 0; i < cfg->n; i++) {
        char env[CFG_NAME_MAX + 8], where[CFG_NAME_MAX + 40];
        cfg_env_name(cfg->slots[i].opt->name, env, sizeof(env));
        const char *v = cfg_getenv(envp, env);
        if (v == NULL)
            continue;
        snprintf(where, sizeof(where), "environment variable %s", env);
        gv_status_t status = cfg_apply(cfg, &cfg->slots[i], v, GV_CFG_SRC_ENV, where);
        if (status != GV_OK)
            return status;
    }
    return GV_OK;
}

static gv_status_t cfg_unknown_flag(struct gv_cfg *cfg, const char *name)
{
    char q[80], flag[CFG_NAME_MAX + 16];
    snprintf(flag, sizeof(flag), "--%s", name);
    cfg_quote(flag, q, sizeof(q));
    const char *hint = cfg_suggest(cfg, name);
    return cfg_fail(cfg, GV_ERR_INVAL, "unknown option '%s' (command line)%s%s%s", q,
                    hint ? "; did you mean --" : "", hint ? hint : "", hint ? "?" : "");
}

/* One "--name[=value]" at argv[*i]; may consume argv[*i + 1]. */
static gv_status_t cfg_load_flag(struct gv_cfg *cfg, int argc, char *const *argv, int *i)
{
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    char name[CFG_NAME_MAX + 8];
    size_t name_len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (name_len >= sizeof(name)) {
        char q[80];
        cfg_quote(arg, q, sizeof(q));
        return cfg_fail(cfg, GV_ERR_INVAL, "unknown option '%s' (command line)", q);
    }
    memcpy(name, arg + 2, name_len);
    name[name_len] = '\0';
    const char *value = eq ? eq + 1 : NULL;
    if (strcmp(name, "config") == 0) {
        if (value == NULL)
            (*i)++; /* read by cfg_find_config */
        return GV_OK;
    }
    struct cfg_slot *slot = cfg_find(cfg, name);
    if (slot == NULL && strncmp(name, "no-", 3) == 0) {
        struct cfg_slot *neg = cfg_find(cfg, name + 3);
        if (neg != NULL && neg->opt->type == GV_OPT_BOOL) {
            if (value != NULL)
                return cfg_fail(cfg, GV_ERR_INVAL, "--%s: takes no value (command line)", name);
            return cfg_apply(cfg, neg, "false", GV_CFG_SRC_ARGV, "command line");
        }
    }
    if (slot == NULL)
        return cfg_unknown_flag(cfg, name);
    if (value == NULL && slot->opt->type == GV_OPT_BOOL)
        value = "true";
    if (value == NULL) {
        if (*i + 1 >= argc)
            return cfg_fail(cfg, GV_ERR_INVAL, "--%s: needs a value (command line)", name);
        const char *next = argv[*i + 1];
        if (strncmp(next, "--", 2) == 0) {
            char q[80];
            cfg_quote(next, q, sizeof(q));
            return cfg_fail(cfg, GV_ERR_INVAL,
                            "--%s: needs a value, got the option '%s' (write --%s=%s if you "
                            "mean it) (command line)",
                            name, q, name, q);
        }
        value = next;
        (*i)++;
    }
    return cfg_apply(cfg, slot, value, GV_CFG_SRC_ARGV, "command line");
}

static gv_status_t cfg_load_argv(struct gv_cfg *cfg, int argc, char *const *argv)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        gv_status_t status;
        if (strncmp(arg, "--", 2) == 0 && arg[2] != '\0') {
            status = cfg_load_flag(cfg, argc, argv, &i);
        } else {
            char q[80];
            cfg_quote(arg, q, sizeof(q));
            if (arg[0] == '-' && strcmp(arg, "--") != 0)
                status = cfg_fail(cfg, GV_ERR_INVAL,
                                  "unknown option '%s' (command line); "
                                  "options start with --",
                                  q);
            else
                status = cfg_fail(cfg, GV_ERR_INVAL, "unexpected argument '%s' (command line)", q);
        }
        if (status != GV_OK)
            return status;
    }
    return GV_OK;
}

/* Finds --help/-h and --config before anything else is read. */
static gv_status_t cfg_scan_argv(struct gv_cfg *cfg, int argc, char *const *argv,
                                 const char **file_p)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            cfg->help = true;
        } else if (strcmp(arg, "--config") == 0) {
            if (i + 1 >= argc)
                return cfg_fail(cfg, GV_ERR_INVAL, "--config: needs a file name (command line)");
            *file_p = argv[++i];
        } else if (strncmp(arg, "--config=", 9) == 0) {
            *file_p = arg + 9;
        } else if (strncmp(arg, "--", 2) == 0 && strchr(arg, '=') == NULL && i + 1 < argc) {
            /* "--name value": skip the value so that a value "--help" is not taken for a flag */
            struct cfg_slot *slot = cfg_find(cfg, arg + 2);
            if (slot != NULL && slot->opt->type != GV_OPT_BOOL &&
                strncmp(argv[i + 1], "--", 2) != 0)
                i++;
        }
    }
    return GV_OK;
}

gv_status_t gv_cfg_load(struct gv_cfg *cfg, int argc, char *const *argv, char *const *envp)
{
    const char *file = NULL;
    cfg->err[0] = '\0';
    gv_status_t status = cfg_scan_argv(cfg, argc, argv, &file);
    if (cfg->help)
        return GV_OK;
    if (status != GV_OK)
        return status;
    if (file == NULL) {
        file = cfg_getenv(envp, "GV_CONFIG");
        if (file != NULL && file[0] == '\0')
            file = NULL;
    }
    if (file != NULL) {
        if (file[0] == '\0')
            return cfg_fail(cfg, GV_ERR_INVAL, "--config: empty file name (command line)");
        cfg->file = gv_strdup(file);
        if (cfg->file == NULL)
            return cfg_fail(cfg, GV_ERR_NOMEM, "config: out of memory");
        status = cfg_load_file(cfg, file);
        if (status != GV_OK)
            return status;
    }
    status = cfg_load_env(cfg, envp);
    if (status != GV_OK)
        return status;
    status = cfg_load_argv(cfg, argc, argv);
    if (status != GV_OK)
        return status;
    for (size_t i = 0; i < cfg->n; i++) {
        if (cfg->slots[i].src != GV_CFG_SRC_UNSET)
            continue;
        char env[CFG_NAME_MAX + 8];
        const char *name = cfg->slots[i].opt->name;
        cfg_env_name(name, env, sizeof(env));
        return cfg_fail(cfg, GV_ERR_INVAL,
                        "--%s: required but not set (give --%s, %s or "
                        "'%s =' in the config file)",
                        name, name, env, name);
    }
    return GV_OK;
}

/* ---------------------------------------------------------------- queries and listings */

bool gv_cfg_help_requested(const struct gv_cfg *cfg)
{
    return cfg->help;
}

const char *gv_cfg_error(const struct gv_cfg *cfg)
{
    return cfg->err;
}

const char *gv_cfg_file(const struct gv_cfg *cfg)
{
    return cfg->file;
}

gv_status_t gv_cfg_source(const struct gv_cfg *cfg, const char *name, enum gv_cfg_source *src_p,
                          const char **where_p, const char **text_p)
{
    struct cfg_slot *slot = cfg_find((struct gv_cfg *)cfg, name);
    if (slot == NULL)
        return GV_ERR_INVAL;
    *src_p = slot->src;
    if (where_p != NULL)
        *where_p = slot->where ? slot->where : "not set";
    if (text_p != NULL)
        *text_p = slot->raw ? slot->raw : "";
    return GV_OK;
}

static void cfg_help_detail(const struct gv_opt *o, char *buf, size_t len)
{
    char env[CFG_NAME_MAX + 8], range[96];
    size_t off = 0;
    cfg_env_name(o->name, env, sizeof(env));
    if (o->type == GV_OPT_ENUM) {
        off += (size_t)snprintf(buf + off, len - off, "one of ");
        for (int i = 0; o->choices[i] != NULL && off < len; i++)
            off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? "|" : "", o->choices[i]);
    } else {
        off += (size_t)snprintf(buf + off, len - off, "%s", cfg_type_name(o->type));
    }
    if (off < len && (o->flags & GV_OPT_REQUIRED))
        off += (size_t)snprintf(buf + off, len - off, ", required");
    else if (off < len && (o->def == NULL || o->def[0] == '\0'))
        off += (size_t)snprintf(buf + off, len - off, ", default \"\"");
    else if (off < len)
        off += (size_t)snprintf(buf + off, len - off, ", default %s", o->def);
    cfg_range_text(o, range, sizeof(range));
    if (off < len && range[0] != '\0')
        off += (size_t)snprintf(buf + off, len - off, ", range %s", range);
    if (off < len)
        snprintf(buf + off, len - off, ", env %s", env);
}

static void cfg_help_line(FILE *out, const char *flag, const char *help, const char *detail)
{
    if (strlen(flag) <= 28)
        fprintf(out, "  %-28s %s\n", flag, help);
    else
        fprintf(out, "  %s\n  %-28s %s\n", flag, "", help);
    if (detail != NULL)
        fprintf(out, "  %-28s (%s)\n", "", detail);
}

void gv_cfg_print_help(const struct gv_cfg *cfg, FILE *out)
{
    const char *prog = cfg->spec->program ? cfg->spec->program : "gravac";
    fprintf(out, "usage: %s [--config FILE] [--OPTION=VALUE ...]\n", prog);
    if (cfg->spec->summary != NULL)
        fprintf(out, "%s\n", cfg->spec->summary);
    fprintf(
        out,
        "\nEach option takes, in increasing precedence, its built-in default, the value in the\n"
        "config file (INI: keys at the top or in [gravac]%s%s%s), the environment\n"
        "variable GV_<NAME> (upper case, '-' becomes '_'), and the command line\n"
        "(--name=value or --name value; booleans: --name, --no-name).\n\n",
        cfg->spec->section ? ", then [" : "", cfg->spec->section ? cfg->spec->section : "",
        cfg->spec->section ? "]" : "");
    fprintf(out, "general:\n");
    cfg_help_line(out, "-h, --help", "print this help and exit", NULL);
    cfg_help_line(out, "--config=FILE", "read options from this INI file", "env GV_CONFIG");
    const char *groups[64];
    size_t n_groups = 0;
    for (size_t i = 0; i < cfg->n; i++) {
        const char *g = cfg->slots[i].opt->group ? cfg->slots[i].opt->group : "options";
        size_t j = 0;
        while (j < n_groups && strcmp(groups[j], g) != 0)
            j++;
        if (j == n_groups && n_groups < GV_ARRAY_LEN(groups))
            groups[n_groups++] = g;
    }
    for (size_t gi = 0; gi < n_groups; gi++) {
        fprintf(out, "\n%s:\n", groups[gi]);
        for (size_t i = 0; i < cfg->n; i++) {
            const struct gv_opt *o = cfg->slots[i].opt;
            if (strcmp(o->group ? o->group : "options", groups[gi]) != 0)
                continue;
            char flag[CFG_NAME_MAX + 32], detail[512];
            const char *meta = cfg_type_meta(o->type);
            if (meta == NULL)
                snprintf(flag, sizeof(flag), "--[no-]%s", o->name);
            else
                snprintf(flag, sizeof(flag), "--%s=%s", o->name, meta);
            cfg_help_detail(o, detail, sizeof(detail));
            cfg_help_line(out, flag, o->help ? o->help : "", detail);
        }
    }
}

static void cfg_effective_line(const struct cfg_slot *s, char *buf, size_t len)
{
    const char *v = s->raw ? s->raw : "";
    if (s->opt->flags & GV_OPT_SECRET)
        v = "(hidden)";
    snprintf(buf, len, "%-24s = %s%s%s   (%s)", s->opt->name, v[0] ? "" : "\"", v, v[0] ? "" : "\"",
             s->where ? s->where : "not set");
}

void gv_cfg_print_effective(const struct gv_cfg *cfg, FILE *out)
{
    char line[1024];
    for (size_t i = 0; i < cfg->n; i++) {
        cfg_effective_line(&cfg->slots[i], line, sizeof(line));
        fprintf(out, "  %s\n", line);
    }
}

void gv_cfg_log_effective(const struct gv_cfg *cfg)
{
    char line[1024];
    gv_log(GV_LOG_INFO, "config: %s%s", cfg->file ? "file " : "no config file",
           cfg->file ? cfg->file : "");
    for (size_t i = 0; i < cfg->n; i++) {
        cfg_effective_line(&cfg->slots[i], line, sizeof(line));
        gv_log(GV_LOG_INFO, "config: %s", line);
    }
}
