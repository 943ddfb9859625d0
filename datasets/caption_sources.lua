--- datasets/caption_sources.lua (glimpse.data.caption_sources) -- the data of a captioning
-- experiment in one shape, whatever the corpus: the generated scenes or shapes, or a real
-- corpus -- a folder of pictures with a captions file, in Karpathy's split JSON or a TSV
-- (datasets/captions.lua's load_file).
--
--   local sources = glimpse.data.caption_sources
--   local src = sources.scenes{dataset = "scenes", train = 4000, valid = 300, test = 300, seed = 1}
--   local src = sources.karpathy{file = "dataset_flickr8k.json", images = "Flicker8k_Dataset",
--                                size = 224, mean = IMAGENET_MEAN, std = IMAGENET_STD}
--   local src = sources.karpathy{file = "captions.tsv", images = "pictures", size = 64}
--
-- A source has: vocab; image_spec {channels, height, width, mean, std}; train, a dataset
-- (n, lengths, collate(indices) -> {images, captions_in, captions_out, mask}) for
-- batches.order / the Trainer; valid and test, evaluation sets {n, has_boxes, height, width,
-- batch(indices) -> batch, refs(i) -> reference strings (scenes: every phrasing of the
-- scene's caption, scene_text.references, the caption first), display(i) -> the (C,H,W) picture
-- as seen (before normalisation), scene(i) (scenes: the scene with its item boxes)};
-- train_captions() -> every training caption as a string; train_refs(i) -> the reference
-- strings of training example i's image (what self-critical training scores against,
-- caption_eval.self_critical); train_scene(i) (scenes) -> that scene, items and relations;
-- random_images(indices) -> the
-- images of those training examples (B,C,H,W); pictures(n) -> up to n training pictures as
-- seen, (C,H,W) in [0,1] before normalisation (what glimpse.captioner.familiar summarises);
-- description: a text saying what the training images and captions are (cap.description).
local Vocab = require "glimpse.data.vocab"
local batches = require "glimpse.data.batches"

local M = {}

--- caption_sources.scenes{dataset="scenes"|"shapes", train=20000, valid=500, test=500,
---                        clutter=0, seed=1} -> source (see the file's header)
function M.scenes(o)
  local gen = require("glimpse").data[o.dataset == "shapes" and "shapes" or "scenes"]
  local function make(split, n)
    local opts = {split = split, n = n or 500, seed = o.seed or 1}
    if o.dataset ~= "shapes" then opts.clutter = o.clutter or 0 end
    return gen.generate(opts)
  end
  local train, valid, test = make("train", o.train or 20000), make("val", o.valid), make("test", o.test)
  local lengths = {}
  for i, s in ipairs(train.scenes) do lengths[i] = #s.tokens + 1 end
  train.lengths = lengths
  local function wrap(ds)
    return {n = ds.n, has_boxes = true, height = ds.height, width = ds.width,
            batch = function(idx) return ds:collate(idx) end,
            refs = function(i) return ds:references(i) end,      -- every phrasing
            display = function(i) return ds:image(i) end,
            scene = function(i) return ds.scenes[i] end}
  end
  local C, H, W = train.images.shape[2], train.images.shape[3], train.images.shape[4]
  local words = {}
  for i, w in ipairs(train.vocab:totable()) do if i > 4 then words[#words + 1] = w end end
  local what = o.dataset == "shapes" and "shapes" or
               "scenes of 2-4 Fashion-MNIST items on a black background"
  return {vocab = train.vocab, train = train, valid = wrap(valid), test = wrap(test),
          image_spec = {channels = C, height = H, width = W},
          description = table.concat({
            string.format("%dx%d %s %s", H, W, C == 1 and "grey" or "colour", what),
            string.format("made by glimpse.data.%s.generate{split = \"train\", seed = %d}: %d " ..
                          "training images%s", o.dataset == "shapes" and "shapes" or "scenes",
                          o.seed or 1, train.n, (o.clutter or 0) > 0 and
                          string.format(", clutter %d", o.clutter) or ""),
            string.format("vocabulary (%d words): %s", #words, table.concat(words, " "))}, "\n"),
          pictures = function(n)
            local out = {}
            for i = 1, math.min(n, train.n) do out[i] = train:image(i) end
            return out
          end,
          train_captions = function() return train:captions() end,
          train_refs = function(i) return train:references(i) end,
          train_scene = function(i) return train.scenes[i] end,
          random_images = function(idx) return batches.take(train.images, idx) end}
end

local CACHE_MAX = 4000           -- pictures kept in memory once read and resized

--- caption_sources.karpathy{file=, images=, size=64, channels=nil, mean=nil, std=nil,
---                          min_count=5, max_len=30} -> source: the pictures of the folder
--- `images` with the captions of `file`, Karpathy's split JSON or a TSV ("<file>\t<caption>
--- [\t<split>]", captions.load_file).  Images are read with `channels` (default: 1 when the
--- first training picture is grey, else 3), resized to size x size and normalised with
--- mean/std when given; restval counts as train.  Images without a split go by their place
--- in the file (captions' set:default_splits: every 10th to test, every 10th from the 5th to
--- val); when that leaves no validation or test image (a tiny corpus) the training images
--- stand in (source.note says so).
function M.karpathy(o)
  local glimpse = require "glimpse"
  local captions = glimpse.data.captions
  local image = glimpse.image
  if not o.images then error("caption_sources.karpathy: option 'images' (the image folder) is missing", 2) end
  local ok, set = pcall(captions.load_file, o.file, {merge_restval = true})
  if not ok then error("caption_sources.karpathy: " .. tostring(set):gsub("^[^\n:]*:%d+: ", ""), 2) end
  set:default_splits()
  local train_set, valid_set, test_set = set:split("train"), set:split("val"), set:split("test")
  if train_set:size() == 0 then error("caption_sources.karpathy: " .. o.file .. " has no training images", 2) end
  local note
  if valid_set:size() == 0 or test_set:size() == 0 then
    note = string.format("%s: %d images give no %s split: the training images stand in", o.file,
                         set:size(), valid_set:size() == 0 and "validation" or "test")
    if valid_set:size() == 0 then valid_set = train_set end
    if test_set:size() == 0 then test_set = train_set end
  end
  local vocab = captions.build_vocab(train_set, {min_count = o.min_count or 5})
  local size, max_len = o.size or 64, o.max_len or 30
  local channels = o.channels
  if not channels then
    local first = o.images .. "/" .. train_set.images[1].filename
    local okl, t = pcall(image.load, first)
    if not okl then error("caption_sources.karpathy: " .. tostring(t):gsub("^[^\n:]*:%d+: ", ""), 2) end
    channels = t.shape[1] <= 2 and 1 or 3
  end
  local spec = {channels = channels, height = size, width = size, mean = o.mean, std = o.std}
  local cache, cached = {}, 0
  local function picture(im)
    local t = cache[im.filename]
    if t then return t end
    t = image.resize(image.load(o.images .. "/" .. im.filename, {channels = channels}), size, size)
    if cached < CACHE_MAX then cache[im.filename] = t; cached = cached + 1 end
    return t
  end
  local function stack(list)
    local ims = {}
    for k, im in ipairs(list) do
      ims[k] = spec.mean and image.normalize(picture(im), spec.mean, spec.std) or picture(im)
    end
    return require("glimpse").stack(ims, 1)
  end
  local enc = train_set:encode(vocab, {max_len = max_len + 2})
  local train = {n = enc.n, lengths = enc.lengths}
  function train.collate(_, idx)
    local b = enc:collate(idx)
    local list = {}
    for k, i in ipairs(b.image_indices) do list[k] = train_set.images[i] end
    b.images = stack(list)
    return b
  end
  local function wrap(s)
    return {n = s:size(), has_boxes = false, height = size, width = size,
            batch = function(idx)
              local list, cin, cout = {}, {}, {}
              for k, i in ipairs(idx) do
                list[k] = s.images[i]
                local ids = captions.encode(s.images[i].captions[1], vocab, {max_len = max_len + 2})
                cin[k] = table.move(ids, 1, #ids - 1, 1, {})
                cout[k] = table.move(ids, 2, #ids, 1, {})
              end
              local b = {images = stack(list)}
              b.captions_in = batches.pad(cin, {pad = Vocab.PAD})
              b.captions_out, b.lengths, b.mask = batches.pad(cout, {pad = Vocab.PAD})
              return b
            end,
            refs = function(i)
              local out = {}
              for k, c in ipairs(s.images[i].captions) do out[k] = table.concat(c, " ") end
              return out
            end,
            display = function(i) return picture(s.images[i]) end}
  end
  local words = {}
  for i, w in ipairs(vocab:totable()) do if i > 4 then words[#words + 1] = w end end
  return {vocab = vocab, train = train, valid = wrap(valid_set), test = wrap(test_set),
          image_spec = spec, note = note,
          description = table.concat({
            string.format("%dx%d %s pictures of the folder %s (resized), captioned by %s",
                          size, size, channels == 1 and "grey" or "colour", o.images, o.file),
            string.format("%d training pictures with %d captions", train_set:size(),
                          train_set:count_captions()),
            string.format("vocabulary (%d words%s): %s", #words, #words > 40 and ", the 40 " ..
                          "most frequent shown" or "", table.concat(words, " ", 1,
                                                                    math.min(40, #words)))}, "\n"),
          pictures = function(n)
            local out = {}
            for i = 1, math.min(n, train_set:size()) do out[i] = picture(train_set.images[i]) end
            return out
          end,
          train_captions = function()
            local out = {}
            for _, c in ipairs(train_set:all_captions()) do out[#out + 1] = table.concat(c, " ") end
            return out
          end,
          train_refs = function(i)
            local out = {}
            for k, c in ipairs(train_set.images[enc.image[i]].captions) do out[k] = table.concat(c, " ") end
            return out
          end,
          random_images = function(idx)
            local list = {}
            for k, i in ipairs(idx) do list[k] = train_set.images[enc.image[i]] end
            return stack(list)
          end}
end

return M
