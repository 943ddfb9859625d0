/* tsp.c -- exact travelling-salesman tours on small planar instances (Held-Karp dynamic
 * programming over subsets, O(2^n n^2) time, O(2^n n) memory), the labels of the pointer
 * networks' TSP problems (Vinyals et al. 2015, section 4.3: they used Held-Karp for n <= 20).
 *
 * Cities 1 .. n-1 are the bits 0 .. n-2 of a subset S; cost[S, j] (j in S)
 * is the length of the shortest path that leaves city 0, visits exactly the cities of S and
 * ends at j.  Subsets are visited in increasing order, so S \ {j} < S is always ready:
 *
 *   cost[{j}, j] = d(0, j);   cost[S, j] = min over k in S \ {j} of cost[S \ {j}, k] + d(k, j)
 *
 * and the tour's length is min over j of cost[all, j] + d(j, 0).  A row holds all n - 1
 * cities (rounded up to 4), +inf outside S, so each minimum is one dense loop the compiler
 * vectorises.  Distances and sums are in double.  The tour is read back without a table of
 * predecessors: the predecessor of j in S is the lowest k whose sum gives cost[S, j] again
 * (the same double additions, so equality is exact), which also breaks ties toward the
 * lowest city.  The tour starts at city 0 and goes in the direction whose second city has
 * the lower index.
 *
 * gl_tsp_solve labels many instances, each on its own pool thread (parallel.c) with a
 * table of its own (n = 20: 2^19 rows of 20 doubles, 80 MiB per thread).
 */
#include "glimpse.h"
#include "parallel.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
  double *cost;
  size_t cap;          /* doubles cost holds */
  double d[GL_TSP_MAX_N][GL_TSP_MAX_N];          /* d[i][j]: the distance of i and j */
  double dk[GL_TSP_MAX_N - 1][GL_TSP_MAX_N + 3]; /* dk[j][k] = d[k+1][j+1], padded with 0 */
} tsp_table;

/* one instance: n cities at xy[2i], xy[2i+1]; tour[0..n-1] 0-based; tb big enough */
static void solve_one(int n, const double *xy, int *tour, double *length, tsp_table *tb) {
  double(*d)[GL_TSP_MAX_N] = tb->d;   /* on the heap: no large aligned stack frame */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      double dx = xy[2 * i] - xy[2 * j], dy = xy[2 * i + 1] - xy[2 * j + 1];
      d[i][j] = sqrt(dx * dx + dy * dy);
    }
  if (n <= 3) {   /* every tour of 3 cities has the same length */
    double s = 0;
    for (int i = 0; i < n; i++) {
      tour[i] = i;
      s += d[i][(i + 1) % n];
    }
    *length = s;
    return;
  }
  const int m = n - 1;
  const uint32_t full = ((uint32_t)1 << m) - 1;
  /* dk[j][k] = d(k+1, j+1): the distances into j, contiguous over k */
  double(*dk)[GL_TSP_MAX_N + 3] = tb->dk;
  for (int j = 0; j < m; j++)
    for (int k = 0; k < m; k++) dk[j][k] = d[k + 1][j + 1];
  const int w = (m + 3) & ~3;   /* a row's stride: whole groups of 4, the rest +inf */
  double *cost = tb->cost;
  for (int j = 0; j < m; j++) {
    double *row = cost + ((size_t)1 << j) * (size_t)w;
    for (int k = 0; k < w; k++) row[k] = INFINITY;
    row[j] = d[0][j + 1];
  }
  for (int j = 0; j < m; j++)
    for (int k = m; k < w; k++) dk[j][k] = 0;
  for (uint32_t S = 3; S <= full; S++) {
    double *row = cost + (size_t)S * (size_t)w;
    if ((S & (S - 1)) == 0) continue;                 /* one city: the base case */
    for (int j = 0; j < w; j++) row[j] = INFINITY;
    for (uint32_t js = S; js; js &= js - 1) {
      int j = __builtin_ctz(js);
      const double *prow = cost + (size_t)(S & ~((uint32_t)1 << j)) * (size_t)w;
      const double *dj = dk[j];
      /* the minimum over all k: the cities outside S \ {j} are +inf there */
      double b0 = INFINITY, b1 = INFINITY, b2 = INFINITY, b3 = INFINITY;
      for (int k = 0; k < w; k += 4) {
        double c0 = prow[k] + dj[k], c1 = prow[k + 1] + dj[k + 1];
        double c2 = prow[k + 2] + dj[k + 2], c3 = prow[k + 3] + dj[k + 3];
        b0 = c0 < b0 ? c0 : b0;
        b1 = c1 < b1 ? c1 : b1;
        b2 = c2 < b2 ? c2 : b2;
        b3 = c3 < b3 ? c3 : b3;
      }
      b0 = b1 < b0 ? b1 : b0;
      b2 = b3 < b2 ? b3 : b2;
      row[j] = b2 < b0 ? b2 : b0;
    }
  }
  double best = INFINITY;
  int last = 0;
  const double *frow = cost + (size_t)full * (size_t)w;
  for (int j = 0; j < m; j++) {
    double c = frow[j] + d[j + 1][0];
    if (c < best) {
      best = c;
      last = j;
    }
  }
  /* walk back from the last city: the predecessor of j in S is the lowest k whose sum
   * gives cost[S, j] again (the same double additions, so equality is exact) */
  uint32_t S = full;
  int j = last, pos = n - 1;
  for (;;) {
    tour[pos--] = j + 1;
    double target = cost[(size_t)S * (size_t)w + (size_t)j];
    S &= ~((uint32_t)1 << j);
    if (!S) break;
    const double *prow = cost + (size_t)S * (size_t)w;
    int k = 0;
    while (!(S >> k & 1) || prow[k] + dk[j][k] != target) k++;
    j = k;
  }
  tour[0] = 0;
  if (tour[1] > tour[n - 1]) {   /* the canonical direction */
    for (int a = 1, b = n - 1; a < b; a++, b--) {
      int t = tour[a];
      tour[a] = tour[b];
      tour[b] = t;
    }
  }
  *length = best;
}

