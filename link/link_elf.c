/* link_elf.c - in-process ELF linker: one LLVM x86-64 object -> shared object.
 *
 * Takes what kc_compile's objects contain: allocated PROGBITS/NOBITS/unwind
 * sections (.text*, .rodata*, .eh_frame, .data.rel.ro*, .data, .bss), one
 * symbol table, RELA relocations PC32, PLT32, PC64, GOTPCREL(X),
 * REX_GOTPCRELX and 64, and calls to undefined functions (libm's floorf...)
 * through 16-byte PLT stubs and a GOT filled by GLOB_DAT at load time (as
 * ld -z now; DT_NEEDED libm.so.6). Output: ET_DYN, headers + .gnu.hash/
 * .dynsym/.dynstr/.rela.dyn + rodata in an R segment, code in R+X,
 * .data.rel.ro/.dynamic/.got in RW under PT_GNU_RELRO, a non-executable
 * PT_GNU_STACK; file offset == address; globals bind locally (-Bsymbolic).
 * Anything else (TLS, IFUNC, init arrays, other relocations or machines) is
 * KC_UNSUPPORTED, for link.c to hand to ld; a malformed object is
 * KC_CODEGEN. Every offset, size and index read from the object is checked.
 */
#include <elf.h>
#include <stdlib.h>
#include <string.h>

#include "link.h"

#define PAGE 4096u
#define MAX_NOBITS (16u << 20) /* zero-filled bytes we are willing to write */
#define MAX_OUT (64u << 20)    /* bytes of shared object */
#define MAX_NAME 4096u         /* bytes of one section or dynamic symbol name */
#define FIRST_OUT_SEC 5        /* output index of the first input section */
#define PLT_ENTRY 16u
#define BLOOM_SHIFT 26u
#ifndef SHT_X86_64_UNWIND
#define SHT_X86_64_UNWIND 0x70000001
#endif
#ifndef SHT_LLVM_ADDRSIG
#define SHT_LLVM_ADDRSIG 0x6fff4c03
#endif

/* Output classes of allocated input sections, in segment order. */
enum { CLS_NONE, CLS_RO, CLS_TEXT, CLS_RELRO, CLS_DATA, CLS_COUNT };

typedef struct DefSym {
	uint32_t hash, bucket;
	size_t sym; /* symtab index */
} DefSym;

typedef struct Link {
	const unsigned char *obj;
	size_t len;
	Elf64_Ehdr eh;
	Elf64_Shdr *sh; /* e_shnum copies (the object may be unaligned) */
	size_t nsh;
	const char *shstr; /* section names, shstrsz bytes, NUL-terminated */
	size_t shstrsz;
	unsigned char *cls; /* per section: CLS_* */
	uint64_t *addr;     /* per section: output address (== file offset) */
	uint16_t *outix;    /* per section: output section index */
	Elf64_Sym *sym;     /* symtab copy */
	size_t nsym, symtab;
	const char *str; /* symbol names, strsz bytes, NUL-terminated */
	size_t strsz;
	uint32_t *dynidx; /* per symbol: .dynsym index, 0 = none */
	uint32_t *got;    /* per symbol: GOT slot + 1, 0 = none */
	uint32_t *plt;    /* per symbol: PLT slot + 1, 0 = none */
	size_t ngot, nplt, nrel, nundef, ndef;
	size_t *gotsym; /* GOT slot -> symbol */
	size_t *pltsym; /* PLT slot -> symbol */
	DefSym *defs;   /* exported symbols in .dynsym order */
	size_t nbucket;
	KcErr *err;
} Link;

/* Output layout: offsets (== addresses) and sizes. */
typedef struct Layout {
	uint64_t hash, hashsz, dynsym, dynstr, dynstrsz, rela, relasz;
	uint64_t text, plt, text_end, ro_end;
	uint64_t rw, dynamic, dynamicsz, got, relro_end, data, data_end;
	uint64_t shstr, shstrsz, symtab, strtab, strtabsz, shoff, total;
	size_t nphdr, nshdr, ndyn, nsymtab, nlocal;
	bool has_data;
} Layout;

static KcStatus
bad(Link *l, const char *what, uint64_t v)
{
	return kc_fail(l->err, KC_CODEGEN, "link", "malformed object: %s (%llu)", what,
	               (unsigned long long)v);
}

static KcStatus
unsupported(Link *l, const char *what, uint64_t v)
{
	return kc_fail(l->err, KC_UNSUPPORTED, "link", "in-process linker: unsupported %s (%llu)",
	               what, (unsigned long long)v);
}

static uint64_t
align_up(uint64_t v, uint64_t a)
{
	return a > 1 ? (v + a - 1) & ~(a - 1) : v;
}

