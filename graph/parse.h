/* parse.h - what parse.c and infer.c share, private to graph/: the
 * parser's state, the attrs of the op being read, and the helpers both
 * use. One Parser per kc_parse call, on its stack; everything it
 * allocates is in the context arena.
 */
#ifndef KCS_GRAPH_PARSE_H
#define KCS_GRAPH_PARSE_H

#include <cjson/cJSON.h>

#include "graph.h"

#define PTR_MAX 128

/* A name table entry; a name is rebound after Assign(dst, ...), so the key
 * is not the value's own tensor_name. */
typedef struct NameEnt {
	const char *name;
	IrValue *v;
	IrValue *input; /* the kernel input first bound to the name, if any */
} NameEnt;

typedef struct Parser {
	Arena *a;
	KcErr *err;
	KcLimits lim;
	IrGraph *g;
	int maxvalues, maxnodes;
	NameEnt *tab; /* tensor_name -> value, open addressing */
	unsigned tabmask;
} Parser;

/* The attrs some op reads; every other name is noise. */
#define PARSE_KNOWN_ATTRS(X)                                                                       \
	X(axis)                                                                                    \
	X(keep_dims)                                                                               \
	X(perm)                                                                                    \
	X(multiples)                                                                               \
	X(begin)                                                                                   \
	X(end)                                                                                     \
	X(strides)                                                                                 \
	X(depth)                                                                                   \
	X(transpose_a)                                                                             \
	X(transpose_b)                                                                             \
	X(begin_mask)                                                                              \
	X(end_mask)                                                                                \
	X(ellipsis_mask)                                                                           \
	X(new_axis_mask)                                                                           \
	X(shrink_axis_mask)                                                                        \
	X(stride)                                                                                  \
	X(dilation)                                                                                \
	X(pad_list)                                                                                \
	X(pad)                                                                                     \
	X(pad_mode)                                                                                \
	X(kernel_size)                                                                             \
	X(group)                                                                                   \
	X(groups)                                                                                  \
	X(out_channel)                                                                             \
	X(format)                                                                                  \
	X(data_format)                                                                             \
	X(exclusive)                                                                               \
	X(reverse)                                                                                 \
	X(output_type)                                                                             \
	X(global)                                                                                  \
	X(pool_type)                                                                               \
	X(data_layout)                                                                             \
	X(round_mode)
enum {
#define X(n) PARSE_ATTR_##n,
	PARSE_KNOWN_ATTRS(X)
#undef X
	    PARSE_NKNOWN
};

typedef struct OpAttrs {
	const cJSON *dst_type, *shape;
	char dst_where[PTR_MAX], shape_where[PTR_MAX];
	const cJSON *val[PARSE_NKNOWN]; /* by known_attrs index; NULL when absent */
	char where[PARSE_NKNOWN][PTR_MAX];
	const char *in0_format; /* the "format" of the op's first input tensor */
	char in0_where[PTR_MAX];
} OpAttrs;

/* parse.c */
/* Stores x into constant v as dtype dt; false if x is not representable
 * (a fraction or out of range for an integer dtype). */
bool parse_const_store(IrValue *v, KcDtype dt, double x);
double parse_const_num(const IrValue *v); /* a scalar constant's value */
bool parse_same_shape(const IrValue *a, const IrValue *b);
/* The value of attr `name` (one of PARSE_KNOWN_ATTRS) or NULL, and its
 * JSON pointer in *where. */
const cJSON *parse_attr_get(const OpAttrs *oa, const char *name, const char **where);
/* Does a dst_type attr name dtype dt? */
bool parse_dst_type_matches(const cJSON *x, KcDtype dt);

/* infer.c */
/* The result dtype and shape of nd (checked against decl, the value the
 * file declares), or a request error at w_in. */
KcStatus parse_infer(Parser *p, IrNode *nd, const IrValue *decl, const OpAttrs *oa,
                     const char *w_in);

#endif /* KCS_GRAPH_PARSE_H */
