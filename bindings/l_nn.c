/* l_nn.c -- bindings of the nn family (to be filled in). */
#include "lglimpse.h"

void lg_open_nn(lua_State *L, int module_idx, int methods_idx) {
  (void)L;
  (void)module_idx;
  (void)methods_idx;
}
