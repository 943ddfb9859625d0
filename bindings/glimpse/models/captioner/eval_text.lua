--- glimpse.models.captioner.eval_text -- the part of glimpse.models.caption_eval that
-- judges the captions' text against the references (BLEU, CIDEr-D, ROUGE-L), what they say
-- about generated scenes (glimpse.data.scene_text.semantics, caption_eval.items), and two
-- baselines that never look at the image.  Its functions are caption_eval's.
local glimpse = require "glimpse"
local metrics = require "glimpse.metrics"
local Rng = glimpse.data.Rng

local M = {}

--- caption_eval.bleu(set, words) -> {BLEU-1, 2, 3, 4} of the captions against set.refs
function M.bleu(set, words)
  local refs = {}
  for i = 1, set.n do refs[i] = set.refs(i) end
  local b = metrics.bleu(words, refs)
  return {b[1], b[2], b[3], b[4]}
end

--- caption_eval.scores(set, words) -> {bleu = {BLEU-1..4}, cider = CIDEr-D, rouge_l =
-- ROUGE-L, references = the mean number of references per image, semantics = what the
-- captions say about their scenes (sets with set.scene: glimpse.data.scene_text.semantics'
-- summary; nil for others)}
function M.scores(set, words)
  local refs, nref = {}, 0
  for i = 1, set.n do refs[i] = set.refs(i); nref = nref + #refs[i] end
  local b = metrics.bleu(words, refs)
  local r = {bleu = {b[1], b[2], b[3], b[4]}, cider = (metrics.cider(words, refs)),
             rouge_l = (metrics.rouge_l(words, refs)), references = nref / math.max(set.n, 1)}
  if set.scene then
    local scenes = {}
    for i = 1, set.n do scenes[i] = set.scene(i) end
    r.semantics = glimpse.data.scene_text.semantics(words, scenes)
  end
  return r
end

-- "a / b / c / d" in percent
--- caption_eval.pct(b) -> "b1 / b2 / b3 / b4" in percent
function M.pct(b)
  return string.format("%.1f / %.1f / %.1f / %.1f", 100 * b[1], 100 * b[2], 100 * b[3], 100 * b[4])
end

--- caption_eval.scores_line(what, s) -> one line of text for caption_eval.scores' BLEU-1..4,
-- CIDEr-D and ROUGE-L
function M.scores_line(what, s)
  return string.format("%s: BLEU-1..4 %s, CIDEr-D %.3f, ROUGE-L %.1f", what, M.pct(s.bleu), s.cider,
                       100 * s.rouge_l)
end

