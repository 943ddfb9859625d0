/* glimpse.h -- the one public header of libglimpse, the C engine under glimpse.
 *
 * A float32 tensor with refcounted storage, a define-by-run autograd tape, and the
 * ops that attention experiments are made of.  The engine knows nothing of Lua:
 * every fallible call returns a status (GL_OK == 0) and leaves a message naming
 * the op and the shapes in gl_last_error().  All indices and dims here are 0-based;
 * the bindings convert.
 *
 * Ownership: a function that returns a tensor through `gl_tensor **out` hands the
 * caller one reference; release it with gl_release().  Ops never steal references
 * to their inputs.
 */
#ifndef GLIMPSE_H
#define GLIMPSE_H

#include <stddef.h>
#include <stdint.h>

#define GL_MAX_DIMS 8

/* status codes */
enum {
  GL_OK = 0,
  GL_ESHAPE,    /* shapes do not fit together */
  GL_EARG,      /* a bad argument: out-of-range dim or index, bad option */
  GL_ENOMEM,    /* an allocation failed or was too large */
  GL_EVALUE,    /* a bad value: NaN where none is allowed, negative probability */
  GL_EIO,       /* a file could not be read or written */
  GL_EFORMAT,   /* a file is malformed */
  GL_ESTATE     /* wrong state: backward twice, backward of a non-scalar */
};

/* ------------------------------------------------------------------------ */
/* errors */

