/* config.c - kcsd settings from defaults, a config file and flags.
 *
 * Every setting is a row of config.def; this file only knows the three
 * types (STR, INT, SIZE). Order of precedence: defaults, then the file
 * named by --config ("key = value" lines, '#' starts a comment, keys as in
 * config.def with '_' or '-'), then command-line flags ("--key value" or
 * "--key=value"). Any error is printed to stderr and reported as
 * CONFIG_ERROR; main() turns that into exit code 2.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

typedef enum ConfType { CONF_STR, CONF_INT, CONF_SIZE, CONF_LIST } ConfType;

/* One row of config.def, with the field's offset in ServerConfig. */
typedef struct ConfRow {
	const char *name;
	ConfType type;
	const char *def_str;
	int64_t def_num, min, max;
	const char *help;
	size_t offset;
} ConfRow;

/* clang-format off */
#define CONF_DEF_STR(v) _Generic((v), char *: (v), default: NULL)
#define CONF_DEF_NUM(v) _Generic((v), char *: 0, default: (v))

static const ConfRow rows[] = {
#define C(name, type, def, min, max, help)                                                  \
	{ #name, CONF_##type, CONF_DEF_STR(def), (int64_t)CONF_DEF_NUM(def), min, max, help, \
	  offsetof(ServerConfig, name) },
#include "config.def"
#undef C
};
/* clang-format on */
#define NROWS (sizeof rows / sizeof rows[0])

static char **
str_field(ServerConfig *cfg, const ConfRow *r)
{
	return (char **)((char *)cfg + r->offset);
}

static int64_t *
num_field(ServerConfig *cfg, const ConfRow *r)
{
	return (int64_t *)((char *)cfg + r->offset);
}

/* Finds a row by key, accepting '-' for '_'. */
static const ConfRow *
find_row(const char *key, size_t len)
{
	for (size_t i = 0; i < NROWS; i++) {
		const char *n = rows[i].name;
		if (strlen(n) != len)
			continue;
		size_t k = 0;
		while (k < len && (n[k] == key[k] || (n[k] == '_' && key[k] == '-')))
			k++;
		if (k == len)
			return &rows[i];
	}
	return NULL;
}

/* Parses a decimal integer with an optional K/M/G/T suffix (SIZE only). */
static bool
parse_num(const ConfRow *r, const char *s, int64_t *out)
{
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 10);
	if (end == s || errno)
		return false;
	if (r->type == CONF_SIZE && *end) {
		int shift = 0;
		switch (toupper((unsigned char)*end)) {
		case 'K': shift = 10; break;
		case 'M': shift = 20; break;
		case 'G': shift = 30; break;
		case 'T': shift = 40; break;
		default: return false;
		}
		end++;
		if (toupper((unsigned char)*end) == 'I')
			end++;
		if (toupper((unsigned char)*end) == 'B')
			end++;
		if (v < 0 || v > (INT64_MAX >> shift))
			return false;
		v <<= shift;
	}
	if (*end)
		return false;
	*out = v;
	return true;
}

/* Sets one setting from text; `origin` names where it came from. */
static bool
set_value(ServerConfig *cfg, const ConfRow *r, const char *value, const char *origin)
{
	switch (r->type) {
	case CONF_STR: {
		char **f = str_field(cfg, r);
		free(*f);
		*f = kc_xstrdup(value);
		return true;
	}
	case CONF_LIST: {
		/* each repeat adds a line */
		char **f = str_field(cfg, r);
		KcBuf b = {0};
		kc_buf_printf(&b, "%s%s%s", *f, **f ? "\n" : "", value);
		free(*f);
		*f = kc_buf_take(&b, NULL);
		return true;
	}
	case CONF_INT:
	case CONF_SIZE: {
		int64_t v;
		if (!parse_num(r, value, &v)) {
			fprintf(stderr, "kcsd: %s: %s: \"%s\" is not %s\n", origin, r->name, value,
			        r->type == CONF_SIZE ? "a size (e.g. 16M)" : "an integer");
			return false;
		}
		if (v < r->min || v > r->max) {
			fprintf(stderr,
			        "kcsd: %s: %s = %" PRId64 " is outside [%" PRId64 ", %" PRId64
			        "]\n",
			        origin, r->name, v, r->min, r->max);
			return false;
		}
		*num_field(cfg, r) = v;
		return true;
	}
	}
	return false;
}

