/* compiler.h - the kcsd compiler: composite JSON in, code object out.
 *
 * One request = one CompileCtx. Everything a request allocates (the parsed
 * graph, the canonical form, schedules, the loop nest, dumps) lives in the
 * context's arena and dies with compile_ctx_free(). Each kc_compile() call
 * creates and disposes its own LLVMContext, so any number of threads may
 * compile at once on distinct contexts. There are no mutable globals here.
 *
 * Typical use (what api/ does for POST /v1/compile):
 *
 *   CompileCtx *c = compile_ctx_new();
 *   kc_parse(c, body, len, &limits, &g, &err);            400/413/422
 *   kc_target_resolve(name, &tgt, &err) or kc_target_from_graph(g, &tgt, &err)
 *   kc_workload(c, g, &wl);                               canonical form + key
 *   kc_schedule_default(c, g, &tgt, &s) or kc_schedule_from_json(...)
 *   kc_kernel_id(&wl.key, &tgt, s, build_id, &kid);
 *   kc_compile(c, g, &tgt, s, &opts, &art, &err);         object bytes + IR
 *   kc_artifact_free(&art); compile_ctx_free(c);
 */
#ifndef KCS_COMPILER_H
#define KCS_COMPILER_H

#include "common.h"

/* Version of the canonical workload serialisation; it is the first field of
 * the canonical form, so bumping it changes every workload_key on purpose. */
#define KC_WORKLOAD_FORMAT 1
/* Version of the schedule knob schema ("kcs-schedule-v1"). */
#define KC_SCHEDULE_FORMAT "kcs-schedule-v1"
/* The CPU calling convention of every object (docs/abi.md). */
#define KC_CPU_ABI "kcs-cpu-v1"
#define KC_MAX_RANK 8

typedef struct CompileCtx CompileCtx; /* opaque; one per request */
typedef struct IrGraph KcGraph;       /* opaque parsed graph */
typedef struct KcSchedule KcSchedule; /* opaque schedule (template + knobs) */

/* Client-controlled sizes, checked while parsing, before anything is
 * allocated from them. Zero fields take the defaults below. */
typedef struct KcLimits {
	int max_ops;          /* op_desc entries (default 4096) */
	int max_tensors;      /* kernel inputs + outputs (default 1024) */
	int max_rank;         /* dims per tensor (default and maximum KC_MAX_RANK) */
	int64_t max_elements; /* elements per tensor (default 1<<31) */

	/* The work budget of one compile, checked by kc_compile as the passes
	 * run (KC_WORK_BUDGET, 422 above, naming the pass and the limit);
	 * kc_parse records it with the graph. The defaults scale with max_ops. */
	int64_t max_work_nodes;  /* graph or expression nodes one pass visits
	                          * (default 4096 x max_ops) */
	int64_t max_work_stages; /* loop-nest stages (default 2 x max_ops) */
	int64_t max_work_insns;  /* LLVM instructions of the module, as emitted
	                          * and as optimised (default 64 x max_ops) */

	/* The JSON pre-scan (kc_json_scan), run on the text before any tree
	 * is built: over either bound is KC_TOO_LARGE naming "body". */
	int64_t max_json_tokens; /* tokens of the document (default KC_JSON_TOKENS) */
	int max_json_depth;      /* nesting of arrays and objects (default KC_JSON_DEPTH) */
} KcLimits;
/* About twice the tokens of the densest real composite file scaled to
 * 1 MiB (it has a token per 8 bytes), half of what 1 MiB of "[0,0,...]"
 * has. */
#define KC_JSON_TOKENS 262144
/* Composite files nest 7 deep; constants of the largest rank add 8. */
#define KC_JSON_DEPTH 64

/* Which code generator a target's row belongs to (targets.def BACKEND). */
typedef enum KcBackendKind {
	KC_BACKEND_CPU, /* LLVM x86-64 / AArch64, the kcs-cpu-v1 ABI */
} KcBackendKind;

/* A fully resolved code-generation target. `name` is canonical: aliases
 * ("cpu", "x86_64+avx2") are resolved before anything is keyed or stored;
 * kernel ids hash name, triple, cpu and features. The fields after
 * `features` come from the CPU's row of targets.def; when `features` is
 * not empty they are derived again from the effective feature set (the
 * CPU's LLVM 19 features with the explicit ones applied, implications
 * included: kc_target_features), by the rules targets.def states. */