/* The message of the last failed call on this thread. */
const char *gl_last_error(void);
/* Set the message (printf-style) and return `status`; for use inside ops. */
int gl_fail(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Write "[2,3,4]" into buf; returns buf.  For error messages. */
char *gl_shape_str(char *buf, size_t n, int ndim, const int *shape);

/* ------------------------------------------------------------------------ */
/* storage and tensors */

typedef struct gl_storage {
  float *data;       /* 64-byte aligned */
  size_t cap;        /* floats allocated (a caching-allocator bucket) */
  int refs;
  unsigned version;  /* bumped by every in-place write through any tensor over it (gl_touch) */
  uint64_t id;       /* unique for the process's life (storage structs are reused) */
} gl_storage;

struct gl_node;

typedef struct gl_tensor {
  int refs;
  int ndim;
  int shape[GL_MAX_DIMS];
  size_t numel;
  gl_storage *st;
  float *data;             /* st->data + offset: contiguous, row-major */
  int requires_grad;       /* a leaf that wants .grad, or an output of a recorded op */
  struct gl_tensor *grad;  /* accumulated gradient of a leaf */
  struct gl_node *node;    /* the recorded op that made it, or NULL */
  int out_index;           /* which output of `node` this is */
  int version;             /* bumped by in-place writes */
  int hdr_refs;            /* refs (of refs) held by graph nodes that never read the data:
                            * when they are all that is left, the data is given back */
} gl_tensor;

/* Largest tensor, in elements, that the engine will allocate (2^31 - 1 floats). */
#define GL_MAX_NUMEL ((size_t)2147483647)

int gl_empty(gl_tensor **out, int ndim, const int *shape);        /* uninitialised */
int gl_zeros(gl_tensor **out, int ndim, const int *shape);
int gl_full(gl_tensor **out, int ndim, const int *shape, float v);
int gl_from_data(gl_tensor **out, int ndim, const int *shape, const float *data);
int gl_arange(gl_tensor **out, float start, float stop, float step); /* [start, stop) */
int gl_empty_like(gl_tensor **out, const gl_tensor *t);
int gl_zeros_like(gl_tensor **out, const gl_tensor *t);
int gl_clone(gl_tensor **out, const gl_tensor *t);                 /* a copy, no graph */
/* A new header over the same storage and shape, outside any graph. */
gl_tensor *gl_alias(gl_tensor *t);

/* t's data was written in place: bumps t's version and its storage's (every view of it
 * then reads as changed; caches keyed on the storage's version see the write) */
void gl_touch(gl_tensor *t);
void gl_retain(gl_tensor *t);
void gl_release(gl_tensor *t);     /* NULL is fine */
int gl_same_shape(const gl_tensor *a, const gl_tensor *b);
/* Check a shape list (ndim, sizes >= 0, product within GL_MAX_NUMEL); `op` names the caller. */
int gl_check_shape(const char *op, int ndim, const int *shape, size_t *numel);

/* Caching allocator: bytes held by live tensors, bytes parked in the cache. */
size_t gl_bytes_live(void);
size_t gl_bytes_cached(void);
/* Bytes handed out since start (never decreases): how fast tensors are being made. */
size_t gl_bytes_handed_out(void);
void gl_empty_cache(void);
/* conv2d's Winograd weights kept between inference calls (see ops_conv_winograd.c): the
 * bytes they hold (memory of their own, outside gl_bytes_live), and giving them all back */
size_t gl_wino_cache_bytes(void);
void gl_wino_cache_clear(void);
/* Raw aligned scratch memory through the same cache (for kernels' workspaces). */
float *gl_scratch_alloc(size_t nfloats);
void gl_scratch_free(float *p, size_t nfloats);

/* ------------------------------------------------------------------------ */
/* random numbers: one seeded generator (xoshiro128**), same numbers everywhere */

void gl_manual_seed(uint64_t seed);
uint64_t gl_rng_state_get(uint64_t *s4);       /* copies the 4x32-bit state into s4[0..1] */
void gl_rng_state_set(const uint64_t *s4);
uint32_t gl_rand_u32(void);
float gl_rand_uniform(void);                   /* [0,1) */
float gl_rand_normal(void);
int gl_rand(gl_tensor **out, int ndim, const int *shape);                 /* U[0,1) */
int gl_randn(gl_tensor **out, int ndim, const int *shape);                /* N(0,1) */
int gl_uniform_(gl_tensor *t, float lo, float hi);                        /* in place */
int gl_normal_(gl_tensor *t, float mean, float std);                      /* in place */

/* ------------------------------------------------------------------------ */
/* autograd */

typedef struct gl_node gl_node;   /* a recorded op; defined in glimpse_internal.h */

int gl_grad_enabled(void);
int gl_set_grad_enabled(int on);      /* returns the previous setting */
/* Reverse-mode sweep from `root`; `seed` is d(loss)/d(root) (NULL means ones, root must be
 * a scalar then).  Frees the graph's saved state afterwards unless retain is set. */
int gl_backward(gl_tensor *root, gl_tensor *seed, int retain);
int gl_requires_grad_(gl_tensor *t, int on);
/* Make the leaf's .grad exist (zeroed) or zero it. */
int gl_zero_grad(gl_tensor *t);
int gl_detach(gl_tensor **out, gl_tensor *t);

/* ------------------------------------------------------------------------ */
/* elementwise (numpy broadcasting) */

int gl_broadcast_shape(const char *op, const gl_tensor *a, const gl_tensor *b,
                       int *ndim, int *shape);
/* Sum `g` down to `ndim/shape` (undo broadcasting); adds into dst. */
int gl_sum_to_add(gl_tensor *dst, const gl_tensor *g);

int gl_add(gl_tensor **out, gl_tensor *a, gl_tensor *b);
int gl_sub(gl_tensor **out, gl_tensor *a, gl_tensor *b);
int gl_mul(gl_tensor **out, gl_tensor *a, gl_tensor *b);
int gl_div(gl_tensor **out, gl_tensor *a, gl_tensor *b);
int gl_pow(gl_tensor **out, gl_tensor *a, gl_tensor *b);
int gl_maximum(gl_tensor **out, gl_tensor *a, gl_tensor *b);
int gl_minimum(gl_tensor **out, gl_tensor *a, gl_tensor *b);
/* comparisons give 0/1, no gradient */
int gl_cmp(gl_tensor **out, gl_tensor *a, gl_tensor *b, const char *how); /* "eq","ne","lt","le","gt","ge" */
int gl_where(gl_tensor **out, gl_tensor *cond, gl_tensor *a, gl_tensor *b);

int gl_add_scalar(gl_tensor **out, gl_tensor *a, float s);
int gl_mul_scalar(gl_tensor **out, gl_tensor *a, float s);
int gl_pow_scalar(gl_tensor **out, gl_tensor *a, float p);
int gl_rsub_scalar(gl_tensor **out, gl_tensor *a, float s);   /* s - a */
int gl_rdiv_scalar(gl_tensor **out, gl_tensor *a, float s);   /* s / a */

typedef enum {
  GL_NEG, GL_EXP, GL_LOG, GL_TANH, GL_SIGMOID, GL_RELU, GL_SQRT, GL_ABS,
  GL_SIN, GL_COS, GL_SOFTPLUS, GL_LOG1P, GL_SIGN, GL_FLOOR, GL_ROUND, GL_RSQRT,
  GL_GELU, GL_UNARY_COUNT
} gl_unary_kind;
int gl_unary(gl_tensor **out, gl_tensor *a, gl_unary_kind k);
const char *gl_unary_name(gl_unary_kind k);
int gl_clamp(gl_tensor **out, gl_tensor *a, float lo, float hi);
int gl_leaky_relu(gl_tensor **out, gl_tensor *a, float slope);

/* in-place, outside the graph (refused on tensors that require grad while grad is on) */
int gl_fill_(gl_tensor *t, float v);
int gl_copy_(gl_tensor *dst, const gl_tensor *src);      /* broadcasting src into dst */
int gl_add_(gl_tensor *dst, const gl_tensor *src, float alpha); /* dst += alpha*src (broadcast) */
int gl_relu_(gl_tensor *t);                                       /* t = max(t, 0) */
int gl_mul_scalar_(gl_tensor *t, float s);

/* ------------------------------------------------------------------------ */
/* reductions over one dim (dim < 0 means all elements) */

int gl_sum(gl_tensor **out, gl_tensor *a, int dim, int keepdim);
int gl_mean(gl_tensor **out, gl_tensor *a, int dim, int keepdim);
/* values are differentiable; indices (0-based, stored as float) are not */
int gl_max(gl_tensor **values, gl_tensor **indices, gl_tensor *a, int dim, int keepdim);
int gl_min(gl_tensor **values, gl_tensor **indices, gl_tensor *a, int dim, int keepdim);
int gl_argmax(gl_tensor **out, gl_tensor *a, int dim, int keepdim);
int gl_logsumexp(gl_tensor **out, gl_tensor *a, int dim, int keepdim);
/* running sum along dim (0-based): out[..., j, ...] = sum_{m <= j} a[..., m, ...] */
int gl_cumsum(gl_tensor **out, gl_tensor *a, int dim);
int gl_norm(gl_tensor **out, gl_tensor *a);                 /* L2 over all */
int gl_var(gl_tensor **out, gl_tensor *a, int dim, int keepdim, int unbiased);

/* ------------------------------------------------------------------------ */
/* matrix products (OpenBLAS) */

/* a (M,K) @ b (K,N); a (B,M,K) @ b (B,K,N); a (...,M,K) @ b (K,N). ta/tb transpose the
 * last two dims of a/b first (the kernel takes the transposition, nothing is copied). */
int gl_matmul(gl_tensor **out, gl_tensor *a, gl_tensor *b);
int gl_matmul_t(gl_tensor **out, gl_tensor *a, gl_tensor *b, int ta, int tb);
/* x (...,In) @ w^T (Out,In) + bias (Out) : the Linear layer in one op */
int gl_linear(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *bias);

/* BLAS plumbing: the engine loads OpenBLAS itself so it can pick the kernels. */
int gl_blas_init(void);
const char *gl_blas_core(void);
const char *gl_blas_config(void);
/* how the core was chosen ("" when OpenBLAS chose it alone) */
const char *gl_blas_note(void);
int gl_blas_threads(void);
void gl_blas_set_threads(int n);
/* The one thread setting (engine/parallel.c): gl_set_threads(n) gives the engine's own loops
 * and OpenBLAS n threads each (they never run at once).  Starts at GLIMPSE_THREADS, else the
 * number of online CPUs. */
int gl_threads(void);
void gl_set_threads(int n);
/* C = alpha * op(A) op(B) + beta * C, row-major, the cblas_sgemm contract. */
void gl_sgemm(int transa, int transb, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc);
void gl_sgemm_batched(int transa, int transb, int batch, int M, int N, int K, float alpha,
                      const float *A, size_t strideA, const float *B, size_t strideB,
                      float beta, float *C, size_t strideC);

/* ------------------------------------------------------------------------ */
/* shape ops: reshape/select/narrow-on-dim-0 share storage; the rest copy */

int gl_reshape(gl_tensor **out, gl_tensor *a, int ndim, const int *shape); /* one -1 allowed */
int gl_transpose(gl_tensor **out, gl_tensor *a, int d0, int d1);
int gl_permute(gl_tensor **out, gl_tensor *a, const int *perm);
int gl_unsqueeze(gl_tensor **out, gl_tensor *a, int dim);
int gl_squeeze(gl_tensor **out, gl_tensor *a, int dim);       /* dim < 0: all size-1 dims */
int gl_narrow(gl_tensor **out, gl_tensor *a, int dim, int start, int len);
int gl_select(gl_tensor **out, gl_tensor *a, int dim, int index);
int gl_index_select(gl_tensor **out, gl_tensor *a, int dim, const gl_tensor *idx); /* idx 0-based */
int gl_gather(gl_tensor **out, gl_tensor *a, int dim, const gl_tensor *idx);
int gl_cat(gl_tensor **out, int n, gl_tensor *const *ts, int dim);
int gl_stack(gl_tensor **out, int n, gl_tensor *const *ts, int dim);
int gl_expand(gl_tensor **out, gl_tensor *a, int ndim, const int *shape);  /* copies */
/* scatter-add src into a copy of a along dim at idx (differentiable in a and src) */
int gl_scatter_add(gl_tensor **out, gl_tensor *a, int dim, const gl_tensor *idx, gl_tensor *src);
/* embedding lookup: weight (N,D), idx (...) of 0-based ids -> (..., D); rows == padding_idx
 * get no gradient (padding_idx < 0: none) */
int gl_embedding(gl_tensor **out, gl_tensor *weight, const gl_tensor *idx, int padding_idx);

/* ------------------------------------------------------------------------ */
/* softmax, losses, dropout */

/* mask: NULL or broadcastable to a; positions where mask == 0 get exactly 0 */
int gl_softmax(gl_tensor **out, gl_tensor *a, int dim, const gl_tensor *mask);
int gl_log_softmax(gl_tensor **out, gl_tensor *a, int dim);
enum { GL_REDUCE_NONE = 0, GL_REDUCE_MEAN = 1, GL_REDUCE_SUM = 2 };
/* logits (N,C) or (N,C,d...) flattened to rows; targets: 0-based class ids as floats,
 * shape (N) ; rows whose target == ignore_index contribute nothing (ignore_index < 0: none). */
int gl_cross_entropy(gl_tensor **out, gl_tensor *logits, const gl_tensor *targets,
                     int ignore_index, int reduction, float label_smoothing);
int gl_nll_loss(gl_tensor **out, gl_tensor *logp, const gl_tensor *targets,
                int ignore_index, int reduction);
int gl_mse_loss(gl_tensor **out, gl_tensor *a, gl_tensor *b, int reduction);
int gl_bce_loss(gl_tensor **out, gl_tensor *p, gl_tensor *target, int reduction);
int gl_dropout(gl_tensor **out, gl_tensor *a, float p, int training);

/* ------------------------------------------------------------------------ */
/* sampling (uses the seeded generator) */

/* probs (..., K) rows (need not be normalised, must be >= 0 and finite with a positive sum)
 * -> (..., n) 0-based indices as float */
int gl_multinomial(gl_tensor **out, const gl_tensor *probs, int n, int replacement);
int gl_bernoulli(gl_tensor **out, const gl_tensor *p);

/* Beam search's candidates.  lp (A*K, V): the log-probabilities of the next token of A items'
 * K beams (item a's beams are rows a*K .. a*K+K-1); scores (A*K): each beam's log-probability
 * so far (-inf: a dead beam, skipped).  For each item, the n best candidates s = scores[row]
 * + lp[row][v] with s > -inf (NaN skipped), best first, ties broken towards the lower beam,
 * then the lower token: out_s, out_k (0-based beam), out_v (0-based token) hold n slots per
 * item, count[a] how many are filled.  *positive: whether any lp entry of a live beam is
 * above 0 (then the search's early-stopping bound does not hold). */
int gl_beam_candidates(const gl_tensor *lp, const double *scores, int K, int n, double *out_s,
                       int *out_k, int *out_v, int *count, int *positive);

/* ------------------------------------------------------------------------ */
/* checks */

int gl_has_nonfinite(const gl_tensor *t);
/* For the tests of the tape's failure paths: the nth (1-based) next graph-node allocation,
 * saved tensor or gradient-buffer allocation fails as if memory ran out; nth 0: off. */
enum { GL_FAULT_NODE = 0, GL_FAULT_SAVE, GL_FAULT_GRAD, GL_FAULT_COUNT };
void gl_fault_inject(int what, int nth);

/* ------------------------------------------------------------------------ */
/* data files (io_gz.c): gzip through zlib (plain files read unchanged), IDX arrays */

/* Read a whole (gzipped or plain) file: *buf (free with gl_gz_free), *n bytes; more than
 * max_bytes after decompression is an error. */
int gl_read_gz(const char *path, size_t max_bytes, unsigned char **buf, size_t *n);
void gl_gz_free(unsigned char *buf);
typedef struct {
  int type;           /* 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64 */
  int elem_size;      /* bytes per element */
  int ndim;
  int shape[GL_MAX_DIMS];
  size_t numel;
} gl_idx_info;
int gl_read_idx_info(const char *path, gl_idx_info *info);
/* Items [offset, offset+limit) along dim 0 of an IDX file as floats (limit 0: to the end);
 * scale: u8 values / 255. */
int gl_read_idx(gl_tensor **out, const char *path, size_t offset, size_t limit, int scale);

/* ------------------------------------------------------------------------ */
/* exact travelling-salesman tours (tsp.c: Held-Karp, O(2^n n^2) time, O(2^n n) memory) */

#define GL_TSP_MAX_N 20
/* count instances, instance i with n[i] cities (2 .. GL_TSP_MAX_N), their (x, y) in double
 * one after the other in xy (2 * sum n values); writes each optimal closed tour into tours
 * (sum n ints, 0-based, instance i at the sum of the n before it: city 0 first, the second
 * city lower than the last) and its length into lengths[i].  Instances run side by side on
 * the thread pool, each thread with a table of 2^(n-1) (n-1) states (76 MiB at n = 20).
 * Errors: a size outside 2 .. GL_TSP_MAX_N (GL_EARG), a non-finite coordinate (GL_EVALUE). */
int gl_tsp_solve(int count, const int *n, const double *xy, int *tours, double *lengths);

/* ------------------------------------------------------------------------ */
/* images: image_load.c reads files (libpng, libjpeg-turbo, stb_image for BMP/TGA/GIF, all
 * behind checks that treat the file as hostile); image.c saves, resizes, crops, grids,
 * heatmaps, overlays.  Images are (C,H,W) float32 in [0,1] (or (H,W) grey; (B,C,H,W) where
 * noted); no op here records a graph. */

#define GL_IMAGE_MAX_PIXELS ((size_t)1 << 25)   /* default decode cap: 32 Mpixel */
size_t gl_image_max_pixels(void);             /* the decode cap */
size_t gl_image_set_max_pixels(size_t n);     /* returns the previous cap */
int gl_image_info(const char *path, int *w, int *h, int *comp);
/* channels 0: grey stays 1, colour 3 (alpha dropped); 1/3/4 force.  cap 0: the global cap.
 * Errors read "image.load: <path>: <reason>". */
int gl_image_load(gl_tensor **out, const char *path, int channels, size_t cap);
/* (H,W) or (C,H,W), C = 1,3,4, clamped to [0,1]; format "png","jpg","bmp","tga" or NULL
 * (from the extension); quality 1..100 for JPEG */
int gl_image_save(const char *path, const gl_tensor *img, const char *format, int quality);
enum { GL_RESIZE_AUTO = 0, GL_RESIZE_NEAREST, GL_RESIZE_BOX, GL_RESIZE_BILINEAR,
       GL_RESIZE_BICUBIC, GL_RESIZE_MITCHELL };
/* (H,W), (C,H,W), (B,C,H,W) -> same with (h,w) */
int gl_image_resize(gl_tensor **out, const gl_tensor *img, int h, int w, int filter);
int gl_image_crop(gl_tensor **out, const gl_tensor *img, int top, int left, int h, int w);
int gl_image_flip(gl_tensor **out, const gl_tensor *img, int horizontal);
int gl_image_to_grey(gl_tensor **out, const gl_tensor *img);      /* -> C = 1 */
/* (x - mean[c]) / std[c]; n == C, or n == 1 for all channels; (C,H,W) or (B,C,H,W) */
int gl_image_normalize(gl_tensor **out, const gl_tensor *img, int n, const float *mean,
                       const float *std);
/* n images of one (H,W) (or one (B,C,H,W)) -> (C, rows*(H+p)+p, ncol*(W+p)+p); ncol <= 0: 8 */
int gl_image_grid(gl_tensor **out, int n, gl_tensor *const *imgs, int ncol, int padding,
                  float pad_value);
enum { GL_CMAP_JET = 0, GL_CMAP_VIRIDIS, GL_CMAP_HOT, GL_CMAP_GREY, GL_CMAP_COUNT };
int gl_colormap_by_name(const char *name);    /* -1 when unknown */
const char *gl_colormap_name(int cmap);
void gl_colormap_rgb(int cmap, float x, float *rgb);  /* x in [0,1] -> rgb[3] */
/* m (H,W) -> (3, H*scale, W*scale), nearest-neighbour blocks; vmin/vmax NaN: m's range */
int gl_image_heatmap(gl_tensor **out, const gl_tensor *m, int cmap, int scale, float vmin,
                     float vmax);
enum { GL_UPSAMPLE_BILINEAR = 0, GL_UPSAMPLE_BICUBIC, GL_UPSAMPLE_NEAREST };
/* img (H,W)/(C,H,W), heat of gh*gw entries -> (3,H,W): heat upsampled to (H,W), min-max
 * normalised, coloured, blended: (1-alpha)*img + alpha*colour */
int gl_image_overlay(gl_tensor **out, const gl_tensor *img, const gl_tensor *heat, int gh,
                     int gw, float alpha, int cmap, int upsample);

/* ------------------------------------------------------------------------ */
/* safetensors checkpoints (io.c): a list of named tensors plus string->string metadata.
 * Save writes F32, names sorted, atomically (temp file in the same dir, fsync, rename).
 * Load accepts F32/F16/BF16/F64/I64/I32/I16/I8/U8/BOOL (converted to float32), checks every
 * length/offset against the file size and fails with "load: <path>: <what is wrong>";
 * loaded tensors come sorted by name. */

typedef struct gl_st_file gl_st_file;
int gl_st_new(gl_st_file **out);
void gl_st_free(gl_st_file *f);                                  /* NULL is fine */
int gl_st_add_tensor(gl_st_file *f, const char *name, gl_tensor *t); /* retains t */
int gl_st_add_meta(gl_st_file *f, const char *key, const char *value); /* copies both */
int gl_st_save(const gl_st_file *f, const char *path);
int gl_st_load(gl_st_file **out, const char *path);
size_t gl_st_count(const gl_st_file *f);
const char *gl_st_name(const gl_st_file *f, size_t i);
gl_tensor *gl_st_tensor(const gl_st_file *f, size_t i);         /* borrowed */
gl_tensor *gl_st_find(const gl_st_file *f, const char *name);   /* borrowed, NULL if absent */
size_t gl_st_meta_count(const gl_st_file *f);
const char *gl_st_meta_key(const gl_st_file *f, size_t i);
const char *gl_st_meta_value(const gl_st_file *f, size_t i);
const char *gl_st_find_meta(const gl_st_file *f, const char *key); /* NULL if absent */

/* ------------------------------------------------------------------------ */
/* convolution (ops_conv.c, its Winograd path ops_conv_winograd.c) and pooling (ops_pool.c),
 * normalisation (ops_norm.c) */

/* x (B,C,H,W), w (O,C,kh,kw), bias (O) or NULL -> (B,O,Ho,Wo),
 * Ho = (H + 2*ph - kh) / sh + 1, Wo likewise; zero padding */
int gl_conv2d(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *bias, int sh, int sw,
              int ph, int pw);
/* Winograd's output tile for 3x3 stride-1 convolutions: 2 (F(2x2,3x3)), 4 (F(4x4,3x3)),
 * 0 (by size: 4 x 4 tiles for outputs of at least 16 x 16) or -1 (off: im2col); returns the
 * previous setting */
int gl_conv_winograd_tile(int m);
/* the same op as direct loops (forward and backward): the test oracle for gl_conv2d */
int gl_conv2d_naive(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *bias, int sh,
                    int sw, int ph, int pw);
/* x (B,C,H,W) -> (B,C,Ho,Wo) over kh x kw windows; padding at most half the kernel.
 * max: padding never wins, ties take the first; avg: padding counts in the divisor */
int gl_max_pool2d(gl_tensor **out, gl_tensor *x, int kh, int kw, int sh, int sw, int ph,
                  int pw);
int gl_avg_pool2d(gl_tensor **out, gl_tensor *x, int kh, int kw, int sh, int sw, int ph,
                  int pw);
/* x (...,D) normalised over the last dim; w, b (D) or NULL */
int gl_layer_norm(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *b, float eps);
/* x (B,C,...) normalised per channel; w, b, running_mean, running_var (C) or NULL.
 * training: batch statistics, running stats updated in place (unbiased variance);
 * otherwise the running stats (batch statistics when there are none) */
int gl_batch_norm(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *b,
                  gl_tensor *running_mean, gl_tensor *running_var, int training,
                  float momentum, float eps);
/* in place, outside the graph (no tape): x = [relu] batch_norm(x) with the running stats */
int gl_batch_norm_eval_(gl_tensor *x, gl_tensor *w, gl_tensor *b, gl_tensor *running_mean,
                        gl_tensor *running_var, float eps, int relu);

/* ------------------------------------------------------------------------ */
/* optimizers (optim.c): fused in-place updates of one parameter per call, PyTorch 1.13
 * semantics.  g is the gradient (same shape as p); buffers have p's shape; `step` counts
 * from 1 and includes this update.  Optional buffers are NULL when the option is off. */

/* buf: NULL when momentum == 0; first: this step creates buf (buf = d, no dampening) */
int gl_sgd_update(gl_tensor *p, const gl_tensor *g, gl_tensor *buf, int first, double lr,
                  double momentum, double dampening, double weight_decay, int nesterov,
                  int maximize);
/* decoupled = 1: AdamW (p *= 1 - lr*wd); max_exp_avg_sq non-NULL: amsgrad */
int gl_adam_update(gl_tensor *p, const gl_tensor *g, gl_tensor *exp_avg, gl_tensor *exp_avg_sq,
                   gl_tensor *max_exp_avg_sq, int64_t step, double lr, double beta1,
                   double beta2, double eps, double weight_decay, int decoupled, int maximize);
/* grad_avg: non-NULL when centered; buf: needed when momentum > 0 */
int gl_rmsprop_update(gl_tensor *p, const gl_tensor *g, gl_tensor *square_avg,
                      gl_tensor *grad_avg, gl_tensor *buf, double lr, double alpha, double eps,
                      double weight_decay, double momentum, int maximize);
int gl_adadelta_update(gl_tensor *p, const gl_tensor *g, gl_tensor *square_avg,
                       gl_tensor *acc_delta, double lr, double rho, double eps,
                       double weight_decay, int maximize);
int gl_adagrad_update(gl_tensor *p, const gl_tensor *g, gl_tensor *sum, int64_t step, double lr,
                      double lr_decay, double eps, double weight_decay, int maximize);
/* joint norm of n tensors (NULL entries skipped); norm_type > 0 or INFINITY */
int gl_grads_norm(double *out, int n, gl_tensor *const *ts, double norm_type);
/* g *= min(1, max_norm / (norm + 1e-6)); *total = the norm before clipping */
int gl_clip_grad_norm(double *total, int n, gl_tensor *const *grads, double max_norm,
                      double norm_type);
int gl_clip_grad_value(int n, gl_tensor *const *grads, double clip);

/* ------------------------------------------------------------------------ */
/* recurrent cells (ops_rnn.c): fused steps with PyTorch's equations and gate layouts.
 * xp is the input projection x W_ih^T + b_ih, computed by the caller (one gl_linear for a
 * whole sequence): (B,G) for a cell, (B,T,G) for a sequence, G = 4H (LSTM rows i,f,g,o),
 * 3H (GRU rows r,z,n), H (RNN).  w_hh (G,H); b_hh (G) or NULL; h, c (B,H) or NULL (zeros).
 * mask: NULL, or 0/1 floats (B) for a cell / (B,T) for a sequence: rows with 0 keep their
 * state (h and c copied through, gradients passed through) and get output 0.
 * A cell records one node with outputs h' (and c').  A sequence runs all T steps of one
 * layer and direction as one node: y (B,T,H) (0 where masked), h_n, c_n (B,H), the state
 * after each row's last active step; reverse runs t = T..1. */
int gl_lstm_cell(gl_tensor **h_out, gl_tensor **c_out, gl_tensor *xp, gl_tensor *h,
                 gl_tensor *c, gl_tensor *w_hh, gl_tensor *b_hh, gl_tensor *mask);
int gl_gru_cell(gl_tensor **h_out, gl_tensor *xp, gl_tensor *h, gl_tensor *w_hh,
                gl_tensor *b_hh, gl_tensor *mask);
/* relu != 0: h' = relu(...) instead of tanh(...) */
int gl_rnn_cell(gl_tensor **h_out, gl_tensor *xp, gl_tensor *h, gl_tensor *w_hh,
                gl_tensor *b_hh, gl_tensor *mask, int relu);
int gl_lstm_seq(gl_tensor **y, gl_tensor **h_n, gl_tensor **c_n, gl_tensor *xp,
                gl_tensor *h0, gl_tensor *c0, gl_tensor *w_hh, gl_tensor *b_hh,
                gl_tensor *mask, int reverse);
int gl_gru_seq(gl_tensor **y, gl_tensor **h_n, gl_tensor *xp, gl_tensor *h0, gl_tensor *w_hh,
               gl_tensor *b_hh, gl_tensor *mask, int reverse);
int gl_rnn_seq(gl_tensor **y, gl_tensor **h_n, gl_tensor *xp, gl_tensor *h0, gl_tensor *w_hh,
               gl_tensor *b_hh, gl_tensor *mask, int reverse, int relu);

/* ------------------------------------------------------------------------ */
/* attention (ops_attention.c, ops_attention_ntm.c).  One decoder step of attention as a
 * fused op with two outputs: ctx (B,Dv) = sum_l alpha_bl values_bl, alpha (B,L).
 * mask (B,L): 0/1 or NULL, masked positions get exactly 0; prior (B,L) or NULL multiplies
 * the normalised weights (local attention's Gaussian, differentiable); opts NULL means
 * temperature 1 and softmax. */
enum { GL_ATTN_SOFTMAX = 0, GL_ATTN_SIGMOID = 1 };   /* sigmoid: Chorowski's smoothing */
typedef struct { float temperature; int normaliser; } gl_attn_opts;
/* additive: e_bl = v . tanh(wq_b + uk_bl); wq (B,H), uk (B,L,H), v (H) */
int gl_attn_additive(gl_tensor **ctx, gl_tensor **alpha, gl_tensor *wq, gl_tensor *uk,
                     gl_tensor *v, gl_tensor *values, const gl_tensor *mask, gl_tensor *prior,
                     const gl_attn_opts *opts);
/* the additive scores alone -> e (B,L) (pointer networks) */
int gl_attn_additive_scores(gl_tensor **e, gl_tensor *wq, gl_tensor *uk, gl_tensor *v);
/* dot: e_bl = scale q_b . k_bl; q (B,D), keys (B,L,D) */
int gl_attn_dot(gl_tensor **ctx, gl_tensor **alpha, gl_tensor *q, gl_tensor *keys,
                gl_tensor *values, const gl_tensor *mask, gl_tensor *prior, float scale,
                const gl_attn_opts *opts);
/* given scores (B,L) */
int gl_attn_context(gl_tensor **ctx, gl_tensor **alpha, gl_tensor *scores, gl_tensor *values,
                    const gl_tensor *mask, gl_tensor *prior, const gl_attn_opts *opts);
/* multi-head: q (N,Tq,d), k (N,Tk,d), N = B*heads batch-major, mask (B,Tk) or NULL, causal:
 * key j visible to query i iff j <= i -> probs (N,Tq,Tk) = softmax(scale q k^T) */
int gl_attn_mh_probs(gl_tensor **probs, gl_tensor *q, gl_tensor *k, const gl_tensor *mask,
                     int heads, int causal, float scale);
/* multi-head self-attention on the packed projection qkv (B,T,3d) = [q | k | v] per row,
 * heads read in place: ctx (B,T,d) (heads merged) = P V, P = softmax(scale q k^T) per head
 * (mask (B,T) or NULL, causal as above); probs NULL, or receives P (B,heads,T,T) */
int gl_attn_mh_packed(gl_tensor **ctx, gl_tensor **probs, gl_tensor *qkv, const gl_tensor *mask,
                      int heads, int causal, float scale);
/* the decoding cache (inference, no node): rows [from, from+n) of each (..., R, d) block of
 * src copied into rows [at, at+n) of dst's, in place; and q (N,Tq,d)'s attention over the
 * first len rows of k, v buffers (N,cap,d): P (N,Tq,len) = softmax(scale q k^T) over the keys
 * j <= off + i (off < 0: all) not masked by mask (B,len) or NULL, ctx (N,Tq,d) = P v */
int gl_kv_copy_rows(gl_tensor *dst, int at, const gl_tensor *src, int from, int n);
int gl_attn_mh_cached(gl_tensor **ctx, gl_tensor **probs, const gl_tensor *q, const gl_tensor *k,
                      const gl_tensor *v, int len, const gl_tensor *mask, int heads, int off,
                      float scale);
/* NTM: e_bn = beta_b cos(k_b, mem_bn); k (B,D), mem (B,N,D), beta (B) or NULL */
int gl_attn_cosine(gl_tensor **scores, gl_tensor *k, gl_tensor *mem, gl_tensor *beta);
/* out_bi = sum_k s_b(k+K) w_b((i-k) mod N); w (B,N), s (B,2K+1) for shifts -K..K */
int gl_attn_circular_shift(gl_tensor **out, gl_tensor *w, gl_tensor *s);
/* out_bi = w_bi^gamma_b / sum_j w_bj^gamma_b; w (B,N) >= 0, gamma (B) */
int gl_attn_sharpen(gl_tensor **out, gl_tensor *w, gl_tensor *gamma);

#endif
