--- datasets/caption_sources.lua (glimpse.data.caption_sources) -- the data of a captioning
-- experiment in one shape, whatever the corpus: the generated scenes or shapes, or a real
-- corpus in Karpathy's split JSON with its image folder.
--
--   local sources = glimpse.data.caption_sources
--   local src = sources.scenes{dataset = "scenes", train = 4000, valid = 300, test = 300, seed = 1}
--   local src = sources.karpathy{file = "dataset_flickr8k.json", images = "Flicker8k_Dataset",
--                                size = 224, mean = IMAGENET_MEAN, std = IMAGENET_STD}
--
-- A source has: vocab; image_spec {channels, height, width, mean, std}; train, a dataset
-- (n, lengths, collate(indices) -> {images, captions_in, captions_out, mask}) for
-- batches.order / the Trainer; valid and test, evaluation sets {n, has_boxes, height, width,
-- batch(indices) -> batch, refs(i) -> reference strings (scenes: every phrasing of the
-- scene's caption, scene_text.references, the caption first), display(i) -> the (C,H,W) picture
-- as seen (before normalisation), scene(i) (scenes: the scene with its item boxes)};
-- train_captions() -> every training caption as a string; random_images(indices) -> the
-- images of those training examples (B,C,H,W).
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
  return {vocab = train.vocab, train = train, valid = wrap(valid), test = wrap(test),
          image_spec = {channels = train.images.shape[2], height = train.images.shape[3],
                        width = train.images.shape[4]},
          train_captions = function() return train:captions() end,
          random_images = function(idx) return batches.take(train.images, idx) end}
end

local CACHE_MAX = 4000           -- pictures kept in memory once read and resized

--- caption_sources.karpathy{file=, images=, size=64, mean=nil, std=nil, min_count=5,
---                          max_len=30} -> source.  Images are read (3 channels), resized to
--- size x size and normalised with mean/std when given; restval counts as train.
function M.karpathy(o)
  local captions = require("glimpse").data.captions
  local image = require("glimpse").image
  if not o.images then error("caption_sources.karpathy: option 'images' (the image folder) is missing", 2) end
  local set = captions.load_karpathy(o.file, {merge_restval = true})
  local train_set, valid_set, test_set = set:split("train"), set:split("val"), set:split("test")
  if train_set:size() == 0 then error("caption_sources.karpathy: " .. o.file .. " has no training images", 2) end
  local vocab = captions.build_vocab(train_set, {min_count = o.min_count or 5})
  local size, max_len = o.size or 64, o.max_len or 30
  local spec = {channels = 3, height = size, width = size, mean = o.mean, std = o.std}
  local cache, cached = {}, 0
  local function picture(im)
    local t = cache[im.filename]
    if t then return t end
    t = image.resize(image.load(o.images .. "/" .. im.filename, {channels = 3}), size, size)
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
  return {vocab = vocab, train = train, valid = wrap(valid_set), test = wrap(test_set),
          image_spec = spec,
          train_captions = function()
            local out = {}
            for _, c in ipairs(train_set:all_captions()) do out[#out + 1] = table.concat(c, " ") end
            return out
          end,
          random_images = function(idx)
            local list = {}
            for k, i in ipairs(idx) do list[k] = train_set.images[enc.image[i]] end
            return stack(list)
          end}
end

return M
