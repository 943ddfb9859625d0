--- bench/transformer_decode.lua -- models.Transformer's greedy decoding with the key/value
-- cache against the decoder recomputed over the whole prefix at each step (cache = false),
-- at target length T (default 100): ms per batch each way (best of --rounds, wall clock and
-- CPU time) and their ratio.  Not a timed test:
-- the tokens of both must be equal, the times are printed.
--
-- Usage: glimpse bench/transformer_decode.lua [--len 100] [--batch 8] [--d 64] [--layers 2]
--        [--beam 1] [--rounds 3] [--src 20] [--positions sinusoidal|learned|rope|alibi|t5|none]
--        [--kv_heads K] [--window W] [--top_k K] [--attention softmax|linear]
local glimpse = require "glimpse"
local Vocab = require "glimpse.data.vocab"

local o = {len = 100, batch = 8, d = 64, layers = 2, beam = 1, rounds = 3, src = 20}
local STRINGS = {positions = "sinusoidal", attention = "softmax"}   -- the model's own options
local MODEL_INTS = {kv_heads = true, window = true, top_k = true}
local model_opts = {}
do
  local i = 1
  while i <= #arg do
    local k, v = arg[i]:match("^%-%-(.+)$"), arg[i + 1]
    local n = math.tointeger(tonumber(v))
    if k and STRINGS[k] and v then model_opts[k] = v
    elseif k and MODEL_INTS[k] and n then model_opts[k] = n
    elseif k and o[k] ~= nil and n then o[k] = n
    else
      error("usage: glimpse bench/transformer_decode.lua [--len N] [--batch B] [--d D] " ..
            "[--layers L] [--beam K] [--rounds R] [--src S] [--positions P] [--kv_heads K] " ..
            "[--window W] [--top_k K] [--attention A]", 0)
    end
    i = i + 2
  end
end

glimpse.manual_seed(1234)
local toks = {}
for i = 1, 20 do toks[i] = string.char(96 + i) end
local config = {src_vocab = toks, tgt_vocab = toks, d = o.d, heads = 4, layers = o.layers,
                ff = 2 * o.d, max_len = math.max(o.len, o.src) + 1}
for k, v in pairs(model_opts) do config[k] = v end
local model = glimpse.models.Transformer(config)
model:evaluate()
-- no <end>: every row decodes the full length
glimpse.no_grad(function() model.out.bias:narrow(1, Vocab.END, 1):fill_(-1e4) end)
local src = {}
for b = 1, o.batch do
  src[b] = {}
  for s = 1, o.src do src[b][s] = 5 + (b * 7 + s * 3) % 18 end
end
local batch = {src = glimpse.tensor(src)}

-- best wall-clock and best CPU time (os.clock: all threads, steadier on a loaded machine)
local function time(cache)
  local best, cpu, out = math.huge, math.huge, nil
  for _ = 1, o.rounds do
    local t0, c0 = glimpse.clock(), os.clock()
    out = model:decode(batch, {max_len = o.len, cache = cache, beam = o.beam})
    best = math.min(best, glimpse.clock() - t0)
    cpu = math.min(cpu, os.clock() - c0)
  end
  return best * 1000, cpu * 1000, out
end

local ms_cached, cpu_cached, a = time(true)
local ms_full, cpu_full, b = time(false)
for i = 1, #a do
  assert(#a[i] == o.len and table.concat(a[i], ",") == table.concat(b[i], ","),
         "cached and recomputed decoding differ in row " .. i)
end
local variant = {}
for _, k in ipairs({"positions", "kv_heads", "window", "top_k", "attention"}) do
  if model_opts[k] ~= nil then variant[#variant + 1] = k .. "=" .. tostring(model_opts[k]) end
end
print(string.format("transformer decode%s: T=%d B=%d d=%d layers=%d beam=%d  cached %.1f ms " ..
                    "(cpu %.1f)  recompute %.1f ms (cpu %.1f)  speed-up %.1fx (cpu %.1fx), " ..
                    "tokens equal", #variant > 0 and " (" .. table.concat(variant, ", ") .. ")" or "",
                    o.len, o.batch, o.d, o.layers, o.beam, ms_cached, cpu_cached, ms_full,
                    cpu_full, ms_full / ms_cached, cpu_full / cpu_cached))
