/* ops_rnn.c -- recurrent cells as fused ops: the Elman RNN (tanh or relu), the LSTM and the
 * GRU, with PyTorch's equations and gate layouts, each as a single step (a cell) and as a
 * whole sequence (one node for all T steps of one layer and direction).
 *
 * Why fused: an unrolled cell built from elementwise ops records a dozen nodes per step and
 * walks its activations a dozen times; here a step is one sgemm (h W_hh^T) plus one loop over
 * the gates, and its backward is written out by hand.  The input projection x W_ih^T + b_ih
 * is not done here: callers compute it for the whole sequence with one gl_linear, so these
 * ops take xp (B,T,G) (or (B,G) for a cell), G = 4H (LSTM), 3H (GRU), H (RNN).
 *
 * Masks: an optional 0/1 mask (B) for a cell or (B,T) for a sequence.  A row whose mask is 0
 * at a step keeps its state unchanged (h and c are copied through, gradients pass through
 * untouched) and the sequence op's output there is exactly 0, so padding never leaks into
 * states or outputs.  With a reversed sequence and prefix masks (lengths), each sample's
 * reverse pass starts at its own last valid step.
 *
 * The sequence op saves, per step, the state entering it (B,T,H) and the gate activations
 * (B,T,W), so its backward needs one sgemm per step (dh = dG W_hh) and, for the weights, one
 * sgemm over all steps at the end (dW_hh = dG^T H_prev with K = B*T).
 *
 * The transcendental functions are the branch-free float versions of vmath.h (exp by range
 * reduction and a polynomial, accurate to about 1 ulp) so the gate loops vectorise; libm's
 * scalar tanhf/expf would cost more than the sgemm at these sizes.
 *
 * Threads: each step's gate loops run their batch rows on the pool (parallel.h); the
 * products stay on the calling thread (OpenBLAS's threads where they are big enough), and
 * the bias gradient, a sum over every row and step, stays on one thread.
 */
#include "glimpse_internal.h"
#include "parallel.h"
#include "vmath.h"

#include <math.h>
#include <string.h>

#define SHAPE(buf, t) gl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* ------------------------------------------------------------------------ */
/* one run of a recurrence: the shapes and the buffers a step reads and writes */

enum { RNN_TANH = 0, RNN_RELU, RNN_LSTM, RNN_GRU, RNN_KINDS };

typedef struct {
  int kind, B, T, H, G, W;   /* G: gate rows of W_hh; W: per-step saved activations per row */
  int reverse;
  const float *xp;           /* (B,T,G) input projections (b_ih included) */
  const float *w, *bias;     /* W_hh (G,H); b_hh (G) or NULL */
  const float *mask;         /* (B,T) or NULL */
  float *y;                  /* (B,T,H) outputs or NULL */
  float *h, *c;              /* the running state (B,H): the h_n / c_n outputs */
  float *A;                  /* activations: (B,T,W) when saving, else (B,W) */
  size_t lda;                /* row stride of A: T*W when saving, W otherwise */
  float *tmp;                /* GRU: (B,3H) for h W_hh^T + b_hh */
} rnn_run;

/* gates of the kind, in units of H (rows of W_hh), and saved activation widths */
static const int kind_gates[RNN_KINDS] = {1, 1, 4, 3};
static const int kind_saved[RNN_KINDS] = {1, 1, 4, 4};

static inline int row_active(const rnn_run *r, int b, int t) {
  return !r->mask || r->mask[(size_t)b * r->T + t] != 0.0f;
}

/* one step's row loop on the pool: rows b in [lo, hi) */
typedef struct {
  rnn_run *r;
  int t;
  float *a;                      /* forward: the step's activations (or fill's destination) */
  size_t lda;
  const float *dy, *hprev, *cprev;
  float *dh, *dc, *dgx, *dgh;    /* backward */
} step_ctx;

static void run_rows(size_t B, size_t cost, gl_range_fn fn, step_ctx c) {
  gl_parallel_for(B, cost, fn, &c);
}

/* dst (B rows of `ld` stride) = xp[:, t] + b_hh  (the part of the pre-activation that does
 * not depend on h) */
