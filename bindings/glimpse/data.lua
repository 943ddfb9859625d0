--- glimpse.data -- datasets and data files.
--
-- File readers (engine/io_gz.c): gzip through zlib, IDX arrays.  Datasets (datasets/*.lua),
-- loaded on first use: fashion_mnist, seq2seq, compare (tasks with true alignments), points,
-- copy_task, captions, caption_sources, scenes, shapes, batches; plus the helpers they share: Vocab
-- (datasets/vocab.lua), Rng (datasets/rng.lua).
-- Every generator takes a seed and draws from its own generator, never from the global one
-- that glimpse.manual_seed sets.
--
--   local data = glimpse.data
--   local x, y = data.fashion_mnist.load("train", {limit = 512})
--   local ds = data.seq2seq.dates{n = 5000, seed = 1}
--   for batch in data.batches.iterate(ds, {batch_size = 64, seed = 1}) do ... end
local glimpse = require "glimpse"

local M = {}

-- The dataset modules are required as "datasets.<name>".  In the source tree the repo root is
-- on package.path; an installed glimpse keeps them in <lua dir>/glimpse/datasets/, so add
-- this file's folder as a root when "datasets" cannot be found otherwise.
if not package.searchpath("datasets.rng", package.path) then
  local here = package.searchpath("glimpse.data", package.path)
  local dir = here and here:match("^(.*)[/\\]data%.lua$")
  if dir then package.path = package.path .. ";" .. dir .. "/?.lua" end
end

local modules = {
  fashion_mnist = "datasets.fashion_mnist",
  seq2seq = "datasets.seq2seq_tasks",
  compare = "datasets.compare_tasks",
  points = "datasets.points",
  copy_task = "datasets.copy_task",
  captions = "datasets.captions",
  caption_sources = "datasets.caption_sources",
  scenes = "datasets.scenes",
  shapes = "datasets.shapes",
  batches = "datasets.batches",
  Vocab = "datasets.vocab",
  Rng = "datasets.rng",
}

setmetatable(M, {__index = function(t, k)
  local name = modules[k]
  if not name then return nil end
  local m = require(name)
  rawset(t, k, m)
  return m
end})

-- Call a binding; re-raise its error at the caller of the wrapper (the user's line).
local function call(f, ...)
  local ok, res = pcall(f, ...)
  if not ok then
    error((tostring(res):gsub("^[^\n]-%.lua:%d+: ", "")), 3)
  end
  return res
end

-- call, with argument errors naming the public function instead of the hidden one
local function call_as(name, f, ...)
  local ok, res = pcall(f, ...)
  if not ok then
    res = tostring(res):gsub("^[^\n]-%.lua:%d+: ", ""):gsub("to 'glimpse%.[_%w]+'", "to '" .. name .. "'")
    error(res, 3)
  end
  return res
end

--- data.read_idx(path, {first=1, limit=nil, scale=false, item_shape=nil}) -> tensor
--- (count, dims 2..n of the file) of floats.  An IDX file (gzipped or plain), items
--- first..first+limit-1 along dim 1.  scale=true divides u8 values by 255; item_shape
--- reshapes each item (e.g. {1,28,28}).
function M.read_idx(path, opts)
  if type(path) ~= "string" then error("read_idx: path expected", 2) end
  if opts ~= nil and type(opts) ~= "table" then
    error("data.read_idx: opts must be a table {first=, limit=, scale=, item_shape=} or nil, got "
          .. type(opts), 2)
  end
  opts = opts or {}
  return call(glimpse._read_idx, path, opts.first or 1, opts.limit,
              opts.scale and true or false, opts.item_shape)
end

--- data.idx_info(path) -> {type=8 (u8) | 9 | 11 | 12 | 13 | 14, shape={...}, numel=}
function M.idx_info(path)
  if type(path) ~= "string" then error("idx_info: path expected", 2) end
  return call(glimpse._idx_info, path)
end

--- data.read_gz(path [, max_bytes=2^31]) -> string: the whole file, decompressed when it is
--- gzipped (a plain file is read as it is).
function M.read_gz(path, max_bytes)
  if type(path) ~= "string" then error("read_gz: path expected", 2) end
  return call(glimpse._read_gz, path, max_bytes)
end

--- data.set_flat(t, pos, values) writes the Lua numbers values[1..] into t's flat elements
--- pos.. (1-based, in place); data.get_flat(t [, pos=1 [, count]]) -> flat Lua table.
function M.set_flat(t, pos, values) return call_as("data.set_flat", glimpse._data_set, t, pos, values) end
function M.get_flat(t, pos, count) return call_as("data.get_flat", glimpse._data_get, t, pos, count) end

return M
