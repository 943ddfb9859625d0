/* image_load.c -- image files into (C,H,W) tensors in [0,1], every file treated as hostile.
 *
 * Which decoder reads what, and why (docs/api/image.md says the same for users):
 *   PNG   libpng 1.6 (Debian's libpng-dev): CRCs of every chunk and the zlib Adler-32 are
 *         checked, a short image is an error, empty IDAT chunks are fine.
 *   JPEG  libjpeg-turbo (Debian's libjpeg62-turbo-dev): bad Huffman tables are refused, and
 *         every "corrupt data" or "premature end" warning is an error here, not a grey
 *         patch.
 *   BMP, TGA, GIF  stb_image, behind a front end that checks the declared size against the
 *         bytes the file actually has before stb allocates anything.
 * The fuzzer (tests/fuzz/) found stb's PNG and JPEG decoders writing out of bounds on a
 * Huffman table whose counts sum past 256, calling memcpy(NULL, .., 0) on an empty IDAT,
 * and accepting bad checksums and truncated data; the hardened, widely fuzzed libraries
 * replace them rather than a second parser in front of stb.
 *
 * Before any pixel buffer is allocated: the pixel count against the cap (max_pixels), and the
 * declared size against the file size (a compressed stream has a bounded expansion ratio), so
 * a 54-byte "8000x8000" BMP or a 1 KB "8000x8000" JPEG fails in microseconds.
 */
#include "glimpse.h"
#include "glimpse_internal.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "stb_begin.h"

#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
/* only the formats stb still reads here: fewer decoders, less attack surface */
#define STBI_ONLY_BMP
#define STBI_ONLY_TGA
#define STBI_ONLY_GIF
#define STBI_NO_STDIO_WARNINGS
#define STBI_MAX_DIMENSIONS 65535     /* TGA and GIF cannot say more; BMP has no business to */
#include <stb_image.h>

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/* DEFLATE turns one byte into at most 1032 (258-byte matches at 2 bits each, plus framing) */
#define DEFLATE_MAX_RATIO 1032

/* A decoded image: interleaved rows of nch channels, 8 or 16 bits, malloc'ed */
typedef struct {
  void *px;
  int w, h, nch, is16;
} pixels;

/* What a decoder needs to know about its call */
typedef struct {
  const char *op;       /* "image.load" or "image.info" */
  const char *path;
  FILE *f;
  size_t fsize;         /* bytes in the file */
  size_t cap;           /* pixel cap; 0 when only the header is wanted */
} job;

static int cap_check(const job *j, int w, int h) {
  if (w <= 0 || h <= 0)
    return gl_fail(GL_EFORMAT, "%s: %s: bad dimensions %dx%d", j->op, j->path, w, h);
  size_t npix = (size_t)w * (size_t)h;
  if (j->cap && npix > j->cap)
    return gl_fail(GL_ENOMEM,
                   "%s: %s: %dx%d image (%zu pixels) exceeds the cap of %zu pixels "
                   "(raise it with max_pixels or image.set_max_pixels)",
                   j->op, j->path, w, h, npix, j->cap);
  return GL_OK;
}

/* The file cannot hold the image its header declares. */
static int too_small(const job *j, int w, int h, const char *why) {
  return gl_fail(GL_EFORMAT, "%s: %s: file is truncated or damaged: its header declares %dx%d "
                             "but %zu bytes %s", j->op, j->path, w, h, j->fsize, why);
}

/* ------------------------------------------------------------------------ */
/* PNG through libpng */

typedef struct {
  jmp_buf jb;
  char msg[160];
  png_structp png;
  png_infop info;
  unsigned char *px;
  png_bytep *rows;
} png_state;

static void png_on_error(png_structp png, png_const_charp m) {
  png_state *s = png_get_error_ptr(png);
  snprintf(s->msg, sizeof s->msg, "%s", m ? m : "error");
  longjmp(s->jb, 1);
}

/* libpng's warnings (an odd ancillary chunk, a known-bad sRGB profile) do not stop a load;
 * and the library must not print. */
static void png_on_warning(png_structp png, png_const_charp m) {
  (void)png;
  (void)m;
}