static void fill_rows(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const step_ctx *k = ctx;
  const rnn_run *r = k->r;
  int G = r->G, t = k->t;
  float *dst = k->a;
  size_t ld = k->lda;
  for (int b = (int)lo; b < (int)hi; b++) {
    const float *x = r->xp + ((size_t)b * r->T + t) * G;
    float *d = dst + (size_t)b * ld;
    if (r->bias)
      for (int j = 0; j < G; j++) d[j] = x[j] + r->bias[j];
    else
      memcpy(d, x, sizeof(float) * (size_t)G);
  }
}

static void fill_input_part(rnn_run *r, int t, float *dst, size_t ld) {
  run_rows((size_t)r->B, (size_t)r->G, fill_rows, (step_ctx){.r = r, .t = t, .a = dst, .lda = ld});
}

/* an RNN or LSTM step: a = xp[:, t] + b_hh + h W_hh^T (G = gates * H columns), then the
 * kind's row loop (`cost` operations per unit of H) */
static void gated_step_forward(rnn_run *r, int t, float *a, size_t lda, size_t cost,
                               gl_range_fn rows) {
  int B = r->B, H = r->H;
  fill_input_part(r, t, a, lda);
  gl_sgemm(0, 1, B, r->G, H, 1.0f, r->h, H, r->w, H, 1.0f, a, (int)lda);
  run_rows((size_t)B, cost * (size_t)H, rows, (step_ctx){.r = r, .t = t, .a = a, .lda = lda});
}

/* ------------------------------------------------------------------------ */
/* Elman RNN step: h' = act(xp + h W_hh^T + b_hh), act = tanh or relu; a = h' is saved
 * backward: da = dh' * act'(a) (1 - a^2 for tanh, [a > 0] for relu); dxp = da, dh = da W_hh */

/* the row loop of the RNN and LSTM steps (the LSTM's row kernel is in its section) */
static void rnn_rows_fwd(void *ctx, size_t lo, size_t hi, int slot);
static void lstm_row_forward(int H, float *restrict ai, float *restrict af, float *restrict ag,
                             float *restrict ao, float *restrict c, float *restrict h);

static void rnn_step_forward(rnn_run *r, int t, float *a, size_t lda) {
  gated_step_forward(r, t, a, lda, 10, rnn_rows_fwd);
}

static void rnn_rows_fwd(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const step_ctx *k = ctx;
  rnn_run *r = k->r;
  int H = r->H, t = k->t;
  float *a = k->a;
  size_t lda = k->lda;
  int relu = r->kind == RNN_RELU;
  for (int b = (int)lo; b < (int)hi; b++) {
    float *ar = a + (size_t)b * lda, *h = r->h + (size_t)b * H;
    float *y = r->y ? r->y + ((size_t)b * r->T + t) * H : NULL;
    if (!row_active(r, b, t)) {
      if (y) memset(y, 0, sizeof(float) * (size_t)H);
      continue;
    }
    if (r->kind == RNN_LSTM)
      lstm_row_forward(H, ar, ar + H, ar + 2 * H, ar + 3 * H, r->c + (size_t)b * H, h);
    else if (relu)
      for (int j = 0; j < H; j++) h[j] = ar[j] = ar[j] > 0.0f ? ar[j] : 0.0f;
    else
      for (int j = 0; j < H; j++) h[j] = ar[j] = vm_tanh(ar[j]);
    if (y) memcpy(y, h, sizeof(float) * (size_t)H);
  }
}

/* dh: in, d(loss)/d(state after step t) without the output term; out, the direct part of
 * d/d(state before t) (0 here: h reaches h' only through W_hh, added by the caller's sgemm).
 * The row kernels take restrict pointers so the loops vectorise. */
static void rnn_row_backward(int H, int relu, const float *restrict a, float *restrict dh,
                             float *restrict g) {
  for (int j = 0; j < H; j++) {
    g[j] = relu ? (a[j] > 0.0f ? dh[j] : 0.0f) : dh[j] * (1.0f - a[j] * a[j]);
    dh[j] = 0.0f;
  }
}

/* dh += dy[:, t] for the active rows: the output's gradient joins the state's */
static void add_output_grad(const rnn_run *r, int t, const float *dy, float *dh, int b0,
                            int b1) {
  if (!dy) return;
  int H = r->H;
  for (int b = b0; b < b1; b++) {
    if (!row_active(r, b, t)) continue;
    const float *restrict gy = dy + ((size_t)b * r->T + t) * H;
    float *restrict d = dh + (size_t)b * H;
    for (int j = 0; j < H; j++) d[j] += gy[j];
  }
}

