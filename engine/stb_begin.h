/* stb_begin.h -- included right before the stb headers a file compiles (image.c: write and
 * resize; image_load.c: the BMP/TGA/GIF decoders); `#pragma GCC diagnostic pop` after them.
 * stb is written for many compilers and is not -Wextra clean; its warnings are not ours.
 * No include guard: each file that compiles stb includes it once. */
#if defined(__GNUC__)
/* the static stb functions glimpse does not call are reported at the end of the file, so
 * this one stays off outside the push/pop */
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wcast-qual"
#endif
