/* test_link.c - the in-process linker (link/link_elf.c) against ld.
 *
 * Kernels (Add chains, Tanh/Exp/Erf, Pow, f16<->f32 casts, Select with
 * comparisons, Floor/Round that need libm on baseline x86-64) are compiled
 * for every x86-64 target the host can run, linked in-process and by ld,
 * dlopen'ed and run on the same inputs: the output bytes must be equal.
 * Our .so is also parsed back (ET_DYN, page-aligned PT_LOADs, W^X,
 * non-executable PT_GNU_STACK, the entry in .dynsym), and malformed objects
 * (truncated, mutated, random, wrong machine) must give KC_CODEGEN or
 * KC_UNSUPPORTED, never a crash. `test_link bench` prints link and compile
 * timings (docs/linker.md) instead.
 */
#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cpu.h"
#include "link.h"
#include "t.h"
#include "tkernel.h"

/* ---- kernels: a tiny spec -> composite JSON -------------------------------- */
typedef struct Tensor {
	const char *name, *dtype, *shape;
} Tensor;

typedef struct Op {
	const char *op, *out, *dtype, *shape;
	const char *in[3]; /* tensor names, or "#value" for a float32 constant */
} Op;

typedef struct Spec {
	const char *name;
	Tensor in[4];
	Op ops[8];
	const char *outs[4];
} Spec;

static const Spec specs[] = {
    {"Fused_BiasAdd_Mul_Add",
     {{"x", "float32", "16,768"}, {"b", "float32", "768"}},
     {{"Add", "y", "float32", "16,768", {"x", "b"}},
      {"Mul", "z", "float32", "16,768", {"y", "x"}},
      {"Add", "w", "float32", "16,768", {"z", "#0.5"}}},
     {"w"}},
    {"Fused_Tanh_Exp_Erf",
     {{"a", "float32", "1000"}},
     {{"Tanh", "t", "float32", "1000", {"a"}},
      {"Exp", "e", "float32", "1000", {"t"}},
      {"Erf", "r", "float32", "1000", {"e"}},
      {"Log", "l", "float32", "1000", {"e"}}},
     {"r", "l"}},
    {"Fused_Abs_Pow",
     {{"a", "float32", "513"}, {"b", "float32", "513"}},
     {{"Abs", "p", "float32", "513", {"a"}}, {"Pow", "q", "float32", "513", {"p", "b"}}},
     {"q"}},
    {"Fused_Cast_f16_f32",
     {{"h", "float16", "257"}},
     {{"Cast", "f", "float32", "257", {"h"}},
      {"Mul", "m", "float32", "257", {"f", "#2"}},
      {"Cast", "g", "float16", "257", {"m"}}},
     {"g", "m"}},
    {"Fused_Greater_Select",
     {{"a", "float32", "300"}, {"b", "float32", "300"}},
     {{"Greater", "gt", "bool", "300", {"a", "b"}},
      {"Select", "s", "float32", "300", {"gt", "a", "b"}},
      {"Minimum", "mn", "float32", "300", {"s", "b"}}},
     {"mn", "gt"}},
    {"Fused_Floor_Round",
     {{"a", "float32", "777"}, {"d", "float64", "99"}},
     {{"Floor", "f", "float32", "777", {"a"}},
      {"Round", "r", "float32", "777", {"f"}},
      {"Add", "s", "float32", "777", {"r", "a"}},
      {"Floor", "fd", "float64", "99", {"d"}}},
     {"s", "fd"}},
};

static const Tensor *
find_tensor(const Spec *s, const char *name)
{
	for (int i = 0; i < 4 && s->in[i].name; i++)
		if (strcmp(s->in[i].name, name) == 0)
			return &s->in[i];
	for (int i = 0; i < 8 && s->ops[i].op; i++)
		if (strcmp(s->ops[i].out, name) == 0)
			return (const Tensor *)(const void *)&s->ops[i].out;
	return NULL;
}

static void
put_tensor(KcBuf *b, const char *name, const char *dt, const char *shape)
{
	kc_buf_printf(b,
	              "{\"data_type\":\"%s\",\"format\":\"DefaultFormat\",\"name\":\"x\","
	              "\"shape\":[%s],\"tensor_name\":\"%s\"}",
	              dt, shape, name);
}