static int png_decode(const job *j, pixels *out, int *comp) {
  /* heap, not stack: everything the longjmp path reads lives outside this frame */
  png_state *s = calloc(1, sizeof *s);
  if (!s) return gl_fail(GL_ENOMEM, "%s: %s: out of memory", j->op, j->path);
  int st = GL_OK;
  if (setjmp(s->jb)) {    /* before creating: libpng reports creation errors through it too */
    st = gl_fail(GL_EFORMAT, "%s: %s: file is truncated or damaged (libpng: %s)", j->op,
                 j->path, s->msg);
    goto done;
  }
  s->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, s, png_on_error, png_on_warning);
  if (s->png) s->info = png_create_info_struct(s->png);
  if (!s->png || !s->info) {
    st = gl_fail(GL_ENOMEM, "%s: %s: out of memory", j->op, j->path);
    goto done;
  }
  /* a bad CRC on any chunk, critical or not, is damage */
  png_set_crc_action(s->png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
  png_set_user_limits(s->png, STBI_MAX_DIMENSIONS * 16, STBI_MAX_DIMENSIONS * 16);
  png_init_io(s->png, j->f);
  png_read_info(s->png, s->info);
  png_uint_32 w = png_get_image_width(s->png, s->info), h = png_get_image_height(s->png, s->info);
  int ct = png_get_color_type(s->png, s->info), bd = png_get_bit_depth(s->png, s->info);
  int file_ch = png_get_channels(s->png, s->info);
  int has_trns = png_get_valid(s->png, s->info, PNG_INFO_tRNS) != 0;
  *comp = ct == PNG_COLOR_TYPE_GRAY ? (has_trns ? 2 : 1)
        : ct == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
        : ct == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : (has_trns ? 4 : 3);
  out->w = (int)w;
  out->h = (int)h;
  if ((st = cap_check(j, out->w, out->h)) || !j->cap) goto done;
  /* the filtered rows (a filter byte each) come out of a DEFLATE stream inside the file */
  uint64_t raw = (uint64_t)h * (((uint64_t)w * (uint64_t)file_ch * (uint64_t)bd + 7) / 8 + 1);
  if (raw / DEFLATE_MAX_RATIO > j->fsize) {
    st = too_small(j, out->w, out->h, "cannot hold its compressed rows");
    goto done;
  }
  png_set_expand(s->png);                 /* palette -> RGB, low bit depths -> 8, tRNS -> alpha */
  if (bd == 16) {
    const uint16_t one = 1;
    if (*(const unsigned char *)&one == 1) png_set_swap(s->png);   /* to host order */
  }
  (void)png_set_interlace_handling(s->png);
  png_read_update_info(s->png, s->info);
  out->nch = png_get_channels(s->png, s->info);
  out->is16 = png_get_bit_depth(s->png, s->info) == 16;
  size_t rowbytes = png_get_rowbytes(s->png, s->info);
  if (out->nch < 1 || out->nch > 4 ||
      rowbytes != (size_t)w * (size_t)out->nch * (out->is16 ? 2u : 1u)) {
    st = gl_fail(GL_EFORMAT, "%s: %s: unsupported PNG layout", j->op, j->path);
    goto done;
  }
  s->px = malloc(rowbytes * h);
  s->rows = malloc(sizeof *s->rows * h);
  if (!s->px || !s->rows) {
    st = gl_fail(GL_ENOMEM, "%s: %s: out of memory for %ux%u pixels", j->op, j->path, w, h);
    goto done;
  }
  for (png_uint_32 y = 0; y < h; y++) s->rows[y] = s->px + (size_t)y * rowbytes;
  png_read_image(s->png, s->rows);
  png_read_end(s->png, NULL);           /* the chunks after the image: CRCs, IEND */
  out->px = s->px;
  s->px = NULL;

done:
  png_destroy_read_struct(&s->png, &s->info, NULL);
  free(s->px);
  free(s->rows);
  free(s);
  return st;
}

/* ------------------------------------------------------------------------ */
/* JPEG through libjpeg-turbo */

typedef struct {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr jerr;
  struct jpeg_progress_mgr progress;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
  unsigned char *px;
} jpg_state;

