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
  /* each open costs zlib's big buffers (and ASan an mmap/munmap pair for each): read the data
   * only past a valid header, which the loaders parse with the same code as the info */
  gl_tensor *t = NULL;
  if (info_ok) {
    if (gl_read_idx(&t, path, 0, 0, 0) == GL_OK) {
      if (t->numel != info.numel) abort();
      gl_release(t);
    }
    if (gl_read_idx(&t, path, 1, 2, info.type == 0x08) == GL_OK) gl_release(t);
  } else if (gl_read_idx(&t, path, 0, 0, 0) == GL_OK) {
    abort();                                   /* no header, yet it loaded */
  }
  unsigned char *buf;
  size_t len;
  if (gl_read_gz(path, (size_t)1 << 20, &buf, &len) == GL_OK) gl_gz_free(buf);
  return 0;
}
