--- glimpse.reproduce -- the papers' tables by one command: each run of each table is one
-- script command on a step budget with a fixed seed, its numbers read back from the script's
-- metrics.json and set beside the paper's (the tables: glimpse.reproduce_tables).
--
--   reproduce.run{mode = "quick", out = "out/reproduce", results = "results",
--                 doc = "docs/results.md"}                 -- `make reproduce QUICK=1`
--
-- RESULTS/<table>.json is rewritten after each run, so a killed reproduction resumes (a run
-- done with the same command is kept: the same script and flags, whatever the executable's
-- path and the flags' order).  Outputs go to OUT/<table>/<run>/; each done run's checkpoint
-- (a compare table: its results.json) is kept in MODELS/<table>/<run>.* with a <run>.json
-- (command, commit, rows) -- models/reproduce/, in the repository, for the full mode -- and
-- its record holds the command that re-evaluates it; reproduce.verify (`make verify`)
-- re-scores them all.  Modes: "full" (hours), "quick" (minutes),
-- "tiny" (seconds: the tests); each mode keeps its own folders (OUT/mode.json and each
-- RESULTS/<table>.json say whose they are, and another mode's run is refused there), so a
-- quick run never replaces a full run's checkpoint or record.  An interrupted run is
-- recorded as interrupted and never replaces a done record.
local check = require "glimpse.check"
local options = require "glimpse.options"
local util = require "glimpse.util"
local experiment = require "glimpse.lab.experiment"
local tables = require "glimpse.lab.reproduce_tables"

local M = {}
M.MODES = {full = true, quick = true, tiny = true}
M.TABLES = tables.TABLES

local fail = check.fail

-- the command of one run (a list of words), its output folder and its step budget
local function command_of(exe, tbl, run, mode, out)
  local dir = out .. "/" .. tbl.name .. "/" .. run.id
  local words = {exe, run.script}
  for _, w in ipairs(run.flags(mode)) do words[#words + 1] = tostring(w) end
  local steps = run.steps[mode]
  for _, w in ipairs({"--steps", steps, "--seed", 1, "--out", dir}) do words[#words + 1] = tostring(w) end
  return words, dir, steps
end

local function join(words)
  local t = {}
  for i, w in ipairs(words) do t[i] = util.shell_quote(w) end
  return table.concat(t, " ")
end

-- the words of a POSIX shell command line ('...' and "..." quoting, backslashes): what join
-- wrote, or a command typed by hand
local function shell_words(s)
  local words, cur, i, n, quoted = {}, {}, 1, #s, false
  while i <= n do
    local ch = s:sub(i, i)
    if ch:match("%s") then
      if #cur > 0 or quoted then words[#words + 1] = table.concat(cur) end
      cur, quoted = {}, false
    elseif ch == "'" then
      local j = s:find("'", i + 1, true) or (n + 1)
      cur[#cur + 1], quoted, i = s:sub(i + 1, j - 1), true, j
    elseif ch == '"' then
      i = i + 1
      while i <= n and s:sub(i, i) ~= '"' do
        local c = s:sub(i, i)
        if c == "\\" and i < n and s:sub(i + 1, i + 1):match('[\\"$`]') then i = i + 1; c = s:sub(i, i) end
        cur[#cur + 1], i = c, i + 1
      end
      quoted = true
    elseif ch == "\\" and i < n then
      i = i + 1
      cur[#cur + 1] = s:sub(i, i)
    else
      cur[#cur + 1] = ch
    end
    i = i + 1
  end
  if #cur > 0 or quoted then words[#words + 1] = table.concat(cur) end
  return words
end

M.join, M.shell_words = join, shell_words

--- reproduce.verify{...}: re-scores the kept checkpoints (glimpse.lab.reproduce_verify)
function M.verify(user) return require("glimpse.lab.reproduce_verify").verify(user, M) end

--- reproduce.normalize(command) -> the command as "done" compares it: without the
--- executable (its path does not change the run), the script as scripts/<name>.lua, then the
--- flags sorted by name (each with its values; --flag=value is --flag value; numbers in one
--- spelling).  command: a shell command line or a list of words.
function M.normalize(command)
  local words = type(command) == "table" and command or shell_words(tostring(command))
  local script = tostring(words[2] or ""):gsub("^%./", "")
  script = script:match("(scripts/[^/]+%.lua)$") or script
  local groups, lead = {}, {}
  local function value(v)
    local x = tonumber(v)
    if x == nil or v:match("^%s") or v:match(",") then return v end
    if math.tointeger(x) then return tostring(math.tointeger(x)) end
    return string.format("%.17g", x)
  end
  for i = 3, #words do
    local w = tostring(words[i])
    local flag, eq = w:match("^(%-%-[^=]+)=(.*)$")
    if flag then
      groups[#groups + 1] = {flag, value(eq), order = #groups + 1}
    elseif w:match("^%-%-.") then
      groups[#groups + 1] = {w, order = #groups + 1}
    elseif #groups > 0 then
      local g = groups[#groups]
      g[#g + 1] = value(w)
    else
      lead[#lead + 1] = value(w)
    end
  end
  table.sort(groups, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a.order < b.order
  end)
  local out = {script}
  for _, w in ipairs(lead) do out[#out + 1] = w end
  for _, g in ipairs(groups) do
    for _, w in ipairs(g) do out[#out + 1] = w end
  end
  return join(out)
end

-- "a,b c" -> {"a", "b", "c"}; anything else as given
local function words_of(list)
  if type(list) ~= "string" then return list end
  local t = {}
  for x in list:gmatch("[^,%s]+") do t[#t + 1] = x end
  return t
end

--- reproduce.select(names) -> the tables named (a list or comma list; nil: all); an error
--- names an unknown one
function M.select(names)
  if names == nil then return M.TABLES end
  names = words_of(names)
  if type(names) ~= "table" then fail(2, "reproduce.select: names must be a list, got %s", type(names)) end
  local by, out = {}, {}
  for _, t in ipairs(M.TABLES) do by[t.name] = t end
  for _, n in ipairs(names) do
    if not by[n] then
      local have = {}
      for _, t in ipairs(M.TABLES) do have[#have + 1] = t.name end
      fail(2, "reproduce: unknown table '%s' (have %s)", tostring(n), table.concat(have, ", "))
    end
    out[#out + 1] = by[n]
  end
  return out
end

-- src to dest atomically (a rename; across file systems a copy to a temp file renamed);
-- move: src is gone after
local function ship(src, dest, move)
  util.mkdir_p(dest:match("^(.*)/[^/]*$") or ".")
  if move and os.rename(src, dest) then return dest end
  util.write_text(dest, util.read_text(src))
  if move then os.remove(src) end
  return dest
end

-- one run: the script's command, then its metrics.json turned into rows
local function do_run(o, tbl, run, words, dir, steps)
  local rec = {id = run.id, command = join(words), steps = steps, mode = o.mode}
  util.mkdir_p(dir)
  local m = experiment.machine()
  rec.machine = {cpu = m.cpu, cores = m.cores, loadavg = m.loadavg, commit = m.commit}
  local timer = util.Timer()
  o.log(string.format("reproduce: %s/%s: %s", tbl.name, run.id, rec.command))
  local mpath = dir .. "/" .. (run.metrics or "metrics.json")
  os.remove(mpath)                      -- a metrics.json of an earlier, unfinished run
  local ok, how, code = os.execute(rec.command .. " > " .. util.shell_quote(dir .. "/log.txt") .. " 2>&1")
  rec.seconds = timer:elapsed()
  local log = util.exists(dir .. "/log.txt") and util.read_text(dir .. "/log.txt") or ""
  -- ^C reaches the script (the Trainer stops cleanly and says so; compare exits 130) and
  -- not this process (os.execute's system() ignores it while it waits): stop here too
  rec.interrupted = how == "signal" or (how == "exit" and code == 130)
                    or log:find("interrupted at step", 1, true) ~= nil or nil
  if rec.interrupted then
    rec.status, rec.reason = "interrupted", "interrupted (Ctrl-C); see " .. dir .. "/log.txt"
    return rec
  end
  if not ok or not util.exists(mpath) then
    rec.status = "failed"
    rec.reason = "the command failed; see " .. dir .. "/log.txt"
    return rec
  end
  local metrics = util.read_json(mpath)
  if type(metrics.steps) == "number" and metrics.steps < steps then
    -- interrupted (the Trainer stops cleanly on ^C) or stopped by its time-limit guard
    rec.status = "failed"
    rec.reason = string.format("stopped at step %d of %d; see %s/log.txt", metrics.steps, steps, dir)
    return rec
  end
  local rows_ok, rows = pcall(run.rows, metrics, o.mode)
  if not rows_ok then
    rec.status, rec.reason = "failed", "reading " .. mpath .. ": " .. tostring(rows)
    return rec
  end
  rec.status, rec.rows = "done", rows
  -- what re-scores the run is kept in MODELS/<table>/<run>.*: the checkpoint (moved there),
  -- or a compare table's results.json (its per-configuration records)
  local base = o.models .. "/" .. tbl.name .. "/" .. run.id
  if run.checkpoint then
    rec.checkpoint = base .. ".safetensors"
    local ev = {table.unpack(words)}
    for i = #ev, 1, -1 do
      if ev[i] == "--steps" then ev[i + 1] = "0" end
      if ev[i] == "--out" then ev[i + 1] = dir .. "/eval" end
      if run.eval_set and run.eval_set[ev[i]] ~= nil then ev[i + 1] = tostring(run.eval_set[ev[i]]) end
      if ev[i] == run.eval_cache then ev[i + 1] = base .. "-cache" end
    end
    ev[#ev + 1], ev[#ev + 2] = "--load", rec.checkpoint
    rec.eval_command = join(ev)
    if not util.exists(dir .. "/" .. run.checkpoint) then
      rec.status, rec.rows = "failed", nil
      rec.reason = "the run wrote no " .. run.checkpoint .. "; see " .. dir .. "/log.txt"
      return rec
    end
    ship(dir .. "/" .. run.checkpoint, rec.checkpoint, true)
    if run.eval_cache then
      -- what the re-evaluation computes slowly (tsp n=20's exact test tours) is kept beside
      -- the checkpoint: the re-evaluate command runs once here and fills MODELS/<t>/<run>-cache
      util.mkdir_p(base .. "-cache")
      local eval_dir = dir .. "/eval"
      util.mkdir_p(eval_dir)
      if not os.execute(rec.eval_command .. " > " .. util.shell_quote(eval_dir .. "/log.txt") .. " 2>&1") then
        o.log(string.format("reproduce: %s/%s: the re-evaluation that fills %s-cache failed; see %s/log.txt",
                            tbl.name, run.id, base, eval_dir))
      end
    end
  else
    rec.no_eval = run.no_eval
    ship(mpath, base .. ".results.json")
  end
  rec.shipped = run.checkpoint and rec.checkpoint or base .. ".results.json"
  local m0 = rec.machine
  util.write_json(base .. ".json", {table = tbl.name, run = run.id, mode = o.mode,
    command = rec.command, eval_command = rec.eval_command, shipped = rec.shipped,
    commit = m0.commit, date = os.date("!%Y-%m-%dT%H:%M:%SZ"), steps = steps,
    seconds = rec.seconds, rows = rows}, {indent = 2})
  return rec
end

--- reproduce.models_of(mode, out) -> the folder a mode keeps its checkpoints in: full
--- "models/reproduce" (in the repository), quick and tiny OUT/models
function M.models_of(mode, out)
  return mode == "full" and "models/reproduce" or out .. "/models"
end

local STATUSES = {done = true, failed = true, interrupted = true}

-- the record in path (nil: none yet), checked: a clear error naming the file when it is not
-- JSON, not an object, or holds runs that are not run records (of tbl's runs: a run the
-- table dropped is dropped from the file)
local function read_record(path, tbl)
  if not util.exists(path) then return nil end
  local ok, rec = pcall(util.read_json, path)
  if not ok then fail(3, "reproduce: %s is not a results file: %s", path, check.strip(rec)) end
  local function bad(fmt, ...)
    fail(4, "reproduce: %s: " .. fmt .. " (fix or remove the file)", path, ...)
  end
  if type(rec) ~= "table" then
    bad("expected a JSON object {table=, runs={}}, got %s", type(rec) == "userdata" and "null"
        or check.value(rec))
  end
  if rec.runs == nil then rec.runs = {} end
  if type(rec.runs) ~= "table" then bad("'runs' must be an object of run records, got %s",
                                        type(rec.runs) == "userdata" and "null" or check.value(rec.runs)) end
  if rec.mode ~= nil and not M.MODES[rec.mode] then bad("'mode' is %s", check.value(rec.mode)) end
  local ours
  if tbl then
    ours = {}
    for _, run in ipairs(tbl.runs) do ours[run.id] = true end
  end
  for id, r in pairs(rec.runs) do
    if type(id) ~= "string" then bad("'runs' must be an object keyed by run ids, got a list") end
    if ours and not ours[id] then
      -- not the table's: merge drops it
    elseif type(r) ~= "table" then
      bad("runs.%s must be a run record, got %s", id, type(r) == "userdata" and "null" or check.value(r))
    else
      if not STATUSES[r.status] then bad("runs.%s.status is %s (done, failed or interrupted)", id, check.value(r.status)) end
      if r.status == "done" then
        if type(r.command) ~= "string" then bad("runs.%s.command is %s", id, check.value(r.command)) end
        if type(r.rows) ~= "table" then bad("runs.%s.rows is %s", id, check.value(r.rows)) end
        for i, row in ipairs(r.rows) do
          if type(row) ~= "table" then bad("runs.%s.rows[%d] is %s", id, i, check.value(row)) end
        end
      end
      if r.mode ~= nil and not M.MODES[r.mode] then bad("runs.%s.mode is %s", id, check.value(r.mode)) end
    end
  end
  return rec
end
M.read_record = read_record

-- the mode a record's runs were made in (its `mode`, or that of its done runs), or nil
local function mode_of(rec)
  if rec.mode then return rec.mode end
  for _, r in pairs(rec.runs) do
    if type(r) == "table" and r.status == "done" and M.MODES[r.mode] then return r.mode end
  end
  return nil
end

-- the table's record as it is on disk now, with `id`'s run set to r (nil: only tidied): another
-- driver process may have written other runs of the table since this one started
local function merge(path, tbl, id, r, mode)
  local rec = read_record(path, tbl) or {}
  rec.table, rec.title, rec.paper, rec.runs = tbl.name, tbl.title, tbl.paper, rec.runs or {}
  rec.mode = rec.mode or mode
  if id then rec.runs[id] = r end
  local ids = {}
  for _, run in ipairs(tbl.runs) do ids[run.id] = true end
  for k in pairs(rec.runs) do if not ids[k] then rec.runs[k] = nil end end  -- a run the table dropped
  util.write_json(path, rec, {indent = 2})
  return rec
end

-- the folder's mode: OUT/mode.json is written by the first run in it; another mode's run is
-- refused there (a quick run would overwrite the full runs' checkpoints)
local function claim_out(out, mode)
  local path = out .. "/mode.json"
  if util.exists(path) then
    local ok, m = pcall(util.read_json, path)
    local have = ok and type(m) == "table" and m.mode
    if have ~= mode then
      fail(3, "reproduce: %s holds the checkpoints of %s runs (%s); a %s run goes to a folder " ..
           "of its own (--out)", out, tostring(have or "other"), path, mode)
    end
    return
  end
  util.mkdir_p(out)
  util.write_json(path, {mode = mode})
end

-- the run ids asked for, as a set (nil: all); an id that none of the tables has is an error
local function id_set(runs, tbls)
  if runs == nil then return nil end
  runs = words_of(runs)
  if type(runs) ~= "table" then fail(3, "reproduce.run: option 'runs' must be a list of run ids, got %s", type(runs)) end
  local have, names = {}, {}
  for _, t in ipairs(tbls) do
    local ids = {}
    for _, r in ipairs(t.runs) do have[r.id], ids[#ids + 1] = true, r.id end
    names[#names + 1] = t.name .. ": " .. table.concat(ids, ", ")
  end
  local set = {}
  for _, x in ipairs(runs) do
    if not have[x] then
      fail(3, "reproduce: unknown run '%s' (the tables asked for have %s)", tostring(x),
           table.concat(names, "; "))
    end
    set[x] = true
  end
  if next(set) == nil then fail(3, "reproduce.run: option 'runs' names no run") end
  return set
end

M.run_options = options.declare("reproduce.run", {
  {"mode", "string", nil, choices = {"full", "quick", "tiny"}, required = true,
   help = "full: the results page's budgets (hours); quick: minutes; tiny: seconds (tests)"},
  {"out", "string", nil, required = true, help = "folder of the runs' own outputs"},
  {"results", "string", nil, required = true, help = "folder of the <table>.json records"},
  {"doc", "string", nil, required = true, help = "the markdown page written at the end"},
  {"models", "string", nil, help = "folder the runs' checkpoints (and the compare tables' "
   .. "records) are kept in, as MODELS/<table>/<run>.* (default: full models/reproduce, the "
   .. "repository's; quick and tiny OUT/models)"},
  {"tables", "table|string", nil, help = "table names, a list or a comma list (default all)"},
  {"runs", "table|string", nil, help = "run ids, a list or a comma list (default all)"},
  {"exe", "string", "build/glimpse", help = "the glimpse executable the runs use"},
  {"log", "function", nil, help = "function(line) for the progress lines (default print)"},
})

--- reproduce.run{mode="full"|"quick"|"tiny", out=, results=, doc=, models=, tables=, runs=, exe=, log=}
--- -> {table name -> record}: runs what is not done yet, writes RESULTS/<table>.json after
--- every run and the page DOC (markdown) at the end (every table with a RESULTS/<table>.json:
--- a run of some tables keeps the others' rows).  runs: run ids (a list or comma list; nil:
--- all) -- the tables' other runs are neither run nor changed, so two drivers can run two
--- runs of one table side by side (each writes its run into the file as it is on disk then).
--- exe: the glimpse executable (default build/glimpse); log: a function(line) (default print).
function M.run(user)
  if type(user) ~= "table" then
    fail(2, "reproduce.run: expected an options table, got %s", type(user))
  end
  local o = M.run_options:check(user, 2)
  for _, k in ipairs({"out", "results", "doc"}) do
    if o[k] == "" then fail(2, "reproduce.run: option '%s' must be a path, got ''", k) end
  end
  o.log = o.log or print
  o.models = o.models or M.models_of(o.mode, o.out)
  local tbls = M.select(o.tables)
  local only = id_set(o.runs, tbls)
  -- every record is read (and checked) and every folder's mode compared before anything runs
  for _, tbl in ipairs(M.TABLES) do
    local path = o.results .. "/" .. tbl.name .. ".json"
    local rec = read_record(path, tbl)
    local m = rec and mode_of(rec)
    if m and m ~= o.mode then
      fail(2, "reproduce: %s holds %s runs; %s runs keep their records in a folder of their " ..
           "own (--results; scripts/reproduce.lua's default: %s)", path, m, o.mode,
           o.mode == "full" and "results" or ("out/reproduce-" .. o.mode .. "/results"))
    end
  end
  claim_out(o.out, o.mode)
  util.mkdir_p(o.results)
  local all = {}
  for _, tbl in ipairs(tbls) do
    local path = o.results .. "/" .. tbl.name .. ".json"
    local rec = merge(path, tbl, nil, nil, o.mode)
    for _, run in ipairs(tbl.runs) do
      local words, dir, steps = command_of(o.exe, tbl, run, o.mode, o.out)
      local old = rec.runs[run.id]
      if only and not only[run.id] then
        o.log(string.format("reproduce: %s/%s: not among the runs asked for, kept", tbl.name, run.id))
      elseif old and old.status == "done" and M.normalize(old.command) == M.normalize(words)
             and old.shipped and util.exists(old.shipped) then
        o.log(string.format("reproduce: %s/%s: done before, kept", tbl.name, run.id))
      else
        local r = do_run(o, tbl, run, words, dir, steps)
        o.log(string.format("reproduce: %s/%s: %s%s", tbl.name, run.id, r.status,
                            r.seconds and string.format(" in %.0fs", r.seconds) or "")
              .. (r.reason and (": " .. r.reason) or ""))
        local now = read_record(path, tbl) or rec
        local kept = now.runs and now.runs[run.id]
        if r.interrupted and kept and kept.status == "done" then
          -- an interrupted run says nothing about the done one: it stays as it was
          o.log(string.format("reproduce: %s/%s: the run done before is kept", tbl.name, run.id))
        else
          rec = merge(path, tbl, run.id, r, o.mode)
        end
        if r.interrupted then error("reproduce: interrupted during " .. tbl.name .. "/" .. run.id, 2) end
      end
    end
    all[tbl.name] = merge(path, tbl, nil, nil, o.mode)
  end
  -- the page shows every table with a record: those not run now come from their JSON
  local shown = {}
  for _, tbl in ipairs(M.TABLES) do
    local path = o.results .. "/" .. tbl.name .. ".json"
    if not all[tbl.name] then all[tbl.name] = read_record(path, tbl) end
    if all[tbl.name] then shown[#shown + 1] = tbl end
  end
  M.write_page(o.doc, shown, all, o)
  return all
end

local function cell(v)
  if v == nil then return "—" end
  if type(v) == "number" then
    if v == math.floor(v) and math.abs(v) < 2^53 then return string.format("%d", math.tointeger(v)) end
    return string.format("%.4g", v)
  end
  return (tostring(v):gsub("|", "\\|"))
end

--- reproduce.write_page(path, tables, records, {mode=}) writes the markdown page: per table
--- the paper's number beside glimpse's for each row, then each run's command, steps, wall
--- time, machine load and the command that re-evaluates its checkpoint.
function M.write_page(path, tbls, records, o)
  local m = experiment.machine()
  local L = {"# The papers' tables, reproduced", "",
             "Last written by `make reproduce" .. (o.mode == "quick" and " QUICK=1" or o.mode == "tiny"
               and " TINY=1" or "") .. "` (mode **" .. o.mode .. "**; every run a step budget "
               .. "with seed 1) on " .. tostring(m.cpu) .. ", " .. tostring(m.cores) .. " cores, "
               .. "glimpse " .. tostring(m.glimpse) .. " (page written at commit " .. tostring(m.commit) .. "). "
               .. "Each run's wall time and the machine's load average when it started are in "
               .. "its line: the numbers come from the step budgets, the times move with the "
               .. "load. A run of some tables (`--tables`) keeps the others' rows.", "",
             "To check the numbers without training: `make verify"
               .. (o.mode == "quick" and " QUICK=1" or o.mode == "tiny" and " TINY=1" or "")
               .. "` re-evaluates every kept checkpoint (" .. (o.mode == "full" and
               "models/reproduce/, part of the repository" or "the mode's models/ folder")
               .. ") with its run's re-evaluate command and compares each row with the "
               .. "recorded one (every number within one unit of its last printed digit); "
               .. "a compare table's rows are computed again from its kept results.json. "
               .. "How: [experiments/reproduce.md](experiments/reproduce.md#verifying-the-numbers).", ""}
  local modes, order, kept, done = {}, {}, 0, 0
  for _, tbl in ipairs(tbls) do
    for _, r in pairs((records[tbl.name] or {runs = {}}).runs) do
      if r.status == "done" then
        done, kept = done + 1, kept + (r.shipped and 1 or 0)
        if not modes[r.mode] then order[#order + 1] = r.mode end
        modes[r.mode] = (modes[r.mode] or 0) + 1
      end
    end
  end
  table.sort(order)
  for i, k in ipairs(order) do order[i] = string.format("%d %s", modes[k], k) end
  L[#L + 1] = "Runs done, by mode: " .. (#order > 0 and table.concat(order, ", ") or "none")
              .. (modes.full and "." or " (no full run yet: these are not the full budgets' numbers).")
              .. string.format(" Kept for `make verify`: %d of the %d done runs%s.", kept, done,
                               kept < done and " (the others were run before checkpoints were kept)" or "")
  L[#L + 1] = ""
  for _, tbl in ipairs(tbls) do
    local rec = records[tbl.name] or {runs = {}}
    L[#L + 1] = "## " .. tbl.title
    L[#L + 1] = ""
    L[#L + 1] = "Paper: " .. tbl.paper
    L[#L + 1] = ""
    L[#L + 1] = "| row | paper | glimpse | run |"
    L[#L + 1] = "|---|---|---|---|"
    for _, run in ipairs(tbl.runs) do
      local r = rec.runs[run.id]
      if r and r.status == "done" then
        for _, row in ipairs(r.rows) do
          L[#L + 1] = string.format("| %s | %s | %s | %s |", cell(row.label), cell(row.paper),
                                    cell(row.glimpse), run.id)
        end
      else
        L[#L + 1] = string.format("| %s | — | %s | %s |", run.id,
                                  r and (r.status .. ": " .. cell(r.reason)) or "not run", run.id)
      end
    end
    L[#L + 1] = ""
    for _, run in ipairs(tbl.runs) do
      local r = rec.runs[run.id]
      if r then
        local la, commit = r.machine and r.machine.loadavg, r.machine and r.machine.commit
        L[#L + 1] = string.format("- `%s`: %s steps (mode %s), %s%s%s", run.id, cell(r.steps),
                                  cell(r.mode), r.seconds and string.format("%.0f s wall", r.seconds) or "",
                                  la and (", load " .. la:match("^%S+")) or "",
                                  commit and (", commit " .. commit) or "")
        L[#L + 1] = "  - `" .. r.command .. "`"
        if r.eval_command then
          L[#L + 1] = "  - re-evaluate" .. ((r.shipped or r.status ~= "done") and ""
                        or " (where the run was made: its checkpoint is not in the repository)")
                      .. ": `" .. r.eval_command .. "`"
        elseif r.no_eval then
          L[#L + 1] = "  - re-evaluate: " .. r.no_eval
        end
        if r.status == "done" then
          L[#L + 1] = r.shipped and ("  - kept: `" .. r.shipped .. "` (with `" ..
                        r.shipped:gsub("%.results%.json$", ""):gsub("%.safetensors$", "") ..
                        ".json`: its command, commit and rows)")
                      or "  - kept: nothing (run before the checkpoints were kept in the " ..
                         "repository: not shipped, `make verify` lists it as such)"
        end
      end
    end
    if tbl.note then L[#L + 1] = ""; L[#L + 1] = tbl.note end
    L[#L + 1] = ""
  end
  util.mkdir_p(path:match("^(.*)/[^/]*$") or ".")
  util.write_text(path, table.concat(L, "\n"))
  return path
end

return M
