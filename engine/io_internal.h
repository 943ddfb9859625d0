/* io_internal.h -- private to engine/io.c (the list and the writer) and engine/io_load.c
 * (the reader): the layout of a gl_st_file, the limits both sides enforce, and the small
 * helpers both need.  Nothing outside engine/io*.c includes it; the public API is the gl_st_*
 * section of glimpse.h.
 */
#ifndef GLIMPSE_IO_INTERNAL_H
#define GLIMPSE_IO_INTERNAL_H

#include "glimpse.h"

#include <stdint.h>
#include <string.h>

#define ST_MAX_HEADER ((uint64_t)100 << 20)   /* 100 MB of JSON is far past any real model */
#define ST_CHUNK 65536                        /* bytes per fwrite/fread when converting */
#define ST_NAME_SHOWN 80                      /* characters of a name quoted in a message */

typedef struct {
  char *name;
  gl_tensor *t;
} st_tensor;

typedef struct {
  char *key;
  char *value;
} st_meta;

/* a list of named tensors plus string metadata, in insertion order */
struct gl_st_file {
  st_tensor *ts;
  size_t n, cap;
  st_meta *ms;
  size_t nm, capm;
};

/* a malloc'ed copy of s, or NULL */
char *gl_io_strdup(const char *s);
/* grow *p (of *cap items of `size` bytes) to hold at least need items; 0 when out of memory */
int gl_io_grow(void **p, size_t *cap, size_t need, size_t size);
/* Is s[0..n) well-formed UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF)? */
int gl_io_utf8_valid(const unsigned char *s, size_t n);

static inline int gl_io_host_is_le(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

#endif
