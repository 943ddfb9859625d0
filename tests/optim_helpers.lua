-- tests/optim_helpers.lua -- what test_optim.lua and test_optim_sched.lua share: flat
-- lists of tensors, parameters and gradients from Lua lists, assert_close's per-element
-- tolerance.
local glimpse = require "glimpse"

local M = {}

--- M.flat(t) -> t's values as one flat Lua list
function M.flat(t)
  return t:reshape(-1):totable()
end

--- M.param(vals) -> a leaf tensor of vals that requires grad
function M.param(vals)
  return glimpse.tensor(vals):requires_grad()
end

--- M.within(tol) -> assert_close's options for lists: |a_i - b_i| <= tol (|b_i| + 1) for every
--- entry (a number tol compares whole tensors: max |a - b| <= tol * max |b|)
function M.within(tol) return {rtol = tol, atol = tol, per_element = true} end

--- M.set_grad(p, vals): p.grad = a tensor of vals
function M.set_grad(p, vals)
  p.grad = glimpse.tensor(vals)
end

return M