typedef struct KcTarget {
	char name[1024];     /* e.g. "x86_64-skylake-avx512" or "x86_64-x86-64+avx2+fma" */
	char triple[64];     /* e.g. "x86_64-unknown-linux-gnu" */
	char cpu[64];        /* LLVM CPU name, e.g. "skylake-avx512", "x86-64" */
	char features[1024]; /* explicit LLVM feature string, e.g. "+avx2,+fma" */
	KcBackendKind backend;
	char isa_level[16]; /* "x86-64-v1".."x86-64-v4" ("x86-32": no 64-bit
	                     * mode); "armv8-a", "armv8.2-a", "armv9-a", ... */
	int vector_width;   /* float32 lanes of the default schedule's vectors:
	                     * 16 (512-bit AVX-512), 8 (AVX), 4 (SSE, NEON) */
	int vector_regs;    /* vector registers the GEMM micro-tile may fill */
	bool native_half;   /* float32 <-> float16 in hardware (x86 F16C;
	                     * AArch64 base FP) */
	int warp_size;      /* threads per warp; 0 on CPUs */
} KcTarget;

/* Per-argument metadata of the kernel ABI (inputs, then outputs). */
typedef struct KcArgInfo {
	int index;
	bool is_output;
	const char *tensor_name; /* as written in the request */
	const char *dtype;       /* composite spelling: "float32", "bool", ... */
	int rank;
	const int64_t *shape; /* rank entries; valid while the CompileCtx lives */
	int writes_input;     /* an output yielded by Assign/InplaceAssign: the
	                       * kernel input the kernel writes in place; else -1 */
} KcArgInfo;

/* Workload identity: the canonical serialisation and its SHA-256. */
typedef struct KcWorkload {
	const char *canonical; /* NUL-terminated JSON, in the context arena */
	size_t canonical_len;
	KcDigest key;
} KcWorkload;

/* The passes that write a dump section (passes.def), in pipeline order. */
typedef enum KcPass {
#define P(e, name) KC_PASS_##e,
#include "passes.def"
#undef P
	KC_PASS_COUNT
} KcPass;

/* How to build; zero fields take defaults. */
/* The system linker run somewhere else than in a child of this process
 * (see KcCompileOptions.system_link): links obj for triple with linker
 * (NULL or "": the default) in a directory under tmpdir, as
 * kc_link_system does. */
typedef KcStatus (*KcSystemLinkFn)(void *ctx, const unsigned char *obj, size_t obj_len,
                                   const char *triple, const char *linker, const char *tmpdir,
                                   unsigned char **out, size_t *out_len, KcErr *err);

typedef struct KcCompileOptions {
	const char *linker; /* linker driver path (default "ld", see docs) */
	const char *tmpdir; /* scratch directory (default $TMPDIR or /tmp) */
	/* NULL: a link that needs the system linker (AArch64, or what the
	 * in-process linker cannot do) spawns it from this process. Else it
	 * goes through this call (kcsd-worker: its link helper, the one
	 * process of a worker that may start programs). */
	KcSystemLinkFn system_link;
	void *system_link_ctx;
	bool want_ir;         /* fill KcArtifact.ir with the optimised IR */
	bool verify;          /* run the IR verifiers after each pass */
	KcBuf *dump;          /* if set, each pass appends "== name ==\n" and
	                       * its printable dump, in KcPass order */
	unsigned dump_passes; /* with dump: the passes to dump, bit (1u << KcPass)
	                       * each; 0: every pass */
} KcCompileOptions;

/* A compiled kernel. Buffers are malloc'd and owned by the artifact. */
typedef struct KcArtifact {
	char symbol[160];      /* exported entry point */
	unsigned char *object; /* ELF shared object bytes */
	size_t object_len;
	char *ir; /* optimised LLVM IR text, or NULL */
	size_t ir_len;
	double compile_ms; /* wall time of kc_compile */
	double link_ms;    /* part of compile_ms spent linking */
} KcArtifact;

/* ---- process-wide set-up (server/main.c, before threads) -------------- */

/* Initialise the LLVM targets kcsd can emit (x86, AArch64). Call once,
 * before any other function here and before threads start. */
void kc_compiler_init(void);
/* "19.1.7" */
const char *kc_llvm_version(void);

