/* target.c - target names -> fully resolved KcTarget.
 *
 * Grammar:  cpu | <arch>[-<llvm cpu>][+<feature>]...   arch: x86_64, aarch64
 * CPU and feature names are checked against targets.def (what LLVM 19
 * knows). Resolution sorts and deduplicates features, so "x86_64+fma+avx2"
 * and "x86_64+avx2+fma" both become "x86_64-x86-64+avx2+fma" (features
 * "+avx2,+fma"). "cpu" is this host: LLVM's host CPU name plus the POSITIVE
 * host features (a VM may disable AVX-512 features the CPU model implies,
 * so the model alone is not enough). The canonical name of a resolved
 * target resolves to itself.
 *
 * The CPU's row gives the columns the compiler reads (isa level, vector
 * width, vector registers, native half, warp size). Explicit features are
 * applied to the row's feature set as LLVM applies -mattr (a "+" item
 * adds what it implies, a "-" item drops what implies it) and the columns
 * are derived again from the result (derive()). Nothing is cached: every
 * call works on its own stack, so all of this is thread-safe.
 */
#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "graph.h"

#define NAME_MAX_LEN 1000
#define MAX_FEATS 512

typedef enum KcArch { TA_X86_64, TA_AARCH64, TA_COUNT } KcArch;

typedef struct ArchInfo {
	const char *name, *triple, *default_cpu;
} ArchInfo;

static const ArchInfo arch_info[TA_COUNT] = {
    [TA_X86_64] = {"x86_64", "x86_64-unknown-linux-gnu", "x86-64"},
    [TA_AARCH64] = {"aarch64", "aarch64-unknown-linux-gnu", "generic"},
};

/* A C() row of targets.def. */
typedef struct CpuRow {
	KcArch arch;
	const char *name;
	KcBackendKind backend;
	const char *isa_level;
	int vector_width, vector_regs, native_half, warp_size;
	const char *features; /* space-separated, implications included */
} CpuRow;

