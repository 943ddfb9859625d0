--- glimpse.data -- datasets and data files.
--
-- File readers (engine/io_gz.c): gzip through zlib, IDX arrays.  The library's data pieces:
-- Vocab, Rng, batches (this folder).  Datasets (datasets/*.lua), loaded by name on first use:
-- fashion_mnist, seq2seq, compare (tasks with true alignments), points, copy_task, captions,
-- caption_sources, scenes, shapes, scene_text; data.register adds one's own.
-- Every generator takes a seed and draws from its own generator, never from the global one
-- that glimpse.manual_seed sets.
--
--   local data = glimpse.data
--   local x, y = data.fashion_mnist.load("train", {limit = 512})
--   local ds = data.seq2seq.dates{n = 5000, seed = 1}
--   for batch in data.batches.iterate(ds, {batch_size = 64, seed = 1}) do ... end
local glimpse = require "glimpse"

local M = {}

-- The library's own data pieces: vocabularies, seeded generators, batching.
local LIBRARY = {Vocab = "glimpse.data.vocab", Rng = "glimpse.data.rng",
                 batches = "glimpse.data.batches"}

-- The dataset registry: name -> the module of datasets/ that makes it.  The library reaches a
-- dataset only through here, by name (datasets/ depends on the library, never the reverse).
-- In the source tree datasets/ sits on the path as "datasets.<file>"; `make install` puts it
-- under the library as "glimpse.datasets.<file>".
local DATASETS = {
  fashion_mnist = "fashion_mnist", seq2seq = "seq2seq_tasks", compare = "compare_tasks",
  points = "points", copy_task = "copy_task", captions = "captions",
  caption_sources = "caption_sources", scenes = "scenes", shapes = "shapes",
  scene_text = "scene_text",
}

local function load_dataset(file)
  for _, prefix in ipairs({"datasets.", "glimpse.datasets."}) do
    if package.loaded[prefix .. file] or package.searchpath(prefix .. file, package.path) then
      return require(prefix .. file)
    end
  end
  error("glimpse.data: the dataset module '" .. file .. "' is not on package.path (datasets/"
        .. file .. ".lua; the glimpse executable and `make install` put it there)", 3)
end

--- data.register(name, dataset) makes a dataset of one's own reachable as glimpse.data[name]
--- (a table: a module of generators or a dataset).  A shipped name cannot be replaced.
function M.register(name, dataset)
  if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
    error("data.register: name must be an identifier string, got " .. tostring(name), 2)
  end
  if type(dataset) ~= "table" then
    error("data.register: dataset must be a table, got " .. type(dataset), 2)
  end
  if LIBRARY[name] or DATASETS[name] or rawget(M, name) ~= nil then
    error("data.register: '" .. name .. "' is already a name of glimpse.data", 2)
  end
  rawset(M, name, dataset)
  return dataset
end

--- data.names() -> the sorted names of the shipped datasets
function M.names()
  local out = {}
  for k in pairs(DATASETS) do out[#out + 1] = k end
  table.sort(out)
  return out
end

setmetatable(M, {__index = function(t, k)
  local m
  if LIBRARY[k] then
    m = require(LIBRARY[k])
  elseif DATASETS[k] then
    m = load_dataset(DATASETS[k])
  else
    return nil
  end
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
    res = tostring(res):gsub("^[^\n]-%.lua:%d+: ", ""):gsub("to 'glimpse%.[_%w%.]+'", "to '" .. name .. "'")
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
