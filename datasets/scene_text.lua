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
--
-- The grammar also reads captions back: scene_text.references (every phrasing of a scene,
-- the references of its BLEU, CIDEr-D and ROUGE-L), scene_text.parse (a caption's items and
-- relations) and scene_text.semantics (what captions say about their scenes, judged by
-- meaning: docs/api/metrics.md).
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
-- every phrasing of a scene, and what a caption says about it
--
-- A caption of the grammar means: these items, and these relations between pairs of them
-- (the k - 1 pairs the caption relates, each a relation and its flip: "a bag above a coat"
-- is "a coat below a bag").  The same meaning has other phrasings: any item may come first,
-- any order of the items in which each new one is related to one already named, each
-- relation read from whichever side the grammar needs.  They are a scene's references.

local FLIP = {above = "below", below = "above", ["to the left of"] = "to the right of",
              ["to the right of"] = "to the left of"}
-- the canonical side of a relation: "below" and "to the right of" are read from the other item
local CANONICAL = {above = true, ["to the left of"] = true}
local REL_WORDS = {}
for i, r in ipairs(M.RELATIONS) do REL_WORDS[i] = words(r) end
local IS_FUNCTION = {}
for _, w in ipairs(M.FUNCTION_WORDS) do IS_FUNCTION[w] = true end

--- scene_text.MAX_REFERENCES -- scene_text.references lists at most this many phrasings
--- (a scene of 4 items has at most 12)
M.MAX_REFERENCES = 64

-- phrases[k]: item k's phrase as the scene's caption words it
local function item_phrases(scene)
  local out = {}
  for k, it in ipairs(scene.items) do
    if it.phrase then out[k] = it.phrase end
  end
  local t, toks, wi = 1, scene.tokens, scene.word_item
  while t <= #toks do
    local k = wi[t]
    if k and not out[k] then
      local run = {}
      while t <= #toks and wi[t] == k do run[#run + 1] = toks[t]; t = t + 1 end
      out[k] = table.concat(run, " ")
    else
      t = t + 1
    end
  end
  return out
end
M.item_phrases = item_phrases

