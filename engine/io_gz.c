/* io_gz.c -- data files: whole gzip files through zlib, and IDX arrays (MNIST, Fashion-MNIST).
 *
 * The datasets come from Debian packages as .gz files (dataset-fashion-mnist puts IDX files
 * under /usr/share/datasets/fashion-mnist/).  zlib's gzread reads plain files unchanged, so
 * every reader here takes a gzipped or an uncompressed file alike.
 *
 * IDX (LeCun's MNIST format): a 4-byte magic 0x00 0x00 <type> <ndim>, ndim big-endian uint32
 * sizes, then the data in row-major order, big-endian.  Types: 0x08 u8, 0x09 i8, 0x0B i16,
 * 0x0C i32, 0x0D f32, 0x0E f64.  The reader streams the data into a float tensor in chunks, so
 * a slice (offset, limit along dim 0) never decompresses more than it needs after its start.
 * Sizes are checked before anything is allocated; a short file is an error, never a partial
 * tensor.
 */
#include "glimpse.h"
#include "glimpse_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* zlib's gzread takes an unsigned count; read at most this much per call */
#define GZ_CHUNK ((size_t)1 << 20)
/* the decoding buffer of read_idx, in bytes */
#define IDX_CHUNK ((size_t)1 << 16)

/* The zlib (or errno) message of a failed read, for error texts (zlib puts the path in
 * front; the callers name the path themselves). */
