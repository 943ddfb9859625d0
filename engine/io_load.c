/* io_load.c -- the safetensors reader: a strict JSON parser for the header, the checks of
 * every length and offset, and the conversion of PyTorch's dtypes to float32.  The list and
 * the writer are engine/io.c (the format is described there); io_internal.h holds what both
 * share.
 *
 * glimpse reads F32, F16, BF16, F64 and the integer and bool dtypes PyTorch writes,
 * converting them to float32.  A file is untrusted input.  The reader checks every length and
 * offset against the file size before it allocates or reads, parses the header with a small
 * strict JSON parser that knows the schema (so nesting is bounded by construction: object >
 * object > array of ints), and reads tensor bytes with fread at checked offsets; a malformed
 * file gives "load: <path>: <what is wrong>", never an over-read.
 */
#include "glimpse.h"
#include "glimpse_internal.h"
#include "io_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* dtypes and byte order */

enum { DT_F32, DT_F16, DT_BF16, DT_F64, DT_I64, DT_I32, DT_I16, DT_I8, DT_U8, DT_BOOL, DT_COUNT };

static const struct {
  const char *name;
  int size;
} dtypes[DT_COUNT] = {
    {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}, {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U8", 1},  {"BOOL", 1},
};

static int dtype_of(const char *s) {
  for (int i = 0; i < DT_COUNT; i++)
    if (strcmp(s, dtypes[i].name) == 0) return i;
  return -1;
}

static uint64_t le_u(const unsigned char *p, int nbytes) {
  uint64_t v = 0;
  for (int i = nbytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* IEEE half -> float, exact (every half is a float) */
static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {                            /* zero or subnormal: m * 2^-24 */
    float v = (float)m * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (e == 31) return bits_to_float(sign | 0x7f800000u | (m << 13));  /* inf, nan */
  return bits_to_float(sign | ((e + 112) << 23) | (m << 13));
}

/* n little-endian elements of dtype dt at src -> floats at dst */
static void convert(int dt, const unsigned char *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const unsigned char *p = src + i * (size_t)dtypes[dt].size;
    switch (dt) {
    case DT_F32: dst[i] = bits_to_float((uint32_t)le_u(p, 4)); break;
    case DT_F16: dst[i] = half_to_float((uint16_t)le_u(p, 2)); break;
    case DT_BF16: dst[i] = bits_to_float((uint32_t)le_u(p, 2) << 16); break;
    case DT_F64: {
      uint64_t u = le_u(p, 8);
      double d;
      memcpy(&d, &u, 8);
      dst[i] = (float)d;
      break;
    }
    case DT_I64: dst[i] = (float)(int64_t)le_u(p, 8); break;
    case DT_I32: dst[i] = (float)(int32_t)(uint32_t)le_u(p, 4); break;
    case DT_I16: dst[i] = (float)(int16_t)(uint16_t)le_u(p, 2); break;
    case DT_I8: dst[i] = (float)(int8_t)p[0]; break;
    case DT_U8: dst[i] = (float)p[0]; break;
    case DT_BOOL: dst[i] = p[0] ? 1.0f : 0.0f; break;
    }
  }
}

/* ------------------------------------------------------------------------ */
/* load: the header parser
 *
 * Strict JSON (RFC 8259) restricted to the safetensors schema: the top level is an object
 * whose values are tensor entries (objects with exactly dtype, shape, data_offsets) or the
 * "__metadata__" object of strings.  Strings may hold any escape; integers must be integers
 * (no fraction or exponent).  Whitespace and nothing else may follow the top object.
 */

typedef struct {
  char *name;
  int dtype;
  int ndim;
  int shape[GL_MAX_DIMS];
  uint64_t begin, end;
} st_info;

typedef struct {
  const unsigned char *s;
  size_t n, pos;
  char err[320];
  st_info *infos;
  size_t ninfo, capinfo;
  st_meta *metas;
  size_t nmeta, capmeta;
  int seen_meta;
} jparser;

/* Record the first (innermost) error message; returns 0 so callers can `return jfail(..)`. */
static int jfail(jparser *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int jfail(jparser *p, const char *fmt, ...) {
  if (p->err[0]) return 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err, sizeof p->err, fmt, ap);
  va_end(ap);
  return 0;
}

static void jws(jparser *p) {
  while (p->pos < p->n) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static const char *what_is_at(jparser *p) {
  static _Thread_local char b[32];
  if (p->pos >= p->n) return "the end of the header";
  unsigned char c = p->s[p->pos];
  if (c >= 0x20 && c < 0x7f) snprintf(b, sizeof b, "'%c'", c);
  else snprintf(b, sizeof b, "byte 0x%02x", c);
  return b;
}

static int jexpect(jparser *p, char c) {
  jws(p);
  if (p->pos < p->n && p->s[p->pos] == (unsigned char)c) {
    p->pos++;
    return 1;
  }
  return jfail(p, "bad JSON header at byte %zu: expected '%c', found %s", p->pos, c,
               what_is_at(p));
}

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int read_u4(jparser *p, size_t at, unsigned *out) {
  if (p->n - at < 4) return 0;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(p->s[at + (size_t)i]);
    if (h < 0) return 0;
    v = v << 4 | (unsigned)h;
  }
  *out = v;
  return 1;
}

static size_t put_utf8(unsigned char *d, unsigned cp) {
  if (cp < 0x80) { d[0] = (unsigned char)cp; return 1; }
  if (cp < 0x800) {
    d[0] = (unsigned char)(0xC0 | cp >> 6);
    d[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    d[0] = (unsigned char)(0xE0 | cp >> 12);
    d[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    d[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  d[0] = (unsigned char)(0xF0 | cp >> 18);
  d[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
  d[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
  d[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* A string literal -> a fresh NUL-terminated UTF-8 copy in *out (NULL on error). */
static int jstring(jparser *p, char **out) {
  *out = NULL;
  jws(p);
  if (p->pos >= p->n || p->s[p->pos] != '"')
    return jfail(p, "bad JSON header at byte %zu: expected a string, found %s", p->pos,
                 what_is_at(p));
  size_t start = ++p->pos, end = start;
  /* find the closing quote first: the decoded string is never longer than the literal */
  while (end < p->n && p->s[end] != '"') {
    if (p->s[end] == '\\') end++;
    end++;
  }
  if (end >= p->n) return jfail(p, "bad JSON header at byte %zu: unterminated string", start - 1);
  if (!gl_io_utf8_valid(p->s + start, end - start))
    return jfail(p, "bad JSON header at byte %zu: string is not valid UTF-8", start - 1);
  unsigned char *d = malloc(end - start + 1);
  if (!d) return jfail(p, "out of memory");
  size_t k = 0, i = start;
  while (i < end) {
    unsigned char c = p->s[i];
    if (c < 0x20) {
      free(d);
      return jfail(p, "bad JSON header at byte %zu: control character 0x%02x in a string", i, c);
    }
    if (c != '\\') { d[k++] = c; i++; continue; }
    unsigned char e = p->s[i + 1];   /* i + 1 < end: a backslash never ends the literal */
    const char *simple = strchr("\"\\/bfnrt", e);
    if (e && simple) {
      static const char repl[] = "\"\\/\b\f\n\r\t";
      d[k++] = (unsigned char)repl[simple - "\"\\/bfnrt"];
      i += 2;
      continue;
    }
    unsigned cp, lo;
    if (e != 'u' || !read_u4(p, i + 2, &cp) || i + 6 > end) {
      free(d);
      return jfail(p, "bad JSON header at byte %zu: bad escape in a string", i);
    }
    i += 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {      /* a surrogate pair */
      if (i + 6 > end || p->s[i] != '\\' || p->s[i + 1] != 'u' || !read_u4(p, i + 2, &lo) ||
          lo < 0xDC00 || lo > 0xDFFF) {
        free(d);
        return jfail(p, "bad JSON header at byte %zu: unpaired surrogate in a string", i - 6);
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      i += 6;
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      free(d);
      return jfail(p, "bad JSON header at byte %zu: unpaired surrogate in a string", i - 6);
    } else if (cp == 0) {
      free(d);
      return jfail(p, "bad JSON header at byte %zu: NUL character in a string", i - 6);
    }
    k += put_utf8(d + k, cp);
  }
  d[k] = 0;
  p->pos = end + 1;
  *out = (char *)d;
  return 1;
}

/* An integer literal -> *out.  Fractions, exponents and out-of-range values are errors. */
static int jint(jparser *p, int64_t *out, const char *what) {
  jws(p);
  size_t at = p->pos;
  int neg = 0;
  if (p->pos < p->n && p->s[p->pos] == '-') { neg = 1; p->pos++; }
  if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') {
    p->pos = at;
    return jfail(p, "bad JSON header at byte %zu: expected an integer in %s, found %s", at, what,
                 what_is_at(p));
  }
  if (p->s[p->pos] == '0' && p->pos + 1 < p->n && p->s[p->pos + 1] >= '0' &&
      p->s[p->pos + 1] <= '9')
    return jfail(p, "bad JSON header at byte %zu: leading zero in a number", at);
  uint64_t v = 0;
  while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
    unsigned dgt = p->s[p->pos] - '0';
    if (v > (UINT64_MAX - dgt) / 10 || v * 10 + dgt > (uint64_t)INT64_MAX + (uint64_t)neg)
      return jfail(p, "bad JSON header at byte %zu: integer out of range in %s", at, what);
    v = v * 10 + dgt;
    p->pos++;
  }
  if (p->pos < p->n && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
    return jfail(p, "bad JSON header at byte %zu: %s must be integers", at, what);
  *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
  return 1;
}

/* After an object member or array item: ',' (more follows) -> 1, the closer -> 0, else -1. */
static int jnext(jparser *p, char closer) {
  jws(p);
  if (p->pos < p->n && p->s[p->pos] == ',') { p->pos++; return 1; }
  if (p->pos < p->n && p->s[p->pos] == (unsigned char)closer) { p->pos++; return 0; }
  jfail(p, "bad JSON header at byte %zu: expected ',' or '%c', found %s", p->pos, closer,
        what_is_at(p));
  return -1;
}

/* Opening of an object or array: 1 when items follow, 0 when it is empty (closer consumed),
 * -1 when the opener is missing.  Loops run `while (r > 0)` with r = jnext(..). */
static int jopen(jparser *p, char opener, char closer, const char *what) {
  jws(p);
  if (p->pos >= p->n || p->s[p->pos] != (unsigned char)opener)
    return jfail(p, "bad JSON header at byte %zu: %s must be %s, found %s", p->pos, what,
                 opener == '{' ? "an object" : "an array", what_is_at(p)), -1;
  p->pos++;
  jws(p);
  if (p->pos < p->n && p->s[p->pos] == (unsigned char)closer) { p->pos++; return 0; }
  return 1;
}

/* "shape": [d0, d1, ...] with 0 <= d <= INT_MAX, at most GL_MAX_DIMS entries */
static int jshape(jparser *p, st_info *in) {
  int r = jopen(p, '[', ']', "'shape'");
  if (r < 0) return 0;
  in->ndim = 0;
  while (r > 0) {
    int64_t v;
    if (!jint(p, &v, "'shape'")) return 0;
    if (v < 0)
      return jfail(p, "tensor '%.*s': shape entry %lld is negative", ST_NAME_SHOWN, in->name,
                   (long long)v);
    if (v > 2147483647)
      return jfail(p, "tensor '%.*s': shape entry %lld is too large", ST_NAME_SHOWN, in->name,
                   (long long)v);
    if (in->ndim == GL_MAX_DIMS)
      return jfail(p, "tensor '%.*s': more than %d dims", ST_NAME_SHOWN, in->name, GL_MAX_DIMS);
    in->shape[in->ndim++] = (int)v;
    if ((r = jnext(p, ']')) < 0) return 0;
  }
  return 1;
}

/* "data_offsets": [begin, end] */
static int joffsets(jparser *p, st_info *in) {
  int64_t v[2];
  int r = jopen(p, '[', ']', "'data_offsets'");
  if (r < 0) return 0;
  int k = 0;
  while (r > 0) {
    if (k == 2)
      return jfail(p, "tensor '%.*s': 'data_offsets' must hold exactly 2 integers",
                   ST_NAME_SHOWN, in->name);
    if (!jint(p, &v[k], "'data_offsets'")) return 0;
    if (v[k] < 0)
      return jfail(p, "tensor '%.*s': data offset %lld is negative", ST_NAME_SHOWN, in->name,
                   (long long)v[k]);
    k++;
    if ((r = jnext(p, ']')) < 0) return 0;
  }
  if (k != 2)
    return jfail(p, "tensor '%.*s': 'data_offsets' must hold exactly 2 integers", ST_NAME_SHOWN,
                 in->name);
  in->begin = (uint64_t)v[0];
  in->end = (uint64_t)v[1];
  return 1;
}

/* A tensor entry {"dtype": .., "shape": [..], "data_offsets": [b, e]}; takes over `name`. */
static int jentry(jparser *p, char *name) {
  if (!gl_io_grow((void **)&p->infos, &p->capinfo, p->ninfo + 1, sizeof *p->infos)) {
    free(name);
    return jfail(p, "out of memory");
  }
  st_info *in = &p->infos[p->ninfo++];
  memset(in, 0, sizeof *in);
  in->name = name;
  in->dtype = -1;
  int have_dtype = 0, have_shape = 0, have_off = 0;
  int r = jopen(p, '{', '}', "a tensor entry");
  if (r < 0) return 0;
  while (r > 0) {
    char *key;
    if (!jstring(p, &key) || !jexpect(p, ':')) { free(key); return 0; }
    int *seen = strcmp(key, "dtype") == 0 ? &have_dtype
                : strcmp(key, "shape") == 0 ? &have_shape
                : strcmp(key, "data_offsets") == 0 ? &have_off : NULL;
    if (!seen || (*seen)++) {
      jfail(p, "tensor '%.*s': %s field '%.32s'", ST_NAME_SHOWN, name,
            seen ? "duplicate" : "unknown", key);
      free(key);
      return 0;
    }
    int ok;
    if (seen == &have_dtype) {
      char *dt;
      ok = jstring(p, &dt);
      if (ok) {
        in->dtype = dtype_of(dt);
        if (in->dtype < 0)
          ok = jfail(p, "tensor '%.*s': unsupported dtype '%.16s'", ST_NAME_SHOWN, name, dt);
        free(dt);
      }
    } else if (seen == &have_shape) {
      ok = jshape(p, in);
    } else {
      ok = joffsets(p, in);
    }
    free(key);
    if (!ok) return 0;
    if ((r = jnext(p, '}')) < 0) return 0;
  }
  if (!have_dtype) return jfail(p, "tensor '%.*s' has no 'dtype'", ST_NAME_SHOWN, name);
  if (!have_shape) return jfail(p, "tensor '%.*s' has no 'shape'", ST_NAME_SHOWN, name);
  if (!have_off) return jfail(p, "tensor '%.*s' has no 'data_offsets'", ST_NAME_SHOWN, name);
  return 1;
}

/* "__metadata__": {"k": "v", ...} */
static int jmeta(jparser *p) {
  int r = jopen(p, '{', '}', "'__metadata__'");
  if (r < 0) return 0;
  while (r > 0) {
    char *k, *v;
    if (!jstring(p, &k)) return 0;
    if (!jexpect(p, ':')) { free(k); return 0; }
    jws(p);
    if (p->pos < p->n && p->s[p->pos] != '"') {
      jfail(p, "metadata value of '%.*s' is not a string", ST_NAME_SHOWN, k);
      free(k);
      return 0;
    }
    if (!jstring(p, &v)) { free(k); return 0; }
    if (!gl_io_grow((void **)&p->metas, &p->capmeta, p->nmeta + 1, sizeof *p->metas)) {
      free(k);
      free(v);
      return jfail(p, "out of memory");
    }
    p->metas[p->nmeta].key = k;
    p->metas[p->nmeta].value = v;
    p->nmeta++;
    if ((r = jnext(p, '}')) < 0) return 0;
  }
  return 1;
}

static int jheader(jparser *p) {
  int r = jopen(p, '{', '}', "the header");
  if (r < 0) return 0;
  while (r > 0) {
    char *key;
    if (!jstring(p, &key)) return 0;
    if (!jexpect(p, ':')) { free(key); return 0; }
    if (strcmp(key, "__metadata__") == 0) {
      free(key);
      if (p->seen_meta++) return jfail(p, "duplicate key '__metadata__'");
      if (!jmeta(p)) return 0;
    } else if (!jentry(p, key)) {
      return 0;
    }
    if ((r = jnext(p, '}')) < 0) return 0;
  }
  jws(p);
  if (p->pos != p->n)
    return jfail(p, "bad JSON header at byte %zu: trailing %s after the header object", p->pos,
                 what_is_at(p));
  return 1;
}

static void jparser_free(jparser *p) {
  for (size_t i = 0; i < p->ninfo; i++) free(p->infos[i].name);
  for (size_t i = 0; i < p->nmeta; i++) {
    free(p->metas[i].key);
    free(p->metas[i].value);
  }
  free(p->infos);
  free(p->metas);
}

/* ------------------------------------------------------------------------ */
/* load: checks and reading */

static int cmp_info_name(const void *a, const void *b) {
  return strcmp(((const st_info *)a)->name, ((const st_info *)b)->name);
}

static int cmp_meta_key(const void *a, const void *b) {
  return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

static int cmp_info_begin(const void *a, const void *b) {
  const st_info *x = *(const st_info *const *)a, *y = *(const st_info *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* Unique names, sizes that match the shapes, offsets that tile the data exactly. */
static int check_infos(jparser *p, uint64_t data_size) {
  char sb[128];
  if (p->ninfo > 1) qsort(p->infos, p->ninfo, sizeof *p->infos, cmp_info_name);
  if (p->nmeta > 1) qsort(p->metas, p->nmeta, sizeof *p->metas, cmp_meta_key);
  for (size_t i = 1; i < p->ninfo; i++)
    if (strcmp(p->infos[i - 1].name, p->infos[i].name) == 0)
      return jfail(p, "duplicate tensor name '%.*s'", ST_NAME_SHOWN, p->infos[i].name);
  for (size_t i = 1; i < p->nmeta; i++)
    if (strcmp(p->metas[i - 1].key, p->metas[i].key) == 0)
      return jfail(p, "duplicate metadata key '%.*s'", ST_NAME_SHOWN, p->metas[i].key);
  for (size_t i = 0; i < p->ninfo; i++) {
    st_info *in = &p->infos[i];
    uint64_t numel = 1;
    int zero = 0;
    for (int d = 0; d < in->ndim; d++) zero |= in->shape[d] == 0;
    for (int d = 0; d < in->ndim && !zero; d++) {
      if (numel > GL_MAX_NUMEL / (uint64_t)in->shape[d])
        return jfail(p, "tensor '%.*s': shape %s has more than %zu elements", ST_NAME_SHOWN,
                     in->name, gl_shape_str(sb, sizeof sb, in->ndim, in->shape), GL_MAX_NUMEL);
      numel *= (uint64_t)in->shape[d];
    }
    if (zero) numel = 0;
    uint64_t nbytes = numel * (uint64_t)dtypes[in->dtype].size;
    if (in->begin > in->end)
      return jfail(p, "tensor '%.*s': data_offsets [%llu,%llu] run backwards", ST_NAME_SHOWN,
                   in->name, (unsigned long long)in->begin, (unsigned long long)in->end);
    if (in->end > data_size)
      return jfail(p, "tensor '%.*s': data_offsets [%llu,%llu] run past the %llu bytes of data",
                   ST_NAME_SHOWN, in->name, (unsigned long long)in->begin,
                   (unsigned long long)in->end, (unsigned long long)data_size);
    if (in->end - in->begin != nbytes)
      return jfail(p, "tensor '%.*s': data_offsets [%llu,%llu] hold %llu bytes, but %s %s "
                      "needs %llu", ST_NAME_SHOWN, in->name, (unsigned long long)in->begin,
                   (unsigned long long)in->end, (unsigned long long)(in->end - in->begin),
                   dtypes[in->dtype].name, gl_shape_str(sb, sizeof sb, in->ndim, in->shape),
                   (unsigned long long)nbytes);
  }
  /* The data must be covered exactly, as the safetensors format demands: sorted by offset,
   * each tensor starts where the previous one ended, and the last one ends at the end of the
   * file.  A gap or trailing bytes mean a damaged or doctored file. */
  st_info **by = malloc((p->ninfo ? p->ninfo : 1) * sizeof *by);
  if (!by) return jfail(p, "out of memory");
  for (size_t i = 0; i < p->ninfo; i++) by[i] = &p->infos[i];
  qsort(by, p->ninfo, sizeof *by, cmp_info_begin);
  uint64_t at = 0;
  for (size_t i = 0; i < p->ninfo; i++) {
    if (by[i]->begin < at) {
      jfail(p, "tensors '%.*s' and '%.*s' overlap in the data", ST_NAME_SHOWN, by[i - 1]->name,
            ST_NAME_SHOWN, by[i]->name);
      free(by);
      return 0;
    }
    if (by[i]->begin > at) {
      jfail(p, "tensor '%.*s': data_offsets [%llu,%llu] leave a gap of %llu unindexed bytes "
               "before it", ST_NAME_SHOWN, by[i]->name, (unsigned long long)by[i]->begin,
            (unsigned long long)by[i]->end, (unsigned long long)(by[i]->begin - at));
      free(by);
      return 0;
    }
    at = by[i]->end;
  }
  free(by);
  if (at != data_size)
    return jfail(p, "%llu unindexed bytes follow the last tensor's data (the tensors cover "
                    "%llu of the %llu data bytes)", (unsigned long long)(data_size - at),
                 (unsigned long long)at, (unsigned long long)data_size);
  return 1;
}

static int read_exact(FILE *fp, void *buf, size_t n) { return fread(buf, 1, n, fp) == n; }

/* Read the tensor's bytes at file offset `at` into t, converting to float32. */
static int read_tensor(FILE *fp, uint64_t at, const st_info *in, gl_tensor *t) {
  if (t->numel == 0) return 1;
  if (fseeko(fp, (off_t)at, SEEK_SET) != 0) return 0;
  if (in->dtype == DT_F32 && gl_io_host_is_le()) return read_exact(fp, t->data, t->numel * 4);
  unsigned char *buf = malloc(ST_CHUNK);
  if (!buf) return 0;
  size_t isz = (size_t)dtypes[in->dtype].size, per = ST_CHUNK / isz, done = 0;
  while (done < t->numel) {
    size_t k = t->numel - done < per ? t->numel - done : per;
    if (!read_exact(fp, buf, k * isz)) { free(buf); return 0; }
    convert(in->dtype, buf, t->data + done, k);
    done += k;
  }
  free(buf);
  return 1;
}

int gl_st_load(gl_st_file **out, const char *path) {
  jparser p;
  gl_st_file *f = NULL;
  char *hdr = NULL;
  int st = GL_OK;
  memset(&p, 0, sizeof p);
  *out = NULL;

  int fd = gl_open_read(path);                 /* a FIFO must not block the open */
  FILE *fp = fd < 0 ? NULL : fdopen(fd, "rb");
  if (!fp) {
    int e = errno;
    if (fd >= 0) close(fd);
    return gl_fail(GL_EIO, "load: %s: %s", path, strerror(e));
  }
  struct stat sbuf;
  if (fstat(fileno(fp), &sbuf) != 0) {
    st = gl_fail(GL_EIO, "load: %s: %s", path, strerror(errno));
    goto done;
  }
  if (!S_ISREG(sbuf.st_mode)) {
    st = gl_fail(GL_EIO, "load: %s: not a regular file", path);
    goto done;
  }
  uint64_t size = (uint64_t)sbuf.st_size;
  unsigned char len8[8];
  if (size < 8 || !read_exact(fp, len8, 8)) {
    st = gl_fail(GL_EFORMAT, "load: %s: file of %llu bytes is too short to hold the 8-byte "
                             "header length", path, (unsigned long long)size);
    goto done;
  }
  uint64_t hlen = le_u(len8, 8);
  if (hlen > size - 8) {
    st = gl_fail(GL_EFORMAT, "load: %s: header length %llu runs past the end of the file "
                             "(%llu bytes)", path, (unsigned long long)hlen,
                 (unsigned long long)size);
    goto done;
  }
  if (hlen > ST_MAX_HEADER) {
    st = gl_fail(GL_EFORMAT, "load: %s: header length %llu exceeds the %llu-byte limit", path,
                 (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    goto done;
  }
  hdr = malloc(hlen ? (size_t)hlen : 1);
  if (!hdr) {
    st = gl_fail(GL_ENOMEM, "load: %s: out of memory for a %llu-byte header", path,
                 (unsigned long long)hlen);
    goto done;
  }
  if (!read_exact(fp, hdr, (size_t)hlen)) {
    st = gl_fail(GL_EIO, "load: %s: file shrank while reading the header", path);
    goto done;
  }
  p.s = (const unsigned char *)hdr;
  p.n = (size_t)hlen;
  if (!jheader(&p) || !check_infos(&p, size - 8 - hlen)) {
    st = gl_fail(strcmp(p.err, "out of memory") ? GL_EFORMAT : GL_ENOMEM, "load: %s: %s", path,
                 p.err);
    goto done;
  }
  free(hdr);
  hdr = NULL;

  if ((st = gl_st_new(&f))) goto done;
  f->ts = calloc(p.ninfo ? p.ninfo : 1, sizeof *f->ts);
  f->ms = calloc(p.nmeta ? p.nmeta : 1, sizeof *f->ms);
  if (!f->ts || !f->ms) {
    st = gl_fail(GL_ENOMEM, "load: %s: out of memory", path);
    goto done;
  }
  f->cap = p.ninfo ? p.ninfo : 1;
  f->capm = p.nmeta ? p.nmeta : 1;
  for (size_t i = 0; i < p.nmeta; i++) {        /* move the strings over */
    f->ms[i] = p.metas[i];
    p.metas[i].key = p.metas[i].value = NULL;
    f->nm++;
  }
  for (size_t i = 0; i < p.ninfo; i++) {
    st_info *in = &p.infos[i];
    gl_tensor *t;
    if (gl_empty(&t, in->ndim, in->shape)) {
      char why[256];
      snprintf(why, sizeof why, "%s", gl_last_error());
      st = gl_fail(GL_ENOMEM, "load: %s: tensor '%.*s': %s", path, ST_NAME_SHOWN, in->name, why);
      goto done;
    }
    f->ts[f->n].name = in->name;
    f->ts[f->n].t = t;
    in->name = NULL;
    f->n++;
    if (!read_tensor(fp, 8 + hlen + in->begin, in, t)) {
      st = gl_fail(GL_EIO, "load: %s: tensor '%.*s': reading its data failed (file changed "
                           "or out of memory)", path, ST_NAME_SHOWN, f->ts[f->n - 1].name);
      goto done;
    }
  }

done:
  if (fp) fclose(fp);
  free(hdr);
  jparser_free(&p);
  if (st) gl_st_free(f);
  else *out = f;
  return st;
}
