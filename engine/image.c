/* image.c -- pictures in and out of tensors: stb_image_write save,
 * stb_image_resize resize, crops and flips, per-channel normalisation, grids of images,
 * colormapped heatmaps and attention overlays.
 *
 * An image tensor is (C,H,W) float32 in [0,1] (planar, like torchvision), or (H,W) for a
 * single grey plane, or a batch (B,C,H,W) where an op says so.  stb works on interleaved
 * bytes (H,W,C), so load and save transpose on the way.  Nothing here records an autograd
 * node: these are preprocessing and visualisation steps, not layers.
 *
 * Reading files is engine/image_load.c's job (it treats every file as hostile).  This file
 * compiles the stb_image_write and stb_image_resize implementations (static, so they cannot
 * clash with another copy of stb linked into the same program).
 */
#include "glimpse.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "stb_begin.h"

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>

/* stb_image_resize 0.9x asserts that each downsampling filter's weights sum to 0.9..1.1 and
 * then renormalises them; its triangle filter misses that range on many ratios (300 -> 256),
 * so the assert would abort on a valid request.  The weights are renormalised either way. */
#define STBIR_ASSERT(x) ((void)0)
#define STB_IMAGE_RESIZE_STATIC
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb_image_resize.h>

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/* ------------------------------------------------------------------------ */
/* shapes: every op reads its image as (B,C,H,W) */

enum { ALLOW_HW = 1, ALLOW_CHW = 2, ALLOW_BCHW = 4 };

typedef struct {
  int ndim;      /* of the tensor as given: 2, 3 or 4 */
  int B, C, H, W;
} imshape;

static const char *allowed_str(int allow) {
  switch (allow) {
    case ALLOW_HW | ALLOW_CHW: return "(H,W) or (C,H,W)";
    case ALLOW_HW | ALLOW_CHW | ALLOW_BCHW: return "(H,W), (C,H,W) or (B,C,H,W)";
    case ALLOW_CHW | ALLOW_BCHW: return "(C,H,W) or (B,C,H,W)";
    case ALLOW_CHW: return "(C,H,W)";
    default: return "(H,W)";
  }
}

static int read_shape(const char *op, const char *arg, const gl_tensor *t, int allow,
                      imshape *s) {
  char b[128];
  if (!t) return gl_fail(GL_EARG, "%s: %s is missing", op, arg);
  int ok = (t->ndim == 2 && (allow & ALLOW_HW)) || (t->ndim == 3 && (allow & ALLOW_CHW)) ||
           (t->ndim == 4 && (allow & ALLOW_BCHW));
  if (!ok)
    return gl_fail(GL_ESHAPE, "%s: %s has shape %s, expected %s", op, arg,
                   gl_shape_str(b, sizeof b, t->ndim, t->shape), allowed_str(allow));
  s->ndim = t->ndim;
  s->B = t->ndim == 4 ? t->shape[0] : 1;
  s->C = t->ndim >= 3 ? t->shape[t->ndim - 3] : 1;
  s->H = t->shape[t->ndim - 2];
  s->W = t->shape[t->ndim - 1];
  return GL_OK;
}

/* a tensor of the same layout as `s` with new C, H, W */
static int alloc_like(gl_tensor **out, const imshape *s, int C, int H, int W) {
  int shape[4], n = 0;
  if (s->ndim == 4) shape[n++] = s->B;
  if (s->ndim >= 3) shape[n++] = C;
  shape[n++] = H;
  shape[n++] = W;
  return gl_empty(out, n, shape);
}

/* ------------------------------------------------------------------------ */
/* the pixel cap: a decode bomb (a 100k x 100k PNG is a few KB) must fail before it allocates */

static size_t max_pixels = GL_IMAGE_MAX_PIXELS;

size_t gl_image_max_pixels(void) { return max_pixels; }

size_t gl_image_set_max_pixels(size_t n) {
  size_t old = max_pixels;
  max_pixels = n;
  return old;
}

/* ------------------------------------------------------------------------ */
/* save: (C,H,W) with C = 1, 3, 4 or (H,W) -> PNG / JPEG / BMP / TGA, values clamped to [0,1]
 * and rounded to 8 bits.  format NULL: from the path's extension. */

