/* l_image.c -- glimpse.image: load/save/resize/crop/normalize/grid/heatmap/overlay.
 *
 * Thin glue over engine/image.c.  This file reads Lua arguments and option tables, turns
 * 1-based crop corners into 0-based ones, and raises errors that start with the Lua name
 * ("image.crop: bad argument #2 (top): ...").  All pixel work is in the engine.
 */
#include "lglimpse.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* argument helpers: errors name the function, the argument and what was wrong */

static int arg_fail(lua_State *L, const char *fn, int i, const char *name, const char *fmt,
                    ...) {
  va_list ap;
  va_start(ap, fmt);
  const char *msg = lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  return luaL_error(L, "%s: bad argument #%d (%s): %s", fn, i, name, msg);
}

static gl_tensor *check_img(lua_State *L, int i, const char *fn, const char *name) {
  gl_tensor *t = lg_test(L, i);
  if (!t) {
    if (luaL_testudata(L, i, LG_TENSOR)) arg_fail(L, fn, i, name, "tensor was closed");
    arg_fail(L, fn, i, name, "tensor expected, got %s", luaL_typename(L, i));
  }
  return t;
}

/* a tensor from a tensor, number or nested table, owned by the Lua stack (lg_arg's box) */
static gl_tensor *check_tensorish(lua_State *L, int i, const char *fn, const char *name) {
  int ty = lua_type(L, i);
  if (!lg_test(L, i) && ty != LUA_TTABLE && ty != LUA_TNUMBER)
    arg_fail(L, fn, i, name, "tensor or table expected, got %s", luaL_typename(L, i));
  return lg_arg(L, i);
}

static int check_int(lua_State *L, int i, const char *fn, const char *name) {
  int isnum = 0;
  lua_Integer v = lua_tointegerx(L, i, &isnum);
  if (!isnum) {
    if (lua_type(L, i) == LUA_TNUMBER)
      arg_fail(L, fn, i, name, "integer expected, got %f", lua_tonumber(L, i));
    arg_fail(L, fn, i, name, "integer expected, got %s", luaL_typename(L, i));
  }
  if (v < -2147483647 || v > 2147483647) arg_fail(L, fn, i, name, "integer out of range");
  return (int)v;
}

static const char *check_path(lua_State *L, int i, const char *fn) {
  if (lua_type(L, i) != LUA_TSTRING)
    arg_fail(L, fn, i, "path", "string expected, got %s", luaL_typename(L, i));
  return lua_tostring(L, i);
}

static int check_size(lua_State *L, int i, const char *fn, const char *name) {
  int v = check_int(L, i, fn, name);
  if (v < 1) arg_fail(L, fn, i, name, "a size must be >= 1, got %d", v);
  return v;
}

/* options: argument i is nil/absent or a table; each getter leaves the stack as it was */
static void check_opts(lua_State *L, int i, const char *fn) {
  if (!lua_isnoneornil(L, i) && !lua_istable(L, i))
    arg_fail(L, fn, i, "options", "table expected, got %s", luaL_typename(L, i));
}

