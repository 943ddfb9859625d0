--- glimpse.decode.shared -- what greedy decoding, sampling and beam search share: the
-- options (declared once), the state reordering, the checked step call, the no_grad runner
-- and the per-row candidate cut.  decode/init.lua publishes the entry points.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"

local M = {}

M.NEG_INF = -math.huge
local NEG_INF = M.NEG_INF

-- ---------------------------------------------------------------------------------------
-- options

--- The options every decoder takes (decode.greedy's), and those of sample, beam and reorder.
M.OPTIONS = options.declare("decode.greedy", {
  {"batch", "int", nil, range = {1}, help = "batch size (default: the rows of the state's " ..
                                          "tensors)"},
  {"start", "int|table|tensor", 2, help = "the first input id, or one per batch item " ..
                                         "(glimpse.data's <start>)"},
  {"stop", "int", 3, range = {1}, help = "the end token's id (glimpse.data's <end>)"},
  {"max_len", "int", 100, range = {1}, help = "most steps"},
  {"min_len", "int", 0, range = {0}, help = "no end token before this many tokens"},
  {"logits", "boolean", false, help = "step returns logits: apply log_softmax to them"},
  {"keep", "table", nil, help = "state tensors or tables that are not per row (passed " ..
                               "through, never reordered)"},
})
M.SAMPLE_OPTIONS = M.OPTIONS:extend("decode.sample", {
  {"temperature", "number", 1, range = {0}, help = "divides the log-probabilities (> 0)"},
  {"top_k", "int", nil, range = {1}, help = "draw among the k most probable tokens"},
  {"top_p", "number", nil, range = {0, 1}, help = "draw among the smallest set reaching " ..
                                               "this probability (nucleus)"},
})
M.BEAM_OPTIONS = M.OPTIONS:extend("decode.beam", {
  {"beam", "int", 5, range = {1}, help = "hypotheses kept per item (at most decode.MAX_BEAM)"},
  {"n_best", "int", 1, range = {1}, help = "finished hypotheses returned per item"},
  {"length_penalty", "number", 0, help = "GNMT's alpha: score = log_prob / ((5+len)/6)^alpha"},
})
M.REORDER_OPTIONS = options.declare("decode.reorder", {
  {"rows", "int", nil, range = {0}, help = "the row count every state tensor must have"},
  {"keep", "table", nil, help = "tensors or tables that are not per row"},
})

-- opts checked against spec (level as error's, from the caller of checked): integral floats
-- (a JSON config's) count as integers, as they always have
function M.checked(spec, opts, level)
  if type(opts) == "table" then
    local c = {}
    for k, v in pairs(opts) do c[k] = type(v) == "number" and check.integers(v) or v end
    opts = c
  end
  local o = spec:check(opts, level + 1)
  return o                                  -- not a tail call: the level counts this frame
end

-- Errors found while decoding (inside glimpse.no_grad) travel as {decode_error = msg} so
-- the entry point can re-raise them at the caller's line; the step function's own errors
-- pass through untouched.
function M.raise(fmt, ...)
  error({decode_error = string.format(fmt, ...)}, 0)
end
local raise = M.raise

-- ---------------------------------------------------------------------------------------
-- state reordering

function M.reorder_value(v, idx, rows, path, memo, fname)
  if glimpse.is_tensor(v) then
    local done = memo[v]
    if done then return done end
    if v:dim() == 0 or (rows and v.shape[1] ~= rows) then
      raise("%s: state tensor %s has shape %s; every tensor in the state needs one row "
            .. "per sequence on dim 1 (%s rows here)", fname, path, check.shape(v),
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
    out[k] = M.reorder_value(x, idx, rows, path .. "." .. tostring(k), memo, fname)
  end
  return setmetatable(out, getmetatable(v))
end

-- the memo that makes `keep` values pass through unchanged
function M.keep_memo(keep)
  local memo = {}
  for _, v in ipairs(keep or {}) do memo[v] = v end
  return memo
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
-- the options every decoder takes, and the step call

local function is_callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return mt ~= nil and type(mt) == "table" and mt.__call ~= nil
end

-- The checked options o (spec's, defaults filled in) of the entry point fname, with start
-- made one id per batch item and batch taken from the state; errors at the entry's caller.
function M.common_opts(fname, spec, step, state, opts)
  if not is_callable(step) then
    check.fail(3, "%s: step must be a function (tokens, state, t) -> log_probs, state, " ..
               "attention; got %s", fname, type(step))
  end
  local o = M.checked(spec, opts, 3)
  if o.min_len >= o.max_len then
    check.fail(3, "%s: option 'min_len' (%d) must be below option 'max_len' (%d)", fname,
               o.min_len, o.max_len)
  end
  local seen = {}
  for _, v in ipairs(o.keep or {}) do seen[v] = true end
  local rows = state_rows(state, seen)
  local B = o.batch or rows
  if not B then
    check.fail(3, "%s: option 'batch' is needed when the state holds no tensor", fname)
  end
  if rows and rows ~= B then
    check.fail(3, "%s: option 'batch' is %d but the state's tensors have %d rows on dim 1",
               fname, B, rows)
  end
  o.batch = B
  local start = o.start
  if glimpse.is_tensor(start) then start = start:reshape(-1):totable() end
  if type(start) == "number" then
    if start < 1 then
      check.fail(3, "%s: option 'start' must be a positive integer id, got %s", fname,
                 tostring(start))
    end
    local s = {}
    for b = 1, B do s[b] = start end
    start = s
  else
    if #start ~= B then
      check.fail(3, "%s: option 'start' has %d ids for a batch of %d", fname, #start, B)
    end
    local s = {}
    for b = 1, B do
      local id = start[b]
      if type(id) ~= "number" or id < 1 or id % 1 ~= 0 then
        check.fail(3, "%s: option 'start'[%d] must be a positive integer id, got %s", fname, b,
                   tostring(id))
      end
      s[b] = math.tointeger(id)
    end
    start = s
  end
  o.start = start
  return o
end

-- call step and check what comes back; returns log_probs (N,V), state, attention or nil
function M.call_step(fname, c, step, tokens, state, t, N)
  local lp, new_state, attn = step(glimpse.tensor(tokens), state, t)
  if not glimpse.is_tensor(lp) or lp:dim() ~= 2 or lp.shape[1] ~= N then
    raise("%s: step %d must return log_probs of shape (N,V) with N = %d rows, got %s", fname,
          t, N, check.shape(lp))
  end
  if c.stop > lp.shape[2] then
    raise("%s: option 'stop' is %d but step returns only %d classes", fname, c.stop,
          lp.shape[2])
  end
  if attn ~= nil and (not glimpse.is_tensor(attn) or attn:dim() < 1 or attn.shape[1] ~= N) then
    raise("%s: step %d: the attention it returns must be a tensor with N = %d rows, got %s",
          fname, t, N, check.shape(attn))
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
function M.run(fn)
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
-- The decoders call it as M.row_best, so the tests can swap in a reference.
function M.row_best(lp, n)
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

-- candidate order: score, then the lower beam, then the lower token
local function worse(s1, k1, v1, s2, k2, v2)
  if s1 ~= s2 then return s1 < s2 end
  if k1 ~= k2 then return k1 > k2 end
  return v1 > v2
end

--- M.candidates(lp (A*K, V), scores {A*K}, K, n) -> cs, ck, cv, counts, positive
-- decode.beam's ranking step: for each of the A items, the n best candidates (score
-- scores[row] + lp[row][v], beam k, token v) of its K rows, best first, ties broken towards
-- the lower beam, then the lower token, so the result does not depend on the order the
-- candidates arrive in; rows with score -inf and candidates that are -inf or NaN are
-- skipped.  Flat lists of n slots per item (item i's from (i-1)*n+1), counts[i] filled, and
-- whether any log-prob of a live beam was above 0 (then no early-stopping bound holds).
-- One engine call (gl_beam_candidates); M.candidates_lua is the same in Lua over
-- M.row_best, the reference the tests compare it with.
function M.candidates(lp, scores, K, n)
  return glimpse._beam_candidates(lp, scores, K, n)
end

function M.candidates_lua(lp, scores, K, n)
  local vals, ids = M.row_best(lp, n)
  local A = lp.shape[1] // K
  local out_s, out_k, out_v, counts, positive = {}, {}, {}, {}, false
  for a = 1, A do
    local cs, ck, cv, size, base = {}, {}, {}, 0, (a - 1) * K
    for k = 1, K do
      local sk = scores[base + k]
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
    counts[a] = size
    for i = 1, size do
      local j = (a - 1) * n + i
      out_s[j], out_k[j], out_v[j] = cs[i], ck[i], cv[i]
    end
  end
  return out_s, out_k, out_v, counts, positive
end

return M
