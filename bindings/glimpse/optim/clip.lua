--- glimpse.optim's gradient clipping (optim/init.lua publishes it: optim.clip_grad_norm ...).
--
--   loss:backward()
--   local total = optim.clip_grad_norm(model:parameters(), 1.0)   -- the norm before clipping
--   opt:step()
--
-- The arithmetic is engine/optim.c (one pass over all the gradients taken as one vector).
local glimpse = require "glimpse"
local check = require "glimpse.check"

local fail = check.fail

local C = {}

-- A tensor or an array of tensors -> array; a helper for the clipping functions.
local function tensor_list(params, fname)
  if glimpse.is_tensor(params) then return {params} end
  if type(params) ~= "table" then
    fail(3, "%s: expected a tensor or an array of tensors, got %s", fname, type(params))
  end
  for i, p in ipairs(params) do
    if not glimpse.is_tensor(p) then
      fail(3, "%s: entry %d is a %s, expected a tensor", fname, i, type(p))
    end
  end
  return params
end

-- the gradients that exist, in order
local function grads_of(params)
  local grads = {}
  for _, p in ipairs(params) do
    local g = p.grad
    if g then grads[#grads + 1] = g end
  end
  return grads
end

local function norm_type_of(v)
  if v == nil then return 2 end
  if v == "inf" or v == "Inf" then return math.huge end
  if type(v) ~= "number" then fail(3, "clip_grad_norm: norm_type must be a number or \"inf\"") end
  return v
end

--- optim.clip_grad_norm(params, max_norm [, norm_type=2 | {norm_type=2,
--- error_if_nonfinite=false}]) -> total norm (a number) of all the gradients taken as one
--- vector, before clipping.  When it exceeds max_norm every gradient is scaled by
--- max_norm / (total + 1e-6).  norm_type: a number > 0, or math.huge / "inf" for the max.
--- params: a tensor or an array of tensors; those without a gradient are skipped.
function C.clip_grad_norm(params, max_norm, norm_type)
  params = tensor_list(params, "clip_grad_norm")
  if type(max_norm) ~= "number" then fail(2, "clip_grad_norm: max_norm must be a number") end
  local err_nonfinite = false
  if type(norm_type) == "table" then
    err_nonfinite = norm_type.error_if_nonfinite or false
    norm_type = norm_type.norm_type
  end
  norm_type = norm_type_of(norm_type)
  local grads = grads_of(params)
  if #grads == 0 then return 0.0 end
  if err_nonfinite then
    local ok, total = pcall(glimpse._grads_norm, grads, norm_type)
    if not ok then fail(2, "%s", total) end
    if total ~= total or total == math.huge then
      fail(2, "clip_grad_norm: the total norm of order %s of the gradients is non-finite, so "
           .. "it cannot be clipped", tostring(norm_type))
    end
  end
  local ok, total = pcall(glimpse._clip_grad_norm, grads, max_norm, norm_type)
  if not ok then fail(2, "%s", total) end
  return total
end
C.clip_grad_norm_ = C.clip_grad_norm

--- optim.grad_norm(params [, norm_type=2]) -> the joint norm of the gradients, no clipping.
function C.grad_norm(params, norm_type)
  params = tensor_list(params, "grad_norm")
  local grads = grads_of(params)
  if #grads == 0 then return 0.0 end
  local ok, total = pcall(glimpse._grads_norm, grads, norm_type_of(norm_type))
  if not ok then fail(2, "%s", total) end
  return total
end

--- optim.clip_grad_value(params, clip_value): clamp every gradient entry into
--- [-clip_value, clip_value].
function C.clip_grad_value(params, clip_value)
  params = tensor_list(params, "clip_grad_value")
  if type(clip_value) ~= "number" then fail(2, "clip_grad_value: clip_value must be a number") end
  local ok, err = pcall(glimpse._clip_grad_value, grads_of(params), clip_value)
  if not ok then fail(2, "%s", err) end
end
C.clip_grad_value_ = C.clip_grad_value

return C
