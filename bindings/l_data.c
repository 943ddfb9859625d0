/* l_data.c -- bindings of the data family (to be filled in). */
#include "lglimpse.h"

void lg_open_data(lua_State *L, int module_idx, int methods_idx) {
  (void)L;
  (void)module_idx;
  (void)methods_idx;
}