static void jpg_on_error(j_common_ptr c) {
  jpg_state *s = c->client_data;
  c->err->format_message(c, s->msg);
  longjmp(s->jb, 1);
}

/* The warnings that mean corrupt image data -- a bad Huffman code, data ending early --
 * which libjpeg would paper over with grey; here they are errors.  The others (an unknown
 * JFIF revision, bytes between markers) say nothing about the pixels. */
static void jpg_on_message(j_common_ptr c, int level) {
  if (level >= 0) return;                      /* trace messages */
  switch (c->err->msg_code) {
    case JWRN_ARITH_BAD_CODE: case JWRN_HIT_MARKER: case JWRN_HUFF_BAD_CODE:
    case JWRN_JPEG_EOF: case JWRN_MUST_RESYNC: case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION: case JWRN_TOO_MUCH_DATA:
      jpg_on_error(c);
      break;
    default:
      break;
  }
}

static void jpg_quiet(j_common_ptr c) { (void)c; }

/* A progressive JPEG may repeat scans without end, each a pass over every coefficient: a
 * few KB can cost minutes.  Real files have at most a few dozen scans. */
#define JPEG_MAX_SCANS 500

static void jpg_progress(j_common_ptr c) {
  j_decompress_ptr d = (j_decompress_ptr)c;
  if (c->is_decompressor && d->input_scan_number > JPEG_MAX_SCANS) {
    jpg_state *s = c->client_data;
    snprintf(s->msg, sizeof s->msg, "more than %d scans", JPEG_MAX_SCANS);
    longjmp(s->jb, 1);
  }
}

static int jpg_decode(const job *j, pixels *out, int *comp) {
  jpg_state *s = calloc(1, sizeof *s);
  if (!s) return gl_fail(GL_ENOMEM, "%s: %s: out of memory", j->op, j->path);
  int st = GL_OK;
  s->cinfo.err = jpeg_std_error(&s->jerr);
  s->jerr.error_exit = jpg_on_error;
  s->jerr.emit_message = jpg_on_message;
  s->jerr.output_message = jpg_quiet;
  if (setjmp(s->jb)) {
    st = gl_fail(GL_EFORMAT, "%s: %s: file is truncated or damaged (libjpeg: %s)", j->op,
                 j->path, s->msg);
    goto done;
  }
  s->cinfo.client_data = s;               /* jpeg_create_decompress keeps it */
  jpeg_create_decompress(&s->cinfo);
  s->progress.progress_monitor = jpg_progress;
  s->cinfo.progress = &s->progress;
  jpeg_stdio_src(&s->cinfo, j->f);
  jpeg_read_header(&s->cinfo, TRUE);
  int ncomp = s->cinfo.num_components;
  *comp = ncomp >= 3 ? 3 : 1;
  out->w = (int)s->cinfo.image_width;
  out->h = (int)s->cinfo.image_height;
  if ((st = cap_check(j, out->w, out->h)) || !j->cap) goto done;
  /* Huffman coding spends at least one bit on every 8x8 block of a scanned component (its
   * DC code); so a file has at least that many bits for its smallest component.  Arithmetic
   * coding has no such floor and is bounded by the cap alone. */
  if (!s->cinfo.arith_code) {
    uint64_t least = UINT64_MAX;
    for (int c = 0; c < ncomp; c++) {
      jpeg_component_info *ci = &s->cinfo.comp_info[c];
      uint64_t blocks = (uint64_t)ci->width_in_blocks * ci->height_in_blocks;
      if (blocks < least) least = blocks;
    }
    if (least / 8 > j->fsize) {
      st = too_small(j, out->w, out->h, "cannot hold one bit per 8x8 block");
      goto done;
    }
  }
  /* progressive files keep all coefficients in memory: bound what libjpeg may take */
  uint64_t mem = (uint64_t)j->cap * 16 + ((uint64_t)64 << 20);
  s->cinfo.mem->max_memory_to_use = mem > LONG_MAX ? LONG_MAX : (long)mem;
  int cmyk = s->cinfo.jpeg_color_space == JCS_CMYK || s->cinfo.jpeg_color_space == JCS_YCCK;
  s->cinfo.out_color_space = cmyk ? JCS_CMYK : ncomp == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&s->cinfo);
  int oc = s->cinfo.output_components;
  if ((int)s->cinfo.output_width != out->w || (int)s->cinfo.output_height != out->h ||
      oc != (cmyk ? 4 : ncomp == 1 ? 1 : 3)) {
    st = gl_fail(GL_EFORMAT, "%s: %s: unsupported JPEG layout", j->op, j->path);
    goto done;
  }
  size_t row = (size_t)out->w * (size_t)oc;
  s->px = malloc(row * (size_t)out->h);
  if (!s->px) {
    st = gl_fail(GL_ENOMEM, "%s: %s: out of memory for %dx%d pixels", j->op, j->path, out->w,
                 out->h);
    goto done;
  }
  while (s->cinfo.output_scanline < s->cinfo.output_height) {
    JSAMPROW r = s->px + (size_t)s->cinfo.output_scanline * row;
    jpeg_read_scanlines(&s->cinfo, &r, 1);
  }
  jpeg_finish_decompress(&s->cinfo);
  if (cmyk) {
    /* Adobe writes CMYK inverted (0 = full ink): r = c * k / 255, and so on */
    size_t npix = (size_t)out->w * (size_t)out->h;
    for (size_t i = 0; i < npix; i++) {
      const unsigned char *q = s->px + i * 4;
      unsigned k = q[3];
      s->px[i * 3 + 0] = (unsigned char)((q[0] * k + 127) / 255);
      s->px[i * 3 + 1] = (unsigned char)((q[1] * k + 127) / 255);
      s->px[i * 3 + 2] = (unsigned char)((q[2] * k + 127) / 255);
    }
    oc = 3;
  }
  out->nch = oc;
  out->is16 = 0;
  out->px = s->px;
  s->px = NULL;

