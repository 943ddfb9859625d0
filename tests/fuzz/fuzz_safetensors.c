/* fuzz_safetensors.c -- libFuzzer target: glimpse.load's reader (engine/io_load.c) on
 * arbitrary bytes.  A file that loads has every tensor read back in full. */
#define _GNU_SOURCE
#include "glimpse.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  gl_st_file *f = NULL;
  if (gl_st_load(&f, fuzz_file(data, n)) != GL_OK) return 0;
  volatile float sum = 0;
  for (size_t i = 0; i < gl_st_count(f); i++) {
    const gl_tensor *t = gl_st_tensor(f, i);
    for (size_t k = 0; k < t->numel; k++) sum += t->data[k];
  }
  for (size_t i = 0; i < gl_st_meta_count(f); i++)
    if (!gl_st_meta_key(f, i) || !gl_st_meta_value(f, i)) abort();
  gl_st_free(f);
  return 0;
}
