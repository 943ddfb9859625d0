--- glimpse.planar -- the measures of pointer-network experiments on planar point sets
-- (Vinyals et al. 2015, section 4): whether a predicted sequence is a valid tour, tour
-- lengths, polygon areas, whether a predicted hull is a simple polygon, and the area
-- coverage of a predicted hull (its area over the true hull's, 0 for invalid polygons).
-- Points are lists {x, y}; sequences are lists of 1-based indices into them.
--
--   local planar = require "glimpse.planar"
--   planar.is_tour({1, 3, 2}, 3)                               --> true
--   planar.tour_length(pts, {1, 3, 2})                          -- closed: back to the start
--   local cov = planar.hull_coverage(pts, predicted, true_hull) -- in [0,1], or 0, "why"
--   local tour, len = planar.tsp_optimal(pts)                   -- exact, 2 to 20 points
local core = require "glimpse.core"

local M = {}

--- the most cities planar.tsp_optimal takes (Held-Karp: 2^(n-1) (n-1) states, 80 MiB at 20)
M.TSP_MAX_N = 20

local function check_points(pts, fname)
  if type(pts) ~= "table" then error(fname .. ": points must be a list of {x, y}", 3) end
end

local function check_seq(seq, n, fname)
  if type(seq) ~= "table" then error(fname .. ": the sequence must be a list of indices", 3) end
  for k, i in ipairs(seq) do
    if math.type(i) ~= "integer" or i < 1 or i > n then
      error(string.format("%s: index %s at position %d is outside 1..%d", fname, tostring(i), k,
                          n), 3)
    end
  end
end

--- planar.is_tour(seq, n) -> true when seq visits each of 1..n exactly once
function M.is_tour(seq, n)
  if type(seq) ~= "table" or #seq ~= n then return false end
  local seen = {}
  for _, i in ipairs(seq) do
    if math.type(i) ~= "integer" or i < 1 or i > n or seen[i] then return false end
    seen[i] = true
  end
  return true
end

--- planar.tour_length(pts, seq) -> length of the closed path pts[seq[1]] .. pts[seq[#seq]]
--- and back to pts[seq[1]]
function M.tour_length(pts, seq)
  check_points(pts, "planar.tour_length")
  check_seq(seq, #pts, "planar.tour_length")
  local s, n = 0, #seq
  for k = 1, n do
    local a, b = pts[seq[k]], pts[seq[k % n + 1]]
    local dx, dy = a[1] - b[1], a[2] - b[2]
    s = s + math.sqrt(dx * dx + dy * dy)
  end
  return s
end

--- planar.polygon_area(pts, seq) -> signed area of the polygon (> 0 counter-clockwise)
function M.polygon_area(pts, seq)
  check_points(pts, "planar.polygon_area")
  check_seq(seq, #pts, "planar.polygon_area")
  local s, n = 0, #seq
  for k = 1, n do
    local a, b = pts[seq[k]], pts[seq[k % n + 1]]
    s = s + a[1] * b[2] - a[2] * b[1]
  end
  return s / 2
end

local function cross(o, a, b)
  return (a[1] - o[1]) * (b[2] - o[2]) - (a[2] - o[2]) * (b[1] - o[1])
end

-- is q on the segment p-r, given that p, q, r are collinear
local function on_segment(p, q, r)
  return q[1] <= math.max(p[1], r[1]) and q[1] >= math.min(p[1], r[1])
     and q[2] <= math.max(p[2], r[2]) and q[2] >= math.min(p[2], r[2])
end

--- planar.segments_intersect(p1, p2, q1, q2) -> true when the closed segments p1-p2 and
--- q1-q2 share a point (touching and collinear overlap count)
function M.segments_intersect(p1, p2, q1, q2)
  local d1, d2 = cross(q1, q2, p1), cross(q1, q2, p2)
  local d3, d4 = cross(p1, p2, q1), cross(p1, p2, q2)
  if ((d1 > 0 and d2 < 0) or (d1 < 0 and d2 > 0)) and ((d3 > 0 and d4 < 0) or (d3 < 0 and d4 > 0)) then
    return true
  end
  if d1 == 0 and on_segment(q1, p1, q2) then return true end
  if d2 == 0 and on_segment(q1, p2, q2) then return true end
  if d3 == 0 and on_segment(p1, q1, p2) then return true end
  if d4 == 0 and on_segment(p1, q2, p2) then return true end
  return false
end

--- planar.is_simple_polygon(pts, seq) -> ok, reason: at least 3 distinct vertices, non-zero
--- area, and no two edges meet except neighbours at their shared vertex
function M.is_simple_polygon(pts, seq)
  check_points(pts, "planar.is_simple_polygon")
  check_seq(seq, #pts, "planar.is_simple_polygon")
  local n = #seq
  if n < 3 then return false, "fewer than 3 vertices" end
  local seen = {}
  for _, i in ipairs(seq) do
    if seen[i] then return false, "a repeated vertex" end
    seen[i] = true
  end
  for a = 1, n do
    local p1, p2 = pts[seq[a]], pts[seq[a % n + 1]]
    for b = a + 1, n do
      -- neighbouring edges share a vertex by construction: skip them
      local adjacent = b == a + 1 or (a == 1 and b == n)
      if not adjacent then
        local q1, q2 = pts[seq[b]], pts[seq[b % n + 1]]
        if M.segments_intersect(p1, p2, q1, q2) then return false, "self-intersecting" end
      end
    end
  end
  if M.polygon_area(pts, seq) == 0 then return false, "zero area" end
  return true
end

--- planar.hull_coverage(pts, pred, truth) -> coverage, reason
-- |area(pred)| / area(truth) when pred is a simple polygon (Vinyals et al.'s area coverage;
-- its vertices are input points, so it lies inside the true hull and the ratio is <= 1);
-- 0 and the reason when pred is not a simple polygon.
function M.hull_coverage(pts, pred, truth)
  local ok, why = M.is_simple_polygon(pts, pred)
  if not ok then return 0, why end
  local full = math.abs(M.polygon_area(pts, truth))
  if full == 0 then return 0, "the true hull has zero area" end
  return math.abs(M.polygon_area(pts, pred)) / full
end

--- planar.same_cycle(a, b) -> true when the closed sequences a and b visit the same vertices
--- in the same cyclic order, in either direction and from any start
function M.same_cycle(a, b)
  local n = #a
  if #b ~= n then return false end
  if n == 0 then return true end
  local start
  for k = 1, n do if b[k] == a[1] then start = k break end end
  if not start then return false end
  for _, dir in ipairs({1, -1}) do
    local ok = true
    for k = 1, n do
      if a[k] ~= b[(start - 1 + dir * (k - 1)) % n + 1] then ok = false break end
    end
    if ok then return true end
  end
  return false
end

-- the instances' sizes and coordinates, flat, for the engine; errors name fname and where
local function tsp_input(list, fname, level)
  if type(list) ~= "table" then
    error(string.format("%s: expected a list of point lists, got %s", fname, type(list)), level + 1)
  end
  local ns, xy = {}, {}
  for i, pts in ipairs(list) do
    local where = #list > 1 and string.format(" (instance %d)", i) or ""
    if type(pts) ~= "table" then
      error(string.format("%s: points%s must be a list of {x, y}, got %s", fname, where,
                          type(pts)), level + 1)
    end
    local n = #pts
    if n < 2 or n > M.TSP_MAX_N then
      error(string.format("%s: exact tours take 2 to %d points (Held-Karp is O(2^n n^2)), got %d%s",
                          fname, M.TSP_MAX_N, n, where), level + 1)
    end
    for k, p in ipairs(pts) do
      local x, y = type(p) == "table" and p[1], type(p) == "table" and p[2]
      if type(x) ~= "number" or type(y) ~= "number" or x ~= x or y ~= y
         or math.abs(x) == math.huge or math.abs(y) == math.huge then
        error(string.format("%s: point %d%s must be {x, y} with finite numbers, got {%s, %s}",
                            fname, k, where, tostring(x), tostring(y)), level + 1)
      end
      local m = #xy
      xy[m + 1], xy[m + 2] = x, y
    end
    ns[i] = n
  end
  return ns, xy
end

--- planar.tsp_optimal(pts) -> tour, length: the optimal closed tour through 2 to 20 points
--- (Held-Karp dynamic programming in the engine, exact in double), as 1-based indices from
--- 1, in the direction whose second point has the lower index; its length.  Ties go to the
--- lowest indices, so the answer is deterministic.  CPU time per instance, one thread:
--- about 70 ms at n = 20, 1 ms at 15, 35 µs at 10.
function M.tsp_optimal(pts)
  local ns, xy = tsp_input({pts}, "planar.tsp_optimal", 2)
  local tours, lengths = core._tsp_solve(ns, xy)
  return tours, lengths[1]
end

--- planar.tsp_optimal_many(list) -> tours, lengths: planar.tsp_optimal of every point list
--- in list (sizes may differ), the instances side by side on glimpse's threads
--- (glimpse.set_num_threads; each thread holds an 80 MiB table at n = 20)
function M.tsp_optimal_many(list)
  local ns, xy = tsp_input(list, "planar.tsp_optimal_many", 2)
  local flat, lengths = core._tsp_solve(ns, xy)
  local tours, pos = {}, 0
  for i, n in ipairs(ns) do
    local t = {}
    for k = 1, n do t[k] = flat[pos + k] end
    tours[i], pos = t, pos + n
  end
  return tours, lengths
end

return M