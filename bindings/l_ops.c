/* l_ops.c -- placeholder */
#include "lglimpse.h"
void lg_open_ops(lua_State *L, int module_idx, int methods_idx) { (void)L; (void)module_idx; (void)methods_idx; }