done:
  jpeg_destroy_decompress(&s->cinfo);
  free(s->px);
  free(s);
  return st;
}

/* ------------------------------------------------------------------------ */
/* BMP, TGA, GIF through stb_image, after a size check of our own */

static unsigned le16(const unsigned char *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }
static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The first n bytes of the file: all of it for a load (the formats stb reads here are
 * checked against their whole data), a header's worth for image.info. */
static unsigned char *slurp(const job *j, size_t n, int *st) {
  *st = GL_OK;
  unsigned char *b = malloc(n ? n : 1);
  if (!b) {
    *st = gl_fail(GL_ENOMEM, "%s: %s: out of memory for %zu bytes", j->op, j->path, n);
    return NULL;
  }
  rewind(j->f);
  if (fread(b, 1, n, j->f) != n) {
    *st = gl_fail(GL_EIO, "%s: %s: read failed", j->op, j->path);
    free(b);
    return NULL;
  }
  return b;
}

/* BMP: uncompressed rows (padded to 4 bytes) or bitfields must all be in the file.  stb
 * reads past the end as zeros, so without this a 54-byte header makes an 8000x8000 image. */
static int bmp_check(const job *j, const unsigned char *b, int w, int h) {
  if (j->fsize < 30) return too_small(j, w, h, "cannot hold a BMP header");
  uint32_t off = le32(b + 10), hsz = le32(b + 14);
  unsigned bpp = hsz == 12 ? le16(b + 24) : (j->fsize >= 34 ? le16(b + 28) : 0);
  uint32_t comp = hsz >= 40 && j->fsize >= 34 ? le32(b + 30) : 0;
  if (comp == 1 || comp == 2) return GL_OK;     /* RLE: stb refuses it with its own message */
  uint64_t rowbytes = ((uint64_t)w * bpp + 31) / 32 * 4;
  uint64_t need = (uint64_t)off + rowbytes * (uint64_t)h;
  if (bpp == 0 || need > j->fsize) return too_small(j, w, h, "cannot hold its pixel rows");
  return GL_OK;
}

/* TGA: uncompressed pixels must all be in the file; run-length packets are walked until they
 * cover every pixel, so a file cut short is an error rather than a black tail. */
