--- glimpse.attention.regularisers -- penalties on where attention went over a sequence: Show,
-- Attend and Tell's doubly stochastic penalty (Xu et al. 2015, eq. 14) and coverage (See et
-- al. 2017).  alphas: a (B,T,L) tensor or a list of T (B,L) alignments.
--
--   local loss = nll + attention.doubly_stochastic(alphas, {mask = src_mask, weight = 1})
local glimpse = require "glimpse"
local check = require "glimpse.check"
local args = require "glimpse.attention.args"

local named, as_tensor = args.named, args.as_tensor

local M = {}

local function stack_alphas(alphas, fname, opts)
  if opts ~= nil and type(opts) ~= "table" then
    check.fail(3, "%s: opts must be a table or nil, got %s", fname, type(opts))
  end
  if glimpse.is_tensor(alphas) and alphas:dim() == 3 then return alphas end
  if type(alphas) ~= "table" or glimpse.is_tensor(alphas) or #alphas == 0 then
    check.fail(3, "%s: alphas must be a (B,T,L) tensor or a non-empty list of (B,L) tensors, " ..
               "got %s", fname, glimpse.is_tensor(alphas) and "shape " .. check.shape(alphas)
               or type(alphas))
  end
  return named(fname, glimpse.stack, alphas, 2)   -- list of T (B,L) -> (B,T,L)
end

--- attention.doubly_stochastic(alphas, opts) -> scalar
-- Xu et al.'s penalty sum_i (target - sum_t alpha_ti)^2, averaged over the batch.
-- alphas: (B,T,L) or a list of T (B,L).  opts.mask (B,L): source positions that count;
-- opts.tgt_mask (B,T): target steps that count; opts.target (default 1); opts.weight
-- (lambda, default 1).
function M.doubly_stochastic(alphas, opts)
  opts = opts or {}
  local a = stack_alphas(alphas, "attention.doubly_stochastic", opts)
  local B, T = a.shape[1], a.shape[2]
  local tm = as_tensor(opts.tgt_mask)
  if tm then a = a * tm:reshape(B, T, 1) end
  local d = (a:sum(2) - (opts.target or 1))   -- (B,L)
  d = d * d
  local m = as_tensor(opts.mask)
  if m then d = d * m end
  return d:sum() * ((opts.weight or 1) / B)
end

--- attention.coverage(alphas) -> (B,T,L): c_t = sum_{t' < t} alpha_t' (zeros at t = 1)
function M.coverage(alphas)
  local a = stack_alphas(alphas, "attention.coverage", nil)
  local B, T, L = a.shape[1], a.shape[2], a.shape[3]
  local covs, c = {}, glimpse.zeros(B, L)
  for t = 1, T do
    covs[t] = c
    c = c + a:select(2, t)
  end
  return glimpse.stack(covs, 2)
end

--- attention.coverage_penalty(alphas, opts) -> scalar
-- See et al. 2017: sum_t sum_l min(alpha_tl, c_tl) with c the coverage, averaged over the
-- batch; opts.tgt_mask (B,T) drops padded steps, opts.weight scales it.
function M.coverage_penalty(alphas, opts)
  opts = opts or {}
  local a = stack_alphas(alphas, "attention.coverage_penalty", opts)
  local B, T = a.shape[1], a.shape[2]
  local tm = as_tensor(opts.tgt_mask)
  if tm then a = a * tm:reshape(B, T, 1) end
  return a:minimum(M.coverage(a)):sum() * ((opts.weight or 1) / B)
end

return M