static void rnn_rows_bwd(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const step_ctx *k = ctx;
  const rnn_run *r = k->r;
  int H = r->H, T = r->T, t = k->t, relu = r->kind == RNN_RELU;
  add_output_grad(r, t, k->dy, k->dh, (int)lo, (int)hi);
  for (int b = (int)lo; b < (int)hi; b++) {
    if (!row_active(r, b, t)) continue;
    size_t bt = (size_t)b * T + t;
    rnn_row_backward(H, relu, r->A + bt * H, k->dh + (size_t)b * H, k->dgx + bt * H);
  }
}

static void rnn_step_backward(const rnn_run *r, int t, const float *dy, float *dh, float *dc,
                              float *dgx, float *dgh, const float *hprev, const float *cprev) {
  (void)dc; (void)dgh; (void)hprev; (void)cprev;
  run_rows((size_t)r->B, 4 * (size_t)r->H, rnn_rows_bwd,
           (step_ctx){.r = (rnn_run *)r, .t = t, .dy = dy, .dh = dh, .dgx = dgx});
}

/* ------------------------------------------------------------------------ */
/* LSTM step (gate rows i, f, g, o):
 *   [ai af ag ao] = xp + h W_hh^T + b_hh
 *   i = s(ai)  f = s(af)  g = tanh(ag)  o = s(ao)      (s the sigmoid)
 *   c' = f c + i g      h' = o tanh(c')                 a = [i f g o] is saved
 * backward (tc = tanh(c'), recomputed from c and a):
 *   do = dh' tc;   dc'_tot = dc' + dh' o (1 - tc^2)
 *   di = dc'_tot g;  df = dc'_tot c;  dg = dc'_tot i;   dc = dc'_tot f
 *   dG = [di i(1-i), df f(1-f), dg (1-g^2), do o(1-o)];  dxp = dG;  dh = dG W_hh */

static void lstm_row_forward(int H, float *restrict ai, float *restrict af, float *restrict ag,
                             float *restrict ao, float *restrict c, float *restrict h) {
  for (int j = 0; j < H; j++) {
    float i = vm_sigmoid(ai[j]), f = vm_sigmoid(af[j]), g = vm_tanh(ag[j]);
    float o = vm_sigmoid(ao[j]);
    float cn = f * c[j] + i * g;
    ai[j] = i;
    af[j] = f;
    ag[j] = g;
    ao[j] = o;
    c[j] = cn;
    h[j] = o * vm_tanh(cn);
  }
}

static void lstm_step_forward(rnn_run *r, int t, float *a, size_t lda) {
  gated_step_forward(r, t, a, lda, 60, rnn_rows_fwd);
}


static void lstm_row_backward(int H, const float *restrict i, const float *restrict f,
                              const float *restrict g, const float *restrict o,
                              const float *restrict cp, float *restrict dh, float *restrict dc,
                              float *restrict gi, float *restrict gf, float *restrict gg,
                              float *restrict go) {
  for (int j = 0; j < H; j++) {
    float tc = vm_tanh(f[j] * cp[j] + i[j] * g[j]);
    float dct = dc[j] + dh[j] * o[j] * (1.0f - tc * tc);
    gi[j] = dct * g[j] * i[j] * (1.0f - i[j]);
    gf[j] = dct * cp[j] * f[j] * (1.0f - f[j]);
    gg[j] = dct * i[j] * (1.0f - g[j] * g[j]);
    go[j] = dh[j] * tc * o[j] * (1.0f - o[j]);
    dc[j] = dct * f[j];
    dh[j] = 0.0f;
  }
}

static void lstm_rows_bwd(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const step_ctx *k = ctx;
  const rnn_run *r = k->r;
  int H = r->H, T = r->T, t = k->t;
  add_output_grad(r, t, k->dy, k->dh, (int)lo, (int)hi);
  for (int b = (int)lo; b < (int)hi; b++) {
    if (!row_active(r, b, t)) continue;
    size_t bt = (size_t)b * T + t;
    const float *a = r->A + bt * 4 * H;
    float *g = k->dgx + bt * 4 * H;
    lstm_row_backward(H, a, a + H, a + 2 * H, a + 3 * H, k->cprev + bt * H,
                      k->dh + (size_t)b * H, k->dc + (size_t)b * H, g, g + H, g + 2 * H,
                      g + 3 * H);
  }
}