static char *
trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = 0;
	return s;
}

/* "key = value" lines; '#' starts a comment; blank lines are skipped. */
static bool
load_file(ServerConfig *cfg, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "kcsd: cannot read config file %s: %s\n", path, strerror(errno));
		return false;
	}
	char line[4096];
	int lineno = 0;
	bool ok = true;
	while (ok && fgets(line, sizeof line, f)) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *s = trim(line);
		if (!*s)
			continue;
		char origin[512];
		snprintf(origin, sizeof origin, "%s:%d", path, lineno);
		char *eq = strchr(s, '=');
		if (!eq) {
			fprintf(stderr, "kcsd: %s: expected \"key = value\"\n", origin);
			ok = false;
			break;
		}
		*eq = 0;
		char *key = trim(s), *value = trim(eq + 1);
		const ConfRow *r = find_row(key, strlen(key));
		if (!r) {
			fprintf(stderr, "kcsd: %s: unknown setting \"%s\"\n", origin, key);
			ok = false;
			break;
		}
		ok = set_value(cfg, r, value, origin);
	}
	fclose(f);
	return ok;
}

void
config_usage(FILE *f)
{
	fprintf(f, "usage: kcsd [--config FILE] [--OPTION VALUE]...\n\n"
	           "  --config FILE             read \"key = value\" settings (flags win)\n"
	           "  --help                    this text\n"
	           "  --version                 print the version and exit\n"
	           "  --hash-token TOKEN [ROLE [NAME]]\n"
	           "                            print the digest line for token/tokens_file and\n"
	           "                            exit (TOKEN - reads it from stdin; ROLE: read)\n");
	for (size_t i = 0; i < NROWS; i++) {
		char flag[64];
		snprintf(flag, sizeof flag, "%s", rows[i].name);
		for (char *p = flag; *p; p++)
			if (*p == '_')
				*p = '-';
		char def[64];
		if (rows[i].type == CONF_STR || rows[i].type == CONF_LIST)
			snprintf(def, sizeof def, "\"%s\"", rows[i].def_str);
		else
			snprintf(def, sizeof def, "%" PRId64, rows[i].def_num);
		fprintf(f, "  --%-24s%s (default %s)\n", flag, rows[i].help, def);
	}
}

static void
set_defaults(ServerConfig *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	for (size_t i = 0; i < NROWS; i++) {
		if (rows[i].type == CONF_STR || rows[i].type == CONF_LIST)
			*str_field(cfg, &rows[i]) = kc_xstrdup(rows[i].def_str);
		else
			*num_field(cfg, &rows[i]) = rows[i].def_num;
	}
}

