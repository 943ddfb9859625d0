/* io.c -- safetensors checkpoints: a list of named tensors plus string metadata, and its
 * atomic writer.  The defensive reader is engine/io_load.c; io_internal.h holds what both
 * share.
 *
 * Checkpoints must be readable by other tools (PyTorch, the safetensors libraries), so the
 * format is safetensors: an 8-byte little-endian header length N, N bytes of JSON
 *   {"__metadata__": {"k": "v", ...},
 *    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * padded with spaces to a multiple of 8, then the raw little-endian data (offsets count from
 * the end of the header).  glimpse writes F32 with names sorted, so the same state gives the
 * same bytes.
 *
 * The writer writes a temp file in the target's directory, fsyncs it and renames it into
 * place, so a crash or an error never leaves a half-written checkpoint or damages the
 * previous one.  A writer killed mid-save (kill -9, power loss) leaves its temp behind; the
 * next save to the same path removes the temps of processes that no longer exist.
 */
#include "glimpse.h"
#include "glimpse_internal.h"
#include "io_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* the list */

int gl_st_new(gl_st_file **out) {
  gl_st_file *f = calloc(1, sizeof *f);
  if (!f) return gl_fail(GL_ENOMEM, "st_new: out of memory");
  *out = f;
  return GL_OK;
}

void gl_st_free(gl_st_file *f) {
  if (!f) return;
  for (size_t i = 0; i < f->n; i++) {
    free(f->ts[i].name);
    gl_release(f->ts[i].t);
  }
  for (size_t i = 0; i < f->nm; i++) {
    free(f->ms[i].key);
    free(f->ms[i].value);
  }
  free(f->ts);
  free(f->ms);
  free(f);
}

char *gl_io_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

int gl_io_grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 1;
  size_t c = *cap ? *cap * 2 : 16;
  while (c < need) c *= 2;
  if (c > SIZE_MAX / size) return 0;
  void *q = realloc(*p, c * size);
  if (!q) return 0;
  *p = q;
  *cap = c;
  return 1;
}

int gl_st_add_tensor(gl_st_file *f, const char *name, gl_tensor *t) {
  if (!gl_io_grow((void **)&f->ts, &f->cap, f->n + 1, sizeof *f->ts))
    return gl_fail(GL_ENOMEM, "st_add_tensor: out of memory");
  char *nm = gl_io_strdup(name);
  if (!nm) return gl_fail(GL_ENOMEM, "st_add_tensor: out of memory");
  gl_retain(t);
  f->ts[f->n].name = nm;
  f->ts[f->n].t = t;
  f->n++;
  return GL_OK;
}

int gl_st_add_meta(gl_st_file *f, const char *key, const char *value) {
  if (!gl_io_grow((void **)&f->ms, &f->capm, f->nm + 1, sizeof *f->ms))
    return gl_fail(GL_ENOMEM, "st_add_meta: out of memory");
  char *k = gl_io_strdup(key), *v = gl_io_strdup(value);
  if (!k || !v) {
    free(k);
    free(v);
    return gl_fail(GL_ENOMEM, "st_add_meta: out of memory");
  }
  f->ms[f->nm].key = k;
  f->ms[f->nm].value = v;
  f->nm++;
  return GL_OK;
}

size_t gl_st_count(const gl_st_file *f) { return f->n; }
const char *gl_st_name(const gl_st_file *f, size_t i) { return i < f->n ? f->ts[i].name : NULL; }
gl_tensor *gl_st_tensor(const gl_st_file *f, size_t i) { return i < f->n ? f->ts[i].t : NULL; }
size_t gl_st_meta_count(const gl_st_file *f) { return f->nm; }
const char *gl_st_meta_key(const gl_st_file *f, size_t i) { return i < f->nm ? f->ms[i].key : NULL; }
const char *gl_st_meta_value(const gl_st_file *f, size_t i) {
  return i < f->nm ? f->ms[i].value : NULL;
}

gl_tensor *gl_st_find(const gl_st_file *f, const char *name) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->ts[i].name, name) == 0) return f->ts[i].t;
  return NULL;
}

const char *gl_st_find_meta(const gl_st_file *f, const char *key) {
  for (size_t i = 0; i < f->nm; i++)
    if (strcmp(f->ms[i].key, key) == 0) return f->ms[i].value;
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* shared with io_load.c: UTF-8 */

int gl_io_utf8_valid(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) { i++; continue; }
    else if (c >= 0xC2 && c <= 0xDF) k = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      k = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      k = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (n - i <= k) return 0;
    if (s[i + 1] < lo || s[i + 1] > hi) return 0;
    for (size_t j = 2; j <= k; j++)
      if (s[i + j] < 0x80 || s[i + j] > 0xBF) return 0;
    i += k + 1;
  }
  return 1;
}

/* ------------------------------------------------------------------------ */
/* save */

