-- tests/test_bench.lua -- the benchmark's machinery (bench/run.lua, bench/report.lua,
-- bench/glimpse_workloads.lua, bench/torch_workloads.py), not its numbers: the statistics
-- (median, best, spread) and the target checks on made-up rounds, and a quick run
-- (`--quick`: one round, W7 and W8 on a small model) of the glimpse side and the report.
-- The PyTorch side's checks (W7's first-step loss, W8's tokens) skip, saying why, where
-- /usr/bin/python3 has no torch: `make test` does not install python3-torch (`make bench` does).
local lu = require "luaunit"
local cjson = require "cjson"
local H = require "tests.helpers"

local T = {}

local EXE = arg and arg[-1] or "build/glimpse"
local PYTHON = "/usr/bin/python3"
local report = dofile("bench/report.lua")

local function have_torch()
  return os.execute(PYTHON .. " -c 'import torch' > /dev/null 2>&1") == true
end

local function skip_without_torch()
  lu.skipIf(not have_torch(), "python3-torch is not installed for " .. PYTHON ..
            " (make bench installs it); the PyTorch side is not checked")
end

-- run a command line; -> stdout and stderr, whether it exited 0
local function sh(line)
  local ok, _, out = H.run(line)
  return out or "", ok
end

-- the last JSON line of a command's output
local function last_json(text)
  local last
  for line in text:gmatch("[^\n]+") do
    if line:sub(1, 1) == "{" then last = line end
  end
  lu.assertNotNil(last, "no JSON line in:\n" .. text)
  return cjson.decode(last)
end

function T.test_median_best_spread()
  lu.assertEquals(report.median({3, 1, 2}), 2)
  lu.assertEquals(report.median({4, 1, 3, 2}), 2.5)
  lu.assertNil(report.median({}))
  lu.assertEquals(report.min({5, 2, 9}), 2)
  lu.assertAlmostEquals(report.spread_pct({90, 100, 110, 100, 105}), 20, 1e-9)
  lu.assertNil(report.spread_pct({7}))              -- one round has no spread
  local r = report.summarize({glimpse_ms_rounds = {10, 12, 11, 30, 10.5},
                              torch_ms_rounds = {20, 22, 21, 19, 25},
                              glimpse_cpu_ms_rounds = {9, 9, 9, 9, 9},
                              torch_cpu_ms_rounds = {18, 18, 18, 18, 18},
                              glimpse_ms_1thread_rounds = {20, 21, 22, 23, 24},
                              flops_per_step = 1e9, items = 10})
  lu.assertEquals(r.glimpse_ms, 11)                 -- the outlier (30) does not move it
  lu.assertEquals(r.glimpse_ms_best, 10)
  lu.assertEquals(r.torch_ms, 21)
  lu.assertAlmostEquals(r.ratio, 11 / 21, 1e-12)
  lu.assertAlmostEquals(r.ratio_best, 10 / 19, 1e-12)
  lu.assertAlmostEquals(r.cpu_ratio, 0.5, 1e-12)
  lu.assertAlmostEquals(r.thread_speedup, 22 / 11, 1e-12)
  lu.assertAlmostEquals(r.glimpse_spread_pct, 20 / 11 * 100, 1e-9)
  lu.assertAlmostEquals(r.glimpse_gflops, 1e9 / 11e6, 1e-9)
  lu.assertAlmostEquals(r.glimpse_per_s, 10 * 1000 / 11, 1e-9)
  -- schema 1 (best times only) reads as one round
  local old = report.summarize({glimpse_ms = 4, torch_ms = 8})
  lu.assertEquals(old.glimpse_ms_rounds, {4})
  lu.assertEquals(old.ratio, 0.5)
end

