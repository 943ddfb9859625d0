--- bench/transformer_decode.lua -- models.Transformer's greedy decoding with the key/value
-- cache against the decoder recomputed over the whole prefix at each step (cache = false),
-- at target length T (default 100): ms per batch each way (best of --rounds, wall clock and
-- CPU time) and their ratio.  Not a timed test:
-- the tokens of both must be equal, the times are printed.
--
-- Usage: glimpse bench/transformer_decode.lua [--len 100] [--batch 8] [--d 64] [--layers 2]
--        [--beam 1] [--rounds 3]
local glimpse = require "glimpse"
local Vocab = require "glimpse.data.vocab"

local o = {len = 100, batch = 8, d = 64, layers = 2, beam = 1, rounds = 3, src = 20}
do
  local i = 1
  while i <= #arg do
    local k = arg[i]:match("^%-%-(.+)$")
    if not k or o[k] == nil or not math.tointeger(tonumber(arg[i + 1])) then
      error("usage: glimpse bench/transformer_decode.lua [--len N] [--batch B] [--d D] " ..
            "[--layers L] [--beam K] [--rounds R] [--src S]", 0)
    end
    o[k] = math.tointeger(tonumber(arg[i + 1]))
    i = i + 2
  end
end

glimpse.manual_seed(1234)
local toks = {}
for i = 1, 20 do toks[i] = string.char(96 + i) end
local model = glimpse.models.Transformer{src_vocab = toks, tgt_vocab = toks, d = o.d,
                                         heads = 4, layers = o.layers, ff = 2 * o.d,
                                         max_len = math.max(o.len, o.src) + 1}
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
print(string.format("transformer decode: T=%d B=%d d=%d layers=%d beam=%d  cached %.1f ms " ..
                    "(cpu %.1f)  recompute %.1f ms (cpu %.1f)  speed-up %.1fx (cpu %.1fx), " ..
                    "tokens equal", o.len, o.batch, o.d, o.layers, o.beam, ms_cached,
                    cpu_cached, ms_full, cpu_full, ms_full / ms_cached, cpu_full / cpu_cached))