typedef struct {
  char *s;
  size_t len, cap;
  int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t c = b->cap ? b->cap : 1024;
    while (c < b->len + n + 1) c *= 2;
    char *q = realloc(b->s, c);
    if (!q) { b->oom = 1; return; }
    b->s = q;
    b->cap = c;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt_u64(sbuf *b, uint64_t v) {
  char t[24];
  snprintf(t, sizeof t, "%llu", (unsigned long long)v);
  sb_str(b, t);
}

/* a JSON string literal; s is valid UTF-8 without NUL (checked by the caller) */
static void sb_json_str(sbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char e[8];
    switch (*p) {
    case '"': sb_put(b, "\\\"", 2); break;
    case '\\': sb_put(b, "\\\\", 2); break;
    case '\n': sb_put(b, "\\n", 2); break;
    case '\r': sb_put(b, "\\r", 2); break;
    case '\t': sb_put(b, "\\t", 2); break;
    case '\b': sb_put(b, "\\b", 2); break;
    case '\f': sb_put(b, "\\f", 2); break;
    default:
      if (*p < 0x20) {
        snprintf(e, sizeof e, "\\u%04x", *p);
        sb_put(b, e, 6);
      } else {
        sb_put(b, (const char *)p, 1);
      }
    }
  }
  sb_put(b, "\"", 1);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

static int cmp_key(const void *a, const void *b) {
  return strcmp((*(const st_meta *const *)a)->key, (*(const st_meta *const *)b)->key);
}

/* Names, keys and values must be UTF-8 (JSON readers insist) and unique. */
static int check_for_save(const char *path, const st_tensor **ts, size_t n, const st_meta **ms,
                          size_t nm) {
  for (size_t i = 0; i < n; i++) {
    const char *s = ts[i]->name;
    if (!gl_io_utf8_valid((const unsigned char *)s, strlen(s)))
      return gl_fail(GL_EARG, "save: %s: tensor name '%.*s' is not valid UTF-8", path,
                     ST_NAME_SHOWN, s);
    if (strcmp(s, "__metadata__") == 0)
      return gl_fail(GL_EARG, "save: %s: '__metadata__' is reserved and cannot name a tensor",
                     path);
    if (i > 0 && strcmp(ts[i - 1]->name, s) == 0)
      return gl_fail(GL_EARG, "save: %s: duplicate tensor name '%.*s'", path, ST_NAME_SHOWN, s);
  }
  for (size_t i = 0; i < nm; i++) {
    const char *k = ms[i]->key, *v = ms[i]->value;
    if (!gl_io_utf8_valid((const unsigned char *)k, strlen(k)))
      return gl_fail(GL_EARG, "save: %s: metadata key '%.*s' is not valid UTF-8", path,
                     ST_NAME_SHOWN, k);
    if (!gl_io_utf8_valid((const unsigned char *)v, strlen(v)))
      return gl_fail(GL_EARG, "save: %s: metadata value of '%.*s' is not valid UTF-8", path,
                     ST_NAME_SHOWN, k);
    if (i > 0 && strcmp(ms[i - 1]->key, k) == 0)
      return gl_fail(GL_EARG, "save: %s: duplicate metadata key '%.*s'", path, ST_NAME_SHOWN, k);
  }
  return GL_OK;
}

/* The header, padded with spaces to a multiple of 8 (so the data starts 8-aligned). */
static int build_header(sbuf *h, const char *path, const st_tensor **ts, size_t n,
                        const st_meta **ms, size_t nm) {
  uint64_t off = 0;
  sb_put(h, "{", 1);
  if (nm) {
    sb_str(h, "\"__metadata__\":{");
    for (size_t i = 0; i < nm; i++) {
      if (i) sb_put(h, ",", 1);
      sb_json_str(h, ms[i]->key);
      sb_put(h, ":", 1);
      sb_json_str(h, ms[i]->value);
    }
    sb_put(h, "}", 1);
  }
  for (size_t i = 0; i < n; i++) {
    const gl_tensor *t = ts[i]->t;
    if (i || nm) sb_put(h, ",", 1);
    sb_json_str(h, ts[i]->name);
    sb_str(h, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      if (d) sb_put(h, ",", 1);
      sb_fmt_u64(h, (uint64_t)t->shape[d]);
    }
    sb_str(h, "],\"data_offsets\":[");
    sb_fmt_u64(h, off);
    sb_put(h, ",", 1);
    off += (uint64_t)t->numel * 4;
    sb_fmt_u64(h, off);
    sb_str(h, "]}");
  }
  sb_put(h, "}", 1);
  while (!h->oom && h->len % 8) sb_put(h, " ", 1);
  if (h->oom) return gl_fail(GL_ENOMEM, "save: %s: out of memory building the header", path);
  if (h->len > ST_MAX_HEADER)
    return gl_fail(GL_EARG, "save: %s: header of %zu bytes exceeds the %llu-byte limit", path,
                   h->len, (unsigned long long)ST_MAX_HEADER);
  return GL_OK;
}

static int write_all(FILE *fp, const void *p, size_t n) { return fwrite(p, 1, n, fp) == n; }

/* t's floats as little-endian bytes */
static int write_tensor(FILE *fp, const gl_tensor *t) {
  if (gl_io_host_is_le()) return write_all(fp, t->data, t->numel * sizeof(float));
  unsigned char buf[ST_CHUNK];
  size_t k = 0;
  for (size_t i = 0; i < t->numel; i++) {
    uint32_t u;
    memcpy(&u, &t->data[i], 4);
    for (int j = 0; j < 4; j++) buf[k++] = (unsigned char)(u >> (8 * j));
    if (k == sizeof buf) {
      if (!write_all(fp, buf, k)) return 0;
      k = 0;
    }
  }
  return write_all(fp, buf, k);
}

/* Make the rename itself durable; best effort (some filesystems refuse to fsync a dir). */
static void sync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir;
  if (!slash) dir = gl_io_strdup(".");
  else if (slash == path) dir = gl_io_strdup("/");
  else {
    dir = malloc((size_t)(slash - path) + 1);
    if (dir) {
      memcpy(dir, path, (size_t)(slash - path));
      dir[slash - path] = 0;
    }
  }
  if (!dir) return;
  int fd = open(dir, O_RDONLY);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

/* Remove `<base>.tmp.<pid>` files beside path whose writer process is gone (a save killed
 * before its rename).  Temps of live processes -- a concurrent save -- are left alone.  Best
 * effort: an unreadable directory or a failed unlink is not the new save's problem. */
static void remove_orphan_temps(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t dlen = slash ? (size_t)(slash - path) : 0, blen = strlen(base);
  char *dir = malloc(dlen + 2);
  if (!dir) return;
  if (!slash) strcpy(dir, ".");
  else if (dlen == 0) strcpy(dir, "/");
  else {
    memcpy(dir, path, dlen);
    dir[dlen] = 0;
  }
  DIR *d = opendir(dir);
  if (!d) { free(dir); return; }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *n = e->d_name;
    if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".tmp.", 5) != 0) continue;
    const char *digits = n + blen + 5;
    size_t nd = strspn(digits, "0123456789");
    if (nd == 0 || nd > 9 || digits[nd] != 0) continue;
    long pid = strtol(digits, NULL, 10);
    if (pid <= 0 || pid == (long)getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;   /* alive, or not ours to judge */
    size_t fl = strlen(dir) + strlen(n) + 2;
    char *full = malloc(fl);
    if (!full) break;
    snprintf(full, fl, "%s/%s", dir, n);
    (void)unlink(full);
    free(full);
  }
  closedir(d);
  free(dir);
}

