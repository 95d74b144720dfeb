/* target.c - target names -> fully resolved KcTarget.
 *
 * Grammar:  cpu | <arch>[-<llvm cpu>][+<feature>]...   arch: x86_64, aarch64
 * CPU and feature names are checked against targets.def (what LLVM 19
 * knows). Resolution sorts and deduplicates features, so "x86_64+fma+avx2"
 * and "x86_64+avx2+fma" both become "x86_64-x86-64+avx2+fma" (features
 * "+avx2,+fma"). "cpu" is this host: LLVM's host CPU name plus the POSITIVE
 * host features (a VM may disable AVX-512 features the CPU model implies,
 * so the model alone is not enough). The canonical name of a resolved
 * target resolves to itself. Nothing is cached: every call works on its
 * own stack, so all of this is thread-safe.
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

typedef struct TargetName {
	KcArch arch;
	const char *name;
} TargetName;

static const TargetName cpu_table[] = {
#define C(a, n) {TA_##a, n},
#define F(a, n)
#include "targets.def"
#undef C
#undef F
};

static const TargetName feat_table[] = {
#define C(a, n)
#define F(a, n) {TA_##a, n},
#include "targets.def"
#undef C
#undef F
};

/* Spellings seen in target_info.feature that LLVM names differently. */
static const struct {
	KcArch arch;
	const char *alias, *name;
} feat_aliases[] = {
    {TA_X86_64, "avx512", "avx512f"},
    {TA_AARCH64, "asimd", "neon"},
};

static const char *
find_name(const TargetName *t, size_t n, KcArch arch, const char *s, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].arch == arch && strlen(t[i].name) == len && memcmp(t[i].name, s, len) == 0)
			return t[i].name;
	return NULL;
}

static const char *
find_cpu(KcArch arch, const char *s, size_t len)
{
	return find_name(cpu_table, sizeof cpu_table / sizeof cpu_table[0], arch, s, len);
}

static const char *
find_feat(KcArch arch, const char *s, size_t len)
{
	const char *f =
	    find_name(feat_table, sizeof feat_table / sizeof feat_table[0], arch, s, len);
	for (size_t i = 0; !f && i < sizeof feat_aliases / sizeof feat_aliases[0]; i++)
		if (feat_aliases[i].arch == arch && strlen(feat_aliases[i].alias) == len &&
		    memcmp(feat_aliases[i].alias, s, len) == 0)
			f = find_feat(arch, feat_aliases[i].name, strlen(feat_aliases[i].name));
	return f;
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
	return KC_OK;
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
			const char *f = find_feat(arch, item, il);
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
	const char *cpu = cpu_s ? find_cpu(arch, cpu_s, strlen(cpu_s)) : NULL;
	if (!cpu)
		cpu = arch_info[arch].default_cpu;
	/* "+a,-b,+c": keep the positive ones LLVM 19 names (all of them, in
	 * practice; unknown ones could not matter to codegen anyway) */
	for (const char *p = feat_s ? feat_s : ""; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len > 1 && *p == '+' && nf < MAX_FEATS) {
			const char *f = find_feat(arch, p + 1, len - 1);
			if (f)
				feats[nf++] = f;
		}
		p += len + (e ? 1 : 0);
	}
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
		cpu = find_cpu(arch, p, cl);
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
		cpu = find_cpu(arch, g->ti_cpu, strlen(g->ti_cpu));
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
