--- datasets/shapes.lua -- RGB scenes of coloured shapes (circle, square, triangle; small or
-- large; six colours) on a black canvas, drawn by this file, with relational captions and per
-- word boxes: "a large red circle above a small blue square and a small green triangle to the
-- left of the large red circle".  Grammar, relations and boxes: datasets/scene_text.lua
-- (every word of an item's phrase -- size, colour, shape -- carries the item's box).
--
-- Shapes are drawn on the pixel grid around an integer centre (row ci, column cj) with an
-- integer half-size h, so each one's box is exactly columns cj-h..cj+h, rows ci-h..ci+h:
--   square    |r - ci| <= h and |c - cj| <= h
--   circle    (r - ci)^2 + (c - cj)^2 <= h^2 + h
--   triangle  apex up: ci-h <= r <= ci+h and |c - cj| <= (r - (ci - h)) / 2
-- Items in a scene have distinct descriptions, and their boxes are 2 pixels apart or more.
--
--   local shapes = require "datasets.shapes"
--   local ds = shapes.generate{n = 500, seed = 1}     -- ds.images (500,3,64,64)
local glimpse = require "glimpse"
local Rng = require "glimpse.data.rng"
local text = require("glimpse").data.scene_text

local M = {}

M.SHAPES = {"circle", "square", "triangle"}
M.SIZES = {"small", "large"}
M.COLOURS = {
  {"red", {1, 0, 0}}, {"green", {0, 1, 0}}, {"blue", {0, 0, 1}},
  {"yellow", {1, 1, 0}}, {"cyan", {0, 1, 1}}, {"magenta", {1, 0, 1}},
}
--- half-sizes as fractions of the canvas side
M.HALF = {small = 0.08, large = 0.14}
local GAP = 2
local PLACE_TRIES = 200

--- shapes.vocab() -> the vocabulary of every shapes caption.
function M.vocab()
  local words = {}
  for _, s in ipairs(M.SIZES) do words[#words + 1] = s end
  for _, c in ipairs(M.COLOURS) do words[#words + 1] = c[1] end
  for _, s in ipairs(M.SHAPES) do words[#words + 1] = s end
  return text.vocab(words)
end

--- shapes.inside(shape, r, c, ci, cj, h) -> true when pixel (r, c) belongs to the shape.
function M.inside(shape, r, c, ci, cj, h)
  local dr, dc = r - ci, c - cj
  if dr < -h or dr > h or dc < -h or dc > h then return false end
  if shape == "square" then return true end
  if shape == "circle" then return dr * dr + dc * dc <= h * h + h end
  return 2 * math.abs(dc) <= dr + h
end

--- shapes.generate{n=1000, seed=1, split="train", size=64 (or {H, W}), min_items=2,
---                 max_items=4, colours=all names, shapes=all} -> dataset (scene_text):
---   ds.images (n,3,H,W) in [0,1]; ds.scenes[i] = {caption, tokens, boxes, word_item,
---   relations, items = {{shape, size, colour, rgb, ci, cj, h, box}}}; ds.vocab.
--- Splits only name independent streams: the same seed gives different scenes per split.
function M.generate(opts)
  opts = opts or {}
  local n = opts.n or 1000
  local H, W
  if type(opts.size) == "table" then H, W = opts.size[1], opts.size[2] else H = opts.size or 64; W = H end
  local kmin, kmax = opts.min_items or 2, opts.max_items or 4
  local colours = {}
  for _, c in ipairs(M.COLOURS) do
    local want = not opts.colours
    for _, name in ipairs(opts.colours or {}) do want = want or name == c[1] end
    if want then colours[#colours + 1] = c end
  end
  local kinds = opts.shapes or M.SHAPES
  if math.type(n) ~= "integer" or n < 0 then error("shapes: n must be a count", 2) end
  if #colours == 0 or #kinds == 0 then error("shapes: no colours or shapes to draw", 2) end
  for _, s in ipairs(kinds) do
    if s ~= "circle" and s ~= "square" and s ~= "triangle" then error("shapes: unknown shape " .. tostring(s), 2) end
  end
  if kmin < 1 or kmax < kmin or kmax > #colours * #kinds * #M.SIZES then
    error("shapes: bad item count range", 2)
  end
  local side = math.min(H, W)
  local half = {small = math.max(1, math.floor(M.HALF.small * side + 0.5)),
                large = math.max(2, math.floor(M.HALF.large * side + 0.5))}
  if 2 * half.large + 1 > side then error("shapes: canvas too small", 2) end

  local rng = Rng.new(opts.seed or 1, "shapes." .. (opts.split or "train"))
  local images = glimpse.zeros(n, 3, H, W)
  local scenes = {}
  local plane = H * W
  for i = 1, n do
    local items
    repeat
      local k = rng:int(kmin, kmax)
      items = {}
      local seen = {}
      while #items < k do
        local sz = M.SIZES[rng:int(1, #M.SIZES)]
        local col = colours[rng:int(1, #colours)]
        local sh = kinds[rng:int(1, #kinds)]
        local key = sz .. col[1] .. sh
        if not seen[key] then
          seen[key] = true
          items[#items + 1] = {size = sz, colour = col[1], rgb = col[2], shape = sh, h = half[sz]}
        end
      end
      local placed = true
      for j, it in ipairs(items) do
        local ok = false
        for _ = 1, PLACE_TRIES do
          local h = it.h
          local ci, cj = rng:int(1 + h, H - h), rng:int(1 + h, W - h)
          local box = {cj - h, ci - h, cj + h, ci + h}
          ok = true
          for q = 1, j - 1 do
            if text.overlaps(box, items[q].box, GAP) then ok = false break end
          end
          if ok then it.ci, it.cj, it.box = ci, cj, box break end
        end
        if not ok then placed = false break end
      end
    until placed
    local flat = {}
    for p = 1, 3 * plane do flat[p] = 0 end
    for _, it in ipairs(items) do
      local h = it.h
      for r = it.ci - h, it.ci + h do
        for c = it.cj - h, it.cj + h do
          if M.inside(it.shape, r, c, it.ci, it.cj, h) then
            local p = (r - 1) * W + c
            flat[p], flat[plane + p], flat[2 * plane + p] = it.rgb[1], it.rgb[2], it.rgb[3]
          end
        end
      end
    end
    local tokens, word_item, rels = text.caption(items, rng, function(it)
      return {it.size, it.colour, it.shape}
    end)
    local boxes = {}
    for t = 1, #tokens do
      if word_item[t] then boxes[t] = items[word_item[t]].box end
    end
    scenes[i] = {items = items, tokens = tokens, word_item = word_item, boxes = boxes,
                 relations = rels, caption = table.concat(tokens, " ")}
    glimpse._data_set(images, (i - 1) * 3 * plane + 1, flat)
  end
  return text.new_dataset{images = images, scenes = scenes, vocab = M.vocab(),
                          split = opts.split or "train", height = H, width = W}
end

return M