int gl_st_save(const gl_st_file *f, const char *path) {
  const st_tensor **ts = NULL;
  const st_meta **ms = NULL;
  sbuf h = {0};
  char *tmp = NULL;
  FILE *fp = NULL;
  int st = GL_OK, created = 0;

  ts = malloc((f->n ? f->n : 1) * sizeof *ts);
  ms = malloc((f->nm ? f->nm : 1) * sizeof *ms);
  size_t tn = strlen(path) + 32;
  tmp = malloc(tn);
  if (!ts || !ms || !tmp) {
    st = gl_fail(GL_ENOMEM, "save: %s: out of memory", path);
    goto done;
  }
  for (size_t i = 0; i < f->n; i++) ts[i] = &f->ts[i];
  for (size_t i = 0; i < f->nm; i++) ms[i] = &f->ms[i];
  qsort(ts, f->n, sizeof *ts, cmp_name);
  qsort(ms, f->nm, sizeof *ms, cmp_key);
  if ((st = check_for_save(path, ts, f->n, ms, f->nm))) goto done;
  if ((st = build_header(&h, path, ts, f->n, ms, f->nm))) goto done;

  remove_orphan_temps(path);
  snprintf(tmp, tn, "%s.tmp.%ld", path, (long)getpid());
  fp = fopen(tmp, "wb");
  if (!fp) {
    st = gl_fail(GL_EIO, "save: %s: cannot create %s: %s", path, tmp, strerror(errno));
    goto done;
  }
  created = 1;
  unsigned char len8[8];
  for (int j = 0; j < 8; j++) len8[j] = (unsigned char)((uint64_t)h.len >> (8 * j));
  int ok = write_all(fp, len8, 8) && write_all(fp, h.s, h.len);
  for (size_t i = 0; ok && i < f->n; i++) ok = write_tensor(fp, ts[i]->t);
  if (ok) ok = fflush(fp) == 0 && fsync(fileno(fp)) == 0;
  if (!ok) {
    st = gl_fail(GL_EIO, "save: %s: writing %s failed: %s", path, tmp, strerror(errno));
    goto done;
  }
  int closed = fclose(fp);
  fp = NULL;
  if (closed != 0) {
    st = gl_fail(GL_EIO, "save: %s: closing %s failed: %s", path, tmp, strerror(errno));
    goto done;
  }
  if (rename(tmp, path) != 0) {
    st = gl_fail(GL_EIO, "save: %s: cannot rename %s into place: %s", path, tmp,
                 strerror(errno));
    goto done;
  }
  created = 0;      /* renamed: nothing left to remove */
  sync_dir_of(path);

done:
  if (fp) fclose(fp);
  if (created) remove(tmp);
  free(tmp);
  free(h.s);
  free(ts);
  free(ms);
  return st;
}

/* ------------------------------------------------------------------------ */
/* reading without blocking on what is not a regular file */

int gl_open_read(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat sb;
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  return fd;
}