static char *
spec_json(const Spec *s)
{
	KcBuf b = {0};
	kc_buf_printf(&b, "{\"composite\":true,\"op\":\"%s\",\"process\":\"cpu\",\"input_desc\":[",
	              s->name);
	for (int i = 0; i < 4 && s->in[i].name; i++) {
		kc_buf_puts(&b, i ? ",[" : "[");
		put_tensor(&b, s->in[i].name, s->in[i].dtype, s->in[i].shape);
		kc_buf_putc(&b, ']');
	}
	kc_buf_puts(&b, "],\"output_desc\":[");
	for (int i = 0; i < 4 && s->outs[i]; i++) {
		const Tensor *t = find_tensor(s, s->outs[i]);
		kc_buf_puts(&b, i ? "," : "");
		put_tensor(&b, t->name, t->dtype, t->shape);
	}
	kc_buf_puts(&b, "],\"op_desc\":[");
	for (int i = 0; i < 8 && s->ops[i].op; i++) {
		const Op *o = &s->ops[i];
		kc_buf_printf(
		    &b, "%s{\"attr\":null,\"impl_path\":\"\",\"name\":\"%s\",\"input_desc\":[",
		    i ? "," : "", o->op);
		for (int k = 0; k < 3 && o->in[k]; k++) {
			kc_buf_puts(&b, k ? ",[" : "[");
			if (o->in[k][0] == '#')
				kc_buf_printf(
				    &b,
				    "{\"data_type\":\"float32\",\"format\":\"DefaultFormat\","
				    "\"name\":\"x\",\"shape\":[1],\"tensor_name\":\"c%d_%d\","
				    "\"value\":%s}",
				    i, k, o->in[k] + 1);
			else {
				const Tensor *t = find_tensor(s, o->in[k]);
				put_tensor(&b, t->name, t->dtype, t->shape);
			}
			kc_buf_putc(&b, ']');
		}
		kc_buf_puts(&b, "],\"output_desc\":[");
		put_tensor(&b, o->out, o->dtype, o->shape);
		kc_buf_puts(&b, "]}");
	}
	kc_buf_puts(&b, "]}");
	return kc_buf_take(&b, NULL);
}

static size_t
tensor_bytes(const Tensor *t)
{
	size_t n = 1, es = 4;
	for (const char *p = t->shape; *p; p++)
		if (p == t->shape || p[-1] == ',')
			n *= (size_t)strtoul(p, NULL, 10);
	if (strcmp(t->dtype, "float16") == 0)
		es = 2;
	else if (strcmp(t->dtype, "float64") == 0)
		es = 8;
	else if (strcmp(t->dtype, "bool") == 0)
		es = 1;
	return n * es;
}

/* ---- building ------------------------------------------------------------------ */

/* The ELF object kc_compile would hand to the linker. */
static bool
make_object(const Spec *s, const KcTarget *t, unsigned char **obj, size_t *len)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcErr err = {0};
	LoopNest *ln = NULL;
	char *json = spec_json(s);
	LlvmDiag diag;
	LLVMContextRef ctx = llvm_context_create(&diag);
	LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("k", ctx);
	LLVMTargetMachineRef tm = NULL;
	bool ok = kc_parse(c, json, strlen(json), &lim, &g, &err) == KC_OK &&
	          ln_lower(compile_ctx_arena(c), g, &ln, &err) == KC_OK &&
	          sched_apply(ln, kc_schedule_default(c, g, t), &err) == KC_OK &&
	          emit_module(ln, mod, "k_kernel", &err) == KC_OK &&
	          (tm = obj_target_machine(t, &err)) != NULL &&
	          obj_optimize(mod, tm, cpu_pipeline(ln), false, &err) == KC_OK &&
	          obj_emit(mod, tm, LLVMObjectFile, obj, len, &err) == KC_OK;
	if (!ok)
		printf("# make_object %s: %s\n", s->name, err.msg);
	if (tm)
		LLVMDisposeTargetMachine(tm);
	LLVMDisposeModule(mod);
	LLVMContextDispose(ctx);
	free(json);
	compile_ctx_free(c);
	return ok;
}