static const CpuRow cpu_table[] = {
#define C(a, n, b, isa, vw, vr, half, warp, f)                                                     \
	{TA_##a, n, KC_BACKEND_##b, isa, vw, vr, half, warp, f},
#define F(a, n, imp)
#include "targets.def"
#undef C
#undef F
};

/* An F() row: a feature and what it implies directly. */
typedef struct FeatRow {
	KcArch arch;
	const char *name, *implies;
} FeatRow;

/* Sorted by (arch, name): feat_index() binary-searches it. */
static const FeatRow feat_table[] = {
#define C(a, n, b, isa, vw, vr, half, warp, f)
#define F(a, n, imp) {TA_##a, n, imp},
#include "targets.def"
#undef C
#undef F
};

#define NFEAT (sizeof feat_table / sizeof feat_table[0])

/* A set of features, one bit per feat_table row. */
typedef struct FeatSet {
	uint64_t w[(NFEAT + 63) / 64];
} FeatSet;

/* Spellings seen in target_info.feature that LLVM names differently. */
static const struct {
	KcArch arch;
	const char *alias, *name;
} feat_aliases[] = {
    {TA_X86_64, "avx512", "avx512f"},
    {TA_AARCH64, "asimd", "neon"},
};

/* AArch64 architecture version features, lowest first: a target's
 * isa_level is the last one it has (armv8-a when none). */
static const struct {
	const char *feat, *level;
} a64_levels[] = {
    {"v8r", "armv8-r"},     {"v8a", "armv8-a"},     {"v8.1a", "armv8.1-a"}, {"v8.2a", "armv8.2-a"},
    {"v8.3a", "armv8.3-a"}, {"v8.4a", "armv8.4-a"}, {"v8.5a", "armv8.5-a"}, {"v8.6a", "armv8.6-a"},
    {"v8.7a", "armv8.7-a"}, {"v8.8a", "armv8.8-a"}, {"v8.9a", "armv8.9-a"}, {"v9a", "armv9-a"},
    {"v9.1a", "armv9.1-a"}, {"v9.2a", "armv9.2-a"}, {"v9.3a", "armv9.3-a"}, {"v9.4a", "armv9.4-a"},
    {"v9.5a", "armv9.5-a"},
};

/* x86 psABI levels above the baseline, as LLVM's own CPU rows of them. */
static const char *const x86_levels[] = {"x86-64-v2", "x86-64-v3", "x86-64-v4"};

static const CpuRow *
find_cpu(KcArch arch, const char *s, size_t len)
{
	for (size_t i = 0; i < sizeof cpu_table / sizeof cpu_table[0]; i++)
		if (cpu_table[i].arch == arch && strlen(cpu_table[i].name) == len &&
		    memcmp(cpu_table[i].name, s, len) == 0)
			return &cpu_table[i];
	return NULL;
}

/* feat_table index of the `len` bytes at s (no aliases), or -1. */
static int
feat_index(KcArch arch, const char *s, size_t len)
{
	size_t lo = 0, hi = NFEAT;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const FeatRow *f = &feat_table[mid];
		int c = f->arch != arch ? (f->arch < arch ? -1 : 1) : strncmp(f->name, s, len);
		if (c == 0 && f->name[len] != '\0')
			c = 1;
		if (c == 0)
			return (int)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Like feat_index, also accepting feat_aliases. */
static int
find_feat(KcArch arch, const char *s, size_t len)
{
	int f = feat_index(arch, s, len);
	for (size_t i = 0; f < 0 && i < sizeof feat_aliases / sizeof feat_aliases[0]; i++)
		if (feat_aliases[i].arch == arch && strlen(feat_aliases[i].alias) == len &&
		    memcmp(feat_aliases[i].alias, s, len) == 0)
			f = feat_index(arch, feat_aliases[i].name, strlen(feat_aliases[i].name));
	return f;
}

/* The table's spelling of a CPU or feature name, or NULL. */
static const char *
cpu_name(KcArch arch, const char *s, size_t len)
{
	const CpuRow *r = find_cpu(arch, s, len);
	return r ? r->name : NULL;
}

static const char *
feat_name(KcArch arch, const char *s, size_t len)
{
	int f = find_feat(arch, s, len);
	return f >= 0 ? feat_table[f].name : NULL;
}

/* The next word of p at or after *pos, split at any of seps: its start,
 * with *len set and *pos moved past it; NULL at the end. */
static const char *
next_word(const char *p, size_t *pos, const char *seps, size_t *len)
{
	while (p[*pos] && strchr(seps, p[*pos]))
		(*pos)++;
	if (!p[*pos])
		return NULL;
	const char *w = p + *pos;
	*len = strcspn(w, seps);
	*pos += *len;
	return w;
}

static bool
set_has(const FeatSet *s, int i)
{
	return i >= 0 && (s->w[i / 64] >> (i % 64) & 1);
}

static bool
set_has_name(const FeatSet *s, KcArch arch, const char *name)
{
	return set_has(s, feat_index(arch, name, strlen(name)));
}

/* Feature i and, recursively, what it implies (LLVM's SetImpliedBits).
 * Every set is closed under implication, so a member's are there. */
static void
set_enable(FeatSet *s, int i)
{
	KC_ASSERT(i >= 0 && (size_t)i < NFEAT);
	if (set_has(s, i))
		return;
	s->w[i / 64] |= UINT64_C(1) << (i % 64);
	size_t pos = 0, len;
	for (const char *w; (w = next_word(feat_table[i].implies, &pos, " ", &len));)
		set_enable(s, feat_index(feat_table[i].arch, w, len));
}

static bool
implies(int j, const char *name)
{
	size_t pos = 0, len, n = strlen(name);
	for (const char *w; (w = next_word(feat_table[j].implies, &pos, " ", &len));)
		if (len == n && memcmp(w, name, n) == 0)
			return true;
	return false;
}

/* Drop feature i and, recursively, every feature that implies it (LLVM's
 * ClearImpliedBits). */
static void
set_disable(FeatSet *s, int i)
{
	s->w[i / 64] &= ~(UINT64_C(1) << (i % 64));
	for (size_t j = 0; j < NFEAT; j++)
		if (set_has(s, (int)j) && implies((int)j, feat_table[i].name))
			set_disable(s, (int)j);
}

/* The features LLVM 19 enables for `row` with the explicit items of
 * `features` ("+a,-b", applied in order). LLVM's X86Subtarget also adds
 * +evex512 (512-bit AVX-512 vectors) to the generic CPUs' explicit list
 * when it enables some AVX-512 feature and neither disables 512-bit
 * vectors nor AVX-512; named CPUs get AVX-512 at 256 bits without it. */
static KcStatus
effective(const CpuRow *row, const char *features, FeatSet *out, KcErr *err, const char *where)
{
	KcArch arch = row->arch;
	size_t pos = 0, len;
	const char *w;
	long last_avx512 = -1, last_no_evex = -1;
	bool plus_evex = false, no_avx512f = false;

	memset(out, 0, sizeof *out);
	while ((w = next_word(row->features, &pos, " ", &len)))
		set_enable(out, feat_index(arch, w, len));
	pos = 0;
	for (long k = 0; (w = next_word(features, &pos, ",", &len)); k++) {
		int i = len > 1 ? feat_index(arch, w + 1, len - 1) : -1;
		if (i < 0 || (*w != '+' && *w != '-'))
			return kc_fail(err, KC_BAD_TARGET, where,
			               "bad %s feature item '%.*s' (want +name or -name)",
			               arch_info[arch].name, len > 64 ? 64 : (int)len, w);
		const char *name = feat_table[i].name;
		if (*w == '+') {
			set_enable(out, i);
			if (strncmp(name, "avx512", 6) == 0)
				last_avx512 = k;
			plus_evex |= strcmp(name, "evex512") == 0;
		} else {
			set_disable(out, i);
			if (strcmp(name, "evex512") == 0)
				last_no_evex = k;
			no_avx512f |= strcmp(name, "avx512f") == 0;
		}
	}
	if (arch == TA_X86_64 && last_avx512 > last_no_evex && !plus_evex && !no_avx512f &&
	    (strcmp(row->name, "generic") == 0 || strcmp(row->name, "pentium4") == 0 ||
	     strcmp(row->name, "x86-64") == 0))
		set_enable(out, feat_index(arch, "evex512", 7));
	return KC_OK;
}

/* The feature-derived columns of a target with feature set s, by the rules
 * targets.def states (scripts/gen-targets computes the rows' columns with
 * the same rules; test_target checks that they agree). */
static void
derive(KcArch arch, const FeatSet *s, KcTarget *t)
{
	const char *level = NULL;
	switch (arch) {
	case TA_X86_64: {
		bool zmm = set_has_name(s, arch, "avx512f") && set_has_name(s, arch, "evex512");
		t->vector_width = zmm ? 16 : set_has_name(s, arch, "avx") ? 8 : 4;
		t->vector_regs = zmm ? 32 : 16;
		t->native_half = set_has_name(s, arch, "f16c");
		bool b64 = set_has_name(s, arch, "64bit");
		level = b64 ? "x86-64-v1" : "x86-32";
		for (size_t l = 0; b64 && l < sizeof x86_levels / sizeof x86_levels[0]; l++) {
			const CpuRow *r = find_cpu(arch, x86_levels[l], strlen(x86_levels[l]));
			size_t pos = 0, len;
			bool all = true;
			KC_ASSERT(r);
			for (const char *w; all && (w = next_word(r->features, &pos, " ", &len));)
				all = set_has(s, feat_index(arch, w, len));
			if (all)
				level = x86_levels[l];
		}
		break;
	}
	case TA_AARCH64:
		t->vector_width = 4;
		t->vector_regs = 32;
		t->native_half = set_has_name(s, arch, "fp-armv8");
		level = "armv8-a";
		for (size_t l = 0; l < sizeof a64_levels / sizeof a64_levels[0]; l++)
			if (set_has_name(s, arch, a64_levels[l].feat))
				level = a64_levels[l].level;
		break;
	case TA_COUNT: KC_ASSERT(0); break;
	}
	snprintf(t->isa_level, sizeof t->isa_level, "%s", level);
}

/* The arch and CPU row of t's triple and cpu, or KC_BAD_TARGET. */
static KcStatus
target_row(const KcTarget *t, const CpuRow **row, KcErr *err)
{
	for (int a = 0; a < TA_COUNT; a++)
		if (strcmp(t->triple, arch_info[a].triple) == 0) {
			*row = find_cpu((KcArch)a, t->cpu, strlen(t->cpu));
			if (*row)
				return KC_OK;
			return kc_fail(err, KC_BAD_TARGET, "target", "unknown %s CPU '%.64s'",
			               arch_info[a].name, t->cpu);
		}
	return kc_fail(err, KC_BAD_TARGET, "target", "unknown triple '%.64s'", t->triple);
}

KcStatus
kc_target_fill(KcTarget *t, KcErr *err)
{
	const CpuRow *row;
	FeatSet s;
	KcStatus st = target_row(t, &row, err);
	if (st != KC_OK)
		return st;
	t->backend = row->backend;
	t->warp_size = row->warp_size;
	if (t->features[0] == '\0') {
		snprintf(t->isa_level, sizeof t->isa_level, "%s", row->isa_level);
		t->vector_width = row->vector_width;
		t->vector_regs = row->vector_regs;
		t->native_half = row->native_half != 0;
		return KC_OK;
	}
	if ((st = effective(row, t->features, &s, err, "target")) != KC_OK)
		return st;
	derive(row->arch, &s, t);
	return KC_OK;
}

size_t
kc_target_features(const KcTarget *t, char *buf, size_t cap)
{
	const CpuRow *row;
	FeatSet s;
	KcErr err = {0};
	size_t n = 0;
	if (cap)
		buf[0] = '\0';
	if (target_row(t, &row, &err) != KC_OK ||
	    effective(row, t->features, &s, &err, "") != KC_OK)
		return 0;
	for (size_t i = 0; i < NFEAT; i++) {
		if (!set_has(&s, (int)i))
			continue;
		int k = snprintf(n < cap ? buf + n : NULL, n < cap ? cap - n : 0, "%s+%s",
		                 n ? "," : "", feat_table[i].name);
		n += (size_t)k;
	}
	return n;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Fill *out from validated parts (cpu and feats point into the tables). */
static KcStatus
finish(KcArch arch, const char *cpu, const char **feats, int nf, KcTarget *out, KcErr *err,
       const char *where)
{
	const ArchInfo *ai = &arch_info[arch];
	memset(out, 0, sizeof *out);
	qsort(feats, (size_t)nf, sizeof feats[0], cmp_str);
	int m = 0;
	for (int i = 0; i < nf; i++)
		if (m == 0 || strcmp(feats[m - 1], feats[i]) != 0)
			feats[m++] = feats[i];
	snprintf(out->triple, sizeof out->triple, "%s", ai->triple);
	snprintf(out->cpu, sizeof out->cpu, "%s", cpu);
	size_t nl = (size_t)snprintf(out->name, sizeof out->name, "%s-%s", ai->name, cpu);
	size_t fl = 0;
	for (int i = 0; i < m; i++) {
		if (nl < sizeof out->name)
			nl += (size_t)snprintf(out->name + nl, sizeof out->name - nl, "+%s",
			                       feats[i]);
		if (fl < sizeof out->features)
			fl += (size_t)snprintf(out->features + fl, sizeof out->features - fl,
			                       "%s+%s", i ? "," : "", feats[i]);
	}
	if (nl > NAME_MAX_LEN || fl >= sizeof out->features) {
		memset(out, 0, sizeof *out);
		return kc_fail(err, KC_BAD_TARGET, where, "the resolved target name is too long");
	}
	KcStatus st = kc_target_fill(out, err);
	/* LLVM aborts the process ("64-bit code requested on a subtarget that
	 * doesn't support it") when asked for x86_64 code on a 32-bit CPU */
	if (st == KC_OK && strcmp(out->isa_level, "x86-32") == 0)
		st = kc_fail(
		    err, KC_BAD_TARGET, where,
		    "x86_64 CPU '%s' has no 64-bit mode; name a 64-bit CPU (or add +64bit)", cpu);
	if (st != KC_OK)
		memset(out, 0, sizeof *out);
	return st;
}

/* Split `s` (len bytes) at any of `seps` and add each feature to feats[].
 * A leading '+' on an item is allowed. */
static KcStatus
add_feats(KcArch arch, const char *s, size_t len, const char *seps, const char **feats, int *nf,
          KcErr *err, const char *where)
{
	size_t i = 0;
	while (i < len) {
		size_t j = i;
		while (j < len && !strchr(seps, s[j]))
			j++;
		const char *item = s + i;
		size_t il = j - i;
		if (il > 0 && *item == '+') {
			item++;
			il--;
		}
		if (il == 0) {
			if (j < len && strchr("+", s[j]))
				return kc_fail(err, KC_BAD_TARGET, where, "empty feature name");
		} else {
			const char *f = feat_name(arch, item, il);
			if (!f)
				return kc_fail(err, KC_BAD_TARGET, where,
				               "unknown %s feature '%.*s'", arch_info[arch].name,
				               il > 64 ? 64 : (int)il, item);
			if (*nf >= MAX_FEATS)
				return kc_fail(err, KC_BAD_TARGET, where, "too many features");
			feats[(*nf)++] = f;
		}
		i = j + 1;
	}
	return KC_OK;
}

/* How /proc/cpuinfo spells each feature (the clients' table too). */
typedef struct OsFlag {
	KcArch arch;
	const char *flag, *llvm;
} OsFlag;

static const OsFlag os_flags[] = {
#define X86(fl, llvm, t) {TA_X86_64, fl, llvm},
#define ARM(fl, llvm, t) {TA_AARCH64, fl, llvm},
#include "cpuflags.def"
#undef X86
#undef ARM
};

static bool
has_word(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; (p = strstr(p, word)) != NULL; p += n) {
		bool start = p == list || p[-1] == ' ' || p[-1] == '\t';
		bool end = p[n] == 0 || p[n] == ' ' || p[n] == '\n' || p[n] == '\t';
		if (start && end)
			return true;
	}
	return false;
}

/* The first "flags" (x86) or "Features" (aarch64) line of /proc/cpuinfo,
 * malloc'd; NULL where there is none. */
static char *
os_flags_line(KcArch arch)
{
	const char *key = arch == TA_AARCH64 ? "Features" : "flags";
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return NULL;
	char *line = NULL, *found = NULL;
	size_t cap = 0;
	while (!found && getline(&line, &cap, f) > 0) {
		char *colon = strchr(line, ':');
		if (colon && strncmp(line, key, strlen(key)) == 0)
			found = strdup(colon + 1);
	}
	free(line);
	fclose(f);
	return found;
}

/* True when the OS's flags line has a spelling for feat and lists none of
 * them: LLVM's CPUID probe sees the feature but the kernel (or hypervisor)
 * does not offer it. A feature cpuinfo has no spelling for is kept. */
static bool
os_lacks(KcArch arch, const char *line, const char *feat)
{
	bool known = false;
	for (size_t i = 0; i < sizeof os_flags / sizeof os_flags[0]; i++) {
		if (os_flags[i].arch != arch || strcmp(os_flags[i].llvm, feat) != 0)
			continue;
		known = true;
		if (has_word(line, os_flags[i].flag))
			return false;
	}
	return known;
}

KcStatus
kc_target_host(KcTarget *out, KcErr *err)
{
#if defined(__x86_64__)
	KcArch arch = TA_X86_64;
#elif defined(__aarch64__)
	KcArch arch = TA_AARCH64;
#else
	memset(out, 0, sizeof *out);
	return kc_fail(err, KC_BAD_TARGET, "target", "this host's architecture is not supported");
#endif
	const char *feats[MAX_FEATS];
	int nf = 0;
	char *cpu_s = LLVMGetHostCPUName();
	char *feat_s = LLVMGetHostCPUFeatures();
	const char *cpu = cpu_s ? cpu_name(arch, cpu_s, strlen(cpu_s)) : NULL;
	if (!cpu)
		cpu = arch_info[arch].default_cpu;
	/* "+a,-b,+c": keep the positive ones LLVM 19 names (all of them, in
	 * practice; unknown ones could not matter to codegen anyway) that the
	 * OS also lists, so "cpu" never needs more than a client that reads
	 * /proc/cpuinfo on this machine finds (on virtual machines whose
	 * cpuinfo hides lzcnt, sse4a or fsgsbase that CPUID still reports) */
	char *os = os_flags_line(arch);
	for (const char *p = feat_s ? feat_s : ""; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len > 1 && *p == '+' && nf < MAX_FEATS) {
			const char *f = feat_name(arch, p + 1, len - 1);
			if (f && !(os && os_lacks(arch, os, f)))
				feats[nf++] = f;
		}
		p += len + (e ? 1 : 0);
	}
	free(os);
	LLVMDisposeMessage(cpu_s);
	LLVMDisposeMessage(feat_s);
	return finish(arch, cpu, feats, nf, out, err, "target");
}

KcStatus
kc_target_resolve(const char *name, KcTarget *out, KcErr *err)
{
	memset(out, 0, sizeof *out);
	if (!name || !*name)
		return kc_fail(err, KC_BAD_TARGET, "target", "empty target name");
	size_t len = strnlen(name, NAME_MAX_LEN + 1);
	if (len > NAME_MAX_LEN)
		return kc_fail(err, KC_BAD_TARGET, "target",
		               "target name is longer than %d characters", NAME_MAX_LEN);
	if (strcmp(name, "cpu") == 0)
		return kc_target_host(out, err);
	KcArch arch = TA_COUNT;
	size_t al = 0;
	for (int a = 0; a < TA_COUNT; a++) {
		size_t l = strlen(arch_info[a].name);
		if (strncmp(name, arch_info[a].name, l) == 0 &&
		    (name[l] == '\0' || name[l] == '-' || name[l] == '+')) {
			arch = (KcArch)a;
			al = l;
		}
	}
	if (arch == TA_COUNT) {
		size_t l = strcspn(name, "-+");
		return kc_fail(err, KC_BAD_TARGET, "target",
		               "unknown architecture '%.*s' (use cpu, x86_64 or aarch64)",
		               l > 64 ? 64 : (int)l, name);
	}
	const char *p = name + al;
	const char *cpu = arch_info[arch].default_cpu;
	if (*p == '-') {
		p++;
		size_t cl = strcspn(p, "+");
		cpu = cpu_name(arch, p, cl);
		if (!cpu)
			return kc_fail(err, KC_BAD_TARGET, "target", "unknown %s CPU '%.*s'",
			               arch_info[arch].name, cl > 64 ? 64 : (int)cl, p);
		p += cl;
	}
	const char *feats[MAX_FEATS];
	int nf = 0;
	if (*p == '+') {
		if (p[1] == '\0' || p[strlen(p) - 1] == '+')
			return kc_fail(err, KC_BAD_TARGET, "target", "empty feature name");
		KcStatus st = add_feats(arch, p + 1, strlen(p + 1), "+", feats, &nf, err, "target");
		if (st != KC_OK)
			return st;
	}
	return finish(arch, cpu, feats, nf, out, err, "target");
}

/* target_info.arch spellings -> KcArch (TA_COUNT if unknown). */
static KcArch
arch_from_info(const char *s)
{
	static const struct {
		const char *s;
		KcArch a;
	} tab[] = {
	    {"x86_64", TA_X86_64}, {"x86-64", TA_X86_64}, {"x64", TA_X86_64},
	    {"amd64", TA_X86_64},  {"x86", TA_X86_64},    {"aarch64", TA_AARCH64},
	    {"arm64", TA_AARCH64}, {"armv8", TA_AARCH64},
	};
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
		if (strcasecmp(tab[i].s, s) == 0)
			return tab[i].a;
	return TA_COUNT;
}

KcStatus
kc_target_from_graph(const KcGraph *g, KcTarget *out, KcErr *err)
{
	memset(out, 0, sizeof *out);
	const char *proc = g->process;
	if (proc && (strcmp(proc, "cuda") == 0 || strcmp(proc, "aicore") == 0))
		return kc_fail(err, KC_BAD_TARGET, "/process",
		               "process '%s': %s targets are not supported yet; pass ?target=cpu",
		               proc, proc[0] == 'c' ? "GPU" : "Ascend");
	if (proc && strcmp(proc, "cpu") != 0)
		return kc_fail(err, KC_BAD_TARGET, "/process",
		               "unknown process '%.64s'; pass ?target=cpu", proc);
	if (!g->ti_arch)
		return kc_target_host(out, err);
	KcArch arch = arch_from_info(g->ti_arch);
	if (arch == TA_COUNT)
		return kc_fail(err, KC_BAD_TARGET, "/target_info/arch",
		               "unknown architecture '%.64s' (x86_64 or aarch64)", g->ti_arch);
	const char *cpu = arch_info[arch].default_cpu;
	if (g->ti_cpu && *g->ti_cpu) {
		cpu = cpu_name(arch, g->ti_cpu, strlen(g->ti_cpu));
		if (!cpu)
			return kc_fail(err, KC_BAD_TARGET, "/target_info/cpu",
			               "unknown %s CPU '%.64s'", arch_info[arch].name, g->ti_cpu);
	}
	const char *feats[MAX_FEATS];
	int nf = 0;
	if (g->ti_feature) {
		size_t fl = strnlen(g->ti_feature, NAME_MAX_LEN + 1);
		if (fl > NAME_MAX_LEN)
			return kc_fail(err, KC_BAD_TARGET, "/target_info/feature",
			               "feature list is too long");
		KcStatus st = add_feats(arch, g->ti_feature, fl, ", \t", feats, &nf, err,
		                        "/target_info/feature");
		if (st != KC_OK)
			return st;
	}
	return finish(arch, cpu, feats, nf, out, err, "/target_info");
}
