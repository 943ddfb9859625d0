/* dist_mpi.h -- the interface between l_dist.c and the MPI plugin (bindings/mpi/dist_mpi.c).
 *
 * The plugin is the only code that includes mpi.h or links libmpi.  It is a shared object
 * that l_dist.c loads with dlopen the first time glimpse.dist.init() runs under an MPI
 * launcher, so the glimpse executable starts without libmpi and a run that never asks for
 * MPI (every test under AddressSanitizer but the distributed one) never initialises it.
 * No Lua here either: buffers are plain pointers and counts; every call returns 0 or fills
 * err with "MPI_<Call>: <the MPI library's message>" and returns non-zero.
 */
#ifndef GLIMPSE_DIST_MPI_H
#define GLIMPSE_DIST_MPI_H

#include <stddef.h>

#define GL_MPI_API_VERSION 2

enum { GL_MPI_SUM = 0, GL_MPI_MAX = 1, GL_MPI_MIN = 2 };

typedef struct gl_mpi_api {
  int version;                                 /* GL_MPI_API_VERSION */
  /* MPI_Init (when not yet initialised); errors come back as codes from then on */
  int (*init)(int *rank, int *size, char *err, size_t errlen);
  int (*barrier)(char *err, size_t errlen);
  /* n floats in place, from root to every rank */
  int (*bcast)(float *buf, size_t n, int root, char *err, size_t errlen);
  /* n floats in place: the element-wise sum, max or min over the ranks */
  int (*allreduce)(float *buf, size_t n, int op, char *err, size_t errlen);
  /* n floats from every rank into recv (size * n floats, rank order) */
  int (*allgather)(const float *send, size_t n, float *recv, char *err, size_t errlen);
  /* every rank's byte count: counts has size entries */
  int (*allgather_counts)(int count, int *counts, char *err, size_t errlen);
  /* bytes of every rank into recv, rank r's at displs[r] (counts from allgather_counts) */
  int (*allgather_bytes)(const char *send, int count, char *recv, const int *counts,
                         const int *displs, char *err, size_t errlen);
  /* n ints from every rank into recv (size * n ints, rank order): the headers that let
   * every rank check that all of them make the same call with the same arguments */
  int (*allgather_ints)(const int *send, int n, int *recv, char *err, size_t errlen);
  void (*finalize)(void);                      /* the end of a run that went well */
  /* end every rank of the job now (a rank that failed, or ranks that no longer agree) */
  void (*abort)(int code);
} gl_mpi_api;

/* the one symbol the plugin exports (l_dist.c finds it with dlsym) */
extern const gl_mpi_api gl_mpi_plugin;

#endif
