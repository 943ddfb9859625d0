--- glimpse.models.caption_eval -- what a captioning experiment measures on a held-out set
-- of a caption source (glimpse.data.caption_sources): captions (beam or greedy), BLEU-1..4,
-- CIDEr-D and ROUGE-L against every reference (on scenes: every phrasing of the scene), what
-- the captions say about the scene (glimpse.data.scene_text.semantics), the teacher-forced
-- loss, the attention inside the named item's box, two baselines that
-- never look at the image, and the overlay strips.
--
--   local ce = glimpse.models.caption_eval
--   local words, alphas = ce.captions(cap, src.test, 3)            -- beam 3
--   local bleu = ce.bleu(src.test, words)                          -- {b1, b2, b3, b4}
--   local s = ce.scores(src.test, words)       -- {bleu=, cider=, rouge_l=, semantics=}
--   local box = ce.in_box_generated(cap, src.test, words, alphas)  -- {inside=, chance=, ...}
--
-- The captioner runs in evaluation mode without a tape; its training mode is restored.
local glimpse = require "glimpse"
local metrics = require "glimpse.metrics"
local options = require "glimpse.options"
local check = require "glimpse.check"
local encoders = require "glimpse.models.encoders"
local Rng = glimpse.data.Rng

local M = {}

-- the measures of the captions' text (BLEU, CIDEr-D, ROUGE-L, meaning, baselines, items):
-- captioner/eval_text.lua, part of this module
for k, v in pairs(require "glimpse.models.captioner.eval_text") do M[k] = v end
local pct = M.pct

local EVAL_BATCH = 100
local RECALIBRATE_BATCHES = 50
local STRIP_COLUMNS = 8          -- 8 panels of a 64 px image drawn at 128 px: about 1050 px