static int tga_check(const job *j, const unsigned char *b, int w, int h) {
  if (j->fsize < 18) return too_small(j, w, h, "cannot hold a TGA header");
  unsigned idlen = b[0], cmtype = b[1], type = b[2], cmlen = le16(b + 5), cmbits = b[7];
  unsigned bits = b[16];
  uint64_t at = 18 + (uint64_t)idlen + (cmtype ? (uint64_t)cmlen * ((cmbits + 7) / 8) : 0);
  uint64_t px = (uint64_t)w * (uint64_t)h, psz = (bits + 7) / 8;
  if (psz == 0) return GL_OK;                   /* stb refuses it */
  if (type < 8) {
    if (at + px * psz > j->fsize) return too_small(j, w, h, "cannot hold its pixels");
    return GL_OK;
  }
  uint64_t got = 0;
  while (got < px) {
    if (at >= j->fsize) return too_small(j, w, h, "end inside its run-length packets");
    unsigned hdr = b[at++];
    uint64_t n = (hdr & 0x7f) + 1;
    at += hdr & 0x80 ? psz : n * psz;
    if (at > j->fsize) return too_small(j, w, h, "end inside its run-length packets");
    got += n;
    if (got > px) return too_small(j, w, h, "hold run-length packets running past its last pixel");
  }
  return GL_OK;
}

/* GIF: walk to the first image (the frame stb returns) and count the pixels its LZW codes
 * make -- lengths only, no pixels -- so a frame whose data ends early is an error rather
 * than a frame finished in the background colour. */
static int gif_check(const job *j, const unsigned char *b, int w, int h) {
  size_t n = j->fsize, at = 13;
  if (n < 13) return too_small(j, w, h, "cannot hold a GIF header");
  if (b[10] & 0x80) at += (size_t)3 << ((b[10] & 7) + 1);
  for (;;) {                                   /* extensions up to the image descriptor */
    if (at >= n) return too_small(j, w, h, "end before its first image");
    if (b[at] == 0x2C) break;
    if (b[at] != 0x21) return GL_OK;           /* a trailer or junk: stb says what is wrong */
    at += 2;
    for (;;) {
      if (at >= n) return too_small(j, w, h, "end inside an extension block");
      unsigned len = b[at++];
      if (!len) break;
      at += len;
    }
  }
  if (at + 11 > n) return too_small(j, w, h, "end inside its image descriptor");
  uint64_t need = (uint64_t)le16(b + at + 5) * le16(b + at + 7);
  unsigned flags = b[at + 9];
  at += 10;
  if (flags & 0x80) at += (size_t)3 << ((flags & 7) + 1);
  if (at >= n) return too_small(j, w, h, "end before its image data");
  unsigned mcs = b[at++];
  if (mcs < 1 || mcs > 11) return GL_OK;       /* stb refuses it */
  unsigned short lens[4096];
  unsigned clear = 1u << mcs, next = clear + 2, width = mcs + 1;
  int prev = -1;
  uint64_t made = 0;
  uint32_t bits = 0;
  unsigned nbits = 0, left = 0;                /* bytes left in the current sub-block */
  while (made < need) {
    while (nbits < width) {                    /* refill from the sub-blocks */
      if (!left) {
        if (at >= n || b[at] == 0) return too_small(j, w, h, "end inside its first image's data");
        left = b[at++];
      }
      if (at >= n) return too_small(j, w, h, "end inside its first image's data");
      bits |= (uint32_t)b[at++] << nbits;
      nbits += 8;
      left--;
    }
    unsigned code = bits & ((1u << width) - 1);
    bits >>= width;
    nbits -= width;
    if (code == clear) {
      next = clear + 2;
      width = mcs + 1;
      prev = -1;
      continue;
    }
    if (code == clear + 1) break;              /* end of information */
    unsigned len;
    if (prev < 0) {
      if (code > clear) return GL_OK;          /* stb refuses it */
      len = 1;
    } else {
      unsigned plen = (unsigned)prev < clear ? 1 : lens[prev];
      if (code < clear) len = 1;
      else if (code < next) len = lens[code];
      else if (code == next) len = plen + 1;
      else return GL_OK;                       /* stb refuses it */
      if (next < 4096) {
        lens[next++] = (unsigned short)(plen + 1 > 4096 ? 4096 : plen + 1);
        if (next == 1u << width && width < 12) width++;
      }
    }
    made += len;
    prev = (int)code;
  }
  if (made < need) return too_small(j, w, h, "hold fewer pixels than its first image needs");
  return GL_OK;
}

