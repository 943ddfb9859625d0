--- glimpse.reproduce_verify -- `make verify`: every published number checked from the
-- repository alone.  Each done run of RESULTS/<table>.json whose kept file (its `shipped`
-- field: MODELS/<table>/<run>.safetensors, or a compare table's <run>.results.json) exists
-- is scored again: a checkpoint by its run's own re-evaluate command (--steps 0 --load, a
-- fresh process of this executable), a compare table's rows computed again from its kept
-- per-configuration results.  Each row is set beside the recorded one:
--
--   reproduce.verify{mode = "full", results = "results", models = "models/reproduce"}
--     -> {rows = {{table=, run=, label=, paper=, recorded=, rescored=, status=}, ...},
--         counts = {ok=, mismatch=, failed=, not_shipped=}, bytes=, ok=}
--
-- Tolerance: re-evaluation is deterministic (greedy and beam decoding of fixed test sets,
-- seeded sampling), so a row must come back as printed; a number may differ by one unit of
-- its last printed digit (0.1 points of a percentage printed 12.3%), the room a rounding
-- boundary leaves for sums done in another order (another BLAS build).  Runs recorded
-- without a kept file (older records, or a file removed) are "not shipped": counted and
-- said, not a failure.  The models folder must stay within limit_mb (25 MB).
local check = require "glimpse.check"
local options = require "glimpse.options"
local util = require "glimpse.util"
-- glimpse.lab.reproduce, handed in by reproduce.verify (which this module serves: no cycle)
local reproduce

local M = {}
local fail = check.fail

M.LIMIT_MB = 25

