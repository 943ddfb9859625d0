--- glimpse.decode.beam -- beam search over all B*beam hypotheses in one step call per time
-- step, with GNMT's length penalty ((5+|Y|)/6)^alpha (Wu et al. 2016, eq. 14), n-best
-- lists and alignments.  As fairseq's SequenceGenerator and OpenNMT's Beam, an end token
-- finishes a hypothesis only when it ranks among the top `beam` candidates, so beam=1 is
-- greedy decoding.  Published as decode.beam.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local S = require "glimpse.decode.shared"
local capture = require "glimpse.attention.capture"

local M = {}

local NEG_INF = S.NEG_INF

-- GNMT's length penalty lp(len) = ((5 + len) / 6)^alpha
local function length_penalty(len, alpha)
  if alpha == 0 then return 1 end
  return ((5 + len) / 6) ^ alpha
end

local function extend(list, x)
  local n = #list
  local out = table.move(list, 1, n, 1, {})
  out[n + 1] = x
  return out
end

-- The maps attention.capture recorded along a hypothesis: trail is its last step's node
-- {parent, recs (that step's records, shared by every row), row}; per key (path, ":field")
-- the rows of each step in order, stacked into (T, ...) (a list when their shapes differ).
local function trail_maps(trail)
  local nodes = {}
  while trail do nodes[#nodes + 1] = trail; trail = trail.parent end
  local lists, order = {}, {}
  for i = #nodes, 1, -1 do
    local n = nodes[i]
    for _, rec in ipairs(n.recs) do
      local m = rec.map
      if m:dim() >= 1 and m.shape[1] == n.rows then
        local key = rec.path .. (rec.field and ":" .. rec.field or "")
        local l = lists[key]
        if not l then l = {}; lists[key] = l; order[#order + 1] = key end
        l[#l + 1] = m:select(1, n.row)
      end
    end
  end
  if #order == 0 then return nil end
  local maps = {}
  for _, key in ipairs(order) do
    local ok, t = pcall(glimpse.stack, lists[key], 1)
    maps[key] = ok and t or lists[key]
  end
  return maps
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
-- {attention rows per step, the end token's included} or nil, maps}.  maps: under
-- glimpse.attention.capture, the hypothesis's own rows of every map recorded during the
-- steps, {key -> (T, ...)} (key: the module's path, ":field" for a second map), the end
-- token's step included; nil when nothing was captured.
function M.beam(step, state, opts)
  local fname = "decode.beam"
  local c = S.common_opts(fname, S.BEAM_OPTIONS, step, state, opts)
  local K, n_best, alpha = c.beam, c.n_best, c.length_penalty
  if K > M.MAX_BEAM then
    check.fail(2, "decode.beam: option 'beam' (%d) is larger than decode.MAX_BEAM (%d): the " ..
               "search keeps batch*beam rows of state", K, M.MAX_BEAM)
  end
  if n_best > K then
    check.fail(2, "decode.beam: option 'n_best' (%d) cannot exceed option 'beam' (%d)", n_best,
               K)
  end
  if math.abs(alpha) == math.huge then
    check.fail(2, "decode.beam: option 'length_penalty' must be a finite number (GNMT's " ..
               "alpha), got %s", tostring(alpha))
  end
  local B, stop, max_len = c.batch, c.stop, c.max_len

  local function body()
    -- K rows per item: item b's beams are rows (b-1)*K+1 .. b*K
    local expand = {}
    for b = 1, B do for k = 1, K do expand[(b - 1) * K + k] = b end end
    local memo = S.keep_memo(c.keep)
    state = S.reorder_value(state, expand, B, "state", memo, fname)
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
                                       alignment = h.align, trail = h.trail, order = serial}
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
      local mark = capture.active and capture.mark()
      lp, state, attn = S.call_step(fname, c, step, feed, state, t, N)
      local recs = mark and capture.since(mark)
      if recs and #recs == 0 then recs = nil end
      local scores = {}
      for i, b in ipairs(active) do
        for k = 1, K do scores[(i - 1) * K + k] = beams[b][k].score end
      end
      local cs, ck, cv, counts, positive = S.candidates(lp, scores, K, 2 * K)
      if positive then exact_bound = false end
      local arows = attn and attn:totable()
      any_attn = any_attn or arows ~= nil
      local next_active, idx = {}, {}
      for i, b in ipairs(active) do
        local base, first = (i - 1) * K, (i - 1) * 2 * K
        local new = {}
        for rank = 1, counts[i] do
          local s, k, v = cs[first + rank], ck[first + rank], cv[first + rank]
          local parent = beams[b][k]
          local function align()       -- the parent's alignment and this step's row
            return arows and extend(parent.align, arows[base + k]) or parent.align
          end
          local function trail()       -- the same for the captured maps
            return recs and {parent = parent.trail, recs = recs, rows = N, row = base + k}
                   or parent.trail
          end
          if v == stop then
            if rank <= K then
              finish(b, {tokens = parent.tokens, score = s, align = align(), trail = trail()},
                     t, true)
            end
          elseif #new < K then
            new[#new + 1] = {score = s, tokens = extend(parent.tokens, v), align = align(),
                             trail = trail(), last = v, row = base + k}
          end
        end
        if #new == 0 and #finished[b] == 0 then
          -- every candidate NaN or -inf (a model gone wrong): nothing can be ranked, so the
          -- best beam so far ends here, flagged, rather than leaving the item with no answer
          local h = beams[b][1]
          finish(b, {tokens = h.tokens, score = NEG_INF, align = h.align, trail = h.trail}, t - 1,
                 false)
          finished[b][#finished[b]].no_finite_score = true
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
                      trail = new[1].trail, last = new[1].last, row = new[1].row}
          end
          beams[b] = new
          next_active[#next_active + 1] = b
          for k = 1, K do idx[#idx + 1] = new[k].row end
        end
      end
      if #next_active == 0 then break end
      local dropped = #next_active < #active
      local rmemo = S.keep_memo(c.keep)
      if not dropped then
        setmetatable(rmemo, {__index = function(_, v) return per_item[v] and v or nil end})
      end
      state = S.reorder_value(state, idx, N, "state", rmemo, fname)
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
                      alignment = any_attn and h.alignment or nil,
                      maps = trail_maps(h.trail), no_finite_score = h.no_finite_score}
      end
    end
    return hyps
  end
  local hyps = S.run(body)
  return hyps
end

return M
