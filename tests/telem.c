/* telem.c - see telem.h. */
#include <math.h>
#include <string.h>

#include "telem.h"

size_t
t_dt_bytes(const char *dt)
{
	if (!strcmp(dt, "bool") || strstr(dt, "int8"))
		return 1;
	if (strstr(dt, "16"))
		return 2;
	if (strstr(dt, "32"))
		return 4;
	return 8;
}

bool
t_dt_float(const char *dt)
{
	return strstr(dt, "float") != NULL;
}

double
t_as_f64(const char *dt, const void *p, int64_t i)
{
	if (!strcmp(dt, "float16")) {
		unsigned h = ((const uint16_t *)p)[i], e = (h >> 10) & 31, m = h & 1023;
		double v = e == 0    ? ldexp(m, -24)
		           : e == 31 ? (m ? NAN : INFINITY)
		                     : ldexp(m + 1024, (int)e - 25);
		return (h & 0x8000) ? -v : v;
	}
	if (!strcmp(dt, "bfloat16")) {
		uint32_t w = (uint32_t)((const uint16_t *)p)[i] << 16;
		float f;
		memcpy(&f, &w, 4);
		return f;
	}
	if (!strcmp(dt, "float32"))
		return ((const float *)p)[i];
	if (!strcmp(dt, "float64"))
		return ((const double *)p)[i];
	if (!strcmp(dt, "bool") || !strcmp(dt, "uint8"))
		return ((const uint8_t *)p)[i];
	if (!strcmp(dt, "int8"))
		return ((const int8_t *)p)[i];
	if (!strcmp(dt, "int16"))
		return ((const int16_t *)p)[i];
	if (!strcmp(dt, "uint16"))
		return ((const uint16_t *)p)[i];
	if (!strcmp(dt, "int32"))
		return ((const int32_t *)p)[i];
	if (!strcmp(dt, "uint32"))
		return ((const uint32_t *)p)[i];
	if (!strcmp(dt, "int64"))
		return (double)((const int64_t *)p)[i];
	return (double)((const uint64_t *)p)[i];
}
