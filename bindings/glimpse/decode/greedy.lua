--- glimpse.decode.greedy -- one sequence per row: greedy decoding and sampling (temperature,
-- top-k, nucleus sampling of Holtzman et al. 2020).  Rows drop out of the state as they
-- finish.  Published as decode.greedy and decode.sample.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local S = require "glimpse.decode.shared"

local M = {}

local function one_per_row(fname, step, state, c, choose)
  local B = c.batch
  local tokens, scores, aligns, finished = {}, {}, {}, {}
  for b = 1, B do tokens[b], scores[b], aligns[b], finished[b] = {}, 0, {}, false end
  local active, feed = {}, {}
  for b = 1, B do active[b], feed[b] = b, c.start[b] end
  local any_attn = false
  for t = 1, c.max_len do
    local N = #active
    local lp, attn
    lp, state, attn = S.call_step(fname, c, step, feed, state, t, N)
    local ids, logps = choose(lp, t)
    local arows = attn and attn:totable()
    any_attn = any_attn or arows ~= nil
    local alive, next_feed = {}, {}
    for r = 1, N do
      local b = active[r]
      local id = math.tointeger(ids[r])
      scores[b] = scores[b] + logps[r]
      if arows then aligns[b][#aligns[b] + 1] = arows[r] end
      if id == c.stop then
        finished[b] = true
      else
        tokens[b][#tokens[b] + 1] = id
        alive[#alive + 1] = r
        next_feed[#next_feed + 1] = id
      end
    end
    if #alive == 0 or t == c.max_len then break end
    if #alive < N then
      local still = {}
      for i, r in ipairs(alive) do still[i] = active[r] end
      active = still
      state = S.reorder_value(state, alive, N, "state", S.keep_memo(c.keep), fname)
    end
    feed = next_feed
  end
  return tokens, scores, any_attn and aligns or nil, finished
end

--- decode.greedy(step, state, {batch=B, start=2, stop=3, max_len=100, min_len=0,
--                              logits=false, keep={}}) -> tokens, scores, alignments, finished
-- The most probable token at every step.  tokens[b]: the ids of batch item b (a Lua table,
-- the stop token excluded); scores[b]: the sum of their log-probabilities (the stop's
-- included); alignments[b] (nil unless step returns attention): the attention rows of
-- every step taken, the stop's included; finished[b]: false when max_len cut it off.
-- batch defaults to the rows of the state's tensors; start may be one id per item;
-- keep lists state tensors/tables that are not per row (never reordered); logits=true
-- applies log_softmax to what step returns; min_len forbids the stop token before that
-- many tokens.
function M.greedy(step, state, opts)
  local c = S.common_opts("decode.greedy", S.OPTIONS, step, state, opts)
  local function choose(lp)
    local v, i = lp:max(2)
    return i:totable(), v:totable()
  end
  local tokens, scores, aligns, finished =
    S.run(function() return one_per_row("decode.greedy", step, state, c, choose) end)
  return tokens, scores, aligns, finished
end

-- The 0/1 mask (N,V) of the tokens sampling may draw: each row's top_k best (and/or the
-- smallest best-first set whose probability reaches top_p).  Candidates come from row_best,
-- so a wide vocabulary with top_k is not copied into Lua; the probabilities use the row's
-- logsumexp, computed in C over the whole row.
local function filter_mask(scaled, top_k, top_p)
  local N, V = scaled.shape[1], scaled.shape[2]
  local n = math.min(top_k or V, V)
  local vals, ids = S.row_best(scaled, n)
  local lse = top_p and scaled:logsumexp(2):totable()
  local keep_ids, width = {}, 1
  for r = 1, N do
    local vr, ir, order = vals[r], ids[r], {}
    for j = 1, #vr do order[j] = j end
    table.sort(order, function(a, b)
      if vr[a] ~= vr[b] then return vr[a] > vr[b] end
      return ir[a] < ir[b]
    end)
    local keep = math.min(n, #order)
    if top_p then
      local cum = 0
      for j = 1, keep do
        cum = cum + math.exp(vr[order[j]] - lse[r])
        if cum >= top_p then keep = j break end
      end
    end
    local row = {}
    for j = 1, keep do row[j] = ir[order[j]] end
    keep_ids[r] = row
    width = math.max(width, keep)
  end
  local idx, src = {}, {}
  for r = 1, N do               -- rectangular for scatter_add: pad with weight-0 repeats
    idx[r], src[r] = {}, {}
    for j = 1, width do
      idx[r][j] = keep_ids[r][j] or keep_ids[r][1]
      src[r][j] = keep_ids[r][j] and 1 or 0
    end
  end
  return glimpse.zeros(N, V):scatter_add(2, glimpse.tensor(idx), glimpse.tensor(src))
end

--- decode.sample(step, state, {batch, start, stop, max_len, min_len, logits, keep,
--                              temperature=1, top_k=nil, top_p=nil}) -> tokens, scores,
--                              alignments, finished   (as decode.greedy)
-- Draws each token from softmax(log_probs / temperature), restricted to the top_k most
-- probable tokens and/or the smallest set whose probability reaches top_p (nucleus).
-- Draws use glimpse's generator (glimpse.manual_seed makes them repeat).  scores[b] is the
-- log-probability of the drawn sequence under the model's own (unscaled) distribution.
-- For several samples of one input, repeat its rows in the state.
function M.sample(step, state, opts)
  local c = S.common_opts("decode.sample", S.SAMPLE_OPTIONS, step, state, opts)
  local temp, top_k, top_p = c.temperature, c.top_k, c.top_p
  if not (temp > 0) or temp == math.huge then
    check.fail(2, "decode.sample: option 'temperature' must be a positive number, got %s",
               tostring(temp))
  end
  if top_p ~= nil and not (top_p > 0) then
    check.fail(2, "decode.sample: option 'top_p' must be a number in (0, 1], got %s",
               tostring(top_p))
  end
  local function choose(lp)
    local scaled = temp == 1 and lp or lp / temp
    local mask = (top_k or top_p) and filter_mask(scaled, top_k, top_p) or nil
    local ids = glimpse.multinomial(glimpse.softmax(scaled, 2, mask), 1)   -- (N,1)
    return ids:reshape(-1):totable(), lp:gather(2, ids):reshape(-1):totable()
  end
  local tokens, scores, aligns, finished =
    S.run(function() return one_per_row("decode.sample", step, state, c, choose) end)
  return tokens, scores, aligns, finished
end

return M