static KcStatus
compile_with(const Spec *s, const KcTarget *t, const char *linker, KcArtifact *a, KcErr *err)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcCompileOptions o = {0};
	char *json = spec_json(s);
	KcStatus st;
	o.linker = linker;
	st = kc_parse(c, json, strlen(json), &lim, &g, err);
	if (st == KC_OK)
		st = kc_compile(c, g, t, NULL, &o, a, err);
	free(json);
	compile_ctx_free(c);
	return st;
}

/* The kernel `symbol` of the object; its handle in *dl. */
static KcsKernelFn
load(const unsigned char *so, size_t len, const char *symbol, void **dl)
{
	char why[300];
	KcsKernelFn fn = t_kernel_load(so, len, symbol, dl, why, sizeof why);
	if (!fn)
		printf("# %s\n", why);
	return fn;
}

/* ---- checking our output ------------------------------------------------------ */

/* Structural checks of a shared object made by link_elf; returns the
 * number of problems (printed). */
static int
check_so(const unsigned char *so, size_t len, const char *symbol, bool want_libm)
{
	Elf64_Ehdr eh;
	int bad = 0, nload = 0, ndyn = 0, nstack = 0;
	bool found = false, needs_libm = false;
#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			printf("# check_so: %s\n", #c);                                            \
			bad++;                                                                     \
		}                                                                                  \
	} while (0)
	CHECK(len >= sizeof eh);
	if (bad)
		return bad;
	memcpy(&eh, so, sizeof eh);
	CHECK(memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0);
	CHECK(eh.e_type == ET_DYN && eh.e_machine == EM_X86_64);
	CHECK(eh.e_phoff + (size_t)eh.e_phnum * sizeof(Elf64_Phdr) <= len);
	CHECK(eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr) <= len);
	if (bad)
		return bad;
	uint64_t prev_end = 0;
	for (int i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr p;
		memcpy(&p, so + eh.e_phoff + (size_t)i * sizeof p, sizeof p);
		CHECK(p.p_offset + p.p_filesz <= len);
		if (p.p_type == PT_LOAD) {
			nload++;
			CHECK(p.p_align == 4096 && p.p_offset % 4096 == p.p_vaddr % 4096);
			CHECK(!((p.p_flags & PF_W) && (p.p_flags & PF_X)));
			/* segments never share a page */
			CHECK(nload == 1 || p.p_vaddr / 4096 > (prev_end - 1) / 4096);
			prev_end = p.p_vaddr + p.p_memsz;
		}
		if (p.p_type == PT_GNU_STACK) {
			nstack++;
			CHECK(!(p.p_flags & PF_X));
		}
		if (p.p_type == PT_DYNAMIC) {
			ndyn++;
			for (uint64_t o = p.p_offset;
			     o + sizeof(Elf64_Dyn) <= p.p_offset + p.p_filesz;
			     o += sizeof(Elf64_Dyn)) {
				Elf64_Dyn d;
				memcpy(&d, so + o, sizeof d);
				needs_libm |= d.d_tag == DT_NEEDED;
				if (d.d_tag == DT_NULL)
					break;
			}
		}
	}
	CHECK(nload >= 3 && ndyn == 1 && nstack == 1);
	for (int i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr s, str;
		memcpy(&s, so + eh.e_shoff + (size_t)i * sizeof s, sizeof s);
		if (s.sh_type != SHT_DYNSYM)
			continue;
		CHECK(s.sh_link < eh.e_shnum);
		if (bad)
			return bad;
		memcpy(&str, so + eh.e_shoff + (size_t)s.sh_link * sizeof str, sizeof str);
		for (uint64_t k = 1; k < s.sh_size / sizeof(Elf64_Sym); k++) {
			Elf64_Sym y;
			memcpy(&y, so + s.sh_offset + k * sizeof y, sizeof y);
			const char *name = (const char *)so + str.sh_offset + y.st_name;
			if (strcmp(name, symbol) == 0)
				found = ELF64_ST_BIND(y.st_info) == STB_GLOBAL &&
				        ELF64_ST_TYPE(y.st_info) == STT_FUNC &&
				        y.st_shndx != SHN_UNDEF;
		}
	}
	CHECK(found);
	if (want_libm)
		CHECK(needs_libm);
#undef CHECK
	return bad;
}

/* ---- tests --------------------------------------------------------------------- */

static bool
host_runs(const char *target)
{
	__builtin_cpu_init();
	if (strstr(target, "avx512"))
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
		       __builtin_cpu_supports("avx512cd");
	if (strstr(target, "avx2"))
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	return true;
}

