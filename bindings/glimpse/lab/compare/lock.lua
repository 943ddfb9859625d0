--- glimpse.compare's lock on an output folder (part of glimpse.compare): one compare at a time
-- writes a folder.  The lock is the directory OUT/compare.lock (made atomically by mkdir)
-- holding owner.json: the owner's pid, its start time (so a reused pid is not taken for
-- the owner), its host and the process group of its workers.  A second compare on the
-- folder is refused while the owner lives; the lock of a dead owner (kill -9, a crash) is
-- taken over, after its leftover workers are stopped.
local check = require "glimpse.check"
local util = require "glimpse.util"

local L = {}

local Lock = {}
Lock.__index = Lock

local function q(s) return util.shell_quote(s) end

local function sleep(seconds) os.execute("sleep " .. seconds) end

--- lock.proc(pid) -> {state=, start=} from /proc/<pid>/stat, or nil when there is no such
--- process
function L.proc(pid)
  pid = math.tointeger(pid)
  if not pid or pid < 1 then return nil end
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return nil end
  local s = f:read("l")
  f:close()
  local rest = s and s:match("^.*%)%s+(.*)$")    -- after the command name, which may hold ')'
  if not rest then return nil end
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  return {state = fields[1], start = fields[20]}   -- fields 3 and 22 of stat
end

--- lock.alive(pid, start) -> whether process pid runs (not a zombie) and, when start is
--- given, is the process that started then
function L.alive(pid, start)
  local p = L.proc(pid)
  if not p or p.state == "Z" or p.state == "X" then return false end
  return start == nil or tostring(start) == p.start
end

local function hostname()
  local f = io.open("/proc/sys/kernel/hostname")
  local h = f and f:read("l")
  if f then f:close() end
  return h or "?"
end

--- lock.group_alive(pgid) -> whether process group pgid still has compare workers in it
--- (xargs, the shells and the `glimpse -e` workers of glimpse.compare)
function L.group_alive(pgid)
  pgid = math.tointeger(pgid)
  if not pgid or pgid < 2 then return false end
  local p = io.popen("ps -eo pgid=,args= 2>/dev/null")
  local found = false
  for line in p:lines() do
    local g, args = line:match("^%s*(%d+)%s+(.*)$")
    if math.tointeger(tonumber(g)) == pgid and (args:find("glimpse.lab.compare", 1, true)
                                                or args:find("GLIMPSE_COMPARE_JOB", 1, true)) then
      found = true
    end
  end
  p:close()
  return found
end

--- lock.kill_group(pgid, signal): sends signal (default KILL) to process group pgid when it
--- holds compare workers
function L.kill_group(pgid, signal)
  if L.group_alive(pgid) then
    os.execute(string.format("kill -%s -%d 2>/dev/null", signal or "KILL", math.tointeger(pgid)))
  end
end

local function read_owner(path)
  local ok, o = pcall(util.read_json, path .. "/owner.json")
  if ok and type(o) == "table" and math.tointeger(o.pid) then return o end
  return nil
end

--- lock.acquire(dir, say) -> lock: takes DIR/compare.lock, or an error naming the compare
--- that holds it.  A lock whose owner is dead is taken over (its workers, if any are left,
--- are stopped first); say(line) reports that.
function L.acquire(dir, say)
  local path = dir .. "/compare.lock"
  local me = {pid = util.pid(), start = (L.proc(util.pid()) or {}).start, host = hostname(),
              since = os.date("!%Y-%m-%dT%H:%M:%SZ")}
  for attempt = 1, 20 do
    if os.execute("mkdir " .. q(path) .. " 2>/dev/null") then
      util.write_json(path .. "/owner.json", me)
      return setmetatable({path = path, me = me}, Lock)
    end
    local owner = read_owner(path)
    if not owner then
      -- made a moment ago by a compare that has not written its owner yet, or left empty by
      -- one killed in between: wait a little before taking it
      if attempt < 5 then
        sleep(0.2)
      else
        os.execute("rm -rf " .. q(path))
      end
    elseif owner.host ~= me.host then
      check.fail(2, "compare: %s is in use by a compare on host %s (pid %d, since %s); run " ..
                 "one compare per output folder (or remove %s if that one is gone)", dir,
                 tostring(owner.host), owner.pid, tostring(owner.since), path)
    elseif L.alive(owner.pid, owner.start) then
      check.fail(2, "compare: %s is in use by another compare (pid %d, since %s); wait for " ..
                 "it to finish or stop it, or choose another --out", dir, owner.pid,
                 tostring(owner.since))
    else
      -- the owner died (kill -9, a crash): its workers must not run on beside new ones
      if owner.workers then L.kill_group(owner.workers) end
      util.write_json(path .. "/owner.json", me)
      sleep(0.1)
      local now = read_owner(path)
      if not (now and now.pid == me.pid and tostring(now.start) == tostring(me.start)) then
        check.fail(2, "compare: %s was just taken by another compare (pid %s)", dir,
                   now and tostring(now.pid) or "?")
      end
      if say then
        say(string.format("compare: took over the lock of compare pid %d (no longer running)",
                          owner.pid))
      end
      return setmetatable({path = path, me = me}, Lock)
    end
  end
  check.fail(2, "compare: cannot take the lock %s", path)
end

--- lock:set_workers(pgid): records the process group of this compare's workers (stopped by
--- whoever takes the lock over if this process dies)
function Lock:set_workers(pgid)
  self.me.workers = pgid
  util.write_json(self.path .. "/owner.json", self.me)
end

--- lock:release(): removes the lock when it is still this process's
function Lock:release()
  if self.released then return end
  self.released = true
  local owner = read_owner(self.path)
  if owner and owner.pid == self.me.pid and tostring(owner.start) == tostring(self.me.start) then
    os.remove(self.path .. "/owner.json")
    os.remove(self.path)
  end
end

return L
