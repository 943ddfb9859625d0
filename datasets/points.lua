--- datasets/points.lua -- planar point problems for pointer networks (Vinyals et al. 2015):
-- points uniform in the unit square, with exact targets as sequences of input positions.
--   sort   the points ordered by a key (x by default)
--   hull   the convex hull, counter-clockwise, starting from the lowest index on the hull
--   tsp    the optimal closed tour (Held-Karp in the engine, exact, n <= 20), from city 1;
--          cache = a folder keeps the labels of a made set on disk (points.make)
-- Coordinates are rounded to float32 before the targets are computed, so the targets are
-- exact for the tensor the model sees.
--
--   local points = require "datasets.points"
--   local ds = points.make{task = "hull", n = 10, count = 1000, seed = 1}
--   local b = ds:collate({1, 2, 3})
--   -- b.points (3,n,2); b.targets (3,T) 1-based positions padded with 0; b.target_mask (3,T)
local glimpse = require "glimpse"
local Rng = require "glimpse.data.rng"
local planar = require "glimpse.planar"
local util = require "glimpse.util"

local M = {}

--- largest n that tsp solves exactly (Held-Karp is O(2^n n^2): 70 ms of CPU at n = 20)
M.TSP_MAX_N = planar.TSP_MAX_N

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

--- points.uniform(n, rng) -> list of n points {x, y}, uniform in [0,1)^2, float32 values.
--- rng: a glimpse.data.Rng generator, or an integer seed.
function M.uniform(n, rng)
  if type(rng) ~= "table" then rng = Rng.new(rng or 1, "points") end
  local p = {}
  for i = 1, n do p[i] = {f32(rng:random()), f32(rng:random())} end
  return p
end

local function dist(a, b)
  local dx, dy = a[1] - b[1], a[2] - b[2]
  return math.sqrt(dx * dx + dy * dy)
end

