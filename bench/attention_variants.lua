-- bench/attention_variants.lua -- the cost of nn.MultiheadAttention's position schemes and
-- self-attention variants against the plain (fused) attention: forward + backward of one
-- causal self-attention, best of 5 rounds, one thread.
--
--   build/glimpse bench/attention_variants.lua [T ...]       (default T = 64 256 1024)
local glimpse = require "glimpse"
local nn = glimpse.nn

glimpse.set_num_threads(1)
local B, d, h = 4, 64, 4

local CASES = {
  {"softmax (fused op)", {}},
  {"rope", {positions = "rope"}},
  {"alibi", {positions = "alibi"}},
  {"t5", {positions = "t5"}},
  {"kv_heads = 1", {kv_heads = 1}},
  {"window = 16", {window = 16}},
  {"top_k = 8", {top_k = 8}},
  {"linear (running sums)", {attention = "linear"}},
  {"linear (masked product)", {attention = "linear"}, true},
}

local function ms(o, need, T)
  glimpse.manual_seed(1)
  o.causal = true
  local mha = nn.MultiheadAttention(d, h, o)
  local x = glimpse.randn(B, T, d):requires_grad()
  local fo = {need_weights = need or false}
  local reps = T >= 1024 and 2 or 5
  mha(x, nil, nil, nil, fo):sum():backward()
  local best = math.huge
  for _ = 1, 5 do
    local t0 = os.clock()
    for _ = 1, reps do mha(x, nil, nil, nil, fo):sum():backward() end
    best = math.min(best, (os.clock() - t0) / reps * 1e3)
  end
  return best
end

local Ts = {}
for _, a in ipairs(arg or {}) do Ts[#Ts + 1] = math.tointeger(tonumber(a)) end
if #Ts == 0 then Ts = {64, 256, 1024} end
io.write(string.format("B=%d d=%d heads=%d, causal self-attention, forward + backward (ms)\n",
                       B, d, h))
io.write(string.format("%-26s", "T"))
for _, T in ipairs(Ts) do io.write(string.format("%9d", T)) end
io.write("\n")
for _, c in ipairs(CASES) do
  io.write(string.format("%-26s", c[1]))
  for _, T in ipairs(Ts) do io.write(string.format("%9.2f", ms(c[2], c[3], T))) end
  io.write("\n")
end
