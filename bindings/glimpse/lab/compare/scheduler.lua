--- glimpse.compare's scheduler (part of glimpse.compare; compare/init.lua publishes it): the
-- output folder, one file per job and per result (runs/<id>.config.json, runs/<id>.json),
-- the configurations still to run, the worker processes that run them (xargs -P, one BLAS
-- thread each) and the results read back.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local util = require "glimpse.util"
local measure = require "glimpse.lab.compare.measure"

local W = {}

W.RUN_LOCAL = options.declare("compare.run_local", {
  {"jobs", "int", nil, range = {1}, help = "worker processes at a time (default: the cores)"},
  {"on_done", "function", nil, help = "function(config, record) as each one finishes"},
})

local function job_path(dir, c) return string.format("%s/runs/%s.config.json", dir, c.id) end
function W.result_path(dir, c) return string.format("%s/runs/%s.json", dir, c.id) end

local function same_config(a, b)
  return util.json_encode(a) == util.json_encode(b)
end

-- the finished result of c in dir, or nil (absent, failed, or made with other settings)
local function finished(dir, c)
  local p = W.result_path(dir, c)
  if not util.exists(p) then return nil end
  local ok, r = pcall(util.read_json, p)
  if not ok or type(r) ~= "table" or r.error or not r.config then return nil end
  if not same_config(r.config, c) then return nil end
  return r
end

--- compare.pending(configs, dir) -> the configurations without a finished result in dir
--- (a result made with other settings, or a failed one, counts as not finished)
function W.pending(configs, dir)
  local out = {}
  for _, c in ipairs(configs) do if not finished(dir, c) then out[#out + 1] = c end end
  return out
end

--- compare.work(job_file) -- the worker: runs the configuration in job_file (JSON, as
--- compare.grid made it) and writes its record, with `config`, to the result file beside it;
--- a failure writes {error=, config=} instead.  One BLAS thread.
function W.work(job)
  glimpse.set_num_threads(1)
  local c = util.read_json(job)
  local out = job:gsub("%.config%.json$", ".json")
  local ok, r = xpcall(measure.run_config, debug.traceback, c)
  if not ok then
    r = {error = tostring(r), id = c.id, task = c.task, mechanism = c.mechanism, seed = c.seed}
  end
  r.config = c
  util.write_json(out, r)
  if not ok then error(r.error, 0) end
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

--- compare.run_local(configs, dir, {jobs=cores, on_done=function(config, record)}) ->
--- number of failed configurations.  Each configuration runs in its own worker process
--- (`glimpse -e`, one BLAS thread), `jobs` at a time (xargs -P); its log goes to
--- runs/<id>.log.  on_done is called as each one finishes, in finishing order.
function W.run_local(configs, dir, o)
  o = W.RUN_LOCAL:check(o, 2)
  local jobs = o.jobs or W.cores()
  if #configs == 0 then return 0 end
  util.mkdir_p(dir .. "/runs")
  local by_job, list = {}, {}
  for _, c in ipairs(configs) do
    local jp = job_path(dir, c)
    util.write_json(jp, c)
    by_job[jp], list[#list + 1] = c, jp
  end
  local listfile = os.tmpname()                  -- this process's own: MPI ranks share dir
  util.write_lines(listfile, list)
  local code = 'require("glimpse.lab.compare").work(os.getenv("GLIMPSE_COMPARE_JOB"))'
  local inner = 'GLIMPSE_COMPARE_JOB="$1" OPENBLAS_NUM_THREADS=1 ' ..
                util.shell_quote(executable()) .. " -e " .. util.shell_quote(code) ..
                ' > "${1%.config.json}.log" 2>&1; echo "$? $1"'
  local cmd = string.format("xargs -P %d -n 1 sh -c %s _ < %s", jobs, util.shell_quote(inner),
                            util.shell_quote(listfile))
  local p = io.popen(cmd)
  local failed = 0
  for line in p:lines() do
    local rc, jp = line:match("^(%d+) (.+)$")
    local c = jp and by_job[jp]
    if c then
      local ok, r = pcall(util.read_json, W.result_path(dir, c))
      if not ok then r = {error = "no result file (exit status " .. rc .. ")"} end
      if r.error then failed = failed + 1 end
      if o.on_done then o.on_done(c, r) end
    end
  end
  p:close()
  os.remove(listfile)
  return failed
end

--- compare.gather(configs, dir) -> records (finished, in grid order), failures ({id=,
--- mechanism=, task=, seed=, error=} for each configuration whose result is an error),
--- missing (the ids of the configurations with no result yet)
function W.gather(configs, dir)
  local records, failures, missing = {}, {}, {}
  for _, c in ipairs(configs) do
    local r = finished(dir, c)
    if r then
      records[#records + 1] = r
    else
      local ok, e = pcall(util.read_json, W.result_path(dir, c))
      if ok and type(e) == "table" and e.error then
        failures[#failures + 1] = {id = c.id, mechanism = c.mechanism, task = c.task,
                                   seed = c.seed, error = e.error}
      else
        missing[#missing + 1] = c.id
      end
    end
  end
  return records, failures, missing
end

return W