static void lstm_step_backward(const rnn_run *r, int t, const float *dy, float *dh, float *dc,
                               float *dgx, float *dgh, const float *hprev, const float *cprev) {
  (void)dgh; (void)hprev;
  run_rows((size_t)r->B, 40 * (size_t)r->H, lstm_rows_bwd,
           (step_ctx){.r = (rnn_run *)r, .t = t, .dy = dy, .dh = dh, .dc = dc, .dgx = dgx,
                      .cprev = cprev});
}

/* ------------------------------------------------------------------------ */
/* GRU step (gate rows r, z, n):
 *   [hr hz hn] = h W_hh^T + b_hh;   [xr xz xn] = xp
 *   r = s(xr + hr)  z = s(xz + hz)  n = tanh(xn + r hn)  h' = (1 - z) n + z h
 *   a = [r z n hn] is saved
 * backward: dn = dh' (1-z);  dz = dh' (h - n);  dan = dn (1 - n^2)
 *   dxp = [dr r(1-r), dz z(1-z), dan] with dr = dan hn
 *   d[hr hz hn] = [dr r(1-r), dz z(1-z), dan r];   dh = dh' z + d[hr hz hn] W_hh */

static void gru_row_forward(int H, const float *restrict xr, const float *restrict xz,
                            const float *restrict xn, const float *restrict hr,
                            const float *restrict hz, const float *restrict hn,
                            float *restrict ar, float *restrict az, float *restrict an,
                            float *restrict ahn, float *restrict h) {
  for (int j = 0; j < H; j++) {
    float r = vm_sigmoid(xr[j] + hr[j]);
    float z = vm_sigmoid(xz[j] + hz[j]);
    float n = vm_tanh(xn[j] + r * hn[j]);
    ar[j] = r;
    az[j] = z;
    an[j] = n;
    ahn[j] = hn[j];
    h[j] = (1.0f - z) * n + z * h[j];
  }
}

static void gru_rows_fwd(void *ctx, size_t lo, size_t hi, int slot);

static void gru_step_forward(rnn_run *r, int t, float *a, size_t lda) {
  int B = r->B, H = r->H, G = 3 * H;
  float *hp = r->tmp;
  for (int b = 0; b < B; b++) {
    float *d = hp + (size_t)b * G;
    if (r->bias) memcpy(d, r->bias, sizeof(float) * (size_t)G);
    else memset(d, 0, sizeof(float) * (size_t)G);
  }
  gl_sgemm(0, 1, B, G, H, 1.0f, r->h, H, r->w, H, 1.0f, hp, G);
  run_rows((size_t)B, 50 * (size_t)H, gru_rows_fwd, (step_ctx){.r = r, .t = t, .a = a, .lda = lda});
}

static void gru_rows_fwd(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const step_ctx *k = ctx;
  rnn_run *r = k->r;
  int H = r->H, G = 3 * H, t = k->t;
  float *a = k->a, *hp = r->tmp;
  size_t lda = k->lda;
  for (int b = (int)lo; b < (int)hi; b++) {
    float *h = r->h + (size_t)b * H;
    float *y = r->y ? r->y + ((size_t)b * r->T + t) * H : NULL;
    if (!row_active(r, b, t)) {
      if (y) memset(y, 0, sizeof(float) * (size_t)H);
      continue;
    }
    const float *x = r->xp + ((size_t)b * r->T + t) * G, *hb = hp + (size_t)b * G;
    float *ar = a + (size_t)b * lda;
    gru_row_forward(H, x, x + H, x + 2 * H, hb, hb + H, hb + 2 * H, ar, ar + H, ar + 2 * H,
                    ar + 3 * H, h);
    if (y) memcpy(y, h, sizeof(float) * (size_t)H);
  }
}

static void gru_row_backward(int H, const float *restrict r, const float *restrict z,
                             const float *restrict n, const float *restrict hn,
                             const float *restrict hp, float *restrict dh,
                             float *restrict gxr, float *restrict gxz, float *restrict gxn,
                             float *restrict ghr, float *restrict ghz, float *restrict ghn) {
  for (int j = 0; j < H; j++) {
    float dan = dh[j] * (1.0f - z[j]) * (1.0f - n[j] * n[j]);
    float dar = dan * hn[j] * r[j] * (1.0f - r[j]);
    float daz = dh[j] * (hp[j] - n[j]) * z[j] * (1.0f - z[j]);
    gxr[j] = dar;
    gxz[j] = daz;
    gxn[j] = dan;
    ghr[j] = dar;
    ghz[j] = daz;
    ghn[j] = dan * r[j];
    dh[j] *= z[j];
  }
}

