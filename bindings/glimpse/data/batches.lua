--- glimpse.data.batches -- batching: padding with masks, batch orders (shuffled by seed, with
-- length bucketing), and an iterator over any dataset that can collate a list of indices.
--
-- A dataset, for iterate(), is a table with a size (ds.n, or ds:size(), or #ds) and a method
-- ds:collate(indices) -> batch (every dataset in datasets/ has one).  Orders come from a local
-- seeded generator, never glimpse's global one, and depend only on (seed, epoch).
--
--   local batches = require "glimpse.data.batches"
--   for batch, idx in batches.iterate(ds, {batch_size=32, seed=1, epoch=e,
--                                          lengths=ds.src_lengths, bucket=50}) do ... end
local glimpse = require "glimpse"
local Rng = require "glimpse.data.rng"

local M = {}

--- batches.pad(seqs, {pad=1, length=nil, align="left"}) -> ids (B,T) tensor, lengths (table of
--- B integers), mask (B,T) tensor (1 on real positions, 0 on padding).  seqs: a list of B
--- lists of numbers; T = the longest (or `length`, which must be at least that).
function M.pad(seqs, opts)
  opts = opts or {}
  local pad = opts.pad or 1
  if type(seqs) ~= "table" or #seqs == 0 then error("batches.pad: a non-empty list of sequences expected", 2) end
  local T = 0
  for _, s in ipairs(seqs) do
    if #s > T then T = #s end
  end
  if opts.length then
    if opts.length < T then
      error(string.format("batches.pad: length %d is shorter than the longest sequence (%d)",
                          opts.length, T), 2)
    end
    T = opts.length
  end
  if T == 0 then error("batches.pad: every sequence is empty", 2) end
  local ids, mask, lengths = {}, {}, {}
  for b, s in ipairs(seqs) do
    local row, mrow = {}, {}
    for t = 1, T do
      local v = s[t]
      row[t] = v == nil and pad or v
      mrow[t] = v == nil and 0 or 1
    end
    ids[b], mask[b], lengths[b] = row, mrow, #s
  end
  return glimpse.tensor(ids), lengths, glimpse.tensor(mask)
end

--- batches.lengths_mask(lengths, T) -> mask (B,T): 1 for t <= lengths[b].
function M.lengths_mask(lengths, T)
  local mask = {}
  for b, L in ipairs(lengths) do
    local row = {}
    for t = 1, T do row[t] = t <= L and 1 or 0 end
    mask[b] = row
  end
  return glimpse.tensor(mask)
end

--- batches.order(n, {batch_size=32, shuffle=true, seed=0, epoch=1, lengths=nil, bucket=nil,
---                   drop_last=false}) -> list of batches, each a list of indices in 1..n.
--- With lengths (a table of n numbers) and bucket = k, the (shuffled) indices are cut into
--- pools of k batches, each pool is sorted by length, cut into batches, and the batches are
--- shuffled, so a batch holds similar lengths (little padding) and batches still come in
--- random order.  Without shuffle, bucketing sorts the whole set by length.
function M.order(n, opts)
  opts = opts or {}
  local bs = opts.batch_size or 32
  if math.type(n) ~= "integer" or n < 0 then error("batches.order: n must be a count", 2) end
  if math.type(bs) ~= "integer" or bs < 1 then error("batches.order: batch_size must be a positive integer", 2) end
  local shuffle = opts.shuffle ~= false
  local rng = Rng.new(opts.seed or 0, "batches.epoch" .. (opts.epoch or 1))
  local idx = {}
  for i = 1, n do idx[i] = i end
  if shuffle then rng:shuffle(idx) end
  local lengths = opts.lengths
  if lengths and #lengths < n then
    error(string.format("batches.order: %d lengths for %d examples", #lengths, n), 2)
  end
  if lengths and (opts.bucket or not shuffle) then
    local pool = shuffle and (opts.bucket or 100) * bs or n
    local pos = {}
    for k, i in ipairs(idx) do pos[i] = k end
    local by_len = function(a, b)
      if lengths[a] ~= lengths[b] then return lengths[a] < lengths[b] end
      return pos[a] < pos[b]
    end
    local sorted = {}
    for s = 1, n, pool do
      local chunk = table.move(idx, s, math.min(n, s + pool - 1), 1, {})
      table.sort(chunk, by_len)
      table.move(chunk, 1, #chunk, #sorted + 1, sorted)
    end
    idx = sorted
  end
  local out = {}
  for s = 1, n, bs do
    local b = table.move(idx, s, math.min(n, s + bs - 1), 1, {})
    if #b == bs or not opts.drop_last then out[#out + 1] = b end
  end
  if shuffle and lengths and opts.bucket then rng:shuffle(out) end
  return out
end

local function size_of(ds)
  if type(ds.n) == "number" then return ds.n end
  if type(ds.size) == "function" then return ds:size() end
  return #ds
end

--- batches.iterate(ds, opts) -> iterator yielding (batch, indices, k) for each batch k of one
--- epoch, where batch = ds:collate(indices) (or opts.collate(ds, indices)).  opts as in
--- batches.order; opts.lengths defaults to ds.lengths when bucket is set.
function M.iterate(ds, opts)
  opts = opts or {}
  local collate = opts.collate or ds.collate
  if type(collate) ~= "function" then
    error("batches.iterate: the dataset has no collate(indices) and opts.collate is not given", 2)
  end
  local o = setmetatable({}, {__index = opts})
  if opts.bucket and not opts.lengths then o.lengths = ds.lengths end
  local order = M.order(size_of(ds), o)
  local k = 0
  return function()
    k = k + 1
    local b = order[k]
    if not b then return nil end
    return collate(ds, b), b, k
  end
end

--- batches.count(ds, opts) -> the number of batches iterate() yields.
function M.count(ds, opts)
  opts = opts or {}
  local n, bs = size_of(ds), opts.batch_size or 32
  return opts.drop_last and n // bs or (n + bs - 1) // bs
end

--- batches.take(t, indices) -> the rows of t (dim 1) at the 1-based indices, as a new tensor
--- (index_select when the core provides it, a flat copy otherwise).
function M.take(t, indices)
  if t.index_select then
    return t:index_select(1, glimpse.tensor(indices))
  end
  local shape = t.shape
  local row = t:numel() // shape[1]
  shape[1] = #indices
  local out = glimpse.zeros(shape)
  for k, i in ipairs(indices) do
    if i < 1 or i > t:size(1) then error("batches.take: index " .. i .. " out of range", 2) end
    glimpse._data_set(out, (k - 1) * row + 1, glimpse._data_get(t, (i - 1) * row + 1, row))
  end
  return out
end

return M
