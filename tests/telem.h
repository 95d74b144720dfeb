/* telem.h - tensor elements for tests, by dtype name ("float16", "int32",
 * ...): element size, float class, and element i of a buffer as a double
 * (float16/bfloat16 decoded exactly). Pure functions, any thread. */
#ifndef KCS_TELEM_H
#define KCS_TELEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

size_t t_dt_bytes(const char *dt);
bool t_dt_float(const char *dt);
double t_as_f64(const char *dt, const void *p, int64_t i);

#endif
