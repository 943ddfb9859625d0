--- datasets/points.lua -- planar point problems for pointer networks (Vinyals et al. 2015):
-- points uniform in the unit square, with exact targets as sequences of input positions.
--   sort   the points ordered by a key (x by default)
--   hull   the convex hull, counter-clockwise, starting from the lowest index on the hull
--   tsp    the optimal closed tour (Held-Karp, exact, n <= 12), starting at city 1
-- Coordinates are rounded to float32 before the targets are computed, so the targets are
-- exact for the tensor the model sees.
--
--   local points = require "datasets.points"
--   local ds = points.make{task = "hull", n = 10, count = 1000, seed = 1}
--   local b = ds:collate({1, 2, 3})
--   -- b.points (3,n,2); b.targets (3,T) 1-based positions padded with 0; b.target_mask (3,T)
local glimpse = require "glimpse"
local Rng = require "glimpse.data.rng"

local M = {}

--- largest n that tsp solves exactly (Held-Karp is O(2^n n^2))
M.TSP_MAX_N = 12

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

--- points.tsp_exact(pts) -> tour, length: the optimal closed tour (Held-Karp dynamic
--- programming), as indices starting at 1, in the direction whose second city has the lower
--- index.  n <= points.TSP_MAX_N.
function M.tsp_exact(pts)
  local n = #pts
  if n > M.TSP_MAX_N then
    error(string.format("points.tsp_exact: n = %d is above %d (Held-Karp is exponential)", n,
                        M.TSP_MAX_N), 2)
  end
  if n <= 3 then
    local t = {}
    for i = 1, n do t[i] = i end
    return t, M.tour_length(pts, t)
  end
  local d = {}
  for i = 1, n do
    d[i] = {}
    for j = 1, n do d[i][j] = dist(pts[i], pts[j]) end
  end
  -- cities 2..n are bits 0..n-2; cost[mask*n + j]: shortest path from city 1 through exactly
  -- the cities in mask, ending at j (in mask)
  local full = (1 << (n - 1)) - 1
  local cost, from = {}, {}
  for j = 2, n do
    local key = (1 << (j - 2)) * n + j
    cost[key], from[key] = d[1][j], 1
  end
  for mask = 1, full do
    for j = 2, n do
      local c = cost[mask * n + j]
      if c then
        local dj = d[j]
        for k = 2, n do
          local bit = 1 << (k - 2)
          if mask & bit == 0 then
            local key = (mask | bit) * n + k
            local nc = c + dj[k]
            local old = cost[key]
            if not old or nc < old then cost[key], from[key] = nc, j end
          end
        end
      end
    end
  end
  local best, last = math.huge, nil
  for j = 2, n do
    local c = cost[full * n + j] + d[j][1]
    if c < best then best, last = c, j end
  end
  local rev, mask, j = {}, full, last
  while j ~= 1 do
    rev[#rev + 1] = j
    local p = from[mask * n + j]
    mask = mask & ~(1 << (j - 2))
    j = p
  end
  local tour = {1}
  for k = #rev, 1, -1 do tour[#tour + 1] = rev[k] end
  if tour[2] > tour[n] then                         -- canonical direction
    local t = {1}
    for k = n, 2, -1 do t[#t + 1] = tour[k] end
    tour = t
  end
  return tour, best
end

-- ---------------------------------------------------------------------------------------
-- the dataset object, and fresh batches for training loops that never repeat an example

local Points = {}
Points.__index = Points
M.Points = Points

--- points.make{task="sort"|"hull"|"tsp", n=10 (or {lo, hi}: a random size per example),
---             count=1000, seed=1, key="x" (sort), rng=nil} -> dataset with
---   ds.points[i]  list of {x, y};   ds.targets[i]  list of 1-based positions;
---   ds.lengths[i] = #ds.points[i];  ds.tour_lengths[i] (tsp: the optimal length).
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
  local rng = opts.rng or Rng.new(opts.seed or 1, "points." .. task)
  local ds = setmetatable({task = task, n = count, points = {}, targets = {}, lengths = {}, key = opts.key,
                           max_points = hi}, Points)
  if task == "tsp" then ds.tour_lengths = {} end
  for i = 1, count do
    local pts = M.uniform(rng:int(lo, hi), rng)
    ds.points[i], ds.lengths[i] = pts, #pts
    if task == "sort" then
      ds.targets[i] = M.sort_order(pts, opts.key)
    elseif task == "hull" then
      ds.targets[i] = M.convex_hull(pts)
    else
      ds.targets[i], ds.tour_lengths[i] = M.tsp_exact(pts)
    end
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

--- points.batch(B, {task=, n=, key=, rng=}) -> a collated batch of B fresh examples drawn
--- from rng (a glimpse.data.Rng generator kept by the caller, so each call gives new data).
function M.batch(B, opts)
  opts = opts or {}
  if type(opts.rng) ~= "table" then error("points.batch: opts.rng (a glimpse.data.Rng generator) expected", 2) end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.count = B
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