/* ---- contexts ----------------------------------------------------------- */
CompileCtx *compile_ctx_new(void);
void compile_ctx_free(CompileCtx *c); /* NULL allowed; frees everything */
Arena *compile_ctx_arena(CompileCtx *c);

/* ---- parsing -------------------------------------------------------------
 * Parse and validate a composite JSON document (akg-format.md) of `len`
 * bytes. Returns KC_OK and sets *out (owned by c), or:
 *   KC_BAD_JSON          not JSON (400)
 *   KC_TOO_LARGE         over a KcLimits bound (413); over max_json_tokens
 *                        or max_json_depth (where "body"), found by
 *                        kc_json_scan before the text is parsed
 *   KC_BAD_GRAPH, KC_UNSUPPORTED_OP, KC_UNSUPPORTED_DTYPE, KC_BAD_SHAPE,
 *   KC_UNSUPPORTED       invalid or unsupported graph (422)
 * with err->where a JSON pointer into the document. */
KcStatus kc_parse(CompileCtx *c, const char *json, size_t len, const KcLimits *lim, KcGraph **out,
                  KcErr *err);

const char *kc_graph_name(const KcGraph *g); /* the body's "op" */
int kc_graph_nargs(const KcGraph *g);        /* inputs + outputs */
void kc_graph_arg(const KcGraph *g, int i, KcArgInfo *out);

/* Canonical form and workload_key of a parsed graph: invariant under tensor
 * renaming, reordering of independent ops, attr order and noise keys;
 * sensitive to ops, shapes, dtypes, constants, meaningful attrs and the
 * order of kernel inputs and outputs. Never fails. */
void kc_workload(CompileCtx *c, const KcGraph *g, KcWorkload *out);
/* The graph of a canonical form (kc_workload's `canonical`, as the cache
 * stores it), named `name` (the body's "op": it sets the kernel symbol):
 * the form written back as a composite document and read by kc_parse with
 * `lim`. Tensors are named as the form names them (i<k>, n<k>.<j>), the
 * ops are in the form's order but for an Assign into a kernel input, which
 * follows the input's other readers. KC_OK only when the graph's own canonical
 * form is byte for byte `canonical`; else KC_UNSUPPORTED (KC_TOO_LARGE
 * over a limit) with a message. Sets *out (owned by c) on success. */
KcStatus kc_parse_workload(CompileCtx *c, const char *canonical, size_t len, const char *name,
                           const KcLimits *lim, KcGraph **out, KcErr *err);

/* ---- targets ------------------------------------------------------------
 * Resolve a target name: "cpu" (this host), "x86_64[-<cpu>][+feat...]",
 * "aarch64[-<cpu>][+feat...]". KC_BAD_TARGET for anything else, an unknown
 * LLVM CPU, an unknown feature, or an x86 CPU without 64-bit mode (i386,
 * pentium4, ...: LLVM aborts on x86_64 code for them) unless +64bit is
 * named. Thread-safe. */
KcStatus kc_target_resolve(const char *name, KcTarget *out, KcErr *err);
/* The target a body asks for through `process` and `target_info` (v1+),
 * used when the request has no ?target=. KC_BAD_TARGET for GPU/Ascend
 * processes (not supported yet). */
KcStatus kc_target_from_graph(const KcGraph *g, KcTarget *out, KcErr *err);
/* Name of the host target, resolved (same as kc_target_resolve("cpu")):
 * "<arch>-<LLVM's host CPU name, or the arch's default CPU (x86-64,
 * generic) when targets.def lacks it>+<every feature LLVM reports enabled
 * on this host>", e.g. "x86_64-znver4+64bit+adx+...+xsaves". Its columns
 * come from that CPU's row plus those features. Disabled host features are
 * not in the name, so a VM that masks features its CPU model implies
 * still gets the model's. */
KcStatus kc_target_host(KcTarget *out, KcErr *err);
/* Set t's backend, isa_level, vector_width, vector_regs, native_half and
 * warp_size from t->triple, t->cpu and t->features (items "+name" or
 * "-name", applied in order; a "-" item also drops what implies it, as
 * LLVM does). For a KcTarget filled by hand (e.g. from stored metadata);
 * the resolvers call it. KC_BAD_TARGET for an unknown triple, CPU or
 * feature item. */
KcStatus kc_target_fill(KcTarget *t, KcErr *err);
/* Writes t's effective LLVM feature list ("+a,+b,...", table order) to
 * buf like snprintf (at most cap bytes, NUL-terminated when cap > 0) and
 * returns its full length; 0 for a target kc_target_fill would refuse. */
