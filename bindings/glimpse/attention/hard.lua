--- glimpse.attention.hard -- hard attention (Xu et al. 2015, sec. 4.1): sample one location,
-- read its annotation, and train through REINFORCE (a moving-average or leave-one-out
-- baseline, an entropy bonus) or the straight-through Gumbel-softmax.
--
--   local ctx, idx, logp, H = attention.sample(alpha, values)
--   local loss = attention.reinforce_loss(reward, logp, {baseline = b, entropy = H})
local glimpse = require "glimpse"
local check = require "glimpse.check"
local args = require "glimpse.attention.args"

local check_tensor, check_opts = args.check_tensor, args.check_opts
local LOG_EPS = args.LOG_EPS

local M = {}

--- attention.entropy(alpha (B,L)) -> H (B) = -sum_l alpha_l log alpha_l (differentiable)
function M.entropy(alpha)
  check_tensor(alpha, "alpha (B,L)", 2, 2, "attention.entropy")
  return -(alpha * (alpha + LOG_EPS):log()):sum(2)
end

--- attention.sample(alpha (B,L), values (B,L,Dv), opts) -> ctx (B,Dv), idx (B,1), logp (B), H (B)
-- Draws s_b ~ Multinoulli(alpha_b) (opts.greedy: the argmax) and returns the sampled
-- annotation values_(b,s_b), the 1-based positions, log alpha_(b,s_b) (differentiable: the
-- REINFORCE term's d log p(s)) and the entropy of alpha (for the entropy bonus).
function M.sample(alpha, values, opts)
  check_tensor(alpha, "alpha", 2, 2, "attention.sample")
  check_tensor(values, "values (B,L,Dv)", 3, 2, "attention.sample")
  check_opts(opts, "attention.sample", 2)
  local B = alpha.shape[1]
  local idx = glimpse.no_grad(function()
    local a = alpha:detach()
    if opts and opts.greedy then return a:argmax(2):reshape(B, 1) end
    return a:multinomial(1)
  end)
  local logp = (alpha:gather(2, idx) + LOG_EPS):log():reshape(B)
  return M.read(values, idx), idx, logp, M.entropy(alpha)
end

--- attention.read(values (B,L,Dv), idx (B,1)) -> ctx (B,Dv): the annotation values_(b,idx_b)
-- of each row (1-based positions); differentiable in values.
function M.read(values, idx)
  check_tensor(values, "values (B,L,Dv)", 3, 2, "attention.read")
  check_tensor(idx, "idx (B,1)", 2, 2, "attention.read")
  local B, Dv = values.shape[1], values.shape[3]
  if idx.shape[1] ~= B or idx.shape[2] ~= 1 then
    check.fail(2, "attention.read: idx %s must be (B,1) with B = %d (values %s)",
               check.shape(idx), B, check.shape(values))
  end
  return values:gather(2, idx:reshape(B, 1, 1):expand(B, 1, Dv)):reshape(B, Dv)
end

--- attention.region_argmax(alpha (B,L), {grid = {h, w}, size = k, extra = 0}) -> idx (B,1)
-- Hard attention's test-time location read as the mode of the map smoothed over a region:
-- the cell at the centre of the k x k window (k odd, default 3) that holds the most
-- attention, windows clipped at the grid's edge.  An object covers several cells of a
-- grid, so its probability is spread over them; the single likeliest cell can belong to a
-- smaller, more peaked region, while the window finds where most of the mass lies.  grid
-- gives the (h, w) layout of the L positions, row-major (default {1, L}: a sequence, and
-- the window is k positions long).  k = 1 is the argmax.  extra = n: the last n of the L
-- positions are not on the grid (a whole-image cell, a sentinel); each competes with its own
-- weight against the windows' mass (the sum over the window), and the first L - n are the grid.
function M.region_argmax(alpha, opts)
  local fname = "attention.region_argmax"
  check_tensor(alpha, "alpha (B,L)", 2, 2, fname)
  check_opts(opts, fname, 2)
  local B, n = alpha.shape[1], alpha.shape[2]
  local extra = opts and opts.extra or 0
  if math.type(extra) ~= "integer" or extra < 0 or extra >= n then
    check.fail(2, "%s: extra must be an integer in [0, %d) (alpha %s), got %s", fname, n,
               check.shape(alpha), tostring(extra))
  end
  local L = n - extra
  local grid = opts and opts.grid or {1, L}
  if type(grid) ~= "table" or math.type(grid[1]) ~= "integer" or math.type(grid[2]) ~= "integer"
     or grid[1] * grid[2] ~= L then
    check.fail(2, "%s: grid must be {h, w} with h * w = L = %d (alpha %s%s), got %s", fname, L,
               check.shape(alpha), extra > 0 and string.format(", %d extra", extra) or "",
               type(grid) == "table" and
               "{" .. tostring(grid[1]) .. "," .. tostring(grid[2]) .. "}" or tostring(grid))
  end
  local k = opts and opts.size or 3
  if math.type(k) ~= "integer" or k < 1 or k % 2 == 0 then
    check.fail(2, "%s: size must be a positive odd integer, got %s", fname, tostring(k))
  end
  return glimpse.no_grad(function()
    local a = alpha:detach()
    local cells = extra > 0 and a:narrow(2, 1, L) or a
    if k > 1 then   -- the window's mass (its mean times k^2, zeros outside the grid)
      cells = glimpse.avg_pool2d(cells:reshape(B, 1, grid[1], grid[2]), k, 1, k // 2):reshape(B, L)
      if extra > 0 then cells = cells * (k * k) end
    end
    if extra > 0 then cells = glimpse.cat({cells, a:narrow(2, L + 1, extra)}, 2) end
    return cells:argmax(2):reshape(B, 1)
  end)
end

--- attention.gumbel_sample(alpha (B,L), values (B,L,Dv), tau) -> ctx (B,Dv), idx (B,1)
-- Straight-through Gumbel-softmax (Jang et al. 2017; Maddison et al. 2017): the forward
-- pass reads one annotation, s_b = argmax_l (log alpha_bl + g_bl) with g ~ Gumbel(0,1) (a
-- draw from Multinoulli(alpha_b)); the backward pass differentiates the relaxed weights
-- y = softmax((log alpha + g) / tau) in its place, so no REINFORCE term is needed.
function M.gumbel_sample(alpha, values, tau)
  local fname = "attention.gumbel_sample"
  check_tensor(alpha, "alpha", 2, 2, fname)
  check_tensor(values, "values (B,L,Dv)", 3, 2, fname)
  local B, L, Dv = alpha.shape[1], alpha.shape[2], values.shape[3]
  if values.shape[1] ~= B or values.shape[2] ~= L then
    check.fail(2, "%s: alpha %s and values %s must agree on B and L", fname, check.shape(alpha),
               check.shape(values))
  end
  if tau ~= nil and (type(tau) ~= "number" or not (tau > 0)) then
    check.fail(2, "%s: tau must be a positive number, got %s", fname, tostring(tau))
  end
  local g = -(-(glimpse.rand(B, L) + LOG_EPS):log() + LOG_EPS):log()
  local y = glimpse.softmax(((alpha + LOG_EPS):log() + g) / (tau or 1), 2)
  local idx = y:detach():argmax(2):reshape(B, 1)
  local onehot = glimpse.zeros(B, L):scatter_add(2, idx, glimpse.ones(B, 1))
  local w = onehot + y - y:detach()                    -- value: one-hot; gradient: y's
  return w:reshape(B, 1, L):matmul(values):reshape(B, Dv), idx
end

-- ---------------------------------------------------------------------------------------
-- REINFORCE

local Baseline = {}
Baseline.__index = Baseline

--- attention.baseline(decay) -> a moving-average baseline b <- decay b + (1 - decay) r.
-- b.value is nil until the first update, which sets it to the first mean reward.
function M.baseline(decay)
  decay = decay or 0.9
  if type(decay) ~= "number" or not (decay >= 0 and decay < 1) then
    error("attention.baseline: decay must be in [0,1)", 2)
  end
  return setmetatable({decay = decay, value = nil}, Baseline)
end

--- b:update(r) with r a number (the mean reward of a batch); returns the new value.
function Baseline:update(r)
  if self.value == nil then self.value = r
  else self.value = self.decay * self.value + (1 - self.decay) * r end
  return self.value
end

--- attention.reinforce_loss(reward (B), logp (B), opts) -> surrogate loss (scalar), info
-- The REINFORCE surrogate whose gradient is the score-function estimate of
-- -d E[reward] / d theta:
--   loss = -reward_weight * mean_b((r_b - b) logp_b) - entropy_weight * mean_b(H_b)
-- reward is treated as a constant (detached); logp is the summed log-probability of the
-- sampled positions (attention.sample's logp, summed over steps).  opts:
--   baseline        an attention.baseline (updated with mean(r) after use), a number, a
--                   tensor (B) of per-sample baselines (e.g. leave-one-out), or nil (0)
--   entropy (B)     entropies to reward (an entropy bonus), with entropy_weight (default 0)
--   reward_weight   lambda_r (default 1)
-- For Show, Attend and Tell: reward = log p(y | s, a) per sequence (i.e. -nll:detach()), and
-- the total loss is mean(nll) + this surrogate.  info = {baseline = b used, advantage}.
function M.reinforce_loss(reward, logp, opts)
  opts = check_opts(opts, "attention.reinforce_loss", 2) or {}
  check_tensor(reward, "reward", nil, 2, "attention.reinforce_loss")
  check_tensor(logp, "logp", nil, 2, "attention.reinforce_loss")
  if reward:numel() ~= logp:numel() then
    check.fail(2, "attention.reinforce_loss: reward %s and logp %s need the same number of " ..
               "elements", check.shape(reward), check.shape(logp))
  end
  local r = reward:detach():reshape(logp:numel())
  local bl = opts.baseline
  local b = 0
  if type(bl) == "number" then b = bl
  elseif glimpse.is_tensor(bl) then b = bl:detach():reshape(logp:numel())
  elseif type(bl) == "table" then b = bl.value or r:mean():item() end
  local adv = r - b
  local loss = (adv * logp:reshape(logp:numel())):mean() * -(opts.reward_weight or 1)
  if opts.entropy and (opts.entropy_weight or 0) ~= 0 then
    loss = loss - opts.entropy:mean() * opts.entropy_weight
  end
  if type(bl) == "table" then bl:update(r:mean():item()) end
  return loss, {baseline = glimpse.is_tensor(b) and b:mean():item() or b, advantage = adv}
end

--- attention.leave_one_out(reward (B,K)) -> baseline (B,K): for sample k of row b the mean
-- reward of the row's other K-1 samples (K >= 2), the multi-sample baseline of VIMCO (Mnih
-- and Rezende 2016) and of REINFORCE with K samples (Kool et al. 2019): it depends on the
-- input but not on the sample it is compared with, so the estimate stays unbiased.
function M.leave_one_out(reward)
  check_tensor(reward, "reward (B,K)", 2, 2, "attention.leave_one_out")
  local K = reward.shape[2]
  if K < 2 then error("attention.leave_one_out: needs K >= 2 samples per row, got " .. K, 2) end
  local r = reward:detach()
  return (r:sum(2, true) - r) / (K - 1)
end

return M