--- caption_eval.semantics_line(what, sem) -> one line of text for a semantics summary: item
-- and relation precision / recall, the right count, exact scenes, and per number of items
-- the captions with the right count, that name every item and that describe exactly the scene
function M.semantics_line(what, sem)
  local ks, parts = {}, {}
  for k in pairs(sem.by_items) do ks[#ks + 1] = k end
  table.sort(ks)
  for _, k in ipairs(ks) do
    local b = sem.by_items[k]
    parts[#parts + 1] = string.format("%d: %d, %d, %d, %d of %d", k, b.count, b.distinct or 0,
                                      b.all_named, b.exact, b.n)
  end
  return string.format("  meaning, %s: items P %.1f%% R %.1f%%, relations P %.1f%% R %.1f%%, " ..
                       "right count %.1f%% (none twice %.1f%%), exact scene %.1f%% (grammatical " ..
                       "%.1f%%); right count, none named twice, all items named, exact, by items: %s",
                       what, 100 * sem.items.precision, 100 * sem.items.recall,
                       100 * sem.relations.precision, 100 * sem.relations.recall, 100 * sem.count,
                       100 * (sem.distinct or 0), 100 * sem.exact,
                       100 * sem.grammatical, table.concat(parts, "; "))
end

--- caption_eval.baselines(source, set, seed) -> {bag_of_words = bleu, random_caption = bleu,
-- bag_caption = text}: the BLEU of two captioners that never look at the image: the most
-- frequent words, each as often as it appears in an average caption; and a random
-- training caption per image.
function M.baselines(source, set, seed)
  local counts, total_len, n = {}, 0, 0
  local train_caps = source.train_captions()
  for _, c in ipairs(train_caps) do
    for w in c:gmatch("%S+") do counts[w] = (counts[w] or 0) + 1 end
    total_len, n = total_len + select(2, c:gsub("%S+", "")), n + 1
  end
  local order = {}
  for w in pairs(counts) do order[#order + 1] = w end
  table.sort(order, function(a, b)
    if counts[a] ~= counts[b] then return counts[a] > counts[b] end
    return a < b
  end)
  local len = math.floor(total_len / math.max(n, 1) + 0.5)
  local bag = {}
  for _, w in ipairs(order) do
    local k = math.max(1, math.floor(counts[w] / n + 0.5))
    for _ = 1, k do if #bag < len then bag[#bag + 1] = w end end
  end
  local bag_caption = table.concat(bag, " ")
  local rng = Rng.new(seed or 1, "caption.baseline")
  local bag_words, random_words = {}, {}
  for i = 1, set.n do
    bag_words[i] = bag_caption
    random_words[i] = train_caps[rng:int(1, #train_caps)]
  end
  return {bag_of_words = M.bleu(set, bag_words), random_caption = M.bleu(set, random_words),
          bag_caption = bag_caption}
end

--- caption_eval.items(set, words) -> {count=, by_items = {[k] = {right=, n=}}, precision=}
-- How the captions count and name the items of generated scenes (sets with set.scene; nil
-- for others).  Their grammar (datasets/scene_text.lua) introduces every item once with
-- "a", so a caption names as many items as it has "a"s.  count: the share of captions that
-- name as many items as the scene holds (by_items[k]: among the scenes of k items);
-- precision: the share of the item words in the captions (the words that carry a box in
-- the scenes' own captions) that the scene's caption has too, each at most as often.
function M.items(set, words)
  if not set.scene then return nil end
  local item_word = {}
  for i = 1, set.n do
    local s = set.scene(i)
    for k = 1, #s.tokens do if s.boxes[k] then item_word[s.tokens[k]] = true end end
  end
  local r = {by_items = {}}
  local right, named, hits = 0, 0, 0
  for i = 1, set.n do
    local s = set.scene(i)
    local want = {}
    for k = 1, #s.tokens do
      if s.boxes[k] then want[s.tokens[k]] = (want[s.tokens[k]] or 0) + 1 end
    end
    local articles = 0
    for w in words[i]:gmatch("%S+") do
      if w == "a" then articles = articles + 1 end
      if item_word[w] then
        named = named + 1
        if (want[w] or 0) > 0 then hits, want[w] = hits + 1, want[w] - 1 end
      end
    end
    local k = #s.items
    local row = r.by_items[k] or {right = 0, n = 0}
    row.n = row.n + 1
    if articles == k then row.right, right = row.right + 1, right + 1 end
    r.by_items[k] = row
  end
  r.count, r.precision = right / math.max(set.n, 1), hits / math.max(named, 1)
  return r
end

--- caption_eval.items_line(r) -> one line of text for caption_eval.items' result
function M.items_line(r)
  local parts, ks = {}, {}
  for k in pairs(r.by_items) do ks[#ks + 1] = k end
  table.sort(ks)
  for _, k in ipairs(ks) do
    parts[#parts + 1] = string.format("%d: %d/%d", k, r.by_items[k].right, r.by_items[k].n)
  end
  return string.format("  items: the right number in %.1f%% of the captions (scenes of %s " ..
                       "items); %.1f%% of the item words named are in the scene", 100 * r.count,
                       table.concat(parts, ", "), 100 * r.precision)
end

return M
