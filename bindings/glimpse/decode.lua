-- glimpse.decode -- sequence decoding for trained seq2seq and captioning models: greedy,
-- beam search (GNMT length penalty, n-best lists, alignments) and sampling (temperature,
-- top-k, nucleus).  It knows nothing of the model: the caller gives a step function
--
--   log_probs (N,V), new_state [, attention (N,S)] = step(tokens (N), state, t)
--
-- tokens: a float tensor of N 1-based ids (the previous token of each row; `start` at t=1);
-- state: whatever the model carries from step to step (a tensor, or a Lua table tree whose
-- tensor leaves have one row per sequence on dim 1; numbers, strings and booleans pass
-- through); t: the 1-based step number.  The decoder reorders the state itself with
-- index_select on dim 1 -- to follow the surviving beams, and to drop sequences that have
-- finished -- so anything with one row per sequence (encoder outputs, masks, attention
-- caches) must be in the state, not captured by the step function.  N changes from step to
-- step for that reason.  The states of nn.Attention:precompute and nn.Pointer:precompute
-- hold per-sequence tensors only (their weights stay on the modules); a tensor of your own
-- that is not per row goes in opts.keep and passes through untouched.  log_probs must be
-- log-probabilities (<= 0; pass logits=true to have log_softmax applied): beam search
-- stops early only when no unfinished hypothesis can still win, and that bound needs scores
-- that never grow.  Everything runs under glimpse.no_grad.
--
-- References: beam search as in fairseq's SequenceGenerator and OpenNMT's Beam (an end token
-- finishes a hypothesis only when it ranks among the top `beam` candidates, so beam=1 is
-- greedy decoding); the length penalty ((5+|Y|)/6)^alpha of Wu et al. 2016 (GNMT, eq. 14);
-- nucleus sampling of Holtzman et al. 2020.
local glimpse = require "glimpse"

local M = {}

local NEG_INF = -math.huge
local DEFAULT_START, DEFAULT_STOP = 2, 3     -- glimpse.data's <start> and <end>
local DEFAULT_MAX_LEN = 100

-- Errors found while decoding (inside glimpse.no_grad) travel as {decode_error = msg} so
-- the entry point can re-raise them at the caller's line; the step function's own errors
-- pass through untouched.
local function raise(fmt, ...)
  error({decode_error = string.format(fmt, ...)}, 0)
end

-- ---------------------------------------------------------------------------------------
-- state reordering

local function reorder_value(v, idx, rows, path, memo, fname)
  if glimpse.is_tensor(v) then
    local done = memo[v]
    if done then return done end
    if v:dim() == 0 or (rows and v.shape[1] ~= rows) then
      raise("%s: state tensor %s has shape {%s}; every tensor in the state needs one row "
            .. "per sequence on dim 1 (%s rows here)", fname, path, table.concat(v.shape, ","),
            tostring(rows))
    end
    local r = v:index_select(1, idx)
    memo[v] = r
    return r
  end
  if type(v) ~= "table" then return v end
  local done = memo[v]
  if done then return done end
  local out = {}
  memo[v] = out
  for k, x in pairs(v) do
    out[k] = reorder_value(x, idx, rows, path .. "." .. tostring(k), memo, fname)
  end
  return setmetatable(out, getmetatable(v))
end

-- the memo that makes `keep` values pass through unchanged
local function keep_memo(fname, keep, level)
  local memo = {}
  if keep == nil then return memo end
  if type(keep) ~= "table" then
    error(string.format("%s: keep must be a list of tensors or tables, got %s", fname,
                        type(keep)), level + 1)
  end
  for _, v in ipairs(keep) do memo[v] = v end
  return memo
end