static uint32_t
gnu_hash(const char *s)
{
	uint32_t h = 5381;
	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

static bool
in_bounds(uint64_t off, uint64_t size, uint64_t len)
{
	return off <= len && size <= len - off;
}

static const char *
sec_name(const Link *l, size_t i)
{
	return l->sh[i].sh_name < l->shstrsz ? l->shstr + l->sh[i].sh_name : "";
}

/* Header, section table, section names. */
static KcStatus
read_sections(Link *l)
{
	Elf64_Ehdr *eh = &l->eh;

	if (l->len < sizeof *eh)
		return bad(l, "shorter than an ELF header", l->len);
	memcpy(eh, l->obj, sizeof *eh);
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
		return bad(l, "no ELF magic", 0);
	if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
	    eh->e_ident[EI_VERSION] != EV_CURRENT)
		return unsupported(l, "ELF class or byte order", eh->e_ident[EI_CLASS]);
	if (eh->e_type != ET_REL)
		return unsupported(l, "ELF type", eh->e_type);
	if (eh->e_machine != EM_X86_64)
		return unsupported(l, "machine", eh->e_machine);
	if (eh->e_shentsize != sizeof(Elf64_Shdr))
		return bad(l, "section header size", eh->e_shentsize);
	if (eh->e_shnum == 0 || eh->e_shstrndx >= SHN_LORESERVE)
		return unsupported(l, "extended section numbering", eh->e_shnum);
	if (eh->e_shoff > l->len || (l->len - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum)
		return bad(l, "section headers out of bounds", eh->e_shoff);
	if (eh->e_shstrndx >= eh->e_shnum)
		return bad(l, "section name table index", eh->e_shstrndx);
	l->nsh = eh->e_shnum;
	l->sh = kc_xcalloc(l->nsh, sizeof *l->sh);
	memcpy(l->sh, l->obj + eh->e_shoff, l->nsh * sizeof *l->sh);
	for (size_t i = 0; i < l->nsh; i++) {
		const Elf64_Shdr *s = &l->sh[i];
		if (s->sh_type != SHT_NOBITS && s->sh_type != SHT_NULL &&
		    !in_bounds(s->sh_offset, s->sh_size, l->len))
			return bad(l, "section out of bounds", i);
		if (s->sh_addralign & (s->sh_addralign - 1))
			return bad(l, "section alignment", s->sh_addralign);
	}
	const Elf64_Shdr *ss = &l->sh[eh->e_shstrndx];
	if (ss->sh_type != SHT_STRTAB || ss->sh_size == 0 ||
	    l->obj[ss->sh_offset + ss->sh_size - 1] != 0)
		return bad(l, "section name table", eh->e_shstrndx);
	l->shstr = (const char *)l->obj + ss->sh_offset;
	l->shstrsz = ss->sh_size;
	for (size_t i = 0; i < l->nsh; i++)
		if (l->sh[i].sh_name >= l->shstrsz)
			return bad(l, "section name offset", i);
	return KC_OK;
}

/* Which output segment each section goes to, if any. */
static KcStatus
classify(Link *l)
{
	l->cls = kc_xcalloc(l->nsh, 1);
	l->addr = kc_xcalloc(l->nsh, sizeof *l->addr);
	l->outix = kc_xcalloc(l->nsh, sizeof *l->outix);
	l->symtab = 0;
	for (size_t i = 1; i < l->nsh; i++) {
		const Elf64_Shdr *s = &l->sh[i];
		uint64_t f = s->sh_flags;
		switch (s->sh_type) {
		case SHT_SYMTAB:
			if (l->symtab)
				return unsupported(l, "second symbol table", i);
			l->symtab = i;
			continue;
		case SHT_REL: return unsupported(l, "REL (not RELA) section", i);
		case SHT_SYMTAB_SHNDX: return unsupported(l, "extended symbol section indices", i);
		case SHT_INIT_ARRAY:
		case SHT_FINI_ARRAY:
		case SHT_PREINIT_ARRAY: return unsupported(l, "constructor/destructor array", i);
		case SHT_PROGBITS:
		case SHT_NOBITS:
		case SHT_NOTE:
		case SHT_X86_64_UNWIND: break;
		default:
			if (f & SHF_ALLOC)
				return unsupported(l, "allocated section type", s->sh_type);
			continue; /* RELA, STRTAB, GROUP, addrsig ... */
		}
		if (!(f & SHF_ALLOC)) {
			if ((f & SHF_EXECINSTR) && strcmp(sec_name(l, i), ".note.GNU-stack") == 0)
				return unsupported(l, "executable stack", i);
			continue; /* .comment, .note.GNU-stack, debug info */
		}
		if (f & SHF_TLS)
			return unsupported(l, "thread-local section", i);
		if (strnlen(sec_name(l, i), MAX_NAME + 1) > MAX_NAME)
			return unsupported(l, "section name length", i);
		if (s->sh_addralign > PAGE)
			return unsupported(l, "section alignment", s->sh_addralign);
		if (s->sh_type == SHT_NOBITS && s->sh_size > MAX_NOBITS)
			return unsupported(l, "large zero-filled section", s->sh_size);
		if ((f & SHF_EXECINSTR) && (f & SHF_WRITE))
			return unsupported(l, "writable code", i);
		if (f & SHF_EXECINSTR)
			l->cls[i] = CLS_TEXT;
		else if (f & SHF_WRITE)
			l->cls[i] =
			    strncmp(sec_name(l, i), ".data.rel.ro", 12) == 0 ? CLS_RELRO : CLS_DATA;
		else
			l->cls[i] = CLS_RO;
	}
	if (!l->symtab)
		return unsupported(l, "object without a symbol table", 0);
	return KC_OK;
}

/* Symbols: names, the undefined ones and the exported ones. */
static KcStatus
read_symbols(Link *l)
{
	const Elf64_Shdr *s = &l->sh[l->symtab];
	if (s->sh_entsize != sizeof(Elf64_Sym) || s->sh_size % sizeof(Elf64_Sym) != 0 ||
	    s->sh_size == 0)
		return bad(l, "symbol table entry size", s->sh_entsize);
	if (s->sh_link == 0 || s->sh_link >= l->nsh || l->sh[s->sh_link].sh_type != SHT_STRTAB)
		return bad(l, "symbol name table index", s->sh_link);
	const Elf64_Shdr *ss = &l->sh[s->sh_link];
	if (ss->sh_size == 0 || l->obj[ss->sh_offset + ss->sh_size - 1] != 0)
		return bad(l, "symbol name table", s->sh_link);
	l->str = (const char *)l->obj + ss->sh_offset;
	l->strsz = ss->sh_size;
	l->nsym = s->sh_size / sizeof(Elf64_Sym);
	l->sym = kc_xcalloc(l->nsym, sizeof *l->sym);
	memcpy(l->sym, l->obj + s->sh_offset, l->nsym * sizeof *l->sym);
	l->dynidx = kc_xcalloc(l->nsym, sizeof *l->dynidx);
	l->got = kc_xcalloc(l->nsym, sizeof *l->got);
	l->plt = kc_xcalloc(l->nsym, sizeof *l->plt);
	l->defs = kc_xcalloc(l->nsym, sizeof *l->defs);

	for (size_t i = 0; i < l->nsym; i++) {
		const Elf64_Sym *y = &l->sym[i];
		unsigned bind = ELF64_ST_BIND(y->st_info), type = ELF64_ST_TYPE(y->st_info);
		if (y->st_name >= l->strsz)
			return bad(l, "symbol name offset", i);
		if (type == STT_TLS || type == STT_GNU_IFUNC)
			return unsupported(l, "TLS or IFUNC symbol", i);
		if (y->st_shndx == SHN_COMMON)
			return unsupported(l, "common symbol", i);
		if (y->st_shndx >= SHN_LORESERVE && y->st_shndx != SHN_ABS)
			return unsupported(l, "special section index", y->st_shndx);
		if (y->st_shndx != SHN_ABS && y->st_shndx >= l->nsh)
			return bad(l, "symbol section index", i);
		if (bind == STB_LOCAL || i == 0)
			continue;
		if (bind != STB_GLOBAL && bind != STB_WEAK)
			return unsupported(l, "symbol binding", bind);
		if (strnlen(l->str + y->st_name, MAX_NAME + 1) > MAX_NAME)
			return unsupported(l, "symbol name length", i);
		if (y->st_shndx == SHN_UNDEF) {
			if (!l->str[y->st_name])
				return bad(l, "undefined symbol without a name", i);
			/* gcc declares it in every PIC object; only ld defines it */
			if (strcmp(l->str + y->st_name, "_GLOBAL_OFFSET_TABLE_") != 0)
				l->dynidx[i] = (uint32_t)(1 + l->nundef++);
			continue;
		}
		if (y->st_shndx != SHN_ABS && l->cls[y->st_shndx] == CLS_NONE)
			continue; /* defined in a discarded section: not exported */
		unsigned vis = ELF64_ST_VISIBILITY(y->st_other);
		if (vis != STV_DEFAULT && vis != STV_PROTECTED)
			continue;
		if (!l->str[y->st_name])
			continue;
		l->defs[l->ndef].hash = gnu_hash(l->str + y->st_name);
		l->defs[l->ndef].sym = i;
		l->ndef++;
	}
	return KC_OK;
}

static int
cmp_def(const void *a, const void *b)
{
	const DefSym *x = a, *y = b;
	if (x->bucket != y->bucket)
		return x->bucket < y->bucket ? -1 : 1;
	return x->sym < y->sym ? -1 : x->sym > y->sym;
}

/* Exported symbols follow the undefined ones, grouped by hash bucket. */
static void
order_dynsym(Link *l)
{
	l->nbucket = l->ndef ? l->ndef : 1;
	for (size_t i = 0; i < l->ndef; i++)
		l->defs[i].bucket = (uint32_t)(l->defs[i].hash % l->nbucket);
	qsort(l->defs, l->ndef, sizeof *l->defs, cmp_def);
	for (size_t i = 0; i < l->ndef; i++)
		l->dynidx[l->defs[i].sym] = (uint32_t)(1 + l->nundef + i);
}

/* Symbol i is undefined (index 0 is the null symbol, value 0). */
static bool
sym_undef(const Link *l, size_t i)
{
	return i != 0 && l->sym[i].st_shndx == SHN_UNDEF;
}

/* Section ri: *target is the allocated section it relocates, or 0 when it
 * is not a relocation section for one. */
static KcStatus
check_rela_section(Link *l, size_t ri, size_t *target)
{
	const Elf64_Shdr *r = &l->sh[ri];
	*target = 0;
	if (r->sh_type != SHT_RELA)
		return KC_OK;
	if (r->sh_info == 0 || r->sh_info >= l->nsh)
		return bad(l, "relocation target section", ri);
	if (l->cls[r->sh_info] == CLS_NONE)
		return KC_OK; /* applies to a dropped section (debug info) */
	if (r->sh_link != l->symtab)
		return unsupported(l, "relocations against another symbol table", ri);
	if (r->sh_entsize != sizeof(Elf64_Rela) || r->sh_size % sizeof(Elf64_Rela) != 0)
		return bad(l, "relocation entry size", r->sh_entsize);
	if (l->sh[r->sh_info].sh_type == SHT_NOBITS)
		return unsupported(l, "relocations in a zero-filled section", ri);
	*target = r->sh_info;
	return KC_OK;
}

static unsigned
reloc_width(uint32_t type)
{
	switch (type) {
	case R_X86_64_PC32:
	case R_X86_64_PLT32:
	case R_X86_64_GOTPCREL:
	case R_X86_64_GOTPCRELX:
	case R_X86_64_REX_GOTPCRELX: return 4;
	case R_X86_64_64:
	case R_X86_64_PC64: return 8;
	default: return 0;
	}
}

static KcStatus
scan_relocs(Link *l)
{
	l->gotsym = kc_xcalloc(l->nsym, sizeof *l->gotsym);
	l->pltsym = kc_xcalloc(l->nsym, sizeof *l->pltsym);
	for (size_t ri = 1; ri < l->nsh; ri++) {
		size_t tgt;
		KcStatus st = check_rela_section(l, ri, &tgt);
		if (st != KC_OK)
			return st;
		if (!tgt)
			continue;
		const Elf64_Shdr *r = &l->sh[ri];
		size_t n = r->sh_size / sizeof(Elf64_Rela);
		for (size_t k = 0; k < n; k++) {
			Elf64_Rela ra;
			memcpy(&ra, l->obj + r->sh_offset + k * sizeof ra, sizeof ra);
			uint32_t type = (uint32_t)ELF64_R_TYPE(ra.r_info);
			uint64_t si = ELF64_R_SYM(ra.r_info);
			if (type == R_X86_64_NONE)
				continue;
			unsigned w = reloc_width(type);
			if (!w)
				return unsupported(l, "relocation type", type);
			if (si >= l->nsym)
				return bad(l, "relocation symbol index", si);
			if (!in_bounds(ra.r_offset, w, l->sh[tgt].sh_size))
				return bad(l, "relocation offset", ra.r_offset);
			const Elf64_Sym *y = &l->sym[si];
			bool undef = sym_undef(l, si);
			if (undef && ELF64_ST_BIND(y->st_info) == STB_LOCAL)
				return bad(l, "undefined local symbol", si);
			if (undef && !l->dynidx[si])
				return unsupported(l, "reference to _GLOBAL_OFFSET_TABLE_", si);
			if (!undef && si != 0 && y->st_shndx != SHN_ABS &&
			    l->cls[y->st_shndx] == CLS_NONE)
				return unsupported(l, "relocation against a dropped section", si);
			bool absolute = si == 0 || y->st_shndx == SHN_ABS;
			switch (type) {
			case R_X86_64_PC32:
			case R_X86_64_PC64:
				if (undef)
					return unsupported(
					    l, "PC-relative data reference to an undefined symbol",
					    si);
				break;
			case R_X86_64_PLT32:
				if (undef && !l->plt[si]) {
					l->pltsym[l->nplt] = si;
					l->plt[si] = (uint32_t)++l->nplt;
				}
				/* a PLT stub jumps through a GOT slot */
				/* fallthrough */
			case R_X86_64_GOTPCREL:
			case R_X86_64_GOTPCRELX:
			case R_X86_64_REX_GOTPCRELX:
				if (type == R_X86_64_PLT32 && !undef)
					break;
				if (!l->got[si]) {
					l->gotsym[l->ngot] = si;
					l->got[si] = (uint32_t)++l->ngot;
					l->nrel += !absolute;
				}
				break;
			case R_X86_64_64:
				if (l->cls[tgt] != CLS_RELRO && l->cls[tgt] != CLS_DATA)
					return unsupported(
					    l, "absolute address in a read-only section", tgt);
				l->nrel += !absolute;
				break;
			default: KC_ASSERT(0);
			}
		}
	}
	return KC_OK;
}

/* Local in the output: local, or defined with hidden/internal visibility. */
static bool
sym_local(const Elf64_Sym *y)
{
	unsigned vis = ELF64_ST_VISIBILITY(y->st_other);
	return ELF64_ST_BIND(y->st_info) == STB_LOCAL ||
	       (y->st_shndx != SHN_UNDEF && (vis == STV_HIDDEN || vis == STV_INTERNAL));
}

/* Symbol i goes to .symtab (for profilers and debuggers): named functions
 * and data in kept sections, absolute ones, undefined globals; not the
 * assembler's .L labels (as ld). */
static bool
keep_sym(const Link *l, size_t i)
{
	const Elf64_Sym *y = &l->sym[i];
	const char *name = l->str + y->st_name;
	unsigned type = ELF64_ST_TYPE(y->st_info);
	if (type == STT_SECTION || type == STT_FILE || !name[0] ||
	    (name[0] == '.' && name[1] == 'L') || strnlen(name, MAX_NAME + 1) > MAX_NAME)
		return false;
	if (y->st_shndx == SHN_UNDEF)
		return l->dynidx[i] != 0;
	return y->st_shndx == SHN_ABS || l->cls[y->st_shndx] != CLS_NONE;
}

/* Lays out every output piece; fills l->addr for the input sections. */
static void
layout(Link *l, Layout *o)
{
	uint64_t off;
	size_t nsec = 0, shstrsz = 1;
	bool cls_used[CLS_COUNT] = {0};

	/* output section indices follow addresses: inputs by class, .plt after
	 * the code, .dynamic and .got after .data.rel.ro */
	for (int c = CLS_RO; c < CLS_COUNT; c++) {
		for (size_t i = 1; i < l->nsh; i++)
			if (l->cls[i] == c) {
				size_t ix =
				    FIRST_OUT_SEC + nsec + (c > CLS_TEXT) + 2 * (c > CLS_RELRO);
				cls_used[c] = true;
				l->outix[i] = (uint16_t)(ix < SHN_LORESERVE ? ix : SHN_ABS);
				nsec++;
				shstrsz += strlen(sec_name(l, i)) + 1;
			}
	}
	o->has_data = cls_used[CLS_DATA];
	/* LOAD R, R+X, RW (+ RW data), DYNAMIC, GNU_STACK, GNU_RELRO */
	o->nphdr = 6 + (o->has_data ? 1 : 0);
	o->ndyn = (l->nundef ? 1 : 0) + 5 + (l->nrel ? 3 : 0) + 2 + 1;

	off = sizeof(Elf64_Ehdr) + o->nphdr * sizeof(Elf64_Phdr);
	o->hash = align_up(off, 8);
	o->hashsz = 16 + 8 + 4 * (uint64_t)l->nbucket + 4 * (uint64_t)l->ndef;
	o->dynsym = align_up(o->hash + o->hashsz, 8);
	o->dynstr = o->dynsym + (1 + l->nundef + l->ndef) * sizeof(Elf64_Sym);
	o->dynstrsz = 1 + (l->nundef ? sizeof "libm.so.6" : 0);
	for (size_t i = 1; i < l->nsym; i++)
		if (l->dynidx[i])
			o->dynstrsz += strlen(l->str + l->sym[i].st_name) + 1;
	o->rela = align_up(o->dynstr + o->dynstrsz, 8);
	o->relasz = l->nrel * sizeof(Elf64_Rela);
	off = o->rela + o->relasz;
	for (int c = CLS_RO; c < CLS_COUNT; c++) {
		if (c == CLS_TEXT) {
			o->ro_end = off;
			off = align_up(off, PAGE);
			o->text = off;
		} else if (c == CLS_RELRO) {
			/* the RW segment starts on a fresh page, placed so that the
			 * RELRO part ends on a page boundary (glibc protects whole
			 * pages only) */
			uint64_t size = 0, maxal = 8;
			for (size_t i = 1; i < l->nsh; i++)
				if (l->cls[i] == CLS_RELRO) {
					uint64_t a =
					    l->sh[i].sh_addralign ? l->sh[i].sh_addralign : 1;
					size = align_up(size, a) + l->sh[i].sh_size;
					maxal = a > maxal ? a : maxal;
				}
			size = align_up(size, 8) + o->ndyn * sizeof(Elf64_Dyn) + l->ngot * 8;
			size = align_up(size, maxal);
			off = align_up(align_up(off, PAGE) + size, PAGE) - size;
			o->rw = off;
		} else if (c == CLS_DATA) {
			o->data = off;
		}
		for (size_t i = 1; i < l->nsh; i++)
			if (l->cls[i] == c) {
				off = align_up(off,
				               l->sh[i].sh_addralign ? l->sh[i].sh_addralign : 1);
				l->addr[i] = off;
				off += l->sh[i].sh_size;
			}
		if (c == CLS_TEXT) {
			o->plt = align_up(off, PLT_ENTRY);
			off = o->plt + l->nplt * PLT_ENTRY;
			o->text_end = off;
		} else if (c == CLS_RELRO) {
			o->dynamic = align_up(off, 8);
			o->dynamicsz = o->ndyn * sizeof(Elf64_Dyn);
			o->got = o->dynamic + o->dynamicsz;
			off = o->got + l->ngot * 8;
			off = align_up(off, PAGE);
			o->relro_end = off;
			o->data = off;
		}
	}
	o->data_end = off;
	if (!o->has_data)
		o->data_end = o->relro_end;
	/* section headers: null, .gnu.hash, .dynsym, .dynstr, .rela.dyn,
	 * inputs, .plt, .dynamic, .got, .symtab, .strtab, .shstrtab */
	o->nshdr = 1 + 4 + nsec + 3 + 3;
	shstrsz += sizeof ".gnu.hash" + sizeof ".dynsym" + sizeof ".dynstr" + sizeof ".rela.dyn" +
	           sizeof ".plt" + sizeof ".dynamic" + sizeof ".got" + sizeof ".symtab" +
	           sizeof ".strtab" + sizeof ".shstrtab";
	o->shstr = o->data_end;
	o->shstrsz = shstrsz;
	o->strtabsz = 1;
	for (size_t i = 1; i < l->nsym; i++)
		if (keep_sym(l, i)) {
			o->nsymtab++;
			o->nlocal += sym_local(&l->sym[i]);
			o->strtabsz += strlen(l->str + l->sym[i].st_name) + 1;
		}
	o->symtab = align_up(o->shstr + shstrsz, 8);
	o->strtab = o->symtab + (1 + o->nsymtab) * sizeof(Elf64_Sym);
	o->shoff = align_up(o->strtab + o->strtabsz, 8);
	o->total = o->shoff + o->nshdr * sizeof(Elf64_Shdr);
}

static void
put(unsigned char *out, uint64_t off, const void *p, size_t n)
{
	memcpy(out + off, p, n);
}

static void
put_phdr(unsigned char *out, size_t *k, uint32_t type, uint32_t flags, uint64_t start, uint64_t end,
         uint64_t align)
{
	Elf64_Phdr p = {0};
	p.p_type = type;
	p.p_flags = flags;
	p.p_offset = p.p_vaddr = p.p_paddr = start;
	p.p_filesz = p.p_memsz = end - start;
	p.p_align = align;
	put(out, sizeof(Elf64_Ehdr) + (*k)++ * sizeof p, &p, sizeof p);
}

static void
put_dyn(unsigned char *out, uint64_t *at, int64_t tag, uint64_t val)
{
	Elf64_Dyn d;
	d.d_tag = tag;
	d.d_un.d_val = val;
	put(out, *at, &d, sizeof d);
	*at += sizeof d;
}

static void
put_rela(unsigned char *out, uint64_t *at, uint64_t where, uint32_t sym, uint32_t type,
         uint64_t addend)
{
	Elf64_Rela r;
	r.r_offset = where;
	r.r_info = ELF64_R_INFO(sym, type);
	r.r_addend = (int64_t)addend;
	put(out, *at, &r, sizeof r);
	*at += sizeof r;
}

/* Address of symbol i (0 for undefined ones; they go through GOT/PLT). */
static uint64_t
sym_addr(const Link *l, size_t i)
{
	const Elf64_Sym *y = &l->sym[i];
	if (i == 0 || y->st_shndx == SHN_UNDEF)
		return 0;
	if (y->st_shndx == SHN_ABS)
		return y->st_value;
	return l->addr[y->st_shndx] + y->st_value;
}

static bool
is_absolute(const Link *l, size_t i)
{
	return i == 0 || l->sym[i].st_shndx == SHN_ABS;
}

/* The dynamic symbol table, its strings and the GNU hash table. */
static void
write_dynsym(const Link *l, const Layout *o, unsigned char *out)
{
	uint64_t str = 1;
	uint32_t symoff = (uint32_t)(1 + l->nundef);
	uint64_t bloom = 0;
	uint32_t hdr[4] = {(uint32_t)l->nbucket, symoff, 1, BLOOM_SHIFT};

	if (l->nundef) {
		put(out, o->dynstr + str, "libm.so.6", sizeof "libm.so.6");
		str += sizeof "libm.so.6";
	}
	for (size_t i = 1; i < l->nsym; i++) {
		if (!l->dynidx[i])
			continue;
		const Elf64_Sym *y = &l->sym[i];
		const char *name = l->str + y->st_name;
		size_t n = strlen(name) + 1;
		Elf64_Sym d = {0};
		d.st_name = (uint32_t)str;
		d.st_info = y->st_info;
		d.st_other = y->st_other;
		if (!sym_undef(l, i)) {
			d.st_shndx = y->st_shndx == SHN_ABS ? SHN_ABS : l->outix[y->st_shndx];
			d.st_value = sym_addr(l, i);
			d.st_size = y->st_size;
		}
		put(out, o->dynstr + str, name, n);
		str += n;
		put(out, o->dynsym + l->dynidx[i] * sizeof d, &d, sizeof d);
	}
	put(out, o->hash, hdr, sizeof hdr);
	for (size_t i = 0; i < l->ndef; i++) {
		uint32_t h = l->defs[i].hash;
		bloom |= (uint64_t)1 << (h % 64);
		bloom |= (uint64_t)1 << ((h >> BLOOM_SHIFT) % 64);
	}
	put(out, o->hash + 16, &bloom, 8);
	uint64_t buckets = o->hash + 24, chains = buckets + 4 * l->nbucket;
	for (size_t i = 0; i < l->ndef; i++) {
		uint32_t idx = symoff + (uint32_t)i, h = l->defs[i].hash & ~1u;
		if (i == 0 || l->defs[i - 1].bucket != l->defs[i].bucket)
			put(out, buckets + 4 * l->defs[i].bucket, &idx, 4);
		if (i + 1 == l->ndef || l->defs[i + 1].bucket != l->defs[i].bucket)
			h |= 1;
		put(out, chains + 4 * i, &h, 4);
	}
}

/* Copies the sections, applies the relocations, fills GOT, PLT and
 * .rela.dyn. */
static KcStatus
write_code(Link *l, const Layout *o, unsigned char *out)
{
	uint64_t rela = o->rela;

	for (size_t i = 1; i < l->nsh; i++)
		if (l->cls[i] != CLS_NONE && l->sh[i].sh_type != SHT_NOBITS)
			put(out, l->addr[i], l->obj + l->sh[i].sh_offset, l->sh[i].sh_size);
	for (size_t g = 0; g < l->ngot; g++) {
		size_t si = l->gotsym[g];
		uint64_t at = o->got + 8 * g, v = sym_addr(l, si);
		put(out, at, &v, 8);
		if (sym_undef(l, si))
			put_rela(out, &rela, at, l->dynidx[si], R_X86_64_GLOB_DAT, 0);
		else if (!is_absolute(l, si))
			put_rela(out, &rela, at, 0, R_X86_64_RELATIVE, v);
	}
	for (size_t p = 0; p < l->nplt; p++) {
		uint64_t at = o->plt + PLT_ENTRY * p;
		uint64_t slot = o->got + 8 * (l->got[l->pltsym[p]] - 1);
		int32_t disp = (int32_t)(slot - (at + 6));
		unsigned char stub[PLT_ENTRY];
		memset(stub, 0xcc, sizeof stub); /* int3 padding */
		stub[0] = 0xff;                  /* jmp *slot(%rip) */
		stub[1] = 0x25;
		memcpy(stub + 2, &disp, 4);
		put(out, at, stub, sizeof stub);
	}
	for (size_t ri = 1; ri < l->nsh; ri++) {
		size_t tgt;
		KcStatus st = check_rela_section(l, ri, &tgt);
		if (st != KC_OK)
			return st;
		if (!tgt)
			continue;
		const Elf64_Shdr *r = &l->sh[ri];
		size_t n = r->sh_size / sizeof(Elf64_Rela);
		for (size_t k = 0; k < n; k++) {
			Elf64_Rela ra;
			memcpy(&ra, l->obj + r->sh_offset + k * sizeof ra, sizeof ra);
			uint32_t type = (uint32_t)ELF64_R_TYPE(ra.r_info);
			size_t si = (size_t)ELF64_R_SYM(ra.r_info);
			if (type == R_X86_64_NONE)
				continue; /* scan_relocs checked everything else */
			uint64_t p = l->addr[tgt] + ra.r_offset, a = (uint64_t)ra.r_addend;
			uint64_t s = sym_addr(l, si), v;
			switch (type) {
			case R_X86_64_PLT32:
				if (sym_undef(l, si))
					s = o->plt + PLT_ENTRY * (l->plt[si] - 1);
				/* fallthrough */
			case R_X86_64_PC32: v = s + a - p; break;
			case R_X86_64_GOTPCREL:
			case R_X86_64_GOTPCRELX:
			case R_X86_64_REX_GOTPCRELX:
				v = o->got + 8 * (uint64_t)(l->got[si] - 1) + a - p;
				break;
			case R_X86_64_PC64:
				v = s + a - p;
				put(out, p, &v, 8);
				continue;
			case R_X86_64_64:
				v = s + a;
				put(out, p, &v, 8);
				if (sym_undef(l, si))
					put_rela(out, &rela, p, l->dynidx[si], R_X86_64_64, a);
				else if (!is_absolute(l, si))
					put_rela(out, &rela, p, 0, R_X86_64_RELATIVE, v);
				continue;
			default: KC_ASSERT(0);
			}
			int64_t sv = (int64_t)v;
			if (sv < INT32_MIN || sv > INT32_MAX)
				return unsupported(l, "relocation overflow at", p);
			int32_t v32 = (int32_t)sv;
			put(out, p, &v32, 4);
		}
	}
	KC_ASSERT(rela == o->rela + o->relasz);
	return KC_OK;
}

static void
put_shdr(unsigned char *out, const Layout *o, size_t *k, uint32_t name, uint32_t type,
         uint64_t flags, uint64_t off, uint64_t size, uint32_t link, uint32_t info, uint64_t align,
         uint64_t entsize)
{
	Elf64_Shdr s = {0};
	s.sh_name = name;
	s.sh_type = type;
	s.sh_flags = flags;
	s.sh_addr = flags & SHF_ALLOC ? off : 0;
	s.sh_offset = off;
	s.sh_size = size;
	s.sh_link = link;
	s.sh_info = info;
	s.sh_addralign = align;
	s.sh_entsize = entsize;
	put(out, o->shoff + (*k)++ * sizeof s, &s, sizeof s);
}

static uint32_t
add_name(unsigned char *out, const Layout *o, uint64_t *at, const char *name)
{
	uint32_t r = (uint32_t)*at;
	size_t n = strlen(name) + 1;
	put(out, o->shstr + *at, name, n);
	*at += n;
	return r;
}

/* Section headers (for readelf, objdump and debuggers; the loader does not
 * read them). */
static void
write_shdrs(const Link *l, const Layout *o, unsigned char *out)
{
	uint64_t nm = 1;
	size_t k = 1, dynstr_ix = 3, dynsym_ix = 2;

	put_shdr(out, o, &k, add_name(out, o, &nm, ".gnu.hash"), SHT_GNU_HASH, SHF_ALLOC, o->hash,
	         o->hashsz, (uint32_t)dynsym_ix, 0, 8, 0);
	put_shdr(out, o, &k, add_name(out, o, &nm, ".dynsym"), SHT_DYNSYM, SHF_ALLOC, o->dynsym,
	         o->dynstr - o->dynsym, (uint32_t)dynstr_ix, 1, 8, sizeof(Elf64_Sym));
	put_shdr(out, o, &k, add_name(out, o, &nm, ".dynstr"), SHT_STRTAB, SHF_ALLOC, o->dynstr,
	         o->dynstrsz, 0, 0, 1, 0);
	put_shdr(out, o, &k, add_name(out, o, &nm, ".rela.dyn"), SHT_RELA, SHF_ALLOC, o->rela,
	         o->relasz, (uint32_t)dynsym_ix, 0, 8, sizeof(Elf64_Rela));
	for (int c = CLS_RO; c < CLS_COUNT; c++) {
		for (size_t i = 1; i < l->nsh; i++) {
			if (l->cls[i] != c)
				continue;
			const Elf64_Shdr *s = &l->sh[i];
			uint32_t type = s->sh_type == SHT_NOBITS ? SHT_PROGBITS : s->sh_type;
			KC_ASSERT(l->outix[i] == SHN_ABS || l->outix[i] == k);
			put_shdr(out, o, &k, add_name(out, o, &nm, sec_name(l, i)), type,
			         s->sh_flags & (SHF_ALLOC | SHF_WRITE | SHF_EXECINSTR | SHF_MERGE |
			                        SHF_STRINGS),
			         l->addr[i], s->sh_size, 0, 0,
			         s->sh_addralign ? s->sh_addralign : 1, s->sh_entsize);
		}
		if (c == CLS_TEXT)
			put_shdr(out, o, &k, add_name(out, o, &nm, ".plt"), SHT_PROGBITS,
			         SHF_ALLOC | SHF_EXECINSTR, o->plt, l->nplt * PLT_ENTRY, 0, 0, 16,
			         PLT_ENTRY);
		if (c == CLS_RELRO) {
			put_shdr(out, o, &k, add_name(out, o, &nm, ".dynamic"), SHT_DYNAMIC,
			         SHF_ALLOC | SHF_WRITE, o->dynamic, o->dynamicsz,
			         (uint32_t)dynstr_ix, 0, 8, sizeof(Elf64_Dyn));
			put_shdr(out, o, &k, add_name(out, o, &nm, ".got"), SHT_PROGBITS,
			         SHF_ALLOC | SHF_WRITE, o->got, l->ngot * 8, 0, 0, 8, 8);
		}
	}
	put_shdr(out, o, &k, add_name(out, o, &nm, ".symtab"), SHT_SYMTAB, 0, o->symtab,
	         (1 + o->nsymtab) * sizeof(Elf64_Sym), (uint32_t)(o->nshdr - 2),
	         (uint32_t)(1 + o->nlocal), 8, sizeof(Elf64_Sym));
	put_shdr(out, o, &k, add_name(out, o, &nm, ".strtab"), SHT_STRTAB, 0, o->strtab,
	         o->strtabsz, 0, 0, 1, 0);
	put_shdr(out, o, &k, add_name(out, o, &nm, ".shstrtab"), SHT_STRTAB, 0, o->shstr,
	         o->shstrsz, 0, 0, 1, 0);
	KC_ASSERT(k == o->nshdr && nm <= o->shstrsz);
}

/* .symtab and .strtab: locals first, then globals. */
static void
write_symtab(const Link *l, const Layout *o, unsigned char *out)
{
	uint64_t str = 1;
	size_t k = 1;

	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 1; i < l->nsym; i++) {
			const Elf64_Sym *y = &l->sym[i];
			if (sym_local(y) != (pass == 0) || !keep_sym(l, i))
				continue;
			const char *name = l->str + y->st_name;
			size_t n = strlen(name) + 1;
			Elf64_Sym d = {0};
			d.st_name = (uint32_t)str;
			d.st_info =
			    pass ? y->st_info : ELF64_ST_INFO(STB_LOCAL, ELF64_ST_TYPE(y->st_info));
			d.st_other = y->st_other;
			if (y->st_shndx != SHN_UNDEF) {
				d.st_shndx =
				    y->st_shndx == SHN_ABS ? SHN_ABS : l->outix[y->st_shndx];
				d.st_value = sym_addr(l, i);
				d.st_size = y->st_size;
			}
			put(out, o->strtab + str, name, n);
			str += n;
			put(out, o->symtab + k++ * sizeof d, &d, sizeof d);
		}
	KC_ASSERT(k == 1 + o->nsymtab && str == o->strtabsz);
}

