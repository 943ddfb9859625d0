-- tests/test_tsp_solver.lua -- exact TSP tours (engine/tsp.c through glimpse.planar.tsp_optimal
-- and tsp_optimal_many): the optimum of brute force for n <= 9 (random, duplicate and
-- collinear points), the canonical form, a relabelled instance keeping its length at n = 16,
-- one instance at n = 20, clear errors; and datasets/points.lua's label cache: a round trip,
-- a file that does not match (points, tours, key, truncation) never used.
local lu = require "luaunit"
local planar = require "glimpse.planar"
local util = require "glimpse.util"
local points = require "datasets.points"
local Rng = require "glimpse.data.rng"

local T = {}

local LENGTH_TOL = 1e-9         -- double sums of the same distances in another order
local BRUTE_MAX_N = 9           -- 8! = 40320 tours

-- the length of the best tour by trying every order of cities 2..n
local function brute_force(pts)
  local n, best = #pts, math.huge
  local rest = {}
  for i = 2, n do rest[#rest + 1] = i end
  local function go(k)
    if k > #rest then
      best = math.min(best, planar.tour_length(pts, {1, table.unpack(rest)}))
      return
    end
    for i = k, #rest do
      rest[k], rest[i] = rest[i], rest[k]
      go(k + 1)
      rest[k], rest[i] = rest[i], rest[k]
    end
  end
  go(1)
  return best
end

local function assert_optimal(pts, tour, len, what)
  local n = #pts
  lu.assertTrue(planar.is_tour(tour, n), what .. ": a permutation")
  lu.assertEquals(tour[1], 1, what .. ": starts at 1")
  if n > 2 then lu.assertTrue(tour[2] < tour[n], what .. ": the canonical direction") end
  lu.assertAlmostEquals(planar.tour_length(pts, tour), len, LENGTH_TOL, what .. ": its own length")
  lu.assertAlmostEquals(len, brute_force(pts), LENGTH_TOL, what .. ": the brute-force optimum")
end

function T.test_the_optimum_of_brute_force_up_to_9_points()
  for n = 2, BRUTE_MAX_N do
    for seed = 1, n < BRUTE_MAX_N and 3 or 1 do
      local pts = points.uniform(n, 100 * n + seed)
      local tour, len = planar.tsp_optimal(pts)
      assert_optimal(pts, tour, len, string.format("n=%d seed=%d", n, seed))
    end
  end
end

function T.test_degenerate_inputs_duplicates_collinear_and_a_grid()
  local cases = {
    same = {{0.5, 0.5}, {0.5, 0.5}, {0.5, 0.5}, {0.5, 0.5}, {0.5, 0.5}},
    duplicates = {{0, 0}, {1, 0}, {0, 0}, {1, 1}, {1, 0}, {0, 1}, {1, 1}},
    collinear = {{0.3, 0.3}, {0.1, 0.1}, {0.9, 0.9}, {0.5, 0.5}, {0.7, 0.7}, {0.2, 0.2}},
    grid = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}, {0, 2}, {1, 2}, {2, 2}},
  }
  for what, pts in pairs(cases) do
    local tour, len = planar.tsp_optimal(pts)
    assert_optimal(pts, tour, len, what)
  end
  lu.assertEquals(select(2, planar.tsp_optimal(cases.same)), 0)
  lu.assertAlmostEquals(select(2, planar.tsp_optimal(cases.collinear)), 2 * 0.8 * math.sqrt(2), LENGTH_TOL)
  lu.assertAlmostEquals(select(2, planar.tsp_optimal(cases.grid)), 8 + math.sqrt(2), LENGTH_TOL)
  -- ties are broken the same way every time
  local a = planar.tsp_optimal(cases.grid)
  lu.assertEquals(planar.tsp_optimal(cases.grid), a)
end