size_t kc_target_features(const KcTarget *t, char *buf, size_t cap);

/* ---- schedules ----------------------------------------------------------
 * The default schedule for g on t (the template chosen by classifying the
 * graph, with its default knobs). Never fails. */
KcSchedule *kc_schedule_default(CompileCtx *c, const KcGraph *g, const KcTarget *t);
/* Validate a schedule record's template name and knobs (a JSON object as
 * text; NULL or "": the defaults) against g and t, knob by knob as
 * knobs.def says, then the template's rules between knobs.
 * KC_BAD_SCHEDULE (422) if it cannot apply, with err->where "/template",
 * "/knobs" or the offending member ("/knobs/unroll",
 * "/knobs/stages/0/tile"). g NULL (a workload this process has not seen):
 * the template must be a known one and "stages" is not counted. */
KcStatus kc_schedule_from_json(CompileCtx *c, const KcGraph *g, const KcTarget *t,
                               const char *template_name, const char *knobs_json, KcSchedule **out,
                               KcErr *err);
const char *kc_schedule_template(const KcSchedule *s);
/* Canonical knobs JSON object (sorted keys, no spaces), in the arena. */
const char *kc_schedule_knobs_json(const KcSchedule *s);

/* ---- templates and knobs (templates.def, knobs.def), read-only ----------
 * The search space of a schedule, for tuners and the docs generator. The
 * tables are const data: any thread may read them at any time. */
typedef enum KcTemplate {
#define X(e, name) KC_TEMPLATE_##e,
#include "templates.def"
#undef X
	KC_TEMPLATE_COUNT
} KcTemplate;
/* "injective", ...; NULL for a value out of range. */
const char *kc_template_name(KcTemplate t);

typedef enum KcKnobType {
	KC_KNOB_INT,  /* a JSON integer in [min, max] */
	KC_KNOB_POW2, /* a JSON integer in [min, max] that is a power of two */
	KC_KNOB_BOOL, /* true or false (stored as 1 or 0; min 0, max 1) */
} KcKnobType;

/* KcKnobInfo.special: values below min that a knob accepts as well. */
enum {
	KC_KNOB_AUTO = 1u << 0, /* 0: the compiler chooses (per stage or from the shape) */
	KC_KNOB_OFF = 1u << 1,  /* 1: the transform is off */
};

/* One row of knobs.def. */
typedef struct KcKnobInfo {
	const char *name; /* JSON key */
	KcKnobType type;
	int64_t min, max;    /* the regular range */
	unsigned special;    /* KC_KNOB_AUTO | KC_KNOB_OFF */
	int64_t dflt;        /* the default, unless target_default */
	bool target_default; /* the default depends on the target */
	unsigned templates;  /* bit (1u << KcTemplate) for each template that takes it */
	const char *backend; /* the target class it applies to: "cpu" */
	bool always_printed; /* in canonical knobs even at dflt (else only when set) */
	const char *help;    /* one line of markdown */
} KcKnobInfo;

/* Number of knobs, and knob i (0 <= i < kc_knob_count(); NULL otherwise).
 * The pointer is to static const data. */
int kc_knob_count(void);
const KcKnobInfo *kc_knob_info(int i);
/* The knob called name, or NULL. */
const KcKnobInfo *kc_knob_find(const char *name);
/* Whether v is a value k accepts (its range and special values; a bool
 * takes 0 and 1). Cross-knob rules are the template's (sched.c). */
bool kc_knob_accepts(const KcKnobInfo *k, int64_t v);
/* The accepted values in words, e.g. "0 (auto) or an integer from 1 to 16":
 * the wording of the KC_BAD_SCHEDULE messages and of docs/api.md. Always
 * NUL-terminates buf (cap >= 1). */
void kc_knob_describe(const KcKnobInfo *k, char *buf, size_t cap);

/* ---- schedule records (schedule_record.c) -------------------------------
 * The kcs-schedule-v1 record: what PUT /v1/schedules stores, export and
 * import move between daemons, and a compile reads back. One checker for
 * all of them, so a record is accepted or refused the same way everywhere:
 *   {"format": "kcs-schedule-v1", "workload_key": hex64,
 *    "target": str, "template": str, "knobs": {...},
 *    "measured": {"seconds": num > 0, "gflops": num >= 0 | null} | null,
 *    "provenance": {"by": str, "at": str, "kcsd_version": str} | null}
 * measured and provenance may be absent, each provenance field too; other
 * members are ignored. */
