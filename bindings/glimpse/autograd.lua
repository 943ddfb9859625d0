--- glimpse.autograd -- gradient checking by finite differences.
--
-- gradcheck(fn, inputs, opts) compares the gradients backward() computes with central
-- differences (f(x + eps) - f(x - eps)) / 2 eps, element by element.  The engine is float32,
-- so the differences are taken with a fairly large eps and compared with a tolerance that
-- mixes absolute and relative error.  A function returning a non-scalar is reduced with a
-- fixed random projection so every output element takes part.
local glimpse = require "glimpse"

local M = {}

local DEFAULTS = {eps = 1e-2, atol = 1e-2, rtol = 2e-2, max_elements = 400}

local function scalarize(out, proj)
  if not glimpse.is_tensor(out) then
    error("gradcheck: the function must return a tensor, got " .. type(out), 3)
  end
  if out:numel() == 1 then return out:sum() end
  return (out * proj):sum()
end

--- Check the gradients of fn with respect to each input that requires grad.
-- fn(inputs...) -> tensor.  inputs: a list of tensors (those with requires_grad are checked).
-- opts: eps, atol, rtol, max_elements (per input; a spread-out subset is checked beyond it).
-- Returns true, or raises an error naming the input, element, analytic and numeric values.
function M.gradcheck(fn, inputs, opts)
  if type(fn) ~= "function" then error("gradcheck: argument #1 must be a function", 2) end
  if type(inputs) ~= "table" then error("gradcheck: argument #2 must be a list of tensors", 2) end
  opts = opts or {}
  local eps = opts.eps or DEFAULTS.eps
  local atol, rtol = opts.atol or DEFAULTS.atol, opts.rtol or DEFAULTS.rtol
  local maxn = opts.max_elements or DEFAULTS.max_elements
  local raise = opts.raise ~= false

  -- a fixed projection for non-scalar outputs, drawn without touching the global stream
  local s1, s2 = glimpse.rng_state()
  glimpse.manual_seed(12345)
  local out0 = glimpse.no_grad(function() return fn(table.unpack(inputs)) end)
  local proj = glimpse.randn(table.unpack(out0.shape))
  glimpse.set_rng_state(s1, s2)

  for _, x in ipairs(inputs) do
    if glimpse.is_tensor(x) and x:is_leaf() then x.grad = nil end
  end
  local loss = scalarize(fn(table.unpack(inputs)), proj)
  loss:backward()

  local function f()
    return glimpse.no_grad(function() return scalarize(fn(table.unpack(inputs)), proj):item() end)
  end

  for k, x in ipairs(inputs) do
    if glimpse.is_tensor(x) and x.requires_grad_flag then
      local g = x.grad
      local n = x:numel()
      local flat = x:reshape(n)
      local gflat = g and g:reshape(n):totable() or {}
      local step = math.max(1, n // maxn)
      for i = 1, n, step do
        local orig = glimpse.no_grad(function() return flat[i]:item() end)
        glimpse.no_grad(function() flat[i] = orig + eps end)
        local fp = f()
        glimpse.no_grad(function() flat[i] = orig - eps end)
        local fm = f()
        glimpse.no_grad(function() flat[i] = orig end)
        local numeric = (fp - fm) / (2 * eps)
        local analytic = gflat[i] or 0
        if math.abs(numeric - analytic) > atol + rtol * math.abs(numeric) then
          local msg = string.format("gradcheck: input %d element %d: analytic %.6g, numeric %.6g",
                                    k, i, analytic, numeric)
          if raise then error(msg, 2) end
          return false, msg
        end
      end
    end
  end
  return true
end

return M
