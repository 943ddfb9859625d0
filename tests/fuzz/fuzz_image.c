/* fuzz_image.c -- libFuzzer target: image.load and image.info (engine/image_load.c: libpng,
 * libjpeg-turbo, stb_image for BMP/TGA/GIF) on arbitrary bytes.  The pixel cap is 256
 * Kpixel so a large but valid picture costs milliseconds, not the run. */
#define _GNU_SOURCE
#include "glimpse.h"
#include "fuzz_file.h"

#define FUZZ_MAX_PIXELS ((size_t)1 << 18)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  const char *path = fuzz_file(data, n);
  int w, h, comp;
  int info_ok = gl_image_info(path, &w, &h, &comp) == GL_OK;
  /* the last byte picks the channels asked for, so every conversion gets exercised */
  static const int chans[4] = {0, 1, 3, 4};
  int want = n ? chans[data[n - 1] & 3] : 0;
  gl_tensor *t = NULL;
  if (gl_image_load(&t, path, want, FUZZ_MAX_PIXELS) != GL_OK) return 0;
  if (!info_ok || t->shape[1] != h || t->shape[2] != w) abort();   /* info and load agree */
  for (size_t k = 0; k < t->numel; k++)
    if (!(t->data[k] >= 0.0f && t->data[k] <= 1.0f)) abort();     /* values in [0,1] */
  gl_release(t);
  return 0;
}