typedef struct KcRecordCheck {
	/* JSON pointer of the record in the caller's document ("" for a PUT
	 * body, "/record" in an import line): prefixes every err->where. */
	const char *where;
	/* The key the record must name (NULL: any 64-hex key), and where the
	 * caller got it, for the message ("the path"). */
	const KcDigest *workload_key;
	const char *key_from;
	/* Called once format and workload_key are checked, before the rest
	 * (NULL: none): a non-KC_OK status, with err set, refuses the record
	 * (PUT's "compile it once first" 404). */
	KcStatus (*key_known)(void *arg, const KcDigest *key, KcErr *err);
	void *key_known_arg;
	/* The target: `target` when the caller has resolved it already (the
	 * record's "target" must then be its name); else target_query (a
	 * ?target=, errors at "?target") when set, else the record's
	 * "target", resolved here. takes_query: the messages name ?target=. */
	const KcTarget *target;
	const char *target_query;
	bool takes_query;
	/* The workload's graph when the caller has it: the template and knobs
	 * are checked against it; NULL: against the template and target only
	 * (kc_schedule_from_json). */
	const KcGraph *graph;
} KcRecordCheck;

/* A checked record. Strings and the schedule live in the CompileCtx. */
typedef struct KcScheduleRecord {
	KcDigest workload_key;
	KcTarget target;        /* resolved: name is canonical */
	KcSchedule *schedule;   /* template and canonical knobs */
	const char *measured;   /* compact JSON object, or NULL (null or absent) */
	const char *provenance; /* compact JSON object, or NULL (null or absent) */
	const char *source;     /* printed as "source" when set (compile replies) */
} KcScheduleRecord;

/* Check the record in json[0, len) as chk says and fill *out. Returns
 * KC_OK, or KC_BAD_JSON (not JSON), KC_BAD_SCHEDULE (a field; err->where
 * its JSON pointer, e.g. "/knobs/unroll"), KC_BAD_TARGET (from
 * kc_target_resolve, where "/target" or "?target"), or what key_known
 * returned. Thread-safe on distinct contexts. */
KcStatus kc_schedule_record_check(CompileCtx *c, const char *json, size_t len,
                                  const KcRecordCheck *chk, KcScheduleRecord *out, KcErr *err);
/* Append r as a stored record (compact, members in the order above; a NULL
 * measured or provenance as null), then "source" when set. */
void kc_schedule_record_print(const KcScheduleRecord *r, KcBuf *out);

/* kernel_id = SHA-256 of (workload key, resolved target, template, knobs,
 * build id, LLVM version). */
void kc_kernel_id(const KcDigest *workload_key, const KcTarget *t, const KcSchedule *s,
                  const char *build_id, KcDigest *out);

/* ---- compiling ----------------------------------------------------------
 * Lower, schedule, emit LLVM IR, optimise, emit an object and link a shared
 * object exporting `symbol` with the kcs-cpu-v1 ABI. KC_CODEGEN (500) on an
 * internal failure, KC_UNSUPPORTED (422) for what the backend cannot do
 * yet, KC_WORK_BUDGET (422) when a pass's work passes the budget kc_parse
 * recorded for g (a graph-side count trips before LLVM starts). On failure
 * *out is left empty. Each dump section ends with a "; work:" line: the
 * nodes each of its passes visited, the stages, the LLVM instructions. */
KcStatus kc_compile(CompileCtx *c, const KcGraph *g, const KcTarget *t, const KcSchedule *s,
                    const KcCompileOptions *opts, KcArtifact *out, KcErr *err);
void kc_artifact_free(KcArtifact *a); /* NULL allowed */

/* The dump section name of a pass ("graph", "emit-llvm", ...; passes.def).
 * p must be below KC_PASS_COUNT. */
const char *kc_pass_name(KcPass p);
/* The pass named by the `len` bytes at `name` (not NUL-terminated), or
 * KC_PASS_COUNT when no pass has that name. */
KcPass kc_pass_lookup(const char *name, size_t len);

/* The system linker alone, spawned from this process (kcsd-worker's link
 * helper serves KcCompileOptions.system_link with it): ld.lld-19 for an
 * aarch64 triple, else linker (NULL or "": "ld"), in a directory made
 * under tmpdir (NULL: $TMPDIR or /tmp) and removed. *out is malloc'd. */