static void gru_rows_bwd(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const step_ctx *k = ctx;
  const rnn_run *r = k->r;
  int H = r->H, T = r->T, G = 3 * H, t = k->t;
  add_output_grad(r, t, k->dy, k->dh, (int)lo, (int)hi);
  for (int b = (int)lo; b < (int)hi; b++) {
    if (!row_active(r, b, t)) continue;
    size_t bt = (size_t)b * T + t;
    const float *a = r->A + bt * 4 * H;
    float *gx = k->dgx + bt * G, *gh = k->dgh + bt * G;
    gru_row_backward(H, a, a + H, a + 2 * H, a + 3 * H, k->hprev + bt * H,
                     k->dh + (size_t)b * H, gx, gx + H, gx + 2 * H, gh, gh + H, gh + 2 * H);
  }
}

static void gru_step_backward(const rnn_run *r, int t, const float *dy, float *dh, float *dc,
                              float *dgx, float *dgh, const float *hprev, const float *cprev) {
  (void)dc; (void)cprev;
  run_rows((size_t)r->B, 30 * (size_t)r->H, gru_rows_bwd,
           (step_ctx){.r = (rnn_run *)r, .t = t, .dy = dy, .dh = dh, .dgx = dgx, .dgh = dgh,
                      .hprev = hprev});
}

/* ------------------------------------------------------------------------ */
/* the driver shared by every kind: forward over the steps, the node, and the backward */

typedef void (*step_fwd_fn)(rnn_run *, int, float *, size_t);
typedef void (*step_bwd_fn)(const rnn_run *, int, const float *, float *, float *, float *,
                            float *, const float *, const float *);

static const step_fwd_fn step_fwd[RNN_KINDS] = {rnn_step_forward, rnn_step_forward,
                                                lstm_step_forward, gru_step_forward};
static const step_bwd_fn step_bwd[RNN_KINDS] = {rnn_step_backward, rnn_step_backward,
                                                lstm_step_backward, gru_step_backward};

/* node layout: inputs 0 xp, 1 h0, 2 c0, 3 w_hh, 4 b_hh (absent ones NULL);
 * saved: A, Hprev, [Cprev (LSTM)], [mask];
 * state: rnn_state (has_y: the sequence op; the cell has no y) */
enum { IN_XP, IN_H, IN_C, IN_W, IN_B, NIN };
typedef struct { int kind, B, T, H, reverse, has_mask, has_y; } rnn_state;

