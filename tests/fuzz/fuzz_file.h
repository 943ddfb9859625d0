/* fuzz_file.h -- the fuzz targets' one helper: glimpse's loaders take paths, so each input
 * is written to an in-memory file (memfd) and its /proc/self/fd path is handed over.  A
 * memfd is a regular file to fstat, so the loaders' size checks see the true size. */
#ifndef GLIMPSE_FUZZ_FILE_H
#define GLIMPSE_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *fuzz_file(const uint8_t *data, size_t n) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("glimpse-fuzz", 0);
    if (fd < 0) { perror("memfd_create"); abort(); }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 || (n && pwrite(fd, data, n, 0) != (ssize_t)n)) {
    perror("fuzz_file");
    abort();
  }
  return path;
}

#endif