static void
write_headers(const Link *l, const Layout *o, unsigned char *out)
{
	Elf64_Ehdr eh = {0};
	size_t k = 0;
	uint64_t d = o->dynamic;

	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_ident[EI_VERSION] = EV_CURRENT;
	eh.e_ident[EI_OSABI] = ELFOSABI_NONE;
	eh.e_type = ET_DYN;
	eh.e_machine = EM_X86_64;
	eh.e_version = EV_CURRENT;
	eh.e_phoff = sizeof eh;
	eh.e_shoff = o->shoff;
	eh.e_ehsize = sizeof eh;
	eh.e_phentsize = sizeof(Elf64_Phdr);
	eh.e_phnum = (uint16_t)o->nphdr;
	eh.e_shentsize = sizeof(Elf64_Shdr);
	eh.e_shnum = (uint16_t)o->nshdr;
	eh.e_shstrndx = (uint16_t)(o->nshdr - 1);
	put(out, 0, &eh, sizeof eh);

	put_phdr(out, &k, PT_LOAD, PF_R, 0, o->ro_end, PAGE);
	put_phdr(out, &k, PT_LOAD, PF_R | PF_X, o->text, o->text_end, PAGE);
	put_phdr(out, &k, PT_LOAD, PF_R | PF_W, o->rw, o->relro_end, PAGE);
	if (o->has_data)
		put_phdr(out, &k, PT_LOAD, PF_R | PF_W, o->data, o->data_end, PAGE);
	put_phdr(out, &k, PT_DYNAMIC, PF_R | PF_W, o->dynamic, o->dynamic + o->dynamicsz, 8);
	put_phdr(out, &k, PT_GNU_RELRO, PF_R, o->rw, o->relro_end, 1);
	put_phdr(out, &k, PT_GNU_STACK, PF_R | PF_W, 0, 0, 16);
	KC_ASSERT(k == o->nphdr);

	if (l->nundef)
		put_dyn(out, &d, DT_NEEDED, 1);
	put_dyn(out, &d, DT_GNU_HASH, o->hash);
	put_dyn(out, &d, DT_STRTAB, o->dynstr);
	put_dyn(out, &d, DT_SYMTAB, o->dynsym);
	put_dyn(out, &d, DT_STRSZ, o->dynstrsz);
	put_dyn(out, &d, DT_SYMENT, sizeof(Elf64_Sym));
	if (l->nrel) {
		put_dyn(out, &d, DT_RELA, o->rela);
		put_dyn(out, &d, DT_RELASZ, o->relasz);
		put_dyn(out, &d, DT_RELAENT, sizeof(Elf64_Rela));
	}
	put_dyn(out, &d, DT_FLAGS, DF_BIND_NOW);
	put_dyn(out, &d, DT_FLAGS_1, DF_1_NOW);
	put_dyn(out, &d, DT_NULL, 0);
	KC_ASSERT(d == o->dynamic + o->dynamicsz);
}