static int opt_field(lua_State *L, int i, const char *key) {
  if (!lua_istable(L, i)) return 0;
  if (lua_getfield(L, i, key) == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  return 1; /* value on top */
}

static lua_Integer opt_int(lua_State *L, int i, const char *fn, const char *key,
                           lua_Integer def) {
  if (!opt_field(L, i, key)) return def;
  int isnum;
  lua_Integer v = lua_tointegerx(L, -1, &isnum);
  if (!isnum)
    luaL_error(L, "%s: option '%s' must be an integer, got %s", fn, key,
               luaL_tolstring(L, -1, NULL));
  lua_pop(L, 1);
  return v;
}

static double opt_num(lua_State *L, int i, const char *fn, const char *key, double def) {
  if (!opt_field(L, i, key)) return def;
  int isnum;
  lua_Number v = lua_tonumberx(L, -1, &isnum);
  if (!isnum)
    luaL_error(L, "%s: option '%s' must be a number, got %s", fn, key, luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

/* the string stays valid: option tables are arguments, anchored on the stack */
static const char *opt_str(lua_State *L, int i, const char *fn, const char *key,
                           const char *def) {
  if (!opt_field(L, i, key)) return def;
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "%s: option '%s' must be a string, got %s", fn, key, luaL_typename(L, -1));
  const char *s = lua_tostring(L, -1);
  lua_pop(L, 1);
  return s;
}

static int opt_cmap(lua_State *L, int i, const char *fn, const char *def) {
  const char *name = opt_str(L, i, fn, "colormap", def);
  int cm = gl_colormap_by_name(name);
  if (cm < 0)
    luaL_error(L, "%s: unknown colormap '%s' (jet, viridis, hot or grey)", fn, name);
  return cm;
}

static const char *shape_of(lua_State *L, const gl_tensor *t) {
  char b[128];
  return lua_pushstring(L, gl_shape_str(b, sizeof b, t->ndim, t->shape));
}

/* ------------------------------------------------------------------------ */
/* files */

/* load(path, {channels=, max_pixels=}) -> (C,H,W) */
static int l_load(lua_State *L) {
  const char *fn = "image.load";
  const char *path = check_path(L, 1, fn);
  check_opts(L, 2, fn);
  lua_Integer ch = opt_int(L, 2, fn, "channels", 0);
  if (ch != 0 && ch != 1 && ch != 3 && ch != 4)
    luaL_error(L, "%s: %s: option 'channels' must be 1, 3 or 4, got %d", fn, path, (int)ch);
  lua_Integer cap = opt_int(L, 2, fn, "max_pixels", 0);
  if (cap < 0) luaL_error(L, "%s: %s: option 'max_pixels' must be positive", fn, path);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, fn, gl_image_load(box, path, (int)ch, (size_t)cap));
  return 1;
}

/* info(path) -> {width=, height=, channels=} without decoding the pixels */
static int l_info(lua_State *L) {
  const char *path = check_path(L, 1, "image.info");
  int w, h, c;
  LG_TRY(L, "image.info", gl_image_info(path, &w, &h, &c));
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, w);
  lua_setfield(L, -2, "width");
  lua_pushinteger(L, h);
  lua_setfield(L, -2, "height");
  lua_pushinteger(L, c);
  lua_setfield(L, -2, "channels");
  return 1;
}

/* save(path, img, {quality=90, format=}) */
static int l_save(lua_State *L) {
  const char *fn = "image.save";
  const char *path = check_path(L, 1, fn);
  gl_tensor *t = check_img(L, 2, fn, "img");
  check_opts(L, 3, fn);
  lua_Integer q = opt_int(L, 3, fn, "quality", 90);
  if (q < 1 || q > 100) luaL_error(L, "%s: %s: option 'quality' must be 1..100, got %d", fn, path,
                                   (int)(q < -99999 ? -99999 : q > 99999 ? 99999 : q));
  const char *fmt = opt_str(L, 3, fn, "format", NULL);
  if (fmt && !strcmp(fmt, "jpeg")) fmt = "jpg";
  LG_TRY(L, fn, gl_image_save(path, t, fmt, (int)q));
  return 0;
}

static int l_max_pixels(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)gl_image_max_pixels());
  return 1;
}

/* set_max_pixels(n) -> previous cap */
static int l_set_max_pixels(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  if (n < 1) arg_fail(L, "image.set_max_pixels", 1, "n", "the cap must be >= 1, got %d", (int)n);
  lua_pushinteger(L, (lua_Integer)gl_image_set_max_pixels((size_t)n));
  return 1;
}

/* ------------------------------------------------------------------------ */
/* geometry */

/* resize(img, h, w, {filter="auto"|"nearest"|"box"|"bilinear"|"bicubic"|"mitchell"}) */
static int l_resize(lua_State *L) {
  const char *fn = "image.resize";
  gl_tensor *t = check_img(L, 1, fn, "img");
  int h = check_size(L, 2, fn, "h"), w = check_size(L, 3, fn, "w");
  check_opts(L, 4, fn);
  static const char *const names[] = {"auto", "nearest", "box", "bilinear", "bicubic",
                                      "mitchell", NULL};
  static const int codes[] = {GL_RESIZE_AUTO, GL_RESIZE_NEAREST, GL_RESIZE_BOX,
                              GL_RESIZE_BILINEAR, GL_RESIZE_BICUBIC, GL_RESIZE_MITCHELL};
  const char *f = opt_str(L, 4, fn, "filter", "auto");
  int k = 0;
  while (names[k] && strcmp(names[k], f)) k++;
  if (!names[k])
    luaL_error(L, "%s: unknown filter '%s' (auto, nearest, box, bilinear, bicubic, mitchell)",
               fn, f);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, fn, gl_image_resize(box, t, h, w, codes[k]));
  return 1;
}

