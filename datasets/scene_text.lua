--- datasets/scene_text.lua -- what datasets/scenes.lua and datasets/shapes.lua share: the
-- caption grammar with its spatial relations, per-word boxes, and the scene dataset object.
--
-- Boxes are {x1, y1, x2, y2}: 1-based inclusive pixel columns (x) and rows (y), y downwards.
--
-- Grammar (items are described by a noun phrase P, e.g. "bag" or "large red circle"):
--   caption := "a" P1                                        (one item)
--            | "a" P1 REL "a" P2 { "and" "a" Pk REL "the" Pr }
--   REL     := "above" | "below" | "to the left of" | "to the right of"
-- Item 1 is related to item 2; each later item k to an earlier item r (chosen by the seed).
-- REL says where the subject's box centre lies from the reference's: with dx, dy the centre
-- differences, |dy| >= |dx| gives above (dy < 0) or below, otherwise left (dx < 0) or right.
-- Every word of an item's phrase (not the article) carries that item's box; the other words
-- carry none (nil: iterate boxes with `for k = 1, #tokens`).
local glimpse = require "glimpse"
local Vocab = require "glimpse.data.vocab"
local batches = require "glimpse.data.batches"

local M = {}

M.FUNCTION_WORDS = {"a", "the", "and", "above", "below", "to", "left", "right", "of"}
M.RELATIONS = {"above", "below", "to the left of", "to the right of"}

--- scene_text.center(box) -> cx, cy (pixel units).
function M.center(b)
  return (b[1] + b[3]) / 2, (b[2] + b[4]) / 2
end

--- scene_text.relation(a, b) -> where box a lies relative to box b: one of M.RELATIONS.
function M.relation(a, b)
  local ax, ay = M.center(a)
  local bx, by = M.center(b)
  local dx, dy = ax - bx, ay - by
  if math.abs(dy) >= math.abs(dx) then return dy < 0 and "above" or "below" end
  return dx < 0 and "to the left of" or "to the right of"
end

local function words(s)
  local out = {}
  for w in s:gmatch("%S+") do out[#out + 1] = w end
  return out
end

--- scene_text.caption(items, rng, phrase) -> tokens, word_item, relations.  items: list with
--- .box; phrase(item) -> list of words.  word_item[k]: the item word k names, or nil.
--- relations: list of {subject, reference, relation string}.
function M.caption(items, rng, phrase)
  local tokens, word_item, rels = {}, {}, {}
  local function say(w, item) tokens[#tokens + 1] = w; word_item[#tokens] = item end
  local function np(article, k)
    say(article)
    for _, w in ipairs(phrase(items[k])) do say(w, k) end
  end
  local function rel(k, r)
    local s = M.relation(items[k].box, items[r].box)
    rels[#rels + 1] = {k, r, s}
    for _, w in ipairs(words(s)) do say(w) end
  end
  np("a", 1)
  if #items >= 2 then
    rel(1, 2)
    np("a", 2)
    for k = 3, #items do
      say("and")
      np("a", k)
      local r = rng:int(1, k - 1)
      rel(k, r)
      np("the", r)
    end
  end
  return tokens, word_item, rels
end

--- scene_text.vocab(item_words) -> vocab: specials, the grammar's function words, then the
--- item words (fixed order: the same ids for every seed and split).
function M.vocab(item_words)
  local list = {}
  for _, w in ipairs(M.FUNCTION_WORDS) do list[#list + 1] = w end
  for _, w in ipairs(item_words) do list[#list + 1] = w end
  return Vocab.new(list)
end

--- scene_text.tight_box(pix, h, w, x0, y0) -> the box of the nonzero pixels of an h x w
--- row-major flat patch placed with its top-left pixel at (x0, y0), or nil when all are zero.
function M.tight_box(pix, h, w, x0, y0)
  local x1, y1, x2, y2 = math.huge, math.huge, -math.huge, -math.huge
  for r = 1, h do
    local o = (r - 1) * w
    for c = 1, w do
      if pix[o + c] > 0 then
        if c < x1 then x1 = c end
        if c > x2 then x2 = c end
        if r < y1 then y1 = r end
        if r > y2 then y2 = r end
      end
    end
  end
  if x2 < x1 then return nil end
  return {x0 + x1 - 1, y0 + y1 - 1, x0 + x2 - 1, y0 + y2 - 1}
end

--- scene_text.overlaps(a, b, gap) -> true when boxes a and b, grown by gap pixels, intersect.
function M.overlaps(a, b, gap)
  gap = gap or 0
  return not (a[3] + gap < b[1] or b[3] + gap < a[1] or a[4] + gap < b[2] or b[4] + gap < a[2])
end

-- ---------------------------------------------------------------------------------------
-- the dataset object: images (N,C,H,W) and one scene table per image

local Scenes = {}
Scenes.__index = Scenes
M.Scenes = Scenes

--- scene_text.new_dataset(fields) -> dataset (fields: images, scenes, vocab, split, ...).
function M.new_dataset(fields)
  fields.n = #fields.scenes
  return setmetatable(fields, Scenes)
end

function Scenes:size() return self.n end

--- ds:image(i) -> (C,H,W) tensor of scene i (a copy).
function Scenes:image(i)
  local shape = self.images.shape
  local per = shape[2] * shape[3] * shape[4]
  local out = glimpse.zeros(shape[2], shape[3], shape[4])
  glimpse._data_set(out, 1, glimpse._data_get(self.images, (i - 1) * per + 1, per))
  return out
end

--- ds:collate(indices) -> {images (B,C,H,W), captions_in (B,T) = <start> w.., captions_out
--- (B,T) = w.. <end>, mask (B,T), lengths {B}, boxes (B,T,4) = the box named by
--- captions_out[b][t] (0 where none), box_mask (B,T), scenes {B}, indices}.
function Scenes:collate(indices)
  local cin, cout, bx, bm, sc = {}, {}, {}, {}, {}
  for k, i in ipairs(indices) do
    local s = self.scenes[i] or error("scenes: index " .. tostring(i) .. " outside 1.." .. self.n, 2)
    local ids = self.vocab:encode(s.tokens)
    local a, b = {Vocab.START}, {}
    for t = 1, #ids do a[t + 1] = ids[t]; b[t] = ids[t] end
    b[#ids + 1] = Vocab.END
    cin[k], cout[k], sc[k] = a, b, s
  end
  local b = {scenes = sc, indices = indices, images = batches.take(self.images, indices)}
  b.captions_in = batches.pad(cin, {pad = Vocab.PAD})
  b.captions_out, b.lengths, b.mask = batches.pad(cout, {pad = Vocab.PAD})
  local T = b.captions_out:size(2)
  for k, s in ipairs(sc) do
    local rows, mrow = {}, {}
    for t = 1, T do
      local box = t <= #s.tokens and s.boxes[t] or nil
      rows[t] = box and {box[1], box[2], box[3], box[4]} or {0, 0, 0, 0}
      mrow[t] = box and 1 or 0
    end
    bx[k], bm[k] = rows, mrow
  end
  b.boxes, b.box_mask = glimpse.tensor(bx), glimpse.tensor(bm)
  return b
end

--- ds:captions() -> list of every scene's caption string.
function Scenes:captions()
  local out = {}
  for i, s in ipairs(self.scenes) do out[i] = s.caption end
  return out
end

return M