--- points.tour_length(pts, tour) -> length of the closed tour visiting pts[tour[1]],
--- pts[tour[2]], ... and back to pts[tour[1]].
function M.tour_length(pts, tour)
  local s = 0
  for k = 1, #tour do
    s = s + dist(pts[tour[k]], pts[tour[k % #tour + 1]])
  end
  return s
end

--- points.is_tour(tour, n) -> true when tour is a permutation of 1..n.
function M.is_tour(tour, n)
  if #tour ~= n then return false end
  local seen = {}
  for _, c in ipairs(tour) do
    if math.type(c) ~= "integer" or c < 1 or c > n or seen[c] then return false end
    seen[c] = true
  end
  return true
end

--- points.cross(o, a, b) -> z of (a - o) x (b - o): > 0 when o, a, b turn counter-clockwise.
function M.cross(o, a, b)
  return (a[1] - o[1]) * (b[2] - o[2]) - (a[2] - o[2]) * (b[1] - o[1])
end

--- points.polygon_area(pts, idx) -> the area of the polygon pts[idx[1]], pts[idx[2]], ...
--- (positive when counter-clockwise).
function M.polygon_area(pts, idx)
  local s = 0
  for k = 1, #idx do
    local a, b = pts[idx[k]], pts[idx[k % #idx + 1]]
    s = s + a[1] * b[2] - a[2] * b[1]
  end
  return s / 2
end

--- points.sort_order(pts, key) -> the indices of pts in ascending order of key ("x", "y",
--- "norm" = distance from the origin, or a function(p) -> number); ties by index.
function M.sort_order(pts, key)
  key = key or "x"
  local f
  if key == "x" then f = function(p) return p[1] end
  elseif key == "y" then f = function(p) return p[2] end
  elseif key == "norm" then f = function(p) return math.sqrt(p[1] * p[1] + p[2] * p[2]) end
  elseif type(key) == "function" then f = key
  else error("points.sort_order: key must be 'x', 'y', 'norm' or a function", 2) end
  local k, idx = {}, {}
  for i, p in ipairs(pts) do k[i], idx[i] = f(p), i end
  table.sort(idx, function(a, b)
    if k[a] ~= k[b] then return k[a] < k[b] end
    return a < b
  end)
  return idx
end

--- points.convex_hull(pts) -> indices of the hull's vertices, counter-clockwise, starting at
--- the lowest index on the hull.  Points on a hull edge (collinear) are not vertices.
--- Andrew's monotone chain.
function M.convex_hull(pts)
  local n = #pts
  if n < 3 then
    local idx = {}
    for i = 1, n do idx[i] = i end
    return idx
  end
  local idx = {}
  for i = 1, n do idx[i] = i end
  table.sort(idx, function(a, b)
    local pa, pb = pts[a], pts[b]
    if pa[1] ~= pb[1] then return pa[1] < pb[1] end
    if pa[2] ~= pb[2] then return pa[2] < pb[2] end
    return a < b
  end)
  local hull = {}
  local function push(i)
    while #hull >= 2 and M.cross(pts[hull[#hull - 1]], pts[hull[#hull]], pts[i]) <= 0 do
      hull[#hull] = nil
    end
    hull[#hull + 1] = i
  end
  for k = 1, n do push(idx[k]) end                 -- lower chain, left to right
  local lower = #hull
  for k = n - 1, 1, -1 do                          -- upper chain, right to left
    local i = idx[k]
    while #hull > lower and M.cross(pts[hull[#hull - 1]], pts[hull[#hull]], pts[i]) <= 0 do
      hull[#hull] = nil
    end
    hull[#hull + 1] = i
  end
  hull[#hull] = nil                                -- the first point came round again
  local start = 1
  for k = 2, #hull do
    if hull[k] < hull[start] then start = k end
  end
  local out = {}
  for k = 1, #hull do out[k] = hull[(start + k - 2) % #hull + 1] end
  return out
end

--- points.tsp_exact(pts) -> tour, length: the optimal closed tour (planar.tsp_optimal:
--- Held-Karp dynamic programming in the engine), as indices starting at 1, in the direction
--- whose second city has the lower index.  n <= points.TSP_MAX_N.
function M.tsp_exact(pts)
  local n = #pts
  if n > M.TSP_MAX_N then
    error(string.format("points.tsp_exact: n = %d is above %d (Held-Karp is exponential)", n,
                        M.TSP_MAX_N), 2)
  end
  if n <= 1 then return n == 1 and {1} or {}, 0 end
  return planar.tsp_optimal(pts)
end

-- ---------------------------------------------------------------------------------------
-- a cache of tsp labels on disk: one text file per made set, named by its sizes, count, seed
-- and a hash of its points; read back only when its key line and every point match the set
-- being made and every tour is a permutation whose length is the one stored

local CACHE_MAGIC = "glimpse points tsp labels 1"

-- FNV-1a over the bits of every coordinate (64-bit integers wrap)
local function points_hash(all)
  local h = -3750763034362895579            -- 14695981039346656037 as a signed integer
  for _, pts in ipairs(all) do
    for _, p in ipairs(pts) do
      for c = 1, 2 do
        h = (h ~ string.unpack("<i8", string.pack("<d", p[c]))) * 1099511628211
      end
    end
  end
  return h
end

local function cache_path(dir, lo, hi, all, seed)
  local h = points_hash(all)
  local name = string.format("tsp-n%s-count%d-%s-%016x.txt", lo == hi and lo or (lo .. "-" .. hi),
                             #all, seed and ("seed" .. seed) or "rng", h)
  return dir .. "/" .. name, string.format("key n=%d-%d count=%d hash=%016x", lo, hi, #all, h)
end

-- the labels of all from the file at path: tours, lengths; or nil, why
local function cache_read(path, key, all)
  local f = io.open(path, "rb")
  if not f then return nil, "no file" end
  local lines = f:lines()
  local ok, tours, lengths = pcall(function()
    if lines() ~= CACHE_MAGIC then error("not a label file of this version", 0) end
    if lines() ~= key then error("made for other points (key)", 0) end
    local tours, lengths = {}, {}
    for i, pts in ipairs(all) do
      local line = lines()
      if not line then error("ends at instance " .. i, 0) end
      local v = {}
      for tok in line:gmatch("%S+") do v[#v + 1] = tonumber(tok) end
      local n = #pts
      if #v ~= 3 * n + 2 or v[1] ~= n then error("instance " .. i .. " has another size", 0) end
      local tour = {}
      for k = 1, n do
        if v[2 * k] ~= pts[k][1] or v[2 * k + 1] ~= pts[k][2] then
          error("instance " .. i .. " has other points", 0)
        end
        tour[k] = math.tointeger(v[2 * n + 1 + k])
      end
      local len = v[3 * n + 2]
      if not M.is_tour(tour, n) or tour[1] ~= 1
         or math.abs(M.tour_length(pts, tour) - len) > 1e-9 * math.max(1, len) then
        error("instance " .. i .. " has a bad tour", 0)
      end
      tours[i], lengths[i] = tour, len
    end
    if lines() ~= nil then error("more instances than the set", 0) end
    return tours, lengths
  end)
  f:close()
  if not ok then return nil, tours end
  return tours, lengths
end

local function cache_write(path, key, all, tours, lengths)
  local out = {CACHE_MAGIC, key}
  for i, pts in ipairs(all) do
    local v = {#pts}
    for _, p in ipairs(pts) do
      local m = #v
      v[m + 1], v[m + 2] = string.format("%a", p[1]), string.format("%a", p[2])
    end
    for _, c in ipairs(tours[i]) do v[#v + 1] = c end
    v[#v + 1] = string.format("%a", lengths[i])
    out[#out + 1] = table.concat(v, " ")
  end
  util.write_lines(path, out)       -- atomic: a temp file renamed over path
end

-- the optimal tours and lengths of every point list in all (sizes 1 .. TSP_MAX_N), read from
-- the cache folder dir when a matching file is there, else solved (on glimpse's threads)
-- and written there; status: "off", "read", "written" or "written (stale: why)"
local function tsp_labels(all, lo, hi, dir, seed)
  local path, key, why
  if dir then
    path, key = cache_path(dir, lo, hi, all, seed)
    local tours, lengths = cache_read(path, key, all)
    if tours then return tours, lengths, "read", path end
    why = lengths
  end
  local big, tours, lengths = {}, {}, {}
  for i, pts in ipairs(all) do
    if #pts >= 2 then big[#big + 1] = i else tours[i], lengths[i] = M.tsp_exact(pts) end
  end
  local list = {}
  for k, i in ipairs(big) do list[k] = all[i] end
  local t, l = planar.tsp_optimal_many(list)
  for k, i in ipairs(big) do tours[i], lengths[i] = t[k], l[k] end
  if not dir then return tours, lengths, "off" end
  util.mkdir_p(dir)
  cache_write(path, key, all, tours, lengths)
  return tours, lengths, why == "no file" and "written" or ("written (stale: " .. why .. ")"), path
end

-- ---------------------------------------------------------------------------------------
-- the dataset object, and fresh batches for training loops that never repeat an example

local Points = {}
Points.__index = Points
M.Points = Points

--- points.make{task="sort"|"hull"|"tsp", n=10 (or {lo, hi}: a random size per example),
---             count=1000, seed=1, key="x" (sort), rng=nil, cache=nil} -> dataset with
---   ds.points[i]  list of {x, y};   ds.targets[i]  list of 1-based positions;
---   ds.lengths[i] = #ds.points[i];  ds.tour_lengths[i] (tsp: the optimal length).
--- tsp labels are solved on glimpse's threads; cache = a folder: the labels are read from a
--- file there made for exactly these points, else solved and written there (atomically);
--- ds.cache_status says which ("read", "written", "written (stale: why)"; "off" without
--- cache), ds.cache_path the file.
function M.make(opts)
  opts = opts or {}
  local task = opts.task or "sort"
  if task ~= "sort" and task ~= "hull" and task ~= "tsp" then
    error("points.make: task must be 'sort', 'hull' or 'tsp', got " .. tostring(task), 2)
  end
  local lo, hi
  if type(opts.n) == "table" then lo, hi = opts.n[1], opts.n[2] else lo = opts.n or 10; hi = lo end
  if math.type(lo) ~= "integer" or math.type(hi) ~= "integer" or lo < 1 or hi < lo then
    error("points.make: n must be a positive integer or a range {lo, hi}", 2)
  end
  if task == "tsp" and hi > M.TSP_MAX_N then
    error(string.format("points.make: tsp targets are exact; n = %d is above %d", hi,
                        M.TSP_MAX_N), 2)
  end
  local count = opts.count or 1000
  if opts.cache ~= nil and (type(opts.cache) ~= "string" or opts.cache == "" or task ~= "tsp") then
    error("points.make: cache must be a folder name (a string), for task 'tsp' only", 2)
  end
  local rng = opts.rng or Rng.new(opts.seed or 1, "points." .. task)
  local ds = setmetatable({task = task, n = count, points = {}, targets = {}, lengths = {}, key = opts.key,
                           max_points = hi}, Points)
  for i = 1, count do
    local pts = M.uniform(rng:int(lo, hi), rng)
    ds.points[i], ds.lengths[i] = pts, #pts
    if task == "sort" then
      ds.targets[i] = M.sort_order(pts, opts.key)
    elseif task == "hull" then
      ds.targets[i] = M.convex_hull(pts)
    end
  end
  if task == "tsp" then
    ds.targets, ds.tour_lengths, ds.cache_status, ds.cache_path =
      tsp_labels(ds.points, lo, hi, opts.cache, not opts.rng and (opts.seed or 1) or nil)
  end
  return ds
end

--- ds:size() -> number of examples.
function Points:size() return self.n end

--- ds:collate(indices) -> {points (B,N,2) zero-padded, point_mask (B,N), lengths {B},
--- targets (B,T) positions padded with 0, target_mask (B,T), target_lengths {B}, indices}.
function Points:collate(indices)
  local N, T = 0, 0
  for _, i in ipairs(indices) do
    if not self.points[i] then error("points: index " .. tostring(i) .. " outside 1.." .. self.n, 2) end
    N = math.max(N, #self.points[i])
    T = math.max(T, #self.targets[i])
  end
  local P, PM, Y, YM, L, TL = {}, {}, {}, {}, {}, {}
  for b, i in ipairs(indices) do
    local pts, tg = self.points[i], self.targets[i]
    local prow, mrow, yrow, ymrow = {}, {}, {}, {}
    for k = 1, N do
      local p = pts[k]
      prow[k] = p and {p[1], p[2]} or {0, 0}
      mrow[k] = p and 1 or 0
    end
    for t = 1, T do
      yrow[t] = tg[t] or 0
      ymrow[t] = tg[t] and 1 or 0
    end
    P[b], PM[b], Y[b], YM[b], L[b], TL[b] = prow, mrow, yrow, ymrow, #pts, #tg
  end
  return {points = glimpse.tensor(P), point_mask = glimpse.tensor(PM), lengths = L,
          targets = glimpse.tensor(Y), target_mask = glimpse.tensor(YM), target_lengths = TL,
          indices = indices}
end

-- every example of ds as one collated batch, ds kept in it (batch.dataset)
local function whole_batch(ds)
  local idx = {}
  for i = 1, ds.n do idx[i] = i end
  local b = ds:collate(idx)
  b.dataset = ds
  return b
end

--- points.batch(B, {task=, n=, key=, rng=, mix_sizes="example"}) -> a collated batch of B
--- fresh examples drawn from rng (a glimpse.data.Rng generator kept by the caller, so each
--- call gives new data).  With n = {lo, hi}, mix_sizes = "example" draws a size per example
--- (the batch padded to its largest), "batch" one size for the whole batch (a step then
--- costs what its size costs, not the range's largest).
function M.batch(B, opts)
  opts = opts or {}
  if type(opts.rng) ~= "table" then error("points.batch: opts.rng (a glimpse.data.Rng generator) expected", 2) end
  local mix = opts.mix_sizes or "example"
  if mix ~= "example" and mix ~= "batch" then
    error("points.batch: mix_sizes must be 'example' or 'batch', got " .. tostring(mix), 2)
  end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.count, o.mix_sizes = B, nil
  if mix == "batch" and type(o.n) == "table" then
    local lo, hi = o.n[1], o.n[2]
    if math.type(lo) ~= "integer" or math.type(hi) ~= "integer" or lo < 1 or hi < lo then
      error("points.batch: n must be a positive integer or a range {lo, hi}", 2)
    end
    o.n = opts.rng:int(lo, hi)
  end
  return whole_batch(M.make(o))
end

--- points.augmented_batch(ds, B, rng) -> a collated batch (as points.batch) of B examples of
--- ds drawn with replacement, each moved by one of the 8 symmetries of the unit square (turns
--- by 90 degrees, mirror images) and its points put in a random order.  The targets follow:
--- sort and hull are recomputed on the moved points; tsp keeps the same (optimal) tour,
--- renumbered and put back in tsp_exact's canonical form (from city 1, the lower-numbered
--- neighbour second).  A fixed tsp training set then never shows the same input twice.
function M.augmented_batch(ds, B, rng)
  if getmetatable(ds) ~= Points then error("points.augmented_batch: ds must be a points.make dataset", 2) end
  if math.type(B) ~= "integer" or B < 1 then error("points.augmented_batch: B must be a positive integer", 2) end
  if type(rng) ~= "table" then error("points.augmented_batch: rng (a glimpse.data.Rng generator) expected", 2) end
  local out = setmetatable({task = ds.task, n = B, points = {}, targets = {}, lengths = {}, key = ds.key,
                            max_points = ds.max_points}, Points)
  if ds.tour_lengths then out.tour_lengths = {} end
  for b = 1, B do
    local i = rng:int(1, ds.n)
    local src, n, sym = ds.points[i], ds.lengths[i], rng:int(0, 7)
    local perm, inv, pts = rng:permutation(n), {}, {}
    for k = 1, n do
      local x, y = src[perm[k]][1], src[perm[k]][2]
      if sym & 4 ~= 0 then x, y = y, x end
      if sym & 2 ~= 0 then x = 1 - x end
      if sym & 1 ~= 0 then y = 1 - y end
      pts[k], inv[perm[k]] = {f32(x), f32(y)}, k
    end
    local tg
    if ds.task == "tsp" then
      local old, start = ds.targets[i], 1
      for j = 1, n do if inv[old[j]] == 1 then start = j end end
      tg = {}
      for j = 0, n - 1 do tg[j + 1] = inv[old[(start - 1 + j) % n + 1]] end
      if n > 2 and tg[2] > tg[n] then
        local r = {1}
        for j = n, 2, -1 do r[#r + 1] = tg[j] end
        tg = r
      end
      out.tour_lengths[b] = ds.tour_lengths[i]
    elseif ds.task == "hull" then tg = M.convex_hull(pts)
    else tg = M.sort_order(pts, ds.key) end
    out.points[b], out.targets[b], out.lengths[b] = pts, tg, n
  end
  return whole_batch(out)
end

return M
