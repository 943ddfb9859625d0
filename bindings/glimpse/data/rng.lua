--- glimpse.data.Rng (glimpse.data.rng) -- a small seeded random generator for the dataset generators.
--
-- The generators must give the same data for the same seed on every machine, and must not
-- draw from glimpse's global tensor generator (glimpse.manual_seed): making a dataset in the
-- middle of an experiment would otherwise shift every later random number of the model.  So
-- each generator owns one of these: PCG32 (O'Neill 2014, "PCG: a family of simple fast
-- space-efficient statistically good algorithms for random number generation", the
-- XSH-RR output on a 64-bit LCG), written with Lua 5.4's wrapping 64-bit integers.
--
--   local Rng = require "glimpse.data.rng"
--   local r = Rng.new(42)            -- or Rng.new(42, "train"): an independent stream
--   r:u32()  r:random()  r:int(1, 6)  r:normal()  r:shuffle(t)  r:sample(10, 3)
local M = {}

local Rng = {}
Rng.__index = Rng
M.Rng = Rng

local MULT = 6364136223846793005
local DEFAULT_INC = 1442695040888963407

--- FNV-1a 64-bit hash of a string, an integer (wrapping): names streams.
function M.hash(s)
  local h = 0xcbf29ce484222325
  for i = 1, #s do
    h = (h ~ s:byte(i)) * 0x100000001b3
  end
  return h
end

--- Rng.new(seed [, stream]) -> generator.  seed: integer; stream: integer or string naming an
--- independent sequence (same seed, different stream: unrelated numbers).
function M.new(seed, stream)
  if math.type(seed) ~= "integer" then
    if type(seed) == "number" and seed == math.floor(seed) then
      seed = math.tointeger(seed)
    else
      error("rng: seed must be an integer, got " .. tostring(seed), 2)
    end
  end
  local inc = DEFAULT_INC
  if type(stream) == "string" then
    inc = M.hash(stream)
  elseif math.type(stream) == "integer" then
    inc = stream * 0x9e3779b97f4a7c15 + DEFAULT_INC
  elseif stream ~= nil then
    error("rng: stream must be a string or an integer", 2)
  end
  local r = setmetatable({state = 0, inc = (inc << 1) | 1}, Rng)
  r:u32()
  r.state = r.state + seed
  r:u32()
  return r
end

--- r:u32() -> integer in [0, 2^32).
function Rng:u32()
  local old = self.state
  self.state = old * MULT + self.inc
  local xs = (((old >> 18) ~ old) >> 27) & 0xffffffff
  local rot = old >> 59
  return ((xs >> rot) | (xs << ((32 - rot) & 31))) & 0xffffffff
end

--- r:random() -> float in [0, 1) with 53 random bits.
function Rng:random()
  local a, b = self:u32() >> 5, self:u32() >> 6       -- 27 and 26 bits
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)
end

--- r:uniform(lo, hi) -> float in [lo, hi).
function Rng:uniform(lo, hi)
  return lo + (hi - lo) * self:random()
end

--- r:int(lo, hi) -> integer uniform in [lo, hi] (inclusive, unbiased; hi - lo < 2^32).
function Rng:int(lo, hi)
  if hi < lo then error(string.format("rng:int: empty range [%d, %d]", lo, hi), 2) end
  local range = hi - lo + 1
  if range > 0x100000000 then error("rng:int: range wider than 2^32", 2) end
  local threshold = (0x100000000 - range) % range
  local r
  repeat r = self:u32() until r >= threshold
  return lo + r % range
end

--- r:normal([mean, std]) -> float, Box-Muller.
function Rng:normal(mean, std)
  local u1
  repeat u1 = self:random() until u1 > 0
  local z = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * self:random())
  return (mean or 0) + (std or 1) * z
end

--- r:bernoulli(p) -> boolean, true with probability p.
function Rng:bernoulli(p)
  return self:random() < p
end

--- r:shuffle(t) -> t, shuffled in place (Fisher-Yates).
function Rng:shuffle(t)
  for i = #t, 2, -1 do
    local j = self:int(1, i)
    t[i], t[j] = t[j], t[i]
  end
  return t
end

--- r:permutation(n) -> a random ordering of 1..n.
function Rng:permutation(n)
  local t = {}
  for i = 1, n do t[i] = i end
  return self:shuffle(t)
end

--- r:sample(n, k) -> k distinct integers from 1..n, in random order.
function Rng:sample(n, k)
  if k > n then error(string.format("rng:sample: %d from %d", k, n), 2) end
  local pool, out = {}, {}
  for i = 1, k do
    local j = self:int(i, n)
    local a, b = pool[i] or i, pool[j] or j
    pool[i], pool[j] = b, a
    out[i] = b
  end
  return out
end

--- r:choice(t) -> a random element of the array t.
function Rng:choice(t)
  if #t == 0 then error("rng:choice: empty table", 2) end
  return t[self:int(1, #t)]
end

--- r:split(name) -> a new generator whose stream is named by name and whose seed comes from r.
function Rng:split(name)
  local seed = (self:u32() << 32) | self:u32()
  return M.new(seed, tostring(name))
end

return M