static const char *const targets[] = {"x86_64", "x86_64+avx2+fma", "x86_64-skylake-avx512", "cpu"};

/* Fills n bytes: floats in [-3, 3) for float32/float64, bytes otherwise. */
static void
fill(unsigned char *p, size_t n, const char *dtype, unsigned seed)
{
	srand(seed);
	if (strcmp(dtype, "float32") == 0)
		for (size_t i = 0; i + 4 <= n; i += 4) {
			float f = -3.0f + 6.0f * (float)rand() / (float)RAND_MAX;
			memcpy(p + i, &f, 4);
		}
	else if (strcmp(dtype, "float64") == 0)
		for (size_t i = 0; i + 8 <= n; i += 8) {
			double f = -3.0 + 6.0 * (double)rand() / (double)RAND_MAX;
			memcpy(p + i, &f, 8);
		}
	else
		for (size_t i = 0; i < n; i++)
			p[i] = (unsigned char)(rand() & (strcmp(dtype, "bool") == 0 ? 1 : 0xff));
}

/* Runs both kernels on the same inputs; true when every output byte agrees. */
static bool
same_outputs(const Spec *s, KcsKernelFn f1, KcsKernelFn f2)
{
	void *a1[8] = {0}, *a2[8] = {0};
	int n = 0, nin = 0;
	bool same = true;
	for (int i = 0; i < 4 && s->in[i].name; i++, n++, nin++) {
		size_t b = tensor_bytes(&s->in[i]);
		a1[n] = a2[n] = malloc(b);
		fill(a1[n], b, s->in[i].dtype, 7u + (unsigned)i);
	}
	for (int i = 0; i < 4 && s->outs[i]; i++, n++) {
		size_t b = tensor_bytes(find_tensor(s, s->outs[i]));
		a1[n] = calloc(1, b);
		a2[n] = malloc(b);
		memset(a2[n], 0xa5, b);
	}
	same = f1(NULL, a1, NULL) == 0 && f2(NULL, a2, NULL) == 0;
	for (int i = nin; i < n; i++) {
		size_t b = tensor_bytes(find_tensor(s, s->outs[i - nin]));
		same = same && memcmp(a1[i], a2[i], b) == 0;
	}
	for (int i = 0; i < n; i++) {
		if (a2[i] != a1[i])
			free(a2[i]);
		free(a1[i]);
	}
	return same;
}

static void
same_as_ld(void)
{
	int libm_kernels = 0;
	for (size_t ti = 0; ti < sizeof targets / sizeof targets[0]; ti++) {
		KcTarget t;
		KcErr err = {0};
		OK(kc_target_resolve(targets[ti], &t, &err) == KC_OK);
		bool run = host_runs(targets[ti]);
		for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
			const Spec *s = &specs[si];
			KcArtifact in = {0}, ld = {0}, au = {0};
			KcErr e1 = {0}, e2 = {0}, e3 = {0};
			OKF(compile_with(s, &t, "internal", &in, &e1) == KC_OK,
			    "%s %s internal: %s", s->name, targets[ti], e1.msg);
			OKF(compile_with(s, &t, "ld", &ld, &e2) == KC_OK, "%s %s ld: %s", s->name,
			    targets[ti], e2.msg);
			OKF(compile_with(s, &t, NULL, &au, &e3) == KC_OK, "%s %s auto: %s", s->name,
			    targets[ti], e3.msg);
			/* automatic mode took the in-process linker (it is deterministic) */
			OKF(in.object && au.object && in.object_len == au.object_len &&
			        memcmp(in.object, au.object, in.object_len) == 0,
			    "%s %s: automatic == internal", s->name, targets[ti]);
			bool libm = false;
			if (in.object) {
				Elf64_Ehdr eh;
				memcpy(&eh, in.object, sizeof eh);
				libm = strcmp(targets[ti], "x86_64") == 0 &&
				       memmem(in.object, in.object_len, "floorf", 7) != NULL;
				libm_kernels += libm;
				OKF(check_so(in.object, in.object_len, in.symbol, libm) == 0,
				    "%s %s", s->name, targets[ti]);
			}
			if (run && in.object && ld.object) {
				void *d1, *d2;
				KcsKernelFn f1 = load(in.object, in.object_len, in.symbol, &d1);
				KcsKernelFn f2 = load(ld.object, ld.object_len, ld.symbol, &d2);
				OKF(f1 && f2 && same_outputs(s, f1, f2), "%s %s: same output bytes",
				    s->name, targets[ti]);
				if (d1)
					dlclose(d1);
				if (d2)
					dlclose(d2);
			}
			kc_artifact_free(&in);
			kc_artifact_free(&ld);
			kc_artifact_free(&au);
		}
	}
	/* baseline x86-64 has no SSE4.1 roundps: floorf goes through our PLT */
	OKF(libm_kernels > 0, "%d kernels called libm", libm_kernels);
}

