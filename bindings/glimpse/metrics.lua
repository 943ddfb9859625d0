--- glimpse.metrics -- how good a captioner is (BLEU, CIDEr-D, ROUGE-L against several
-- references per image), and where it looks; how well decoded sequences match their
-- references (exact_match, token_accuracy).
--
--   local metrics = require "glimpse.metrics"
--   local b = metrics.bleu({"a bag above a coat"}, {{"a bag above a coat", "a bag over a coat"}})
--   print(b[1], b[2], b[3], b[4], b.brevity_penalty)          -- BLEU-1..4 in [0,1]
--   local cider, per_caption = metrics.cider(candidates, references)  -- CIDEr-D, 0..10
--   local rouge = metrics.rouge_l(candidates, references)             -- ROUGE-L in [0,1]
--   local inside, chance = metrics.attention_in_box(alphas, boxes, {8, 8}, {64, 64})
local glimpse = require "glimpse"
local check = require "glimpse.check"

local M = {}

-- ---------------------------------------------------------------------------------------
-- BLEU
--
-- Corpus BLEU (Papineni et al. 2002): modified (clipped) n-gram precisions summed over
-- the whole corpus, their geometric mean over n = 1..N, times the brevity penalty
-- BP = exp(1 - r/c) when the candidates' total length c is below the effective reference
-- length r (for each candidate the reference length closest to its own, the shorter one on
-- a tie), else 1.  No smoothing: a corpus with no matching 4-gram has BLEU-4 = 0.