--- decode.reorder(state, idx, {rows=N, keep={...}}) -> a new state whose tensors are
-- index_select(1, idx) of the old ones (idx: a Lua table or tensor of 1-based rows).
-- Tables are copied (the input is left as it was), shared tensors and tables stay shared,
-- other values pass through.  rows: the row count every tensor must have; keep: tensors
-- or tables that are not per row (weights cached beside the per-row tensors), passed
-- through as they are.
function M.reorder(state, idx, opts)
  if type(idx) ~= "table" and not glimpse.is_tensor(idx) then
    error("decode.reorder: idx must be a table or tensor of 1-based row indices, got "
          .. type(idx), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("decode.reorder: opts must be a table {rows=, keep=}, got " .. type(opts), 2)
  end
  opts = opts or {}
  local memo = keep_memo("decode.reorder", opts.keep, 2)
  local ok, r = pcall(reorder_value, state, idx, opts.rows, "state", memo, "decode.reorder")
  if not ok then
    if type(r) ~= "table" then r = "decode.reorder: " .. tostring(r):gsub("^[^\n]-%.lua:%d+: ", "") end
    error(type(r) == "table" and r.decode_error or r, 2)
  end
  return r
end

-- the row count of the first tensor found in the state (nil when there is none)
local function state_rows(v, seen)
  if seen[v] then return nil end
  if glimpse.is_tensor(v) then return v:dim() > 0 and v.shape[1] or nil end
  if type(v) ~= "table" then return nil end
  seen[v] = true
  for _, x in pairs(v) do
    local r = state_rows(x, seen)
    if r then return r end
  end
  return nil
end

-- ---------------------------------------------------------------------------------------
-- options and the step call

local function is_callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return mt ~= nil and type(mt) == "table" and mt.__call ~= nil
end

-- opts[key] as a positive integer (default when absent); level: error level of the caller
local function positive_int(fname, o, key, default, level)
  local v = o[key]
  if v == nil then return default end
  if type(v) ~= "number" or v % 1 ~= 0 or v < 1 then
    error(string.format("%s: opts.%s must be a positive integer, got %s", fname, key,
                        tostring(v)), level + 1)
  end
  return math.tointeger(v)
end

-- common options: batch, start, stop, max_len, min_len, logits
local function common_opts(fname, step, state, opts)
  if not is_callable(step) then
    error(string.format("%s: step must be a function (tokens, state, t) -> log_probs, state, "
                        .. "attention; got %s", fname, type(step)), 3)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(string.format("%s: opts must be a table, got %s", fname, type(opts)), 3)
  end
  local o = opts or {}
  local c = {}
  c.stop = positive_int(fname, o, "stop", DEFAULT_STOP, 3)
  c.max_len = positive_int(fname, o, "max_len", DEFAULT_MAX_LEN, 3)
  c.min_len = o.min_len or 0
  if type(c.min_len) ~= "number" or c.min_len < 0 or c.min_len % 1 ~= 0 then
    error(string.format("%s: opts.min_len must be an integer >= 0, got %s", fname,
                        tostring(o.min_len)), 3)
  end
  if c.min_len >= c.max_len then
    error(string.format("%s: opts.min_len (%d) must be below opts.max_len (%d)", fname,
                        c.min_len, c.max_len), 3)
  end
  c.logits = o.logits and true or false
  c.keep = o.keep
  keep_memo(fname, o.keep, 3)
  local seen = {}
  if type(o.keep) == "table" then for _, v in ipairs(o.keep) do seen[v] = true end end
  local rows = state_rows(state, seen)
  local B = positive_int(fname, o, "batch", rows, 3)
  if not B then
    error(fname .. ": opts.batch is needed when the state holds no tensor", 3)
  end
  if rows and rows ~= B then
    error(string.format("%s: opts.batch is %d but the state's tensors have %d rows on dim 1",
                        fname, B, rows), 3)
  end
  c.batch = B
  local start = o.start == nil and DEFAULT_START or o.start
  if glimpse.is_tensor(start) then start = start:reshape(-1):totable() end
  if type(start) == "number" then
    if start < 1 or start % 1 ~= 0 then
      error(string.format("%s: opts.start must be a positive integer id, got %s", fname,
                          tostring(start)), 3)
    end
    local s = {}
    for b = 1, B do s[b] = math.tointeger(start) end
    start = s
  elseif type(start) == "table" then
    if #start ~= B then
      error(string.format("%s: opts.start has %d ids for a batch of %d", fname, #start, B), 3)
    end
    local s = {}
    for b = 1, B do
      local id = start[b]
      if type(id) ~= "number" or id < 1 or id % 1 ~= 0 then
        error(string.format("%s: opts.start[%d] must be a positive integer id, got %s", fname,
                            b, tostring(id)), 3)
      end
      s[b] = math.tointeger(id)
    end
    start = s
  else
    error(string.format("%s: opts.start must be an id, or one id per batch item, got %s",
                        fname, type(start)), 3)
  end
  c.start = start
  return c, o
end

-- call step and check what comes back; returns log_probs (N,V), state, attention or nil
local function call_step(fname, c, step, tokens, state, t, N)
  local lp, new_state, attn = step(glimpse.tensor(tokens), state, t)
  if not glimpse.is_tensor(lp) or lp:dim() ~= 2 or lp.shape[1] ~= N then
    raise("%s: step %d must return log_probs of shape (N,V) with N = %d rows, got %s", fname,
          t, N, glimpse.is_tensor(lp) and "{" .. table.concat(lp.shape, ",") .. "}" or type(lp))
  end
  if c.stop > lp.shape[2] then
    raise("%s: opts.stop is %d but step returns only %d classes", fname, c.stop, lp.shape[2])
  end
  if attn ~= nil and (not glimpse.is_tensor(attn) or attn:dim() < 1 or attn.shape[1] ~= N) then
    raise("%s: step %d: the attention it returns must be a tensor with N = %d rows, got %s",
          fname, t, N, glimpse.is_tensor(attn) and "{" .. table.concat(attn.shape, ",") .. "}"
          or type(attn))
  end
  if c.logits then lp = glimpse.log_softmax(lp, 2) end
  if t <= c.min_len then       -- no end token before min_len tokens
    local ban = glimpse.zeros(1, lp.shape[2])
    ban[1][c.stop] = NEG_INF
    lp = lp + ban
  end
  return lp, new_state, attn
end

-- fn under glimpse.no_grad; decoding errors re-raised at the line that called the entry
-- point (which must call run without a tail call)
local function run(fn)
  local ok, a, b, c, d = pcall(glimpse.no_grad, fn)
  if not ok then
    if type(a) == "table" and a.decode_error then error(a.decode_error, 3) end
    error(a, 0)
  end
  return a, b, c, d
end

-- For each row of lp (N,V), candidate tokens vals[r], ids[r] that include the row's n best
-- (larger log-prob first, then lower id); a candidate among an item's n best is among its
-- row's n best, so the search needs no others.  A narrow vocabulary is copied whole; a wide
-- one is cut down in C with n passes of max, each masking the winners with scatter_add of
-- -inf (n passes over N*V floats cost far less than bringing N*V numbers into Lua).
local function row_best(lp, n)
  local N, V = lp.shape[1], lp.shape[2]
  if V <= 4 * n then
    local rows, all = lp:totable(), {}
    for v = 1, V do all[v] = v end
    local ids = {}
    for r = 1, N do ids[r] = all end
    return rows, ids
  end
  local vals, ids = {}, {}
  for r = 1, N do vals[r], ids[r] = {}, {} end
  local ban = glimpse.full({N, 1}, NEG_INF)
  local work = lp
  for j = 1, n do
    local v, i = work:max(2)                 -- the first of equal maxima: the lower id
    local vt, it = v:totable(), i:totable()
    for r = 1, N do vals[r][j], ids[r][j] = vt[r], it[r] end
    if j < n then work = work:scatter_add(2, i:reshape(N, 1), ban) end
  end
  return vals, ids
end
M._row_best = row_best          -- for the tests, which also swap in a full-sort reference
function M._set_row_best(f) row_best = f end

-- ---------------------------------------------------------------------------------------
-- greedy and sampling: one sequence per row, rows drop out as they finish

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
    lp, state, attn = call_step(fname, c, step, feed, state, t, N)
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
      state = reorder_value(state, alive, N, "state", keep_memo(fname, c.keep), fname)
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
  local c = common_opts("decode.greedy", step, state, opts)
  local function choose(lp)
    local v, i = lp:max(2)
    return i:totable(), v:totable()
  end
  local tokens, scores, aligns, finished =
    run(function() return one_per_row("decode.greedy", step, state, c, choose) end)
  return tokens, scores, aligns, finished
end

-- The 0/1 mask (N,V) of the tokens sampling may draw: each row's top_k best (and/or the
-- smallest best-first set whose probability reaches top_p).  Candidates come from row_best,
-- so a wide vocabulary with top_k is not copied into Lua; the probabilities use the row's
-- logsumexp, computed in C over the whole row.
local function filter_mask(scaled, top_k, top_p)
  local N, V = scaled.shape[1], scaled.shape[2]
  local n = math.min(top_k or V, V)
  local vals, ids = row_best(scaled, n)
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
  local c, o = common_opts("decode.sample", step, state, opts)
  local temp = o.temperature or 1
  if type(temp) ~= "number" or not (temp > 0) or temp == math.huge then
    error("decode.sample: opts.temperature must be a positive number, got " .. tostring(temp), 2)
  end
  local top_k = positive_int("decode.sample", o, "top_k", nil, 2)
  local top_p = o.top_p
  if top_p ~= nil and (type(top_p) ~= "number" or not (top_p > 0 and top_p <= 1)) then
    error("decode.sample: opts.top_p must be a number in (0, 1], got " .. tostring(top_p), 2)
  end
  local function choose(lp)
    local scaled = temp == 1 and lp or lp / temp
    local mask = (top_k or top_p) and filter_mask(scaled, top_k, top_p) or nil
    local ids = glimpse.multinomial(glimpse.softmax(scaled, 2, mask), 1)   -- (N,1)
    return ids:reshape(-1):totable(), lp:gather(2, ids):reshape(-1):totable()
  end
  local tokens, scores, aligns, finished =
    run(function() return one_per_row("decode.sample", step, state, c, choose) end)
  return tokens, scores, aligns, finished
end

-- ---------------------------------------------------------------------------------------
-- beam search

-- GNMT's length penalty lp(len) = ((5 + len) / 6)^alpha
local function length_penalty(len, alpha)
  if alpha == 0 then return 1 end
  return ((5 + len) / 6) ^ alpha
end

-- candidate order: score, then the lower beam, then the lower token
local function worse(s1, k1, v1, s2, k2, v2)
  if s1 ~= s2 then return s1 < s2 end
  if k1 ~= k2 then return k1 > k2 end
  return v1 > v2
end


-- The n best candidates (score, beam k, token v) of one item from its K rows (base+1 ..
-- base+K), best first, ties broken towards the lower beam then the lower token, so the
-- result does not depend on the order candidates arrive in.  n is 2 * beam, small: the
-- list is kept sorted by insertion, and a candidate below its worst is rejected with one
-- comparison (the hot loop of a beam step over a whole vocabulary).  Also says whether any
-- log-prob was above 0 (then no early-stopping bound holds).
local function top_candidates(vals, ids, base, scores, K, n)
  local cs, ck, cv, size = {}, {}, {}, 0
  local positive = false
  for k = 1, K do
    local sk = scores[k]
    if sk > NEG_INF then
      local row, rid = vals[base + k], ids[base + k]
      for j = 1, #row do
        local x = row[j]
        if x > 0 then positive = true end
        local s = sk + x
        if s > NEG_INF and (size < n or s >= cs[size]) then
          local v = math.tointeger(rid[j])
          if size < n or worse(cs[size], ck[size], cv[size], s, k, v) then
            local i = size + 1         -- a new slot, or the worst's when the list is full
            if size < n then size = i else i = size end
            while i > 1 and worse(cs[i - 1], ck[i - 1], cv[i - 1], s, k, v) do
              cs[i], ck[i], cv[i] = cs[i - 1], ck[i - 1], cv[i - 1]
              i = i - 1
            end
            cs[i], ck[i], cv[i] = s, k, v
          end
        end
      end
    end
  end
  local cands = {}
  for i = 1, size do cands[i] = {cs[i], ck[i], cv[i]} end
  return cands, positive
end

local function extend(list, x)
  local n = #list
  local out = table.move(list, 1, n, 1, {})
  out[n + 1] = x
  return out
end

local function better_hyp(a, b)
  if a.score ~= b.score then return a.score > b.score end
  if a.log_prob ~= b.log_prob then return a.log_prob > b.log_prob end
  return a.order < b.order
end

-- the widest beam decode.beam accepts (batch*beam rows of decoder state live at once)
M.MAX_BEAM = 1024

--- decode.beam(step, state, {beam=5, n_best=1, length_penalty=0, batch, start=2, stop=3,
--                            max_len=100, min_len=0, logits=false, keep={}}) -> hyps
-- Beam search over all B*beam hypotheses in one step call per time step.  At each step the
-- 2*beam best continuations of an item are ranked; an end token among the first `beam`
-- finishes a hypothesis, the best `beam` others go on.  Finished hypotheses are ranked by
-- score = log_prob / ((5+len)/6)^length_penalty (len counts the end token); an item stops
-- once it holds n_best finished ones and no unfinished hypothesis can still beat the
-- n_best-th (log-probabilities only fall), or at max_len, where the unfinished ones join
-- the ranking with finished = false.  hyps[b] is item b's list, best first, of up to
-- n_best {tokens = {ids, stop excluded}, score, log_prob, length, finished, alignment =
-- {attention rows per step, the end token's included} or nil}.
function M.beam(step, state, opts)
  local fname = "decode.beam"
  local c, o = common_opts(fname, step, state, opts)
  local K = positive_int(fname, o, "beam", 5, 2)
  if K > M.MAX_BEAM then
    error(string.format("decode.beam: opts.beam (%d) is larger than decode.MAX_BEAM (%d): the "
                        .. "search keeps batch*beam rows of state", K, M.MAX_BEAM), 2)
  end
  local n_best = positive_int(fname, o, "n_best", 1, 2)
  if n_best > K then
    error(string.format("decode.beam: opts.n_best (%d) cannot exceed opts.beam (%d)", n_best, K), 2)
  end
  local alpha = o.length_penalty or 0
  if type(alpha) ~= "number" or alpha ~= alpha or math.abs(alpha) == math.huge then
    error("decode.beam: opts.length_penalty must be a number (GNMT's alpha), got "
          .. tostring(alpha), 2)
  end
  local B, stop, max_len = c.batch, c.stop, c.max_len

  local function body()
    -- K rows per item: item b's beams are rows (b-1)*K+1 .. b*K
    local expand = {}
    for b = 1, B do for k = 1, K do expand[(b - 1) * K + k] = b end end
    local memo = keep_memo(fname, c.keep)
    state = reorder_value(state, expand, B, "state", memo, fname)
    -- Every state tensor now holds K equal rows per item.  One the step hands back unchanged
    -- (the same tensor: the encoder's annotations, the attention's keys) keeps them equal,
    -- and beams are only ever reordered within their own item, so reordering it changes
    -- nothing: it passes through (no copy per step of what may be most of the state) until
    -- an item finishes and rows are dropped.
    local per_item = setmetatable({}, {__mode = "k"})
    for _, r in pairs(memo) do
      if glimpse.is_tensor(r) then per_item[r] = true end
    end
    for _, v in ipairs(c.keep or {}) do per_item[v] = nil end
    local beams, finished, serial = {}, {}, 0
    for b = 1, B do
      beams[b] = {}
      for k = 1, K do
        beams[b][k] = {score = k == 1 and 0 or NEG_INF, tokens = {}, align = {},
                       last = c.start[b]}
      end
      finished[b] = {}
    end
    local active = {}
    for b = 1, B do active[b] = b end
    local exact_bound = true
    local any_attn = false

    local function finish(b, h, len, done_ok)
      serial = serial + 1
      finished[b][#finished[b] + 1] = {tokens = h.tokens, log_prob = h.score,
                                       score = h.score / length_penalty(len, alpha),
                                       length = len, finished = done_ok,
                                       alignment = h.align, order = serial}
    end

    -- best score an unfinished hypothesis (log-prob s, t tokens so far) can still reach
    local function bound(s, t)
      if t + 1 > max_len then return NEG_INF end
      return math.max(s / length_penalty(t + 1, alpha), s / length_penalty(max_len, alpha))
    end

    local function nth_best(list, n)
      if #list < n then return nil end
      table.sort(list, better_hyp)
      return list[n].score
    end

    for t = 1, max_len do
      local N = #active * K
      local feed = {}
      for i, b in ipairs(active) do
        for k = 1, K do feed[(i - 1) * K + k] = beams[b][k].last end
      end
      local lp, attn
      lp, state, attn = call_step(fname, c, step, feed, state, t, N)
      local vals, ids = row_best(lp, 2 * K)
      local arows = attn and attn:totable()
      any_attn = any_attn or arows ~= nil
      local next_active, idx = {}, {}
      for i, b in ipairs(active) do
        local base = (i - 1) * K
        local scores = {}
        for k = 1, K do scores[k] = beams[b][k].score end
        local cands, positive = top_candidates(vals, ids, base, scores, K, 2 * K)
        if positive then exact_bound = false end
        local new = {}
        for rank, cand in ipairs(cands) do
          local s, k, v = cand[1], cand[2], cand[3]
          local parent = beams[b][k]
          local function align()       -- the parent's alignment and this step's row
            return arows and extend(parent.align, arows[base + k]) or parent.align
          end
          if v == stop then
            if rank <= K then
              finish(b, {tokens = parent.tokens, score = s, align = align()}, t, true)
            end
          elseif #new < K then
            new[#new + 1] = {score = s, tokens = extend(parent.tokens, v), align = align(),
                             last = v, row = base + k}
          end
        end
        local done = #new == 0 or t == max_len
        if t == max_len then
          for _, h in ipairs(new) do finish(b, h, t, false) end
        end
        if not done and exact_bound then
          local worst_kept = nth_best(finished[b], n_best)
          if worst_kept then
            local best_live = NEG_INF
            for _, h in ipairs(new) do best_live = math.max(best_live, bound(h.score, t)) end
            done = best_live <= worst_kept
          end
        end
        if not done then
          for k = #new + 1, K do      -- fewer than K continuations: pad with dead beams
            new[k] = {score = NEG_INF, tokens = new[1].tokens, align = new[1].align,
                      last = new[1].last, row = new[1].row}
          end
          beams[b] = new
          next_active[#next_active + 1] = b
          for k = 1, K do idx[#idx + 1] = new[k].row end
        end
      end
      if #next_active == 0 then break end
      local dropped = #next_active < #active
      local rmemo = keep_memo(fname, c.keep)
      if not dropped then
        setmetatable(rmemo, {__index = function(_, v) return per_item[v] and v or nil end})
      end
      state = reorder_value(state, idx, N, "state", rmemo, fname)
      if dropped then     -- the copies of per-item tensors are per item too
        local fresh = {}
        for v in pairs(per_item) do
          local r = rawget(rmemo, v)
          if r then fresh[r] = true end
        end
        for r in pairs(fresh) do per_item[r] = true end
      end
      active = next_active
    end

    local hyps = {}
    for b = 1, B do
      local list = finished[b]
      table.sort(list, better_hyp)
      hyps[b] = {}
      for j = 1, math.min(n_best, #list) do
        local h = list[j]
        hyps[b][j] = {tokens = h.tokens, score = h.score, log_prob = h.log_prob,
                      length = h.length, finished = h.finished,
                      alignment = any_attn and h.alignment or nil}
      end
    end
    return hyps
  end
  local hyps = run(body)
  return hyps
end

return M