static int
link_status(const unsigned char *obj, size_t len)
{
	unsigned char *so = NULL;
	size_t n = 0;
	KcErr err = {0};
	KcStatus st = link_elf(obj, len, &so, &n, &err);
	KC_ASSERT(st == KC_OK || st == KC_CODEGEN || st == KC_UNSUPPORTED);
	KC_ASSERT((st == KC_OK) == (so != NULL));
	KC_ASSERT(st == KC_OK || strcmp(err.where, "link") == 0);
	free(so);
	return (int)st;
}

static void
malformed(void)
{
	KcTarget t;
	KcErr err = {0};
	unsigned char *obj = NULL, *m;
	size_t len = 0;
	int ok_trunc = 0, ok_rand = 0, counts[3] = {0};

	OK(kc_target_resolve("x86_64", &t, &err) == KC_OK);
	OK(make_object(&specs[5], &t, &obj, &len)); /* PLT, GOT, rodata */
	if (!obj)
		return;
	OK(link_status(obj, len) == KC_OK);
	m = malloc(len);
	/* every truncation */
	for (size_t n = 0; n < len; n++) {
		memcpy(m, obj, n);
		ok_trunc += link_status(m, n) == KC_OK;
	}
	OKF(ok_trunc == 0, "%d truncated objects linked", ok_trunc);
	/* wrong machine, wrong type */
	Elf64_Ehdr eh;
	memcpy(&eh, obj, sizeof eh);
	memcpy(m, obj, len);
	((Elf64_Ehdr *)(void *)m)->e_machine = EM_AARCH64;
	OK(link_status(m, len) == KC_UNSUPPORTED);
	memcpy(m, obj, len);
	((Elf64_Ehdr *)(void *)m)->e_type = ET_EXEC;
	OK(link_status(m, len) == KC_UNSUPPORTED);
	/* section headers past the end; one section's data past the end */
	memcpy(m, obj, len);
	((Elf64_Ehdr *)(void *)m)->e_shoff = len - 8;
	OK(link_status(m, len) == KC_CODEGEN);
	for (int i = 1; i < eh.e_shnum; i++) {
		Elf64_Shdr sh;
		size_t at = eh.e_shoff + (size_t)i * sizeof sh;
		memcpy(m, obj, len);
		memcpy(&sh, m + at, sizeof sh);
		if (sh.sh_type == SHT_NOBITS)
			continue;
		sh.sh_offset = (uint64_t)1 << 62;
		memcpy(m + at, &sh, sizeof sh);
		OKF(link_status(m, len) == KC_CODEGEN, "section %d offset", i);
		sh.sh_offset = len - 1;
		sh.sh_size = (uint64_t)-1;
		memcpy(m + at, &sh, sizeof sh);
		OKF(link_status(m, len) == KC_CODEGEN, "section %d size", i);
	}
	/* an R_X86_64_NONE with a symbol index past the table */
	for (int i = 1; i < eh.e_shnum; i++) {
		Elf64_Shdr sh;
		Elf64_Rela r;
		memcpy(&sh, obj + eh.e_shoff + (size_t)i * sizeof sh, sizeof sh);
		if (sh.sh_type != SHT_RELA || sh.sh_size < sizeof r)
			continue;
		memcpy(m, obj, len);
		memcpy(&r, m + sh.sh_offset, sizeof r);
		r.r_info = ELF64_R_INFO(0xffffffu, R_X86_64_NONE);
		memcpy(m + sh.sh_offset, &r, sizeof r);
		OK(link_status(m, len) == KC_OK); /* ignored: its symbol is never read */
		r.r_info = ELF64_R_INFO(0xffffffu, R_X86_64_PC32);
		memcpy(m + sh.sh_offset, &r, sizeof r);
		OK(link_status(m, len) == KC_CODEGEN);
	}
	/* random bytes, with and without a valid ELF header */
	srand(12345);
	for (int it = 0; it < 2000; it++) {
		size_t n = (size_t)rand() % len;
		for (size_t i = 0; i < n; i++)
			m[i] = (unsigned char)rand();
		if ((it & 1) && n >= sizeof eh)
			memcpy(m, &eh, sizeof eh);
		ok_rand += link_status(m, n) == KC_OK;
	}
	OKF(ok_rand == 0, "%d random buffers linked", ok_rand);
	/* mutations: 1-4 bytes anywhere; any status, but no crash, and what
	 * links must still pass the structural checks */
	for (int it = 0; it < 40000; it++) {
		memcpy(m, obj, len);
		int k = 1 + rand() % 4;
		for (int j = 0; j < k; j++) {
			size_t at = (size_t)rand() % len;
			/* most of the metadata is at the end (relocations, symbols,
			 * section headers): aim there half of the time */
			if (rand() & 1)
				at = len - 1 - (size_t)rand() % (len < 2048 ? len : 2048);
			switch (rand() % 4) {
			case 0: m[at] = (unsigned char)rand(); break;
			case 1: m[at] ^= (unsigned char)(1u << (rand() % 8)); break;
			case 2: m[at] = 0; break;
			default: m[at] = 0xff;
			}
		}
		unsigned char *so = NULL;
		size_t n = 0;
		KcErr e = {0};
		KcStatus st = link_elf(m, len, &so, &n, &e);
		counts[st == KC_OK ? 0 : st == KC_CODEGEN ? 1 : 2]++;
		KC_ASSERT(st == KC_OK || st == KC_CODEGEN || st == KC_UNSUPPORTED);
		if (so) {
			Elf64_Ehdr oh;
			memcpy(&oh, so, sizeof oh);
			KC_ASSERT(oh.e_type == ET_DYN &&
			          oh.e_shoff + oh.e_shnum * sizeof(Elf64_Shdr) == n);
		}
		free(so);
	}
	printf("# mutations: %d linked, %d malformed, %d unsupported\n", counts[0], counts[1],
	       counts[2]);
	OK(counts[1] > 0 && counts[2] > 0);
	free(m);
	free(obj);
}