/* Backward over all steps in reverse processing order (see the kinds' sections). */
static int rnn_backward(gl_node *n, gl_tensor **gout) {
  const rnn_state *rs = GL_NODE_STATE(n, rnn_state);
  int kind = rs->kind, B = rs->B, T = rs->T, H = rs->H;
  int has_mask = rs->has_mask, has_y = rs->has_y;
  int G = kind_gates[kind] * H, lstm = kind == RNN_LSTM;
  int k = 0;
  gl_tensor *A = n->saved[k++], *Hp = n->saved[k++];
  gl_tensor *Cp = lstm ? n->saved[k++] : NULL;
  gl_tensor *mask = has_mask ? n->saved[k++] : NULL;
  rnn_run r = {.kind = kind, .B = B, .T = T, .H = H, .G = G, .W = kind_saved[kind] * H,
               .reverse = rs->reverse, .w = n->in[IN_W]->data,
               .mask = mask ? mask->data : NULL, .A = A->data};
  const float *dy = has_y ? gout[0]->data : NULL;
  const gl_tensor *dhn = gout[has_y ? 1 : 0], *dcn = lstm ? gout[has_y ? 2 : 1] : NULL;
  /* a fresh gradient buffer for xp is used as dG itself (no scratch, no final add) */
  int fx;
  gl_tensor *gxp = gl_grad_slot(n, IN_XP, &fx), *gh0 = gl_grad_of(n, IN_H);
  gl_tensor *gc0 = gl_grad_of(n, IN_C), *gw = gl_grad_of(n, IN_W), *gb = gl_grad_of(n, IN_B);

  size_t BH = (size_t)B * H, BTG = (size_t)B * T * G;
  int gru = kind == RNN_GRU;
  float *dh = gl_scratch_alloc(BH), *dc = lstm ? gl_scratch_alloc(BH) : NULL;
  float *dgx = fx ? gxp->data : gl_scratch_alloc(BTG), *dgh = gru ? gl_scratch_alloc(BTG) : dgx;
  if (!dh || (lstm && !dc) || !dgx || !dgh) {
    gl_scratch_free(dh, BH);
    gl_scratch_free(dc, BH);
    if (fx) memset(gxp->data, 0, sizeof(float) * BTG);
    else gl_scratch_free(dgx, BTG);
    if (gru) gl_scratch_free(dgh, BTG);
    return gl_fail(GL_ENOMEM, "%s: backward: out of memory", n->op->name);
  }
  memcpy(dh, dhn->data, sizeof(float) * BH);
  if (lstm) memcpy(dc, dcn->data, sizeof(float) * BH);
  memset(dgx, 0, sizeof(float) * BTG);
  if (gru) memset(dgh, 0, sizeof(float) * BTG);

  for (int s = T - 1; s >= 0; s--) {
    int t = r.reverse ? T - 1 - s : s;
    step_bwd[kind](&r, t, dy, dh, dc, dgx, dgh, Hp->data, Cp ? Cp->data : NULL);
    if ((s > 0 || gh0) && B > 0 && H > 0 && G > 0)   /* dh += dG_t W_hh */
      gl_sgemm(0, 0, B, H, G, 1.0f, dgh + (size_t)t * G, T * G, r.w, H, 1.0f, dh, H);
  }
  if (gh0)
    for (size_t i = 0; i < BH; i++) gh0->data[i] += dh[i];
  if (gc0)
    for (size_t i = 0; i < BH; i++) gc0->data[i] += dc[i];
  if (gxp && !fx)
    for (size_t i = 0; i < BTG; i++) gxp->data[i] += dgx[i];
  if (gw && B * T > 0 && G > 0 && H > 0)   /* dW_hh += dG^T (G, B*T) H_prev (B*T, H) */
    gl_sgemm(1, 0, G, H, B * T, 1.0f, dgh, G, Hp->data, H, 1.0f, gw->data, H);
  if (gb)
    for (size_t row = 0; row < (size_t)B * T; row++) {
      const float *g = dgh + row * G;
      for (int j = 0; j < G; j++) gb->data[j] += g[j];
    }
  gl_scratch_free(dh, BH);
  gl_scratch_free(dc, BH);
  if (!fx) gl_scratch_free(dgx, BTG);
  if (gru) gl_scratch_free(dgh, BTG);
  return GL_OK;
}

static const gl_op op_cell[RNN_KINDS] = {
    {"rnn_tanh_cell", rnn_backward}, {"rnn_relu_cell", rnn_backward},
    {"lstm_cell", rnn_backward}, {"gru_cell", rnn_backward}};
static const gl_op op_seq[RNN_KINDS] = {
    {"rnn_tanh_seq", rnn_backward}, {"rnn_relu_seq", rnn_backward},
    {"lstm_seq", rnn_backward}, {"gru_seq", rnn_backward}};

/* Shapes: xp (B,T,G) (seq) or (B,G) (cell); w_hh (G,H) with G = gates*H; h0, c0 (B,H) or
 * NULL (zeros); b_hh (G) or NULL; mask (B,T) / (B) or NULL. */
static int check_args(const char *op, int kind, int seq, const gl_tensor *xp,
                      const gl_tensor *h0, const gl_tensor *c0, const gl_tensor *w,
                      const gl_tensor *bias, const gl_tensor *mask, int *B, int *T, int *H) {
  char s1[128], s2[128];
  int gates = kind_gates[kind];
  if (!xp || !w) return gl_fail(GL_EARG, "%s: the input projection and w_hh are required", op);
  if (w->ndim != 2 || w->shape[0] != gates * w->shape[1])
    return gl_fail(GL_ESHAPE, "%s: w_hh %s should be (%d*H, H)", op, SHAPE(s1, w), gates);
  *H = w->shape[1];
  int G = w->shape[0];
  if (xp->ndim != (seq ? 3 : 2) || xp->shape[xp->ndim - 1] != G)
    return gl_fail(GL_ESHAPE, "%s: input projection %s should be %s with G = %d (w_hh %s)", op,
                   SHAPE(s1, xp), seq ? "(B,T,G)" : "(B,G)", G, SHAPE(s2, w));
  *B = xp->shape[0];
  *T = seq ? xp->shape[1] : 1;
  const gl_tensor *st[2] = {h0, c0};
  for (int k = 0; k < 2; k++)
    if (st[k] && (st[k]->ndim != 2 || st[k]->shape[0] != *B || st[k]->shape[1] != *H))
      return gl_fail(GL_ESHAPE, "%s: %s %s should be (B,H) = [%d,%d]", op, k ? "c" : "h",
                     SHAPE(s1, st[k]), *B, *H);
  if (c0 && kind != RNN_LSTM) return gl_fail(GL_EARG, "%s: only an LSTM has a cell state c", op);
  if (bias && (bias->ndim != 1 || bias->shape[0] != G))
    return gl_fail(GL_ESHAPE, "%s: b_hh %s should be (%d)", op, SHAPE(s1, bias), G);
  if (mask) {
    int ok = seq ? mask->ndim == 2 && mask->shape[0] == *B && mask->shape[1] == *T
                 : mask->ndim == 1 && mask->shape[0] == *B;
    if (!ok)
      return gl_fail(GL_ESHAPE, "%s: mask %s should be %s = %s", op, SHAPE(s1, mask),
                     seq ? "(B,T)" : "(B)", SHAPE(s2, xp));
  }
  return GL_OK;
}

