--- glimpse.figures -- the pictures the experiments write, one function per kind, on top of
-- glimpse.viz (labelled heatmaps) and glimpse.draw (lines and discs):
--
--   local figures = require "glimpse.plot.figures"
--   figures.seq2seq_alignments(dir, ds, items, {title = "reversal additive/soft"})
--   figures.points(path, "tsp", pts, truth, pred, "optimal", "predicted")
--   figures.pointer_attention(path, alignment, pred, #pts, "pointer attention")
--   figures.bits(path, batch, logits, 1, "ntm, length 6")
--   figures.weighting(path, extras.write, 1, T, "write weighting")
--
-- Each writes a PNG (or SVG when the path ends in .svg) and returns the path.
local viz = require "glimpse.plot.viz"
local draw = require "glimpse.plot.draw"
local planar = require "glimpse.planar"

local M = {}

local function check_path(fname, path)
  if type(path) ~= "string" or path == "" then
    error(string.format("figures.%s: path must be a non-empty string, got %s", fname,
                        tostring(path)), 3)
  end
end

--- figures.seq2seq_alignments(dir, ds, items, {title=""}) -> list of file names written:
--- alignment_K.png for each item (and alignment_1.svg).  ds: a seq2seq dataset (src strings,
--- tgt_vocab); items[k] = {index = i (into ds), ids = predicted target ids, alignment = rows
--- of attention weights (from Seq2Seq:decode's extras), ok = correct or not}.
function M.seq2seq_alignments(dir, ds, items, opts)
  check_path("seq2seq_alignments", dir)
  opts = opts or {}
  local names = {}
  for k, s in ipairs(items) do
    local rows, src, tgt = M.seq2seq_rows(ds, s)
    local title = string.format("%s %s", opts.title or "", s.ok and "(correct)" or "(wrong)")
    names[#names + 1] = string.format("alignment_%d.png", k)
    viz.alignment(rows, src, tgt, dir .. "/" .. names[#names], {title = title})
    if k == 1 then
      viz.alignment(rows, src, tgt, dir .. "/alignment_1.svg", {title = title})
    end
  end
  return names
end

--- figures.seq2seq_rows(ds, item) -> rows, src, tgt: an item of seq2seq_alignments as a
--- labelled map: the attention rows cut to the source, the source characters (a space as
--- "_") and the predicted tokens (with "<end>" when the <end> step has a row)
function M.seq2seq_rows(ds, s)
  local src = {}
  for ch in ds.src[s.index]:gmatch(".") do src[#src + 1] = ch == " " and "_" or ch end
  local tgt = {}
  for _, id in ipairs(s.ids) do tgt[#tgt + 1] = ds.tgt_vocab:token(id) end
  local rows = {}
  for t = 1, math.min(#s.alignment, #tgt + 1) do
    rows[t] = table.move(s.alignment[t], 1, #ds.src_ids[s.index], 1, {})
  end
  if #rows == #tgt + 1 then tgt[#tgt + 1] = "<end>" end
  while #tgt > #rows do table.remove(tgt) end
  return rows, src, tgt
end

-- ---------------------------------------------------------------------------------------
-- planar problems: the true and the predicted order / hull / tour side by side

local PANEL, MARGIN, HEAD = 260, 18, 26

local function panel(cv, ox, pts, seq, closed, title, colour)
  cv:rect(ox, HEAD, PANEL, PANEL, {fill = false, color = {0.75, 0.75, 0.75}})
  cv:text(title, ox + 4, 6, {scale = 1})
  local span = PANEL - 2 * MARGIN
  local function xy(p) return ox + MARGIN + p[1] * span, HEAD + MARGIN + (1 - p[2]) * span end
  local path = {}
  for k, i in ipairs(seq) do path[k] = {xy(pts[i])} end
  if #path >= 2 then cv:polyline(path, {closed = closed, color = colour, width = 2}) end
  for i, p in ipairs(pts) do
    local x, y = xy(p)
    cv:disc(x, y, 3, {color = {0.15, 0.15, 0.15}})
    if #pts <= 20 then cv:text(tostring(i), x + 4, y - 10, {scale = 1, color = {0.3, 0.3, 0.3}}) end
  end
  if seq[1] then
    local x, y = xy(pts[seq[1]])
    cv:disc(x, y, 5, {color = colour})
  end
end

--- figures.points(path, task, pts, truth, pred, title_truth, title_pred) -> path: two panels,
--- the true sequence (green) and the predicted one (red) over the points {x, y} in [0,1]^2;
--- closed polygons for "hull" and "tsp", an open path for "sort".
function M.points(path, task, pts, truth, pred, title_truth, title_pred)
  check_path("points", path)
  local cv = draw.Canvas(2 * PANEL + 10, PANEL + HEAD + 4)
  local closed = task ~= "sort"
  panel(cv, 0, pts, truth, closed, title_truth or "target", {0.1, 0.55, 0.2})
  panel(cv, PANEL + 10, pts, pred, closed, title_pred or "predicted", {0.85, 0.2, 0.1})
  cv:save(path)
  return path
end

--- figures.points_instance(path, ds, i, pred) -> path: figures.points for example i of a
--- datasets/points.lua dataset against the predicted positions pred, titled with what
--- the task measures (exact or not; hull area coverage; tour length against the optimum).
function M.points_instance(path, ds, i, pred)
  check_path("points_instance", path)
  local pts, truth = ds.points[i], ds.targets[i]
  local ok = table.concat(pred, ",") == table.concat(truth, ",")
  local tt, tp = "sorted by x", "predicted" .. (ok and " (exact)" or " (wrong)")
  if ds.task == "tsp" then
    tt = string.format("optimal tour, length %.3f", ds.tour_lengths[i])
    tp = string.format("predicted, length %s", planar.is_tour(pred, #pts)
                       and string.format("%.3f", planar.tour_length(pts, pred)) or "invalid")
  elseif ds.task == "hull" then
    local cov, why = planar.hull_coverage(pts, pred, truth)
    tt = string.format("true hull (%d vertices)", #truth)
    tp = string.format("predicted, coverage %.1f%%%s", 100 * cov,
                       why and (" (" .. why .. ")") or (ok and " exact" or ""))
  end
  return M.points(path, ds.task, pts, truth, pred, tt, tp)
end

--- figures.pointer_attention(path, alignment, pred, n, title) -> path (nil without rows):
--- the pointer's distribution per output step over the end slot and the n points.
--- alignment: rows of n + 1 weights (PointerNet:decode's extras.alignments[b]); pred: the
--- chosen positions (1-based points).
function M.pointer_attention(path, alignment, pred, n, title)
  check_path("pointer_attention", path)
  if not alignment or #alignment == 0 then return nil end
  local end_name = n < 10 and "E" or "end"      -- one-character labels stay horizontal
  local src = {end_name}
  for j = 1, n do src[j + 1] = tostring(j) end
  local tgt, rows = {}, {}
  for t, row in ipairs(alignment) do
    rows[t] = table.move(row, 1, n + 1, 1, {})
    tgt[t] = pred[t] and tostring(pred[t]) or end_name
  end
  viz.alignment(rows, src, tgt, path, {title = title, cell = n > 20 and 12 or 18,
                                       scale = n > 20 and 1 or 2})
  return path
end

-- ---------------------------------------------------------------------------------------
-- the copy task

local function sparse_labels(n)
  local t = {}
  for k = 1, n do t[k] = (k == 1 or k % 5 == 0) and tostring(k) or "" end
  return t
end

--- figures.bits(path, batch, logits, i, title) -> path: the copy task's sequence i, its
--- target bits above the output probabilities sigmoid(logits), over the copy steps only.
--- batch: copy_task's {targets (B,S,bits), lengths}; logits (B,S,bits) (NTM:decode's extras).
function M.bits(path, batch, logits, i, title)
  check_path("bits", path)
  local T = batch.lengths[i]
  local first = T + 2                     -- T inputs and the delimiter come first
  local tg = batch.targets[i]:narrow(1, first, T):transpose(1, 2):totable()
  local pr = logits[i]:detach():narrow(1, first, T):sigmoid():transpose(1, 2):totable()
  local rows, names = {}, {}
  for k = 1, #tg do rows[k], names[k] = tg[k], "target " .. k end
  local blank = {}
  for t = 1, T do blank[t] = 0 end
  rows[#rows + 1], names[#names + 1] = blank, ""
  for k = 1, #pr do rows[#rows + 1], names[#names + 1] = pr[k], "output " .. k end
  viz.alignment(rows, sparse_labels(T), names, path, {title = title, cell = 10, scale = 1})
  return path
end

-- rows (steps, N) cut to the slots any step uses.  The heads move circularly, so the window
-- starts after the longest run of unused slots (wrapping round).
local function used_window(rows)
  local used = {}
  for _, r in ipairs(rows) do
    for j, v in ipairs(r) do if v > 0.05 then used[j] = true end end
  end
  local N = #rows[1]
  local gap_end, best, run = 0, -1, 0
  for k = 1, 2 * N do
    local j = (k - 1) % N + 1
    if used[j] then run = 0 else
      run = run + 1
      if run > best and run <= N then best, gap_end = run, j end
    end
  end
  local first, count = 1, N
  if best > 0 and best < N then
    local margin = math.min(2, (best - 1) // 2)
    first = (gap_end - margin) % N + 1              -- a couple of unused slots on each side
    count = N - best + 2 * margin
  end
  local cut, slots = {}, {}
  for t, r in ipairs(rows) do
    local row = {}
    for k = 1, count do row[k] = r[(first + k - 2) % N + 1] end
    cut[t] = row
  end
  for k = 1, count do
    local j = (first + k - 2) % N + 1
    slots[k] = (k == 1 or k == count or j % 5 == 0) and tostring(j) or ""
  end
  return cut, slots
end

--- figures.weighting(path, trace, i, T, title) -> path: an NTM head's weighting over memory
--- slots per step for sequence i (trace: one (B,N) tensor per step, NTM:decode's
--- extras.write or extras.read, of a copy sequence of length T: T inputs, the delimiter, T
--- outputs), cut to the slots in use.
function M.weighting(path, trace, i, T, title)
  check_path("weighting", path)
  local rows = {}
  for t, w in ipairs(trace) do rows[t] = w[i]:totable() end
  local S = #rows
  local names = {}
  for t = 1, S do
    names[t] = (t == 1 or t == T or t == T + 1 or t == T + 2 or t == S) and
               (t <= T and "in" .. t or (t == T + 1 and "delim" or "out" .. (t - T - 1))) or ""
  end
  local cut, slots = used_window(rows)
  viz.alignment(cut, slots, names, path, {title = title, cell = 8, scale = 1})
  return path
end

return M