static const char *gz_why(gzFile f, const char *path) {
  int code = 0;
  const char *m = gzerror(f, &code);
  if (code == Z_ERRNO) return strerror(errno);
  if (code == Z_BUF_ERROR) return "truncated: the compressed data ends early";
  if (!m || !*m) return "unexpected end of file";
  size_t n = strlen(path);
  if (!strncmp(m, path, n) && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
  return m;
}

/* After gzread returned 0: did the data end early?  zlib reports a gzip stream cut short as
 * Z_BUF_ERROR ("unexpected end of file") only once the reader has hit the end. */
static int gz_cut_short(gzFile f) {
  int code = 0;
  gzerror(f, &code);
  return code != Z_OK;
}

static gzFile gz_open(const char *op, const char *path, int *status) {
  int fd = gl_open_read(path);                 /* a FIFO must not block the open */
  if (fd < 0) {
    *status = gl_fail(GL_EIO, "%s: cannot open '%s': %s", op, path, strerror(errno));
    return NULL;
  }
  struct stat sb = {0};
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    *status = gl_fail(GL_EIO, "%s: cannot open '%s': %s", op, path,
                      S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
    return NULL;
  }
  errno = 0;
  gzFile f = gzdopen(fd, "rb");
  if (!f) {
    close(fd);
    *status = gl_fail(GL_EIO, "%s: cannot open '%s': %s", op, path,
                      errno ? strerror(errno) : "zlib could not allocate its state");
    return NULL;
  }
  gzbuffer(f, 1 << 17);
  *status = GL_OK;
  return f;
}

/* Read exactly n bytes (n may exceed an unsigned).  Returns the count read; *err is set when
 * zlib reported an error rather than the end of the data. */
static size_t gz_read_full(gzFile f, void *dst, size_t n, int *err) {
  size_t got = 0;
  *err = 0;
  while (got < n) {
    size_t want = n - got < GZ_CHUNK ? n - got : GZ_CHUNK;
    int r = gzread(f, (char *)dst + got, (unsigned)want);
    if (r < 0) { *err = 1; break; }
    if (r == 0) { *err = gz_cut_short(f); break; }
    got += (size_t)r;
  }
  return got;
}

/* ------------------------------------------------------------------------ */
/* whole files: path -> malloc'd bytes (gl_gz_free), at most max_bytes after decompression */

int gl_read_gz(const char *path, size_t max_bytes, unsigned char **buf, size_t *n) {
  int st;
  *buf = NULL;
  *n = 0;
  if (max_bytes == 0) return gl_fail(GL_EARG, "read_gz: the size limit must be positive");
  gzFile f = gz_open("read_gz", path, &st);
  if (!f) return st;
  size_t cap = max_bytes < ((size_t)1 << 16) ? max_bytes : (size_t)1 << 16, len = 0;
  unsigned char *b = malloc(cap);
  if (!b) { gzclose(f); return gl_fail(GL_ENOMEM, "read_gz: out of memory"); }
  for (;;) {
    if (len == cap) {
      if (cap >= max_bytes) {
        /* full at the limit: one more byte means the file is over it */
        unsigned char probe;
        int r = gzread(f, &probe, 1);
        if (r == 0 && !gz_cut_short(f)) break;
        if (r <= 0) st = gl_fail(GL_EFORMAT, "read_gz: '%s': %s", path, gz_why(f, path));
        else st = gl_fail(GL_ENOMEM, "read_gz: '%s' holds more than %zu bytes (the limit)",
                          path, max_bytes);
        free(b);
        gzclose(f);
        return st;
      }
      size_t ncap = cap * 2 < max_bytes ? cap * 2 : max_bytes;
      unsigned char *nb = realloc(b, ncap);
      if (!nb) {
        free(b);
        gzclose(f);
        return gl_fail(GL_ENOMEM, "read_gz: out of memory growing a buffer to %zu bytes", ncap);
      }
      b = nb;
      cap = ncap;
    }
    size_t want = cap - len < GZ_CHUNK ? cap - len : GZ_CHUNK;
    int r = gzread(f, b + len, (unsigned)want);
    if (r < 0 || (r == 0 && gz_cut_short(f))) {
      st = gl_fail(GL_EFORMAT, "read_gz: '%s': %s", path, gz_why(f, path));
      free(b);
      gzclose(f);
      return st;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  gzclose(f);
  *buf = b;
  *n = len;
  return GL_OK;
}

void gl_gz_free(unsigned char *buf) { free(buf); }

/* ------------------------------------------------------------------------ */
/* IDX header */

static int idx_elem_size(int type) {
  switch (type) {
    case 0x08: case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
  }
}

/* Parse the header from an open file; leaves the stream at the first data byte. */
static int idx_header(gzFile f, const char *path, gl_idx_info *info) {
  unsigned char m[4];
  int err;
  size_t got = gz_read_full(f, m, 4, &err);
  if (err) return gl_fail(GL_EFORMAT, "read_idx: '%s': %s", path, gz_why(f, path));
  if (got < 4) return gl_fail(GL_EFORMAT, "read_idx: '%s' is too short for an IDX header", path);
  if (m[0] != 0 || m[1] != 0 || !idx_elem_size(m[2]))
    return gl_fail(GL_EFORMAT,
                   "read_idx: '%s' is not an IDX file (magic %02x %02x %02x %02x; expected "
                   "00 00 <type 08/09/0b/0c/0d/0e> <ndim>)", path, m[0], m[1], m[2], m[3]);
  if (m[3] < 1 || m[3] > GL_MAX_DIMS)
    return gl_fail(GL_EFORMAT, "read_idx: '%s' has %d dims (expected 1..%d)", path, m[3],
                   GL_MAX_DIMS);
  info->type = m[2];
  info->ndim = m[3];
  info->elem_size = idx_elem_size(m[2]);
  for (int d = 0; d < info->ndim; d++) {
    unsigned char s[4];
    got = gz_read_full(f, s, 4, &err);
    if (err) return gl_fail(GL_EFORMAT, "read_idx: '%s': %s", path, gz_why(f, path));
    if (got < 4) return gl_fail(GL_EFORMAT, "read_idx: '%s': header ends inside the sizes", path);
    uint32_t v = (uint32_t)s[0] << 24 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 8 | s[3];
    if (v > INT_MAX)
      return gl_fail(GL_EFORMAT, "read_idx: '%s': size %u of dim %d is too large", path, v,
                     d + 1);
    info->shape[d] = (int)v;
  }
  size_t numel;
  int st = gl_check_shape("read_idx", info->ndim, info->shape, &numel);
  if (st) return st;
  info->numel = numel;
  return GL_OK;
}

int gl_read_idx_info(const char *path, gl_idx_info *info) {
  int st;
  gzFile f = gz_open("read_idx", path, &st);
  if (!f) return st;
  st = idx_header(f, path, info);
  gzclose(f);
  return st;
}

/* one big-endian element at p -> float */
static float idx_value(const unsigned char *p, int type) {
  switch (type) {
    case 0x08: return (float)p[0];
    case 0x09: return (float)(int8_t)p[0];
    case 0x0B: return (float)(int16_t)(uint16_t)((unsigned)p[0] << 8 | p[1]);
    case 0x0C: {
      uint32_t u = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
      return (float)(int32_t)u;
    }
    case 0x0D: {
      uint32_t u = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
      float v;
      memcpy(&v, &u, 4);
      return v;
    }
    default: {
      uint64_t u = 0;
      for (int k = 0; k < 8; k++) u = u << 8 | p[k];
      double v;
      memcpy(&v, &u, 8);
      return (float)v;
    }
  }
}

/* DEFLATE turns one compressed byte into at most 1032 bytes (258-byte matches, 2 bits each,
 * plus block overhead); gzip adds headers, so this bound is generous. */
#define DEFLATE_MAX_RATIO 1032

/* Can the rest of the open file hold `want` more data bytes?  A plain file must have them
 * on disk; a gzip stream can expand at most DEFLATE_MAX_RATIO times.  Checked before the
 * tensor is allocated. */
static int idx_check_size(gzFile f, const char *path, size_t want, size_t offset,
                          size_t count) {
  struct stat sb;
  int fd = gl_open_read(path);
  if (fd < 0) return GL_OK;            /* the stream reading will report what is wrong */
  int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
  close(fd);
  if (!ok) return GL_OK;
  size_t fsize = (size_t)sb.st_size;
  z_off_t at = gztell(f);
  size_t pos = at > 0 ? (size_t)at : 0;
  size_t room;
  if (gzdirect(f)) room = fsize > pos ? fsize - pos : 0;
  else room = fsize > SIZE_MAX / DEFLATE_MAX_RATIO ? SIZE_MAX : fsize * DEFLATE_MAX_RATIO;
  if (want > room)
    return gl_fail(GL_EFORMAT,
                   "read_idx: '%s' is truncated: its header promises %zu data bytes for items "
                   "%zu..%zu, but a %s file of %zu bytes holds at most %zu",
                   path, want, offset + 1, offset + count, gzdirect(f) ? "plain" : "gzip",
                   fsize, room);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* IDX data: items [offset, offset + limit) along dim 0 -> float tensor (count, dims 2..n).
 * limit == 0 means "to the end".  scale divides u8 data by 255 (into [0,1]). */

int gl_read_idx(gl_tensor **out, const char *path, size_t offset, size_t limit, int scale) {
  int st;
  gl_idx_info info;
  gzFile f = gz_open("read_idx", path, &st);
  if (!f) return st;
  if ((st = idx_header(f, path, &info))) { gzclose(f); return st; }
  if (scale && info.type != 0x08) {
    gzclose(f);
    return gl_fail(GL_EARG, "read_idx: '%s': scale applies to u8 data only (type 0x%02x)", path,
                   info.type);
  }
  size_t items = (size_t)info.shape[0];
  if (offset > items) {
    gzclose(f);
    return gl_fail(GL_EARG, "read_idx: '%s': offset %zu is past its %zu items", path, offset,
                   items);
  }
  size_t count = items - offset;
  if (limit && limit < count) count = limit;
  size_t per_item = items ? info.numel / items : 0;  /* elements of one item */
  if (items == 0) {
    per_item = 1;
    for (int d = 1; d < info.ndim; d++) per_item *= (size_t)info.shape[d];
  }
  size_t esz = (size_t)info.elem_size;

  if (offset) {
    /* gzseek on a read stream decompresses forward; check it reached the place */
    size_t hdr = 4 + 4 * (size_t)info.ndim;
    size_t pos = hdr + offset * per_item * esz;
    if (pos > (size_t)LONG_MAX || gzseek(f, (z_off_t)pos, SEEK_SET) != (z_off_t)pos) {
      st = gl_fail(GL_EFORMAT, "read_idx: '%s' is truncated: cannot reach item %zu", path,
                   offset + 1);
      gzclose(f);
      return st;
    }
  }

  /* A header is a promise the data may not keep: before allocating, bound the promise by
   * what the file can hold, so an 8-byte header declaring 2 G elements costs nothing. */
  if ((st = idx_check_size(f, path, count * per_item * esz, offset, count))) {
    gzclose(f);
    return st;
  }

  int shape[GL_MAX_DIMS];
  memcpy(shape, info.shape, sizeof shape);
  shape[0] = (int)count;
  gl_tensor *t;
  if ((st = gl_empty(&t, info.ndim, shape))) { gzclose(f); return st; }

  size_t want = t->numel * esz, done = 0;
  unsigned char *buf = malloc(IDX_CHUNK);
  if (!buf) {
    gl_release(t);
    gzclose(f);
    return gl_fail(GL_ENOMEM, "read_idx: out of memory");
  }
  float *dst = t->data;
  const float k = scale ? 1.0f / 255.0f : 1.0f;
  st = GL_OK;
  while (done < want) {
    size_t n = want - done < IDX_CHUNK ? want - done : IDX_CHUNK;
    int err;
    size_t got = gz_read_full(f, buf, n, &err);
    if (err) { st = gl_fail(GL_EFORMAT, "read_idx: '%s': %s", path, gz_why(f, path)); break; }
    if (got < n) {
      st = gl_fail(GL_EFORMAT,
                   "read_idx: '%s' is truncated: its header promises %zu data bytes for "
                   "items %zu..%zu, the file ends after %zu",
                   path, want, offset + 1, offset + count, done + got);
      break;
    }
    if (esz == 1 && info.type == 0x08) {
      for (size_t i = 0; i < n; i++) dst[i] = (float)buf[i] * k;
    } else {
      for (size_t i = 0; i < n / esz; i++) dst[i] = idx_value(buf + i * esz, info.type);
    }
    dst += n / esz;
    done += n;
  }
  free(buf);
  gzclose(f);
  if (st) { gl_release(t); return st; }
  *out = t;
  return GL_OK;
}
