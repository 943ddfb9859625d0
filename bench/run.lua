--- bench/run.lua -- the side-by-side benchmark driver: glimpse against PyTorch 1.13 (CPU).
--
-- Usage: glimpse bench/run.lua [--quick] [--rounds N] [--only W[,W...]] [--out PATH]
--                              [--no-torch] [--profile]
-- For each workload it runs the glimpse side (bench/glimpse_workloads.lua, in a fresh glimpse
-- process) and the PyTorch side (bench/torch_workloads.py under /usr/bin/python3, which has
-- python3-torch) alternately, ROUNDS times each (5; --rounds N or BENCH_ROUNDS=N), one process
-- per workload per side per round.
-- The first glimpse run saves its seeded initial weights and inputs to a temporary
-- safetensors file that the PyTorch side loads, so both first-step losses come from the same
-- numbers; they must agree to LOSS_RTOL.  Each side reports JSON lines.  Every round's ms/step
-- of each side is kept (PyTorch's round is already its best over its configurations and 1
-- and 2 threads; glimpse runs on its default, every core, and W2 and W5 once more on one
-- thread each round, for the speed-up the thread pool gives; W8 on both, the faster kept);
-- bench/report.lua turns them into the median (the table's number and the targets'), the
-- best and the spread (max - min as a % of the median).  Peak resident memory (VmHWM) is the
-- largest seen.  Both sides also report the CPU time (all threads) of their timed steps; its
-- ratio ("cpu ratio", medians) is the steadier number on a machine other work is loading.
-- The load average before and after goes into the output.  Prints the table, the issue's
-- targets (met / not met, on the medians) and writes bench/results.json (--out PATH).
-- --quick (or BENCH_QUICK=1): 1 round, fewer steps, W7 and W8 on a small model: a check of
-- the machinery, not a measurement.  --no-torch, or python3-torch missing: glimpse's side only.
-- A workload whose glimpse side fails is listed as skipped with its error.
--
-- glimpse bench/run.lua --scaling [--quick] [--only W2]: data-parallel scaling instead (no
-- PyTorch): the workload (default W2, the captioner's training step; W1 works too) on one
-- process with 1 BLAS thread, one process with 2 threads, and 2 ranks of 1 thread under
-- `mpirun -np 2` (glimpse.dist, the global batch split in two), alternating, ROUNDS times;
-- best ms per global step of each, the speed-up of 2 ranks over 1, the time in the gradient
-- allreduce (with any wait for the slower rank), and the load average.
-- The 2-rank first-step loss must equal the 1-process one (the same global batch).  Writes
-- bench/scaling.json.
local cjson = require "cjson"

local LOSS_RTOL = 1e-4
local PYTHON = "/usr/bin/python3"

local quick, only, scaling, profile = os.getenv("BENCH_QUICK") == "1", nil, false, false
local rounds_arg, out_path, no_torch = os.getenv("BENCH_ROUNDS"), "bench/results.json", false
local USAGE = "usage: glimpse bench/run.lua [--quick] [--rounds N] [--only W[,W...]] [--out PATH] "
              .. "[--no-torch] [--scaling] [--profile]"
do
  local i = 1
  while i <= #arg do
    if arg[i] == "--quick" then quick = true
    elseif arg[i] == "--only" and arg[i + 1] then only = arg[i + 1]; i = i + 1
    elseif arg[i] == "--rounds" and arg[i + 1] then rounds_arg = arg[i + 1]; i = i + 1
    elseif arg[i] == "--out" and arg[i + 1] then out_path = arg[i + 1]; i = i + 1
    elseif arg[i] == "--no-torch" then no_torch = true
    elseif arg[i] == "--scaling" then scaling = true
    elseif arg[i] == "--profile" then profile = true
    else error(USAGE, 0) end
    i = i + 1
  end
end
local rounds_n = rounds_arg and math.tointeger(tonumber(rounds_arg))
if rounds_arg and (not rounds_n or rounds_n < 1) then
  error("bench/run.lua: --rounds (or BENCH_ROUNDS) must be a positive integer, got "
        .. rounds_arg, 0)
end

-- --only W5 picks W5-vgg16 and W5-resnet18 as well as a name given in full; --only W7,W8 both
local function selected(name)
  if not only then return true end
  for o in only:gmatch("[^,]+") do
    if name == o or name:sub(1, #o + 1) == o .. "-" then return true end
  end
  return false
end

local GLIMPSE = arg[-1] or "build/glimpse"
local ROUNDS = quick and 1 or rounds_n or 5
local report = dofile("bench/report.lua")

-- name, description, timed steps (full, quick), forward+backward FLOPs per step (or nil)
local function fl_decoder(B, T, L, demb, dmem, hid, att, V)
  local per = 2 * B * ((demb + dmem) * 4 * hid + hid * 4 * hid) -- LSTM cell
            + 2 * B * hid * att                                   -- query
            + 4 * B * L * att + 2 * B * L * dmem                  -- scores, context
            + 2 * B * (hid + dmem) * V                            -- output layer
  return T * per + 2 * B * L * dmem * att                         -- keys once
end
-- FLOPs (2 per multiply-add) of the convolutions of one 224x224 image through VGG-16 to its
-- conv5_3 grid, and through ResNet-18 to layer4 (downsampling convolutions included)
local function conv_flops_vgg16()
  local cfg = {64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512}
  local f, c, s = 0, 3, 224
  for _, v in ipairs(cfg) do
    if v == "M" then s = s // 2 else f = f + 2 * s * s * c * v * 9; c = v end
  end
  return f
end
local function conv_flops_resnet18()
  local f = 2 * 112 * 112 * 3 * 64 * 49                     -- conv1 7x7 stride 2
  local c, s = 64, 56
  for i = 1, 4 do
    local planes = 64 << (i - 1)
    if i > 1 then
      s = s // 2
      f = f + 2 * s * s * c * planes                         -- the 1x1 downsample
    end
    f = f + 2 * s * s * 9 * (c * planes + 3 * planes * planes)   -- two blocks, two convs each
    c = planes
  end
  return f
end
-- W7: forward FLOPs of a training step's model times 3 (backward ~ twice the forward):
-- per source token an encoder layer's projections (8 d^2) and feed-forward (4 d ff) and its
-- scores and context over S keys (4 S d); per target token a decoder layer's self-attention
-- (8 d^2 + 4 T d, the masked half counted), cross-attention (q and out 4 d^2, 4 S d; the
-- memory's keys and values 4 d^2 per source token), feed-forward; the output layer 2 d V
local function fl_transformer(B, S, T, d, ff, V, L)
  local enc = S * (8 * d * d + 4 * d * ff + 4 * S * d)
  local dec = T * (8 * d * d + 4 * T * d + 4 * d * d + 4 * S * d + 4 * d * ff) + S * 4 * d * d
  return 3 * B * (L * (enc + dec) + T * 2 * d * V)
end
local OUT_RTOL = 1e-4     -- W5: max |difference| / max |value| of the grids

local WORKLOADS = {
  {name = "W1", what = "seq2seq BiLSTM+additive attention, B64 T20", steps = {10, 3},
   flops = 3 * (2 * (2 * 64 * 20 * (64 + 128) * 512) + fl_decoder(64, 20, 20, 64, 256, 256, 256, 32))},
  {name = "W2", what = "CNN captioner 64x64, 8x8 grid attention, B32 T8", steps = {10, 3},
   threads1 = true,
   flops = 3 * (2 * 32 * 9 * (64 * 64 * 32 * 1 + 32 * 32 * 64 * 32 + 16 * 16 * 128 * 64)
                + fl_decoder(32, 8, 64, 64, 128, 256, 256, 32))},
  {name = "W3", what = "pointer network N10, B128", steps = {20, 5},
   flops = 3 * (2 * 2 * 128 * 10 * (128 + 128) * 512 + 2 * 2 * 128 * 10 * 128 * 128
                + 4 * 128 * 10 * 10 * 128)},
  {name = "W4", what = "multi-head self-attention B32 T64 D256 h8", steps = {20, 5},
   flops = 3 * (2 * 32 * 64 * 256 * 768 + 2 * 2 * 32 * 64 * 64 * 256 + 2 * 32 * 64 * 256 * 256)},
  {name = "W5-vgg16", what = "VGG-16 features to the 14x14 grid, B8 224x224, inference",
   steps = {2, 1}, flops = 8 * conv_flops_vgg16(), check = "output",
   rtol = OUT_RTOL, threads1 = true},
  {name = "W5-resnet18", what = "ResNet-18 trunk to the 7x7 grid, B8 224x224, inference",
   steps = {3, 1}, flops = 8 * conv_flops_resnet18(), check = "output",
   rtol = OUT_RTOL, threads1 = true},
  {name = "W6", what = "scenes captioner, 64 images, beam 3 (captions/s)", steps = {2, 1},
   check = "greedy", rtol = 0, unit = "captions"},
  {name = "W7", what = "Transformer 2+2 layers d256 h8 ff1024, S=T=64, B32, training step",
   steps = {5, 2}, flops = not quick and fl_transformer(32, 64, 64, 256, 1024, 512, 2) or nil},
  {name = "W8", what = "Transformer greedy decoding, 64 tokens, B32 (PyTorch recomputes)",
   steps = {2, 1}, check = "greedy", rtol = 0, unit = "sequences", best_threads = true,
   torch_note = "no key/value cache: the prefix recomputed at every step"},
  {name = "S1", what = "sgemm 512x512x512", steps = {200, 50}, flops = 2 * 512 ^ 3},
  {name = "S2", what = "sgemm M64 K512 N128", steps = {2000, 500}, flops = 2 * 64 * 512 * 128},
}

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The PyTorch configurations searched per workload (each in its own process, the fastest
-- kept): OpenBLAS's AVX-512 kernels where the CPU has AVX-512 (glimpse picks them for
-- itself, engine/blas.c), with PyTorch's default kernel dispatch and with
-- ATEN_CPU_CAPABILITY=avx512.  Inside each process torch_workloads.py also picks the best of
-- 1 and 2 threads, and of the contiguous and channels_last layouts for convolutions, with
-- oneDNN on.
local function cpu_has_avx512()
  local f = io.open("/proc/cpuinfo")
  if not f then return false end
  local s = f:read("a")
  f:close()
  return s:find("avx512f", 1, true) ~= nil
end
local AVX512 = cpu_has_avx512()
local TORCH_CONFIGS = {
  {name = "default dispatch", env = AVX512 and "OPENBLAS_CORETYPE=SkylakeX" or ""},
}
if AVX512 then
  TORCH_CONFIGS[2] = {name = "ATEN_CPU_CAPABILITY=avx512",
                      env = "OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512"}
end

-- run a command, return (table decoded from its last JSON line) or (nil, error text)
local function run_json(cmd)
  local errf = os.tmpname()
  local p = io.popen(cmd .. " 2>" .. errf)
  local out = p:read("a")
  local ok, _, code = p:close()
  local f = io.open(errf)
  local err = f and f:read("a") or ""
  if f then f:close() end
  os.remove(errf)
  local last
  for line in out:gmatch("[^\n]+") do
    if line:sub(1, 1) == "{" then last = line end
  end
  if not ok or not last then
    local msg = err:match("[^\n]*error[^\n]*") or err:match("([^\n]+)\n?$") or ("exit " .. tostring(code))
    return nil, msg
  end
  local okj, t = pcall(cjson.decode, last)
  if not okj then return nil, "bad JSON: " .. last end
  return t
end

local function loadavg()
  local f = io.open("/proc/loadavg")
  if not f then return nil end
  local a, b, c = f:read("l"):match("^(%S+) (%S+) (%S+)")
  f:close()
  return {tonumber(a), tonumber(b), tonumber(c)}
end

local function la(t) return t and string.format("%.2f %.2f %.2f", t[1], t[2], t[3]) or "?" end

-- --scaling: 1 rank (1 and 2 threads) against 2 ranks of 1 thread, on one workload
local function run_scaling()
  local w
  for _, x in ipairs(WORKLOADS) do if x.name == (only or "W2") then w = x end end
  if not w or (w.name ~= "W1" and w.name ~= "W2") then error("--scaling: W1 or W2", 0) end
  local steps = quick and w.steps[2] or w.steps[1]
  local base = string.format("%s bench/glimpse_workloads.lua %s %d", sh_quote(GLIMPSE), w.name,
                             steps)
  local mpirun = "mpirun -np 2 --allow-run-as-root --oversubscribe "
  local configs = {
    {name = "1 rank, 1 thread", cmd = base .. " --threads 1"},
    {name = "1 rank, 2 threads", cmd = base .. " --threads 2"},
    {name = "2 ranks, 1 thread each", cmd = mpirun .. base .. " --threads 1 --dist"},
  }
  local load_start = loadavg()
  io.stderr:write(string.format("%s: %s, %d steps x %d rounds, 3 configurations\n", w.name,
                                w.what, steps, ROUNDS))
  for _ = 1, ROUNDS do
    for _, c in ipairs(configs) do
      local g, err = run_json(c.cmd)
      if not g then error(c.name .. ": " .. err, 0) end
      if not c.ms or g.ms_per_step < c.ms then
        c.ms, c.cpu_ms, c.allreduce_ms = g.ms_per_step, g.cpu_ms_per_step, g.allreduce_ms_per_step
      end
      if g.bucket_allreduce_ms and (not c.bucket_ms or g.bucket_allreduce_ms < c.bucket_ms) then
        c.bucket_ms, c.bucket_mb = g.bucket_allreduce_ms, g.bucket_mb
      end
      c.loss1, c.ranks = g.loss1, g.ranks
    end
  end
  local load_end = loadavg()
  local one = configs[1]
  print(string.format("| %-22s | %12s | %16s | %13s | %8s | %-10s |", "configuration",
                      "ms per step", "CPU ms per rank", "allreduce ms", "speed-up", "same loss"))
  print("|------------------------|--------------|------------------|---------------|----------|"
        .. "------------|")
  for _, c in ipairs(configs) do
    c.speedup = one.ms / c.ms
    c.loss_rel_diff = math.abs(c.loss1 - one.loss1) / math.abs(one.loss1)
    print(string.format("| %-22s | %12.1f | %16.1f | %13s | %8.2f | %-10s |", c.name, c.ms,
                        c.cpu_ms, c.allreduce_ms and string.format("%.1f", c.allreduce_ms) or "-",
                        c.speedup, string.format("%s %.0e", c.loss_rel_diff <= LOSS_RTOL and "yes"
                                                 or "NO", c.loss_rel_diff)))
    c.cmd = nil
  end
  local two = configs[3]
  print(string.format("the gradient bucket (%.1f MiB) alone, both ranks ready: %.2f ms an "
                      .. "allreduce (best of the rounds' means of 20)", two.bucket_mb, two.bucket_ms))
  print(string.format("load average (1, 5, 15 min): %s before, %s after", la(load_start),
                      la(load_end)))
  local out = io.open("bench/scaling.json", "w")
  out:write(cjson.encode({workload = w.name, what = w.what, steps = steps, rounds = ROUNDS,
                          loadavg_start = load_start, loadavg_end = load_end,
                          configs = configs}), "\n")
  out:close()
  print("wrote bench/scaling.json")
end

if scaling then
  run_scaling()
  return
end

-- the --profile table: per workload, the share of its step's wall-clock time in each
-- category (glimpse.cpu_profile's samples), the BLAS wrapper's own timing, the top functions
local function profile_table(results)
  local lines = {"| work         | BLAS (matrix products) | memory traffic | engine (elementwise, "
                 .. "reductions, ...) | Lua + bindings | other | BLAS ms/step (GFLOP/s) | "
                 .. "glimpse functions seen most |",
                 "|---|---|---|---|---|---|---|---|"}
  for _, r in ipairs(results) do
    local p = r.profile
    if p and p.samples then
      local top = {}
      for i = 1, math.min(3, #p.top) do
        top[i] = string.format("%s %.0f%%", p.top[i].name, 100 * p.top[i].share)
      end
      lines[#lines + 1] = string.format("| %-12s | %5.1f%% | %5.1f%% | %5.1f%% | %5.1f%% | %5.1f%% "
        .. "| %.2f (%s) | %s |", r.workload, 100 * p.blas, 100 * p.memory, 100 * p.engine,
        100 * p.lua, 100 * p.other, p.blas_ms_per_step,
        p.blas_gflops and string.format("%.0f", p.blas_gflops) or "-", table.concat(top, ", "))
    elseif p then
      lines[#lines + 1] = string.format("| %-12s | profile failed: %s |", r.workload,
                                        tostring(p.error))
    end
  end
  return table.concat(lines, "\n")
end

local load_start = loadavg()
local results = {}

-- PyTorch's side needs python3-torch; without it (or with --no-torch) only glimpse's side runs
local torch_absent
if no_torch then
  torch_absent = "not run (--no-torch)"
elseif not os.execute(PYTHON .. " -c 'import torch' > /dev/null 2>&1") then
  torch_absent = "not run: python3-torch is not installed for " .. PYTHON
                 .. " (make bench installs it)"
end

-- the results file, rewritten after every workload (partial = true until the run ends, so a
-- long run cut short keeps what it measured).  Schema 2: per workload the rounds' times
-- (*_rounds), their medians (glimpse_ms, torch_ms: the table's numbers), bests (*_best) and
-- spreads (*_spread_pct: max - min over the median, in %), and the targets on the medians.
local function write_results(list, load_end, partial)
  local tmp = out_path .. ".tmp"
  local out = assert(io.open(tmp, "w"))
  out:write(cjson.encode({schema = report.SCHEMA, quick = quick, rounds = ROUNDS,
                          loss_rtol = LOSS_RTOL, out_rtol = OUT_RTOL, loadavg_start = load_start,
                          loadavg_end = load_end, partial = partial, cpu_avx512 = AVX512,
                          torch_configs_searched = TORCH_CONFIGS, torch_absent = torch_absent,
                          results = list, targets = report.targets(list)}), "\n")
  out:close()
  assert(os.rename(tmp, out_path))
end

local function push(r, key, x)
  if x == nil then return end
  r[key] = r[key] or {}
  r[key][#r[key] + 1] = x
end

-- one round of PyTorch's side: every configuration, the fastest kept for the round
local function torch_round(w, r, steps, wfile)
  local best
  for _, tc in ipairs(TORCH_CONFIGS) do
    local tcmd = string.format("env %s %s bench/torch_workloads.py %s %d %s", tc.env, PYTHON,
                               w.name, steps, wfile)
    local t, terr = run_json(tcmd)
    if not t then r.torch_error = terr end
    if t and r.torch_loss1 == nil then
      r.torch_loss1 = t.loss1
      if w.check then          -- W5, W6, W8: the PyTorch side compared the outputs itself
        r.out_rel_diff = t.out_rel_diff
        r.same_loss = t.out_rel_diff <= w.rtol
        r.greedy_differ = t.greedy_differ
      else
        r.loss_rel_diff = math.abs(r.glimpse_loss1 - t.loss1) / math.max(math.abs(t.loss1), 1e-12)
        r.same_loss = r.loss_rel_diff <= LOSS_RTOL
      end
    end
    if t then
      r.torch_config_ms[tc.name] = math.min(r.torch_config_ms[tc.name] or math.huge, t.ms_per_step)
      if not best or t.ms_per_step < best.ms_per_step then best = t; best.env = tc.env end
      r.torch_vmhwm_kb = math.max(r.torch_vmhwm_kb or 0, t.vmhwm_kb or 0)
      r.torch_version = t.torch
    end
  end
  if not best then return end
  push(r, "torch_ms_rounds", best.ms_per_step)
  push(r, "torch_cpu_ms_rounds", best.cpu_ms_per_step)
  if not r.torch_best_ms or best.ms_per_step < r.torch_best_ms then
    r.torch_best_ms, r.torch_threads = best.ms_per_step, best.threads
    r.torch_config = best.config
    r.torch_config.env = best.env
  end
end

for _, w in ipairs(WORKLOADS) do
  if selected(w.name) then
    local steps = quick and w.steps[2] or w.steps[1]
    local wfile = os.tmpname() .. ".safetensors"
    local r = {workload = w.name, what = w.what, steps = steps, rounds = ROUNDS,
               unit = w.unit, torch_note = w.torch_note, torch_config_ms = {},
               flops_per_step = w.flops}
    io.stderr:write(string.format("%s: %s, %d steps x %d rounds, PyTorch in %d configurations\n",
                                  w.name, w.what, steps, ROUNDS, #TORCH_CONFIGS))
    local qflag = quick and " --quick" or ""
    for round = 1, ROUNDS do
      local gcmd = string.format("%s bench/glimpse_workloads.lua %s %d%s", sh_quote(GLIMPSE),
                                 w.name, steps, qflag)
      local g, gerr = run_json(gcmd .. (round == 1 and (" --save " .. wfile) or ""))
      if not g then r.skipped = "glimpse: " .. gerr; break end
      if round == 1 then r.glimpse_loss1 = g.loss1 end
      r.glimpse_vmhwm_kb = math.max(r.glimpse_vmhwm_kb or 0, g.vmhwm_kb or 0)
      r.glimpse_threads_default, r.items = g.threads, g.items
      local ms, cpu, threads = g.ms_per_step, g.cpu_ms_per_step, g.threads
      if (w.threads1 or w.best_threads) and g.threads > 1 then   -- the same work on one thread
        local g1, err1 = run_json(gcmd .. " --threads 1")
        if g1 then
          push(r, "glimpse_ms_1thread_rounds", g1.ms_per_step)
          if w.best_threads and g1.ms_per_step < ms then    -- W8: the faster thread count
            ms, cpu, threads = g1.ms_per_step, g1.cpu_ms_per_step, 1
          end
        else
          r.threads1_error = err1
        end
      end
      push(r, "glimpse_ms_rounds", ms)
      push(r, "glimpse_cpu_ms_rounds", cpu)
      push(r, "glimpse_threads_rounds", threads)
      if torch_absent then
        r.torch_skipped = torch_absent
      else
        torch_round(w, r, steps, wfile)
      end
    end
    r.glimpse_threads = r.glimpse_threads_rounds and
      math.tointeger(report.median(r.glimpse_threads_rounds)) or r.glimpse_threads_default
    r.torch_best_ms = nil
    if profile and not r.skipped then
      local pcmd = string.format("%s bench/glimpse_workloads.lua %s %d --profile%s",
                                 sh_quote(GLIMPSE), w.name, steps, qflag)
      local g, gerr = run_json(pcmd)
      r.profile = g and g.profile or {error = gerr}
    end
    os.remove(wfile)
    if not w.best_threads and not w.threads1 then r.glimpse_ms_1thread_rounds = nil end
    r.best_threads = w.best_threads                    -- W8: the faster thread count's time
    report.summarize(r)
    results[#results + 1] = r
    write_results(results, loadavg(), true)
  end
end

print(report.table(results))
local notes = report.notes(results)
if notes ~= "" then print(notes) end
if profile then
  print()
  print(profile_table(results))
end
print()
print(string.format("Targets, on the medians of %d round%s%s:", ROUNDS, ROUNDS == 1 and "" or "s",
                    quick and " (quick mode: the numbers do not count)" or ""))
print(report.targets_table(results))

local load_end = loadavg()
print(string.format("load average (1, 5, 15 min): %s before, %s after", la(load_start),
                    la(load_end)))
write_results(results, load_end, false)
print("wrote " .. out_path)
