-- scripts/caption.lua -- train a "Show, Attend and Tell" captioner (glimpse.captioner, Xu et
-- al. 2015) with soft or hard attention, and look at where it looks.
--
--   glimpse scripts/caption.lua --quick                          (scenes, soft, about 2 minutes)
--   glimpse scripts/caption.lua                                  (20000 scenes, 6 epochs)
--   glimpse scripts/caption.lua --attention hard                 (scenes of Fashion-MNIST items)
--   glimpse scripts/caption.lua --attention hard --init out/caption-scenes-soft/model.safetensors
--   glimpse scripts/caption.lua --dataset shapes --score general (coloured shapes)
--   glimpse scripts/caption.lua --karpathy dataset_flickr8k.json --images Flicker8k_Dataset \
--       --encoder vgg16 --encoder-weights vgg16.safetensors   (a real corpus; frozen VGG-16)
--
-- Each epoch: the validation loss (teacher forcing) and the BLEU of greedy captions.  At the
-- end: test BLEU-1..4 with beam search, next to two baselines that do not look at the image
-- (a bag of the most frequent words, and a random training caption); for the scenes and
-- shapes sets, whose captions come with a box per item word, the share of each item word's
-- attention that falls inside its item's box (teacher forcing on the test set; "chance" is
-- what a uniform map would get).  Writes to the output folder it names at the end:
-- model.safetensors (Captioner.load reads it), metrics.json, samples.txt, overlay_<k>.png
-- (the image, then the attention map of each generated word) and index.html.
local argparse = require "argparse"
local glimpse = require "glimpse"
local Captioner = require("glimpse.captioner").Captioner
local metrics = require "glimpse.metrics"
local util = require "glimpse.util"
local progress = require "glimpse.progress"

local data, optim, models = glimpse.data, glimpse.optim, glimpse.models
local Vocab, batches = data.Vocab, data.batches

-- ---------------------------------------------------------------------------------------
-- flags

local parser = argparse("caption.lua", "Train a Show, Attend and Tell captioner.")
parser:option("--dataset", "scenes | shapes (ignored with --karpathy)", "scenes")
  :choices({"scenes", "shapes"})
parser:option("--karpathy", "a Karpathy split JSON (dataset_flickr8k.json, ...)")
parser:option("--images", "the folder holding the corpus's image files (with --karpathy)")
parser:option("--attention", "soft | hard", "soft"):choices({"soft", "hard"})
parser:option("--score", "attention score (f_att)", "additive")
  :choices({"additive", "general", "concat", "dot", "scaled_dot", "cosine"})
parser:option("--ds", "doubly stochastic penalty lambda (0: off)", "1"):convert(tonumber)
parser:flag("--no-gate", "no beta_t gating scalar")
parser:flag("--no-deep-output", "p(y_t) = softmax(W h_t) instead of the deep output layer")
parser:flag("--no-coords", "no (x, y) cell coordinates appended to the annotations")
parser:flag("--output-tanh", "a tanh inside the deep output layer (the authors' code)")
parser:option("--encoder", "small | vgg16 | resnet18 | ... (glimpse.models)", "small")
parser:option("--encoder-weights", "safetensors weights for a torchvision encoder")
parser:flag("--fine-tune", "train a pretrained encoder too (default: frozen when weights are given)")
parser:option("--channels", "small CNN: channels per conv block", "16,32,64")
parser:flag("--no-batch-norm", "small CNN without batch normalisation")
parser:option("--image-size", "images are resized to this (karpathy; small CNN default 64)")
  :convert(tonumber)
parser:option("--embed", "word embedding size m", "64"):convert(tonumber)
parser:option("--hidden", "LSTM size n", "256"):convert(tonumber)
parser:option("--att", "attention MLP size", "128"):convert(tonumber)
parser:option("--dropout", "dropout on the deep output", "0"):convert(tonumber)
parser:option("--soft-prob", "hard: probability of the expected context per batch", "0.5")
  :convert(tonumber)
parser:option("--entropy", "hard: entropy bonus lambda_e", "0.01"):convert(tonumber)
parser:option("--reward-weight", "hard: REINFORCE weight lambda_r", "1"):convert(tonumber)
parser:option("--hard-eval", "hard: what test time uses (argmax | soft | sample)", "argmax")
  :choices({"argmax", "soft", "sample"})
