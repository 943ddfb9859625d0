-- tests/test_compare_tasks.lua -- datasets/compare_tasks.lua (glimpse.data.compare): the
-- tasks that separate attention mechanisms.  Checks: the same seed gives the same data and
-- another seed other data; test sets have exactly their length and training sets stay in
-- 5..20; the true alignment reproduces the target (each aligned target character is the
-- source character at its position, and copy tasks align every character); the task's
-- vocabularies are shared by its train and test sets; collate's shapes and padding.  The
-- tasks outside the default grid: translit is monotonic with insertions and deletions,
-- chain's outputs each look up the pair keyed by the previous one; both run through compare.
local lu = require "luaunit"
local glimpse = require "glimpse"
local compare = glimpse.data.compare

local T = {}

local N = 60                 -- examples per generated set
local LONG = {30, 40, 50}    -- test lengths beyond training

local function chars(s)
  local t = {}
  for i = 1, #s do t[i] = s:sub(i, i) end
  return t
end

function T.test_every_task_is_deterministic_by_seed()
  for _, name in ipairs(compare.TASKS) do
    local task = compare.task(name)
    local a, b = task:train_set(N, 3), compare.task(name):train_set(N, 3)
    lu.assertEquals(a.src, b.src, name)
    lu.assertEquals(a.tgt, b.tgt, name)
    lu.assertEquals(a.align, b.align, name)
    lu.assertNotEquals(task:train_set(N, 4).src, a.src, name .. ": seed 4 == seed 3")
    local t1, t2 = task:test_sets({20, 40}, N, 3), task:test_sets({20, 40}, N, 3)
    lu.assertEquals(t1[40].src, t2[40].src, name)
    lu.assertNotEquals(t1[20].src, a.src, name .. ": test stream == train stream")
  end
end