static void check_image_dims(lua_State *L, const char *fn, const gl_tensor *t) {
  if (t->ndim < 2 || t->ndim > 4)
    arg_fail(L, fn, 1, "img", "shape %s, expected (H,W), (C,H,W) or (B,C,H,W)", shape_of(L, t));
}

/* crop(img, top, left, h, w): 1-based top/left */
static int l_crop(lua_State *L) {
  const char *fn = "image.crop";
  gl_tensor *t = check_img(L, 1, fn, "img");
  check_image_dims(L, fn, t);
  int top = check_int(L, 2, fn, "top"), left = check_int(L, 3, fn, "left");
  int h = check_size(L, 4, fn, "h"), w = check_size(L, 5, fn, "w");
  int H = t->shape[t->ndim - 2], W = t->shape[t->ndim - 1];
  if (top < 1 || top > H) arg_fail(L, fn, 2, "top", "row %d outside 1..%d of img %s", top, H,
                                   shape_of(L, t));
  if (left < 1 || left > W) arg_fail(L, fn, 3, "left", "column %d outside 1..%d of img %s", left,
                                     W, shape_of(L, t));
  if (h > H - top + 1 || w > W - left + 1)
    luaL_error(L, "%s: a %dx%d box at (%d,%d) runs past img %s (rows %d..%d, cols %d..%d)", fn,
               h, w, top, left, shape_of(L, t), top, top + h - 1, left, left + w - 1);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, fn, gl_image_crop(box, t, top - 1, left - 1, h, w));
  return 1;
}

/* center_crop(img, h, w): w defaults to h */
static int l_center_crop(lua_State *L) {
  const char *fn = "image.center_crop";
  gl_tensor *t = check_img(L, 1, fn, "img");
  check_image_dims(L, fn, t);
  int h = check_size(L, 2, fn, "h");
  int w = lua_isnoneornil(L, 3) ? h : check_size(L, 3, fn, "w");
  int H = t->shape[t->ndim - 2], W = t->shape[t->ndim - 1];
  if (h > H || w > W)
    luaL_error(L, "%s: a %dx%d crop is larger than img %s", fn, h, w, shape_of(L, t));
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, fn, gl_image_crop(box, t, (H - h) / 2, (W - w) / 2, h, w));
  return 1;
}

static int l_hflip(lua_State *L) {
  gl_tensor *t = check_img(L, 1, "image.hflip", "img");
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "image.hflip", gl_image_flip(box, t, 1));
  return 1;
}

static int l_vflip(lua_State *L) {
  gl_tensor *t = check_img(L, 1, "image.vflip", "img");
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "image.vflip", gl_image_flip(box, t, 0));
  return 1;
}

/* ------------------------------------------------------------------------ */
/* colour */

static int l_to_grey(lua_State *L) {
  gl_tensor *t = check_img(L, 1, "image.to_grey", "img");
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "image.to_grey", gl_image_to_grey(box, t));
  return 1;
}

/* normalize(img, mean, std): numbers, tables or tensors with one entry or one per channel */
static int l_normalize(lua_State *L) {
  const char *fn = "image.normalize";
  gl_tensor *t = check_img(L, 1, fn, "img");
  gl_tensor *mean = check_tensorish(L, 2, fn, "mean");
  gl_tensor *std = check_tensorish(L, 3, fn, "std");
  if (mean->numel != std->numel)
    luaL_error(L, "%s: mean has %d entries, std has %d", fn, (int)mean->numel, (int)std->numel);
  if (mean->numel < 1) arg_fail(L, fn, 2, "mean", "no entries");
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, fn, gl_image_normalize(box, t, (int)mean->numel, mean->data, std->data));
  return 1;
}

/* ------------------------------------------------------------------------ */
/* pictures of many images and of matrices */

