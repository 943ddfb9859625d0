--- glimpse.models.captioner.familiar (also glimpse.captioner.familiar) -- is an image like
-- the ones a captioner was trained on?  A model knows only its training distribution: shown
-- a photo, noise or a blank page it still says a fluent caption.  This file measures a few
-- statistics of an image and compares them with the range they took on training images
-- (a small summary kept in the checkpoint's metadata as "familiar"):
--   colour      mean spread max(R,G,B) - min(R,G,B) of the picture as given (0: grey)
--   background  the 10th percentile of the grey values (the scenes: black, 0)
--   median      the median grey value
--   ink         share of pixels brighter than INK (away from the background)
--   hist        L1 distance of the 16-bin grey histogram to the training images' mean one
--   edges       mean |difference| between neighbouring pixels (noise: large)
--   blobs       connected regions of ink of at least MIN_BLOB pixels (items)
--   largest     the largest such region's bounding-box side, as a share of the image side
-- An image is unfamiliar when a statistic lies outside [lo - margin, hi + margin], lo and hi
-- the least and greatest value on the training images, margin a tenth of that range (and
-- at least a small floor).  docs/experiments/caption.md measures how often it fires.
--
--   local familiar = require "glimpse.models.captioner.familiar"
--   local summary = familiar.summary(ds.images)           -- (B,C,H,W) in [0,1]
--   local ok, reasons = familiar.judge(summary, familiar.stats(img))
local glimpse = require "glimpse"
local check = require "glimpse.check"

local M = {}

M.INK = 0.1          -- a grey value above this is ink, not background
M.MIN_BLOB = 12      -- pixels a region of ink needs to count as one item
M.BINS = 16
M.NAMES = {"colour", "background", "median", "ink", "hist", "edges", "blobs", "largest"}
-- the least margin of each statistic (its range on the scenes can be nil, e.g. colour)
local FLOOR = {colour = 0.02, background = 0.02, median = 0.02, ink = 0.01, hist = 0.05,
               edges = 0.005, blobs = 0.5, largest = 0.02}
local WHAT = {colour = "colour", background = "background level", median = "median grey",
              ink = "share of ink pixels", hist = "grey histogram distance",
              edges = "edge energy", blobs = "item count", largest = "largest item size"}

-- the flat values of a (C,H,W) tensor (a copy first: a view may not start at its storage)
local function flat(t)
  return glimpse._data_get(t * 1)
end

-- colour spread of a (C,H,W) picture in [0,1]: 0 for grey (1 or 2 channels)
function M.colour(img)
  if not glimpse.is_tensor(img) or img:dim() ~= 3 or img.shape[1] < 3 then return 0 end
  local n = img.shape[2] * img.shape[3]
  local v = flat(img:narrow(1, 1, 3))
  local s = 0
  for p = 1, n do
    local r, g, b = v[p], v[n + p], v[2 * n + p]
    s = s + math.max(r, g, b) - math.min(r, g, b)
  end
  return s / n
end

-- the 16-bin histogram (shares) of grey values g
local function histogram(g)
  local h = {}
  for b = 1, M.BINS do h[b] = 0 end
  for _, x in ipairs(g) do
    local b = math.min(M.BINS, math.max(1, math.floor(x * M.BINS) + 1))
    h[b] = h[b] + 1
  end
  for b = 1, M.BINS do h[b] = h[b] / #g end
  return h
end

-- regions of ink (4-connected) of at least MIN_BLOB pixels: their count and the largest
-- bounding-box side among them (pixels)
local function blobs(g, H, W)
  local seen, count, largest, stack = {}, 0, 0, {}
  for p0 = 1, H * W do
    if g[p0] > M.INK and not seen[p0] then
      seen[p0] = true
      stack[1] = p0
      local top, area = 1, 0
      local r1, r2, c1, c2 = H, 1, W, 1
      while top > 0 do
        local p = stack[top]
        top = top - 1
        area = area + 1
        local r, c = (p - 1) // W + 1, (p - 1) % W + 1
        if r < r1 then r1 = r end
        if r > r2 then r2 = r end
        if c < c1 then c1 = c end
        if c > c2 then c2 = c end
        local function push(q)
          if not seen[q] and g[q] > M.INK then
            seen[q] = true
            top = top + 1
            stack[top] = q
          end
        end
        if c > 1 then push(p - 1) end
        if c < W then push(p + 1) end
        if r > 1 then push(p - W) end
        if r < H then push(p + W) end
      end
      if area >= M.MIN_BLOB then
        count = count + 1
        largest = math.max(largest, r2 - r1 + 1, c2 - c1 + 1)
      end
    end
  end
  return count, largest
end

--- familiar.stats(img (C,H,W) in [0,1], colour) -> {colour=, background=, median=, ink=,
--- hist (the histogram), edges=, blobs=, largest=} of the image as the model sees it (its
--- channels and size); colour: that of the picture before it was made grey (default: img's)
function M.stats(img, colour)
  if not glimpse.is_tensor(img) or img:dim() ~= 3 then
    check.fail(2, "familiar.stats: img must be a (C,H,W) tensor, got %s", check.shape(img))
  end
  local H, W = img.shape[2], img.shape[3]
  local grey = img.shape[1] == 1 and img or img:mean(1, true)
  local g = flat(grey)
  local sorted = table.move(g, 1, #g, 1, {})
  table.sort(sorted)
  local ink, edges = 0, 0
  for p = 1, #g do
    if g[p] > M.INK then ink = ink + 1 end
    if p % W ~= 0 then edges = edges + math.abs(g[p + 1] - g[p]) end
    if p + W <= #g then edges = edges + math.abs(g[p + W] - g[p]) end
  end
  local n, L = blobs(g, H, W)
  return {colour = colour or M.colour(img), background = sorted[math.max(1, #g // 10)],
          median = sorted[(#g + 1) // 2], ink = ink / #g,
          edges = edges / math.max(1, (H - 1) * W + H * (W - 1)), blobs = n,
          largest = L / math.max(H, W), histogram = histogram(g)}
end

local function hist_distance(h, ref)
  local d = 0
  for b = 1, M.BINS do d = d + math.abs(h[b] - ref[b]) end
  return d
end

--- familiar.summary(images (B,C,H,W) in [0,1] or a list of (C,H,W)) -> the summary kept in a
--- checkpoint: {n=, size={H, W}, histogram= (the mean one), range={name = {lo, hi}}}
function M.summary(images)
  local list = {}
  if glimpse.is_tensor(images) and images:dim() == 4 then
    for b = 1, images.shape[1] do list[b] = images[b] end
  elseif type(images) == "table" and #images > 0 then
    list = images
  else
    check.fail(2, "familiar.summary: images must be a (B,C,H,W) tensor or a list of (C,H,W), got %s",
               check.shape(images))
  end
  local all, mean = {}, {}
  for b = 1, M.BINS do mean[b] = 0 end
  for i, im in ipairs(list) do
    all[i] = M.stats(im)
    for b = 1, M.BINS do mean[b] = mean[b] + all[i].histogram[b] / #list end
  end
  local range = {}
  for _, k in ipairs(M.NAMES) do range[k] = {math.huge, -math.huge} end
  for _, s in ipairs(all) do
    s.hist = hist_distance(s.histogram, mean)
    for _, k in ipairs(M.NAMES) do
      range[k][1] = math.min(range[k][1], s[k])
      range[k][2] = math.max(range[k][2], s[k])
    end
  end
  local function r4(x) return math.floor(x * 1e4 + 0.5) / 1e4 end
  for _, k in ipairs(M.NAMES) do range[k] = {r4(range[k][1]), r4(range[k][2])} end
  for b = 1, M.BINS do mean[b] = r4(mean[b]) end
  return {n = #list, size = {list[1].shape[2], list[1].shape[3]}, histogram = mean, range = range}
end

--- familiar.judge(summary, stats) -> familiar (boolean), reasons (a list of strings, one per
--- statistic outside the training range, e.g. "colour 0.31 (training images 0-0)")
function M.judge(summary, s)
  s.hist = hist_distance(s.histogram, summary.histogram)
  local reasons = {}
  for _, k in ipairs(M.NAMES) do
    local r = summary.range[k]
    if r then
      local margin = math.max(FLOOR[k], 0.1 * (r[2] - r[1]))
      if s[k] < r[1] - margin or s[k] > r[2] + margin then
        reasons[#reasons + 1] = string.format("%s %.3g (training images %.3g-%.3g)", WHAT[k],
                                              s[k], r[1], r[2])
      end
    end
  end
  return #reasons == 0, reasons
end

return M