/* Run the recurrence; outs: [y], h_n, [c_n] in that order (y for the sequence op only). */
static int rnn_run_op(int kind, int seq, gl_tensor **y, gl_tensor **h_n, gl_tensor **c_n,
                      gl_tensor *xp, gl_tensor *h0, gl_tensor *c0, gl_tensor *w,
                      gl_tensor *bias, gl_tensor *mask, int reverse) {
  const char *op = seq ? op_seq[kind].name : op_cell[kind].name;   /* kind comes from below */
  int B = 0, T = 0, H = 0;
  int st = check_args(op, kind, seq, xp, h0, c0, w, bias, mask, &B, &T, &H);
  if (st) return st;
  if ((st = gl_blas_init())) return st;
  int lstm = kind == RNN_LSTM, G = kind_gates[kind] * H, W = kind_saved[kind] * H;
  gl_tensor *in[NIN] = {xp, h0, lstm ? c0 : NULL, w, bias};
  int rec = gl_needs_grad(NIN, in);
  int sh[3] = {B, T, H}, sbh[2] = {B, H};
  gl_tensor *Y = NULL, *Hn = NULL, *Cn = NULL, *A = NULL, *Hp = NULL, *Cp = NULL;
  float *scratchA = NULL, *tmp = NULL;
  size_t nA = (size_t)B * W, ntmp = (size_t)B * G;
  if ((seq && (st = gl_empty(&Y, 3, sh))) || (st = gl_empty(&Hn, 2, sbh)) ||
      (lstm && (st = gl_empty(&Cn, 2, sbh))))
    goto fail;
  if (rec) {
    int sa[3] = {B, T, W};
    if ((st = gl_empty(&A, 3, sa)) || (st = gl_empty(&Hp, 3, sh)) ||
        (lstm && (st = gl_empty(&Cp, 3, sh))))
      goto fail;
  } else if (!(scratchA = gl_scratch_alloc(nA))) {
    st = gl_fail(GL_ENOMEM, "%s: out of memory", op);
    goto fail;
  }
  if (kind == RNN_GRU && !(tmp = gl_scratch_alloc(ntmp))) {
    st = gl_fail(GL_ENOMEM, "%s: out of memory", op);
    goto fail;
  }
  size_t BH = (size_t)B * H;
  if (h0) memcpy(Hn->data, h0->data, sizeof(float) * BH);
  else memset(Hn->data, 0, sizeof(float) * BH);
  if (lstm) {
    if (c0) memcpy(Cn->data, c0->data, sizeof(float) * BH);
    else memset(Cn->data, 0, sizeof(float) * BH);
  }
  rnn_run r = {.kind = kind, .B = B, .T = T, .H = H, .G = G, .W = W, .reverse = reverse,
               .xp = xp->data, .w = w->data, .bias = bias ? bias->data : NULL,
               .mask = mask ? mask->data : NULL, .y = Y ? Y->data : NULL, .h = Hn->data,
               .c = Cn ? Cn->data : NULL, .A = rec ? A->data : scratchA,
               .lda = rec ? (size_t)T * W : (size_t)W, .tmp = tmp};
  if (B > 0 && H > 0) {
    for (int s = 0; s < T; s++) {
      int t = reverse ? T - 1 - s : s;
      float *a = r.A;
      if (rec) {   /* keep the state entering step t for backward */
        a += (size_t)t * W;
        for (int b = 0; b < B; b++) {
          size_t dst = ((size_t)b * T + t) * H, src = (size_t)b * H;
          memcpy(Hp->data + dst, r.h + src, sizeof(float) * (size_t)H);
          if (lstm) memcpy(Cp->data + dst, r.c + src, sizeof(float) * (size_t)H);
        }
      }
      step_fwd[kind](&r, t, a, r.lda);
    }
  } else if (Y) {
    memset(Y->data, 0, sizeof(float) * Y->numel);
  }
  gl_scratch_free(scratchA, nA);
  gl_scratch_free(tmp, ntmp);
  scratchA = tmp = NULL;

  gl_tensor *outs[3];
  int nout = 0;
  if (seq) outs[nout++] = Y;
  outs[nout++] = Hn;
  if (lstm) outs[nout++] = Cn;
  gl_node *n = rec ? gl_record(seq ? &op_seq[kind] : &op_cell[kind], NIN, in, nout, outs) : NULL;
  if (n) {
    *GL_NODE_STATE(n, rnn_state) = (rnn_state){kind, B, T, H, reverse, mask != NULL, seq};
    gl_save(n, A);
    gl_save(n, Hp);
    if (lstm) gl_save(n, Cp);
    if (mask) gl_save(n, mask);
  }
  gl_release(A);
  gl_release(Hp);
  gl_release(Cp);
  if (y) *y = Y;
  *h_n = Hn;
  if (c_n) *c_n = Cn;
  else gl_release(Cn);
  return GL_OK;

fail:
  gl_release(Y); gl_release(Hn); gl_release(Cn);
  gl_release(A); gl_release(Hp); gl_release(Cp);
  gl_scratch_free(scratchA, nA);
  gl_scratch_free(tmp, ntmp);
  return st;
}