/* grid(images, {ncol=8, padding=2, pad_value=0}): images is a list of (C,H,W) / (H,W) or
 * one (B,C,H,W) tensor */
static int l_grid(lua_State *L) {
  const char *fn = "image.grid";
  check_opts(L, 2, fn);
  lua_Integer ncol = opt_int(L, 2, fn, "ncol", 0);
  lua_Integer pad = opt_int(L, 2, fn, "padding", 2);
  if (pad < 0 || pad > 65535) luaL_error(L, "%s: option 'padding' must be 0..65535", fn);
  if (ncol < 0 || ncol > 1000000) luaL_error(L, "%s: option 'ncol' must be 1..1000000", fn);
  float pad_value = (float)opt_num(L, 2, fn, "pad_value", 0.0);
  gl_tensor *one = lg_test(L, 1);
  gl_tensor **list;
  int n;
  if (one) {
    n = 1;
    list = &one;
  } else {
    if (!lua_istable(L, 1))
      arg_fail(L, fn, 1, "images", "a list of tensors or a (B,C,H,W) tensor expected, got %s",
               luaL_typename(L, 1));
    lua_Integer len = luaL_len(L, 1);
    if (len < 1) arg_fail(L, fn, 1, "images", "the list is empty");
    if (len > 1000000) arg_fail(L, fn, 1, "images", "too many images (%d)", (int)len);
    n = (int)len;
    list = lua_newuserdatauv(L, sizeof(gl_tensor *) * (size_t)n, 0); /* freed by the GC */
    for (int k = 0; k < n; k++) {
      lua_geti(L, 1, k + 1);
      list[k] = lg_test(L, -1);
      if (!list[k])
        arg_fail(L, fn, 1, "images", "entry %d is a %s, not a tensor", k + 1,
                 luaL_typename(L, -1));
      lua_pop(L, 1); /* the list table keeps it alive */
    }
  }
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, fn, gl_image_grid(box, n, list, (int)ncol, (int)pad, pad_value));
  return 1;
}

/* heatmap(m (H,W), {colormap="viridis", scale=1, vmin=, vmax=}) -> (3, H*scale, W*scale) */
static int l_heatmap(lua_State *L) {
  const char *fn = "image.heatmap";
  gl_tensor *m = check_tensorish(L, 1, fn, "m");
  if (m->ndim != 2)
    arg_fail(L, fn, 1, "m", "shape %s, expected a matrix (H,W)", shape_of(L, m));
  check_opts(L, 2, fn);
  int cm = opt_cmap(L, 2, fn, "viridis");
  lua_Integer scale = opt_int(L, 2, fn, "scale", 1);
  if (scale < 1 || scale > 65535)
    luaL_error(L, "%s: option 'scale' must be 1..65535, got %d", fn, (int)scale);
  float vmin = (float)opt_num(L, 2, fn, "vmin", NAN), vmax = (float)opt_num(L, 2, fn, "vmax", NAN);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, fn, gl_image_heatmap(box, m, cm, (int)scale, vmin, vmax));
  return 1;
}

/* the (gh,gw) grid a heat argument stands for: (h,w), (1,h,w), or (L) with opts.grid or a
 * square L */
static void heat_grid(lua_State *L, const char *fn, const gl_tensor *heat, int opts, int *gh,
                      int *gw) {
  if (opt_field(L, opts, "grid")) {
    if (!lua_istable(L, -1) || luaL_len(L, -1) != 2)
      luaL_error(L, "%s: option 'grid' must be a table {h, w}", fn);
    lua_geti(L, -1, 1);
    lua_geti(L, -2, 2);
    int ok1, ok2;
    lua_Integer h = lua_tointegerx(L, -2, &ok1), w = lua_tointegerx(L, -1, &ok2);
    if (!ok1 || !ok2 || h < 1 || w < 1 || h > 2147483647 || w > 2147483647)
      luaL_error(L, "%s: option 'grid' must hold two positive integers", fn);
    lua_pop(L, 3);
    if ((size_t)h * (size_t)w != heat->numel)
      luaL_error(L, "%s: heat %s has %d entries, grid {%d, %d} needs %d", fn, shape_of(L, heat),
                 (int)heat->numel, (int)h, (int)w, (int)(h * w));
    *gh = (int)h;
    *gw = (int)w;
    return;
  }
  if (heat->ndim == 2 || (heat->ndim == 3 && heat->shape[0] == 1)) {
    *gh = heat->shape[heat->ndim - 2];
    *gw = heat->shape[heat->ndim - 1];
    return;
  }
  if (heat->ndim == 1) {
    int n = heat->shape[0], r = (int)floor(sqrt((double)n) + 0.5);
    if (n < 1 || r * r != n)
      arg_fail(L, fn, 2, "heat", "a vector of %d entries is not a square grid: pass "
                                  "{grid={h, w}}", n);
    *gh = *gw = r;
    return;
  }
  arg_fail(L, fn, 2, "heat", "shape %s, expected (h,w), (1,h,w) or (L) with {grid={h,w}}",
           shape_of(L, heat));
}