static const char *stb_reason(void) {
  const char *r = stbi_failure_reason();
  return r ? r : "unknown error";
}

/* header bytes enough for stb's info on BMP (up to a v5 header), TGA and GIF */
#define STB_HEADER_BYTES 4096

static int stb_decode(const job *j, int kind, int want, pixels *out, int *comp) {
  int st;
  /* BMP and TGA hold at most 4 bytes a pixel plus a palette: a bigger file is not one */
  if (j->cap && kind != 'G' && j->cap < SIZE_MAX / 8 &&
      j->fsize > j->cap * 4 + ((size_t)1 << 20))
    return gl_fail(GL_EFORMAT, "%s: %s: file of %zu bytes is larger than any image within the "
                   "cap of %zu pixels", j->op, j->path, j->fsize, j->cap);
  size_t n = j->cap || j->fsize < STB_HEADER_BYTES ? j->fsize : STB_HEADER_BYTES;
  unsigned char *b = slurp(j, n, &st);
  if (!b) return st;
  int w, h;
  if (!stbi_info_from_memory(b, (int)n, &w, &h, comp)) {
    free(b);
    if (kind == 'T')     /* no magic number and nothing recognised it */
      return gl_fail(GL_EFORMAT, "%s: %s: not a PNG, JPEG, BMP, TGA or GIF image (%s)", j->op,
                     j->path, stb_reason());
    return gl_fail(GL_EFORMAT, "%s: %s: file is truncated or damaged (%s)", j->op, j->path,
                   stb_reason());
  }
  out->w = w;
  out->h = h;
  if ((st = cap_check(j, w, h)) || !j->cap) { free(b); return st; }
  if (kind == 'B') st = bmp_check(j, b, w, h);
  else if (kind == 'T') st = tga_check(j, b, w, h);
  else if (kind == 'G') st = gif_check(j, b, w, h);
  if (st) { free(b); return st; }
  int w2, h2, c2;
  int ch = want ? want : (*comp <= 2 ? 1 : 3);
  out->px = stbi_load_from_memory(b, (int)j->fsize, &w2, &h2, &c2, ch);
  free(b);
  if (!out->px)
    return gl_fail(GL_EFORMAT, "%s: %s: file is truncated or damaged (%s)", j->op, j->path,
                   stb_reason());
  if (w2 != w || h2 != h) {
    free(out->px);
    out->px = NULL;
    return gl_fail(GL_EFORMAT, "%s: %s: header says %dx%d, decoder gave %dx%d", j->op, j->path,
                   w, h, w2, h2);
  }
  out->nch = ch;
  out->is16 = 0;
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* the front door: open, sniff the format, decode, convert to planes */

/* Open an image file, or fail with "<op>: <path>: <reason>" (a directory and an empty file
 * are named as such rather than left to a decoder). */
static int open_image(job *j) {
  struct stat sb;
  int fd = gl_open_read(j->path);              /* a FIFO must not block the open */
  j->f = fd < 0 ? NULL : fdopen(fd, "rb");
  if (!j->f) {
    int e = errno;
    if (fd >= 0) close(fd);
    return gl_fail(GL_EIO, "%s: %s: %s", j->op, j->path, strerror(e));
  }
  int st = GL_OK;
  if (fstat(fileno(j->f), &sb) != 0) st = gl_fail(GL_EIO, "%s: %s: %s", j->op, j->path,
                                                  strerror(errno));
  else if (S_ISDIR(sb.st_mode)) st = gl_fail(GL_EIO, "%s: %s: is a directory", j->op, j->path);
  else if (!S_ISREG(sb.st_mode))
    st = gl_fail(GL_EIO, "%s: %s: not a regular file", j->op, j->path);
  else if (sb.st_size == 0) st = gl_fail(GL_EFORMAT, "%s: %s: empty file", j->op, j->path);
  else if ((uint64_t)sb.st_size > (uint64_t)INT_MAX)
    st = gl_fail(GL_EFORMAT, "%s: %s: file of %lld bytes is too large for an image", j->op,
                 j->path, (long long)sb.st_size);
  if (st) {
    fclose(j->f);
    j->f = NULL;
    return st;
  }
  j->fsize = (size_t)sb.st_size;
  return GL_OK;
}

/* 'P' PNG, 'J' JPEG, 'B' BMP, 'G' GIF, 'T' TGA (no magic: anything else stb may accept) */
static int sniff(FILE *f) {
  unsigned char m[8] = {0};
  size_t n = fread(m, 1, sizeof m, f);
  rewind(f);
  if (n >= 8 && !memcmp(m, "\x89PNG\r\n\x1a\n", 8)) return 'P';
  if (n >= 3 && m[0] == 0xFF && m[1] == 0xD8 && m[2] == 0xFF) return 'J';
  if (n >= 2 && m[0] == 'B' && m[1] == 'M') return 'B';
  if (n >= 6 && (!memcmp(m, "GIF87a", 6) || !memcmp(m, "GIF89a", 6))) return 'G';
  return 'T';
}

static int decode(job *j, int want, pixels *px, int *comp) {
  int kind = sniff(j->f);
  if (kind == 'P') return png_decode(j, px, comp);
  if (kind == 'J') return jpg_decode(j, px, comp);
  return stb_decode(j, kind, want, px, comp);
}

int gl_image_info(const char *path, int *w, int *h, int *comp) {
  job j = {"image.info", path, NULL, 0, 0};
  pixels px = {0};
  int st = open_image(&j);
  if (st) return st;
  st = decode(&j, 0, &px, comp);
  fclose(j.f);
  if (st) return st;
  *w = px.w;
  *h = px.h;
  return GL_OK;
}

/* The decoded pixels' channel k (0-based, of nch) at pixel i, raw (0..255 or 0..65535) */
static unsigned raw_at(const pixels *p, size_t i, int k) {
  return p->is16 ? ((const uint16_t *)p->px)[i * (size_t)p->nch + (size_t)k]
                 : ((const unsigned char *)p->px)[i * (size_t)p->nch + (size_t)k];
}

/* (H,W,nch) interleaved -> (want,H,W) planes.  Grey from colour is stb's integer luma
 * (77 R + 150 G + 29 B) >> 8; a missing alpha is opaque; a grey file gives grey in R, G, B. */
static void to_planes(float *o, const pixels *p, int want) {
  size_t npix = (size_t)p->w * (size_t)p->h;
  float lut[256];   /* k/255 rounded once, so a PNG round trip gives back the same floats */
  for (int k = 0; k < 256; k++) lut[k] = (float)k / 255.0f;
  unsigned top = p->is16 ? 65535u : 255u;
  int colour = p->nch >= 3, alpha = p->nch == 2 || p->nch == 4 ? p->nch - 1 : -1;
  for (int c = 0; c < want; c++) {
    float *dst = o + (size_t)c * npix;
    int is_alpha = want == 4 && c == 3;
    for (size_t i = 0; i < npix; i++) {
      unsigned v;
      if (is_alpha) v = alpha >= 0 ? raw_at(p, i, alpha) : top;
      else if (!colour) v = raw_at(p, i, 0);
      else if (want == 1)
        v = (raw_at(p, i, 0) * 77 + raw_at(p, i, 1) * 150 + raw_at(p, i, 2) * 29) >> 8;
      else v = raw_at(p, i, c);
      dst[i] = p->is16 ? (float)v / 65535.0f : lut[v];
    }
  }
}

int gl_image_load(gl_tensor **out, const char *path, int channels, size_t cap) {
  *out = NULL;
  if (channels != 0 && channels != 1 && channels != 3 && channels != 4)
    return gl_fail(GL_EARG, "image.load: %s: channels must be 1, 3 or 4, got %d", path, channels);
  job j = {"image.load", path, NULL, 0, cap ? cap : gl_image_max_pixels()};
  pixels px = {0};
  int comp = 0;
  int st = open_image(&j);
  if (st) return st;
  st = decode(&j, channels, &px, &comp);
  fclose(j.f);
  if (st) return st;
  int want = channels ? channels : (comp <= 2 ? 1 : 3);
  int shape[3] = {want, px.h, px.w};
  st = gl_empty(out, 3, shape);
  if (!st) to_planes((*out)->data, &px, want);
  free(px.px);
  return st;
}