/* An object with a relocation link_elf does not take: "internal" fails
 * with KC_CODEGEN, automatic falls back to ld, which takes it. */
static void
fallback(void)
{
	KcTarget t;
	KcErr err = {0};
	unsigned char *obj = NULL, *so = NULL;
	size_t len = 0, n = 0;
	int changed = 0;

	OK(kc_target_resolve("x86_64-skylake-avx512", &t, &err) == KC_OK);
	OK(make_object(&specs[0], &t, &obj, &len));
	if (!obj)
		return;
	Elf64_Ehdr eh;
	memcpy(&eh, obj, sizeof eh);
	for (int i = 0; i < eh.e_shnum && !changed; i++) {
		Elf64_Shdr sh;
		memcpy(&sh, obj + eh.e_shoff + (size_t)i * sizeof sh, sizeof sh);
		if (sh.sh_type != SHT_RELA || sh.sh_size < sizeof(Elf64_Rela))
			continue;
		Elf64_Rela r;
		memcpy(&r, obj + sh.sh_offset, sizeof r);
		/* PC32 -> GOTPC32 (same width; the kernel is not run) */
		r.r_info = ELF64_R_INFO(ELF64_R_SYM(r.r_info), R_X86_64_GOTPC32);
		memcpy(obj + sh.sh_offset, &r, sizeof r);
		changed = 1;
	}
	OK(changed);
	OK(link_status(obj, len) == KC_UNSUPPORTED);
	LinkOptions o = {.triple = t.triple};
	KcErr e1 = {0}, e2 = {0}, e3 = {0};
	o.linker = "internal";
	OK(link_shared(obj, len, &o, &so, &n, &e1) == KC_CODEGEN && !so &&
	   strstr(e1.msg, "unsupported"));
	printf("# internal: %s\n", e1.msg);
	o.linker = NULL;
	OKF(link_shared(obj, len, &o, &so, &n, &e2) == KC_OK && so, "fallback: %s", e2.msg);
	free(so);
	so = NULL;
	o.linker = "";
	OK(link_shared(obj, len, &o, &so, &n, &e3) == KC_OK && so);
	free(so);
	free(obj);
	/* aarch64 is not handled in process: automatic still links (ld.lld) */
	KcArtifact a = {0};
	KcErr e4 = {0};
	OK(kc_target_resolve("aarch64", &t, &err) == KC_OK);
	OKF(compile_with(&specs[1], &t, NULL, &a, &e4) == KC_OK, "aarch64: %s", e4.msg);
	kc_artifact_free(&a);
	OK(compile_with(&specs[1], &t, "internal", &a, &e4) == KC_CODEGEN);
}

