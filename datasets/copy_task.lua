--- datasets/copy_task.lua -- the copy task of Neural Turing Machines (Graves et al. 2014): see
-- a sequence of random bit vectors, then a delimiter, then write the sequence back.
--
-- Layout of one example of length T (bits = 8 by default, channels C = bits + 1):
--   input  x (S, C), S = 2T + 1:
--     steps 1..T        x[t][1..bits] = the random bits, x[t][C] = 0
--     step  T+1         the delimiter: x[t][C] = 1, bits 0
--     steps T+2..2T+1   all 0 (the model writes the copy here)
--   target y (S, bits): y[T+1+t] = x[t][1..bits] for t = 1..T, 0 elsewhere
--   output_mask (S):    1 on steps T+2..2T+1 (where the loss counts), 0 elsewhere
-- With start_marker = true there is one more channel (C = bits + 2) and one more step in
-- front: step 1 has x[1][C] = 1 (a start flag), and everything above moves one step later
-- (S = 2T + 2; the delimiter stays in channel bits + 1).
-- A batch pads to the longest example: S = 2*Tmax + 1 (+1); input_mask (B,S) marks the real
-- steps, output_mask (B,S) the steps to copy on.
--
--   local copy = require "datasets.copy_task"
--   local rng = require("glimpse.data.rng").new(1)
--   local b = copy.batch(32, {min_len = 1, max_len = 20, rng = rng})   -- a fresh batch
--   -- b.inputs (32,S,9), b.targets (32,S,8), b.output_mask (32,S), b.input_mask (32,S)
local glimpse = require "glimpse"
local Rng = require "glimpse.data.rng"

local M = {}

local function check(opts)
  opts = opts or {}
  local o = {min_len = opts.min_len or 1, max_len = opts.max_len or 20, bits = opts.bits or 8,
             start_marker = opts.start_marker and true or false}
  if math.type(o.min_len) ~= "integer" or o.min_len < 1 or math.type(o.max_len) ~= "integer"
     or o.max_len < o.min_len then
    error(string.format("copy_task: bad length range %s..%s", tostring(o.min_len),
                        tostring(o.max_len)), 3)
  end
  if math.type(o.bits) ~= "integer" or o.bits < 1 then error("copy_task: bits must be a positive integer", 3) end
  return o
end

--- copy.sequence(rng, T, bits) -> list of T lists of `bits` 0/1 numbers.
function M.sequence(rng, T, bits)
  local s = {}
  for t = 1, T do
    local v = {}
    for k = 1, bits do v[k] = rng:u32() >> 31 end
    s[t] = v
  end
  return s
end

--- copy.layout(seqs, {bits=8, start_marker=false}) -> batch table for a list of sequences:
--- inputs (B,S,C), targets (B,S,bits), input_mask (B,S), output_mask (B,S), lengths {B},
--- and steps S, channels C (see the layout at the top of this file).
function M.layout(seqs, opts)
  local o = check(opts)
  local bits, sm = o.bits, o.start_marker and 1 or 0
  local C = bits + 1 + sm
  local Tmax = 0
  for _, s in ipairs(seqs) do Tmax = math.max(Tmax, #s) end
  local S = 2 * Tmax + 1 + sm
  local X, Y, IM, OM, L = {}, {}, {}, {}, {}
  for b, s in ipairs(seqs) do
    local T = #s
    local x, y, im, om = {}, {}, {}, {}
    for t = 1, S do
      local xr, yr = {}, {}
      for c = 1, C do xr[c] = 0 end
      for c = 1, bits do yr[c] = 0 end
      x[t], y[t] = xr, yr
      im[t] = t <= 2 * T + 1 + sm and 1 or 0
      om[t] = (t >= T + 2 + sm and t <= 2 * T + 1 + sm) and 1 or 0
    end
    if sm == 1 then x[1][C] = 1 end
    for t = 1, T do
      local v = s[t]
      if #v ~= bits then error(string.format("copy_task: a vector of %d bits, expected %d", #v, bits), 2) end
      for c = 1, bits do
        x[t + sm][c] = v[c]
        y[T + 1 + sm + t][c] = v[c]
      end
    end
    x[T + 1 + sm][bits + 1] = 1
    X[b], Y[b], IM[b], OM[b], L[b] = x, y, im, om, T
  end
  return {inputs = glimpse.tensor(X), targets = glimpse.tensor(Y), input_mask = glimpse.tensor(IM),
          output_mask = glimpse.tensor(OM), lengths = L, steps = S, channels = C, bits = bits}
end

--- copy.batch(B, {min_len=1, max_len=20, bits=8, start_marker=false, rng=nil, seed=1}) ->
--- a fresh random batch (copy.layout's table, plus seqs).  Pass the same rng each step to
--- stream new data; seed is used only when rng is absent.
function M.batch(B, opts)
  opts = opts or {}
  local o = check(opts)
  local rng = opts.rng or Rng.new(opts.seed or 1, "copy_task")
  local seqs = {}
  for b = 1, B do seqs[b] = M.sequence(rng, rng:int(o.min_len, o.max_len), o.bits) end
  local out = M.layout(seqs, o)
  out.seqs = seqs
  return out
end

local Copy = {}
Copy.__index = Copy
M.Copy = Copy

--- copy.make{count=1000, min_len=1, max_len=20, bits=8, start_marker=false, seed=1} -> a fixed
--- dataset: ds.seqs[i] (T x bits lists), ds.lengths[i]; ds:collate(indices) -> batch table.
function M.make(opts)
  opts = opts or {}
  local o = check(opts)
  local rng = Rng.new(opts.seed or 1, "copy_task.make")
  local ds = setmetatable({n = opts.count or 1000, seqs = {}, lengths = {}, opts = o}, Copy)
  for i = 1, ds.n do
    ds.seqs[i] = M.sequence(rng, rng:int(o.min_len, o.max_len), o.bits)
    ds.lengths[i] = #ds.seqs[i]
  end
  return ds
end

function Copy:size() return self.n end

function Copy:collate(indices)
  local seqs = {}
  for k, i in ipairs(indices) do
    seqs[k] = self.seqs[i] or error("copy_task: index " .. tostring(i) .. " outside 1.." .. self.n, 2)
  end
  local out = M.layout(seqs, self.opts)
  out.indices = indices
  return out
end

return M