function T.test_many_instances_of_mixed_sizes_equal_one_at_a_time()
  local list, rng = {}, Rng.new(5, "tsp many")
  for i = 1, 12 do list[i] = points.uniform(rng:int(2, 11), rng) end
  local tours, lengths = planar.tsp_optimal_many(list)
  lu.assertEquals(#tours, 12)
  for i, pts in ipairs(list) do
    local t, l = planar.tsp_optimal(pts)
    lu.assertEquals(tours[i], t)
    lu.assertEquals(lengths[i], l)
  end
  local none, nl = planar.tsp_optimal_many({})
  lu.assertEquals({none, nl}, {{}, {}})
end

function T.test_a_relabelled_instance_keeps_its_length_at_16_points()
  local pts = points.uniform(16, 42)
  local tour, len = planar.tsp_optimal(pts)
  lu.assertTrue(planar.is_tour(tour, 16))
  lu.assertAlmostEquals(planar.tour_length(pts, tour), len, LENGTH_TOL)
  local perm = Rng.new(3, "relabel"):permutation(16)
  local moved = {}
  for k = 1, 16 do moved[k] = pts[perm[k]] end
  local _, len2 = planar.tsp_optimal(moved)
  lu.assertAlmostEquals(len2, len, LENGTH_TOL)
  -- no 2-opt move shortens the optimum
  for a = 1, 15 do
    for b = a + 2, 16 do
      local t = {}
      for k = 1, 16 do t[k] = tour[k] end
      local i, j = a + 1, b
      while i < j do
        t[i], t[j] = t[j], t[i]
        i, j = i + 1, j - 1
      end
      lu.assertTrue(planar.tour_length(pts, t) >= len - LENGTH_TOL)
    end
  end
end

function T.test_twenty_points_the_largest_size()
  local pts = points.uniform(20, 7)
  local tour, len = planar.tsp_optimal(pts)
  lu.assertTrue(planar.is_tour(tour, 20))
  lu.assertEquals(tour[1], 1)
  lu.assertAlmostEquals(planar.tour_length(pts, tour), len, LENGTH_TOL)
  local _, len_ds = points.tsp_exact(pts)
  lu.assertEquals(len_ds, len)
end

function T.test_bad_input_gives_clear_errors()
  lu.assertErrorMsgContains("planar.tsp_optimal: exact tours take 2 to 20 points (Held-Karp is O(2^n n^2)), got 1",
                            planar.tsp_optimal, {{0, 0}})
  lu.assertErrorMsgContains("planar.tsp_optimal: exact tours take 2 to 20 points (Held-Karp is O(2^n n^2)), got 21",
                            planar.tsp_optimal, points.uniform(21, 1))
  lu.assertErrorMsgContains("planar.tsp_optimal: point 2 must be {x, y} with finite numbers, got {",
                            planar.tsp_optimal, {{0, 0}, {0 / 0, 1}, {1, 1}})
  lu.assertErrorMsgContains("nan, 1}", planar.tsp_optimal, {{0, 0}, {0 / 0, 1}, {1, 1}})
  lu.assertErrorMsgContains("point 3 must be {x, y} with finite numbers, got {1, inf}",
                            planar.tsp_optimal, {{0, 0}, {0, 1}, {1, math.huge}})
  lu.assertErrorMsgContains("point 1 must be {x, y} with finite numbers, got {a, nil}",
                            planar.tsp_optimal, {{"a"}, {0, 1}})
  lu.assertErrorMsgContains("planar.tsp_optimal: points must be a list of {x, y}, got string",
                            planar.tsp_optimal, "pts")
  lu.assertErrorMsgContains("planar.tsp_optimal_many: exact tours take 2 to 20 points (Held-Karp is O(2^n n^2)), got 1 (instance 2)",
                            planar.tsp_optimal_many, {{{0, 0}, {1, 1}}, {{0, 0}}})
  lu.assertErrorMsgContains("planar.tsp_optimal_many: expected a list of point lists, got nil",
                            planar.tsp_optimal_many, nil)
  lu.assertErrorMsgContains("points.tsp_exact: n = 21 is above 20", points.tsp_exact, points.uniform(21, 1))
  lu.assertErrorMsgContains("points.make: tsp targets are exact; n = 21 is above 20",
                            points.make, {task = "tsp", n = {5, 21}, count = 1})
end

-- ---------------------------------------------------------------------------------------
-- the label cache of points.make

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  return d
end

local function same_labels(a, b)
  for i = 1, a.n do
    lu.assertEquals(a.targets[i], b.targets[i])
    lu.assertEquals(a.tour_lengths[i], b.tour_lengths[i])
  end
end

local OPTS = {task = "tsp", n = {4, 9}, count = 12, seed = 3}
local function make(dir, o)
  local t = {cache = dir}
  for k, v in pairs(OPTS) do t[k] = v end
  for k, v in pairs(o or {}) do t[k] = v end
  return points.make(t)
end

function T.test_the_label_cache_round_trip()
  local dir = tmpdir()
  local plain = points.make(OPTS)
  lu.assertEquals(plain.cache_status, "off")
  local first = make(dir)
  lu.assertEquals(first.cache_status, "written")
  lu.assertStrContains(first.cache_path, dir .. "/tsp-n4-9-count12-seed3-")
  lu.assertTrue(util.exists(first.cache_path))
  local again = make(dir)
  lu.assertEquals(again.cache_status, "read")
  same_labels(plain, first)
  same_labels(plain, again)
  -- other points (another seed, another count) get a file of their own
  lu.assertEquals(make(dir, {seed = 4}).cache_status, "written")
  lu.assertEquals(make(dir, {count = 11}).cache_status, "written")
  lu.assertEquals(make(dir).cache_status, "read")
  -- a set drawn from a caller's generator is keyed by its points alone
  local r1 = make(dir, {seed = false, rng = Rng.new(8, "cache")})
  lu.assertStrContains(r1.cache_path, "-rng-")
  lu.assertEquals(r1.cache_status, "written")
  lu.assertEquals(make(dir, {seed = false, rng = Rng.new(8, "cache")}).cache_status, "read")
  os.execute("rm -rf " .. util.shell_quote(dir))
end

function T.test_a_cache_file_that_does_not_match_is_never_used()
  local dir = tmpdir()
  local plain = points.make(OPTS)
  local path = make(dir).cache_path
  local good = util.read_text(path)
  local lines = {}
  for l in good:gmatch("[^\n]+") do lines[#lines + 1] = l end
  local function tampered(edit, why)
    local copy = {}
    for i, l in ipairs(lines) do copy[i] = l end
    edit(copy)
    util.write_lines(path, copy)
    local ds = make(dir)
    lu.assertEquals(ds.cache_status, "written (stale: " .. why .. ")")
    same_labels(plain, ds)              -- solved again, and the file rewritten
    lu.assertEquals(util.read_text(path), good)
  end
  -- a tour of another order of the same cities: its length is not the stored one
  tampered(function(c)
    local v = {}
    for tok in c[3]:gmatch("%S+") do v[#v + 1] = tok end
    local n = math.tointeger(tonumber(v[1]))
    v[2 * n + 3], v[2 * n + 4] = v[2 * n + 4], v[2 * n + 3]
    c[3] = table.concat(v, " ")
  end, "instance 1 has a bad tour")
  tampered(function(c) c[4] = c[4]:gsub("^(%d+) (%S+)", "%1 0x1p-1") end, "instance 2 has other points")
  tampered(function(c) c[2] = c[2]:gsub("hash=%x", "hash=z") end, "made for other points (key)")
  tampered(function(c) c[1] = "glimpse points tsp labels 0" end, "not a label file of this version")
  tampered(function(c) c[#c] = nil end, "ends at instance 12")
  tampered(function(c) c[#c + 1] = c[#c] end, "more instances than the set")
  tampered(function(c) c[5] = c[5]:gsub("^%d+", "3") end, "instance 3 has another size")
  lu.assertErrorMsgContains("points.make: cache must be a folder name (a string), for task 'tsp' only",
                            points.make, {task = "hull", n = 5, count = 2, cache = dir})
  lu.assertErrorMsgContains("points.make: cache must be a folder name", points.make,
                            {task = "tsp", n = 5, count = 2, cache = 3})
  os.execute("rm -rf " .. util.shell_quote(dir))
end

return T