ConfigResult
config_load(ServerConfig *cfg, int argc, char **argv)
{
	set_defaults(cfg);
	/* first pass: --help, --version, --config */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return CONFIG_HELP;
		if (strcmp(argv[i], "--version") == 0)
			return CONFIG_VERSION;
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
			free(cfg->config_file);
			cfg->config_file = kc_xstrdup(argv[++i]);
		} else if (strncmp(argv[i], "--config=", 9) == 0) {
			free(cfg->config_file);
			cfg->config_file = kc_xstrdup(argv[i] + 9);
		}
	}
	if (cfg->config_file && !load_file(cfg, cfg->config_file))
		return CONFIG_ERROR;
	/* second pass: every other flag */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strncmp(a, "--", 2) != 0) {
			fprintf(stderr, "kcsd: unexpected argument \"%s\" (see --help)\n", a);
			return CONFIG_ERROR;
		}
		a += 2;
		const char *eq = strchr(a, '=');
		size_t klen = eq ? (size_t)(eq - a) : strlen(a);
		const char *value = eq ? eq + 1 : NULL;
		if (klen == 6 && strncmp(a, "config", 6) == 0) {
			if (!value)
				i++;
			continue;
		}
		const ConfRow *r = find_row(a, klen);
		if (!r) {
			fprintf(stderr, "kcsd: unknown option \"%s\" (see --help)\n", argv[i]);
			return CONFIG_ERROR;
		}
		if (!value) {
			if (i + 1 >= argc) {
				fprintf(stderr, "kcsd: option \"%s\" needs a value\n", argv[i]);
				return CONFIG_ERROR;
			}
			value = argv[++i];
		}
		if (!set_value(cfg, r, value, "command line"))
			return CONFIG_ERROR;
	}
	KcLogLevel lvl;
	if (!config_log_level(cfg, &lvl)) {
		fprintf(stderr, "kcsd: log_level \"%s\" is not debug, info, warn or error\n",
		        cfg->log_level);
		return CONFIG_ERROR;
	}
	if (!*cfg->state_dir) {
		fprintf(stderr, "kcsd: state_dir must not be empty\n");
		return CONFIG_ERROR;
	}
	if (!*cfg->tls_cert_file != !*cfg->tls_key_file) {
		fprintf(stderr,
		        "kcsd: tls_cert_file and tls_key_file go together (one is empty)\n");
		return CONFIG_ERROR;
	}
	/* the budget must hold one body of every route whole, or that
	 * route could never be served */
	const char *cap_name;
	int64_t cap = config_largest_body_cap(cfg, &cap_name);
	if (cfg->max_inflight_body_bytes < cap) {
		fprintf(stderr,
		        "kcsd: max_inflight_body_bytes = %" PRId64 " is below %s = %" PRId64
		        ": such a body could never be held\n",
		        cfg->max_inflight_body_bytes, cap_name, cap);
		return CONFIG_ERROR;
	}
	if (!strchr(cfg->listen, ':')) {
		fprintf(stderr, "kcsd: listen \"%s\" is not HOST:PORT\n", cfg->listen);
		return CONFIG_ERROR;
	}
	return CONFIG_OK;
}

int64_t
config_largest_body_cap(const ServerConfig *cfg, const char **name)
{
	int64_t cap = cfg->max_body_bytes;
	const char *cap_name = "max_body_bytes";
#define R(e, method, pattern, handler, flags, rcap)
#define B(setting)                                                                                 \
	if (cfg->setting > cap) {                                                                  \
		cap = cfg->setting;                                                                \
		cap_name = #setting;                                                               \
	}
#include "routes.def"
#undef B
#undef R
	if (name)
		*name = cap_name;
	return cap;
}

bool
config_log_level(const ServerConfig *cfg, KcLogLevel *out)
{
	static const struct {
		const char *name;
		KcLogLevel lvl;
	} levels[] = {
	    {"debug", KC_LOG_DEBUG},
	    {"info", KC_LOG_INFO},
	    {"warn", KC_LOG_WARN},
	    {"error", KC_LOG_ERROR},
	};
	for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
		if (cfg->log_level && strcmp(cfg->log_level, levels[i].name) == 0) {
			*out = levels[i].lvl;
			return true;
		}
	}
	return false;
}

void
config_free(ServerConfig *cfg)
{
	for (size_t i = 0; i < NROWS; i++) {
		if (rows[i].type == CONF_STR || rows[i].type == CONF_LIST) {
			free(*str_field(cfg, &rows[i]));
			*str_field(cfg, &rows[i]) = NULL;
		}
	}
	free(cfg->config_file);
	cfg->config_file = NULL;
}
