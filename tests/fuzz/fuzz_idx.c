/* fuzz_idx.c -- libFuzzer target: the gzip and IDX readers (engine/io_gz.c) on arbitrary
 * bytes, plain or gzipped: the whole array, a slice, the header alone, the whole file. */
#define _GNU_SOURCE
#include "glimpse.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  const char *path = fuzz_file(data, n);
  gl_idx_info info;
  int info_ok = gl_read_idx_info(path, &info) == GL_OK;
  gl_tensor *t = NULL;
  if (gl_read_idx(&t, path, 0, 0, 0) == GL_OK) {
    if (!info_ok || t->numel != info.numel) abort();
    gl_release(t);
  }
  if (gl_read_idx(&t, path, 1, 2, info_ok && info.type == 0x08) == GL_OK) gl_release(t);
  unsigned char *buf;
  size_t len;
  if (gl_read_gz(path, (size_t)1 << 20, &buf, &len) == GL_OK) gl_gz_free(buf);
  return 0;
}