parser:option("--train", "training scenes", "20000"):convert(tonumber)
parser:option("--valid", "validation scenes", "500"):convert(tonumber)
parser:option("--test", "test scenes", "500"):convert(tonumber)
parser:option("--clutter", "scenes: clutter fragments per scene", "0"):convert(tonumber)
parser:option("--min-count", "karpathy: least count of a vocabulary word", "5"):convert(tonumber)
parser:option("--max-len", "longest caption (words)", "30"):convert(tonumber)
parser:option("--epochs", "training epochs", "6"):convert(tonumber)
parser:option("--steps", "most training steps (0: no limit)", "0"):convert(tonumber)
parser:option("--time-limit", "most training seconds (0: no limit)", "600"):convert(tonumber)
parser:option("--batch", "batch size", "32"):convert(tonumber)
parser:option("--lr", "Adam learning rate", "0.003"):convert(tonumber)
parser:option("--clip", "gradient-norm clip", "5"):convert(tonumber)
parser:option("--lr-decay", "cosine: lr falls to 0 over the run (steps or time limit, whichever " ..
              "ends it first); none: constant", "cosine"):choices({"cosine", "none"})
parser:option("--beam", "beam size for the test captions", "3"):convert(tonumber)
parser:option("--overlays", "test images drawn with per-word attention", "8"):convert(tonumber)
parser:option("--init", "start from the weights of a saved captioner (e.g. a soft model " ..
              "for hard attention); the sizes must match")
parser:option("--threads", "BLAS threads (0: leave as is)", "1"):convert(tonumber)
parser:option("--seed", "random seed", "1"):convert(tonumber)
parser:option("--out", "output folder (default out/caption-<dataset>-<attention>)")
parser:flag("--quick", "a short demo: 4000 scenes, 90 s of training (about two minutes in all)")
local args = parser:parse(arg)

if args.quick then
  args.train, args.valid, args.test = math.min(args.train, 4000), math.min(args.valid, 300),
                                      math.min(args.test, 300)
  args.epochs = 20
  if args.time_limit == 0 or args.time_limit > 90 then args.time_limit = 90 end
end
if args.threads > 0 then glimpse.set_num_threads(args.threads) end
local dataset_name = args.karpathy and "karpathy" or args.dataset
local out_dir = args.out or string.format("out/caption-%s-%s", dataset_name, args.attention)
glimpse.manual_seed(args.seed)

