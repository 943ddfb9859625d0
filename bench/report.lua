--- bench/report.lua -- the benchmark's statistics and report: per-round times to median,
-- best and spread, the markdown table (on the medians) that docs/benchmark.md shows, and the
-- issue's target checks, met or not met with their numbers.
--
-- As a module (bench/run.lua, tests/test_bench.lua): local report = dofile("bench/report.lua")
--   report.median(xs), report.spread_pct(xs)    -- (max - min) / median * 100
--   report.summarize(r)      -- fills r's medians, bests, spreads, ratios from its *_rounds
--   report.table(results)    -- the markdown table (a string), medians
--   report.targets(results)  -- {{target =, numbers =, met = true|false|nil}, ...}
--   report.targets_table(results), report.notes(results)   -- markdown / text lines
-- As a script: glimpse bench/report.lua [bench/results.json] prints the table, the notes and
-- the targets of a results file (one written before the rounds were kept, schema 1, reads
-- as one round of its best times).
local R = {}

R.SCHEMA = 2

function R.median(xs)
  if not xs or #xs == 0 then return nil end
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  if n % 2 == 1 then return s[(n + 1) // 2] end
  return (s[n // 2] + s[n // 2 + 1]) / 2
end

function R.min(xs)
  if not xs or #xs == 0 then return nil end
  local m = math.huge
  for _, x in ipairs(xs) do m = math.min(m, x) end
  return m
end

function R.max(xs)
  if not xs or #xs == 0 then return nil end
  local m = -math.huge
  for _, x in ipairs(xs) do m = math.max(m, x) end
  return m
end

--- the rounds' range (max - min) as a percentage of their median; nil for fewer than 2
function R.spread_pct(xs)
  local med = R.median(xs)
  if not med or med == 0 or #xs < 2 then return nil end
  return (R.max(xs) - R.min(xs)) / med * 100
end

-- schema 1 (best times only): each time becomes a one-round list
local function migrate(r)
  for _, k in ipairs({"glimpse_ms", "glimpse_cpu_ms", "torch_ms", "torch_cpu_ms",
                      "glimpse_ms_1thread"}) do
    if r[k .. "_rounds"] == nil and r[k] then r[k .. "_rounds"] = {r[k]} end
  end
end

--- r: one workload's record with glimpse_ms_rounds, torch_ms_rounds, glimpse_cpu_ms_rounds,
--- torch_cpu_ms_rounds, glimpse_ms_1thread_rounds (lists, one entry a round; any may be
--- missing), items, flops_per_step, best_threads (glimpse's time is already its faster thread
--- count's: no speed-up).  Sets glimpse_ms / torch_ms (medians), *_best, *_spread_pct,
--- ratio (median over median), ratio_best, cpu_ratio (medians), thread_speedup (median on one
--- thread over the median on the default), per-second rates and GFLOP/s (medians).  -> r
function R.summarize(r)
  migrate(r)
  local function med_best(side)
    local xs = r[side .. "_ms_rounds"]
    r[side .. "_ms"] = R.median(xs)
    r[side .. "_ms_best"] = R.min(xs)
    r[side .. "_spread_pct"] = R.spread_pct(xs)
    r[side .. "_cpu_ms"] = R.median(r[side .. "_cpu_ms_rounds"])
  end
  med_best("glimpse")
  med_best("torch")
  r.glimpse_ms_1thread = R.median(r.glimpse_ms_1thread_rounds)
  r.ratio, r.ratio_best, r.cpu_ratio, r.thread_speedup = nil, nil, nil, nil
  if r.glimpse_ms and r.torch_ms then
    r.ratio = r.glimpse_ms / r.torch_ms
    r.ratio_best = r.glimpse_ms_best / r.torch_ms_best
  end
  if r.glimpse_cpu_ms and r.torch_cpu_ms and r.torch_cpu_ms > 0 then
    r.cpu_ratio = r.glimpse_cpu_ms / r.torch_cpu_ms
  end
  if r.glimpse_ms and r.glimpse_ms_1thread and not r.best_threads then
    r.thread_speedup = r.glimpse_ms_1thread / r.glimpse_ms
  end
  if r.items then
    r.glimpse_per_s = r.glimpse_ms and r.items * 1000 / r.glimpse_ms
    r.torch_per_s = r.torch_ms and r.items * 1000 / r.torch_ms
  end
  if r.flops_per_step then
    r.glimpse_gflops = r.glimpse_ms and r.flops_per_step / (r.glimpse_ms * 1e6)
    r.torch_gflops = r.torch_ms and r.flops_per_step / (r.torch_ms * 1e6)
  end
  return r
end

local function f(fmt, x) return x and string.format(fmt, x) or "-" end

local function same_text(r)
  if r.same_loss == nil then return "-" end
  if r.greedy_differ then
    return string.format("%s %d/%d", r.same_loss and "yes" or "NO", r.greedy_differ, r.items)
  end
  return string.format("%s %.0e", r.same_loss and "yes" or "NO",
                       r.loss_rel_diff or r.out_rel_diff or 0)
end

--- the markdown table: medians of the rounds, the spread (max - min over the median) of each
--- side, the ratio of the medians and of the bests
function R.table(results)
  local hdr = string.format("| %-12s | %10s | %6s | %14s | %6s | %6s | %6s | %9s | %14s | %11s "
    .. "| %11s | %-9s |", "work", "glimpse ms", "spread", "PyTorch ms (t)", "spread", "ratio",
    "best", "cpu ratio", "GFLOP/s gl/pt", "glimpse MiB", "PyTorch MiB", "same")
  local lines = {hdr, (hdr:gsub("[^|]", "-"))}
  for _, r in ipairs(results) do
    if r.skipped then
      lines[#lines + 1] = string.format("| %-12s | skipped: %s |", r.workload, r.skipped)
    else
      local torch = r.torch_ms and string.format("%.2f (%d)", r.torch_ms, r.torch_threads or 0)
                    or (r.torch_skipped and "not run" or "failed")
      lines[#lines + 1] = string.format("| %-12s | %10s | %6s | %14s | %6s | %6s | %6s | %9s "
        .. "| %14s | %11s | %11s | %-9s |", r.workload, f("%.2f", r.glimpse_ms),
        f("%.0f%%", r.glimpse_spread_pct), torch, f("%.0f%%", r.torch_spread_pct),
        f("%.2f", r.ratio), f("%.2f", r.ratio_best), f("%.2f", r.cpu_ratio),
        r.glimpse_gflops and string.format("%.1f/%s", r.glimpse_gflops, f("%.1f", r.torch_gflops))
          or "-",
        f("%.1f", r.glimpse_vmhwm_kb and r.glimpse_vmhwm_kb / 1024),
        f("%.1f", r.torch_vmhwm_kb and r.torch_vmhwm_kb / 1024), same_text(r))
    end
  end
  return table.concat(lines, "\n")
end

--- the lines under the table: PyTorch's winning configuration, rates, the one-thread runs
function R.notes(results)
  local lines = {}
  for _, r in ipairs(results) do
    if r.torch_error then lines[#lines + 1] = "PyTorch error (" .. r.workload .. "): " .. r.torch_error end
    if r.torch_skipped then lines[#lines + 1] = "PyTorch (" .. r.workload .. "): " .. r.torch_skipped end
    if r.torch_config then
      local c = r.torch_config
      lines[#lines + 1] = string.format("PyTorch %-12s %s, %s kernels, %d thread%s, %s%s%s",
        r.workload .. ":", c.env ~= "" and c.env or "(no variables)", tostring(c.cpu_capability),
        c.threads or 0, c.threads == 1 and "" or "s", tostring(c.layout),
        c.mkldnn_enabled and ", oneDNN on" or "", r.torch_note and ", " .. r.torch_note or "")
    end
    if r.glimpse_per_s then
      local unit = r.unit or (r.workload == "W6" and "captions") or "items"
      lines[#lines + 1] = string.format("%s: glimpse %.1f %s/s, PyTorch %s %s/s", r.workload,
        r.glimpse_per_s, unit, f("%.1f", r.torch_per_s), unit)
    end
    if r.thread_speedup then
      lines[#lines + 1] = string.format("%s: glimpse on 1 thread %.2f ms, on %d threads %.2f ms "
        .. "(medians): %.2fx", r.workload, r.glimpse_ms_1thread, r.glimpse_threads_default
        or r.glimpse_threads or 0, r.glimpse_ms, r.thread_speedup)
    end
  end
  return table.concat(lines, "\n")
end

local function by_name(results)
  local t = {}
  for _, r in ipairs(results) do
    if not r.skipped then t[r.workload] = r end
  end
  return t
end

-- a target over several workloads: each gives (value, ok) or nil when not measured; -> the
-- numbers, and met: false when one measured misses, nil when none misses but one is missing
local function check_all(t, names, one, fmt)
  local parts, failed, missing = {}, false, false
  for _, n in ipairs(names) do
    local v, ok = one(t[n])
    if v == nil then
      parts[#parts + 1] = n .. " not measured"
      missing = true
    else
      parts[#parts + 1] = string.format("%s " .. fmt, n, v)
      if not ok then failed = true end
    end
  end
  local met = not failed
  if not failed and missing then met = nil end
  return table.concat(parts, ", "), met
end

--- the issue's targets on the medians: {{target, numbers, met}} (met nil: not measured)
function R.targets(results)
  local t = by_name(results)
  local s1 = t.S1 and t.S1.glimpse_gflops
  local out = {}
  local function add(target, numbers, met) out[#out + 1] = {target = target, numbers = numbers, met = met} end
  local function of_s1(min_share)
    return function(r)
      if not (r and r.glimpse_gflops and s1) then return nil end
      local share = r.glimpse_gflops / s1
      return share * 100, share >= min_share
    end
  end
  local w13, w13_met = check_all(t, {"W1", "W2", "W3"}, of_s1(0.85), "%.0f%%")
  add("W1-W3 >= 85% of S1's GFLOP/s",
      w13 .. (s1 and string.format(" (S1 %.0f GFLOP/s)", s1) or ""), w13_met)
  add("W4 >= 100% of S1's GFLOP/s", check_all(t, {"W4"}, of_s1(1.0), "%.0f%%"))
  local function ratio_at_most(limit)
    return function(r)
      if not (r and r.ratio) then return nil end
      return r.ratio, r.ratio <= limit
    end
  end
  add("W5 VGG-16 <= 0.6 of PyTorch's time", check_all(t, {"W5-vgg16"}, ratio_at_most(0.6), "%.2f"))
  add("W5 ResNet-18 <= 0.7 of PyTorch's time",
      check_all(t, {"W5-resnet18"}, ratio_at_most(0.7), "%.2f"))
  add("W6 >= 3x PyTorch's captions/s", check_all(t, {"W6"}, function(r)
    if not (r and r.glimpse_per_s and r.torch_per_s) then return nil end
    local x = r.glimpse_per_s / r.torch_per_s
    return x, x >= 3
  end, "%.2fx"))
  add("W7 <= 0.6 of PyTorch's time", check_all(t, {"W7"}, ratio_at_most(0.6), "%.2f"))
  local names = {}
  for _, r in ipairs(results) do
    if not r.skipped and r.glimpse_vmhwm_kb and r.torch_vmhwm_kb then names[#names + 1] = r.workload end
  end
  local nums, met = check_all(t, names, function(r)
    local x = r.glimpse_vmhwm_kb / r.torch_vmhwm_kb
    return x, x <= 0.5
  end, "%.2f")
  if #names == 0 then nums, met = "not measured", nil end
  add("peak memory <= half of PyTorch's", nums, met)
  add("1 -> 2 threads >= 1.7x on W2 and W5",
      check_all(t, {"W2", "W5-vgg16", "W5-resnet18"}, function(r)
        if not (r and r.thread_speedup) then return nil end
        return r.thread_speedup, r.thread_speedup >= 1.7
      end, "%.2fx"))
  local agree, any = true, false
  for _, r in ipairs(results) do
    if r.same_loss ~= nil then
      any = true
      agree = agree and r.same_loss
    end
  end
  local agreed
  if any then agreed = agree end
  add("both sides compute the same (losses, outputs, tokens)",
      any and (agree and "every check agrees" or "a check DISAGREES (see the table)") or
      "not measured", agreed)
  return out
end

local function status(met)
  if met == nil then return "not measured" end
  return met and "met" or "not met"
end

function R.targets_table(results)
  local lines = {"| target | this run (medians) | status |", "|---|---|---|"}
  for _, x in ipairs(R.targets(results)) do
    lines[#lines + 1] = string.format("| %s | %s | %s |", x.target, x.numbers, status(x.met))
  end
  return table.concat(lines, "\n")
end

--- the whole report of a results file's table (as bench/run.lua prints it)
function R.text(doc)
  for _, r in ipairs(doc.results) do R.summarize(r) end
  local parts = {R.table(doc.results)}
  local notes = R.notes(doc.results)
  if notes ~= "" then parts[#parts + 1] = notes end
  parts[#parts + 1] = ""
  local n = math.tointeger(doc.rounds) or doc.rounds
  parts[#parts + 1] = string.format("Targets, on the medians of %s round%s%s:",
    tostring(n), n == 1 and "" or "s",
    doc.quick and " (quick mode: small sizes, the numbers do not count)" or "")
  parts[#parts + 1] = R.targets_table(doc.results)
  return table.concat(parts, "\n")
end

if arg and arg[0] and arg[0]:match("report%.lua$") then
  local cjson = require "cjson"
  local path = arg[1] or "bench/results.json"
  local fh = assert(io.open(path))
  local doc = cjson.decode(fh:read("a"))
  fh:close()
  print(R.text(doc))
end

return R
