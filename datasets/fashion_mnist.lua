--- datasets/fashion_mnist.lua -- Fashion-MNIST (Xiao, Rasul & Vollgraf 2017) from the Debian
-- package dataset-fashion-mnist: 28x28 grey images of 10 clothing classes, 60,000 for
-- training and 10,000 for testing, as IDX files under /usr/share/datasets/fashion-mnist/.
-- Nothing is downloaded.
--
--   local fm = require "datasets.fashion_mnist"
--   local images, labels, classes = fm.load("train", {limit = 1000})
--   -- images (1000,1,28,28) in [0,1]; labels (1000) 1-based class ids as floats
local glimpse = require "glimpse"

local M = {}

M.DIR = "/usr/share/datasets/fashion-mnist"
M.CLASSES = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
             "Sneaker", "Bag", "Ankle boot"}
--- one lowercase word per class, for captions (index = class id)
M.WORDS = {"tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
           "bag", "boot"}
M.SIZES = {train = 60000, test = 10000}

local PREFIX = {train = "train", test = "t10k", t10k = "t10k"}

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() return true end
  return false
end

--- fm.paths(split [, dir]) -> images path, labels path (the .gz files, or unpacked ones).
function M.paths(split, dir)
  local pre = PREFIX[split]
  if not pre then error("fashion_mnist: split must be 'train' or 'test', got " .. tostring(split), 2) end
  dir = dir or M.DIR
  local out = {}
  for k, kind in ipairs({"images-idx3-ubyte", "labels-idx1-ubyte"}) do
    local p = string.format("%s/%s-%s", dir, pre, kind)
    if exists(p .. ".gz") then out[k] = p .. ".gz"
    elseif exists(p) then out[k] = p
    else
      error(string.format("fashion_mnist: no %s(.gz) in %s (install the Debian package " ..
                          "dataset-fashion-mnist, or pass dir=)", p:match("[^/]+$"), dir), 2)
    end
  end
  return out[1], out[2]
end

--- fm.load(split, {limit=nil, first=1, dir=M.DIR, scale=true}) -> images, labels, classes.
--- images: (N,1,28,28) floats in [0,1] (0..255 with scale=false); labels: (N) class ids
--- 1..10 as floats; classes: the 10 class names.  split: "train" or "test".  first/limit pick
--- items first..first+limit-1 (only that much is decoded).
function M.load(split, opts)
  opts = opts or {}
  local ip, lp = M.paths(split, opts.dir)
  local first = opts.first or 1
  local scale = opts.scale ~= false
  local images = glimpse._read_idx(ip, first, opts.limit, scale, {1, 28, 28})
  local raw = glimpse._read_idx(lp, first, opts.limit, false)
  if raw:size(1) ~= images:size(1) then
    error(string.format("fashion_mnist: %d images but %d labels", images:size(1), raw:size(1)), 2)
  end
  local l = glimpse._data_get(raw)
  for i = 1, #l do l[i] = l[i] + 1 end
  local labels = #l > 0 and glimpse.tensor(l) or glimpse.zeros(0)
  return images, labels, M.CLASSES
end

--- fm.load_labels(split, {limit=, first=, dir=}) -> a Lua table of 1-based class ids.
function M.load_labels(split, opts)
  opts = opts or {}
  local _, lp = M.paths(split, opts.dir)
  local l = glimpse._data_get(glimpse._read_idx(lp, opts.first or 1, opts.limit, false))
  for i = 1, #l do l[i] = math.tointeger(l[i]) + 1 end
  return l
end

--- fm.load_bytes(split, {dir=}) -> an item source for the scene generators: a table with
--- n, labels (1-based, Lua table) and pixels(i) -> a table of item i's 784 values 0..255
--- (row-major).  Keeps the whole file as one Lua string (47 MB for train), cached.
local cache = {}
function M.load_bytes(split, opts)
  opts = opts or {}
  local ip, lp = M.paths(split, opts.dir)
  local key = ip .. "|" .. lp
  if cache[key] then return cache[key] end
  local bytes = glimpse._read_gz(ip)
  if #bytes < 16 then error("fashion_mnist: " .. ip .. " is too short", 2) end
  local magic, n, h, w = string.unpack(">I4I4I4I4", bytes)
  if magic ~= 0x803 or h ~= 28 or w ~= 28 or #bytes < 16 + n * 784 then
    error("fashion_mnist: " .. ip .. " is not a 28x28 u8 IDX image file", 2)
  end
  local labels = M.load_labels(split, opts)
  if #labels ~= n then error(string.format("fashion_mnist: %d images, %d labels", n, #labels), 2) end
  local src = {n = n, labels = labels, split = split}
  function src.pixels(i)
    local o = 16 + (i - 1) * 784
    if i < 1 or i > n then error("fashion_mnist: item " .. tostring(i) .. " outside 1.." .. n, 2) end
    return {bytes:byte(o + 1, o + 784)}
  end
  cache[key] = src
  return src
end

--- fm.clear_cache() drops the byte strings load_bytes keeps.
function M.clear_cache()
  for k in pairs(cache) do cache[k] = nil end
end

return M
