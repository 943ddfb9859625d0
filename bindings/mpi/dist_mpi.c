/* dist_mpi.c -- the MPI plugin: the few MPI calls glimpse.dist makes, behind the plain C
 * interface of dist_mpi.h.  Built as its own shared object (libglimpse_mpi.so) when the
 * Makefile finds MPI, and loaded by l_dist.c only when a run asks for MPI (see dist_mpi.h).
 * Tensors are float32 and contiguous, so every call works on the caller's buffer in place.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>

#include "dist_mpi.h"

/* "MPI_Call: message" into err; returns 1 */
static int fail(const char *call, int code, char *err, size_t errlen) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", code);
  snprintf(err, errlen, "%s: %s", call, msg);
  return 1;
}

static int too_big(const char *call, size_t n, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %zu elements is more than one MPI call takes (%d)", call, n, INT_MAX);
  return 1;
}

static int p_init(int *rank, int *size, char *err, size_t errlen) {
  int on = 0, rc;
  MPI_Initialized(&on);
  if (!on) {
    rc = MPI_Init(NULL, NULL);
    if (rc != MPI_SUCCESS) return fail("MPI_Init", rc, err, errlen);
  }
  /* errors come back as codes (the default handler would end the process) */
  rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return fail("MPI_Comm_set_errhandler", rc, err, errlen);
  rc = MPI_Comm_rank(MPI_COMM_WORLD, rank);
  if (rc != MPI_SUCCESS) return fail("MPI_Comm_rank", rc, err, errlen);
  rc = MPI_Comm_size(MPI_COMM_WORLD, size);
  if (rc != MPI_SUCCESS) return fail("MPI_Comm_size", rc, err, errlen);
  return 0;
}

static int p_barrier(char *err, size_t errlen) {
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail("MPI_Barrier", rc, err, errlen);
}

static int p_bcast(float *buf, size_t n, int root, char *err, size_t errlen) {
  if (n > INT_MAX) return too_big("MPI_Bcast", n, err, errlen);
  int rc = MPI_Bcast(buf, (int)n, MPI_FLOAT, root, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail("MPI_Bcast", rc, err, errlen);
}

static int p_allreduce(float *buf, size_t n, int op, char *err, size_t errlen) {
  if (n > INT_MAX) return too_big("MPI_Allreduce", n, err, errlen);
  MPI_Op mop = op == GL_MPI_MAX ? MPI_MAX : op == GL_MPI_MIN ? MPI_MIN : MPI_SUM;
  int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, mop, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail("MPI_Allreduce", rc, err, errlen);
}

static int p_allgather(const float *send, size_t n, float *recv, char *err, size_t errlen) {
  if (n > INT_MAX) return too_big("MPI_Allgather", n, err, errlen);
  int rc = MPI_Allgather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail("MPI_Allgather", rc, err, errlen);
}

static int p_allgather_counts(int count, int *counts, char *err, size_t errlen) {
  int rc = MPI_Allgather(&count, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail("MPI_Allgather", rc, err, errlen);
}

static int p_allgather_bytes(const char *send, int count, char *recv, const int *counts,
                             const int *displs, char *err, size_t errlen) {
  int rc = MPI_Allgatherv(send, count, MPI_CHAR, recv, counts, displs, MPI_CHAR, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail("MPI_Allgatherv", rc, err, errlen);
}

static int p_allgather_ints(const int *send, int n, int *recv, char *err, size_t errlen) {
  int rc = MPI_Allgather(send, n, MPI_INT, recv, n, MPI_INT, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail("MPI_Allgather", rc, err, errlen);
}

static void p_abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
}

static void p_finalize(void) {
  int on = 0, done = 0;
  MPI_Initialized(&on);
  MPI_Finalized(&done);
  if (on && !done) MPI_Finalize();
}

const gl_mpi_api gl_mpi_plugin = {GL_MPI_API_VERSION, p_init, p_barrier, p_bcast, p_allreduce,
                                  p_allgather, p_allgather_counts, p_allgather_bytes,
                                  p_allgather_ints, p_finalize, p_abort};