-- made-up medians: which targets are met, with their numbers
function T.test_targets_on_medians()
  local function w(name, g, t, extra)
    local r = {workload = name, glimpse_ms_rounds = g, torch_ms_rounds = t,
               glimpse_vmhwm_kb = 100, torch_vmhwm_kb = 300, same_loss = true}
    for k, v in pairs(extra or {}) do r[k] = v end
    return report.summarize(r)
  end
  local results = {
    w("S1", {1, 1, 1}, {1, 1, 1}, {flops_per_step = 400e6}),                -- 400 GFLOP/s
    w("W1", {1, 1, 1}, {2, 2, 2}, {flops_per_step = 360e6}),                -- 90%
    w("W2", {1, 1, 1}, {2, 2, 2}, {flops_per_step = 300e6,                  -- 75%
                                   glimpse_ms_1thread_rounds = {1.8, 1.8, 1.8}}),
    w("W3", {1, 1, 1}, {2, 2, 2}, {flops_per_step = 350e6}),
    w("W4", {1, 1, 1}, {2, 2, 2}, {flops_per_step = 420e6}),
    w("W5-vgg16", {5, 5, 5}, {10, 10, 10}, {glimpse_ms_1thread_rounds = {9, 9, 9}}),
    w("W5-resnet18", {8, 8, 8}, {10, 10, 10}, {glimpse_ms_1thread_rounds = {14, 14, 14}}),
    w("W6", {1, 1, 1}, {4, 4, 4}, {items = 64}),
    w("W7", {5, 6, 100}, {10, 10, 10}),                                    -- median 6: 0.6
  }
  local by = {}
  for _, x in ipairs(report.targets(results)) do by[x.target] = x end
  local function status(prefix)
    for k, x in pairs(by) do if k:sub(1, #prefix) == prefix then return x.met, x.numbers end end
    error("no target " .. prefix)
  end
  lu.assertFalse(status("W1-W3"))                   -- W2 at 75%
  lu.assertStrContains(select(2, status("W1-W3")), "W1 90%")
  lu.assertTrue(status("W4"))
  lu.assertTrue(status("W5 VGG-16"))
  lu.assertFalse(status("W5 ResNet-18"))            -- 0.8 > 0.7
  lu.assertTrue(status("W6"))                       -- 4x
  lu.assertTrue(status("W7"))                       -- the median, 0.6, not the mean
  lu.assertTrue(status("peak memory"))
  lu.assertTrue(status("1 -> 2 threads"))           -- W2 1.8x, VGG 1.8x, ResNet 1.75x
  lu.assertStrContains(select(2, status("1 -> 2 threads")), "W5-vgg16 1.80x")
  lu.assertTrue(status("both sides"))
  local md = report.targets_table(results)
  lu.assertStrContains(md, "| W7 <= 0.6 of PyTorch's time | W7 0.60 | met |")
  lu.assertStrContains(md, "| not met |")
  -- one workload above half of PyTorch's memory: not met (and not "not measured")
  results[#results].glimpse_vmhwm_kb = 200
  for _, x in ipairs(report.targets(results)) do
    if x.target:find("peak memory", 1, true) then
      lu.assertEquals(x.met, false)
      lu.assertStrContains(x.numbers, "W7 0.67")
    end
  end
  -- an absent workload is "not measured", never "met"
  local partial = report.targets({results[1], results[#results]})
  lu.assertNil(partial[1].met)
  -- one measured workload missing its target: not met, even with another not measured
  partial = report.targets({results[1], results[3]})              -- S1, W2 at 75%
  lu.assertEquals(partial[1].met, false)
  lu.assertStrContains(report.table(results), "|   0.60 |")
end

-- the glimpse side and the report, one quick round of W7 and W8 (PyTorch's side not run)
function T.test_quick_run_glimpse_side()
  local dir = H.tmpdir()
  local out = dir .. "/results.json"
  local text, ok = sh(string.format("%s bench/run.lua --quick --no-torch --only W7,W8 --out %s",
                                    H.sh_quote(EXE), H.sh_quote(out)))
  lu.assertTrue(ok, text)
  lu.assertStrContains(text, "Targets, on the medians of 1 round")
  lu.assertStrContains(text, "| W7 <= 0.6 of PyTorch's time | W7 not measured | not measured |")
  local doc = cjson.decode(assert(H.read_file(out)))
  lu.assertEquals(doc.schema, report.SCHEMA)
  lu.assertTrue(doc.quick)
  lu.assertEquals(doc.rounds, 1)
  lu.assertFalse(doc.partial)
  lu.assertEquals(#doc.results, 2)
  for _, r in ipairs(doc.results) do
    lu.assertNil(r.skipped, r.workload .. ": " .. tostring(r.skipped))
    lu.assertEquals(#r.glimpse_ms_rounds, 1)
    lu.assertTrue(r.glimpse_ms > 0)
    lu.assertEquals(r.glimpse_ms, r.glimpse_ms_best)
    lu.assertStrContains(r.torch_skipped, "--no-torch")
    lu.assertTrue(r.glimpse_vmhwm_kb > 0)
  end
  lu.assertEquals(doc.results[2].items, 4)          -- W8 quick: 4 sequences
  lu.assertTrue(doc.results[1].glimpse_loss1 > 0)
  -- the report regenerates from the file
  local again, ok2 = sh(string.format("%s bench/report.lua %s", H.sh_quote(EXE), H.sh_quote(out)))
  lu.assertTrue(ok2, again)
  lu.assertStrContains(again, "| W8           |")
end

-- bench/conv_layers.lua: every ResNet-18 convolution through the paths asked for, one line
-- each and the network's total; a bad flag is a usage error
function T.test_conv_layers_script()
  local text, ok = sh(string.format("%s bench/conv_layers.lua --threads 1 --rounds 1 " ..
                                    "--tiles 0,-1", H.sh_quote(EXE)))
  lu.assertTrue(ok, text)
  local lines = 0
  for l in text:gmatch("[^\n]+") do
    if l:match("%(x%d%):%s+%[0%]%s+[%d.]+%s+%[%-1%]%s+[%d.]+$") then lines = lines + 1 end
  end
  lu.assertEquals(lines, 11, text)
  lu.assertStrContains(text, "the network's convolutions:")
  local bad, ok2 = sh(string.format("%s bench/conv_layers.lua --round 2", H.sh_quote(EXE)))
  lu.assertFalse(ok2)
  lu.assertStrContains(bad, "conv_layers: usage")
end

-- W7's first-step loss and W8's tokens agree with torch.nn.Transformer's on the same
-- weights (small model)
function T.test_quick_torch_side_agrees()
  skip_without_torch()
  local dir = H.tmpdir()
  for _, W in ipairs({"W7", "W8"}) do
    local st = dir .. "/" .. W .. ".safetensors"
    local gtext, gok = sh(string.format("%s bench/glimpse_workloads.lua %s 1 --quick --save %s",
                                        H.sh_quote(EXE), W, H.sh_quote(st)))
    lu.assertTrue(gok, gtext)
    local g = last_json(gtext)
    local ttext, tok = sh(string.format("%s bench/torch_workloads.py %s 1 %s", PYTHON, W,
                                        H.sh_quote(st)))
    lu.assertTrue(tok, ttext)
    local t = last_json(ttext)
    if W == "W7" then
      lu.assertTrue(math.abs(g.loss1 - t.loss1) <= 1e-4 * math.abs(t.loss1),
                    string.format("W7 first-step loss: glimpse %.8g, PyTorch %.8g", g.loss1, t.loss1))
    else
      lu.assertEquals(t.greedy_differ, 0)
      lu.assertEquals(t.loss1, g.loss1)             -- the sums of the tokens
    end
  end
end

return T
