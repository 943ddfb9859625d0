--- datasets/captions.lua -- image-caption corpora: Karpathy's split files
-- (dataset_flickr8k.json, dataset_flickr30k.json, dataset_coco.json) and Flickr8k's own token
-- file (Flickr8k.token.txt) with its split lists (Flickr_8k.trainImages.txt ...); vocabulary
-- building and caption encoding.  Images are not read here: a set names each image's file,
-- which glimpse.image.load can read (or a feature cache can key on).
--
-- Karpathy JSON: {"images": [{"filename": "x.jpg", "split": "train"|"val"|"test"|"restval",
--                 "sentences": [{"tokens": ["a", "dog"], "raw": "A dog."}, ...]}, ...]}
-- Flickr8k tokens: one caption a line, "<file>#<k>\t<caption text>".
-- TSV: one caption a line, "<file>\t<caption text>[\t<split>]" (a file on several lines has
-- several captions; "#" lines are comments); captions.load_file reads either format.
--
--   local captions = require "datasets.captions"
--   local set = captions.load_karpathy("dataset_flickr8k.json")
--   local train = set:split("train")
--   local vocab = captions.build_vocab(train, {min_count = 5})
--   local ds = train:encode(vocab, {max_len = 20})
--   local b = ds:collate({1, 2})  -- b.captions_in (2,T) <start> w.., b.captions_out w.. <end>
local cjson = require "cjson"
local Vocab = require "glimpse.data.vocab"
local batches = require "glimpse.data.batches"
local check = require "glimpse.check"
local util = require "glimpse.util"

local M = {}