local function channels_list(s)
  local out = {}
  for c in s:gmatch("%d+") do out[#out + 1] = math.tointeger(tonumber(c)) end
  if #out == 0 then error("caption.lua: --channels must list integers, e.g. 16,32,64", 0) end
  return out
end

-- ---------------------------------------------------------------------------------------
-- data.  Every source gives: vocab; train_batches(epoch) -> iterator of {images, captions_in,
-- captions_out, mask}; eval sets {n, batch(indices) -> batch with images, refs(i) -> list of
-- reference strings, display(i) -> the (C,H,W) picture, tokens/boxes for in-box scores}.

local source = {}
local t_data = glimpse.clock()

local function scene_sets()
  local gen = args.dataset == "shapes" and data.shapes or data.scenes
  local function make(split, n, seed)
    local o = {split = split, n = n, seed = seed}
    if args.dataset == "scenes" then o.clutter = args.clutter end
    return gen.generate(o)
  end
  local train = make("train", args.train, args.seed)
  local valid = make("val", args.valid, args.seed)
  local test = make("test", args.test, args.seed)
  source.vocab = train.vocab
  source.image_spec = {channels = train.images.shape[2], height = train.images.shape[3],
                       width = train.images.shape[4]}
  local lengths = {}
  for i, s in ipairs(train.scenes) do lengths[i] = #s.tokens + 1 end
  function source.train_batches(epoch)
    return batches.iterate(train, {batch_size = args.batch, shuffle = true, seed = args.seed,
                                   epoch = epoch, lengths = lengths, bucket = 20})
  end
  local function wrap(ds)
    return {n = ds.n, has_boxes = true,
            batch = function(idx) return ds:collate(idx) end,
            refs = function(i) return {ds.scenes[i].caption} end,
            display = function(i) return ds:image(i) end,
            scene = function(i) return ds.scenes[i] end,
            height = ds.height, width = ds.width}
  end
  source.valid, source.test = wrap(valid), wrap(test)
  source.train_size = train.n
  function source.train_captions() return train:captions() end
  function source.random_images(idx) return batches.take(train.images, idx) end
end

local function karpathy_sets()
  if not args.images then error("caption.lua: --karpathy needs --images DIR", 0) end
  local captions = data.captions
  local set = captions.load_karpathy(args.karpathy, {merge_restval = true})
  local train_set, valid_set, test_set = set:split("train"), set:split("val"), set:split("test")
  if train_set:size() == 0 then error("caption.lua: the corpus has no training images", 0) end
  local vocab = captions.build_vocab(train_set, {min_count = args.min_count})
  source.vocab = vocab
  local pretrained = args.encoder ~= "small"
  local size = args.image_size or (pretrained and 224 or 64)
  source.image_spec = {channels = 3, height = size, width = size}
  if pretrained then
    source.image_spec.mean, source.image_spec.std = models.IMAGENET_MEAN, models.IMAGENET_STD
  end
  local cache, cached, CACHE_MAX = {}, 0, 4000
  local function picture(im)                       -- resized, not normalised, cached
    local t = cache[im.filename]
    if t then return t end
    t = glimpse.image.load(args.images .. "/" .. im.filename, {channels = 3})
    t = glimpse.image.resize(t, size, size)
    if cached < CACHE_MAX then cache[im.filename] = t; cached = cached + 1 end
    return t
  end
  local function normalise(t)
    local s = source.image_spec
    if s.mean then return glimpse.image.normalize(t, s.mean, s.std) end
    return t
  end
  local function stack_images(list)
    local ims = {}
    for k, im in ipairs(list) do ims[k] = normalise(picture(im)) end
    return glimpse.stack(ims, 1)
  end
  local enc = train_set:encode(vocab, {max_len = args.max_len + 2})
  function source.train_batches(epoch)
    local it = batches.iterate(enc, {batch_size = args.batch, shuffle = true, seed = args.seed,
                                     epoch = epoch, lengths = enc.lengths, bucket = 20})
    return function()
      local b = it()
      if not b then return nil end
      local list = {}
      for k, i in ipairs(b.image_indices) do list[k] = train_set.images[i] end
      b.images = stack_images(list)
      return b
    end
  end
  local function wrap(s)
    return {n = s:size(), has_boxes = false,
            batch = function(idx)
              local list, cin, cout = {}, {}, {}
              for k, i in ipairs(idx) do
                list[k] = s.images[i]
                local ids = captions.encode(s.images[i].captions[1], vocab, {max_len = args.max_len + 2})
                cin[k] = table.move(ids, 1, #ids - 1, 1, {})
                cout[k] = table.move(ids, 2, #ids, 1, {})
              end
              local b = {images = stack_images(list)}
              b.captions_in = batches.pad(cin, {pad = Vocab.PAD})
              b.captions_out, b.lengths, b.mask = batches.pad(cout, {pad = Vocab.PAD})
              return b
            end,
            refs = function(i)
              local out = {}
              for k, c in ipairs(s.images[i].captions) do out[k] = table.concat(c, " ") end
              return out
            end,
            display = function(i) return picture(s.images[i]) end,
            height = size, width = size}
  end
  source.valid, source.test = wrap(valid_set), wrap(test_set)
  source.train_size = enc.n
  function source.random_images(idx)
    local list = {}
    for k, i in ipairs(idx) do list[k] = train_set.images[enc.image[i]] end
    return stack_images(list)
  end
  function source.train_captions()
    local out = {}
    for _, c in ipairs(train_set:all_captions()) do out[#out + 1] = table.concat(c, " ") end
    return out
  end
end

if args.karpathy then karpathy_sets() else scene_sets() end
t_data = glimpse.clock() - t_data

-- ---------------------------------------------------------------------------------------
-- the model

local encoder_opts
if args.encoder == "small" then
  encoder_opts = {name = "small", in_channels = source.image_spec.channels,
                  channels = channels_list(args.channels), batch_norm = not args.no_batch_norm}
else
  encoder_opts = {name = args.encoder, weights = args.encoder_weights}
end
local fine_tune = args.fine_tune or args.encoder == "small" or not args.encoder_weights
local cap = Captioner{vocab = source.vocab, encoder = encoder_opts, dim_embed = args.embed,
                      dim_hidden = args.hidden, dim_att = args.att,
                      attention = args.attention, score = args.score,
                      doubly_stochastic = args.ds, gate = not args.no_gate,
                      deep_output = not args.no_deep_output, output_tanh = args.output_tanh,
                      dropout = args.dropout, fine_tune = fine_tune,
                      soft_prob = args.soft_prob, entropy = args.entropy,
                      reward_weight = args.reward_weight,
                      hard_eval = args.hard_eval, image = source.image_spec,
                      coords = not args.no_coords,
                      max_len = args.max_len}
if args.init then
  local src = Captioner.load(args.init)
  local ok, err = pcall(cap.load_state_dict, cap, src:state_dict())
  if not ok then
    error("caption.lua: --init " .. args.init .. " does not fit this model: " .. tostring(err), 0)
  end
  for k, v in ipairs(src.vocab:totable()) do
    if cap.vocab:totable()[k] ~= v then
      error("caption.lua: --init " .. args.init .. " was trained with another vocabulary", 0)
    end
  end
end
local params = cap:trainable_parameters()
local opt = optim.Adam(params, {lr = args.lr})
local nparams = 0
for _, p in ipairs(params) do nparams = nparams + p:numel() end

local per_epoch = batches.count({n = source.train_size}, {batch_size = args.batch})
local total_steps = args.epochs * per_epoch
if args.steps > 0 then total_steps = math.min(total_steps, args.steps) end

print(string.format("caption: %s (%d train / %d valid / %d test, vocab %d, data %.1fs), %s " ..
                    "attention, score %s, encoder %s%s, embed %d, hidden %d, att %d, ds %g, " ..
                    "gate %s, deep output %s, dropout %g, %d trainable params, batch %d, " ..
                    "Adam lr %g (%s), clip %g, epochs %d (%d steps), time <= %ss, BLAS threads %d, " ..
                    "seed %d%s",
                    dataset_name, source.train_size, source.valid.n, source.test.n,
                    source.vocab:size(), t_data, args.attention, args.score, args.encoder,
                    args.encoder == "small" and " {" .. args.channels .. (args.no_batch_norm and "}" or "} + BN") or
                    (fine_tune and " (fine-tuned)" or " (frozen)"),
                    args.embed, args.hidden, args.att, args.ds, tostring(not args.no_gate),
                    tostring(not args.no_deep_output), args.dropout, nparams, args.batch,
                    args.lr, args.lr_decay, args.clip, args.epochs, total_steps,
                    args.time_limit > 0 and tostring(args.time_limit) or "inf",
                    glimpse.get_num_threads(), args.seed,
                    args.init and ", from " .. args.init or ""))

-- ---------------------------------------------------------------------------------------
-- evaluation

local EVAL_BATCH = 100
local RECALIBRATE_BATCHES = 50

-- Batch norm keeps running statistics for evaluation, but training batches are bucketed by
-- caption length, which for scenes is the number of items: the last batches before an
-- evaluation all look alike and skew the statistics.  Before evaluating, the statistics are
-- renewed from random (unbucketed) training batches (as "precise BN" does); the weights
-- are untouched.
local has_bn = false
for _, m in ipairs(cap.encoder:modules()) do has_bn = has_bn or m.__name:find("BatchNorm") ~= nil end
local recal_rng = data.Rng.new(args.seed, "caption.recalibrate")
local function recalibrate()
  if not has_bn or not cap.config.fine_tune then return end
  cap:train()
  glimpse.no_grad(function()
    for _ = 1, RECALIBRATE_BATCHES do
      local idx = {}
      for k = 1, args.batch do idx[k] = recal_rng:int(1, source.train_size) end
      cap:annotate(source.random_images(idx))
    end
  end)
end

local function index_range(lo, hi)
  local out = {}
  for i = lo, hi do out[#out + 1] = i end
  return out
end

-- teacher-forced loss (mean token NLL) over a set
local function eval_loss(set)
  cap:evaluate()
  local total, ntok = 0, 0
  glimpse.no_grad(function()
    for lo = 1, set.n, EVAL_BATCH do
      local b = set.batch(index_range(lo, math.min(set.n, lo + EVAL_BATCH - 1)))
      local _, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
      total, ntok = total + info.nll * info.tokens, ntok + info.tokens
    end
  end)
  cap:train()
  return total / math.max(ntok, 1)
end

-- captions for a whole set: list of strings, alphas
local function caption_set(set, beam)
  local words, alphas = {}, {}
  for lo = 1, set.n, EVAL_BATCH do
    local idx = index_range(lo, math.min(set.n, lo + EVAL_BATCH - 1))
    local b = set.batch(idx)
    local w, _, al = cap:caption(b.images, {beam = beam, list = true})
    for k, i in ipairs(idx) do words[i], alphas[i] = w[k], al[k] end
  end
  return words, alphas
end

local function bleu_of(set, words)
  local refs = {}
  for i = 1, set.n do refs[i] = set.refs(i) end
  return metrics.bleu(words, refs)
end

-- attention inside the named item's box, per item word.
-- generated: for each word of the model's own (beam) caption that names exactly one item of
-- the scene (scenes: every item word; shapes: a size, colour or shape word that only one
-- item has), the share of that word's attention inside the item's box.
-- teacher forcing: for each item word of the reference caption, the attention of the step
-- that predicts it.  Chance: what a uniform map puts inside the box.
local function add_score(acc, w, inside, chance)
  local s = acc.per_word[w] or {inside = 0, chance = 0, n = 0}
  s.inside, s.chance, s.n = s.inside + inside, s.chance + chance, s.n + 1
  acc.per_word[w] = s
  acc.inside, acc.chance, acc.n = acc.inside + inside, acc.chance + chance, acc.n + 1
end

local function finish_scores(acc)
  for _, s in pairs(acc.per_word) do s.inside, s.chance = s.inside / s.n, s.chance / s.n end
  if acc.n > 0 then acc.inside, acc.chance = acc.inside / acc.n, acc.chance / acc.n end
  return acc
end

local function in_box_generated(set, words, alphas)
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
  return finish_scores(acc)
end

local function in_box_teacher_forced(set)
  local acc = {per_word = {}, inside = 0, chance = 0, n = 0}
  cap:evaluate()
  glimpse.no_grad(function()
    for lo = 1, set.n, EVAL_BATCH do
      local b = set.batch(index_range(lo, math.min(set.n, lo + EVAL_BATCH - 1)))
      local _, alphas = cap:forward(b.images, b.captions_in)
      local gh, gw = cap:grid_size(set.height, set.width)
      local boxes, out = b.boxes:totable(), b.captions_out:totable()
      local arows = alphas:totable()
      for k = 1, #boxes do
        local list = {}
        for t = 1, #boxes[k] do
          local bx = boxes[k][t]
          list[t] = bx[3] > 0 and bx or false
        end
        local inside, chance = metrics.attention_in_box(arows[k], list, {gh, gw},
                                                        {set.height, set.width})
        for t = 1, #list do
          if inside[t] then add_score(acc, source.vocab:token(out[k][t]), inside[t], chance[t]) end
        end
      end
    end
  end)
  cap:train()
  return finish_scores(acc)
end

-- baselines that never look at the image
local function baselines(set)
  local counts, total_len, n = {}, 0, 0
  local train_caps = source.train_captions()
  for _, c in ipairs(train_caps) do
    for w in c:gmatch("%S+") do counts[w] = (counts[w] or 0) + 1 end
    total_len, n = total_len + select(2, c:gsub("%S+", "")), n + 1
  end
  local order = {}
  for w in pairs(counts) do order[#order + 1] = w end
  table.sort(order, function(a, b) if counts[a] ~= counts[b] then return counts[a] > counts[b] end return a < b end)
  local len = math.floor(total_len / math.max(n, 1) + 0.5)
  -- a bag of words: the most frequent words, each as often as it appears in an average caption
  local bag = {}
  for _, w in ipairs(order) do
    local k = math.max(1, math.floor(counts[w] / n + 0.5))
    for _ = 1, k do if #bag < len then bag[#bag + 1] = w end end
  end
  local bag_caption = table.concat(bag, " ")
  local rng = data.Rng.new(args.seed, "caption.baseline")
  local bag_words, random_words = {}, {}
  for i = 1, set.n do
    bag_words[i] = bag_caption
    random_words[i] = train_caps[rng:int(1, #train_caps)]
  end
  return {bag_of_words = bleu_of(set, bag_words), random_caption = bleu_of(set, random_words),
          bag_caption = bag_caption}
end

-- ---------------------------------------------------------------------------------------
-- training

util.output_dir(out_dir, {args = args, model = cap.config})
local history = {}
local timer = util.Timer()
local bar = progress.Bar{total = total_steps, label = "train",
                         time_limit = args.time_limit > 0 and args.time_limit or nil,
                         fields = {"epoch", "nll", "ds", "reinforce"},
                         formats = {nll = "%.3f", ds = "%.2f", reinforce = "%.2f"}}
local step, stop = 0, false
local ema = {}
local function smooth(k, v)
  if v == nil then return ema[k] end
  ema[k] = ema[k] and 0.95 * ema[k] + 0.05 * v or v
  return ema[k]
end
cap:train()
for epoch = 1, args.epochs do
  for b in source.train_batches(epoch) do
    step = step + 1
    if args.lr_decay == "cosine" then
      local done = (step - 1) / total_steps
      if args.time_limit > 0 then done = math.max(done, timer:elapsed() / args.time_limit) end
      opt.param_groups[1].lr = args.lr * 0.5 * (1 + math.cos(math.pi * math.min(done, 1)))
    end
    opt:zero_grad()
    local loss, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
    loss:backward()
    if args.clip > 0 then optim.clip_grad_norm(params, args.clip) end
    opt:step()
    bar:update(step, {epoch = epoch, nll = smooth("nll", info.nll), ds = smooth("ds", info.ds),
                      reinforce = args.attention == "hard" and smooth("reinforce", info.reinforce) or nil})
    if step >= total_steps or (args.time_limit > 0 and timer:elapsed() >= args.time_limit) then
      stop = true
      break
    end
  end
  bar:pause()
  timer:pause()
  local te = glimpse.clock()
  recalibrate()
  local vloss = eval_loss(source.valid)
  local vwords = caption_set(source.valid, 1)
  local vb = bleu_of(source.valid, vwords)
  history[#history + 1] = {epoch = epoch, step = step, train_seconds = timer:elapsed(),
                           valid_nll = vloss, valid_bleu = {vb[1], vb[2], vb[3], vb[4]}}
  bar:print(string.format("  epoch %d: valid loss %.3f, greedy BLEU-1..4 %.1f %.1f %.1f %.1f " ..
                          "(%.0fs of training, eval %.1fs)  e.g. \"%s\"", epoch, vloss,
                          100 * vb[1], 100 * vb[2], 100 * vb[3], 100 * vb[4], timer:elapsed(),
                          glimpse.clock() - te, vwords[1]))
  timer:resume()
  bar:resume()
  if stop then break end
end
local train_seconds = timer:elapsed()
bar:finish()

-- ---------------------------------------------------------------------------------------
-- results

cap:save(out_dir .. "/model.safetensors")
local te = glimpse.clock()
local test_words, test_alphas = caption_set(source.test, args.beam)
local tb = bleu_of(source.test, test_words)
local greedy_words = caption_set(source.test, 1)
local gb = bleu_of(source.test, greedy_words)
local base = baselines(source.test)
local t_test = glimpse.clock() - te
local test_loss = eval_loss(source.test)
local function pct(b) return string.format("%.1f / %.1f / %.1f / %.1f", 100 * b[1], 100 * b[2],
                                            100 * b[3], 100 * b[4]) end
print(string.format("test (%d images): BLEU-1..4 %s with beam %d (greedy %s); test loss %.3f",
                    source.test.n, pct(tb), args.beam, pct(gb), test_loss))
print(string.format("  baselines without the image: bag of words %s (\"%s\"), random training " ..
                    "caption %s", pct(base.bag_of_words), base.bag_caption, pct(base.random_caption)))

local in_box, in_box_tf
local function box_line(what, acc)
  local words = {}
  for w in pairs(acc.per_word) do words[#words + 1] = w end
  table.sort(words)
  local parts = {}
  for _, w in ipairs(words) do
    parts[#parts + 1] = string.format("%s %.0f%%", w, 100 * acc.per_word[w].inside)
  end
  return string.format("  attention inside the named item's box, %s: %.1f%% of the mass " ..
                       "(chance %.1f%%) over %d item words; per word: %s", what,
                       100 * acc.inside, 100 * acc.chance, acc.n, table.concat(parts, ", "))
end
if source.test.has_boxes then
  in_box = in_box_generated(source.test, test_words, test_alphas)
  in_box_tf = in_box_teacher_forced(source.test)
  print(box_line("generated captions", in_box))
  print(box_line("teacher forcing", in_box_tf))
end

-- pictures
local samples, rows = {}, {}
local function html_escape(s)
  return (s:gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"))
end
for i = 1, source.test.n do
  local refs = source.test.refs(i)
  samples[i] = string.format("%d\t%s\t| %s", i, test_words[i], table.concat(refs, " | "))
  if i <= args.overlays then
    local png = string.format("overlay_%d.png", i)
    local words = test_words[i]
    local list = {}
    for w in words:gmatch("%S+") do list[#list + 1] = w end
    cap:overlays(source.test.display(i), test_alphas[i], list, out_dir .. "/" .. png)
    local b1 = metrics.bleu({words}, {refs})
    rows[#rows + 1] = string.format("<tr><td>%d</td><td><b>%s</b><br>%s<br><small>BLEU-1 %.0f, " ..
                                    "BLEU-4 %.0f</small><br><img src=\"%s\"></td></tr>", i,
                                    html_escape(words), html_escape(table.concat(refs, " / ")),
                                    100 * b1[1], 100 * b1[4], png)
  end
end
util.write_lines(out_dir .. "/samples.txt", samples)

local result = {dataset = dataset_name, attention = args.attention, score = args.score,
                steps = step, train_seconds = train_seconds, test_seconds = t_test,
                test_bleu = {tb[1], tb[2], tb[3], tb[4]}, test_bleu_greedy = {gb[1], gb[2], gb[3], gb[4]},
                test_loss = test_loss, beam = args.beam,
                baseline_bleu = {bag_of_words = {base.bag_of_words[1], base.bag_of_words[2],
                                                 base.bag_of_words[3], base.bag_of_words[4]},
                                 random_caption = {base.random_caption[1], base.random_caption[2],
                                                   base.random_caption[3], base.random_caption[4]}},
                attention_in_box = in_box, attention_in_box_teacher_forced = in_box_tf,
                history = history, config = cap.config, threads = glimpse.get_num_threads(),
                params = nparams}
util.write_json(out_dir .. "/metrics.json", result, {indent = 2})

local html = {
  "<!doctype html><html><head><meta charset=\"utf-8\"><title>glimpse captioner</title>",
  "<style>body{font-family:sans-serif;margin:2em}td{padding:6px;vertical-align:top;" ..
  "border-bottom:1px solid #ddd}img{image-rendering:pixelated}</style></head><body>",
  string.format("<h1>Show, Attend and Tell: %s, %s attention (%s score)</h1>",
                html_escape(dataset_name), args.attention, args.score),
  string.format("<p>%d steps, %.0f s of training. Test BLEU-1..4 (beam %d): <b>%s</b>; greedy %s; " ..
                "without the image: bag of words %s, random training caption %s.</p>", step,
                train_seconds, args.beam, pct(tb), pct(gb), pct(base.bag_of_words),
                pct(base.random_caption)),
}
if in_box then
  html[#html + 1] = string.format("<p>Attention inside the named item's box: <b>%.1f%%</b> of " ..
                                  "the mass for the item words of the generated captions " ..
                                  "(chance %.1f%%); %.1f%% under teacher forcing (chance " ..
                                  "%.1f%%).</p>", 100 * in_box.inside, 100 * in_box.chance,
                                  100 * in_box_tf.inside, 100 * in_box_tf.chance)
end
html[#html + 1] = "<p>Each strip: the image, then where the model looked for each word it " ..
                  "generated. Bold: generated caption; below it the reference(s).</p><table>"
for _, r in ipairs(rows) do html[#html + 1] = r end
html[#html + 1] = "</table></body></html>"
util.write_text(out_dir .. "/index.html", table.concat(html, "\n") .. "\n")

for i = 1, math.min(5, source.test.n) do
  print(string.format("  %-60s | %s", test_words[i], source.test.refs(i)[1]))
end
print("wrote model.safetensors, metrics.json, samples.txt, overlay_*.png and index.html to " .. out_dir)
