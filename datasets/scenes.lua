--- datasets/scenes.lua -- a captioning set made from Fashion-MNIST: 2-4 items on a canvas
-- (64x64 by default), each scene with a caption naming the items and their spatial relations
-- ("a bag above a sneaker and a shirt to the right of the bag"), and per word the box of the
-- item it names -- so an attention model's maps can be checked against where the words are.
-- Grammar, relations and box format: datasets/scene_text.lua.
--
-- Splits: "train" and "val" take items from Fashion-MNIST's training file (val from its last
-- val_items = 6000 images, train from the rest), "test" from its test file; each split draws
-- from its own seeded stream, so the same seed gives the same scenes.  Items in one scene
-- have distinct classes and never overlap; clutter (optional) adds small fragments of other
-- items, away from the items unless clutter_anywhere is set.
--
--   local scenes = require "datasets.scenes"
--   local ds = scenes.generate{split = "train", n = 1000, seed = 1}
--   ds.images            -- (1000,1,64,64) in [0,1]
--   ds.scenes[1].caption -- "a sneaker to the left of a bag"
--   ds.scenes[1].boxes   -- per token: {x1,y1,x2,y2} or nil
local glimpse = require "glimpse"
local Rng = require "glimpse.data.rng"
local fm = require("glimpse").data.fashion_mnist
local text = require("glimpse").data.scene_text

local M = {}

M.VAL_ITEMS = 6000
M.WORDS = fm.WORDS
--- fraction of a clutter fragment's pixels that must be inked for it to be used
local CLUTTER_MIN_INK = 0.15

--- scenes.vocab() -> the vocabulary of every scenes caption (same for all seeds and splits).
function M.vocab() return text.vocab(M.WORDS) end

--- scenes.resize(pix, s, t) -> a t x t flat patch from an s x s one (bilinear, pixel centres).
function M.resize(pix, s, t)
  if s == t then return pix end
  local out, k = {}, s / t
  for r = 1, t do
    local sy = math.min(math.max((r - 0.5) * k + 0.5, 1), s)
    local y0 = math.floor(sy)
    local y1, fy = math.min(y0 + 1, s), sy - y0
    for c = 1, t do
      local sx = math.min(math.max((c - 0.5) * k + 0.5, 1), s)
      local x0 = math.floor(sx)
      local x1, fx = math.min(x0 + 1, s), sx - x0
      local a = pix[(y0 - 1) * s + x0] * (1 - fx) + pix[(y0 - 1) * s + x1] * fx
      local b = pix[(y1 - 1) * s + x0] * (1 - fx) + pix[(y1 - 1) * s + x1] * fx
      local v = a * (1 - fy) + b * fy
      out[(r - 1) * t + c] = v < 0.5 and 0 or v
    end
  end
  return out
end

-- windows (item squares) for k items of side s on an H x W canvas: free placement first,
-- a jittered grid of cells when free placement keeps failing
local FREE_TRIES = 100

local function place(rng, k, s, H, W)
  for _ = 1, FREE_TRIES do
    local wins, ok = {}, true
    for j = 1, k do
      local x, y = rng:int(1, W - s + 1), rng:int(1, H - s + 1)
      local w = {x, y, x + s - 1, y + s - 1}
      for _, o in ipairs(wins) do
        if text.overlaps(w, o) then ok = false break end
      end
      if not ok then break end
      wins[j] = w
    end
    if ok then return wins end
  end
  local gr, gc = H // s, W // s
  local cells = rng:sample(gr * gc, k)
  local wins = {}
  for j, cell in ipairs(cells) do
    local r, c = (cell - 1) // gc + 1, (cell - 1) % gc + 1
    local ylo, yhi = (r - 1) * H // gr + 1, r * H // gr
    local xlo, xhi = (c - 1) * W // gc + 1, c * W // gc
    local x, y = rng:int(xlo, xhi - s + 1), rng:int(ylo, yhi - s + 1)
    wins[j] = {x, y, x + s - 1, y + s - 1}
  end
  return wins
end

local function paste_max(canvas, W, pix, h, w, x0, y0)
  for r = 1, h do
    local co, po = (y0 + r - 2) * W + x0 - 1, (r - 1) * w
    for c = 1, w do
      local v = pix[po + c]
      if v > canvas[co + c] then canvas[co + c] = v end
    end
  end
end