-- the numbers of a cell and its text with them taken out
local function numbers(s)
  local nums = {}
  local skel = tostring(s):gsub("%d+%.?%d*", function(x) nums[#nums + 1] = x; return "#" end)
  return nums, skel
end

--- verify.agree(recorded, rescored) -> true when the cells say the same: equal text, or the
--- same text around numbers each within one unit of the recorded number's last digit
function M.agree(a, b)
  if a == b then return true end
  if a == nil or b == nil then return false end
  if type(a) == "number" and type(b) == "number" then
    return math.abs(a - b) <= 1e-9 * math.max(1, math.abs(a))
  end
  local na, sa = numbers(a)
  local nb, sb = numbers(b)
  if sa ~= sb or #na ~= #nb then return false end
  for i, x in ipairs(na) do
    local decimals = #(x:match("%.(%d*)$") or "")
    if math.abs(tonumber(x) - tonumber(nb[i])) > 10 ^ -decimals * (1 + 1e-9) then return false end
  end
  return true
end

-- the files under dir and their total size in bytes
local function folder_size(dir)
  local files, bytes = 0, 0
  if not util.is_dir(dir) then return files, bytes end
  local p = assert(io.popen("find " .. util.shell_quote(dir) .. " -type f 2>/dev/null"))
  for path in p:lines() do
    local f = io.open(path, "rb")
    if f then
      files, bytes = files + 1, bytes + f:seek("end")
      f:close()
    end
  end
  p:close()
  return files, bytes
end
M.folder_size = folder_size

-- the value after flag in a list of words
local function flag_value(words, flag)
  for i = #words - 1, 1, -1 do if words[i] == flag then return words[i + 1] end end
end

-- the run's rows scored again: {rows=} or {error=}
local function rescore(run, r, exe)
  if not run.checkpoint then                      -- compare: the kept per-configuration results
    local ok, m = pcall(util.read_json, r.shipped)
    if not ok then return {error = check.strip(m)} end
    local rok, rows = pcall(run.rows, m, r.mode)
    return rok and {rows = rows} or {error = tostring(rows)}
  end
  if type(r.eval_command) ~= "string" then return {error = "no re-evaluate command recorded"} end
  local words = reproduce.shell_words(r.eval_command)
  words[1] = exe                                  -- whatever executable made it
  local dir = flag_value(words, "--out")
  if not dir then return {error = "the re-evaluate command has no --out"} end
  util.mkdir_p(dir)
  local mpath = dir .. "/" .. (run.metrics or "metrics.json")
  os.remove(mpath)
  local log = dir .. "/verify-log.txt"
  local ok = os.execute(reproduce.join(words) .. " > " .. util.shell_quote(log) .. " 2>&1")
  if not ok or not util.exists(mpath) then
    return {error = "the re-evaluate command failed; see " .. log}
  end
  local m = util.read_json(mpath)
  if m.steps ~= nil and m.steps ~= 0 then
    return {error = "the re-evaluation trained (steps " .. tostring(m.steps) .. ")"}
  end
  local rok, rows = pcall(run.rows, m, r.mode)
  return rok and {rows = rows} or {error = "reading " .. mpath .. ": " .. tostring(rows)}
end

M.options = options.declare("reproduce.verify", {
  {"mode", "string", "full", choices = {"full", "quick", "tiny"},
   help = "whose records: full (results/, models/reproduce/), quick or tiny (OUT/results, OUT/models)"},
  {"results", "string", nil, help = "folder of the <table>.json records (default: the mode's)"},
  {"models", "string", nil, help = "folder of the kept checkpoints (default: the mode's)"},
  {"out", "string", nil,
   help = "the mode's output folder (default out/reproduce-<mode>; full: out/reproduce)"},
  {"tables", "table|string", nil, help = "table names, a list or a comma list (default all)"},
  {"exe", "string", "build/glimpse", help = "the glimpse executable the re-evaluations use"},
  {"limit_mb", "number", M.LIMIT_MB, range = {0, math.huge}, help = "the models folder's size limit"},
  {"log", "function", nil, help = "function(line) for the table and the summary (default print)"},
})

--- reproduce.verify{mode=, results=, models=, out=, tables=, exe=, limit_mb=, log=} -> report
--- (verify.verify(opts, reproduce) here)
--- (see the top of this file); report.ok is false on a mismatch, a failed re-evaluation or
--- a models folder above limit_mb
function M.verify(user, driver)
  reproduce = driver or package.loaded["glimpse.lab.reproduce"]
  if type(reproduce) ~= "table" then fail(2, "reproduce.verify: call it as reproduce.verify") end
  if user ~= nil and type(user) ~= "table" then
    fail(2, "reproduce.verify: expected an options table, got %s", type(user))
  end
  local o = M.options:check(user or {}, 2)
  o.log = o.log or print
  o.out = o.out or (o.mode == "full" and "out/reproduce" or "out/reproduce-" .. o.mode)
  o.results = o.results or (o.mode == "full" and "results" or o.out .. "/results")
  o.models = o.models or reproduce.models_of(o.mode, o.out)
  local tbls = reproduce.select(o.tables)
  local report = {rows = {}, counts = {ok = 0, mismatch = 0, failed = 0, not_shipped = 0},
                  not_shipped = {}, not_done = {}}
  local rows, counts = report.rows, report.counts
  local timer = util.Timer()
  for _, tbl in ipairs(tbls) do
    local rec = reproduce.read_record(o.results .. "/" .. tbl.name .. ".json", tbl)
    for _, run in ipairs(tbl.runs) do
      local r = rec and rec.runs[run.id]
      local name = tbl.name .. "/" .. run.id
      if not (r and r.status == "done") then
        report.not_done[#report.not_done + 1] = name .. " (" .. (r and r.status or "not run") .. ")"
      else
        if type(r.shipped) ~= "string" or not util.exists(r.shipped) then
          counts.not_shipped = counts.not_shipped + 1
          report.not_shipped[#report.not_shipped + 1] = name .. (type(r.shipped) == "string"
            and (" (" .. r.shipped .. " missing)") or " (recorded before checkpoints were kept)")
        else
          local got = rescore(run, r, o.exe)
          if got.error then
            counts.failed = counts.failed + 1
            rows[#rows + 1] = {table = tbl.name, run = run.id, label = "(re-evaluation)", paper = "",
                               recorded = "", rescored = got.error, status = "FAILED"}
          else
            local used = {}
            local function find(label)
              for i, row in ipairs(got.rows) do
                if not used[i] and row.label == label then used[i] = true; return row end
              end
            end
            for _, row in ipairs(r.rows) do
              local new = find(row.label)
              local same = new ~= nil and M.agree(row.glimpse, new.glimpse)
              counts[same and "ok" or "mismatch"] = counts[same and "ok" or "mismatch"] + 1
              rows[#rows + 1] = {table = tbl.name, run = run.id, label = row.label, paper = row.paper,
                                 recorded = row.glimpse, rescored = new and new.glimpse or "(no such row)",
                                 status = same and "ok" or "MISMATCH"}
            end
            for i, row in ipairs(got.rows) do
              if not used[i] then
                counts.mismatch = counts.mismatch + 1
                rows[#rows + 1] = {table = tbl.name, run = run.id, label = row.label, paper = row.paper,
                                   recorded = "(not recorded)", rescored = row.glimpse, status = "MISMATCH"}
              end
            end
          end
        end
      end
    end
  end
  report.seconds = timer:elapsed()
  report.files, report.bytes = folder_size(o.models)
  report.over = report.bytes > o.limit_mb * 1e6
  report.ok = counts.mismatch == 0 and counts.failed == 0 and not report.over
  M.print(report, o)
  return report
end

local function cell(v)
  if v == nil then return "—" end
  return (tostring(v):gsub("|", "\\|"))
end

--- verify.print(report, {log=, models=, limit_mb=, mode=}): the table, the runs not shipped
--- and those without a done record, the summary lines
function M.print(report, o)
  local log = o.log or print
  if #report.rows > 0 then
    log("| run | row | paper | recorded | re-scored | ok |")
    log("|---|---|---|---|---|---|")
    for _, r in ipairs(report.rows) do
      log(string.format("| %s/%s | %s | %s | %s | %s | %s |", r.table, r.run, cell(r.label),
                        cell(r.paper), cell(r.recorded), cell(r.rescored), r.status))
    end
  end
  local c = report.counts
  for _, n in ipairs(report.not_shipped) do log("not shipped: " .. n) end
  if #report.not_done > 0 then
    log("no numbers recorded (nothing to verify): " .. table.concat(report.not_done, ", "))
  end
  log(string.format("verify (%s): %d rows agree, %d mismatch, %d re-evaluations failed, %d runs " ..
                    "not shipped, in %.0fs", o.mode, c.ok, c.mismatch, c.failed, c.not_shipped,
                    report.seconds))
  if c.ok + c.mismatch + c.failed == 0 then
    log(string.format("verify (%s): no kept checkpoint in %s: nothing was re-scored (%s)", o.mode,
                      o.models, o.mode == "full" and "a full `make reproduce` keeps them there"
                      or "`make reproduce` in this mode keeps them there"))
  end
  log(string.format("%s: %d files, %.2f MB (limit %g MB)%s", o.models, report.files,
                    report.bytes / 1e6, o.limit_mb, report.over and ": TOO LARGE" or ""))
end

return M