/* doubles of an n-city table: 2^(n-1) rows of n-1 rounded up to 4 */
static size_t states_of(int n) {
  return n <= 3 ? 0 : ((size_t)1 << (n - 1)) * (size_t)((n - 1 + 3) & ~3);
}

typedef struct {
  const int *n;
  const double *xy;
  const size_t *off;
  int *tours;
  double *lengths;
  size_t need;                       /* states of the largest instance */
  tsp_table tables[GL_PAR_MAX_THREADS];
  int failed[GL_PAR_MAX_THREADS];    /* a slot's table could not be allocated */
} tsp_ctx;

static void solve_range(void *p, size_t lo, size_t hi, int slot) {
  tsp_ctx *c = p;
  tsp_table *tb = &c->tables[slot];
  for (size_t i = lo; i < hi; i++) {
    size_t need = states_of(c->n[i]);
    if (need > tb->cap) {   /* the largest size once per thread: malloc is thread-safe */
      free(tb->cost);
      tb->cost = malloc(c->need * sizeof(double));
      tb->cap = tb->cost ? c->need : 0;
      if (!tb->cap) {
        c->failed[slot] = 1;
        return;
      }
    }
    solve_one(c->n[i], c->xy + 2 * c->off[i], c->tours + c->off[i], &c->lengths[i], tb);
  }
}

int gl_tsp_solve(int count, const int *n, const double *xy, int *tours, double *lengths) {
  if (count < 0) return gl_fail(GL_EARG, "tsp_solve: count = %d is negative", count);
  if (count == 0) return GL_OK;
  size_t *off = malloc((size_t)count * sizeof *off);
  if (!off) return gl_fail(GL_ENOMEM, "tsp_solve: out of memory (%d instances)", count);
  size_t total = 0, need = 0, work = 0;
  for (int i = 0; i < count; i++) {
    if (n[i] < 2 || n[i] > GL_TSP_MAX_N) {
      free(off);
      return gl_fail(GL_EARG, "tsp_solve: instance %d has %d cities (2 to %d)", i + 1, n[i],
                     GL_TSP_MAX_N);
    }
    off[i] = total;
    total += (size_t)n[i];
    if (states_of(n[i]) > need) need = states_of(n[i]);
    work += states_of(n[i]) * (size_t)n[i] / 2 + 1;
  }
  for (size_t k = 0; k < 2 * total; k++)
    if (!isfinite(xy[k])) {
      free(off);
      return gl_fail(GL_EVALUE, "tsp_solve: coordinate %zu is not finite", k + 1);
    }
  tsp_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    free(off);
    return gl_fail(GL_ENOMEM, "tsp_solve: out of memory");
  }
  c->n = n;
  c->xy = xy;
  c->off = off;
  c->tours = tours;
  c->lengths = lengths;
  c->need = need;
  /* the cost of an instance is its own; the pool splits by count, so give it the mean */
  gl_parallel_for((size_t)count, work / (size_t)count + 1, solve_range, c);
  int failed = 0;
  for (int s = 0; s < GL_PAR_MAX_THREADS; s++) {
    failed |= c->failed[s];
    free(c->tables[s].cost);
  }
  free(c);
  free(off);
  if (failed)
    return gl_fail(GL_ENOMEM, "tsp_solve: out of memory for a table of %zu states "
                              "(%zu MiB)", need, need * (sizeof(double) + 1) >> 20);
  return GL_OK;
}