KcStatus
link_elf(const unsigned char *obj, size_t obj_len, unsigned char **out, size_t *out_len, KcErr *err)
{
	Link l = {0};
	Layout o = {0};
	unsigned char *buf = NULL;
	KcStatus st;

	*out = NULL;
	*out_len = 0;
	l.obj = obj;
	l.len = obj_len;
	l.err = err;
	if ((st = read_sections(&l)) != KC_OK || (st = classify(&l)) != KC_OK ||
	    (st = read_symbols(&l)) != KC_OK)
		goto done;
	order_dynsym(&l);
	if ((st = scan_relocs(&l)) != KC_OK)
		goto done;
	layout(&l, &o);
	/* every input size is bounded by obj_len (NOBITS by MAX_NOBITS), names
	 * by MAX_NAME, counts by the section and symbol counts, so the sums in
	 * layout() cannot overflow 64 bits */
	if (o.nshdr >= SHN_LORESERVE || o.total > MAX_OUT) {
		st = unsupported(&l, "output size", o.total);
		goto done;
	}
	if (o.text_end == o.text) {
		st = unsupported(&l, "object without code", 0);
		goto done;
	}
	buf = kc_xcalloc(1, o.total);
	write_headers(&l, &o, buf);
	write_dynsym(&l, &o, buf);
	if ((st = write_code(&l, &o, buf)) != KC_OK)
		goto done;
	write_shdrs(&l, &o, buf);
	write_symtab(&l, &o, buf);
	*out = buf;
	*out_len = o.total;
	buf = NULL;
done:
	free(buf);
	free(l.sh);
	free(l.cls);
	free(l.addr);
	free(l.outix);
	free(l.sym);
	free(l.dynidx);
	free(l.got);
	free(l.plt);
	free(l.gotsym);
	free(l.pltsym);
	free(l.defs);
	return st;
}