/* ------------------------------------------------------------------------ */
/* public entry points */

int gl_lstm_cell(gl_tensor **h_out, gl_tensor **c_out, gl_tensor *xp, gl_tensor *h,
                 gl_tensor *c, gl_tensor *w_hh, gl_tensor *b_hh, gl_tensor *mask) {
  return rnn_run_op(RNN_LSTM, 0, NULL, h_out, c_out, xp, h, c, w_hh, b_hh, mask, 0);
}

int gl_gru_cell(gl_tensor **h_out, gl_tensor *xp, gl_tensor *h, gl_tensor *w_hh,
                gl_tensor *b_hh, gl_tensor *mask) {
  return rnn_run_op(RNN_GRU, 0, NULL, h_out, NULL, xp, h, NULL, w_hh, b_hh, mask, 0);
}

int gl_rnn_cell(gl_tensor **h_out, gl_tensor *xp, gl_tensor *h, gl_tensor *w_hh,
                gl_tensor *b_hh, gl_tensor *mask, int relu) {
  return rnn_run_op(relu ? RNN_RELU : RNN_TANH, 0, NULL, h_out, NULL, xp, h, NULL, w_hh, b_hh,
                    mask, 0);
}

int gl_lstm_seq(gl_tensor **y, gl_tensor **h_n, gl_tensor **c_n, gl_tensor *xp,
                gl_tensor *h0, gl_tensor *c0, gl_tensor *w_hh, gl_tensor *b_hh,
                gl_tensor *mask, int reverse) {
  return rnn_run_op(RNN_LSTM, 1, y, h_n, c_n, xp, h0, c0, w_hh, b_hh, mask, reverse);
}

int gl_gru_seq(gl_tensor **y, gl_tensor **h_n, gl_tensor *xp, gl_tensor *h0, gl_tensor *w_hh,
               gl_tensor *b_hh, gl_tensor *mask, int reverse) {
  return rnn_run_op(RNN_GRU, 1, y, h_n, NULL, xp, h0, NULL, w_hh, b_hh, mask, reverse);
}

int gl_rnn_seq(gl_tensor **y, gl_tensor **h_n, gl_tensor *xp, gl_tensor *h0, gl_tensor *w_hh,
               gl_tensor *b_hh, gl_tensor *mask, int reverse, int relu) {
  return rnn_run_op(relu ? RNN_RELU : RNN_TANH, 1, y, h_n, NULL, xp, h0, NULL, w_hh, b_hh,
                    mask, reverse);
}