--- scenes.generate{split="train", n=1000, seed=1, size=64 (or {H, W}), min_items=2,
---                 max_items=4, item_size=28, clutter=0, clutter_size=8,
---                 clutter_anywhere=false, pool=nil, dir=nil} -> dataset (datasets/scene_text.lua):
---   ds.images (n,1,H,W) in [0,1]; ds.scenes[i] = {caption, tokens, boxes (per token, nil for
---   non-item words), word_item, relations, items = {{class, word, name, source, window,
---   box}}, clutter = {{source, window}}}; ds.vocab; ds:collate(indices).
--- pool: use only the first `pool` items of the split's range (faster for small sets).
function M.generate(opts)
  opts = opts or {}
  local split = opts.split or "train"
  if split ~= "train" and split ~= "val" and split ~= "test" then
    error("scenes: split must be 'train', 'val' or 'test', got " .. tostring(split), 2)
  end
  local n = opts.n or 1000
  local H, W
  if type(opts.size) == "table" then H, W = opts.size[1], opts.size[2] else H = opts.size or 64; W = H end
  local s = opts.item_size or 28
  local kmin, kmax = opts.min_items or 2, opts.max_items or 4
  local nclutter, cs = opts.clutter or 0, opts.clutter_size or 8
  if math.type(n) ~= "integer" or n < 0 then error("scenes: n must be a count", 2) end
  if kmin < 1 or kmax < kmin or kmax > #M.WORDS then
    error(string.format("scenes: items %s..%s outside 1..%d", tostring(kmin), tostring(kmax), #M.WORDS), 2)
  end
  if s < 4 or s > H or s > W then error("scenes: item_size must fit the canvas", 2) end
  if (H // s) * (W // s) < kmax then
    error(string.format("scenes: %d items of %dpx do not fit a %dx%d canvas (raise size or " ..
                        "lower item_size)", kmax, s, H, W), 2)
  end
  if cs < 1 or cs > 28 then error("scenes: clutter_size must lie in 1..28", 2) end

  local src = fm.load_bytes(split == "test" and "test" or "train", {dir = opts.dir})
  local lo, hi = 1, src.n
  if split == "train" then hi = src.n - M.VAL_ITEMS end
  if split == "val" then lo = src.n - M.VAL_ITEMS + 1 end
  if opts.pool then hi = math.min(hi, lo + opts.pool - 1) end
  if hi - lo + 1 < kmax then error("scenes: the item pool is too small", 2) end

  local rng = Rng.new(opts.seed or 1, "scenes." .. split)
  local images = glimpse.zeros(n, 1, H, W)
  local scenes = {}
  local canvas = {}
  for i = 1, n do
    for p = 1, H * W do canvas[p] = 0 end
    local k = rng:int(kmin, kmax)
    local items, used, taken = {}, {}, {}
    while #items < k do
      local idx = rng:int(lo, hi)
      local cls = src.labels[idx]
      if not used[cls] then
        used[cls], taken[idx] = true, true
        items[#items + 1] = {source = idx, class = cls, word = M.WORDS[cls], name = fm.CLASSES[cls]}
      end
    end
    local wins = place(rng, k, s, H, W)
    for j, it in ipairs(items) do
      local pix = M.resize(src.pixels(it.source), 28, s)
      local w = wins[j]
      it.window = w
      it.box = text.tight_box(pix, s, s, w[1], w[2]) or {w[1], w[2], w[3], w[4]}
      paste_max(canvas, W, pix, s, s, w[1], w[2])
    end
    local clutter = {}
    for _ = 1, nclutter do
      local idx
      repeat idx = rng:int(lo, hi) until not taken[idx]
      local pix, frag = src.pixels(idx), nil
      for _ = 1, 10 do
        local r0, c0 = rng:int(1, 28 - cs + 1), rng:int(1, 28 - cs + 1)
        local f, ink = {}, 0
        for r = 1, cs do
          for c = 1, cs do
            local v = pix[(r0 + r - 2) * 28 + c0 + c - 1]
            f[(r - 1) * cs + c] = v
            if v > 0 then ink = ink + 1 end
          end
        end
        if ink >= CLUTTER_MIN_INK * cs * cs then frag = f break end
      end
      if frag then
        for _ = 1, 20 do
          local x, y = rng:int(1, W - cs + 1), rng:int(1, H - cs + 1)
          local w = {x, y, x + cs - 1, y + cs - 1}
          local free = true
          if not opts.clutter_anywhere then
            for _, it in ipairs(items) do
              if text.overlaps(w, it.window) then free = false break end
            end
          end
          if free then
            paste_max(canvas, W, frag, cs, cs, x, y)
            clutter[#clutter + 1] = {source = idx, window = w}
            break
          end
        end
      end
    end
    local tokens, word_item, rels = text.caption(items, rng, function(it) return {it.word} end)
    local boxes = {}
    for t = 1, #tokens do
      if word_item[t] then boxes[t] = items[word_item[t]].box end
    end
    scenes[i] = {items = items, clutter = clutter, tokens = tokens, word_item = word_item,
                 boxes = boxes, relations = rels, caption = table.concat(tokens, " ")}
    local flat = {}
    for p = 1, H * W do flat[p] = canvas[p] / 255 end
    glimpse._data_set(images, (i - 1) * H * W + 1, flat)
  end
  return text.new_dataset{images = images, scenes = scenes, vocab = M.vocab(), split = split,
                          height = H, width = W, classes = fm.CLASSES}
end

return M
