-- tests/run.lua -- the one test runner: every LuaUnit suite under tests/, each in its own
-- process so a crash in one suite is a failure, not the end of the run.
--
--   glimpse tests/run.lua                 run every tests/test_*.lua
--   glimpse tests/run.lua test_tensor     run the suites whose file names contain a pattern
--   glimpse tests/run.lua --one FILE      (internal) run one suite in this process
--
-- A suite file returns a table of test functions named test_* (one suite), or a table of
-- such tables (several suites, keyed by name).  The last line printed is
-- "N passed, N failed"; the exit code is non-zero when anything failed.

-- LuaUnit reads the global arg when it is loaded: a suite run gets none of the runner's flags
local one_file
if arg[1] == "--one" then
  one_file = arg[2]
  arg = {[0] = arg[0], [-1] = arg[-1]}
end
local lu = require "luaunit"

local function run_one(file)
  local chunk = assert(loadfile(file))
  local ok, suites = pcall(chunk)
  if not ok then
    io.stderr:write(file .. ": " .. tostring(suites) .. "\n")
    print("RESULT 0 1 0")
    return 1
  end
  local name = file:match("([^/]+)%.lua$")
  local instances = {}
  local flat = true
  for _, v in pairs(suites) do
    if type(v) == "table" then flat = false end
  end
  if flat then
    instances[1] = {name, suites}
  else
    local names = {}
    for k in pairs(suites) do names[#names + 1] = k end
    table.sort(names)
    for _, k in ipairs(names) do instances[#instances + 1] = {k, suites[k]} end
  end
  local runner = lu.LuaUnit.new()
  runner:runSuiteByInstances(instances)
  local r = runner.result
  local failed = r.failureCount + r.errorCount
  local skipped = r.skippedCount or 0
  print(string.format("RESULT %d %d %d", r.runCount - failed, failed, skipped))
  local helpers = package.loaded["tests.helpers"]   -- remove the suite's temporary folders
  if helpers then helpers.cleanup() end
  return failed
end

if one_file then
  local failed = run_one(one_file)
  os.exit(failed == 0 and 0 or 1)
end

local function list_suites(patterns)
  local files = {}
  local p = io.popen("ls tests/test_*.lua 2>/dev/null")
  for f in p:lines() do
    local keep = #patterns == 0
    for _, pat in ipairs(patterns) do
      if f:find(pat, 1, true) then keep = true end
    end
    if keep then files[#files + 1] = f end
  end
  p:close()
  table.sort(files)
  return files
end

local exe = arg[-1] or "glimpse"
local patterns = {}
for i = 1, #arg do patterns[#patterns + 1] = arg[i] end
local files = list_suites(patterns)
local passed, failed, skipped = 0, 0, 0
local t0 = os.time()
for _, f in ipairs(files) do
  io.write(string.format("== %s\n", f))
  io.flush()
  local p = io.popen(string.format("%q tests/run.lua --one %q 2>&1", exe, f))
  local got
  for line in p:lines() do
    local a, b, c = line:match("^RESULT (%d+) (%d+) (%d+)$")
    if a then got = {tonumber(a), tonumber(b), tonumber(c)} else print(line) end
  end
  local _, how, code = p:close()
  if got then
    passed, failed, skipped = passed + got[1], failed + got[2], skipped + got[3]
    -- a clean report but a failing exit: a sanitizer (LeakSanitizer runs at exit) objected
    if got[2] == 0 and code ~= 0 then
      failed = failed + 1
      print(string.format("!! %s exited with %s %s after its tests passed (a sanitizer "
                          .. "report above?)", f, tostring(how), tostring(code)))
    end
  else
    failed = failed + 1
    print(string.format("!! %s died (%s %s) before reporting", f, tostring(how), tostring(code)))
  end
end
print(string.format("ran %d suites in %d s", #files, os.time() - t0))
if skipped > 0 then print(string.format("%d skipped", skipped)) end
print(string.format("%d passed, %d failed", passed, failed))   -- the last line, alone
os.exit((failed == 0 and passed > 0) and 0 or 1)