/* ---- bench: `test_link bench` ------------------------------------------------ */

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* CPU time of this process and its waited-for children (the linker), ms:
 * steadier than wall time on a loaded machine. */
static double
cpu_ms(void)
{
	struct rusage s, c;
	getrusage(RUSAGE_SELF, &s);
	getrusage(RUSAGE_CHILDREN, &c);
	return (double)(s.ru_utime.tv_sec + s.ru_stime.tv_sec + c.ru_utime.tv_sec +
	                c.ru_stime.tv_sec) *
	           1e3 +
	       (double)(s.ru_utime.tv_usec + s.ru_stime.tv_usec + c.ru_utime.tv_usec +
	                c.ru_stime.tv_usec) /
	           1e3;
}

static void
bench(void)
{
	KcTarget t;
	KcErr err = {0};
	unsigned char *obj = NULL, *so = NULL;
	size_t len = 0, n = 0;
	LinkOptions o = {0};

	kc_target_host(&t, &err);
	o.triple = t.triple;
	for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
		if (!make_object(&specs[si], &t, &obj, &len))
			continue;
		int64_t t0 = kc_now_us();
		for (int i = 0; i < 1000; i++) {
			link_elf(obj, len, &so, &n, &err);
			free(so);
		}
		double in_us = (double)(kc_now_us() - t0) / 1000.0;
		o.linker = "ld";
		t0 = kc_now_us();
		for (int i = 0; i < 100; i++) {
			link_shared(obj, len, &o, &so, &n, &err);
			free(so);
		}
		double ld_us = (double)(kc_now_us() - t0) / 100.0;
		printf("# %-24s object %6zu B: in-process %7.1f us/link, ld.bfd %8.1f us/link\n",
		       specs[si].name, len, in_us, ld_us);
		free(obj);
	}
	/* whole compiles, median of 31 per linker, the two interleaved so that
	 * load from other processes hits both alike */
	static const char *const linkers[] = {"ld", NULL};
	static const int which[] = {0, 1, 4};
	for (size_t wi = 0; wi < sizeof which / sizeof which[0]; wi++) {
		double c[2][31], l[2][31], u[2][31];
		for (int i = 0; i < 31; i++)
			for (int li = 0; li < 2; li++) {
				KcArtifact a = {0};
				double u0 = cpu_ms();
				compile_with(&specs[which[wi]], &t, linkers[li], &a, &err);
				u[li][i] = cpu_ms() - u0;
				c[li][i] = a.compile_ms;
				l[li][i] = a.link_ms;
				kc_artifact_free(&a);
			}
		for (int li = 0; li < 2; li++) {
			qsort(c[li], 31, sizeof c[li][0], cmp_double);
			qsort(l[li], 31, sizeof l[li][0], cmp_double);
			qsort(u[li], 31, sizeof u[li][0], cmp_double);
			printf("# kc_compile %-22s (cpu %s, linker %-9s): median %6.2f ms "
			       "(link %6.3f ms), min %6.2f, max %6.2f; CPU median %6.2f ms\n",
			       specs[which[wi]].name, t.cpu,
			       linkers[li] ? linkers[li] : "automatic", c[li][15], l[li][15],
			       c[li][0], c[li][30], u[li][15]);
		}
	}
}

int
main(int argc, char **argv)
{
	kc_compiler_init();
	if (argc > 1 && strcmp(argv[1], "bench") == 0) {
		bench();
		return 0;
	}
	t_sub("same_as_ld", same_as_ld);
	t_sub("malformed", malformed);
	t_sub("fallback", fallback);
	return t_done();
}