local function range(lo, hi)
  local out = {}
  for i = lo, hi do out[#out + 1] = i end
  return out
end

-- fn(batch, indices) for each EVAL_BATCH-sized batch of the set, in evaluation mode, no tape
local function each_batch(cap, set, fn)
  local was = cap.training
  cap:evaluate()
  glimpse.no_grad(function()
    for lo = 1, set.n, EVAL_BATCH do
      local idx = range(lo, math.min(set.n, lo + EVAL_BATCH - 1))
      fn(set.batch(idx), idx)
    end
  end)
  if was then cap:train() end
end

--- caption_eval.SOURCE_OPTIONS -- the data of a captioning run, as a script's flags
--- (glimpse.options): generated scenes or a Karpathy-format corpus (caption_eval.source)
M.SOURCE_OPTIONS = options.declare("caption source", {
  {"dataset", "string", "scenes", choices = {"scenes", "shapes"},
   help = "scenes | shapes (ignored with --karpathy)"},
  {"karpathy", "string", nil, help = "a Karpathy split JSON (dataset_flickr8k.json, ...)"},
  {"images", "string", nil, help = "the folder holding the corpus's image files (with --karpathy)"},
  {"image_size", "int", nil, range = {1},
   help = "images are resized to this (karpathy; small CNN default 64)"},
  {"min_count", "int", 5, range = {1}, help = "karpathy: least count of a vocabulary word"},
  {"train", "int", 20000, range = {1}, help = "training scenes"},
  {"valid", "int", 500, range = {1}, help = "validation scenes"},
  {"test", "int", 500, range = {1}, help = "test scenes"},
  {"clutter", "int", 0, range = {0}, help = "scenes: clutter fragments per scene"},
})

--- caption_eval.source(o, {seed=1, max_len=30, encoder="small"}) -> a caption source
--- (glimpse.data.caption_sources) from SOURCE_OPTIONS' values o: the Karpathy corpus
--- o.karpathy when given (images resized to o.image_size: by default 224 and normalised as
--- ImageNet for a pretrained encoder, else 64), else generated scenes
function M.source(o, opts)
  o = M.SOURCE_OPTIONS:check(o, 2)
  opts = opts or {}
  local sources = glimpse.data.caption_sources
  if not o.karpathy then
    return sources.scenes{dataset = o.dataset, train = o.train, valid = o.valid, test = o.test,
                          clutter = o.clutter, seed = opts.seed or 1}
  end
  local pretrained = (opts.encoder or "small") ~= "small"
  return sources.karpathy{file = o.karpathy, images = o.images,
    size = o.image_size or (pretrained and 224 or 64), min_count = o.min_count,
    max_len = opts.max_len or 30, mean = pretrained and encoders.IMAGENET_MEAN or nil,
    std = pretrained and encoders.IMAGENET_STD or nil}
end

--- caption_eval.ENCODER_OPTIONS -- the encoder of a captioning run, as a script's flags
--- (caption_eval.encoder)
M.ENCODER_OPTIONS = options.declare("caption encoder", {
  {"encoder", "string", "small", help = "small | vgg16 | resnet18 | ... (glimpse.models)"},
  {"encoder_weights", "string", nil, help = "safetensors weights for a torchvision encoder"},
  {"fine_tune", "boolean", false,
   help = "train a pretrained encoder too (default: frozen when weights are given)"},
  {"channels", "string", "16,32,64", help = "small CNN: channels per conv block"},
  {"batch_norm", "boolean", true, help = "small CNN: batch normalisation"},
})

--- caption_eval.encoder(o, in_channels) -> encoder, fine_tune: the Captioner's options
--- encoder and fine_tune from ENCODER_OPTIONS' values o: a pretrained architecture
--- (o.encoder ~= "small", weights o.encoder_weights; frozen when weights are given, unless
--- o.fine_tune) or the small CNN (o.channels, o.batch_norm) over in_channels channels
function M.encoder(o, in_channels)
  o = M.ENCODER_OPTIONS:check(o, 2)
  if o.encoder ~= "small" then
    return {name = o.encoder, weights = o.encoder_weights}, o.fine_tune or not o.encoder_weights
  end
  local channels = {}
  for c in o.channels:gmatch("[^,%s]+") do
    local n = math.tointeger(tonumber(c))
    if not n or n < 1 then
      error(string.format("caption_eval.encoder: channels must list positive integers, got '%s'",
                          o.channels), 2)
    end
    channels[#channels + 1] = n
  end
  return {name = "small", in_channels = in_channels, channels = channels,
          batch_norm = o.batch_norm}, true
end

--- caption_eval.recalibrator(cap, source, {batch=32, seed=1}) -> function() that renews the
-- encoder's batch-norm statistics from 50 random training batches (weights untouched).
-- Training batches are bucketed by caption length, which for scenes is the number of
-- items, so the last batches before an evaluation all look alike and skew the running
-- statistics; renewing them from unbucketed batches ("precise BN") fixes that.  Does
-- nothing without batch norm or with a frozen encoder.
function M.recalibrator(cap, source, opts)
  opts = opts or {}
  local has_bn = false
  for _, m in ipairs(cap.encoder:modules()) do
    has_bn = has_bn or m.__name:find("BatchNorm") ~= nil
  end
  local rng = Rng.new(opts.seed or 1, "caption.recalibrate")
  local bs = opts.batch or 32
  return function()
    if not has_bn or not cap.config.fine_tune then return end
    local was = cap.training
    cap:train()
    glimpse.no_grad(function()
      for _ = 1, RECALIBRATE_BATCHES do
        local idx = {}
        for k = 1, bs do idx[k] = rng:int(1, source.train.n) end
        cap:annotate(source.random_images(idx))
      end
    end)
    if not was then cap:evaluate() end
  end
end

--- caption_eval.training(cap, source, {steps=, batch=32, seed=1}) -> loss, evaluate: the
--- functions a glimpse.train.Trainer takes.  loss(m, batch, step) moves hard attention's
--- schedules with the step budget (cap:set_progress) and logs nll, ds and reinforce;
--- evaluate(m) renews the batch-norm statistics (caption_eval.recalibrator) and measures the
--- validation set: greedy BLEU-1..4, valid_nll and one example caption.
function M.training(cap, source, opts)
  local steps = opts.steps
  local recalibrate = M.recalibrator(cap, source, {batch = opts.batch, seed = opts.seed})
  local function loss(m, b, step)
    m:set_progress((step - 1) / steps)            -- the step budget drives the schedules
    local l, info = m:loss(b.images, b.captions_in, b.captions_out, b.mask)
    return l, {nll = info.nll, ds = info.ds, reinforce = info.reinforce, tokens = info.tokens}
  end
  local function evaluate(m)
    recalibrate()
    local words = M.captions(m, source.valid, 1)
    local b = M.bleu(source.valid, words)
    return {valid_nll = M.loss(m, source.valid), bleu1 = b[1], bleu2 = b[2], bleu3 = b[3],
            bleu4 = b[4], example = words[1]}
  end
  return loss, evaluate
end

--- caption_eval.SELF_CRITICAL_OPTIONS -- self-critical fine-tuning after the cross-entropy
--- training, as a script's flags (caption_eval.self_critical)
M.SELF_CRITICAL_OPTIONS = options.declare("self-critical training", {
  {"scst_steps", "int", 0, range = {0}, help = "steps of self-critical training (CIDEr-D " ..
   "reward, Rennie et al. 2017) after the cross-entropy steps; 0: none"},
  {"scst_lr", "number", 5e-5, range = {0}, help = "its Adam learning rate (constant)"},
  {"scst_samples", "int", 5, range = {1}, help = "captions sampled per image"},
  {"scst_baseline", "string", "mean", choices = {"mean", "greedy"},
   help = "a sample's reward compared with the image's other samples' mean, or its greedy caption's"},
  {"scst_cells", "string", "rule", choices = {"rule", "sample"},
   help = "hard attention: read the test-time rule's cells, or draw them (the reward trains where it looks)"},
  {"scst_xe", "number", 0, range = {0}, help = "weight of the cross-entropy objective on " ..
   "the batch's reference captions added to the self-critical loss (0: none)"},
  {"scst_meaning", "number", 0, range = {0}, help = "generated scenes: the reward adds this " ..
   "times the caption's meaning F-score against the scene (items and relations, as SPICE " ..
   "scores a scene graph)"},
  {"scst_repeats", "number", 0, range = {0}, help = "generated scenes: the reward subtracts " ..
   "this for each item a caption names again (\"a bag ... and a bag\")"},
})

--- caption_eval.meaning_f(row) -> the F-score of one caption's meaning against its scene, from
--- a row of scene_text.semantics' per-caption results: precision = (items named right + true
--- relations) / (items named + relations stated), recall = (items named right + the scene's
--- relations stated) / (the scene's items + relations), as SPICE pools a scene graph's
--- object and relation tuples (Anderson et al. 2016); 0 for a caption naming nothing.
function M.meaning_f(row)
  local p_den, r_den = row.named + row.triples, row.items + row.stated
  if p_den == 0 or r_den == 0 then return 0 end
  local p = (row.matched + row.true_triples) / p_den
  local r = (row.matched + row.recalled) / r_den
  return (p + r > 0) and 2 * p * r / (p + r) or 0
end

--- caption_eval.self_critical(cap, source, {samples=5, baseline="mean", cells="rule",
---                                          meaning=0, repeats=0, xe=0}) -> data, loss,
--- reward: what a glimpse.train.Trainer takes for self-critical training
--- (cap:self_critical_loss) on the source's training images.  data hands each batch its
--- examples' references (source.train_refs) and, with meaning or repeats > 0, their scenes
--- (source.train_scene).  loss scores the samples by CIDEr-D with the document frequencies
--- of every training image's references, plus meaning times caption_eval.meaning_f against
--- the scene (CIDEr-D and a scene-graph F-score together, as Liu et al. 2017's SPIDEr mixes
--- CIDEr and SPICE), minus repeats for each item a caption names again (scene_text.semantics'
--- named - different); it adds xe times the model's own training loss on the batch's
--- reference captions (cap:loss, hard attention's schedules at their end values; the mixed
--- objective of Paulus et al. 2017), and logs reward, baseline and nll.  reward(captions,
--- references) is that score (references carry .scene with meaning or repeats).
function M.self_critical(cap, source, opts)
  opts = opts or {}
  local train, w, rep = source.train, opts.meaning or 0, opts.repeats or 0
  for _, o in ipairs({{"meaning", w}, {"repeats", rep}}) do
    if o[2] > 0 and not source.train_scene then
      check.fail(2, "caption_eval.self_critical: %s = %g needs scenes with their items " ..
                 "(generated scenes or shapes); this source has none", o[1], o[2])
    end
  end
  local scored = w > 0 or rep > 0
  local corpus, seen = {}, {}
  for i = 1, train.n do                    -- one set per distinct image (Karpathy: 5 examples each)
    local refs = source.train_refs(i)
    local key = table.concat(refs, "\n")
    if not seen[key] then seen[key] = true; corpus[#corpus + 1] = refs end
  end
  local cider = metrics.cider_scorer(corpus)
  local semantics = scored and glimpse.data.scene_text.semantics
  local function reward(captions, refs)
    local mean, r = cider(captions, refs)
    if scored then
      local scenes = {}
      for i = 1, #captions do scenes[i] = refs[i].scene end
      local _, per = semantics(captions, scenes)
      mean = 0
      for i, row in ipairs(per) do
        r[i] = r[i] + w * M.meaning_f(row) - rep * (row.named - row.different)
        mean = mean + r[i] / #per
      end
    end
    return mean, r
  end
  local data = {n = train.n, lengths = train.lengths}
  function data.collate(_, idx)
    local b = train:collate(idx)
    b.references = {}
    for k, i in ipairs(idx) do
      local refs = source.train_refs(i)
      b.references[k] = table.move(refs, 1, #refs, 1, {})
      if scored then b.references[k].scene = source.train_scene(i) end
    end
    return b
  end
  local xe = opts.xe or 0
  if xe > 0 then cap:set_progress(1) end
  local function loss(m, b)
    local l, info = m:self_critical_loss(b.images, b.references, {reward = reward,
      samples = opts.samples, baseline = opts.baseline, cells = opts.cells})
    local nll
    if xe > 0 then
      local lx, ix = m:loss(b.images, b.captions_in, b.captions_out, b.mask)
      l, nll = l + lx * xe, ix.nll
    end
    return l, {reward = info.reward, baseline = info.baseline, nll = nll, tokens = info.tokens}
  end
  return data, loss, reward
end

--- caption_eval.loss(cap, set) -> the mean token NLL under teacher forcing
function M.loss(cap, set)
  local total, ntok = 0, 0
  each_batch(cap, set, function(b)
    local _, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
    total, ntok = total + info.nll * info.tokens, ntok + info.tokens
  end)
  return total / math.max(ntok, 1)
end

--- caption_eval.captions(cap, set, beam) -> words (a string per image), alphas ((T,L) each)
function M.captions(cap, set, beam)
  local words, alphas = {}, {}
  each_batch(cap, set, function(b, idx)
    local w, _, al = cap:caption_maps(b.images, {beam = beam, list = true})
    for k, i in ipairs(idx) do words[i], alphas[i] = w[k], al[k] end
  end)
  return words, alphas
end

M.LENGTH_PENALTIES = {0, 0.5, 1, 1.5, 2, 3}
M.TUNE_RULES = {"region", "argmax"}   -- rules that read one cell: hard attention stays hard

--- caption_eval.tune(cap, set, {beam=3, length_penalties=caption_eval.LENGTH_PENALTIES,
---                               rules=caption_eval.TUNE_RULES}) -> best, rows
-- Chooses how the captioner decodes by BLEU-4 of its beam captions on a held-out set (the
-- validation set: never the test set): beam search's length penalty and, for hard
-- attention, what test time reads (the rules; by default the two that read one cell, so a
-- hard model is not turned into a soft one at test time; soft attention has one rule).
-- The best setting is kept in the model (cap.config.length_penalty, cap:set_hard_eval), so
-- it is saved with it; a setting replaces the one before it only when its BLEU-4 is higher,
-- so ties keep the earlier rule and the smaller penalty.  best = {rule=, length_penalty=,
-- bleu4=}; rows: every setting tried, {rule=, length_penalty=, bleu4=}.
function M.tune(cap, set, opts)
  opts = opts or {}
  local fname = "caption_eval.tune"
  if type(set) ~= "table" or type(set.n) ~= "number" or set.n < 1 then
    check.fail(2, "%s: set must be a non-empty caption set (a caption source's valid)", fname)
  end
  local lps = opts.length_penalties or M.LENGTH_PENALTIES
  local rules = cap.config.attention == "hard" and (opts.rules or M.TUNE_RULES) or {false}
  if type(lps) ~= "table" or #lps == 0 or type(rules) ~= "table" or #rules == 0 then
    check.fail(2, "%s: length_penalties and rules must be non-empty lists", fname)
  end
  for _, a in ipairs(lps) do
    if type(a) ~= "number" or a < 0 then
      check.fail(2, "%s: a length penalty must be a number >= 0, got %s", fname, check.value(a))
    end
  end
  local beam = opts.beam or 3
  local rows, best = {}, nil
  for _, rule in ipairs(rules) do
    if rule then cap:set_hard_eval(rule) end
    for _, a in ipairs(lps) do
      cap.config.length_penalty = a
      local b4 = M.bleu(set, (M.captions(cap, set, beam)))[4]
      rows[#rows + 1] = {rule = rule or nil, length_penalty = a, bleu4 = b4}
      if not best or b4 > best.bleu4 then best = rows[#rows] end
    end
  end
  if best.rule then cap:set_hard_eval(best.rule) end
  cap.config.length_penalty = best.length_penalty
  return best, rows
end

--- caption_eval.tune_line(best, rows, n) -> one line of text for caption_eval.tune's result:
-- the choice, then each rule's BLEU-4 per length penalty
function M.tune_line(best, rows, n)
  local groups, order, alphas = {}, {}, {}
  for _, r in ipairs(rows) do
    local key = r.rule or "BLEU-4"
    if not groups[key] then groups[key], order[#order + 1] = {}, key end
    local g = groups[key]
    g[#g + 1] = string.format("%.1f", 100 * r.bleu4)
    if key == order[1] then alphas[#alphas + 1] = string.format("%g", r.length_penalty) end
  end
  local parts = {}
  for _, key in ipairs(order) do
    parts[#parts + 1] = key .. " " .. table.concat(groups[key], " ")
  end
  return string.format("decoding chosen on %d validation images by beam BLEU-4: %slength " ..
                       "penalty %g (%.1f); at length penalties %s: %s", n,
                       best.rule and ("rule " .. best.rule .. ", ") or "", best.length_penalty,
                       100 * best.bleu4, table.concat(alphas, ", "), table.concat(parts, "; "))
end

local function add_score(acc, w, inside, chance)
  local s = acc.per_word[w] or {inside = 0, chance = 0, n = 0}
  s.inside, s.chance, s.n = s.inside + inside, s.chance + chance, s.n + 1
  acc.per_word[w] = s
  acc.inside, acc.chance, acc.n = acc.inside + inside, acc.chance + chance, acc.n + 1
end

local function finish(acc)
  for _, s in pairs(acc.per_word) do s.inside, s.chance = s.inside / s.n, s.chance / s.n end
  if acc.n > 0 then acc.inside, acc.chance = acc.inside / acc.n, acc.chance / acc.n end
  return acc
end

--- caption_eval.in_box_generated(cap, set, words, alphas) -> {inside=, chance=, n=,
-- per_word = {word = {inside=, chance=, n=}}}: for each word of the model's own caption
-- that names exactly one item of the scene, the share of its attention inside that item's
-- box; chance is what a uniform map puts there.  Needs set.has_boxes.
function M.in_box_generated(cap, set, words, alphas)
  local acc = {per_word = {}, inside = 0, chance = 0, n = 0}
  local gh, gw = cap:grid_size(set.height, set.width)
  for i = 1, set.n do
    local sc = set.scene(i)
    local boxes_of = {}                  -- word -> the distinct boxes it names in this scene
    for t = 1, #sc.tokens do
      local b = sc.boxes[t]
      if b then
        local list = boxes_of[sc.tokens[t]] or {}
        local seen = false
        for _, x in ipairs(list) do seen = seen or x == b end
        if not seen then list[#list + 1] = b end
        boxes_of[sc.tokens[t]] = list
      end
    end
    local list, gen = {}, {}
    for w in words[i]:gmatch("%S+") do gen[#gen + 1] = w end
    for t, w in ipairs(gen) do
      local c = boxes_of[w]
      list[t] = (c and #c == 1) and c[1] or false
    end
    if #gen > 0 then
      local inside, chance = metrics.attention_in_box(alphas[i], list, {gh, gw},
                                                      {set.height, set.width})
      for t = 1, #gen do
        if inside[t] then add_score(acc, gen[t], inside[t], chance[t]) end
      end
    end
  end
  return finish(acc)
end

--- caption_eval.in_box_teacher_forced(cap, set) -> as in_box_generated, for each item word
-- of the reference captions, with the attention of the step that predicts it.
function M.in_box_teacher_forced(cap, set)
  local acc = {per_word = {}, inside = 0, chance = 0, n = 0}
  local gh, gw = cap:grid_size(set.height, set.width)
  each_batch(cap, set, function(b)
    local _, alphas = cap:forward(b.images, b.captions_in)
    local boxes, out, arows = b.boxes:totable(), b.captions_out:totable(), alphas:totable()
    for k = 1, #boxes do
      local list = {}
      for t = 1, #boxes[k] do
        local bx = boxes[k][t]
        list[t] = bx[3] > 0 and bx or false
      end
      local inside, chance = metrics.attention_in_box(arows[k], list, {gh, gw},
                                                      {set.height, set.width})
      for t = 1, #list do
        if inside[t] then add_score(acc, cap.vocab:token(out[k][t]), inside[t], chance[t]) end
      end
    end
  end)
  return finish(acc)
end

--- caption_eval.box_line(what, acc) -> one line of text: the in-box share, chance, and per word
function M.box_line(what, acc)
  local words, parts = {}, {}
  for w in pairs(acc.per_word) do words[#words + 1] = w end
  table.sort(words)
  for _, w in ipairs(words) do
    parts[#parts + 1] = string.format("%s %.0f%%", w, 100 * acc.per_word[w].inside)
  end
  return string.format("  attention inside the named item's box, %s: %.1f%% of the mass " ..
                       "(chance %.1f%%) over %d item words; per word: %s", what,
                       100 * acc.inside, 100 * acc.chance, acc.n, table.concat(parts, ", "))
end

-- the references of image i as text: all of them, or for scenes the caption and how many
-- other phrasings there are
local function refs_text(set, i, sep)
  local refs = set.refs(i)
  if not set.scene or #refs == 1 then return table.concat(refs, sep) end
  return string.format("%s (and %d other phrasings)", refs[1], #refs - 1)
end

--- caption_eval.test(cap, source, {beam=3, seed=1}) -> r: every measure of the test set:
-- r.words, r.alphas (the beam captions and their maps), r.words_greedy, r.scores and
-- r.scores_greedy (caption_eval.scores of each), r.bleu, r.bleu_greedy, r.loss,
-- r.baselines (caption_eval.baselines), r.in_box and r.in_box_teacher_forced (sets with
-- boxes), r.items (generated scenes: caption_eval.items), r.lines (the summary as text
-- lines) and r.samples (one line per image: index, caption, references).
function M.test(cap, source, opts)
  opts = opts or {}
  local set, beam = source.test, opts.beam or 3
  local r = {}
  r.words, r.alphas = M.captions(cap, set, beam)
  r.words_greedy = beam == 1 and r.words or (M.captions(cap, set, 1))
  r.scores, r.scores_greedy = M.scores(set, r.words), M.scores(set, r.words_greedy)
  r.bleu, r.bleu_greedy = r.scores.bleu, r.scores_greedy.bleu
  r.loss, r.baselines = M.loss(cap, set), M.baselines(source, set, opts.seed)
  local base = r.baselines
  r.lines = {string.format("test (%d images, %.1f references each): %s; test loss %.3f", set.n,
                           r.scores.references, M.scores_line("beam " .. beam, r.scores), r.loss),
             M.scores_line("  greedy", r.scores_greedy),
             string.format("  baselines without the image: bag of words %s (\"%s\"), random " ..
                           "training caption %s", pct(base.bag_of_words), base.bag_caption,
                           pct(base.random_caption))}
  if set.has_boxes then
    r.in_box = M.in_box_generated(cap, set, r.words, r.alphas)
    r.in_box_teacher_forced = M.in_box_teacher_forced(cap, set)
    r.lines[#r.lines + 1] = M.box_line("generated captions", r.in_box)
    r.lines[#r.lines + 1] = M.box_line("teacher forcing", r.in_box_teacher_forced)
  end
  r.items = M.items(set, r.words)           -- in metrics.json; the meaning lines say more
  if r.scores.semantics then
    r.lines[#r.lines + 1] = M.semantics_line("beam " .. beam, r.scores.semantics)
    r.lines[#r.lines + 1] = M.semantics_line("greedy", r.scores_greedy.semantics)
  end
  r.samples = {}
  for i = 1, set.n do
    r.samples[i] = string.format("%d\t%s\t| %s", i, r.words[i], refs_text(set, i, " | "))
  end
  return r
end

--- caption_eval.metrics(r, history, extra) -> the entries of metrics.json: caption_eval.test's
--- result r (test_bleu, test_bleu_greedy, test_cider, test_cider_greedy, test_rouge_l,
--- test_rouge_l_greedy, test_semantics, test_semantics_greedy, test_references, test_loss,
--- baseline_bleu, attention_in_box, attention_in_box_teacher_forced, items), a Trainer's
--- history (steps, train_seconds, history: its evaluations) and extra's entries
function M.metrics(r, history, extra)
  local s, g = r.scores or {}, r.scores_greedy or {}
  local m = {test_bleu = r.bleu, test_bleu_greedy = r.bleu_greedy, test_loss = r.loss,
             test_cider = s.cider, test_cider_greedy = g.cider, test_rouge_l = s.rouge_l,
             test_rouge_l_greedy = g.rouge_l, test_semantics = s.semantics,
             test_semantics_greedy = g.semantics, test_references = s.references,
             baseline_bleu = {bag_of_words = r.baselines.bag_of_words,
                              random_caption = r.baselines.random_caption},
             attention_in_box = r.in_box, attention_in_box_teacher_forced = r.in_box_teacher_forced,
             items = r.items, steps = history.steps, train_seconds = history.seconds,
             history = history.evals}
  for k, v in pairs(extra or {}) do m[k] = v end
  return m
end

--- caption_eval.overlays(cap, set, words, alphas, dir, n) -> rows: for the first n images,
-- overlay_<i>.png in dir (the image, then each word's attention map, 8 to a row) and a row
-- {i=, png=, words=, refs=, bleu=} describing it.
function M.overlays(cap, set, words, alphas, dir, n)
  local rows = {}
  for i = 1, math.min(n, set.n) do
    local png = string.format("overlay_%d.png", i)
    local list = {}
    for w in words[i]:gmatch("%S+") do list[#list + 1] = w end
    cap:overlays(set.display(i), alphas[i], list, dir .. "/" .. png, {ncol = STRIP_COLUMNS})
    rows[i] = {i = i, png = png, words = words[i], refs = set.refs(i),
               refs_text = refs_text(set, i, " / "),
               bleu = metrics.bleu({words[i]}, {set.refs(i)})}
  end
  return rows
end

--- caption_eval.page(page, cap, set, r, dir, {title=, intro=, overlays=8, name=, history=})
---   -> page
-- Fills a report page (a glimpse.report.Page, or anything with heading, paragraph and image):
-- the title (by default "Show, Attend and Tell: <name>, <attention> attention (<score>
-- score)", or without a name "Show, Attend and Tell"), the intro line (by default the steps
-- and seconds of a Trainer's history), r.lines (caption_eval.test's summary) and the overlay
-- strips of the first `overlays` images of the set (written into dir).
function M.page(page, cap, set, r, dir, opts)
  opts = opts or {}
  local c, h = cap.config, opts.history
  local title = opts.title or (opts.name and string.format("Show, Attend and Tell: %s, %s " ..
    "attention (%s score)", opts.name, c.attention, c.score)) or "Show, Attend and Tell"
  local intro = opts.intro or (h and string.format("%d steps, %.0f s of training.", h.steps,
                                                   h.seconds))
  page:heading(title)
  if intro then page:paragraph(intro) end
  for _, l in ipairs(r.lines) do page:paragraph(l) end
  page:paragraph("Each strip: the image, then where the model looked for each word it generated.")
  for _, o in ipairs(M.overlays(cap, set, r.words, r.alphas, dir, opts.overlays or 8)) do
    page:image(o.png, {caption = string.format("%d. %s | reference: %s (BLEU-1 %.0f, " ..
                       "BLEU-4 %.0f)", o.i, o.words, o.refs_text,
                       100 * o.bleu[1], 100 * o.bleu[4])})
  end
  return page
end

return M