function T.test_test_sets_have_exactly_their_length_and_training_stays_in_range()
  for _, name in ipairs(compare.TASKS) do
    local task = compare.task(name)
    local lo, hi = task.train_lengths[1], task.train_lengths[2]
    lu.assertEquals(hi, 20, name)
    local seen = {}
    for _, s in ipairs(task:train_set(4 * N, 1).src) do
      lu.assertTrue(#s >= lo and #s <= hi, name .. ": training length " .. #s)
      seen[#s] = true
    end
    lu.assertTrue(seen[lo] and seen[hi], name .. ": the ends of the range are drawn")
    local sets = task:test_sets(compare.TEST_LENGTHS, N, 1)
    for _, L in ipairs(compare.TEST_LENGTHS) do
      lu.assertEquals(sets[L].n, N)
      for i, s in ipairs(sets[L].src) do
        lu.assertEquals(#s, L, name .. " test " .. L .. " example " .. i)
        lu.assertEquals(sets[L].lengths[i], L)
      end
    end
  end
end

-- each aligned target character equals the source character at its position
local function check_alignment(ds, name, copy)
  for i = 1, ds.n do
    local s, t, a = chars(ds.src[i]), chars(ds.tgt[i]), ds.align[i]
    lu.assertEquals(#a, #t, name .. ": one alignment entry per target character")
    local rebuilt = {}
    for k = 1, #t do
      local p = a[k]
      lu.assertTrue(math.type(p) == "integer" and p >= 0 and p <= #s, name .. ": position")
      if copy then lu.assertTrue(p >= 1, name .. ": copy task with an unaligned token") end
      rebuilt[k] = p > 0 and s[p] or t[k]
    end
    lu.assertEquals(table.concat(rebuilt), ds.tgt[i], name .. ": " .. ds.src[i])
  end
end

function T.test_alignment_rebuilds_the_target_from_source_positions()
  for _, name in ipairs(compare.TASKS) do
    local task = compare.task(name)
    local copy = name ~= "dates"
    check_alignment(task:train_set(N, 2), name, copy)
    for L, ds in pairs(task:test_sets(LONG, N, 2)) do check_alignment(ds, name .. L, copy) end
  end
end

function T.test_reversal_and_sorting_alignments_are_their_permutations()
  local rev = compare.reversal():test_set(30, 5, 1)
  for i = 1, rev.n do
    for t = 1, 30 do lu.assertEquals(rev.align[i][t], 31 - t) end
  end
  local srt = compare.sorting():test_set(50, 20, 1)
  for i = 1, srt.n do
    local a, seen = srt.align[i], {}
    for t = 1, 50 do
      lu.assertNil(seen[a[t]], "a source position used twice")
      seen[a[t]] = true
      -- stable: equal symbols come out in source order
      if t > 1 and srt.tgt[i]:sub(t, t) == srt.tgt[i]:sub(t - 1, t - 1) then
        lu.assertTrue(a[t] > a[t - 1])
      end
    end
  end
end

function T.test_dates_align_year_and_day_digits_and_zero_elsewhere()
  local ds = compare.dates():test_set(40, N, 5)
  local noise_digit = false
  for i = 1, ds.n do
    local a, src, tgt = ds.align[i], ds.src[i], ds.tgt[i]
    for k = 5, 8 do lu.assertEquals(a[k], 0, "the month and the separators have no source") end
    for k = 1, 4 do lu.assertEquals(a[k], a[1] + k - 1, "the year is contiguous") end
    lu.assertEquals(src:sub(a[1], a[1] + 3), tgt:sub(1, 4))
    if a[9] == 0 then lu.assertEquals(tgt:sub(9, 9), "0") end
    -- digits outside the date are distractors: some example has them
    local date_pos = {[a[1]] = 1, [a[2]] = 1, [a[3]] = 1, [a[4]] = 1, [a[9]] = 1, [a[10]] = 1}
    for p = 1, #src do
      if src:sub(p, p):match("%d") and not date_pos[p] then noise_digit = true end
    end
  end
  lu.assertTrue(noise_digit, "no distractor digits in 60 examples of length 40")
end

function T.test_lookup_is_neither_monotonic_nor_one_to_one()
  local ds = compare.lookup():test_set(50, N, 1)
  local backwards, repeated = false, false
  for i = 1, ds.n do
    local a, seen = ds.align[i], {}
    for t = 1, #a do
      if t > 1 and a[t] < a[t - 1] then backwards = true end
      if seen[a[t]] then repeated = true end
      seen[a[t]] = true
      lu.assertEquals(a[t] % 2, 0, "values sit at even positions")
    end
    local n, m = compare.lookup_shape(50)
    lu.assertEquals(ds.src[i]:sub(2 * n + 1, 2 * n + 1), "|")
    lu.assertEquals(#ds.tgt[i], m)
  end
  lu.assertTrue(backwards and repeated)
end

function T.test_train_and_test_sets_share_one_vocabulary()
  for _, name in ipairs(compare.TASKS) do
    local task = compare.task(name)
    local train, test = task:train_set(N, 1), task:test_set(50, N, 1)
    lu.assertIs(train.src_vocab, test.src_vocab, name)
    lu.assertIs(train.tgt_vocab, test.tgt_vocab, name)
    for _, s in ipairs(test.src) do
      for _, id in ipairs(test.src_vocab:encode(s)) do
        lu.assertNotEquals(id, test.src_vocab.unk, name .. ": a long test uses a new symbol")
      end
    end
  end
end

function T.test_collate_returns_alignment_shaped_like_the_targets()
  for _, name in ipairs(compare.TASKS) do
    local ds = compare.task(name):train_set(8, 1)
    local b = ds:collate({1, 2, 3, 4})
    local B, Tt = b.tgt_out.shape[1], b.tgt_out.shape[2]
    lu.assertEquals(b.align.shape, {B, Tt}, name)
    local al, mask = b.align:totable(), b.tgt_mask:totable()
    for k, i in ipairs({1, 2, 3, 4}) do
      local a = ds.align[i]
      for t = 1, Tt do
        local want = t <= #a and a[t] or 0
        lu.assertEquals(al[k][t], want, name .. ": align at " .. t)
        if mask[k][t] == 0 then lu.assertEquals(al[k][t], 0) end
      end
    end
    lu.assertEquals(b.src.shape[1], B)
    -- split keeps the class and the alignments
    local head, tail = ds:split(3)
    lu.assertEquals(head.n, 3)
    lu.assertEquals(tail.align[1], ds.align[4])
    lu.assertEquals(tail:collate({1}).align.shape[1], 1)
  end
end

-- ---------------------------------------------------------------------------------------
-- the tasks outside the default grid: translit (monotonic) and chain (content lookups)

function T.test_more_tasks_are_deterministic_and_their_alignment_rebuilds_the_target()
  for _, name in ipairs(compare.MORE_TASKS) do
    local task = compare.task(name)
    lu.assertEquals(task:train_set(N, 3).src, compare.task(name):train_set(N, 3).src, name)
    for L, ds in pairs(task:test_sets({10, 50}, N, 2)) do
      for i = 1, ds.n do lu.assertEquals(#ds.src[i], L, name) end
    end
  end
  -- chain: every target symbol is the source symbol at its position, one per pair
  local ch = compare.chain():test_set(40, N, 1)
  check_alignment(ch, "chain", true)
  for i = 1, ch.n do
    lu.assertEquals(#ch.tgt[i], 20)
    lu.assertEquals(ch.align[i][1], 2, "the first pair starts the chain")
    lu.assertEquals(ch.tgt[i]:sub(1, 1), ch.src[i]:sub(2, 2))
    for t = 2, #ch.tgt[i] do                          -- the key of output t is output t - 1
      lu.assertEquals(ch.src[i]:sub(ch.align[i][t] - 1, ch.align[i][t] - 1), ch.tgt[i]:sub(t - 1, t - 1))
    end
  end
  lu.assertEquals(compare.chain():test_set(11, 1, 1).src[1]:sub(11), compare.FILLER)
end

function T.test_translit_is_monotonic_with_insertions_and_deletions()
  local ds = compare.translit():test_set(50, N, 1)
  local inserted, deleted = false, false
  for i = 1, ds.n do
    local a, src, tgt = ds.align[i], ds.src[i], ds.tgt[i]
    local used = {}
    for t = 1, #a do
      lu.assertTrue(a[t] >= 1, "every letter comes from a source letter")
      if t > 1 then lu.assertTrue(a[t] >= a[t - 1], "monotonic") end
      if t > 1 and a[t] == a[t - 1] then inserted = true end
      used[a[t]] = true
      local ch = src:sub(a[t], a[t])
      local w = compare.TRANSLIT_RULES[ch] or ch
      lu.assertStrContains(w, tgt:sub(t, t))
    end
    for p = 1, #src do if not used[p] then deleted = true end end
  end
  lu.assertTrue(inserted and deleted)
  -- "quxhhea" -> "kwuksea": q -> kw, x -> ks, h silent (twice), doubled letters once
  local o = compare.translit().opts
  local seq = "quxhhea"
  local k = 0
  local rng = {int = function() k = k + 1; return o.symbols:find(seq:sub(k, k), 1, true) end}
  local src, tgt, al = compare.translit().generate(rng, #seq, o)
  lu.assertEquals({src, tgt}, {"quxhhea", "kwuksea"})
  lu.assertEquals(al, {1, 1, 2, 3, 3, 6, 7})
end

function T.test_more_tasks_run_through_compare_on_a_tiny_budget()
  local s = glimpse.compare.settings{steps = 3, eval_every = 3, train_n = 16, valid_n = 4,
                                     test_n = 4, test_lengths = {6, 12}, heatmap_length = 6,
                                     hidden = 8, attn_hidden = 4, emb = 4, batch = 4}
  local configs = glimpse.compare.grid{tasks = "translit,chain", seeds = 1, settings = s,
                                       mechanisms = "additive/monotonic,dot/soft"}
  lu.assertEquals(#configs, 4)
  for _, c in ipairs(configs) do
    local r = glimpse.compare.run_config(c)
    lu.assertEquals(#r.accuracy_by_length, 2, c.id)
    lu.assertNotNil(r.alignment_accuracy, c.id)
  end
end

function T.test_bad_options_are_errors_naming_the_task()
  lu.assertErrorMsgContains("compare.task: unknown task", compare.task, "copy")
  lu.assertErrorMsgContains("compare.dates", function() compare.dates():test_set(8, 2, 1) end)
  lu.assertErrorMsgContains("compare.lookup", function() compare.lookup():test_set(90, 2, 1) end)
  lu.assertErrorMsgContains("compare.reversal", compare.reversal, {symbols = "aa"})
  lu.assertErrorMsgContains("compare.sorting", function() compare.sorting():train_set(-1, 1) end)
end

return T