local function tokens_of(s, what, level, fname)
  fname = fname or "metrics.bleu"
  if type(s) == "string" then
    local out = {}
    for w in s:gmatch("%S+") do out[#out + 1] = w end
    return out
  end
  if type(s) ~= "table" then
    error(string.format("%s: %s must be a string or a list of tokens, got %s", fname, what,
                        type(s)), level + 1)
  end
  for i, w in ipairs(s) do
    if type(w) ~= "string" and type(w) ~= "number" then
      error(string.format("%s: %s token %d is a %s (strings or ids expected)", fname, what, i,
                          type(w)), level + 1)
    end
  end
  return s
end

-- n-gram -> count for one token list
local function ngram_counts(toks, n)
  local counts = {}
  for i = 1, #toks - n + 1 do
    local key = table.concat(toks, "\0", i, i + n - 1)
    counts[key] = (counts[key] or 0) + 1
  end
  return counts
end

--- metrics.bleu(candidates, references, {max_n=4}) -> scores
-- candidates: a list of C captions (strings, split on spaces, or token lists);
-- references: a list of C entries, each the candidate's list of reference captions (strings
-- or token lists); an entry that is a single string (or a list of numeric ids) is one
-- reference.
-- scores[n] (n = 1..max_n): corpus BLEU-n in [0,1]; scores.precisions[n] the clipped n-gram
-- precisions; scores.brevity_penalty; scores.length (c) and scores.ref_length (r).
function M.bleu(candidates, references, opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("metrics.bleu: opts must be a table or nil, got " .. type(opts), 2)
  end
  opts = opts or {}
  local max_n = opts.max_n or 4
  if math.type(max_n) ~= "integer" or max_n < 1 then
    error("metrics.bleu: opts.max_n must be a positive integer, got " .. tostring(max_n), 2)
  end
  if type(candidates) ~= "table" then
    error("metrics.bleu: argument #1 (candidates) must be a list of captions, got " ..
          type(candidates), 2)
  end
  if type(references) ~= "table" then
    error("metrics.bleu: argument #2 (references) must be a list of reference lists, got " ..
          type(references), 2)
  end
  if #candidates ~= #references then
    error(string.format("metrics.bleu: %d candidates but %d reference lists", #candidates,
                        #references), 2)
  end
  local matched, total = {}, {}
  for n = 1, max_n do matched[n], total[n] = 0, 0 end
  local c_len, r_len = 0, 0
  for i = 1, #candidates do
    local cand = tokens_of(candidates[i], "candidate " .. i, 2)
    local refs = references[i]
    if type(refs) == "string" or (type(refs) == "table" and type(refs[1]) == "number") then
      refs = {refs}                          -- one reference: a string or a list of ids
    end
    if type(refs) ~= "table" or #refs == 0 then
      error(string.format("metrics.bleu: candidate %d has no references", i), 2)
    end
    local ref_toks = {}
    for j, r in ipairs(refs) do ref_toks[j] = tokens_of(r, "reference " .. j .. " of " .. i, 2) end
    -- effective reference length: the closest to the candidate's, the shorter on a tie
    local best
    for _, r in ipairs(ref_toks) do
      local d, bd = math.abs(#r - #cand), best and math.abs(best - #cand)
      if not best or d < bd or (d == bd and #r < best) then best = #r end
    end
    c_len, r_len = c_len + #cand, r_len + best
    for n = 1, max_n do
      local cc = ngram_counts(cand, n)
      local maxref = {}
      for _, r in ipairs(ref_toks) do
        for k, v in pairs(ngram_counts(r, n)) do
          if (maxref[k] or 0) < v then maxref[k] = v end
        end
      end
      for k, v in pairs(cc) do matched[n] = matched[n] + math.min(v, maxref[k] or 0) end
      total[n] = total[n] + math.max(#cand - n + 1, 0)
    end
  end
  local out = {precisions = {}, length = c_len, ref_length = r_len}
  local bp
  if c_len == 0 then bp = 0
  elseif c_len > r_len then bp = 1
  else bp = math.exp(1 - r_len / c_len) end
  out.brevity_penalty = bp
  local logsum = 0
  for n = 1, max_n do
    local p = total[n] > 0 and matched[n] / total[n] or 0
    out.precisions[n] = p
    if p > 0 and logsum > -math.huge then logsum = logsum + math.log(p) else logsum = -math.huge end
    out[n] = logsum == -math.huge and 0 or bp * math.exp(logsum / n)
  end
  return out
end

-- ---------------------------------------------------------------------------------------
-- CIDEr-D and ROUGE-L, as the coco-caption evaluation code computes them
--
-- Both take captions as metrics.bleu does and return the corpus score (the mean over the
-- candidates) and the list of per-candidate scores.  Captions are split on white space; the
-- coco-caption code first runs the PTB tokenizer (lower case, punctuation removed), which
-- the captions of this project do not need.

-- candidates and references as token lists: cands[i], refs[i][j]
local function corpus_tokens(fname, candidates, references, level)
  if type(candidates) ~= "table" then
    error(string.format("%s: argument #1 (candidates) must be a list of captions, got %s", fname,
                        type(candidates)), level + 1)
  end
  if type(references) ~= "table" then
    error(string.format("%s: argument #2 (references) must be a list of reference lists, got %s",
                        fname, type(references)), level + 1)
  end
  if #candidates ~= #references then
    error(string.format("%s: %d candidates but %d reference lists", fname, #candidates,
                        #references), level + 1)
  end
  local cands, refs = {}, {}
  for i = 1, #candidates do
    cands[i] = tokens_of(candidates[i], "candidate " .. i, level + 1, fname)
    local list = references[i]
    if type(list) == "string" or (type(list) == "table" and type(list[1]) == "number") then
      list = {list}
    end
    if type(list) ~= "table" or #list == 0 then
      error(string.format("%s: candidate %d has no references", fname, i), level + 1)
    end
    refs[i] = {}
    for j, r in ipairs(list) do
      refs[i][j] = tokens_of(r, "reference " .. j .. " of " .. i, level + 1, fname)
    end
  end
  return cands, refs
end

-- every n-gram of n = 1..max_n: counts[n][key]
local function all_ngrams(toks, max_n)
  local out = {}
  for n = 1, max_n do out[n] = ngram_counts(toks, n) end
  return out
end

-- CIDEr-D's options, checked: sigma, max_n
local function cider_opts(fname, opts, level)
  if opts ~= nil and type(opts) ~= "table" then
    error(fname .. ": opts must be a table or nil, got " .. type(opts), level + 1)
  end
  opts = opts or {}
  local sigma, max_n = opts.sigma or 6, opts.max_n or 4
  if type(sigma) ~= "number" or sigma <= 0 then
    error(fname .. ": opts.sigma must be a positive number, got " .. tostring(sigma), level + 1)
  end
  if math.type(max_n) ~= "integer" or max_n < 1 then
    error(fname .. ": opts.max_n must be a positive integer, got " .. tostring(max_n), level + 1)
  end
  return sigma, max_n
end

-- document frequencies of the reference sets refs[i] (lists of token lists): in how many
-- sets each n-gram occurs; also every reference's n-grams, gram[i][j]
local function document_frequencies(refs, max_n)
  local df, grams = {}, {}
  for i, list in ipairs(refs) do
    local seen = {}
    grams[i] = {}
    for j, r in ipairs(list) do
      local g = all_ngrams(r, max_n)
      grams[i][j] = g
      for n = 1, max_n do
        for k in pairs(g[n]) do
          if not seen[k] then seen[k] = true; df[k] = (df[k] or 0) + 1 end
        end
      end
    end
  end
  return df, grams
end

-- CIDEr-D of each candidate cands[i] against its references refs[i] (token lists; ref_grams
-- their n-grams) with the document frequencies df of a corpus of N reference sets
local function cider_scores(cands, refs, ref_grams, df, N, sigma, max_n)
  local log_n = math.log(N)
  local function vector(g)                  -- TF-IDF vectors and their norms per n
    local vec, norm = {}, {}
    for n = 1, max_n do
      local v, s = {}, 0
      for k, c in pairs(g[n]) do
        local w = c * (log_n - math.log(math.max(1, df[k] or 0)))
        v[k], s = w, s + w * w
      end
      vec[n], norm[n] = v, math.sqrt(s)
    end
    return vec, norm
  end
  local scores, total = {}, 0
  local two_s2 = 2 * sigma * sigma
  for i = 1, #cands do
    local cvec, cnorm = vector(all_ngrams(cands[i], max_n))
    local sum = 0
    for j, g in ipairs(ref_grams[i]) do
      local rvec, rnorm = vector(g)
      local delta = math.max(#cands[i] - 1, 0) - math.max(#refs[i][j] - 1, 0)   -- in bigrams
      local pen = math.exp(-(delta * delta) / two_s2)
      for n = 1, max_n do
        local v = 0
        for k, w in pairs(cvec[n]) do
          local wr = rvec[n][k]
          if wr then v = v + math.min(w, wr) * wr end
        end
        if cnorm[n] ~= 0 and rnorm[n] ~= 0 then v = v / (cnorm[n] * rnorm[n]) end
        sum = sum + v * pen
      end
    end
    scores[i] = 10 * sum / max_n / #ref_grams[i]
    total = total + scores[i]
  end
  return #cands > 0 and total / #cands or 0, scores
end

--- metrics.cider(candidates, references, {sigma=6, max_n=4}) -> score, scores
-- CIDEr-D (Vedantam et al. 2015) as coco-caption computes it.  For each n = 1..max_n a
-- caption is a vector of TF-IDF weights: an n-gram's count times log(N / df), N the number
-- of candidates in the corpus and df the number of candidates among whose references it
-- occurs (at least 1).  The candidate's vector is compared with each reference's: the sum
-- over the candidate's n-grams of min(w_cand, w_ref) * w_ref (candidate counts clipped by
-- the reference's), divided by both norms (0 when a norm is 0), times the Gaussian length
-- penalty exp(-delta^2 / (2 sigma^2)), delta the difference in length -- counted, as in
-- coco-caption, in bigrams, so one word less than the caption.  A candidate's score is the
-- mean over n and over its references, times 10; score is the mean over the candidates.
-- The document frequencies come from the references passed, so one candidate alone (N = 1)
-- scores 0 whatever it says: CIDEr-D is a corpus measure (metrics.cider_scorer takes them
-- from a corpus of one's choosing).  scores[i]: candidate i's score.
function M.cider(candidates, references, opts)
  local fname = "metrics.cider"
  local sigma, max_n = cider_opts(fname, opts, 2)
  local cands, refs = corpus_tokens(fname, candidates, references, 2)
  if #cands == 0 then return 0, {} end
  local df, ref_grams = document_frequencies(refs, max_n)
  return cider_scores(cands, refs, ref_grams, df, #cands, sigma, max_n)
end

--- metrics.cider_scorer(corpus, {sigma=6, max_n=4}) -> score(candidates, references) ->
--- mean, scores
-- CIDEr-D with the document frequencies of a fixed corpus: corpus is a list of reference
-- sets (each a list of captions, strings or token lists, one set per image), e.g. every
-- training image's references, as self-critical training scores its samples (Rennie et al.
-- 2017). The returned function scores any number of candidates, one alone included, each
-- against its own references, as metrics.cider does with df and N from the corpus.
function M.cider_scorer(corpus, opts)
  local fname = "metrics.cider_scorer"
  local sigma, max_n = cider_opts(fname, opts, 2)
  if type(corpus) ~= "table" or #corpus == 0 then
    error(fname .. ": argument #1 (corpus) must be a non-empty list of reference sets, got " ..
          (type(corpus) == "table" and "an empty list" or type(corpus)), 2)
  end
  local none = {}                                   -- corpus_tokens wants a candidate each
  for i = 1, #corpus do none[i] = "" end
  local _, corpus_refs = corpus_tokens(fname, none, corpus, 2)
  local df = document_frequencies(corpus_refs, max_n)
  local N = #corpus_refs
  return function(candidates, references)
    local cands, refs = corpus_tokens("cider_scorer's score", candidates, references, 2)
    local ref_grams = select(2, document_frequencies(refs, max_n))
    return cider_scores(cands, refs, ref_grams, df, N, sigma, max_n)
  end
end

-- length of the longest common subsequence of two token lists
local function lcs(a, b)
  local prev, cur = {}, {}
  for j = 0, #b do prev[j] = 0 end
  for i = 1, #a do
    cur[0] = 0
    for j = 1, #b do
      if a[i] == b[j] then cur[j] = prev[j - 1] + 1
      else cur[j] = math.max(prev[j], cur[j - 1]) end
    end
    prev, cur = cur, prev
  end
  return prev[#b]
end

--- metrics.rouge_l(candidates, references, {beta=1.2}) -> score, scores
-- ROUGE-L (Lin 2004) as coco-caption computes it: for each reference the longest common
-- subsequence l with the candidate gives precision l / |candidate| and recall l / |reference|;
-- P and R are the largest over the references (possibly from different ones), and the score
-- is the F-measure (1 + beta^2) P R / (R + beta^2 P), 0 when P or R is 0 (also for an empty
-- candidate).  scores[i]: candidate i's score; score: their mean.
function M.rouge_l(candidates, references, opts)
  local fname = "metrics.rouge_l"
  if opts ~= nil and type(opts) ~= "table" then
    error(fname .. ": opts must be a table or nil, got " .. type(opts), 2)
  end
  local beta = (opts or {}).beta or 1.2
  if type(beta) ~= "number" or beta <= 0 then
    error(fname .. ": opts.beta must be a positive number, got " .. tostring(beta), 2)
  end
  local cands, refs = corpus_tokens(fname, candidates, references, 2)
  local scores, total, b2 = {}, 0, beta * beta
  for i, c in ipairs(cands) do
    local p, r = 0, 0
    for _, ref in ipairs(refs[i]) do
      local l = lcs(ref, c)
      if #c > 0 then p = math.max(p, l / #c) end
      if #ref > 0 then r = math.max(r, l / #ref) end
    end
    scores[i] = (p > 0 and r > 0) and (1 + b2) * p * r / (r + b2 * p) or 0
    total = total + scores[i]
  end
  return #cands > 0 and total / #cands or 0, scores
end

-- ---------------------------------------------------------------------------------------
-- attention inside boxes
--
-- The share of an attention map's mass that falls inside a box of the image.  A grid cell
-- covers a rectangle of the image (cell r of h covers rows (r-1)*H/h .. r*H/h in continuous
-- pixel coordinates); a box {x1,y1,x2,y2} (1-based inclusive pixels) covers
-- [x1-1, x2] x [y1-1, y2].  Each cell counts with the fraction of its area inside the box,
-- so the score is exact for grids that do not divide the image evenly.

local function pair(v, what, level)
  if type(v) ~= "table" or type(v[1]) ~= "number" or type(v[2]) ~= "number" or v[1] <= 0
     or v[2] <= 0 then
    error(string.format("metrics.attention_in_box: %s must be a table {h, w} of positive " ..
                        "numbers, got %s", what, tostring(v)), level + 1)
  end
  return v[1], v[2]
end

-- overlap length of [a0, a1] and [b0, b1]
local function overlap(a0, a1, b0, b1)
  return math.max(0, math.min(a1, b1) - math.max(a0, b0))
end

--- metrics.cell_weights(box, grid_hw, image_hw) -> list of L = h*w fractions: the share of
-- each grid cell's area (row-major) that lies inside box {x1,y1,x2,y2} (1-based inclusive
-- pixels).
function M.cell_weights(box, grid_hw, image_hw)
  local gh, gw = pair(grid_hw, "grid_hw", 2)
  local H, W = pair(image_hw, "image_hw", 2)
  local ch, cw = H / gh, W / gw
  local x0, y0, x1, y1 = box[1] - 1, box[2] - 1, box[3], box[4]
  local out = {}
  for r = 1, gh do
    local fy = overlap((r - 1) * ch, r * ch, y0, y1) / ch
    for c = 1, gw do
      out[(r - 1) * gw + c] = fy * overlap((c - 1) * cw, c * cw, x0, x1) / cw
    end
  end
  return out
end

local function check_box(b, t, level)
  if type(b) ~= "table" or #b ~= 4 then
    error(string.format("metrics.attention_in_box: box %d must be {x1, y1, x2, y2} or nil, got %s",
                        t, tostring(b)), level + 1)
  end
  for k = 1, 4 do
    if type(b[k]) ~= "number" then
      error(string.format("metrics.attention_in_box: box %d entry %d is not a number", t, k),
            level + 1)
    end
  end
  if b[3] < b[1] or b[4] < b[2] then
    error(string.format("metrics.attention_in_box: box %d {%g,%g,%g,%g} has x2 < x1 or y2 < y1",
                        t, b[1], b[2], b[3], b[4]), level + 1)
  end
end

--- metrics.attention_in_box(alphas (T,L), boxes, grid_hw {h,w}, image_hw {H,W})
---   -> inside, chance
-- alphas: one caption's attention maps, row t over the L = h*w grid cells (row-major), as a
-- tensor or a table of T rows.  boxes: T entries, boxes[t] = {x1,y1,x2,y2} of the item word
-- t names, or nil (false, or {0,0,0,0}) for words that name nothing.  inside[t]: the share of
-- row t's mass inside boxes[t] (rows are normalised by their sum), nil where there is no
-- box; chance[t]: the share a uniform map would put there (the box's area fraction).
function M.attention_in_box(alphas, boxes, grid_hw, image_hw)
  local rows = alphas
  if glimpse.is_tensor(alphas) then
    if alphas:dim() ~= 2 then
      check.fail(2, "metrics.attention_in_box: alphas must be (T,L), got shape %s",
                 check.shape(alphas))
    end
    rows = alphas:totable()
  elseif type(alphas) ~= "table" then
    error("metrics.attention_in_box: alphas must be a (T,L) tensor or a table of rows, got " ..
          type(alphas), 2)
  end
  if type(boxes) ~= "table" then
    error("metrics.attention_in_box: boxes must be a table of T boxes (nil where none), got " ..
          type(boxes), 2)
  end
  local gh, gw = pair(grid_hw, "grid_hw", 2)
  pair(image_hw, "image_hw", 2)
  local L = gh * gw
  local inside, chance = {}, {}
  for t = 1, #rows do
    local row, b = rows[t], boxes[t]
    if type(row) ~= "table" or #row ~= L then
      error(string.format("metrics.attention_in_box: alpha row %d has %s entries, the %dx%d " ..
                          "grid has %d", t, type(row) == "table" and #row or type(row), gh, gw, L), 2)
    end
    if b and not (b[1] == 0 and b[2] == 0 and b[3] == 0 and b[4] == 0) then
      check_box(b, t, 2)
      local w = M.cell_weights(b, grid_hw, image_hw)
      local mass, sum, area = 0, 0, 0
      for i = 1, L do
        mass = mass + row[i] * w[i]
        sum = sum + row[i]
        area = area + w[i]
      end
      inside[t] = sum > 0 and mass / sum or 0
      chance[t] = area / L
    end
  end
  return inside, chance
end


-- ---------------------------------------------------------------------------------------
-- sequence matches (from any decoder's output lists)

local function check_pairs(fname, preds, refs, level)
  if type(preds) ~= "table" or type(refs) ~= "table" then
    error(string.format("%s: predictions and references must be lists of sequences, got %s " ..
                        "and %s", fname, type(preds), type(refs)), level + 1)
  end
  if #preds ~= #refs then
    error(string.format("%s: %d predictions for %d references", fname, #preds, #refs), level + 1)
  end
  for i = 1, #preds do
    if type(preds[i]) ~= "table" or type(refs[i]) ~= "table" then
      error(string.format("%s: entry %d must be two lists (ids or tokens), got %s and %s", fname,
                          i, type(preds[i]), type(refs[i])), level + 1)
    end
  end
end

--- metrics.exact_match(preds, refs) -> share of rows whose sequence equals the reference
--- (lists of ids or tokens; 0 for no rows), and the number of matching rows
function M.exact_match(preds, refs)
  check_pairs("metrics.exact_match", preds, refs, 2)
  local right = 0
  for i = 1, #preds do
    local a, b = preds[i], refs[i]
    local same = #a == #b
    for t = 1, #b do if not same then break end; same = a[t] == b[t] end
    if same then right = right + 1 end
  end
  return #preds > 0 and right / #preds or 0, right
end

--- metrics.token_accuracy(preds, refs) -> share of reference positions t where pred[t] ==
--- ref[t] (a missing prediction counts wrong; extra predicted tokens are not counted), and
--- the numbers of right and reference tokens
function M.token_accuracy(preds, refs)
  check_pairs("metrics.token_accuracy", preds, refs, 2)
  local right, total = 0, 0
  for i = 1, #preds do
    local a, b = preds[i], refs[i]
    for t = 1, #b do
      if a[t] == b[t] then right = right + 1 end
    end
    total = total + #b
  end
  return total > 0 and right / total or 0, right, total
end

return M