--- scene_text.references(scene, {max=MAX_REFERENCES}) -> list of caption strings: every
--- phrasing of the grammar that says what scene.caption says (the same items and the same
--- related pairs with the same relations), scene.caption first, then the others in a fixed
--- order, each once.
function M.references(scene, opts)
  local limit = (opts and opts.max) or M.MAX_REFERENCES
  local out, seen = {scene.caption}, {[scene.caption] = true}
  local k = #scene.items
  if k < 2 then return out end
  local phrases = item_phrases(scene)
  local rel = {}
  for a = 1, k do rel[a] = {} end
  for _, r in ipairs(scene.relations) do
    rel[r[1]][r[2]], rel[r[2]][r[1]] = r[3], FLIP[r[3]]
  end
  local parts, placed, nplaced = {}, {}, 0
  local function extend()
    if #out >= limit then return end
    if nplaced == k then
      local s = table.concat(parts, " ")
      if not seen[s] then seen[s], out[#out + 1] = true, s end
      return
    end
    for v = 1, k do
      if not placed[v] then
        for u = 1, k do
          if placed[u] and rel[v][u] then
            local n = #parts
            for i, w in ipairs({"and", "a", phrases[v], rel[v][u], "the", phrases[u]}) do
              parts[n + i] = w
            end
            placed[v], nplaced = true, nplaced + 1
            extend()
            placed[v], nplaced = nil, nplaced - 1
            for i = n + 1, n + 6 do parts[i] = nil end
          end
        end
      end
    end
  end
  for a = 1, k do
    for b = 1, k do
      if rel[a][b] then
        parts = {"a", phrases[a], rel[a][b], "a", phrases[b]}
        placed, nplaced = {[a] = true, [b] = true}, 2
        extend()
      end
    end
  end
  return out
end

--- scene_text.parse(caption) -> {items = the phrases of the items the caption names, in
--- order; triples = {{subject phrase, relation, object phrase}, ...}; grammatical = whether
--- it follows the grammar exactly, naming no phrase twice}.  A noun phrase is "a" or "the"
--- and the words up to the next function word; "a P" names an item, "the P" refers to the
--- item named P before (or names one, if none was); "NP REL NP" states a relation.  Captions
--- off the grammar are read as far as these rules go.
function M.parse(caption)
  if type(caption) ~= "string" then
    error("scene_text.parse: caption must be a string, got " .. type(caption), 2)
  end
  local toks = words(caption)
  local el, i = {}, 1
  while i <= #toks do
    local w, rel = toks[i], nil
    for r, seq in ipairs(REL_WORDS) do
      local ok = true
      for j = 1, #seq do ok = ok and toks[i + j - 1] == seq[j] end
      if ok then rel = r break end
    end
    if rel then
      el[#el + 1] = {kind = "rel", rel = M.RELATIONS[rel]}
      i = i + #REL_WORDS[rel]
    elseif w == "a" or w == "the" then
      local j, run = i + 1, {}
      while j <= #toks and not IS_FUNCTION[toks[j]] do run[#run + 1] = toks[j]; j = j + 1 end
      el[#el + 1] = #run > 0 and {kind = "np", article = w, phrase = table.concat(run, " ")}
                    or {kind = "junk"}
      i = j
    else
      el[#el + 1] = {kind = w == "and" and "and" or "junk"}
      i = i + 1
    end
  end
  local r = {items = {}, triples = {}}
  local named = {}
  local twice = false
  for j, e in ipairs(el) do
    if e.kind == "np" then
      if e.article == "a" or not named[e.phrase] then
        twice = twice or named[e.phrase] ~= nil
        named[e.phrase] = true
        r.items[#r.items + 1] = e.phrase
      end
    elseif e.kind == "rel" then
      local s, o = el[j - 1], el[j + 1]
      if s and o and s.kind == "np" and o.kind == "np" then
        r.triples[#r.triples + 1] = {s.phrase, e.rel, o.phrase}
      end
    end
  end
  -- the grammar: NP(a) [REL NP(a) {and NP(a) REL NP(the, named before)}]
  local function is(j, kind, article) local e = el[j]
    return e and e.kind == kind and (not article or e.article == article) end
  local ok = not twice and #el >= 1 and is(1, "np", "a")
  if ok and #el > 1 then
    ok = is(2, "rel") and is(3, "np", "a") and (#el - 3) % 4 == 0
    local intro = {[el[1].phrase or ""] = true, [el[3] and el[3].phrase or ""] = true}
    for j = 4, #el, 4 do
      ok = ok and is(j, "and") and is(j + 1, "np", "a") and is(j + 2, "rel")
               and is(j + 3, "np", "the") and intro[el[j + 3].phrase] == true
      if ok then intro[el[j + 1].phrase] = true end
    end
  end
  r.grammatical = ok
  return r
end

-- "s|rel|o" read from the canonical side
local function triple_key(s, rel, o)
  if CANONICAL[rel] then return s .. "|" .. rel .. "|" .. o end
  return o .. "|" .. FLIP[rel] .. "|" .. s
end

--- scene_text.semantics(captions, scenes) -> summary, per_caption: what the captions say
--- about their scenes (scenes[i]: a scene of scenes.generate or shapes.generate, with items
--- and relations), judged by meaning, not by words.  Each caption is parsed
--- (scene_text.parse) and compared with its scene:
---   items: the items it names against the scene's (a named phrase matches one scene item
---     of that phrase, each item at most once): precision = matched / named, recall =
---     matched / scene items;
---   relations: its distinct (item, relation, item) triples (a triple and its flip are one):
---     precision = the share true in the scene (the relation of those two items' boxes, as
---     scene_text.relation reads it), recall = the share of the scene caption's k - 1
---     related pairs that it states (each scene's references state the same ones; a caption
---     relating other pairs, truly, loses recall but no precision);
---   count: it names as many items as the scene holds; distinct: as many different items,
---     none named twice ("a bag ... and a bag ..." counts two items but one item named);
---     all_named: every item is named;
---   exact: it follows the grammar, names exactly the scene's items and every relation it
---     states is true -- it describes exactly the scene.
--- summary = {n, items = {precision, recall}, relations = {precision, recall}, count,
--- distinct, all_named, exact, grammatical (shares of the captions; precision and recall
--- pooled over all captions), by_items = {[k] = {n, count, distinct, all_named, exact}:
--- numbers of captions among the scenes of k items}}.  per_caption[i] = {named, matched,
--- different (the different items named), items, triples, true_triples, stated, recalled,
--- count, distinct, all_named, exact, grammatical}.
function M.semantics(captions, scenes)
  local fname = "scene_text.semantics"
  if type(captions) ~= "table" or type(scenes) ~= "table" then
    error(string.format("%s: captions and scenes must be lists, got %s and %s", fname,
                        type(captions), type(scenes)), 2)
  end
  if #captions ~= #scenes then
    error(string.format("%s: %d captions for %d scenes", fname, #captions, #scenes), 2)
  end
  local tot = {named = 0, matched = 0, different = 0, items = 0, triples = 0,
               true_triples = 0, stated = 0, recalled = 0, count = 0, distinct = 0,
               all_named = 0, exact = 0, grammatical = 0}
  local by_items, per = {}, {}
  for i, cap in ipairs(captions) do
    local sc = scenes[i]
    if type(sc) ~= "table" or type(sc.items) ~= "table" or type(sc.relations) ~= "table" then
      error(string.format("%s: scene %d must be a scene table with items and relations", fname,
                          i), 2)
    end
    if type(cap) ~= "string" then
      error(string.format("%s: caption %d must be a string, got %s", fname, i, type(cap)), 2)
    end
    local p = M.parse(cap)
    local phrases = item_phrases(sc)
    local k = #sc.items
    local left, by_phrase = {}, {}
    for j = 1, k do
      left[phrases[j]] = (left[phrases[j]] or 0) + 1
      local l = by_phrase[phrases[j]] or {}
      l[#l + 1] = sc.items[j]
      by_phrase[phrases[j]] = l
    end
    local matched = 0
    for _, ph in ipairs(p.items) do
      if (left[ph] or 0) > 0 then matched, left[ph] = matched + 1, left[ph] - 1 end
    end
    local keys, ntrip, ntrue = {}, 0, 0
    for _, t in ipairs(p.triples) do
      local key = triple_key(t[1], t[2], t[3])
      if not keys[key] then
        keys[key], ntrip = true, ntrip + 1
        local holds = false
        for _, a in ipairs(by_phrase[t[1]] or {}) do
          for _, b in ipairs(by_phrase[t[3]] or {}) do
            holds = holds or (a ~= b and M.relation(a.box, b.box) == t[2])
          end
        end
        if holds then ntrue = ntrue + 1 end
      end
    end
    local recalled = 0
    for _, r in ipairs(sc.relations) do
      if keys[triple_key(phrases[r[1]], r[3], phrases[r[2]])] then recalled = recalled + 1 end
    end
    local different, seen = 0, {}
    for _, ph in ipairs(p.items) do
      if not seen[ph] then seen[ph], different = true, different + 1 end
    end
    local row = {named = #p.items, matched = matched, items = k, triples = ntrip,
                 true_triples = ntrue, stated = #sc.relations, recalled = recalled,
                 different = different,
                 count = #p.items == k, distinct = #p.items == k and different == k,
                 all_named = matched == k, grammatical = p.grammatical}
    row.exact = p.grammatical and matched == k and #p.items == k and ntrue == ntrip
    per[i] = row
    for key, v in pairs(row) do
      if type(v) == "boolean" then tot[key] = tot[key] + (v and 1 or 0)
      else tot[key] = tot[key] + v end
    end
    local b = by_items[k] or {n = 0, count = 0, distinct = 0, all_named = 0, exact = 0}
    b.n = b.n + 1
    for _, key in ipairs({"count", "distinct", "all_named", "exact"}) do
      if row[key] then b[key] = b[key] + 1 end
    end
    by_items[k] = b
  end
  local n = #captions
  local function share(a, b) return b > 0 and a / b or 0 end
  local summary = {n = n, by_items = by_items,
    items = {precision = share(tot.matched, tot.named), recall = share(tot.matched, tot.items)},
    relations = {precision = share(tot.true_triples, tot.triples),
                 recall = share(tot.recalled, tot.stated)},
    count = share(tot.count, n), distinct = share(tot.distinct, n),
    all_named = share(tot.all_named, n),
    exact = share(tot.exact, n), grammatical = share(tot.grammatical, n)}
  return summary, per
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

--- ds:references(i) -> every phrasing of scene i's caption (scene_text.references; the
--- caption itself first), computed once.
function Scenes:references(i)
  local s = self.scenes[i]
  if not s then error("scenes: index " .. tostring(i) .. " outside 1.." .. self.n, 2) end
  self._refs = self._refs or {}
  local r = self._refs[i] or M.references(s)
  self._refs[i] = r
  return r
end

--- ds:semantics(captions) -> summary, per_caption: scene_text.semantics of one caption per
--- scene of the dataset.
function Scenes:semantics(captions)
  return M.semantics(captions, self.scenes)
end

--- ds:captions() -> list of every scene's caption string.
function Scenes:captions()
  local out = {}
  for i, s in ipairs(self.scenes) do out[i] = s.caption end
  return out
end

return M
