--- glimpse.compare's scheduler (part of glimpse.compare; compare/init.lua publishes it): the
-- output folder, one file per job and per result (runs/<id>.config.json, runs/<id>.json),
-- the configurations still to run, the worker processes that run them (xargs -P in a
-- process group of their own that dies with this process; one thread each unless told) and
-- the results read back, each checked (compare/records.lua).
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local util = require "glimpse.util"
local measure = require "glimpse.lab.compare.measure"
local records = require "glimpse.lab.compare.records"

local W = {}

W.RUN_LOCAL = options.declare("compare.run_local", {
  {"jobs", "int", nil, range = {1}, help = "worker processes at a time (default: the cores)"},
  {"threads", "int", 1, range = {1}, help = "engine and BLAS threads of each worker"},
  {"time_limit", "number", nil, range = {0}, finite = true,
   help = "each configuration's most training seconds (a guard: a run it stops fails)"},
  {"on_done", "function", nil, help = "function(config, record) as each one finishes"},
  {"on_start", "function", nil, help = "function(pgid): the workers' process group"},
})

local function job_path(dir, c) return string.format("%s/runs/%s.config.json", dir, c.id) end
W.result_path = records.result_path

-- what dir holds for each configuration: {config, state, record, why}
local function states(configs, dir)
  local out = {}
  for _, c in ipairs(configs) do
    local state, r, why = records.inspect(dir, c)
    out[#out + 1] = {config = c, state = state, record = r, why = why}
  end
  return out
end
W.states = states

--- compare.pending(configs, dir) -> the configurations without a finished result in dir
--- (absent, failed, interrupted, or a malformed record), and notes: {id=, state=, why=} for
--- each malformed record and each record made with other settings (state "other": a
--- finished record this run must not overwrite)
function W.pending(configs, dir)
  local out, notes = {}, {}
  for _, s in ipairs(states(configs, dir)) do
    if s.state ~= "finished" then out[#out + 1] = s.config end
    if s.state == "malformed" or s.state == "other" then
      notes[#notes + 1] = {id = s.config.id, state = s.state, why = s.why,
                           path = W.result_path(dir, s.config)}
    end
  end
  return out, notes
end

--- compare.is_interrupt(err) -> whether err is the Ctrl-C of the glimpse executable
--- ("interrupted!", with or without a traceback) or a read that a signal cut short
local function is_interrupt(err)
  local first = tostring(err):match("^[^\n]*")
  return first:match("interrupted!$") ~= nil or first:find("Interrupted system call", 1, true) ~= nil
end
W.is_interrupt = is_interrupt

--- compare.work(job_file) -- the worker: runs the configuration in job_file (JSON, as
--- compare.grid made it, with `worker = {threads=, time_limit=}`; its task_files are loaded
--- first) and writes its record, with `config` and every field of compare.RECORD_FIELDS
--- (null where there is no value), to the result file beside it; a failure writes {error=,
--- config=} instead, a Ctrl-C {interrupted = true, steps=, config=} (never a finished
--- record: it runs again).
function W.work(job)
  local c = check.integers(util.read_json(job))
  local w = type(c.worker) == "table" and c.worker or {}
  c.worker = nil
  glimpse.set_num_threads(math.tointeger(w.threads) or 1)
  local out = job:gsub("%.config%.json$", ".json")
  os.remove(out)                   -- a worker killed on the way leaves no record, not an old one
  local ok, r = xpcall(measure.run_config, debug.traceback, c, {time_limit = w.time_limit})
  if not ok then
    if is_interrupt(r) then
      r = {interrupted = true, id = c.id, task = c.task, mechanism = c.mechanism, seed = c.seed}
    else
      r = {error = tostring(r), id = c.id, task = c.task, mechanism = c.mechanism, seed = c.seed}
    end
  end
  r.config = c
  -- a finished record has every field, null where a value does not exist
  util.write_json(out, (r.error or r.interrupted) and r or records.complete(r))
  if r.interrupted then print("compare: " .. c.id .. " interrupted") end
  if r.error then error(r.error, 0) end
end

local function executable()
  if arg and arg[-1] and util.exists(arg[-1]) and not arg[-1]:match("^%-") then
    local p = io.popen("readlink -f " .. util.shell_quote(arg[-1]))
    local path = p:read("l")
    p:close()
    if path and path ~= "" then return path end
  end
  local p = io.popen("readlink /proc/" .. tostring(util.pid()) .. "/exe")
  local path = p:read("l")
  p:close()
  if path and path ~= "" then return path end
  check.fail(3, "compare: cannot find the glimpse executable to start workers")
end

--- compare.cores() -> the number of processors (nproc), at least 1
function W.cores()
  local p = io.popen("nproc 2>/dev/null")
  local n = tonumber(p:read("l") or "")
  p:close()
  return math.max(1, math.tointeger(n) or 1)
end

-- the workers' process group: in a session of their own (setsid), so a Ctrl-C at the
-- terminal reaches this process alone, which passes it on (kill -INT to the group) and
-- waits for them to record their runs as interrupted; and a watchdog in another session
-- that kills the group when this process dies without saying "done" (kill -9: its end of
-- the watchdog's stdin closes)
local function watchdog(pgid)
  -- it ignores the signals a user sends a whole session: only compare's end ends it
  local script = string.format('trap "" INT HUP TERM QUIT; read line; [ "$line" = done ] || ' ..
                               'kill -KILL -%d 2>/dev/null', pgid)
  return io.popen("setsid sh -c " .. util.shell_quote(script), "w")
end

local function signal_group(pgid, sig)
  os.execute(string.format("kill -%s -%d 2>/dev/null", sig, pgid))
end

--- compare.run_local(configs, dir, {jobs=cores, threads=1, time_limit=, on_done=,
--- on_start=}) -> number of failed configurations, interrupted (true after a Ctrl-C).
--- Each configuration runs in its own worker process (`glimpse -e`, `threads` engine and
--- BLAS threads), `jobs` at a time (xargs -P); its log goes to runs/<id>.log.  on_done is
--- called as each one finishes, in finishing order, with its record ({error=} for a
--- failure).  The workers run in a process group of their own that dies with this process
--- (on_start(pgid) is told it): a Ctrl-C here interrupts them (each records its run as
--- interrupted; none starts after it) and waits for them; kill -9 of this process kills them.
function W.run_local(configs, dir, o)
  o = W.RUN_LOCAL:check(o, 2)
  if o.time_limit and o.time_limit <= 0 then
    check.fail(2, "compare.run_local: option 'time_limit' must be a positive number, got %s",
               check.value(o.time_limit))
  end
  local jobs = o.jobs or W.cores()
  if #configs == 0 then return 0, false end
  util.mkdir_p(dir .. "/runs")
  local by_job, list = {}, {}
  for _, c in ipairs(configs) do
    local jp = job_path(dir, c)
    local job = {}
    for k, v in pairs(c) do job[k] = v end
    job.worker = {threads = o.threads, time_limit = o.time_limit}
    util.write_json(jp, job)
    by_job[jp], list[#list + 1] = c, jp
  end
  local listfile = os.tmpname()                  -- this process's own: MPI ranks share dir
  util.write_lines(listfile, list)
  local code = 'require("glimpse.lab.compare").work(os.getenv("GLIMPSE_COMPARE_JOB"))'
  -- fd 3 keeps this process's pipe open until the worker itself has exited (its sh may
  -- die first on a Ctrl-C): the end of the pipe is the end of every worker
  local inner = string.format('GLIMPSE_COMPARE_JOB="$1" OPENBLAS_NUM_THREADS=%d %s -e %s ' ..
                              '3>&1 > "${1%%.config.json}.log" 2>&1; echo "$? $1"', o.threads,
                              util.shell_quote(executable()), util.shell_quote(code))
  local group_cmd = string.format("echo $$; exec xargs -P %d -n 1 sh -c %s _ < %s", jobs,
                                  util.shell_quote(inner), util.shell_quote(listfile))
  local p = io.popen("setsid sh -c " .. util.shell_quote(group_cmd))
  local pgid, dog, failed, interrupted = nil, nil, 0, false
  local function finish(line)
    local rc, jp = line:match("^(%d+) (.+)$")
    local c = jp and by_job[jp]
    if not c then return end
    local state, r, why = records.inspect(dir, c)
    if state == "finished" then
      -- r as read back: what the summary will read
    elseif state == "interrupted" then
      r = {interrupted = true, id = c.id, steps = r.steps}
    elseif state == "failed" then
      failed = failed + 1
      r = {error = why}
    else
      failed = failed + 1
      r = {error = state == "absent" and ("no result file (exit status " .. rc .. ")")
                   or ("a " .. state .. " result: " .. tostring(why))}
    end
    if o.on_done then o.on_done(c, r) end
  end
  local function read_all()
    if not pgid then
      local first, err = p:read("l")
      if not first then error(err or "compare: the workers did not start", 0) end
      pgid = math.tointeger(tonumber(first))
      if not pgid then error("compare: the workers did not start: " .. first, 0) end
      dog = watchdog(pgid)
      if interrupted then signal_group(pgid, "INT") end
      if o.on_start then o.on_start(pgid) end
    end
    while true do
      local line, err = p:read("l")
      if not line then
        if err then error(err, 0) end
        return
      end
      finish(line)
    end
  end
  while true do
    -- two levels: a Ctrl-C can raise twice (the cut-short read, then the hook at the next
    -- instruction), and the second lands as the inner pcall returns
    local ok, ok2, err = pcall(pcall, read_all)
    local e
    if not ok then e = ok2 elseif not ok2 then e = err end
    if e == nil then break end
    if is_interrupt(e) then
      if not interrupted and pgid then signal_group(pgid, "INT") end
      interrupted = true                          -- and read on until the workers are gone
    else
      if pgid then signal_group(pgid, "KILL") end
      if dog then dog:write("done\n"); dog:close() end
      p:close()
      os.remove(listfile)
      error(e, 0)
    end
  end
  if dog then dog:write("done\n"); dog:close() end
  p:close()
  os.remove(listfile)
  return failed, interrupted
end

--- compare.gather(configs, dir) -> records (finished, in grid order, each checked), failures
--- ({id=, mechanism=, task=, seed=, error=} for each configuration whose result is an
--- error), missing (the ids of the configurations with no finished result: not run yet,
--- interrupted, or a malformed record), notes ({id=, state=, why=, path=} for each malformed
--- or interrupted record and each one made with other settings)
function W.gather(configs, dir)
  local found, failures, missing, notes = {}, {}, {}, {}
  for _, s in ipairs(states(configs, dir)) do
    local c = s.config
    if s.state == "finished" then
      found[#found + 1] = s.record
    elseif s.state == "failed" then
      failures[#failures + 1] = {id = c.id, mechanism = c.mechanism, task = c.task,
                                 seed = c.seed, error = s.why}
    else
      missing[#missing + 1] = c.id
      if s.state ~= "absent" then
        notes[#notes + 1] = {id = c.id, state = s.state, why = s.why, path = W.result_path(dir, c)}
      end
    end
  end
  return found, failures, missing, notes
end

return W