KcStatus kc_link_system(const unsigned char *obj, size_t obj_len, const char *triple,
                        const char *linker, const char *tmpdir, unsigned char **out,
                        size_t *out_len, KcErr *err);

/* Assembly for stored optimised IR text (what GET /v1/kernels/{id}/asm
 * serves). Appends to *out. */
KcStatus kc_ir_to_asm(const char *ir, size_t ir_len, const KcTarget *t, KcBuf *out, KcErr *err);

/* ---- reference interpreter (interp.c) -----------------------------------
 * Evaluates g op by op on whole tensors, sharing nothing with the backend:
 * floats in double with each op's result rounded to its declared dtype,
 * integers exact (x / 0 == 0, float -> int truncates and saturates, NaN ->
 * 0, Round half away from zero). `args` has the kcs-cpu-v1 layout (inputs,
 * then outputs; contiguous row-major, docs/abi.md); outputs are fully
 * written, and, as the kernel does, Assign/InplaceAssign write their
 * source into the destination input's buffer (all inputs are read first;
 * pass copies if the caller still needs the originals). Live intermediate memory is bounded by
 * max_bytes (0: no bound): KC_TOO_LARGE (413) above it. Thread-safe on distinct contexts. */
KcStatus kc_interp(CompileCtx *c, const KcGraph *g, void *const *args, size_t max_bytes,
                   KcErr *err);
/* kc_interp that also fills ties[j] (one byte per element of output j;
 * `ties` NULL: none) with 1 where the element depends on a float
 * comparison whose operands were within rounding distance (1e-6
 * relative, 2e-3 with float16/bfloat16 upstream): there a correct kernel
 * may legitimately differ, so comparisons skip those elements. */
KcStatus kc_interp_ties(CompileCtx *c, const KcGraph *g, void *const *args, size_t max_bytes,
                        uint8_t *const *ties, KcErr *err);
/* True if a float16/bfloat16 value is upstream of kernel output `output`
 * (0-based among the outputs): comparisons then use the 1e-2 tolerance. */
bool kc_interp_half_upstream(CompileCtx *c, const KcGraph *g, int output);
/* Fills the input buffers args[0..ninputs) with seeded pseudo-random data:
 * bools 0/1; integers in [-5, 5] ([1, 5] when unsigned or when they reach a
 * divisor); floats in [-2, 2) ([0.5, 2) when they reach a Log, Sqrt, Rsqrt,
 * Pow or Reciprocal operand or a divisor), rounded to their dtype; Gather
 * and OneHot indices (and what they are cast or moved from) in [0, extent). */
void kc_interp_random_inputs(CompileCtx *c, const KcGraph *g, uint64_t seed, void *const *args);
/* The same values a chunk at a time, straight into the caller's memory (a
 * window of a file): ask for every input's elements in order, input 0
 * first; n elements of `input` go to dst, densely in its dtype. The
 * generator lives in c's arena. */
typedef struct KcRandomInputs KcRandomInputs;
KcRandomInputs *kc_interp_random_begin(CompileCtx *c, const KcGraph *g, uint64_t seed);
void kc_interp_random_next(KcRandomInputs *r, int input, int64_t n, void *dst);

/* ---- MindSpore's kernel-name hash (mshash.c) ----------------------------
 * libstdc++ std::hash<std::string> (_Hash_bytes, MurmurHash2-64 variant)
 * of `len` bytes with `seed` (std::hash uses 0xc70f6907). */
uint64_t kc_hash_bytes(const void *p, size_t len, uint64_t seed);
/* The number MindSpore appends to a kernel name (akg-format.md 5): the
 * hash of the body re-serialised as nlohmann::json::dump() does (compact,
 * sorted keys), without the keys added after hashing (id, op, platform,
 * composite, composite_graph, node_name, op_full_name; for version-0 files
 * also compute_capability, and process when there is no
 * compute_capability) and with every "ptr_address" pair cut out (its comma
 * left behind). Numbers keep their written digits when those are a
 * shortest round-trip form, as nlohmann writes them. KC_BAD_JSON if the
 * body is not JSON (or nested deeper than 256). Thread-safe. */
KcStatus kc_ms_hash(const char *json, size_t len, uint64_t *out, KcErr *err);

#endif /* KCS_COMPILER_H */