/* overlay(img, heat, {alpha=0.5, colormap="jet", upsample="bilinear", grid={h,w}}) -> (3,H,W) */
static int l_overlay(lua_State *L) {
  const char *fn = "image.overlay";
  gl_tensor *img = check_img(L, 1, fn, "img");
  check_opts(L, 3, fn);
  gl_tensor *heat = check_tensorish(L, 2, fn, "heat");
  int gh = 0, gw = 0;
  heat_grid(L, fn, heat, 3, &gh, &gw);
  double alpha = opt_num(L, 3, fn, "alpha", 0.5);
  if (!(alpha >= 0.0 && alpha <= 1.0))
    luaL_error(L, "%s: option 'alpha' must be in [0,1], got %f", fn, alpha);
  int cm = opt_cmap(L, 3, fn, "jet");
  const char *up = opt_str(L, 3, fn, "upsample", "bilinear");
  int mode = !strcmp(up, "bilinear") ? GL_UPSAMPLE_BILINEAR
             : !strcmp(up, "bicubic") ? GL_UPSAMPLE_BICUBIC
             : !strcmp(up, "nearest") ? GL_UPSAMPLE_NEAREST : -1;
  if (mode < 0)
    luaL_error(L, "%s: option 'upsample' must be bilinear, bicubic or nearest, got '%s'", fn, up);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, fn, gl_image_overlay(box, img, heat, gh, gw, (float)alpha, cm, mode));
  return 1;
}

/* colormap(name, x) -> r, g, b : one colour, for legends */
static int l_colormap(lua_State *L) {
  if (lua_type(L, 1) != LUA_TSTRING)
    arg_fail(L, "image.colormap", 1, "name", "string expected, got %s", luaL_typename(L, 1));
  const char *name = lua_tostring(L, 1);
  int cm = gl_colormap_by_name(name);
  if (cm < 0) luaL_error(L, "image.colormap: unknown colormap '%s' (jet, viridis, hot or grey)",
                         name);
  float rgb[3];
  if (lua_type(L, 2) != LUA_TNUMBER)
    arg_fail(L, "image.colormap", 2, "x", "number expected, got %s", luaL_typename(L, 2));
  gl_colormap_rgb(cm, (float)lua_tonumber(L, 2), rgb);
  for (int c = 0; c < 3; c++) lua_pushnumber(L, rgb[c]);
  return 3;
}

/* ------------------------------------------------------------------------ */

static const luaL_Reg image_fns[] = {
    {"load", l_load},
    {"info", l_info},
    {"save", l_save},
    {"max_pixels", l_max_pixels},
    {"set_max_pixels", l_set_max_pixels},
    {"resize", l_resize},
    {"crop", l_crop},
    {"center_crop", l_center_crop},
    {"hflip", l_hflip},
    {"vflip", l_vflip},
    {"to_grey", l_to_grey},
    {"to_gray", l_to_grey},
    {"normalize", l_normalize},
    {"grid", l_grid},
    {"heatmap", l_heatmap},
    {"overlay", l_overlay},
    {"colormap", l_colormap},
    {NULL, NULL}};

void lg_open_image(lua_State *L, int module_idx, int methods_idx) {
  (void)methods_idx;
  luaL_newlib(L, image_fns);
  lua_setfield(L, module_idx, "image");
}
