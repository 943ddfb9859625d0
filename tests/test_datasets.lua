-- tests/test_datasets.lua -- glimpse.data: the gzip/IDX readers, Fashion-MNIST, the seq2seq
-- tasks, points (hull, Held-Karp), the copy task, caption corpora, the scene sets and the
-- batch iterator.  Files the tests need are written to /tmp by the tests themselves.
local lu = require "luaunit"
local glimpse = require "glimpse"
local data = glimpse.data
local scene_text = require "datasets.scene_text"

local T = {}

-- tolerances
local PIXEL_TOL = 1e-6      -- float32 storage of u8/255 values
local LENGTH_TOL = 1e-9     -- tour lengths from the same doubles

local TMP = os.tmpname()
os.remove(TMP)
local made = {}
local function tmp(name)
  local p = TMP .. "_" .. name
  made[#made + 1] = p
  made[#made + 1] = p .. ".gz"
  return p
end

-- the files a test wrote go when it ends
function T.tearDown()
  for _, p in ipairs(made) do os.remove(p) end
  made = {}
end

local write = require("tests.helpers").write_file

local function flat(t) return data.get_flat(t) end

-- ---------------------------------------------------------------------------------------
-- the local generator

function T.test_rng_matches_pcg32_reference_and_is_seeded()
  local Rng = data.Rng
  -- O'Neill's pcg32 demo: seed 42, sequence 54
  local r = setmetatable({state = 0, inc = (54 << 1) | 1}, Rng.Rng)
  r:u32(); r.state = r.state + 42; r:u32()
  lu.assertEquals({r:u32(), r:u32(), r:u32()}, {0xa15c02b7, 0x7b47f409, 0xba1d3330})
  local a, b, c = Rng.new(7), Rng.new(7), Rng.new(7, "other")
  local sa, sb, sc = {}, {}, {}
  for i = 1, 20 do sa[i], sb[i], sc[i] = a:int(1, 100), b:int(1, 100), c:int(1, 100) end
  lu.assertEquals(sa, sb)
  lu.assertNotEquals(sa, sc)
  for _ = 1, 1000 do
    local v = a:random()
    lu.assertTrue(v >= 0 and v < 1)
  end
  local s = a:sample(10, 10)
  table.sort(s)
  lu.assertEquals(s, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
end

function T.test_generators_leave_the_global_rng_alone()
  glimpse.manual_seed(123)
  local s1, s2 = glimpse.rng_state()
  data.seq2seq.reversal{n = 20, seed = 5}
  data.points.make{task = "hull", n = 8, count = 5, seed = 5}
  data.copy_task.batch(3, {seed = 5})
  data.shapes.generate{n = 2, seed = 5}
  data.batches.order(10, {seed = 5})
  local t1, t2 = glimpse.rng_state()
  lu.assertEquals({t1, t2}, {s1, s2})
end

-- ---------------------------------------------------------------------------------------
-- gzip and IDX

local function idx_bytes(type_code, shape, values, fmt)
  local parts = {string.char(0, 0, type_code, #shape)}
  for _, s in ipairs(shape) do parts[#parts + 1] = string.pack(">I4", s) end
  for _, v in ipairs(values) do parts[#parts + 1] = string.pack(fmt, v) end
  return table.concat(parts)
end

function T.test_read_idx_plain_and_gzipped_give_the_same_values()
  local vals = {}
  for i = 1, 24 do vals[i] = (i * 37) % 256 end
  local p = tmp("u8.idx")
  write(p, idx_bytes(0x08, {4, 2, 3}, vals, "B"))
  assert(os.execute(string.format("gzip -c %q > %q", p, p .. ".gz")))
  for _, path in ipairs({p, p .. ".gz"}) do
    local t = data.read_idx(path)
    lu.assertEquals(t.shape, {4, 2, 3})
    lu.assertEquals(flat(t), vals)
    local s = data.read_idx(path, {scale = true, first = 2, limit = 2, item_shape = {1, 2, 3}})
    lu.assertEquals(s.shape, {2, 1, 2, 3})
    local f = flat(s)
    for k = 1, 12 do lu.assertAlmostEquals(f[k], vals[6 + k] / 255, PIXEL_TOL) end
  end
  lu.assertEquals(data.idx_info(p .. ".gz").shape, {4, 2, 3})
  lu.assertEquals(data.read_gz(p .. ".gz"), data.read_gz(p))
end

function T.test_read_idx_wider_types_are_big_endian()
  local p = tmp("i16.idx")
  write(p, idx_bytes(0x0B, {3}, {-2, 300, 7}, ">i2"))
  lu.assertEquals(flat(data.read_idx(p)), {-2, 300, 7})
  write(p, idx_bytes(0x0D, {2}, {1.5, -0.25}, ">f"))
  lu.assertEquals(flat(data.read_idx(p)), {1.5, -0.25})
  write(p, idx_bytes(0x0E, {1}, {3.25}, ">d"))
  lu.assertEquals(flat(data.read_idx(p)), {3.25})
end

function T.test_read_idx_rejects_bad_files_with_clear_errors()
  local p = tmp("bad.idx")
  local full = idx_bytes(0x08, {10, 5}, {1, 2, 3}, "B")   -- promises 50 bytes, has 3
  write(p, full)
  local ok, err = pcall(data.read_idx, p)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "truncated")
  write(p, idx_bytes(0x08, {100, 50}, {}, "B") .. string.rep("\7", 5000))
  assert(os.execute(string.format("gzip -c %q | head -c 40 > %q", p, p .. ".gz")))
  ok, err = pcall(data.read_idx, p .. ".gz")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "truncated")
  ok, err = pcall(data.read_gz, p .. ".gz")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "truncated")
  write(p, "hello world, not idx")
  ok, err = pcall(data.read_idx, p)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "not an IDX file")
  ok, err = pcall(data.read_idx, tmp("missing.idx"))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "cannot open")
  write(p, idx_bytes(0x08, {2, 2}, {1, 2, 3, 4}, "B"))
  ok, err = pcall(data.read_idx, p, {first = 4})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "offset")
  ok, err = pcall(data.read_gz, p, 5)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "limit")
  lu.assertEquals(#data.read_gz(p, 16), 16)
end

-- ---------------------------------------------------------------------------------------
-- Fashion-MNIST

function T.test_fashion_mnist_shapes_ranges_and_slices()
  local fm = data.fashion_mnist
  local x, y, classes = fm.load("train", {limit = 100})
  lu.assertEquals(x.shape, {100, 1, 28, 28})
  lu.assertEquals(y.shape, {100})
  lu.assertEquals(#classes, 10)
  local xf, yf = flat(x), flat(y)
  local lo, hi = math.huge, -math.huge
  for _, v in ipairs(xf) do lo, hi = math.min(lo, v), math.max(hi, v) end
  lu.assertTrue(lo >= 0 and hi <= 1 and hi > 0.9)
  for _, v in ipairs(yf) do lu.assertTrue(v >= 1 and v <= 10 and v == math.floor(v)) end
  lu.assertEquals(yf[1], 10)           -- the first training image is an ankle boot
  local x2, y2 = fm.load("train", {first = 51, limit = 50})
  local x2f, y2f = flat(x2), flat(y2)
  for k = 1, 50 * 784, 97 do lu.assertEquals(x2f[k], xf[50 * 784 + k]) end
  for k = 1, 50 do lu.assertEquals(y2f[k], yf[50 + k]) end
  local xt = fm.load("test", {limit = 3, scale = false})
  lu.assertEquals(xt.shape, {3, 1, 28, 28})
  local mx = 0
  for _, v in ipairs(flat(xt)) do mx = math.max(mx, v) end
  lu.assertTrue(mx > 1 and mx <= 255)
  lu.assertEquals(fm.SIZES.test, data.idx_info(fm.paths("test")).shape[1])
end

-- ---------------------------------------------------------------------------------------
-- vocabularies

function T.test_vocab_specials_encode_decode_and_min_count()
  local V = data.Vocab
  local v = V.new({"a", "b"})
  lu.assertEquals(v:size(), 6)
  lu.assertEquals({v:id("<pad>"), v:id("<start>"), v:id("<end>"), v:id("<unk>")}, {1, 2, 3, 4})
  lu.assertEquals(v:encode({"a", "b", "zz"}, {start = true, stop = true}), {2, 5, 6, 4, 3})
  lu.assertEquals(v:decode({2, 5, 6, 3, 5, 1}), {"a", "b"})
  lu.assertEquals(v:encode({"a", "a", "a", "a"}, {start = true, stop = true, max_len = 4}), {2, 5, 5, 3})
  local built, counts = V.build({{"x", "y", "x"}, {"z", "x", "y"}, {"w"}}, {min_count = 2})
  lu.assertEquals(built:totable(), {"<pad>", "<start>", "<end>", "<unk>", "x", "y"})
  lu.assertEquals(counts.x, 3)
  lu.assertEquals(V.build({{"x", "y", "x"}, {"z"}}, {min_count = 1}):totable()[7], "z")
  lu.assertEquals(V.build({{"x", "y", "x"}, {"z"}}, {max_size = 5}):size(), 5)
  lu.assertEquals(V.from_list(built:totable()):id("y"), 6)
end

-- ---------------------------------------------------------------------------------------
-- seq2seq tasks

function T.test_reversal_and_sorting_targets_are_right_and_seeded()
  local tasks = data.seq2seq
  local r = tasks.reversal{n = 200, min_len = 3, max_len = 9, seed = 4}
  for i = 1, r.n do
    lu.assertEquals(r.tgt[i], r.src[i]:reverse())
    lu.assertTrue(#r.src[i] >= 3 and #r.src[i] <= 9)
    lu.assertStrMatches(r.src[i], "%d+")
  end
  local r2 = tasks.reversal{n = 200, min_len = 3, max_len = 9, seed = 4}
  lu.assertEquals(r2.src, r.src)
  lu.assertNotEquals(tasks.reversal{n = 200, min_len = 3, max_len = 9, seed = 5}.src, r.src)
  local s = tasks.sorting{n = 100, seed = 2}
  for i = 1, s.n do
    local c = {}
    for k = 1, #s.src[i] do c[k] = s.src[i]:sub(k, k) end
    table.sort(c)
    lu.assertEquals(s.tgt[i], table.concat(c))
    lu.assertTrue(#s.src[i] >= 5 and #s.src[i] <= 20)
  end
end

local MONTH = {}
for m, name in ipairs(data.seq2seq.MONTHS) do MONTH[name] = m; MONTH[name:sub(1, 3)] = m end

-- an independent reading of the task's surface forms back into y, m, d
local function parse_date(s)
  local words = {}
  for w in s:gsub(",", ""):gmatch("%S+") do words[#words + 1] = w end
  local y, m, d
  for _, w in ipairs(words) do
    local num = w:match("^(%d+)%a*$")
    if MONTH[w] then m = MONTH[w]
    elseif num and #num == 4 and not w:match("%a") then y = tonumber(num)
    elseif num then d = tonumber(num) end
  end
  return y, m, d
end

function T.test_dates_parse_back_to_their_iso_targets()
  local tasks = data.seq2seq
  local ds = tasks.dates{n = 400, seed = 3}
  local formats = {}
  for i = 1, ds.n do
    local y, m, d = parse_date(ds.src[i])
    lu.assertEquals(ds.tgt[i], string.format("%04d-%02d-%02d", y, m, d))
    lu.assertTrue(d <= tasks.days_in_month(y, m))
    formats[ds.formats[i]] = true
    local wd = ds.src[i]:match("^(%a+day) ")
    if wd then lu.assertEquals(tasks.WEEKDAYS[tasks.weekday(y, m, d)], wd) end
    for k = 1, #ds.src[i] do lu.assertTrue(ds.src_vocab:has(ds.src[i]:sub(k, k))) end
  end
  for _, f in ipairs(tasks.DATE_FORMAT_NAMES) do lu.assertTrue(formats[f], f) end
  lu.assertEquals(tasks.weekday(1998, 3, 3), 3)       -- a tuesday
  lu.assertEquals(tasks.weekday(2000, 1, 1), 7)       -- a saturday
  lu.assertEquals({tasks.ordinal(1), tasks.ordinal(12), tasks.ordinal(22), tasks.ordinal(13)},
                  {"1st", "12th", "22nd", "13th"})
end

function T.test_seq2seq_batches_are_padded_with_masks_and_decode_back()
  local ds = data.seq2seq.reversal{n = 10, min_len = 2, max_len = 8, seed = 1}
  local b = ds:collate({1, 2, 3})
  local S = math.max(#ds.src[1], #ds.src[2], #ds.src[3])
  lu.assertEquals(b.src.shape, {3, S})
  lu.assertEquals(b.src_mask.shape, {3, S})
  lu.assertEquals(b.tgt_in.shape, {3, S + 1})
  local src, mask, tin, tout = b.src:totable(), b.src_mask:totable(), b.tgt_in:totable(), b.tgt_out:totable()
  for k = 1, 3 do
    local L = #ds.src[k]
    lu.assertEquals(b.src_lengths[k], L)
    lu.assertEquals(b.tgt_lengths[k], L + 1)
    for t = 1, S do
      lu.assertEquals(mask[k][t], t <= L and 1 or 0)
      if t > L then lu.assertEquals(src[k][t], 1) end
    end
    lu.assertEquals(tin[k][1], 2)
    lu.assertEquals(tout[k][L + 1], 3)
    lu.assertEquals(ds:decode_src(src[k]), ds.src[k])
    lu.assertEquals(ds:decode_tgt(tout[k]), ds.tgt[k])
  end
end

-- ---------------------------------------------------------------------------------------
-- points

local function permutations(list, f, k)
  k = k or 1
  if k > #list then return f(list) end
  for i = k, #list do
    list[k], list[i] = list[i], list[k]
    permutations(list, f, k + 1)
    list[k], list[i] = list[i], list[k]
  end
end

function T.test_held_karp_matches_brute_force_for_small_n()
  local P = data.points
  for n = 4, 7 do
    for seed = 1, 3 do
      local pts = P.uniform(n, seed * 10 + n)
      local tour, len = P.tsp_exact(pts)
      lu.assertTrue(P.is_tour(tour, n))
      lu.assertEquals(tour[1], 1)
      lu.assertTrue(tour[2] < tour[n])
      lu.assertAlmostEquals(P.tour_length(pts, tour), len, LENGTH_TOL)
      local best = math.huge
      local rest = {}
      for i = 2, n do rest[#rest + 1] = i end
      permutations(rest, function(p)
        local t = {1, table.unpack(p)}
        best = math.min(best, P.tour_length(pts, t))
      end)
      lu.assertAlmostEquals(len, best, LENGTH_TOL)
    end
  end
end

function T.test_convex_hull_matches_brute_force_ccw_from_lowest_index()
  local P = data.points
  for n = 3, 10 do
    for seed = 1, 4 do
      local pts = P.uniform(n, 100 * n + seed)
      local hull = P.convex_hull(pts)
      -- brute force: i -> j is a hull edge when every other point lies strictly left of it
      local next_of = {}
      for i = 1, n do
        for j = 1, n do
          if i ~= j then
            local all_left = true
            for k = 1, n do
              if k ~= i and k ~= j and P.cross(pts[i], pts[j], pts[k]) <= 0 then all_left = false end
            end
            if all_left then next_of[i] = j end
          end
        end
      end
      local start = math.huge
      for i in pairs(next_of) do start = math.min(start, i) end
      local want, i = {start}, next_of[start]
      while i ~= start do want[#want + 1] = i; i = next_of[i] end
      lu.assertEquals(hull, want)
      lu.assertTrue(P.polygon_area(pts, hull) > 0)
    end
  end
end

function T.test_points_augmented_batches_keep_optimal_tours_and_exact_targets()
  -- each example turned / mirrored and reordered: the tsp target is still the optimal tour
  -- in tsp_exact's canonical form, the hull and sort targets those of the moved points
  local P, Rng = data.points, data.Rng
  for _, task in ipairs({"tsp", "hull", "sort"}) do
    local ds = P.make{task = task, n = {5, 7}, count = 6, seed = 4}
    local rng, moved = Rng.new(2, "aug"), 0
    for _ = 1, 4 do
      local b = P.augmented_batch(ds, 8, rng)
      local a = b.dataset
      lu.assertEquals(b.points.shape[1], 8)
      for i = 1, 8 do
        local pts = a.points[i]
        if task == "tsp" then
          local tour, len = P.tsp_exact(pts)
          lu.assertEquals(a.targets[i], tour)
          lu.assertAlmostEquals(P.tour_length(pts, a.targets[i]), len, 1e-5)
          lu.assertAlmostEquals(a.tour_lengths[i], len, 1e-4)
        elseif task == "hull" then lu.assertEquals(a.targets[i], P.convex_hull(pts))
        else lu.assertEquals(a.targets[i], P.sort_order(pts)) end
        local same = false
        for j = 1, ds.n do
          if ds.points[j][1][1] == pts[1][1] and ds.points[j][1][2] == pts[1][2] then same = true end
        end
        if not same then moved = moved + 1 end
      end
    end
    lu.assertTrue(moved > 8, task .. ": the examples were not moved")
  end
  lu.assertErrorMsgContains("points.augmented_batch: ds must be", P.augmented_batch, {}, 4, Rng.new(1))
  lu.assertErrorMsgContains("points.augmented_batch: B must be", P.augmented_batch,
                            P.make{task = "tsp", n = 4, count = 2}, 0, Rng.new(1))
end

function T.test_points_dataset_sort_targets_and_padded_batches()
  local P = data.points
  local ds = P.make{task = "sort", n = {4, 7}, count = 30, seed = 9, key = "y"}
  for i = 1, ds.n do
    local pts, tg = ds.points[i], ds.targets[i]
    lu.assertEquals(#tg, #pts)
    for k = 2, #tg do lu.assertTrue(pts[tg[k - 1]][2] <= pts[tg[k]][2]) end
  end
  local b = ds:collate({1, 2, 3, 4})
  local N = math.max(#ds.points[1], #ds.points[2], #ds.points[3], #ds.points[4])
  lu.assertEquals(b.points.shape, {4, N, 2})
  lu.assertEquals(b.targets.shape, {4, N})
  local pm, tg = b.point_mask:totable(), b.targets:totable()
  for k = 1, 4 do
    for t = 1, N do
      lu.assertEquals(pm[k][t], t <= b.lengths[k] and 1 or 0)
      if t > b.lengths[k] then lu.assertEquals(tg[k][t], 0) end
    end
  end
  local pf = b.points:totable()
  lu.assertEquals(pf[1][1][1], ds.points[1][1][1])   -- float32-exact coordinates
  local tsp = P.make{task = "tsp", n = 6, count = 3, seed = 1}
  lu.assertAlmostEquals(P.tour_length(tsp.points[2], tsp.targets[2]), tsp.tour_lengths[2], LENGTH_TOL)
  lu.assertEquals(P.make{task = "hull", n = 8, count = 5, seed = 2}.targets,
                  P.make{task = "hull", n = 8, count = 5, seed = 2}.targets)
end

function T.test_points_batch_mixes_sizes_per_example_or_per_batch()
  local P, Rng = data.points, data.Rng
  -- per batch: every example of a batch has the batch's size (no padding), and the sizes
  -- drawn over the batches cover the range
  local rng, seen = Rng.new(3, "mix"), {}
  for _ = 1, 40 do
    local b = P.batch(6, {task = "hull", n = {5, 9}, rng = rng, mix_sizes = "batch"})
    local n = b.lengths[1]
    for k = 2, 6 do lu.assertEquals(b.lengths[k], n) end
    lu.assertEquals(b.points.shape, {6, n, 2})
    lu.assertTrue(n >= 5 and n <= 9)
    seen[n] = true
  end
  for n = 5, 9 do lu.assertTrue(seen[n], "size " .. n .. " never drawn") end
  -- per example (the default): sizes differ inside a batch, padded to the largest
  local b = P.batch(32, {task = "hull", n = {5, 9}, rng = Rng.new(3, "mix")})
  local lo, hi = math.huge, 0
  for _, n in ipairs(b.lengths) do lo, hi = math.min(lo, n), math.max(hi, n) end
  lu.assertTrue(lo < hi)
  lu.assertEquals(b.points.shape[2], hi)
  -- one size given: both ways are the same batch
  local one = P.batch(4, {task = "sort", n = 6, rng = Rng.new(1), mix_sizes = "batch"})
  lu.assertEquals(one.points:totable(), P.batch(4, {task = "sort", n = 6, rng = Rng.new(1)}).points:totable())
  lu.assertErrorMsgContains("points.batch: mix_sizes must be 'example' or 'batch', got batches",
                            P.batch, 4, {n = {5, 9}, rng = Rng.new(1), mix_sizes = "batches"})
end

-- ---------------------------------------------------------------------------------------
-- copy task

function T.test_copy_task_layout_delimiter_targets_and_masks()
  local copy = data.copy_task
  local seqs = {{{1, 0, 1}, {0, 1, 1}}, {{1, 1, 1}}}
  local b = copy.layout(seqs, {bits = 3})
  lu.assertEquals(b.inputs.shape, {2, 5, 4})
  lu.assertEquals(b.targets.shape, {2, 5, 3})
  local x, y = b.inputs:totable(), b.targets:totable()
  lu.assertEquals(x[1], {{1, 0, 1, 0}, {0, 1, 1, 0}, {0, 0, 0, 1}, {0, 0, 0, 0}, {0, 0, 0, 0}})
  lu.assertEquals(y[1], {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {1, 0, 1}, {0, 1, 1}})
  lu.assertEquals(b.output_mask:totable()[1], {0, 0, 0, 1, 1})
  lu.assertEquals(b.input_mask:totable()[2], {1, 1, 1, 0, 0})
  lu.assertEquals(b.output_mask:totable()[2], {0, 0, 1, 0, 0})
  lu.assertEquals(x[2][2], {0, 0, 0, 1})
  local m = copy.layout({{{1, 1}}}, {bits = 2, start_marker = true})
  lu.assertEquals(m.inputs:totable()[1], {{0, 0, 0, 1}, {1, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 0}})
  lu.assertEquals(m.output_mask:totable()[1], {0, 0, 0, 1})
  local r = copy.batch(16, {min_len = 3, max_len = 6, seed = 2})
  lu.assertEquals(r.inputs.shape[3], 9)
  for _, L in ipairs(r.lengths) do lu.assertTrue(L >= 3 and L <= 6) end
  lu.assertEquals(copy.batch(4, {seed = 8}).seqs, copy.batch(4, {seed = 8}).seqs)
end

-- ---------------------------------------------------------------------------------------
-- caption corpora

local KARPATHY = [[
{"dataset": "flickr8k", "images": [
 {"filename": "a.jpg", "split": "train", "sentences": [
   {"tokens": ["a", "dog", "runs"], "raw": "A dog runs."},
   {"tokens": ["a", "dog", "jumps"], "raw": "A dog jumps."}]},
 {"filename": "b.jpg", "split": "test", "sentences": [
   {"tokens": ["two", "cats"], "raw": "Two cats"}]},
 {"filename": "c.jpg", "split": "restval", "sentences": [
   {"raw": "A Dog, sleeping!"}]}]}
]]

local TOKENS = "b.jpg#1\tTwo cats sleep .\nb.jpg#0\tTwo cats play\na.jpg#0\tA dog , running!\n"

function T.test_karpathy_json_loads_with_splits_vocab_and_batches()
  local C = data.captions
  local p = tmp("karpathy.json")
  write(p, KARPATHY)
  local set = C.load_karpathy(p)
  lu.assertEquals(set:size(), 3)
  lu.assertEquals(set.images[3].captions[1], {"a", "dog", "sleeping"})
  lu.assertEquals(set:split("train"):size(), 1)
  lu.assertEquals(C.load_karpathy(p, {merge_restval = true}):split("train"):size(), 2)
  local v = C.build_vocab(set, {min_count = 2})
  lu.assertEquals(v:totable(), {"<pad>", "<start>", "<end>", "<unk>", "a", "dog"})
  local v1 = C.build_vocab(set, {min_count = 1})
  lu.assertEquals(v1:size(), 4 + 7)
  local ids = C.encode({"a", "dog", "flies"}, v)
  lu.assertEquals(ids, {2, 5, 6, 4, 3})
  lu.assertEquals(C.decode(ids, v), "a dog <unk>")
  local ds = set:encode(v)
  lu.assertEquals(ds.n, 4)
  local b = ds:collate({1, 3})
  lu.assertEquals(b.captions_in:totable(), {{2, 5, 6, 4}, {2, 4, 4, 1}})
  lu.assertEquals(b.captions_out:totable(), {{5, 6, 4, 3}, {4, 4, 3, 1}})
  lu.assertEquals(b.mask:totable(), {{1, 1, 1, 1}, {1, 1, 1, 0}})
  lu.assertEquals(b.filenames, {"a.jpg", "b.jpg"})
  write(p, "{not json")
  local ok, err = pcall(C.load_karpathy, p)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "not valid JSON")
end

function T.test_flickr8k_token_file_loads_in_caption_order_with_split_lists()
  local C = data.captions
  local p, lp = tmp("Flickr8k.token.txt"), tmp("trainImages.txt")
  write(p, TOKENS)
  write(lp, "a.jpg\n\n")
  local set = C.load_flickr8k(p)
  lu.assertEquals(set:size(), 2)
  lu.assertEquals(set.images[1].filename, "b.jpg")
  lu.assertEquals(set.images[1].captions, {{"two", "cats", "play"}, {"two", "cats", "sleep"}})
  lu.assertEquals(set.images[2].captions[1], {"a", "dog", "running"})
  lu.assertEquals(set.images[2].raw[1], "A dog , running!")
  set:assign_splits({train = lp, test = {"b.jpg"}})
  lu.assertEquals(set:split("train").images[1].filename, "a.jpg")
  lu.assertEquals(set:split("test"):count_captions(), 2)
  write(p, "garbage line\n")
  lu.assertFalse((pcall(C.load_flickr8k, p)))
end

-- ---------------------------------------------------------------------------------------
-- scene captions

local FUNCTION_WORD = {}
for _, w in ipairs({"a", "the", "and", "above", "below", "to", "left", "right", "of"}) do
  FUNCTION_WORD[w] = true
end

-- Read a caption by its grammar; returns the phrases (lists of token positions) in the order
-- they occur and the relation clauses {subject phrase, relation, reference phrase}.
local function parse_caption(tokens)
  local pos = 1
  local function expect(w)
    lu.assertEquals(tokens[pos], w, "caption word " .. pos)
    pos = pos + 1
  end
  local function phrase()
    local p = {}
    while tokens[pos] and not FUNCTION_WORD[tokens[pos]] do p[#p + 1] = pos; pos = pos + 1 end
    lu.assertTrue(#p > 0, "a noun phrase at word " .. pos)
    return p
  end
  local function relation()
    local w = tokens[pos]
    if w == "above" or w == "below" then pos = pos + 1 return w end
    expect("to"); expect("the")
    local side = tokens[pos]
    lu.assertTrue(side == "left" or side == "right")
    pos = pos + 1
    expect("of")
    return "to the " .. side .. " of"
  end
  local phrases, clauses = {}, {}
  expect("a")
  phrases[1] = phrase()
  if tokens[pos] then
    local r = relation()
    expect("a")
    phrases[2] = phrase()
    clauses[1] = {phrases[1], r, phrases[2]}
    while tokens[pos] do
      expect("and"); expect("a")
      local p = phrase()
      phrases[#phrases + 1] = p
      local rel = relation()
      expect("the")
      clauses[#clauses + 1] = {p, rel, phrase()}
    end
  end
  return phrases, clauses
end

-- every clause's relation agrees with the boxes its phrases carry
local function check_scene_text(s)
  local _, clauses = parse_caption(s.tokens)
  for t = 1, #s.tokens do
    lu.assertEquals(s.boxes[t] ~= nil, not FUNCTION_WORD[s.tokens[t]])
  end
  for _, c in ipairs(clauses) do
    local a, b = s.boxes[c[1][1]], s.boxes[c[3][1]]
    local dx = (a[1] + a[3]) / 2 - (b[1] + b[3]) / 2
    local dy = (a[2] + a[4]) / 2 - (b[2] + b[4]) / 2
    local want
    if math.abs(dy) >= math.abs(dx) then want = dy < 0 and "above" or "below"
    else want = dx < 0 and "to the left of" or "to the right of" end
    lu.assertEquals(c[2], want)
  end
end

function T.test_scenes_captions_follow_the_grammar_and_boxes_hold_their_items()
  local fm = data.fashion_mnist
  local ds = data.scenes.generate{split = "train", n = 30, seed = 7, clutter = 2, pool = 3000}
  lu.assertEquals(ds.images.shape, {30, 1, 64, 64})
  local src = fm.load_bytes("train")
  local img = flat(ds.images)
  for i, s in ipairs(ds.scenes) do
    lu.assertTrue(#s.items >= 2 and #s.items <= 4)
    check_scene_text(s)
    local seen = {}
    for k, it in ipairs(s.items) do
      lu.assertNil(seen[it.class]); seen[it.class] = true
      lu.assertTrue(it.source >= 1 and it.source <= 3000)
      lu.assertEquals(src.labels[it.source], it.class)
      -- the item's own nonzero pixels lie inside its box, and the canvas shows them
      local pix, w, b = src.pixels(it.source), it.window, it.box
      for r = 1, 28 do
        for c = 1, 28 do
          local v = pix[(r - 1) * 28 + c]
          if v > 0 then
            local x, y = w[1] + c - 1, w[2] + r - 1
            lu.assertTrue(x >= b[1] and x <= b[3] and y >= b[2] and y <= b[4])
            local cv = img[(i - 1) * 4096 + (y - 1) * 64 + x]
            lu.assertTrue(cv >= v / 255 - PIXEL_TOL)
          end
        end
      end
      for q = 1, k - 1 do lu.assertFalse(scene_text.overlaps(it.window, s.items[q].window)) end
      -- the words naming this item carry its box
      for t = 1, #s.tokens do
        if s.word_item[t] == k then
          lu.assertEquals(s.tokens[t], it.word)
          lu.assertIs(s.boxes[t], it.box)
        end
      end
    end
  end
  local again = data.scenes.generate{split = "train", n = 30, seed = 7, clutter = 2, pool = 3000}
  lu.assertEquals(again:captions(), ds:captions())
  lu.assertEquals(flat(again.images), img)
  local b = ds:collate({2, 5})
  lu.assertEquals(b.images.shape, {2, 1, 64, 64})
  local T2 = b.captions_out:size(2)
  lu.assertEquals(b.boxes.shape, {2, T2, 4})
  local bm, bx = b.box_mask:totable(), b.boxes:totable()
  local s = ds.scenes[5]
  for t = 1, #s.tokens do
    lu.assertEquals(bm[2][t], s.boxes[t] and 1 or 0)
    if s.boxes[t] then lu.assertEquals(bx[2][t], s.boxes[t]) end
  end
  lu.assertEquals(bm[2][#s.tokens + 1], 0)   -- <end>
  lu.assertEquals(ds.vocab:decode_string(b.captions_out[2]), s.caption)
end

function T.test_scene_splits_draw_from_their_own_items()
  local fm = data.fashion_mnist
  local val = data.scenes.generate{split = "val", n = 10, seed = 1}
  for _, s in ipairs(val.scenes) do
    for _, it in ipairs(s.items) do lu.assertTrue(it.source > 60000 - data.scenes.VAL_ITEMS) end
  end
  local test = data.scenes.generate{split = "test", n = 10, seed = 1, size = 84, item_size = 20,
                                    min_items = 3, max_items = 5}
  lu.assertEquals(test.images.shape, {10, 1, 84, 84})
  local labels = fm.load_labels("test")
  for _, s in ipairs(test.scenes) do
    lu.assertTrue(#s.items >= 3 and #s.items <= 5)
    check_scene_text(s)
    for _, it in ipairs(s.items) do
      lu.assertEquals(labels[it.source], it.class)
      local b, w = it.box, it.window
      lu.assertTrue(b[1] >= w[1] and b[3] <= w[3] and b[2] >= w[2] and b[4] <= w[4])
    end
  end
  lu.assertNotEquals(test:captions(), data.scenes.generate{split = "test", n = 10, seed = 2,
    size = 84, item_size = 20, min_items = 3, max_items = 5}:captions())
end

-- every reference of a scene is a phrasing of the same scene: it follows the grammar, names
-- the scene's items, states the same related pairs with the same relations (read from either
-- side) and so parses back to the scene; the scene's own caption comes first
local function check_references(ds)
  local st = scene_text
  local flip = {above = "below", below = "above", ["to the left of"] = "to the right of",
                ["to the right of"] = "to the left of"}
  local counts = {}
  for i, s in ipairs(ds.scenes) do
    local refs = ds:references(i)
    lu.assertEquals(refs[1], s.caption)
    local phrases = st.item_phrases(s)
    local want_items, want_rel = {}, {}
    for k = 1, #s.items do want_items[#want_items + 1] = phrases[k] end
    table.sort(want_items)
    for _, r in ipairs(s.relations) do
      want_rel[phrases[r[1]] .. "|" .. r[3] .. "|" .. phrases[r[2]]] = true
      want_rel[phrases[r[2]] .. "|" .. flip[r[3]] .. "|" .. phrases[r[1]]] = true
    end
    local seen = {}
    for _, ref in ipairs(refs) do
      lu.assertNil(seen[ref]); seen[ref] = true
      local p = st.parse(ref)
      lu.assertTrue(p.grammatical, ref)
      local got = {table.unpack(p.items)}
      table.sort(got)
      lu.assertEquals(got, want_items)
      lu.assertEquals(#p.triples, #s.relations)
      for _, t in ipairs(p.triples) do lu.assertTrue(want_rel[table.concat(t, "|")], ref) end
    end
    local scenes = {}
    for j = 1, #refs do scenes[j] = s end
    local sum = st.semantics(refs, scenes)
    lu.assertEquals({sum.exact, sum.relations.precision, sum.relations.recall, sum.items.recall},
                    {1, 1, 1, 1})
    local key = #s.items .. ":" .. #refs
    counts[key] = (counts[key] or 0) + 1
  end
  return counts
end

function T.test_references_are_every_phrasing_of_the_same_scene()
  local ds = data.scenes.generate{split = "test", n = 60, seed = 1}
  local counts = check_references(ds)
  -- 2 items: both orders; 3 items (a path): 4; 4 items: a path 8, a star 12
  for key in pairs(counts) do
    lu.assertTrue(key == "2:2" or key == "3:4" or key == "4:8" or key == "4:12", key)
  end
  lu.assertTrue(counts["4:8"] and counts["4:12"] and true)
  check_references(data.shapes.generate{n = 20, seed = 3})
  -- a flipped relation is a reference: "a trouser below a sandal" for "a sandal above a trouser"
  local two = {items = {{word = "sandal", box = {1, 1, 9, 9}},
                         {word = "trouser", box = {1, 30, 9, 40}}},
               tokens = {"a", "sandal", "above", "a", "trouser"}, word_item = {nil, 1, nil, nil, 2},
               relations = {{1, 2, "above"}}, caption = "a sandal above a trouser"}
  lu.assertEquals(scene_text.references(two),
                  {"a sandal above a trouser", "a trouser below a sandal"})
  -- one item: its caption alone; the generator's captions are unchanged by the references
  local one = data.scenes.generate{split = "val", n = 3, seed = 2, min_items = 1, max_items = 1}
  lu.assertEquals(one:references(1), {one.scenes[1].caption})
  lu.assertEquals(#scene_text.references(ds.scenes[1], {max = 1}), 1)
end

function T.test_shapes_pixels_lie_in_their_items_boxes_with_their_colour()
  local ds = data.shapes.generate{n = 25, seed = 11}
  lu.assertEquals(ds.images.shape, {25, 3, 64, 64})
  local img = flat(ds.images)
  local plane = 64 * 64
  for i, s in ipairs(ds.scenes) do
    check_scene_text(s)
    local ink = {}
    for r = 1, 64 do
      for c = 1, 64 do
        local p = (i - 1) * 3 * plane + (r - 1) * 64 + c
        local rgb = {img[p], img[p + plane], img[p + 2 * plane]}
        if rgb[1] + rgb[2] + rgb[3] > 0 then
          local owner
          for k, it in ipairs(s.items) do
            local b = it.box
            if c >= b[1] and c <= b[3] and r >= b[2] and r <= b[4] then
              lu.assertNil(owner, "boxes overlap")
              owner = k
            end
          end
          lu.assertNotNil(owner, "a pixel outside every box")
          lu.assertEquals(rgb, s.items[owner].rgb)
          ink[owner] = (ink[owner] or 0) + 1
        end
      end
    end
    for k, it in ipairs(s.items) do
      lu.assertTrue((ink[k] or 0) > 0)
      -- the tight box: its four edges each touch the shape
      local b = it.box
      lu.assertTrue(data.shapes.inside(it.shape, b[2], it.cj, it.ci, it.cj, it.h))
      lu.assertTrue(data.shapes.inside(it.shape, b[4], it.cj, it.ci, it.cj, it.h))
      for t = 1, #s.tokens do
        if s.word_item[t] == k then
          lu.assertTrue(s.tokens[t] == it.size or s.tokens[t] == it.colour or s.tokens[t] == it.shape)
        end
      end
    end
  end
  lu.assertEquals(data.shapes.generate{n = 25, seed = 11}:captions(), ds:captions())
end

-- ---------------------------------------------------------------------------------------
-- batches

function T.test_batch_orders_cover_every_index_once_and_depend_on_seed_and_epoch()
  local B = data.batches
  local o = B.order(103, {batch_size = 10, seed = 3})
  lu.assertEquals(#o, 11)
  lu.assertEquals(#o[11], 3)
  local seen = {}
  for _, b in ipairs(o) do for _, i in ipairs(b) do lu.assertNil(seen[i]); seen[i] = true end end
  for i = 1, 103 do lu.assertTrue(seen[i]) end
  lu.assertEquals(B.order(103, {batch_size = 10, seed = 3}), o)
  lu.assertNotEquals(B.order(103, {batch_size = 10, seed = 3, epoch = 2}), o)
  lu.assertEquals(#B.order(103, {batch_size = 10, drop_last = true}), 10)
  lu.assertEquals(B.order(5, {batch_size = 2, shuffle = false}), {{1, 2}, {3, 4}, {5}})
end

function T.test_bucketing_groups_similar_lengths()
  local B = data.batches
  local ds = data.seq2seq.reversal{n = 400, min_len = 1, max_len = 40, seed = 2}
  local function padding(order)
    local waste = 0
    for _, b in ipairs(order) do
      local mx = 0
      for _, i in ipairs(b) do mx = math.max(mx, ds.lengths[i]) end
      for _, i in ipairs(b) do waste = waste + mx - ds.lengths[i] end
    end
    return waste
  end
  local plain = B.order(ds.n, {batch_size = 16, seed = 1})
  local bucketed = B.order(ds.n, {batch_size = 16, seed = 1, lengths = ds.lengths, bucket = 25})
  lu.assertTrue(padding(bucketed) * 4 < padding(plain))
  local sorted = B.order(ds.n, {batch_size = 16, shuffle = false, lengths = ds.lengths})
  for k = 2, #sorted do
    lu.assertTrue(ds.lengths[sorted[k - 1][#sorted[k - 1]]] <= ds.lengths[sorted[k][1]])
  end
  local count, total = 0, 0
  for batch, idx, k in B.iterate(ds, {batch_size = 16, seed = 1, bucket = 25}) do
    count = count + 1
    total = total + #idx
    lu.assertEquals(k, count)
    lu.assertEquals(batch.src:size(1), #idx)
  end
  lu.assertEquals(count, B.count(ds, {batch_size = 16}))
  lu.assertEquals(total, ds.n)
end

function T.test_pad_fills_with_pad_id_and_masks()
  local ids, lengths, mask = data.batches.pad({{5, 6, 7}, {8}, {9, 9}}, {pad = 1})
  lu.assertEquals(ids:totable(), {{5, 6, 7}, {8, 1, 1}, {9, 9, 1}})
  lu.assertEquals(lengths, {3, 1, 2})
  lu.assertEquals(mask:totable(), {{1, 1, 1}, {1, 0, 0}, {1, 1, 0}})
  local ids2 = data.batches.pad({{5}}, {pad = 0, length = 3})
  lu.assertEquals(ids2:totable(), {{5, 0, 0}})
  lu.assertFalse((pcall(data.batches.pad, {{1, 2}}, {length = 1})))
  local t = glimpse.tensor({{1, 2}, {3, 4}, {5, 6}})
  lu.assertEquals(data.batches.take(t, {3, 1}):totable(), {{5, 6}, {1, 2}})
end

return T