typedef struct {
  FILE *f;
  int failed;
} writer;

static void write_cb(void *ctx, void *data, int size) {
  writer *w = ctx;
  if (size > 0 && fwrite(data, 1, (size_t)size, w->f) != (size_t)size) w->failed = 1;
}

static const char *format_of(const char *path) {
  const char *dot = strrchr(path, '.');
  const char *slash = strrchr(path, '/');
  if (!dot || (slash && dot < slash)) return NULL;
  dot++;
  if (!strcasecmp(dot, "png")) return "png";
  if (!strcasecmp(dot, "jpg") || !strcasecmp(dot, "jpeg")) return "jpg";
  if (!strcasecmp(dot, "bmp")) return "bmp";
  if (!strcasecmp(dot, "tga")) return "tga";
  return NULL;
}

static unsigned char to_byte(float v) {
  if (!(v > 0.0f)) return 0; /* NaN too */
  if (v >= 1.0f) return 255;
  return (unsigned char)(v * 255.0f + 0.5f);
}

int gl_image_save(const char *path, const gl_tensor *img, const char *format, int quality) {
  imshape s;
  char b[128];
  int st = read_shape("image.save", "img", img, ALLOW_HW | ALLOW_CHW, &s);
  if (st) return st;
  if (s.C != 1 && s.C != 3 && s.C != 4)
    return gl_fail(GL_ESHAPE, "image.save: %s: img has shape %s: channels must be 1, 3 or 4",
                   path, gl_shape_str(b, sizeof b, img->ndim, img->shape));
  if (s.H < 1 || s.W < 1)
    return gl_fail(GL_ESHAPE, "image.save: %s: img has shape %s: an image needs H, W >= 1",
                   path, gl_shape_str(b, sizeof b, img->ndim, img->shape));
  const char *fmt = format ? format : format_of(path);
  if (!fmt)
    return gl_fail(GL_EARG, "image.save: %s: unknown extension (use .png, .jpg, .jpeg, .bmp, "
                            ".tga or the format option)", path);
  if (strcmp(fmt, "png") && strcmp(fmt, "jpg") && strcmp(fmt, "jpeg") && strcmp(fmt, "bmp") &&
      strcmp(fmt, "tga"))
    return gl_fail(GL_EARG, "image.save: %s: unknown format '%s' (png, jpg, bmp or tga)", path,
                   fmt);
  if (quality < 1 || quality > 100)
    return gl_fail(GL_EARG, "image.save: %s: quality must be 1..100, got %d", path, quality);
  size_t npix = (size_t)s.H * (size_t)s.W;
  if (npix > (size_t)0x7fffffff / (size_t)s.C)
    return gl_fail(GL_ENOMEM, "image.save: %s: image of %zu pixels is too large", path, npix);
  unsigned char *px = malloc(npix * (size_t)s.C);
  if (!px) return gl_fail(GL_ENOMEM, "image.save: %s: out of memory", path);
  for (int c = 0; c < s.C; c++)
    for (size_t i = 0; i < npix; i++) px[i * s.C + c] = to_byte(img->data[c * npix + i]);
  writer w = {fopen(path, "wb"), 0};
  if (!w.f) {
    int e = errno;
    free(px);
    return gl_fail(GL_EIO, "image.save: %s: %s", path, strerror(e));
  }
  int ok;
  if (!strcmp(fmt, "png"))
    ok = stbi_write_png_to_func(write_cb, &w, s.W, s.H, s.C, px, s.W * s.C);
  else if (!strcmp(fmt, "bmp"))
    ok = stbi_write_bmp_to_func(write_cb, &w, s.W, s.H, s.C, px);
  else if (!strcmp(fmt, "tga"))
    ok = stbi_write_tga_to_func(write_cb, &w, s.W, s.H, s.C, px);
  else
    ok = stbi_write_jpg_to_func(write_cb, &w, s.W, s.H, s.C, px, quality);
  free(px);
  int closed = fclose(w.f) == 0;
  if (!ok || w.failed || !closed)
    return gl_fail(GL_EIO, "image.save: %s: write failed%s", path,
                   !ok ? " (encoder error)" : " (disk full or I/O error)");
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* resize: (H,W), (C,H,W) or (B,C,H,W) -> same with (h,w).  Each plane goes through stb's
 * separable filters independently (planar data, so stb sees one channel at a time).
 * The cubic filters may overshoot [0,1] slightly at sharp edges; nothing is clamped. */

static void resize_nearest(const float *in, int H, int W, float *out, int h, int w) {
  for (int y = 0; y < h; y++) {
    int sy = (int)(((double)y + 0.5) * H / h);
    if (sy >= H) sy = H - 1;
    for (int x = 0; x < w; x++) {
      int sx = (int)(((double)x + 0.5) * W / w);
      if (sx >= W) sx = W - 1;
      out[(size_t)y * w + x] = in[(size_t)sy * W + sx];
    }
  }
}

int gl_image_resize(gl_tensor **out, const gl_tensor *img, int h, int w, int filter) {
  *out = NULL;
  imshape s;
  char b[128];
  int st = read_shape("image.resize", "img", img, ALLOW_HW | ALLOW_CHW | ALLOW_BCHW, &s);
  if (st) return st;
  if (h < 1 || w < 1)
    return gl_fail(GL_EARG, "image.resize: target size %dx%d must be positive (img %s)", h, w,
                   gl_shape_str(b, sizeof b, img->ndim, img->shape));
  if (s.H < 1 || s.W < 1)
    return gl_fail(GL_ESHAPE, "image.resize: img %s is empty",
                   gl_shape_str(b, sizeof b, img->ndim, img->shape));
  stbir_filter f;
  switch (filter) {
    case GL_RESIZE_AUTO: f = STBIR_FILTER_DEFAULT; break;
    case GL_RESIZE_BOX: f = STBIR_FILTER_BOX; break;
    case GL_RESIZE_BILINEAR: f = STBIR_FILTER_TRIANGLE; break;
    case GL_RESIZE_BICUBIC: f = STBIR_FILTER_CATMULLROM; break;
    case GL_RESIZE_MITCHELL: f = STBIR_FILTER_MITCHELL; break;
    case GL_RESIZE_NEAREST: f = STBIR_FILTER_DEFAULT; break;
    default: return gl_fail(GL_EARG, "image.resize: unknown filter %d", filter);
  }
  st = alloc_like(out, &s, s.C, h, w);
  if (st) return st;
  size_t nin = (size_t)s.H * s.W, nout = (size_t)h * w;
  int planes = s.B * s.C;
  for (int p = 0; p < planes; p++) {
    const float *src = img->data + p * nin;
    float *dst = (*out)->data + p * nout;
    if (filter == GL_RESIZE_NEAREST) {
      resize_nearest(src, s.H, s.W, dst, h, w);
      continue;
    }
    if (!stbir_resize_float_generic(src, s.W, s.H, 0, dst, w, h, 0, 1, STBIR_ALPHA_CHANNEL_NONE,
                                    0, STBIR_EDGE_CLAMP, f, STBIR_COLORSPACE_LINEAR, NULL)) {
      gl_release(*out);
      *out = NULL;
      return gl_fail(GL_ENOMEM, "image.resize: %s -> %dx%d: out of memory",
                     gl_shape_str(b, sizeof b, img->ndim, img->shape), h, w);
    }
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* crop: rows top..top+h-1, cols left..left+w-1 (0-based), every plane */

int gl_image_crop(gl_tensor **out, const gl_tensor *img, int top, int left, int h, int w) {
  *out = NULL;
  imshape s;
  char b[128];
  int st = read_shape("image.crop", "img", img, ALLOW_HW | ALLOW_CHW | ALLOW_BCHW, &s);
  if (st) return st;
  if (h < 1 || w < 1 || top < 0 || left < 0 || top > s.H - h || left > s.W - w)
    return gl_fail(GL_EARG,
                   "image.crop: box of %dx%d at row %d, col %d (0-based) does not fit in img %s",
                   h, w, top, left, gl_shape_str(b, sizeof b, img->ndim, img->shape));
  st = alloc_like(out, &s, s.C, h, w);
  if (st) return st;
  size_t nin = (size_t)s.H * s.W;
  float *o = (*out)->data;
  for (int p = 0; p < s.B * s.C; p++) {
    const float *src = img->data + p * nin + (size_t)top * s.W + left;
    for (int y = 0; y < h; y++, o += w) memcpy(o, src + (size_t)y * s.W, (size_t)w * sizeof *o);
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* flips: hflip mirrors columns (left-right), vflip mirrors rows */

int gl_image_flip(gl_tensor **out, const gl_tensor *img, int horizontal) {
  *out = NULL;
  imshape s;
  const char *op = horizontal ? "image.hflip" : "image.vflip";
  int st = read_shape(op, "img", img, ALLOW_HW | ALLOW_CHW | ALLOW_BCHW, &s);
  if (st) return st;
  st = alloc_like(out, &s, s.C, s.H, s.W);
  if (st) return st;
  size_t n = (size_t)s.H * s.W;
  for (int p = 0; p < s.B * s.C; p++) {
    const float *src = img->data + p * n;
    float *dst = (*out)->data + p * n;
    for (int y = 0; y < s.H; y++) {
      const float *r = src + (size_t)y * s.W;
      float *d = dst + (size_t)(horizontal ? y : s.H - 1 - y) * s.W;
      if (horizontal)
        for (int x = 0; x < s.W; x++) d[x] = r[s.W - 1 - x];
      else
        memcpy(d, r, (size_t)s.W * sizeof *d);
    }
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* to_grey: (3,H,W) or (4,H,W) -> (1,H,W) by ITU-R BT.601 luma (alpha ignored); a grey image
 * is copied.  Batches keep their batch dim. */

int gl_image_to_grey(gl_tensor **out, const gl_tensor *img) {
  *out = NULL;
  imshape s;
  char b[128];
  int st = read_shape("image.to_grey", "img", img, ALLOW_HW | ALLOW_CHW | ALLOW_BCHW, &s);
  if (st) return st;
  if (s.C != 1 && s.C != 3 && s.C != 4)
    return gl_fail(GL_ESHAPE, "image.to_grey: img has shape %s: channels must be 1, 3 or 4",
                   gl_shape_str(b, sizeof b, img->ndim, img->shape));
  st = alloc_like(out, &s, 1, s.H, s.W);
  if (st) return st;
  size_t n = (size_t)s.H * s.W;
  for (int bi = 0; bi < s.B; bi++) {
    const float *src = img->data + (size_t)bi * s.C * n;
    float *dst = (*out)->data + (size_t)bi * n;
    if (s.C == 1) {
      memcpy(dst, src, n * sizeof *dst);
      continue;
    }
    for (size_t i = 0; i < n; i++)
      dst[i] = 0.299f * src[i] + 0.587f * src[n + i] + 0.114f * src[2 * n + i];
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* normalize: (x - mean[c]) / std[c] per channel; n == 1 applies one pair to every channel */

int gl_image_normalize(gl_tensor **out, const gl_tensor *img, int n, const float *mean,
                       const float *std) {
  *out = NULL;
  imshape s;
  char b[128];
  int st = read_shape("image.normalize", "img", img, ALLOW_CHW | ALLOW_BCHW, &s);
  if (st) return st;
  if (n != 1 && n != s.C)
    return gl_fail(GL_ESHAPE, "image.normalize: img %s has %d channels but mean/std have %d "
                              "entries", gl_shape_str(b, sizeof b, img->ndim, img->shape), s.C, n);
  for (int c = 0; c < n; c++)
    if (!(std[c] != 0.0f) || !isfinite(std[c]) || !isfinite(mean[c]))
      return gl_fail(GL_EVALUE, "image.normalize: channel %d has mean %g, std %g (std must be "
                                "finite and non-zero)", c + 1, (double)mean[c], (double)std[c]);
  st = alloc_like(out, &s, s.C, s.H, s.W);
  if (st) return st;
  size_t np = (size_t)s.H * s.W;
  for (int bi = 0; bi < s.B; bi++)
    for (int c = 0; c < s.C; c++) {
      size_t off = ((size_t)bi * s.C + c) * np;
      float m = mean[n == 1 ? 0 : c], inv = 1.0f / std[n == 1 ? 0 : c];
      for (size_t i = 0; i < np; i++) (*out)->data[off + i] = (img->data[off + i] - m) * inv;
    }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* grid: n images (C,H,W) or (H,W) of one size -> one (C, rows*(H+p)+p, ncol*(W+p)+p) picture,
 * row-major, like torchvision's make_grid.  One (B,C,H,W) tensor counts as B images.  Grey
 * images next to colour ones are repeated over 3 channels. */

int gl_image_grid(gl_tensor **out, int n, gl_tensor *const *imgs, int ncol, int padding,
                  float pad_value) {
  *out = NULL;
  char b[128];
  if (n < 1) return gl_fail(GL_EARG, "image.grid: no images");
  if (padding < 0) return gl_fail(GL_EARG, "image.grid: padding %d is negative", padding);
  imshape s0;
  int st, count = 0, C = 0;
  for (int i = 0; i < n; i++) {
    imshape s;
    if (imgs[i] && imgs[i]->ndim == 4 && n > 1)
      return gl_fail(GL_ESHAPE, "image.grid: image %d has shape %s: a batch (B,C,H,W) must be "
                                "passed alone", i + 1,
                     gl_shape_str(b, sizeof b, imgs[i]->ndim, imgs[i]->shape));
    st = read_shape("image.grid", "an image", imgs[i], ALLOW_HW | ALLOW_CHW | ALLOW_BCHW, &s);
    if (st) return st;
    if (i == 0) s0 = s;
    if (s.H != s0.H || s.W != s0.W)
      return gl_fail(GL_ESHAPE, "image.grid: image %d has shape %s, image 1 is %dx%d: all images "
                                "need the same height and width", i + 1,
                     gl_shape_str(b, sizeof b, imgs[i]->ndim, imgs[i]->shape), s0.H, s0.W);
    if (s.C != 1 && s.C != 3 && s.C != 4)
      return gl_fail(GL_ESHAPE, "image.grid: image %d has shape %s: channels must be 1, 3 or 4",
                     i + 1, gl_shape_str(b, sizeof b, imgs[i]->ndim, imgs[i]->shape));
    if (C == 0 || C == 1) C = s.C;
    else if (s.C != 1 && s.C != C)
      return gl_fail(GL_ESHAPE, "image.grid: image %d has %d channels, others have %d", i + 1,
                     s.C, C);
    count += s.B;
  }
  if (count < 1) return gl_fail(GL_EARG, "image.grid: the batch is empty");
  if (ncol <= 0) ncol = count < 8 ? count : 8;
  if (ncol > count) ncol = count;
  int rows = (count + ncol - 1) / ncol;
  int H = s0.H, W = s0.W;
  double oh = (double)rows * (H + padding) + padding, ow = (double)ncol * (W + padding) + padding;
  if (oh * ow * C > (double)GL_MAX_NUMEL || oh > 2147483647.0 || ow > 2147483647.0)
    return gl_fail(GL_ENOMEM, "image.grid: a %d x %d grid of %dx%d images is too large", rows,
                   ncol, H, W);
  int shape[3] = {C, (int)oh, (int)ow};
  st = gl_full(out, 3, shape, pad_value);
  if (st) return st;
  size_t plane_out = (size_t)shape[1] * shape[2], plane_in = (size_t)H * W;
  int k = 0;
  for (int i = 0; i < n; i++) {
    imshape s;
    read_shape("image.grid", "an image", imgs[i], ALLOW_HW | ALLOW_CHW | ALLOW_BCHW, &s);
    for (int bi = 0; bi < s.B; bi++, k++) {
      int y0 = padding + (k / ncol) * (H + padding), x0 = padding + (k % ncol) * (W + padding);
      for (int c = 0; c < C; c++) {
        const float *src = imgs[i]->data + ((size_t)bi * s.C + (s.C == 1 ? 0 : c)) * plane_in;
        float *dst = (*out)->data + c * plane_out + (size_t)y0 * shape[2] + x0;
        for (int y = 0; y < H; y++)
          memcpy(dst + (size_t)y * shape[2], src + (size_t)y * W, (size_t)W * sizeof *dst);
      }
    }
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* colormaps: x in [0,1] -> rgb in [0,1] */

static const char *const cmap_names[GL_CMAP_COUNT] = {"jet", "viridis", "hot", "grey"};

int gl_colormap_by_name(const char *name) {
  for (int i = 0; i < GL_CMAP_COUNT; i++)
    if (!strcmp(name, cmap_names[i])) return i;
  if (!strcmp(name, "gray")) return GL_CMAP_GREY;
  return -1;
}

const char *gl_colormap_name(int cmap) {
  return cmap >= 0 && cmap < GL_CMAP_COUNT ? cmap_names[cmap] : "?";
}

static float clamp01(float v) { return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; }

/* viridis at nine evenly spaced stops (matplotlib's published hex values), interpolated
 * linearly: close enough to the full 256-entry table for a heatmap */
static const unsigned char viridis_stops[9][3] = {
    {68, 1, 84},    {72, 40, 120},  {62, 74, 137},  {49, 104, 142}, {38, 130, 142},
    {31, 158, 137}, {53, 183, 121}, {109, 205, 89}, {253, 231, 37}};

void gl_colormap_rgb(int cmap, float x, float *rgb) {
  x = isnan(x) ? 0.0f : clamp01(x);
  switch (cmap) {
    case GL_CMAP_JET:  /* blue -> cyan -> yellow -> red, the classic piecewise-linear jet */
      rgb[0] = clamp01(1.5f - fabsf(4.0f * x - 3.0f));
      rgb[1] = clamp01(1.5f - fabsf(4.0f * x - 2.0f));
      rgb[2] = clamp01(1.5f - fabsf(4.0f * x - 1.0f));
      break;
    case GL_CMAP_HOT:  /* black -> red -> yellow -> white */
      rgb[0] = clamp01(3.0f * x);
      rgb[1] = clamp01(3.0f * x - 1.0f);
      rgb[2] = clamp01(3.0f * x - 2.0f);
      break;
    case GL_CMAP_VIRIDIS: {
      float p = x * 8.0f;
      int i = (int)p;
      if (i > 7) i = 7;
      float t = p - (float)i;
      for (int c = 0; c < 3; c++)
        rgb[c] = ((1.0f - t) * viridis_stops[i][c] + t * viridis_stops[i + 1][c]) / 255.0f;
      break;
    }
    default:
      rgb[0] = rgb[1] = rgb[2] = x;
  }
}

/* min and max over the finite entries; lo = hi = 0 when there are none */
static void finite_range(const float *p, size_t n, float *lo, float *hi) {
  float a = INFINITY, z = -INFINITY;
  for (size_t i = 0; i < n; i++)
    if (isfinite(p[i])) {
      if (p[i] < a) a = p[i];
      if (p[i] > z) z = p[i];
    }
  if (a > z) a = z = 0.0f;
  *lo = a;
  *hi = z;
}

/* ------------------------------------------------------------------------ */
/* heatmap: m (H,W) -> (3, H*scale, W*scale), each entry a scale x scale block of its colour.
 * vmin/vmax NaN: the matrix's own min and max. */

int gl_image_heatmap(gl_tensor **out, const gl_tensor *m, int cmap, int scale, float vmin,
                     float vmax) {
  *out = NULL;
  char b[128];
  if (!m || m->ndim != 2)
    return gl_fail(GL_ESHAPE, "image.heatmap: m has shape %s, expected (H,W)",
                   m ? gl_shape_str(b, sizeof b, m->ndim, m->shape) : "(none)");
  if (cmap < 0 || cmap >= GL_CMAP_COUNT)
    return gl_fail(GL_EARG, "image.heatmap: unknown colormap %d", cmap);
  int H = m->shape[0], W = m->shape[1];
  if (H < 1 || W < 1)
    return gl_fail(GL_ESHAPE, "image.heatmap: m %s is empty",
                   gl_shape_str(b, sizeof b, m->ndim, m->shape));
  if (scale < 1) return gl_fail(GL_EARG, "image.heatmap: scale %d must be >= 1", scale);
  if ((double)H * scale * W * scale > (double)max_pixels)
    return gl_fail(GL_ENOMEM, "image.heatmap: m %s at scale %d exceeds the cap of %zu pixels",
                   gl_shape_str(b, sizeof b, m->ndim, m->shape), scale, max_pixels);
  float lo, hi;
  finite_range(m->data, m->numel, &lo, &hi);
  if (!isnan(vmin)) lo = vmin;
  if (!isnan(vmax)) hi = vmax;
  float span = hi > lo ? hi - lo : 0.0f;
  int OH = H * scale, OW = W * scale;
  int shape[3] = {3, OH, OW};
  int st = gl_empty(out, 3, shape);
  if (st) return st;
  size_t plane = (size_t)OH * OW;
  float *o = (*out)->data;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      float v = m->data[(size_t)y * W + x];
      float rgb[3];
      gl_colormap_rgb(cmap, span > 0.0f && isfinite(v) ? (v - lo) / span : 0.0f, rgb);
      for (int c = 0; c < 3; c++)
        for (int dy = 0; dy < scale; dy++) {
          float *row = o + c * plane + (size_t)(y * scale + dy) * OW + (size_t)x * scale;
          for (int dx = 0; dx < scale; dx++) row[dx] = rgb[c];
        }
    }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* overlay: img (H,W) or (C,H,W), C = 1, 3, 4; heat with gh*gw entries read as (gh,gw)
 *   -> (3,H,W) = (1-alpha) * rgb(img) + alpha * colormap(minmax(upsample(heat)))
 * Upsampling maps pixel centres to cell centres (half-pixel convention), clamped at the
 * edges, so cell (i,j) of an 8x8 map lands on the (i,j) block of the image. */

/* Catmull-Rom weights (Keys, a = -0.5) for offset t in [0,1) from the sample at floor */
static void cubic_weights(float t, float *w) {
  float t2 = t * t, t3 = t2 * t;
  w[0] = -0.5f * t3 + t2 - 0.5f * t;
  w[1] = 1.5f * t3 - 2.5f * t2 + 1.0f;
  w[2] = -1.5f * t3 + 2.0f * t2 + 0.5f * t;
  w[3] = 0.5f * t3 - 0.5f * t2;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* one source axis position for each of n output pixels: index i0 and fraction t */
static void axis_map(int n_out, int n_in, int *i0, float *t) {
  for (int o = 0; o < n_out; o++) {
    double p = ((double)o + 0.5) * n_in / n_out - 0.5;
    if (p < 0) p = 0;
    if (p > n_in - 1) p = n_in - 1;
    int i = (int)floor(p);
    i0[o] = i;
    t[o] = (float)(p - i);
  }
}

static int upsample_heat(float *dst, int H, int W, const float *src, int gh, int gw,
                         int mode) {
  int *iy = malloc(sizeof(int) * (size_t)(H + W));
  float *ty = malloc(sizeof(float) * (size_t)(H + W));
  if (!iy || !ty) {
    free(iy);
    free(ty);
    return gl_fail(GL_ENOMEM, "image.overlay: out of memory");
  }
  int *ix = iy + H;
  float *tx = ty + H;
  axis_map(H, gh, iy, ty);
  axis_map(W, gw, ix, tx);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      float v;
      if (mode == GL_UPSAMPLE_NEAREST) {
        int sy = clampi((int)(((double)y + 0.5) * gh / H), 0, gh - 1);
        int sx = clampi((int)(((double)x + 0.5) * gw / W), 0, gw - 1);
        v = src[(size_t)sy * gw + sx];
      } else if (mode == GL_UPSAMPLE_BICUBIC) {
        float wy[4], wx[4];
        cubic_weights(ty[y], wy);
        cubic_weights(tx[x], wx);
        v = 0.0f;
        for (int a = 0; a < 4; a++) {
          const float *row = src + (size_t)clampi(iy[y] - 1 + a, 0, gh - 1) * gw;
          float r = 0.0f;
          for (int c = 0; c < 4; c++) r += wx[c] * row[clampi(ix[x] - 1 + c, 0, gw - 1)];
          v += wy[a] * r;
        }
      } else {
        int y1 = iy[y] + 1 < gh ? iy[y] + 1 : iy[y], x1 = ix[x] + 1 < gw ? ix[x] + 1 : ix[x];
        const float *r0 = src + (size_t)iy[y] * gw, *r1 = src + (size_t)y1 * gw;
        float top = (1.0f - tx[x]) * r0[ix[x]] + tx[x] * r0[x1];
        float bot = (1.0f - tx[x]) * r1[ix[x]] + tx[x] * r1[x1];
        v = (1.0f - ty[y]) * top + ty[y] * bot;
      }
      dst[(size_t)y * W + x] = v;
    }
  free(iy);
  free(ty);
  return GL_OK;
}

int gl_image_overlay(gl_tensor **out, const gl_tensor *img, const gl_tensor *heat, int gh,
                     int gw, float alpha, int cmap, int upsample) {
  *out = NULL;
  imshape s;
  char b[128], b2[128];
  int st = read_shape("image.overlay", "img", img, ALLOW_HW | ALLOW_CHW, &s);
  if (st) return st;
  if (s.C != 1 && s.C != 3 && s.C != 4)
    return gl_fail(GL_ESHAPE, "image.overlay: img has shape %s: channels must be 1, 3 or 4",
                   gl_shape_str(b, sizeof b, img->ndim, img->shape));
  if (s.H < 1 || s.W < 1)
    return gl_fail(GL_ESHAPE, "image.overlay: img %s is empty",
                   gl_shape_str(b, sizeof b, img->ndim, img->shape));
  if (!heat) return gl_fail(GL_EARG, "image.overlay: heat is missing");
  if (gh < 1 || gw < 1 || (size_t)gh * (size_t)gw != heat->numel)
    return gl_fail(GL_ESHAPE, "image.overlay: heat %s cannot be read as a %dx%d grid (img %s)",
                   gl_shape_str(b, sizeof b, heat->ndim, heat->shape), gh, gw,
                   gl_shape_str(b2, sizeof b2, img->ndim, img->shape));
  if (!(alpha >= 0.0f && alpha <= 1.0f))
    return gl_fail(GL_EARG, "image.overlay: alpha %g must be in [0,1]", (double)alpha);
  if (cmap < 0 || cmap >= GL_CMAP_COUNT)
    return gl_fail(GL_EARG, "image.overlay: unknown colormap %d", cmap);
  if (upsample != GL_UPSAMPLE_BILINEAR && upsample != GL_UPSAMPLE_BICUBIC &&
      upsample != GL_UPSAMPLE_NEAREST)
    return gl_fail(GL_EARG, "image.overlay: unknown upsampling mode %d", upsample);
  int shape[3] = {3, s.H, s.W};
  st = gl_empty(out, 3, shape);
  if (st) return st;
  size_t n = (size_t)s.H * s.W;
  float *o = (*out)->data;
  /* the upsampled heat goes in the blue plane first; it is read before being overwritten */
  float *up = o + 2 * n;
  st = upsample_heat(up, s.H, s.W, heat->data, gh, gw, upsample);
  if (st) {
    gl_release(*out);
    *out = NULL;
    return st;
  }
  float lo, hi;
  finite_range(up, n, &lo, &hi);
  float span = hi > lo ? hi - lo : 0.0f;
  const float *src = img->data;
  for (size_t i = 0; i < n; i++) {
    float v = up[i], rgb[3];
    gl_colormap_rgb(cmap, span > 0.0f && isfinite(v) ? (v - lo) / span : 0.0f, rgb);
    for (int c = 0; c < 3; c++) {
      float base = src[(s.C == 1 ? 0 : c) * n + i];
      o[c * n + i] = (1.0f - alpha) * base + alpha * rgb[c];
    }
  }
  return GL_OK;
}
