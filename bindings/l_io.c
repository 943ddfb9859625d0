/* l_io.c -- bindings of the io family (to be filled in). */
#include "lglimpse.h"

void lg_open_io(lua_State *L, int module_idx, int methods_idx) {
  (void)L;
  (void)module_idx;
  (void)methods_idx;
}