--- captions.tokenize(text) -> list of lowercase words; punctuation is dropped (as in Karpathy's
--- preprocessing).
function M.tokenize(text)
  local out = {}
  for w in text:lower():gmatch("[%w]+") do out[#out + 1] = w end
  return out
end

local Set = {}
Set.__index = Set
M.Set = Set

local function new_set(images, name)
  return setmetatable({images = images, name = name}, Set)
end

-- the text of a file, or an error naming the caller `who` (at the caller of who)
local function read_file(path, who)
  local ok, s = pcall(util.read_text, path)
  if not ok then error(who .. ": cannot open '" .. path .. "': " .. check.strip(s):gsub("^util%.read_text: ", ""), 3) end
  return s
end

--- captions.load_karpathy(path, {merge_restval=false}) -> set.  set.images[k] =
--- {filename=, split=, captions = {token lists}, raw = {strings}}.  merge_restval renames the
--- "restval" split to "train" (the usual practice for COCO).  Missing tokens are made from raw.
function M.load_karpathy(path, opts)
  opts = opts or {}
  local ok, doc = pcall(cjson.decode, read_file(path, "load_karpathy"))
  if not ok then error("load_karpathy: '" .. path .. "' is not valid JSON: " .. tostring(doc), 2) end
  if type(doc) ~= "table" or type(doc.images) ~= "table" then
    error("load_karpathy: '" .. path .. "' has no \"images\" list", 2)
  end
  local images = {}
  for k, im in ipairs(doc.images) do
    if type(im) ~= "table" or type(im.filename) ~= "string" or type(im.sentences) ~= "table" then
      error(string.format("load_karpathy: image %d of '%s' lacks a filename or sentences", k, path), 2)
    end
    local split = type(im.split) == "string" and im.split or "train"
    if opts.merge_restval and split == "restval" then split = "train" end
    local caps, raws = {}, {}
    for _, s in ipairs(im.sentences) do
      local raw = type(s.raw) == "string" and s.raw or nil
      local toks = {}
      if type(s.tokens) == "table" then
        for _, t in ipairs(s.tokens) do toks[#toks + 1] = tostring(t):lower() end
      elseif raw then
        toks = M.tokenize(raw)
      end
      caps[#caps + 1] = toks
      raws[#raws + 1] = raw or table.concat(toks, " ")
    end
    local path_prefix = type(im.filepath) == "string" and (im.filepath .. "/") or ""
    images[#images + 1] = {filename = path_prefix .. im.filename, split = split, captions = caps,
                           raw = raws}
  end
  return new_set(images, doc.dataset)
end

--- captions.load_flickr8k(path) -> set from Flickr8k.token.txt.  Images keep the order of
--- their first line; captions the order of their #k.  split is nil until assign_splits.
function M.load_flickr8k(path)
  local text = read_file(path, "load_flickr8k")
  local images, by_name = {}, {}
  local lineno = 0
  for line in text:gmatch("[^\r\n]+") do
    lineno = lineno + 1
    local file, k, raw = line:match("^([^#\t]+)#(%d+)\t(.*)$")
    if not file then
      if line:match("%S") then
        error(string.format("load_flickr8k: '%s' line %d is not '<file>#<k>\\t<caption>'", path,
                            lineno), 2)
      end
    else
      local im = by_name[file]
      if not im then
        im = {filename = file, captions = {}, raw = {}, order = {}}
        by_name[file] = im
        images[#images + 1] = im
      end
      im.order[#im.order + 1] = {tonumber(k), raw}
    end
  end
  for _, im in ipairs(images) do
    table.sort(im.order, function(a, b) return a[1] < b[1] end)
    for j, e in ipairs(im.order) do
      im.raw[j] = e[2]
      im.captions[j] = M.tokenize(e[2])
    end
    im.order = nil
  end
  return new_set(images, "flickr8k")
end

--- captions.load_tsv(path) -> set from a TSV file: one caption a line, "<file>\t<caption>"
--- with an optional third column "train", "val" or "test" (else split is nil); a file on
--- several lines gets several captions, in order.  Blank lines and lines starting with "#"
--- are skipped; any other line without a tab is an error naming the file and the line.
function M.load_tsv(path)
  local text = read_file(path, "load_tsv")
  local images, by_name, lineno = {}, {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    lineno = lineno + 1
    line = line:gsub("\r$", "")
    if line:match("%S") and not line:match("^%s*#") then
      local file, rest = line:match("^([^\t]+)\t(.*)$")
      if not file then
        error(string.format("load_tsv: '%s' line %d is not '<file>\\t<caption>[\\t<split>]'",
                            path, lineno), 2)
      end
      local raw, split = rest:match("^(.-)\t(%a+)%s*$")
      raw = raw or rest
      if split and split ~= "train" and split ~= "val" and split ~= "test" then
        error(string.format("load_tsv: '%s' line %d: split must be train, val or test, got %q",
                            path, lineno, split), 2)
      end
      local im = by_name[file]
      if not im then
        im = {filename = file, captions = {}, raw = {}, split = split}
        by_name[file] = im
        images[#images + 1] = im
      end
      im.split = im.split or split
      im.raw[#im.raw + 1] = raw
      im.captions[#im.captions + 1] = M.tokenize(raw)
    end
  end
  if #images == 0 then error("load_tsv: '" .. path .. "' has no captions", 2) end
  return new_set(images, "tsv")
end

--- captions.load_file(path, opts) -> set: a Karpathy JSON file (its name ends in .json or its
--- text starts with "{") by load_karpathy(path, opts), else a TSV file by load_tsv
function M.load_file(path, opts)
  local head = read_file(path, "captions.load_file"):match("^%s*(.)")
  local ok, set
  if path:lower():match("%.json$") or head == "{" then
    ok, set = pcall(M.load_karpathy, path, opts)
  else
    ok, set = pcall(M.load_tsv, path)
  end
  if not ok then error(check.strip(set), 2) end
  return set
end

--- set:default_splits({every = 10}) -> set (in place): images without a split get one by
--- their place k in the file: test when k % every == 0, val when k % every == every // 2,
--- train otherwise
function Set:default_splits(opts)
  local every = (opts and opts.every) or 10
  for k, im in ipairs(self.images) do
    if not im.split then
      im.split = k % every == 0 and "test" or (k % every == every // 2 and "val" or "train")
    end
  end
  return self
end

--- captions.read_list(path) -> list of the non-empty lines of a file (e.g. the image names of
--- Flickr_8k.trainImages.txt).
function M.read_list(path)
  local out = {}
  for line in read_file(path, "read_list"):gmatch("[^\r\n]+") do
    local s = line:match("^%s*(.-)%s*$")
    if s ~= "" then out[#out + 1] = s end
  end
  return out
end

--- set:assign_splits{train = names or path, val = ..., test = ...} -> set (in place): each
--- image listed gets that split; others keep theirs.
function Set:assign_splits(lists)
  local where = {}
  for split, list in pairs(lists) do
    if type(list) == "string" then list = M.read_list(list) end
    for _, name in ipairs(list) do where[name] = split end
  end
  for _, im in ipairs(self.images) do
    if where[im.filename] then im.split = where[im.filename] end
  end
  return self
end

--- set:split(name) -> a set of the images whose split is name (shared image tables).
function Set:split(name)
  local out = {}
  for _, im in ipairs(self.images) do
    if im.split == name then out[#out + 1] = im end
  end
  return new_set(out, self.name)
end

--- set:size() -> number of images; set:count_captions() -> number of captions.
function Set:size() return #self.images end
function Set:count_captions()
  local n = 0
  for _, im in ipairs(self.images) do n = n + #im.captions end
  return n
end

--- set:all_captions() -> list of every caption's token list.
function Set:all_captions()
  local out = {}
  for _, im in ipairs(self.images) do
    for _, c in ipairs(im.captions) do out[#out + 1] = c end
  end
  return out
end

--- captions.build_vocab(set or list of token lists, {min_count=5, max_size=nil}) -> vocab:
--- <pad> <start> <end> <unk>, then the words seen at least min_count times, most frequent
--- first (ties alphabetical).  Also returns the counts.
function M.build_vocab(src, opts)
  opts = opts or {}
  local seqs = getmetatable(src) == Set and src:all_captions() or src
  return Vocab.build(seqs, {min_count = opts.min_count or 5, max_size = opts.max_size})
end

--- captions.encode(tokens, vocab, {max_len=nil}) -> ids with <start> and <end> (max_len counts
--- both); captions.decode(ids, vocab) -> the caption string (stops at <end>).
function M.encode(tokens, vocab, opts)
  opts = opts or {}
  return vocab:encode(tokens, {start = true, stop = true, max_len = opts.max_len})
end

function M.decode(ids, vocab)
  return vocab:decode_string(ids, " ")
end

-- ---------------------------------------------------------------------------------------
-- caption-level dataset for batching

local Encoded = {}
Encoded.__index = Encoded
M.Encoded = Encoded

--- set:encode(vocab, {max_len=nil}) -> a caption-level dataset: ds.image[i] (index into
--- set.images), ds.ids[i] (with <start>/<end>), ds.lengths[i]; ds:collate(indices) ->
--- {captions_in (B,T) = <start> w.., captions_out (B,T) = w.. <end>, mask (B,T), lengths {B},
---  image_indices {B}, filenames {B}, indices}.
function Set:encode(vocab, opts)
  local ds = setmetatable({set = self, vocab = vocab, image = {}, ids = {}, lengths = {}}, Encoded)
  for k, im in ipairs(self.images) do
    for _, c in ipairs(im.captions) do
      local ids = M.encode(c, vocab, opts)
      local i = #ds.ids + 1
      ds.ids[i], ds.image[i], ds.lengths[i] = ids, k, #ids
    end
  end
  ds.n = #ds.ids
  return ds
end

function Encoded:size() return self.n end

function Encoded:collate(indices)
  local cin, cout, imgs, files = {}, {}, {}, {}
  for k, i in ipairs(indices) do
    local ids = self.ids[i] or error("captions: index " .. tostring(i) .. " outside 1.." .. self.n, 2)
    cin[k] = table.move(ids, 1, #ids - 1, 1, {})
    cout[k] = table.move(ids, 2, #ids, 1, {})
    imgs[k] = self.image[i]
    files[k] = self.set.images[self.image[i]].filename
  end
  local b = {image_indices = imgs, filenames = files, indices = indices}
  b.captions_in = batches.pad(cin, {pad = Vocab.PAD})
  b.captions_out, b.lengths, b.mask = batches.pad(cout, {pad = Vocab.PAD})
  return b
end

return M
