/* linear_grad.c -- the glimpse engine from C, without Lua: one linear layer, a loss,
 * backward, a gradient read back, an error handled, everything released.
 * docs/api/c.md walks through it.
 *
 *   cc linear_grad.c $(pkg-config --cflags --libs glimpse) -o linear_grad && ./linear_grad
 *   make examples && build/examples/linear_grad          (from the source tree)
 *
 * y = tanh(x W^T + b), loss = mean(y^2); x (2,3), W (2,3), b (2).
 */
#include <glimpse.h>
#include <stdio.h>

/* Check a status: on failure print the engine's message and jump to the cleanup. */
#define TRY(call)                                                              \
  do {                                                                         \
    if ((status = (call)) != GL_OK) {                                          \
      fprintf(stderr, "linear_grad: %s (status %d)\n", gl_last_error(), status); \
      goto done;                                                               \
    }                                                                          \
  } while (0)

int main(void) {
  int status = GL_OK;
  gl_tensor *x = NULL, *w = NULL, *b = NULL, *h = NULL, *y = NULL, *sq = NULL, *loss = NULL;
  gl_tensor *bad = NULL;

  static const float xd[] = {1, 2, 3, 4, 5, 6};
  static const float wd[] = {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, -0.1f};
  TRY(gl_from_data(&x, 2, (int[]){2, 3}, xd));
  TRY(gl_from_data(&w, 2, (int[]){2, 3}, wd));
  TRY(gl_zeros(&b, 1, (int[]){2}));
  /* leaves that want a gradient */
  TRY(gl_requires_grad_(w, 1));
  TRY(gl_requires_grad_(b, 1));

  /* forward: each op hands back one new reference */
  TRY(gl_linear(&h, x, w, b));           /* (2,2) */
  TRY(gl_unary(&y, h, GL_TANH));
  TRY(gl_mul(&sq, y, y));
  TRY(gl_mean(&loss, sq, -1, 0));        /* dim -1: all elements -> a scalar */
  printf("loss %.6f\n", loss->data[0]);

  /* backward from the scalar (seed NULL: d loss / d loss = 1); leaves get .grad */
  TRY(gl_backward(loss, NULL, 0));
  printf("dW");
  for (size_t i = 0; i < w->grad->numel; i++) printf(" %.6f", w->grad->data[i]);
  printf("\ndb %.6f %.6f\n", b->grad->data[0], b->grad->data[1]);

  /* an error: (2,3) @ (2,3) does not fit; the status says what kind, the thread's message
   * says where, and nothing was allocated */
  int st = gl_matmul(&bad, x, w);
  printf("matmul status %d (GL_ESHAPE %d): %s\n", st, GL_ESHAPE, gl_last_error());
  if (st != GL_ESHAPE || bad != NULL) status = GL_ESTATE;

done:
  /* release every reference this program holds (NULL is fine); the graph's references went
   * with backward */
  gl_release(bad);
  gl_release(loss);
  gl_release(sq);
  gl_release(y);
  gl_release(h);
  gl_release(b);
  gl_release(w);
  gl_release(x);
  printf("live bytes after release: %zu\n", gl_bytes_live());
  return status == GL_OK ? 0 : 1;
}
